"""Sidecars that travel: vectors a document's RFC 0013 sidecar brings instead of embedding.

A sidecar's vectors stand in for the embedder's only when the sidecar names the profile's own
embedder (``embedder.model`` is its backend_spec, with the same ``input_format`` and ``dim``,
and the same ``revision`` and ``normalized`` when it states them) and an entry's pin
(``content_hash``, and its ``block_key`` or ``input_hash`` when given) matches a current
block. Every other entry is stale and its block is embedded as usual. A sidecar's model name is
only its word, so a few of the vectors each sidecar lends (SIDECAR_VECTORS_AGAIN) are compared
with the model's own for their inputs (from its cache, or embedded again); a sidecar one of
whose vectors the model does not give again (``gates.REPRODUCED``) lends none. Vectors taken
from a sidecar go into the collection's own ``embeddings`` partition only, never into the
shared embedding cache: a file's vectors never reach another collection or tenant.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from corpus_index.cache import EmbeddingCache
from corpus_index.embedders import Embedder
from corpus_index.embedding import EmbedResult, embed_again, spread
from corpus_index.errors import DimensionMismatchError, NonFiniteVectorError, SidecarError
from corpus_index.export_reader import cosine
from corpus_index.gates import REPRODUCED
from corpus_index.home import Home
from corpus_index.registry import GenerationSpec
from corpus_index.sidecar_places import beside_source, sidecar_folder
from corpus_index.sidecars import SIDECAR_SUFFIX, mark_stale, read_sidecar, write_sidecar
from corpus_index.storage import Location

# the same tolerance as the sidecar validator: JSON keeps about 7 significant digits
_NORM_TOLERANCE = 1e-3
# what is read of embedding_inputs to match sidecar entries to the inputs still to embed
_MATCH_COLUMNS = ["doc_id", "section", "block_key", "content_hash", "input_hash"]
# how many of the vectors each sidecar lends are compared with the model's own (evenly spread
# over them in hash order), to show they are the profile's model's: cache hits are checked so
SIDECAR_VECTORS_AGAIN = 2


def embedder_mismatch(sidecar: Mapping[str, Any], spec: GenerationSpec) -> str | None:
    """Why ``sidecar``'s vectors cannot stand for ``spec``'s embedder, or None when they can.

    ``embedder.model`` names the backend_spec (``st:all-MiniLM-L6-v2``); a bare model name as
    the RFC's example writes it (``text-embedding-3-large``) names the ``openai:`` or ``st:``
    backend of that model.
    """
    embedder = sidecar.get("embedder") or {}
    model = str(embedder.get("model", ""))
    provider, _, name = spec.backend_spec.partition(":")
    if model != spec.backend_spec and not (provider in ("openai", "st") and model == name):
        return f"embedder.model is {model!r}; the profile embeds with {spec.backend_spec!r}"
    checks = [
        ("input_format", embedder.get("input_format"), spec.input_format),
        ("dim", embedder.get("dim"), spec.dim),
        ("revision", embedder.get("revision", spec.model_revision), spec.model_revision),
        ("normalized", embedder.get("normalized", spec.normalized), spec.normalized),
    ]
    for key, theirs, ours in checks:
        if theirs != ours:
            return f"embedder.{key} is {theirs!r}; the profile's is {ours!r}"
    return None


def matching_vectors(
    sidecar: Mapping[str, Any], rows: Iterable[Mapping[str, Any]], spec: GenerationSpec
) -> dict[str, list[float]]:
    """``input_hash -> vector`` for each input row (``section``, ``block_key``,
    ``content_hash``, ``input_hash``) that a current entry of ``sidecar`` stands for.

    The sidecar must be valid and name ``spec``'s embedder (see :func:`embedder_mismatch`).
    An entry with a ``block_key`` matches that block (or paragraph) only; one without (the
    RFC's shape) matches a whole block of its section with its pin. A vector off unit norm
    under a normalized profile is not used.
    """
    keyed: dict[tuple[str, str], Mapping[str, Any]] = {}
    by_pin: dict[tuple[str, str], Mapping[str, Any]] = {}
    for entry in sidecar["blocks"]:
        if "block_key" in entry:
            keyed.setdefault((entry["block_key"], entry["content_hash"]), entry)
        else:
            by_pin.setdefault((entry["section"], entry["content_hash"]), entry)
    found: dict[str, list[float]] = {}
    for row in rows:
        entry = keyed.get((row["block_key"], row["content_hash"]))
        if entry is None and "#" not in row["block_key"]:
            entry = by_pin.get((row["section"], row["content_hash"]))
        if entry is None or entry.get("input_hash", row["input_hash"]) != row["input_hash"]:
            continue
        vector = [float(x) for x in entry["vector"]]
        if spec.normalized and abs(math.hypot(*vector) - 1.0) > _NORM_TOLERANCE:
            continue
        found.setdefault(row["input_hash"], vector)
    return found


@dataclass(slots=True)
class SidecarVectors:
    """What the sidecars of a partition's documents brought."""

    result: EmbedResult
    files: list[str] = field(default_factory=list)  # the sidecars whose vectors were used
    # sidecar path -> why none of its vectors was used: not readable, not conformant, or not
    # reproduced by the model
    refused: dict[str, str] = field(default_factory=dict)
    # sidecar path -> the embedder it names instead of the profile's (another profile's, say)
    other_embedder: dict[str, str] = field(default_factory=dict)
    tokens: int = 0  # of the vectors embedded again
    cost_usd: float = 0.0


def candidates(home: Home, profile: str, collection: str, doc_id: str) -> list[Location]:
    """The sidecars a document may have: the profile's own placement (where ``CorpusIndex.add``
    puts a sidecar it is given), then the one carried beside the source file."""
    config = home.collection(collection)
    own = sidecar_folder(home.settings, home.config, profile, config) / f"{doc_id}{SIDECAR_SUFFIX}"
    carried = Location.local(beside_source(config, doc_id))
    return [own] if carried == own else [own, carried]


def sidecar_vectors(
    home: Home,
    spec: GenerationSpec,
    profile: str,
    collection: str,
    todo: pa.Array,
    *,
    embedder: Embedder,
    cache: EmbeddingCache | None = None,
) -> SidecarVectors:
    """Vectors for those of ``todo`` (input hashes with no vector yet) that the sidecars of
    their documents hold, current and from the profile's embedder, which gives a few of each
    sidecar's again (SIDECAR_VECTORS_AGAIN; ``cache``, the model's, holds some of them)."""
    producer = (spec.backend_spec, spec.model_revision)
    out = SidecarVectors(EmbedResult([], np.zeros((0, spec.dim), np.float32), 0, 0))
    wanted = pc.field("input_hash").isin(todo) & (pc.field("input_format") == spec.input_format)
    # first only which documents need vectors, and which of them have a sidecar at all (a
    # ``stat`` each): a first sync of a large collection without sidecars reads no more
    docs = home.read("embedding_inputs", (collection,), where=wanted, columns=["doc_id"])
    files: dict[str, list[Location]] = {}
    for doc_id in pc.unique(docs["doc_id"]).to_pylist():
        found_files = [p for p in candidates(home, profile, collection, doc_id) if p.is_file()]
        if found_files:
            files[doc_id] = found_files
    if not files:
        return out
    rows = home.read(
        "embedding_inputs",
        (collection,),
        where=wanted & pc.field("doc_id").isin(pa.array(sorted(files), pa.string())),
        columns=_MATCH_COLUMNS,
    ).to_pylist()
    by_doc: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_doc.setdefault(row["doc_id"], []).append(row)
    lent: list[tuple[str, dict[str, list[float]]]] = []  # each sidecar used and what it lends
    for doc_id, doc_rows in sorted(by_doc.items()):
        covered: set[str] = set()
        for path in files[doc_id]:
            try:
                sidecar = read_sidecar(path)
            except (SidecarError, OSError) as exc:
                out.refused[str(path)] = str(exc)
                continue
            why = embedder_mismatch(sidecar, spec)
            if why is not None:
                out.other_embedder[str(path)] = why
                continue
            vectors = matching_vectors(sidecar, doc_rows, spec)
            if vectors:
                lent.append((str(path), vectors))
                covered.update(vectors)
            if all(r["input_hash"] in covered for r in doc_rows):
                break
    out.refused.update(_not_reproduced(home, collection, embedder, cache, lent, out))
    found: dict[str, list[float]] = {}
    for file, vectors in lent:
        if file in out.refused:
            continue
        out.files.append(file)
        for h, v in vectors.items():
            found.setdefault(h, v)
    if found:
        hashes = sorted(found)
        matrix = np.asarray([found[h] for h in hashes], dtype=np.float32)
        out.result = EmbedResult(hashes, matrix, 0, 0, producers={producer: len(hashes)})
    return out


def _not_reproduced(
    home: Home,
    collection: str,
    embedder: Embedder,
    cache: EmbeddingCache | None,
    lent: list[tuple[str, dict[str, list[float]]]],
    out: SidecarVectors,
) -> dict[str, str]:
    """The sidecars of ``lent`` a sample of whose vectors the model does not give again (path
    -> why). A sampled vector is compared with the one the model's cache holds for its input,
    where it holds one (a re-shard reads the home's own sidecars, all of whose vectors the
    model embedded here), else with its input embedded again, all in one call; the tokens
    and cost count in ``out``."""
    samples: list[tuple[str, str]] = []  # (sidecar path, input hash)
    for path, vectors in lent:
        hashes = sorted(vectors)
        samples += [(path, hashes[k]) for k in spread(len(hashes), SIDECAR_VECTORS_AGAIN)]
    if not samples:
        return {}
    given = dict(lent)
    cached = cache.lookup([h for _, h in samples]) if cache is not None else {}
    least: dict[str, float] = {}
    for path, h in samples:
        if h in cached:
            c = cosine(cached[h], np.asarray(given[path][h], np.float32))
            least[path] = min(least.get(path, 1.0), c)
    todo = [(path, h) for path, h in samples if h not in cached]
    if todo:
        inputs = home.read(
            "embedding_inputs",
            (collection,),
            where=pc.field("input_hash").isin(pa.array(sorted({h for _, h in todo}), pa.string())),
            columns=["input_hash", "text"],
        )
        texts = dict(zip(inputs["input_hash"].to_pylist(), inputs["text"].to_pylist(), strict=True))
        try:
            again = embed_again(
                embedder,
                [texts[h] for _, h in todo],
                [np.asarray(given[path][h], np.float32) for path, h in todo],
            )
        except (DimensionMismatchError, NonFiniteVectorError) as exc:  # a bad answer
            return {path: f"its vectors could not be embedded again: {exc}" for path, _ in lent}
        out.tokens += again.tokens
        out.cost_usd += again.cost_usd
        for (path, _), c in zip(todo, again.cosines, strict=True):
            least[path] = min(least.get(path, 1.0), c)
    return {
        path: (
            f"its vectors are not the model's: one has cosine {c:.3f} with the model's vector "
            f"for its input (the same model's: {REPRODUCED} or more)"
        )
        for path, c in least.items()
        if not c >= REPRODUCED
    }


@dataclass(frozen=True, slots=True)
class PlacedSidecar:
    """A sidecar given with a file, marked and stored where a profile's sync will use it."""

    profile: str
    path: Location
    stale: list[str]  # the entries marked ``stale: true`` (their blocks are embedded anew)


def place_given_sidecar(
    home: Home,
    collection: str,
    doc_id: str,
    current: Mapping[str, str],
    sidecar: Mapping[str, Any],
) -> list[PlacedSidecar]:
    """Store a sidecar given for one document for every profile of its namespace whose
    embedder it names, its entries marked stale or current against ``current``
    (``block_key -> content_hash`` of the file's embeddable blocks); the next sync takes the
    current entries' vectors from it. Returns where it went (empty: no profile's embedder).

    Raises:
        SidecarError: the sidecar is non-conformant.
    """
    marked = mark_stale(sidecar, current)
    config = home.collection(collection)
    placed: list[PlacedSidecar] = []
    for profile in home.config.profiles_in(config.namespace):
        if embedder_mismatch(sidecar, home.spec(profile.name)) is not None:
            continue
        folder = sidecar_folder(home.settings, home.config, profile.name, config)
        path = folder / f"{doc_id}{SIDECAR_SUFFIX}"
        write_sidecar(path, marked.sidecar, validate=False)  # mark_stale validated it
        placed.append(PlacedSidecar(profile.name, path, marked.stale))
    return placed
