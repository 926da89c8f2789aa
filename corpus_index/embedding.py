"""Canonical inputs for a collection, and embedding them through the content-addressed cache."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from corpus_index.cache import EmbeddingCache
from corpus_index.embedders import Embedder
from corpus_index.errors import RetryableError
from corpus_index.export_reader import cosine
from corpus_index.hashing import canonical_json
from corpus_index.inputs import input_units
from corpus_index.kinds import unit_granularity
from corpus_index.ordered import DocCursor, whole_documents
from corpus_index.records import BLOCK_SCHEMA, INPUT_SCHEMA, embedding_schema
from corpus_index.refusals import Refusals, embed_splitting

if TYPE_CHECKING:
    from corpus_index.config import CorpusConfig

INPUT_RULE_KEY = b"corpus_index.input_rule"


def input_rule(sections: Mapping[str, str], input_formats: Iterable[str]) -> bytes:
    """What, besides a block itself, decides its inputs: recorded on each ``embedding_inputs``
    partition, so rows built under another rule are never reused."""
    return canonical_json(
        {"sections": dict(sorted(sections.items())), "formats": sorted(set(input_formats))}
    ).encode()


def config_input_rule(config: CorpusConfig) -> bytes:
    """The :func:`input_rule` of ``config``: its section registry and the input format of every
    profile (what the ``embedding_inputs`` step builds every collection's inputs under)."""
    return input_rule(config.sections, {p.input_format for p in config.profiles.values()})


def build_inputs(
    blocks: pa.Table,
    *,
    sections: Mapping[str, str],
    input_formats: Iterable[str],
    previous: pa.Table | None = None,
) -> pa.Table:
    """:func:`build_inputs_into` over tables in memory, the result collected into one table."""
    parts: list[pa.Table] = []
    rule = build_inputs_into(
        parts.append,
        blocks.to_batches(),
        sections=sections,
        input_formats=input_formats,
        previous=previous.to_batches() if previous is not None else None,
        previous_rule=(previous.schema.metadata or {}).get(INPUT_RULE_KEY)
        if previous is not None
        else None,
    )
    table = pa.concat_tables(parts) if parts else INPUT_SCHEMA.empty_table()
    return table.replace_schema_metadata({INPUT_RULE_KEY: rule})


def build_inputs_into(
    sink: Callable[[pa.Table], None],
    blocks: Iterable[pa.RecordBatch],
    *,
    sections: Mapping[str, str],
    input_formats: Iterable[str],
    previous: Iterable[pa.RecordBatch] | None = None,
    previous_rule: bytes | None = None,
    what: str = "embedding_inputs",
) -> bytes:
    """Embedder inputs for every embeddable block, under each input format in use; returns
    the rule they were built under (see :func:`input_rule`).

    Which blocks are embeddable, and how each is cut, their kind decides from the section
    registry (``sections``: name -> granularity; see ``CollectionKind.granularity``).
    Paragraph granularity yields one input per paragraph, addressed ``<chunk_ref>#p<n>``.

    ``blocks`` is a stream in ``(doc_id, block_key)`` order; inputs reach ``sink`` in block
    order, INPUT_BATCH blocks' worth (whole documents) at a time. ``previous`` is the
    partition as last written, in the same order: when it was built under the same rule
    (``previous_rule``), the rows of every block it already covers are taken from it instead of
    being rebuilt (a chunk_ref names the block's source version, so an unchanged chunk_ref is
    an unchanged block). It is read forward beside ``blocks``, a range of documents at a time.
    The rows are the same either way.
    """
    formats = sorted(set(input_formats))
    rule = input_rule(sections, formats)
    prior = None
    if previous is not None and previous_rule == rule:
        prior = DocCursor(previous, INPUT_SCHEMA, what=f"{what} (previous)")
    for chunk in whole_documents(blocks, BLOCK_SCHEMA, INPUT_BATCH, what=f"{what} (blocks)"):
        reused = None
        if prior is not None:
            reused = prior.through(chunk["doc_id"][-1].as_py())
        table = _inputs_of(chunk, reused, sections=sections, formats=formats)
        if table.num_rows:
            sink(table)
    return rule


def _inputs_of(
    blocks: pa.Table,
    previous: pa.Table | None,
    *,
    sections: Mapping[str, str],
    formats: list[str],
) -> pa.Table:
    """Input rows of ``blocks`` in block order, taken from ``previous`` where it has them."""
    reused: pa.Table | None = None
    todo = blocks.filter(embeddable(blocks, sections))
    if previous is not None and previous.num_rows:
        bases = _base_refs(previous["chunk_ref"])
        lent = pc.is_in(bases, value_set=todo["chunk_ref"])
        todo = todo.filter(pc.invert(pc.is_in(todo["chunk_ref"], value_set=bases)))
        if not todo.num_rows:  # nothing new in this range: its previous rows, in block order
            kept = previous if pc.all(lent).as_py() else previous.filter(lent)
            return kept.cast(INPUT_SCHEMA)
        reused = previous.filter(lent).cast(INPUT_SCHEMA)
    built = _input_rows_of(todo.to_pylist(), sections=sections, formats=formats)
    table = built if reused is None else pa.concat_tables([reused, built])
    if reused is not None and reused.num_rows and built.num_rows:
        # back into block order (the order a rebuild from scratch gives), formats in the order
        # given, units of a block in the order built
        order = pa.table(
            {
                "block": pc.index_in(_base_refs(table["chunk_ref"]), blocks["chunk_ref"]),
                "format": pc.fill_null(
                    pc.index_in(table["input_format"], pa.array(formats, pa.string())),
                    len(formats),
                ),
                "n": pa.array(np.arange(table.num_rows)),
            }
        )
        table = table.take(
            pc.sort_indices(
                order,
                sort_keys=[("block", "ascending"), ("format", "ascending"), ("n", "ascending")],
            )
        )
    return table


def embeddable(blocks: pa.Table, sections: Mapping[str, str]) -> pa.ChunkedArray:
    """Which blocks (a table with ``kind`` and ``section``) their kind embeds: decided once per
    distinct (kind, section), then matched by column."""
    keys = pc.binary_join_element_wise(blocks["kind"], blocks["section"], "\x00")
    kept = []
    for key in pc.unique(keys).to_pylist():
        kind, section = key.split("\x00", 1)
        if unit_granularity(kind, section, sections) is not None:
            kept.append(key)
    return pc.is_in(keys, value_set=pa.array(kept, pa.string()))


def _base_refs(refs: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """The block's chunk_ref of each input's (an input of a paragraph adds ``#p<n>``)."""
    return pc.replace_substring_regex(refs, pattern="#.*$", replacement="")


INPUT_BATCH = 4096  # blocks (whole documents) turned into input rows and written together


def _input_rows_of(
    blocks: list[dict[str, object]], *, sections: Mapping[str, str], formats: list[str]
) -> pa.Table:
    rows: list[dict[str, object]] = []
    for block in blocks:
        section = str(block["section"])
        source_type = str(block["source_type"])
        granularity = unit_granularity(str(block["kind"]), section, sections)
        if granularity is None:
            continue
        content = json.loads(str(block["content"]))
        document = json.loads(str(block.get("metadata") or "{}"))
        for fmt in formats:
            for unit in input_units(
                fmt,
                section=section,
                content=content,
                source_type=source_type,
                granularity=granularity,
                document=document,
            ):
                rows.append(
                    {
                        "chunk_ref": f"{block['chunk_ref']}{unit.suffix}",
                        "source_id": block["source_id"],
                        "doc_id": block["doc_id"],
                        "section": section,
                        "block_key": f"{block['block_key']}{unit.suffix}",
                        "content_hash": block["content_hash"],
                        "input_format": fmt,
                        "input_hash": unit.input_hash,
                        "text": unit.text,
                    }
                )
    return pa.Table.from_pylist(rows, schema=INPUT_SCHEMA)


@dataclass(slots=True)
class EmbedResult:
    """Vectors for every distinct input hash of a partition, with cache accounting."""

    hashes: list[str]
    vectors: npt.NDArray[np.float32]
    embedded: int
    cache_hits: int
    tokens: int = 0
    cost_usd: float = 0.0
    fresh_hashes: list[str] = field(default_factory=list)
    # how many of the vectors each (backend_spec, revision) produced: the embedder as it
    # reported itself after each call for fresh vectors, the cache table's identity for hits
    producers: dict[tuple[str, str], int] = field(default_factory=dict)
    # input hash -> why the embedder's server refused it (not among ``hashes``)
    refused: dict[str, str] = field(default_factory=dict)
    # how many vectors came at each width, before they were put into ``vectors`` (whose width
    # is the one they share, or the embedder's when they came at several)
    widths: dict[int, int] = field(default_factory=dict)

    def to_table(self, dim: int, *, identity: bytes | None = None) -> pa.Table:
        """The ``embeddings`` partition; ``identity`` (see :func:`vectors_identity`) tags it."""
        flat = pa.array(np.ascontiguousarray(self.vectors, dtype=np.float32).ravel(), pa.float32())
        table = pa.table(
            {
                "input_hash": pa.array(self.hashes, pa.string()),
                "vector": pa.FixedSizeListArray.from_arrays(flat, dim),
            },
            schema=embedding_schema(dim),
        )
        return table.replace_schema_metadata({VECTORS_KEY: identity}) if identity else table

    def fresh(self) -> EmbedResult:
        """The vectors the embedder gave (not the cache hits), as a result of their own; its
        producers are all of this result's."""
        fresh = set(self.fresh_hashes)
        rows = [i for i, h in enumerate(self.hashes) if h in fresh]
        return EmbedResult(
            hashes=[self.hashes[i] for i in rows],
            vectors=self.vectors[rows],
            embedded=len(rows),
            cache_hits=0,
            fresh_hashes=[self.hashes[i] for i in rows],
            producers=dict(self.producers),
            widths=dict(self.widths),
        )


VECTORS_KEY = b"corpus_index.vectors"


def vectors_identity(backend_spec: str, revision: str, dim: int) -> bytes:
    """Which embedder produced an ``embeddings`` partition: only a partition with the current
    profile's identity lends its vectors to the next run."""
    return canonical_json([backend_spec, revision, dim]).encode()


def identity_producer(identity: bytes) -> tuple[str, str]:
    """The ``(backend_spec, revision)`` a :func:`vectors_identity` names."""
    backend_spec, revision, _dim = json.loads(identity)
    return str(backend_spec), str(revision)


def reuse_split(
    previous: pa.Table | None, identity: bytes, hashes: pa.Array
) -> tuple[pa.Table | None, pa.Array]:
    """Split the wanted ``hashes`` into the rows a previous ``embeddings`` partition written by
    the same embedder already holds, and the hashes it does not.

    Returns ``(reused rows, hashes still to embed)``; no rows are reused from a partition
    written by another embedder (or an untagged one).
    """
    if (
        previous is None
        or previous.num_rows == 0
        or (previous.schema.metadata or {}).get(VECTORS_KEY) != identity
    ):
        return None, hashes
    reused = previous.filter(pc.is_in(previous["input_hash"], hashes))
    return reused, hashes.filter(pc.invert(pc.is_in(hashes, reused["input_hash"])))


def vector_matrix(table: pa.Table | None, dim: int) -> npt.NDArray[np.float32]:
    """The ``vector`` column of an ``embeddings`` table as an ``(n, dim)`` float32 matrix."""
    if table is None or table.num_rows == 0:
        return np.zeros((0, dim), dtype=np.float32)
    flat = table["vector"].combine_chunks()
    matrix: npt.NDArray[np.float32] = flat.values.to_numpy(zero_copy_only=False)
    return matrix.reshape(len(flat), dim)


def embed_with_cache(
    texts_by_hash: Mapping[str, str],
    embedder: Embedder,
    cache: EmbeddingCache | None,
    *,
    batch_size: int = 256,
    progress: Callable[[int, int], None] | None = None,
    count_tokens: Callable[[str], int] | None = None,
    refusals: Refusals | None = None,
    interrupted: Callable[[EmbedResult], None] | None = None,
) -> EmbedResult:
    """Vectors for every input hash: cached ones are read, only misses reach the embedder.

    With ``refusals``, a batch the embedder's server refuses for what it holds is split to
    find the refused inputs (see ``corpus_index.refusals``): they get no vector and are
    named in ``refused``, the others are embedded. Without, the refusal is raised.

    New vectors are NOT written to the cache here: the caller stores them after the blocking
    checks passed, so a broken embedder never poisons the cache. Tokens are what the embedder
    reported (an API's usage); an embedder that reports none has its new inputs counted with
    ``count_tokens``, if given. ``progress(done, total)`` counts over every input hash, the
    cache hits done once looked up, so the last report is ``(total, total)``.

    When a transient failure (``RetryableError``: the server's 5xx, timeouts or dropped
    connections outlasting the embedder's retries) cuts the calls short, ``interrupted`` is
    given the vectors the earlier calls embedded (all fresh, none checked yet) before the error
    is raised, so that the caller may check and keep them: a backfill run again then does not
    pay for them twice.
    """
    hashes = sorted(texts_by_hash)
    found: dict[str, npt.NDArray[np.float32]] = {}
    if cache is not None and hashes:
        found.update(cache.lookup(hashes))
    # longest texts first, as sentence-transformers orders one big call: each batch then holds
    # texts of similar length and pads little (in hash order, every batch pads to its longest)
    misses = sorted(
        (h for h in hashes if h not in found), key=lambda h: (-len(texts_by_hash[h]), h)
    )
    tokens_before, cost_before = embedder.stats.tokens, embedder.stats.cost_usd
    fresh: dict[str, npt.NDArray[np.float32]] = {}
    producers: dict[tuple[str, str], int] = {}
    made: dict[tuple[str, str], int] = {}  # producers of the fresh vectors
    if found and cache is not None:
        producers[(cache.backend_spec, cache.revision)] = len(found)
        if progress is not None:
            progress(len(found), len(hashes))
    refused: dict[str, str] = {}
    for start in range(0, len(misses), batch_size):
        chunk = misses[start : start + batch_size]
        texts = [texts_by_hash[h] for h in chunk]
        try:
            split = embed_splitting(embedder, texts, refusals)
        except RetryableError:
            if interrupted is not None and fresh:
                interrupted(_embedded_so_far(fresh, made))
            raise
        # read after the call: a backend learns what answered (weights loaded, model served)
        # only then, and a swap mid-run must show in the record
        producer = (embedder.backend_spec, embedder.revision)
        if split.vectors:
            made[producer] = made.get(producer, 0) + len(split.vectors)
        for i, vector in split.vectors.items():
            fresh[chunk[i]] = vector
        for i, why in split.refused.items():
            refused[chunk[i]] = why
        if progress is not None:
            progress(len(found) + min(start + batch_size, len(misses)), len(hashes))
    for producer, n in made.items():
        producers[producer] = producers.get(producer, 0) + n
    if refused:
        hashes = [h for h in hashes if h not in refused]
        misses = [h for h in misses if h not in refused]
    widths: dict[int, int] = {}
    for v in [*found.values(), *fresh.values()]:
        widths[v.shape[0]] = widths.get(v.shape[0], 0) + 1
    dim = next(iter(widths)) if len(widths) == 1 else embedder.dim
    matrix = np.zeros((len(hashes), dim), dtype=np.float32)
    for i, h in enumerate(hashes):
        vec = found.get(h)
        if vec is None:
            vec = fresh[h]
        if vec.shape[0] != dim:  # mixed dimensions: keep the partition's shape, flag as non-finite
            matrix[i] = np.nan
        else:
            matrix[i] = vec
    return EmbedResult(
        hashes=hashes,
        vectors=matrix,
        embedded=len(misses),
        cache_hits=len(hashes) - len(misses),
        tokens=embedder.stats.tokens - tokens_before
        or (sum(count_tokens(texts_by_hash[h]) for h in misses) if count_tokens else 0),
        cost_usd=embedder.stats.cost_usd - cost_before,
        fresh_hashes=misses,
        producers=producers,
        widths=widths,
        refused=refused,
    )


def _embedded_so_far(
    fresh: Mapping[str, npt.NDArray[np.float32]], producers: dict[tuple[str, str], int]
) -> EmbedResult:
    """The vectors embedded before a failure, as a result of their own (vectors of several
    widths, which a server changing models would give, stand as NaN rows: no check passes)."""
    hashes = list(fresh)
    widths = {v.shape[0] for v in fresh.values()}
    if len(widths) == 1:
        vectors = np.stack([fresh[h] for h in hashes]).astype(np.float32, copy=False)
    else:
        vectors = np.full((len(hashes), max(widths)), np.nan, np.float32)
    return EmbedResult(
        hashes=hashes,
        vectors=vectors,
        embedded=len(hashes),
        cache_hits=0,
        fresh_hashes=hashes,
        producers=dict(producers),
        widths={w: sum(v.shape[0] == w for v in fresh.values()) for w in widths},
    )


class EmbeddedAgain(NamedTuple):
    """What :func:`embed_again` returns: each vector's cosine with its input embedded again,
    and what embedding them again cost."""

    cosines: list[float]
    tokens: int
    cost_usd: float


def spread(n: int, at_most: int) -> list[int]:
    """Up to ``at_most`` of the positions ``0..n-1``, evenly spread over them (the first and the
    last among them), in order: the same ones for the same ``n``."""
    return sorted({int(round(k)) for k in np.linspace(0, n - 1, min(at_most, n))})


def embed_again(
    embedder: Embedder, texts: Sequence[str], vectors: Sequence[npt.NDArray[np.float32]]
) -> EmbeddedAgain:
    """``texts`` embedded again, and the cosine of each with the vector given for it: how a
    vector that was not embedded here (a cache hit, a sidecar's) is shown to be the
    embedder's own (see ``gates.REPRODUCED``). An answer of another shape is like none (0).

    Raises:
        EmbedderError: as ``embedder.embed`` (a dimension mismatch, a refused request, ...).
    """
    if not texts:
        return EmbeddedAgain([], 0, 0.0)
    tokens, cost = embedder.stats.tokens, embedder.stats.cost_usd
    again = np.asarray(embedder.embed(list(texts)), np.float32)
    spent = (embedder.stats.tokens - tokens, embedder.stats.cost_usd - cost)
    if again.ndim != 2 or len(again) != len(texts):  # an answer of another shape: none alike
        return EmbeddedAgain([0.0] * len(texts), *spent)
    cosines = [
        cosine(answer, given) if answer.shape == given.shape else 0.0
        for answer, given in zip(again, vectors, strict=True)
    ]
    return EmbeddedAgain(cosines, *spent)
