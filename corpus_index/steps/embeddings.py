"""The ``embeddings`` step: vectors for a partition's new input hashes, the rest lent or cached.

Vectors are embedded, checked and written EMBED_WINDOW at a time. The new partition replaces
the old one only when every gate passed; otherwise the last good partition stays as it was.
Inputs the embedder's server refuses get no vector: they are recorded with their documents in
``embedding_refusals`` (see ``corpus_index.refusals``) and remembered per model (see
``corpus_index.refusal_memo``), so the next run holds them back without asking again, unless
it is asked to retry them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from corpus_index import gates, memory
from corpus_index.embedders import Embedder
from corpus_index.embedding import (
    VECTORS_KEY,
    EmbedResult,
    embed_again,
    embed_with_cache,
    identity_producer,
    reuse_split,
    spread,
    vector_matrix,
    vectors_identity,
)
from corpus_index.errors import DimensionMismatchError, NonFiniteVectorError, RetryableError
from corpus_index.group_records import generation_formats
from corpus_index.home import Home
from corpus_index.kinds import kind_of
from corpus_index.records import INPUT_SCHEMA, REFUSAL_SCHEMA, embedding_schema
from corpus_index.refusals import REFUSALS, Refusals, refusal_rows, refusals_allowed
from corpus_index.registry import Generation
from corpus_index.sidecar_import import sidecar_vectors
from corpus_index.steps.checks import record_partition_checks
from corpus_index.tokens import token_counter
from corpus_index.warehouse import KeyedReader, unpack_vectors

# embeds, checks and writes this many vectors at a time
EMBED_WINDOW = 8192
# cache hits embedded again per run, spread over the first window that has any
CACHE_HITS_AGAIN = 4

# what the step reads of embedding_inputs: the hashes of one format
INPUT_HASH_SCHEMA = pa.schema(
    [INPUT_SCHEMA.field("input_hash"), INPUT_SCHEMA.field("input_format")]
)

Producers = dict[tuple[str, str], int]


@dataclass(slots=True)
class EmbeddingsOutcome:
    """What the ``embeddings`` step did for one profile × collection."""

    covered: bool
    inputs: int = 0
    embedded: int = 0
    cache_hits: int = 0
    from_sidecars: int = 0  # vectors taken from the documents' sidecars
    # sidecar path -> why it lent nothing: not readable, not conformant, or vectors the
    # embedder does not give again (one naming another embedder is not among them)
    sidecars_refused: dict[str, str] = field(default_factory=dict)
    tokens: int = 0
    cost_usd: float = 0.0
    dim: int = 0
    backend_spec: str = ""
    gates: list[gates.Gate] = field(default_factory=list)
    # input hash -> why the embedder's server refused it; those inputs have no vector
    refused: dict[str, str] = field(default_factory=dict)
    # the record of them, one row per refused input of a document (REFUSAL_SCHEMA's columns)
    refusals: list[dict[str, Any]] = field(default_factory=list)
    # requests made to find them (splitting the batches that held them)
    refusal_requests: int = 0

    @property
    def refused_documents(self) -> int:
        return len({r["source_id"] for r in self.refusals})

    @property
    def passed(self) -> bool:
        return all(g.passed for g in self.gates)


def run(
    home: Home,
    profile: str,
    collection: str,
    *,
    progress: Callable[[int, int], None] | None = None,
    run_id: str | None = None,
    retry_refused: bool = False,
) -> EmbeddingsOutcome:
    """Embed the partition's new input hashes; the rest come from the previous partition
    or the cache.

    An input the model's server refused before (in any run of the home) is held back as
    refused with its first answer, without a request, unless ``retry_refused``: then it is
    sent again, and forgotten if the server takes it.

    New vectors reach the cache only from a window whose vectors passed the per-vector checks
    and were produced by the generation's embedder, so a broken or swapped embedder never
    poisons it. The gates' outcomes are recorded on the profile's live generation, whose
    promotion requires them.
    """
    if not home.config.profile_covers(profile, collection):
        return EmbeddingsOutcome(covered=False)
    p = home.profile(profile)
    spec = home.spec(profile)
    embedder = home.embedder(profile)
    count_tokens, _ = token_counter(p.embedder)  # as `corpus plan-migration` counts
    # only the hashes (the rest of the inputs' keys is not needed to embed), each once, in
    # the inputs' order (documents in doc_id order), as they are embedded: a window's texts,
    # and later a batch of index rows' vectors, sit in a row group or two of their files
    # (see Warehouse.keyed)
    hashes = pc.unique(
        home.read(
            "embedding_inputs",
            (collection,),
            INPUT_HASH_SCHEMA,
            where=pc.field("input_format").isin(generation_formats(p.input_format)),
            columns=INPUT_HASH_SCHEMA.names,
        )["input_hash"]
    )
    cache = home.embedding_cache(spec)
    cache.claim()  # an old table its generations decided is its: recorded by the writer
    generation = home.registry.open_generation(spec, run_id=run_id)
    expected = (generation.spec.backend_spec, generation.spec.model_revision)
    identity = vectors_identity(spec.backend_spec, spec.model_revision, spec.dim)
    # the partition as last written lends the vectors it holds (same embedder only); only
    # the hashes it lacks are looked up in the cache, and only the misses are embedded
    # (its hashes decide; its vectors are streamed into the new partition below)
    key = ("embeddings", (profile, collection))
    previous = home.warehouse.keyed(*key, "input_hash")
    reused, todo = reuse_split(
        # with each hash's row in the file: the rows lent are read by that, below
        pa.table(
            {"input_hash": previous.keys, "row": np.arange(len(previous.keys))}
        ).replace_schema_metadata(previous.metadata)
        if previous is not None
        else None,
        identity,
        hashes,
    )
    # a document's sidecar (carried beside its file, or given to ``CorpusIndex.add``) lends
    # the vectors it holds for current blocks from this very embedder (a few of each compared
    # with the model's own to show it); the rest is embedded
    carried = None
    lent_by_sidecars = None
    if len(todo) and kind_of(home.collection(collection)).sidecars:
        lent_by_sidecars = sidecar_vectors(
            home, spec, profile, collection, todo, embedder=embedder, cache=cache
        )
        carried = lent_by_sidecars.result
        if carried.hashes:
            todo = pc.filter(todo, pc.invert(pc.is_in(todo, pa.array(carried.hashes))))
    # the inputs this model's server refused before: held back unasked, with its answer then
    memo = home.refusal_memo(spec)
    known = memo.lookup(todo.to_pylist())  # {} where none was ever refused (no table)
    # one given a vector since (a retry under another profile of the model) is not held
    cached = cache.lookup(list(known)) if known else {}
    held = {} if retry_refused else {h: e for h, e in known.items() if h not in cached}
    if held:
        todo = pc.filter(todo, pc.invert(pc.is_in(todo, pa.array(list(held), pa.string()))))
    n_reused = reused.num_rows if reused is not None else 0
    # the previous partition is kept as it is when it lends every vector written: nothing was
    # embedded, found in the cache or lent by a sidecar (the inputs to embed may all have been
    # refused again)
    whole_previous = previous is not None and n_reused == len(previous.keys)
    new_vectors = bool(carried is not None and carried.hashes)
    refusals = Refusals(refusals_allowed(len(todo)))
    outcome = EmbeddingsOutcome(
        covered=True,
        inputs=len(hashes),
        cache_hits=n_reused,
        dim=spec.dim,
        backend_spec=embedder.backend_spec,
        refused=dict(held),
    )
    if lent_by_sidecars is not None:
        outcome.tokens += lent_by_sidecars.tokens
        outcome.cost_usd += lent_by_sidecars.cost_usd
        outcome.sidecars_refused = lent_by_sidecars.refused
    # checked and written EMBED_WINDOW vectors at a time; the new partition replaces the old
    # only once every window passed, and a window's new vectors reach the cache only after
    # they passed the per-vector checks (dimension, finiteness, norm) and the producer check
    per_vector: dict[str, list[gates.Gate]] = {"dim": [], "finite": [], "norm": []}
    producers: Producers = {}  # every vector's producer, as recorded for its window
    written: list[pa.Array] = []  # the hashes given vectors, as Arrow (not Python strings)
    hits_again: list[float] | None = None  # cosines of the cache hits embedded again

    def check(
        vectors: Any,
        window_hashes: pa.Array,
        window_producers: Producers,
        widths: dict[int, int] | None = None,
    ) -> bool:
        per_vector["dim"].append(gates.vectors_have_profile_dim(vectors, spec.dim, widths=widths))
        per_vector["finite"].append(gates.vectors_are_finite(vectors))
        per_vector["norm"].append(
            gates.vector_norms_match_profile(vectors, normalized=spec.normalized)
        )
        written.append(window_hashes)
        _count(producers, window_producers)
        return all(g[-1].passed for g in per_vector.values()) and set(window_producers) <= {
            expected
        }

    schema = embedding_schema(spec.dim).with_metadata({VECTORS_KEY: identity})
    with home.warehouse.writer(*key, schema) as out, previous or contextlib.nullcontext():
        ok = True
        # the previous partition's rows that are lent, read from the same open file by
        # their row numbers (a filter per batch would rebuild the set of wanted hashes
        # once per batch); their producer is the one the partition records. They are
        # checked again like new ones: the partition passed its checks when it was written,
        # but a file changed since (a bad copy, a restore, a hand edit) would otherwise be
        # lent on unseen, and the checks are a pass of numpy over vectors read anyway
        lent: Iterable[pa.Table] = ()
        lender = expected
        if previous is not None and reused is not None and n_reused:
            lender = identity_producer(previous.metadata[VECTORS_KEY])
            mask = np.zeros(len(previous.keys), dtype=bool)
            mask[reused["row"].to_numpy()] = True
            lent = previous.select(pa.array(mask))
        for packed in lent:
            part = unpack_vectors(packed)
            part_hashes = part["input_hash"].combine_chunks()
            ok = ok and check(vector_matrix(part, spec.dim), part_hashes, {lender: part.num_rows})
            out.write(part)
        if carried is not None and carried.hashes and ok:
            outcome.from_sidecars = len(carried.hashes)
            ok = check(carried.vectors, pa.array(carried.hashes, pa.string()), carried.producers)
            out.write(carried.to_table(spec.dim))
        texts = (
            home.keyed("embedding_inputs", (collection,), columns=["input_hash", "text"])
            if len(todo)
            else None
        )
        kept: list[int] = []  # vectors a transient failure cut short, checked and cached

        def keep(done: EmbedResult) -> None:
            if _sound(done, spec.dim, normalized=spec.normalized, producer=expected):
                kept.append(cache.put(done.hashes, done.vectors))

        for start in range(0, len(todo) if ok else 0, EMBED_WINDOW):
            window = todo.slice(start, EMBED_WINDOW)
            assert texts is not None
            window_texts = _texts(texts, window)
            result: EmbedResult | None = None
            try:
                result = embed_with_cache(
                    window_texts,
                    embedder,
                    cache,
                    batch_size=max(p.batch_size, 32),
                    progress=_offset_progress(progress, start, len(todo)),
                    count_tokens=count_tokens,
                    refusals=refusals,
                    interrupted=keep,
                )
                if hits_again is None and result.cache_hits:
                    hits_again = _embed_hits_again(embedder, result, window_texts, outcome)
            except (DimensionMismatchError, NonFiniteVectorError) as exc:
                return _rejected(home, generation, collection, outcome, exc)
            except RetryableError as exc:
                if result is not None and result.fresh_hashes:  # embedding the hits again failed
                    keep(result.fresh())
                exc.add_note(
                    f"embeddings of collection {home.collection(collection).name!r} for profile "
                    f"{profile!r} failed; "
                    + (
                        f"the {sum(kept)} vectors embedded before it passed their checks and "
                        "are cached: the next run embeds only the rest"
                        if kept
                        else "run it again once the embedder's server answers"
                    )
                )
                raise
            outcome.embedded += result.embedded
            outcome.cache_hits += result.cache_hits
            outcome.refused.update(result.refused)
            new_vectors = new_vectors or bool(result.hashes)
            outcome.tokens += result.tokens
            outcome.cost_usd += result.cost_usd
            ok = check(
                result.vectors,
                pa.array(result.hashes, pa.string()),
                result.producers,
                result.widths,
            ) and all(c >= gates.REPRODUCED for c in hits_again or ())
            if not ok:
                outcome.dim = int(result.vectors.shape[1]) if result.vectors.ndim == 2 else 0
                break
            table = result.to_table(spec.dim)
            out.write(table)
            if result.fresh_hashes:
                fresh = set(result.fresh_hashes)
                new = table.filter(pa.array([h in fresh for h in result.hashes]))
                cache.put(new["input_hash"].to_pylist(), vector_matrix(new, spec.dim))
            memory.release()  # what the window's reads and LanceDB's write freed
        if not per_vector["dim"]:  # nothing to embed at all: check the empty partition
            check(np.zeros((0, spec.dim), np.float32), pa.array([], pa.string()), {})
        outcome.gates = [
            gates.combine(per_vector["dim"]),
            gates.combine(per_vector["finite"], summed=("non_finite_vectors",)),
            gates.combine(per_vector["norm"], summed=("vectors_off_norm",)),
            gates.vectors_share_one_backend_spec(
                producers,
                backend_spec=expected[0],
                revision=expected[1],
                cache_hits_again=hits_again,
            ),
            gates.vectors_match_their_inputs(
                pa.chunked_array(written, pa.string()),
                _without(hashes, outcome.refused),
            ),
        ]
        outcome.refusal_requests = refusals.requests
        record_partition_checks(home, generation, "embeddings", collection, outcome.gates)
        if outcome.passed:
            # the record first: a reader that sees the partition without the refused inputs'
            # vectors also sees why they have none
            refused = _refusals(home, collection, outcome.refused)
            memo.forget(h for h in known if h not in outcome.refused)  # taken since
            memo.put({h: e for h, e in outcome.refused.items() if h not in held})
            if refused.num_rows:
                home.warehouse.write(REFUSALS, (profile, collection), refused)
            else:  # none refused: no file a run (an earlier run's record goes)
                home.warehouse.delete(REFUSALS, (profile, collection))
            outcome.refusals = refused.to_pylist()
            if not (whole_previous and not new_vectors):
                out.commit()
    return outcome


def _sound(done: EmbedResult, dim: int, *, normalized: bool, producer: tuple[str, str]) -> bool:
    """Whether vectors embedded before a failure pass the checks a window's pass before they
    are cached: the profile's dimension, finite, the profile's norm, the generation's model."""
    return (
        gates.vectors_have_profile_dim(done.vectors, dim, widths=done.widths).passed
        and gates.vectors_are_finite(done.vectors).passed
        and gates.vector_norms_match_profile(done.vectors, normalized=normalized).passed
        and set(done.producers) <= {producer}
    )


