"""The consumer side of a flat-blob export (seed "Embeddings" §3.1, §4, §5, §7).

A consumer loads ``index.json`` (a local path or an ``http://`` / ``https://`` URL), fetches
the blob it names through ``file`` in one read, checks its size and sha256, embeds
``probe.text`` with its own model for a verdict, and searches the blob by cosine only when its
model's ``backend_spec`` is the index's and the probe does not say incompatible.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from corpus_index.embedders import Embedder
from corpus_index.errors import ExportError, IncompatibleEmbedderError
from corpus_index.flat_blob import (
    INDEX_FILE,
    blob_problems,
    chunks_name,
    decode_blob,
    parse_index,
    rows_problems,
)
from corpus_index.storage import OBJECT_STORE_SCHEMES, Location

VERIFIED, DEGRADED = 0.99, 0.9
FETCH_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class LoadedExport:
    """An export as fetched: its index, its vectors, and its chunks file's entries (None for
    centroids)."""

    location: str
    index: dict[str, Any]
    vectors: npt.NDArray[np.float32]
    chunks: list[dict[str, Any]] | None


@dataclass(frozen=True, slots=True)
class Verdict:
    """How the consumer's model compares with the export's probe."""

    verdict: str  # verified | degraded | incompatible | no probe
    similarity: float | None
    same_backend_spec: bool


@dataclass(frozen=True, slots=True)
class BlobHit:
    """One row of a blob, by score, with what the chunks file says of its source."""

    row: int | str
    score: float
    source_id: str | None = None
    source_type: str | None = None
    section: str | None = None


def fetch(location: str, *, api_key: str | None = None) -> bytes:
    """The bytes at a local path, an http(s) URL or an object-store URI (``s3://``), in one
    read; ``api_key`` is sent to an http(s) server as ``Authorization: Bearer`` (a
    ``corpus serve`` export needs one).

    Raises:
        ExportError: it cannot be read (the location and the reason named).
    """
    scheme = urllib.parse.urlsplit(location).scheme
    try:
        if scheme in ("http", "https"):
            headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
            request = urllib.request.Request(location, headers=headers)  # noqa: S310 - scheme checked
            with urllib.request.urlopen(request, timeout=FETCH_TIMEOUT_S) as response:  # noqa: S310 - scheme checked
                data: bytes = response.read()
                return data
        if scheme in OBJECT_STORE_SCHEMES:
            return Location.of(location).read_bytes()
        if scheme not in ("", "file"):
            raise ExportError(f"{location}: only local paths, http(s) and s3 URLs are read")
        path = urllib.parse.urlsplit(location).path if scheme == "file" else location
        return Path(path).read_bytes()
    except OSError as exc:
        raise ExportError(f"{location}: cannot be read: {exc}") from None


def _beside(location: str, name: str) -> str:
    """The location of ``name`` in the same folder as ``location`` (a path or a URL, whose
    query, such as ``corpus serve``'s ``?profile=``, it keeps)."""
    parts = urllib.parse.urlsplit(location)
    scheme = parts.scheme
    if scheme in ("http", "https", "file"):
        path = urllib.parse.urljoin(parts.path, urllib.parse.quote(name))
        return urllib.parse.urlunsplit(parts._replace(path=path, fragment=""))
    if scheme in OBJECT_STORE_SCHEMES:
        return f"{location.rsplit('/', 1)[0]}/{name}"
    return str(Path(location).parent / name)


def index_location(location: str) -> str:
    """``location`` itself when it names index.json, else index.json inside it (a folder)."""
    parts = urllib.parse.urlsplit(location)
    if parts.scheme:
        if parts.path.rstrip("/").endswith(".json"):
            return location
        path = parts.path.rstrip("/") + "/" + INDEX_FILE
        return urllib.parse.urlunsplit(parts._replace(path=path))
    if location.rstrip("/").endswith(".json"):
        return location
    return str(Path(location) / INDEX_FILE)


def load_export(location: str, *, api_key: str | None = None) -> LoadedExport:
    """Fetch and check an export (``api_key``: see :func:`fetch`).

    Raises:
        ExportError: index.json is malformed, the blob's size or sha256 is not what it says,
            or its rows are not what the format allows
            (:func:`~corpus_index.flat_blob.rows_problems`: values not finite, a per-profile
            export without its probe or with a chunks file that does not match its rows).
    """
    where = index_location(location)
    index = parse_index(fetch(where, api_key=api_key), where=where)
    blob_at = _beside(where, index["file"])
    blob = fetch(blob_at, api_key=api_key)
    problems = blob_problems(index, blob)
    if problems:
        raise ExportError(f"{blob_at}: " + "; ".join(problems))
    chunks = None
    where_rows = blob_at
    if index["row_key"] == "chunk_index":
        where_rows = _beside(where, chunks_name(index["file"]))
        try:
            chunks = json.loads(fetch(where_rows, api_key=api_key))
        except ValueError as exc:
            raise ExportError(f"{where_rows}: not JSON: {exc}") from None
    vectors = decode_blob(index, blob)
    problems = rows_problems(index, vectors, chunks)
    if problems:
        raise ExportError(f"{where_rows}: " + "; ".join(problems))
    return LoadedExport(where, index, vectors, chunks)


def cosine(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> float:
    """Cosine similarity of two vectors (0 when either is zero)."""
    denom = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(np.dot(a, b) / denom) if denom else 0.0


def verdict_of(similarity: float) -> str:
    """§3.1: above 0.99 verified, 0.9 to 0.99 degraded, below 0.9 incompatible."""
    if similarity > VERIFIED:
        return "verified"
    return "degraded" if similarity >= DEGRADED else "incompatible"


def probe_verdict(export: LoadedExport, embedder: Embedder) -> Verdict:
    """Embed the probe's text with ``embedder`` and compare it with the probe's vector.

    A model of another dimension cannot be compared at all: it is incompatible.
    """
    same = embedder.backend_spec == export.index["backend_spec"]
    probe = export.index.get("probe")
    if not probe:
        return Verdict("no probe", None, same)
    if embedder.dim != export.index["dim"]:
        return Verdict("incompatible", None, same)
    mine = embedder.embed([probe["text"]])[0]
    similarity = cosine(mine, np.asarray(probe["vector"], dtype=np.float32))
    return Verdict(verdict_of(similarity), round(similarity, 6), same)


def verdict_line(export: LoadedExport, embedder: Embedder, verdict: Verdict) -> str:
    """One line a person reads: the verdict, the probe's cosine and what was checked."""
    similarity = "n/a" if verdict.similarity is None else f"{verdict.similarity:.4f}"
    index = export.index
    return (
        f"{verdict.verdict}: probe cosine {similarity} ({embedder.backend_spec} against "
        f"{index['backend_spec']}); {index['count']} rows x {index['dim']}, size and sha256 ok"
    )


def search_blob(
    export: LoadedExport, query: str, *, embedder: Embedder, k: int = 5
) -> list[BlobHit]:
    """The ``k`` rows most similar to ``query`` by cosine, each named by the chunks file.

    Raises:
        IncompatibleEmbedderError: ``embedder``'s backend_spec is not the export's (§7), or its
            probe verdict is incompatible.
    """
    spec = export.index["backend_spec"]
    if embedder.backend_spec != spec:
        raise IncompatibleEmbedderError(
            f"{export.location}: the blob was embedded with {spec!r}, the query model is "
            f"{embedder.backend_spec!r}; cosine across models is meaningless, so no search"
        )
    verdict = probe_verdict(export, embedder)
    if verdict.verdict == "incompatible":
        raise IncompatibleEmbedderError(
            f"{export.location}: the probe says this {spec} model is incompatible "
            f"(cosine {verdict.similarity}); no search"
        )
    if not export.index["count"]:
        return []
    q = embedder.embed([query])[0].astype(np.float32)
    rows = export.vectors
    norms = np.linalg.norm(rows, axis=1) * (np.linalg.norm(q) or 1.0)
    scores = (rows @ q) / np.where(norms == 0, 1.0, norms)
    order = np.argsort(-scores, kind="stable")[:k]
    hits = []
    for i in order:
        chunk = export.chunks[i] if export.chunks is not None else {}
        hits.append(
            BlobHit(
                row=export.index["rows"][i],
                score=round(float(scores[i]), 6),
                source_id=chunk.get("source_id"),
                source_type=chunk.get("source_type"),
                section=chunk.get("section"),
            )
        )
    return hits
