"""Flat-blob exports of a ``profiles`` collection under one embedding profile (seed
"Embeddings"): per researcher ``<slug>/embeddings/`` with only its public chunks, the restricted
chunks in a separate tree (or nowhere, ``processing.exports.restricted: off``), and collection
centroids ``collection/embeddings/`` over every chunk.

The trees are rebuilt whole from the current inputs and vectors into a staging folder, checked
there, and swapped in only when every check passes: a removed chunk or researcher leaves every
blob, chunks file and centroid at the next build, and a failed build leaves the last good
exports in place.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from corpus_index.embedders import Embedder
from corpus_index.embedding import VECTORS_KEY, vector_matrix
from corpus_index.export_reader import VERIFIED, cosine
from corpus_index.flat_blob import (
    CHUNK_FIELDS,
    INDEX_FILE,
    chunks_name,
    decode_blob,
    export_problems,
    write_export,
)
from corpus_index.gates import Gate
from corpus_index.hashing import canonical_json, sha256_hex
from corpus_index.home import Home
from corpus_index.kinds import kind_of
from corpus_index.kinds.profiles import CENTROIDS_SLUG, restricted_exports
from corpus_index.refusals import held_sources
from corpus_index.storage import Location

PROBE_TEXT = "A researcher who studies how machine learning models represent language."
PUBLIC, RESTRICTED = "flat", "flat-restricted"
# exported chunk rows embedded again from their inputs' text at each build: evenly spread over
# every row of the build, the first and the last always among them
SAMPLED_ROWS = 8
EXPORT_GATES = [
    (
        "exports_match_their_index",
        "Every blob is count*dim*4 bytes with the sha256 its index.json records, and its rows "
        "and chunks file have count entries, the chunks unique and in (source_id, chunk_index) "
        "order.",
    ),
    ("no_restricted_chunk_in_public_blob", "No public export holds a restricted chunk."),
    (
        "probe_verifies_against_own_model",
        "Every probe, and a sample of the exported rows (up to 8, the first and last among "
        "them) embedded again from their inputs' text, have cosine >= 0.99 with the profile's "
        "own model.",
    ),
    (
        "exports_share_generation_backend_spec",
        "Every export's backend_spec is the generation's, and the embeddings partition its "
        "vectors come from records the generation's backend_spec, revision and dim.",
    ),
]


@dataclass(slots=True)
class ExportsOutcome:
    """What one build wrote (into ``folder``, and ``restricted_folder`` when any), and its
    checks; ``written`` is False when a check failed and the old exports were kept."""

    covered: bool
    unchanged: bool = False
    researchers: int = 0
    public_rows: int = 0
    restricted_rows: int = 0
    removed: list[str] = field(default_factory=list)
    folder: str = ""
    restricted_folder: str = ""
    gates: list[Gate] = field(default_factory=list)
    written: bool = False


def export_roots(home: Home, profile: str, collection: str) -> tuple[Location, Location]:
    """The public tree and the restricted one (never below the public one)."""
    exports = home.settings.exports
    return exports / PUBLIC / profile / collection, exports / RESTRICTED / profile / collection


def covers(home: Home, profile: str, collection: str) -> bool:
    """Whether ``profile`` embeds ``collection`` and its kind has flat exports."""
    return (
        home.config.profile_covers(profile, collection)
        and kind_of(home.collection(collection)).flat_exports
    )


def build(home: Home, profile: str, collection: str) -> ExportsOutcome:
    """Rebuild the exports of one profile × collection (see the module docstring)."""
    if not covers(home, profile, collection):
        return ExportsOutcome(covered=False)
    spec = home.spec(profile)
    public_root, restricted_root = export_roots(home, profile, collection)
    _sweep_stages(collection, public_root, restricted_root)
    chunks = _chunks(home, profile, collection, spec.input_format, spec.dim)
    separate = restricted_exports(home.collection(collection)) == "separate"
    tiers = {(r["source_id"], r["chunk_index"]): r["tier"] for v in chunks.values() for r in v}
    identity = [spec.backend_spec, spec.model_revision, spec.input_format, separate, PROBE_TEXT]
    pins = [
        [r[k] for k in (*CHUNK_FIELDS, "tier", "input_hash")] for v in chunks.values() for r in v
    ]
    digest = sha256_hex(canonical_json([identity, sorted(chunks), pins]))
    stamp = public_root.with_name(f".{collection}.built.json")
    unchanged = _unchanged(
        home, profile, collection, stamp, digest, tiers, [public_root, restricted_root]
    )
    if unchanged is not None:  # nothing to rebuild: the files were checked as they are
        out = ExportsOutcome(covered=True, unchanged=True, folder=str(public_root))
        out.researchers = len(chunks)
        out.gates = unchanged
        return out
    probe_vector = home.embedder(profile).embed([PROBE_TEXT])[0]
    probe = {"text": PROBE_TEXT, "vector": [float(x) for x in probe_vector]}
    stage = public_root.with_name(f".{collection}.{uuid.uuid4().hex[:8]}")
    stage_restricted = restricted_root.with_name(stage.name)
    out = ExportsOutcome(covered=True, folder=str(public_root))
    try:
        slugs = sorted(chunks)
        centroids = []
        for slug in slugs:
            rows = chunks[slug]
            public = [r for r in rows if r["tier"] == "public"]
            restricted = [r for r in rows if r["tier"] != "public"]
            _write_chunks(stage / slug / "embeddings", spec.backend_spec, public, probe)
            if separate and restricted:
                folder = stage_restricted / slug / "embeddings"
                _write_chunks(folder, spec.backend_spec, restricted, probe)
            out.public_rows += len(public)
            out.restricted_rows += len(restricted)
            mean = np.mean([r["vector"] for r in rows], axis=0)
            centroids.append(mean / (np.linalg.norm(mean) or 1.0))
        write_export(
            stage / CENTROIDS_SLUG / "embeddings",
            backend_spec=spec.backend_spec,
            vectors=np.array(centroids, dtype=np.float32).reshape(len(slugs), spec.dim),
            rows=slugs,
            row_key="slug",
            normalized=True,
            probe=probe,
        )
        out.researchers = len(slugs)
        out.gates = check_exports(
            [stage, stage_restricted],
            tiers,
            home,
            profile,
            collection,
            public_root=stage,
            input_hashes={
                (r["source_id"], r["chunk_index"]): r["input_hash"]
                for v in chunks.values()
                for r in v
            },
        )
        if all(g.passed for g in out.gates):
            old = _slugs(public_root) | _slugs(restricted_root)
            out.removed = sorted(old - set(slugs) - {CENTROIDS_SLUG})
            _swap(stage, public_root)
            _swap(stage_restricted, restricted_root)
            out.written = True
            probe_gate = next(g for g in out.gates if g.name == EXPORT_GATES[2][0])
            stamp.write_text(
                json.dumps(
                    {
                        "digest": digest,
                        "probe": probe_gate.metadata,
                        "indexes": _index_digests([public_root, restricted_root]),
                    }
                )
            )
            if stage_restricted.exists() or restricted_root.exists():
                out.restricted_folder = str(restricted_root)
    finally:
        for leftover in (stage, stage_restricted):
            with contextlib.suppress(OSError):
                leftover.rmtree()
    return out


def rebuild(home: Home, collection: str) -> list[tuple[str, str]]:
    """After a deletion: the exports of ``collection`` rebuilt from what remains, for every
    profile that builds them; the trees of a profile that no longer does (removed from the
    config, or no longer covering the collection) removed, since no build would ever take the
    deletion out of them, and so are the trees of a rebuild whose checks fail (the last good
    exports may hold what was deleted). Returns ``(tree, "rebuilt" | "removed")`` pairs."""
    done: list[tuple[str, str]] = []
    for profile in sorted(_profiles_on_disk(home) | set(home.config.profiles)):
        public_root, restricted_root = export_roots(home, profile, collection)
        if not (public_root.is_dir() or restricted_root.is_dir()):
            continue
        if profile in home.config.profiles and covers(home, profile, collection):
            out = build(home, profile, collection)
            if out.written or out.unchanged:
                done.append((str(public_root), "rebuilt"))
                continue
        done += [(tree, "removed") for tree in _drop(home, profile, collection)]
    return done


def researcher_leftovers(home: Home, collection: str, slug: str) -> list[tuple[str, str]]:
    """Where ``slug`` still shows in ``collection``'s export trees of any profile, the folders a
    killed build left included: ``(path, "researcher folder" | "centroid row")`` (a centroid
    averages every chunk of its researcher, so its row is what remains of a deleted one)."""
    found: list[tuple[str, str]] = []
    for tree in (PUBLIC, RESTRICTED):
        for profile in _folders(home, tree):
            roots = [profile / collection] + [
                p for p in profile.iterdir() if p.is_dir() and p.name.startswith(f".{collection}.")
            ]
            for root in (r for r in roots if r.is_dir()):
                if (root / slug).is_dir():
                    found.append((str(root / slug), "researcher folder"))
                centroids = root / CENTROIDS_SLUG / "embeddings" / INDEX_FILE
                with contextlib.suppress(OSError, ValueError):
                    if slug in json.loads(centroids.read_text()).get("rows", []):
                        found.append((str(centroids), "centroid row"))
    return found


def _folders(home: Home, tree: str) -> list[Location]:
    root = home.settings.exports / tree
    return [p for p in root.iterdir() if p.is_dir()] if root.is_dir() else []


def _sweep_stages(collection: str, *roots: Location) -> None:
    """Remove what a build killed before its end left beside ``roots``: its staging folders
    (``.<collection>.<8 hex>``) and the old trees of an unfinished swap (``.<collection>.old-``).
    Builds of one collection never run at once (the collection's lock), so none is in use."""
    leftover = re.compile(rf"\.{re.escape(collection)}\.(?:[0-9a-f]{{8}}|old-[0-9a-f]{{8}})")
    for root in roots:
        parent = root.parent
        if not parent.is_dir():
            continue
        for p in parent.iterdir():
            if p.is_dir() and leftover.fullmatch(p.name):
                p.rmtree()


def _index_digests(roots: list[Location]) -> dict[str, str]:
    """The sha256 of every index.json under ``roots``, by its path."""
    return {
        str(folder / INDEX_FILE): sha256_hex((folder / INDEX_FILE).read_bytes())
        for folder in index_files(roots)
    }


def remove_collection(home: Home, collection: str) -> list[str]:
    """Remove every export tree of ``collection`` (a collection gone from the config)."""
    return [t for p in sorted(_profiles_on_disk(home)) for t in _drop(home, p, collection)]


def _drop(home: Home, profile: str, collection: str) -> list[str]:
    """Remove ``profile``'s export trees of ``collection``, their stamp and what a killed
    build left beside them; returns the trees removed."""
    public_root, restricted_root = export_roots(home, profile, collection)
    removed = []
    for root in (public_root, restricted_root):
        if root.is_dir():
            root.rmtree()
            removed.append(str(root))
    public_root.with_name(f".{collection}.built.json").unlink(missing_ok=True)
    _sweep_stages(collection, public_root, restricted_root)
    return removed


def _profiles_on_disk(home: Home) -> set[str]:
    """The profiles with an export folder, configured or not."""
    return {p.name for tree in (PUBLIC, RESTRICTED) for p in _folders(home, tree)}


def _unchanged(
    home: Home,
    profile: str,
    collection: str,
    stamp: Location,
    digest: str,
    tiers: dict[tuple[str, int], str],
    roots: list[Location],
) -> list[Gate] | None:
    """The checks of exports built from the same chunks, vectors and model as now (``digest``,
    recorded in ``stamp`` by the last build that passed): all but the probe's run again on the
    files as they are; the probe's result is the one recorded (the model is not loaded again),
    which holds only while every index.json, where the probes are, is byte for byte what that
    build wrote. None when they must be rebuilt (changed, never built, an index.json not as
    written, or a check fails now)."""
    try:
        recorded = json.loads(stamp.read_text())
    except (OSError, ValueError):
        return None
    if recorded.get("digest") != digest or not roots[0].is_dir():
        return None
    if recorded.get("indexes") != _index_digests(roots):  # an index.json (its probe) changed
        return None
    gates = check_exports(
        roots, tiers, home, profile, collection, public_root=roots[0], probe=False
    )
    if not all(g.passed for g in gates):
        return None
    probe = _gate(2, True, **recorded.get("probe", {}), recorded_at_last_build=True)
    return [probe if g.name == probe.name else g for g in gates]


def _chunks(
    home: Home, profile: str, collection: str, input_format: str, dim: int
) -> dict[str, list[dict[str, Any]]]:
    """Every embedded chunk of the collection by slug, in (source, chunk_index) order, with its
    tier, chunks-file fields and vector."""
    inputs = home.read(
        "embedding_inputs", (collection,), columns=["chunk_ref", "input_format", "input_hash"]
    )
    inputs = inputs.filter(pc.equal(inputs["input_format"], input_format))
    blocks = home.read(
        "parsed_blocks",
        (collection,),
        columns=["chunk_ref", "source_id", "tier", "section", "metadata"],
    )
    by_ref = {r["chunk_ref"]: r for r in blocks.to_pylist()}
    vectors = home.keyed("embeddings", (profile, collection)).lookup(inputs["input_hash"])
    matrix = vector_matrix(vectors, dim)
    at = {h: i for i, h in enumerate(vectors["input_hash"].to_pylist())}
    # a source with an input the embedder refused is left out whole (no half of a source)
    held = set(held_sources(home.warehouse, profile, collection).to_pylist())
    out: dict[str, list[dict[str, Any]]] = {}
    for ref, input_hash in zip(
        inputs["chunk_ref"].to_pylist(), inputs["input_hash"].to_pylist(), strict=True
    ):
        block = by_ref[ref]
        if block["source_id"] in held:
            continue
        meta = json.loads(block["metadata"] or "{}")
        out.setdefault(meta["slug"], []).append(
            {
                "source_type": meta["source_type"],
                "source_id": block["source_id"],
                "chunk_index": meta["chunk_index"],
                "section": block["section"] or None,
                "char_count": meta["char_count"],
                "tier": block["tier"],
                "input_hash": input_hash,
                "vector": matrix[at[input_hash]],
            }
        )
    for rows in out.values():
        rows.sort(key=lambda r: (r["source_id"], r["chunk_index"]))
    return out


def _write_chunks(
    folder: Location, backend_spec: str, rows: list[dict[str, Any]], probe: dict[str, Any]
) -> None:
    dim = len(probe["vector"])
    write_export(
        folder,
        backend_spec=backend_spec,
        vectors=np.array([r["vector"] for r in rows], dtype=np.float32).reshape(len(rows), dim),
        rows=[r["chunk_index"] for r in rows],
        row_key="chunk_index",
        normalized=False,
        probe=probe,
        chunks=[{k: r[k] for k in CHUNK_FIELDS} for r in rows],
    )


def _slugs(root: Location) -> set[str]:
    return {p.name for p in root.iterdir() if p.is_dir()}


def _swap(stage: Location, target: Location) -> None:
    """Put ``stage`` where ``target`` is (the old tree removed); no stage removes the target."""
    if stage.exists():
        stage.replace_tree(target)
    else:
        target.rmtree()


def index_files(roots: list[Location]) -> Iterator[Location]:
    """Every export folder (one holding index.json) under ``roots``."""
    for root in roots:
        yield from sorted(p.parent for p in root.rglob(INDEX_FILE) if p.is_file())


def check_exports(
    roots: list[Location],
    tiers: dict[tuple[str, int], str],
    home: Home,
    profile: str,
    collection: str,
    *,
    public_root: Location,
    probe: bool = True,
    input_hashes: Mapping[tuple[str, int], str] | None = None,
) -> list[Gate]:
    """The blocking checks of EXPORT_GATES over the exports under ``roots`` of ``profile`` ×
    ``collection``; ``tiers`` maps ``(source_id, chunk_index)`` to the chunk's tier, and
    ``input_hashes`` to the input its vector was embedded from. Without ``probe`` neither the
    probes nor any row is embedded again (their check passes vacuously; the caller replaces
    it).

    The probe is embedded by the same model that embeds it again here, so at a build it
    only guards the probe consumers check against. The rows are what a consumer searches:
    a sample of them (see :func:`_sample`) is embedded again from the text of the input each
    was exported for, so vectors that are not the model's (a stale cache, another model's
    partition) fail the check; a sampled row whose input is unknown fails it too.

    index.json's backend_spec is written from the generation's spec, so the backend check
    also compares the spec with what the exported vectors' ``embeddings`` partition records
    of the model that produced them (after a switch of model, that partition holds the old
    model's vectors until the embeddings step runs again)."""
    spec = home.spec(profile)
    recorded = (home.warehouse.metadata("embeddings", (profile, collection)) or {}).get(VECTORS_KEY)
    vectors_from = json.loads(recorded) if recorded else None
    model = [spec.backend_spec, spec.model_revision, spec.dim]
    embedder = home.embedder(profile)
    folders = list(index_files(roots))
    problems: list[str] = []
    leaked: list[str] = []
    weak: dict[str, float] = {}
    specs: set[str] = set()
    probes: dict[str, npt.NDArray[np.float32]] = {}
    exported: list[tuple[Location, int, tuple[str, int]]] = []  # every chunk row, in order
    indexes: dict[str, dict[str, Any]] = {}  # folder -> its index.json, read once
    for folder in folders:
        broken = export_problems(folder)
        problems.extend(broken)
        index = indexes[str(folder)] = json.loads((folder / INDEX_FILE).read_text())
        if not broken and index["row_key"] == "chunk_index":
            chunks = json.loads((folder / chunks_name(index["file"])).read_text())
            exported.extend(
                (folder, i, (c["source_id"], c["chunk_index"])) for i, c in enumerate(chunks)
            )
        specs.add(index["backend_spec"])
        recorded = index.get("probe")
        if recorded and probe:
            if recorded["text"] not in probes:
                probes[recorded["text"]] = embedder.embed([recorded["text"]])[0]
            cos = cosine(probes[recorded["text"]], np.asarray(recorded["vector"], np.float32))
            if cos < VERIFIED:
                weak[str(folder)] = round(cos, 4)
        if folder.is_relative_to(public_root) and index["row_key"] == "chunk_index":
            chunks = json.loads((folder / chunks_name(index["file"])).read_text())
            leaked.extend(
                f"{c['source_id']}#{c['chunk_index']}"
                for c in chunks
                if tiers.get((c["source_id"], c["chunk_index"])) != "public"
            )
    return [
        _gate(0, not problems, exports=len(folders), problems=problems[:5] or None),
        _gate(1, not leaked, restricted_in_public=leaked[:5] or None, count=len(leaked)),
        _rows_gate(
            home, embedder, collection, exported, indexes, input_hashes or {}, weak, probe=probe
        ),
        _gate(
            3,
            specs <= {spec.backend_spec} and vectors_from == model,
            backend_spec=spec.backend_spec,
            found=sorted(specs),
            revision=spec.model_revision,
            dim=spec.dim,
            vectors_from=" ".join(map(str, vectors_from)) if vectors_from else "not recorded",
        ),
    ]


def _sample(n: int) -> list[int]:
    """Up to SAMPLED_ROWS of ``n`` row positions, evenly spread, the first and the last always
    among them: the same rows for the same exports."""
    if n <= SAMPLED_ROWS:
        return list(range(n))
    return sorted({round(i * (n - 1) / (SAMPLED_ROWS - 1)) for i in range(SAMPLED_ROWS)})


def _rows_gate(
    home: Home,
    embedder: Embedder,
    collection: str,
    exported: list[tuple[Location, int, tuple[str, int]]],
    indexes: Mapping[str, dict[str, Any]],
    input_hashes: Mapping[tuple[str, int], str],
    weak_probes: dict[str, float],
    *,
    probe: bool,
) -> Gate:
    """``probe_verifies_against_own_model``: the probes found weak (``weak_probes``), and a
    sample of the ``exported`` rows (folder, row, key) embedded again from their inputs'
    text and compared with the rows the blobs hold (``indexes``: each folder's index.json)."""
    if not probe:
        return _gate(2, True, threshold=VERIFIED)
    sampled = [exported[i] for i in _sample(len(exported))]
    known = [(f, i, key) for f, i, key in sampled if key in input_hashes]
    unknown = [f"{s}#{c}" for _f, _i, (s, c) in sampled if (s, c) not in input_hashes]
    weak_rows: dict[str, float] = {}
    lowest: float | None = None
    if known:
        with home.keyed("embedding_inputs", (collection,), columns=["input_hash", "text"]) as r:
            found = r.lookup(pa.array([input_hashes[key] for _f, _i, key in known], pa.string()))
        texts = dict(zip(found["input_hash"].to_pylist(), found["text"].to_pylist(), strict=True))
        unknown += [f"{s}#{c}" for _f, _i, (s, c) in known if input_hashes[(s, c)] not in texts]
        known = [(f, i, key) for f, i, key in known if input_hashes[key] in texts]
    if known:
        again = embedder.embed([texts[input_hashes[key]] for _f, _i, key in known])
        blobs: dict[str, npt.NDArray[np.float32]] = {}
        for (folder, i, (source, chunk)), vector in zip(known, again, strict=True):
            if str(folder) not in blobs:
                index = indexes[str(folder)]
                blobs[str(folder)] = decode_blob(index, (folder / index["file"]).read_bytes())
            cos = cosine(vector, blobs[str(folder)][i])
            lowest = cos if lowest is None else min(lowest, cos)
            if cos < VERIFIED:
                weak_rows[f"{source}#{chunk}"] = round(cos, 4)
    return _gate(
        2,
        not weak_probes and not weak_rows and not unknown,
        below_threshold=weak_probes or None,
        threshold=VERIFIED,
        rows_sampled=len(sampled),
        min_row_cosine=round(lowest, 4) if lowest is not None else None,
        rows_below_threshold=dict(list(weak_rows.items())[:5]) or None,
        rows_without_input=unknown[:5] or None,
    )


def _gate(n: int, passed: bool, **metadata: Any) -> Gate:
    name, description = EXPORT_GATES[n]
    return Gate(name, passed, description, {k: v for k, v in metadata.items() if v is not None})