def _without(hashes: pa.Array, refused: dict[str, str]) -> pa.Array:
    """``hashes`` but the refused ones: those that must have a vector."""
    if not refused:
        return hashes
    return hashes.filter(pc.invert(pc.is_in(hashes, pa.array(list(refused), pa.string()))))


def _refusals(home: Home, collection: str, refused: dict[str, str]) -> pa.Table:
    """The record of the refused inputs: each with the documents that hold it, their files
    named (see ``refusals.refusal_rows``)."""
    if not refused:
        return REFUSAL_SCHEMA.empty_table()
    wanted = pa.array(sorted(refused), pa.string())
    inputs = home.read(
        "embedding_inputs",
        (collection,),
        where=pc.field("input_hash").isin(wanted),
        columns=["input_hash", "source_id", "doc_id", "block_key"],
    )
    docs = pc.unique(inputs["doc_id"])
    manifest = home.read(
        "source_manifest",
        (collection,),
        where=pc.field("doc_id").isin(docs),
        columns=["doc_id", "path"],
    )
    paths = dict(zip(manifest["doc_id"].to_pylist(), manifest["path"].to_pylist(), strict=True))
    return refusal_rows(inputs, refused, collection=home.collection(collection).name, paths=paths)


def _embed_hits_again(
    embedder: Embedder, result: EmbedResult, texts: dict[str, str], outcome: EmbeddingsOutcome
) -> list[float]:
    """Up to CACHE_HITS_AGAIN of ``result``'s cache hits (evenly spread over them, in hash
    order: the same ones for the same window) embedded again, and the cosine of each with
    the vector the cache gave. Their tokens and cost count in ``outcome``."""
    fresh = set(result.fresh_hashes)
    hits = [i for i, h in enumerate(result.hashes) if h not in fresh]
    picked = [hits[k] for k in spread(len(hits), CACHE_HITS_AGAIN)]
    again = embed_again(
        embedder, [texts[result.hashes[i]] for i in picked], [result.vectors[i] for i in picked]
    )
    outcome.tokens += again.tokens
    outcome.cost_usd += again.cost_usd
    return again.cosines


def _count(into: Producers, more: Producers) -> None:
    for producer, n in more.items():
        into[producer] = into.get(producer, 0) + n


def _rejected(
    home: Home,
    generation: Generation,
    collection: str,
    outcome: EmbeddingsOutcome,
    exc: DimensionMismatchError | NonFiniteVectorError,
) -> EmbeddingsOutcome:
    """The embedder itself rejected an answer: the gate it would have failed reports it
    like any other failure, and the others are marked failed as not evaluated."""
    failed = (
        "vectors_have_profile_dim"
        if isinstance(exc, DimensionMismatchError)
        else "vectors_are_finite"
    )
    outcome.gates = [
        gates.Gate(
            name,
            False,
            desc,
            {"error": str(exc)}
            if name == failed
            else {"not_evaluated": f"the embedder's answer was rejected ({failed})"},
        )
        for name, desc in gates.EMBEDDING_GATES
    ]
    record_partition_checks(home, generation, "embeddings", collection, outcome.gates)
    return outcome


def _texts(inputs: KeyedReader, hashes: pa.Array) -> dict[str, str]:
    """The canonical text of each of ``hashes`` (one input's text per hash: it is its hash)."""
    table = inputs.lookup(hashes)
    return dict(zip(table["input_hash"].to_pylist(), table["text"].to_pylist(), strict=True))


def _offset_progress(
    progress: Callable[[int, int], None] | None, offset: int, total: int
) -> Callable[[int, int], None] | None:
    """A window's progress callback reporting against the whole step's total."""
    if progress is None:
        return None
    report = progress
    return lambda done, _window_total: report(offset + done, total)
