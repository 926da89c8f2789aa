"""The flat-blob embedding index of the researcher-profiles seed ("Embeddings" §3-§5).

An export is a folder ``embeddings/`` holding ``index.json``, a raw blob (headerless, row-major,
little-endian IEEE 754 float32, exactly ``count * dim * 4`` bytes) named by the slug of its
``backend_spec``, and, for per-profile chunks, a ``.chunks.json`` beside the blob with one entry
per row (``source_type``, ``source_id``, ``chunk_index``, ``section``, ``char_count``; never the
text). This module writes exports and checks one against its own files; the consumer side (fetch,
verify, search) is :mod:`corpus_index.export_reader`.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from corpus_index.errors import ExportError
from corpus_index.storage import Location

INDEX_FILE = "index.json"
INDEX_FIELDS = (
    "backend_spec",
    "file",
    "dtype",
    "byte_order",
    "dim",
    "count",
    "layout",
    "normalized",
    "metric",
    "row_key",
    "rows",
    "sha256",
    "probe",
)
CHUNK_FIELDS = ("source_type", "source_id", "chunk_index", "section", "char_count")
LITTLE_F32 = np.dtype("<f4")
# how far from 1 a row's length may be in an export that says ``normalized`` (float32 rounding)
NORM_TOLERANCE = 1e-3
# the widest rows an index.json may declare: wider than any embedding model's vectors
MAX_DIM = 1 << 16


def blob_name(backend_spec: str) -> str:
    """The blob's file name (§3): the backend_spec lowercased, ``:`` and ``/`` replaced by
    ``-``, with ``.bin``."""
    return backend_spec.lower().replace(":", "-").replace("/", "-") + ".bin"


def chunks_name(blob_file: str) -> str:
    """The chunks file beside a blob (§5): its path with ``.bin`` replaced by ``.chunks.json``."""
    return blob_file.removesuffix(".bin") + ".chunks.json"


def write_export(
    folder: Path | Location,
    *,
    backend_spec: str,
    vectors: npt.NDArray[np.floating[Any]],
    rows: Sequence[int | str],
    row_key: str,
    normalized: bool,
    probe: dict[str, Any] | None,
    chunks: Sequence[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Write one export into ``folder`` (created): the blob, the chunks file when ``chunks`` is
    given, and ``index.json`` last. Returns the index.

    Raises:
        ExportError: rows, chunks and vectors disagree in number, or ``chunks`` (with the rows
            and vectors beside them) are not in ascending ``(source_id, chunk_index)`` order,
            the order a reader requires.
    """
    folder = Location.of(folder)
    matrix = np.ascontiguousarray(vectors, dtype=LITTLE_F32)
    if matrix.ndim != 2 or matrix.shape[0] != len(rows):
        raise ExportError(f"{folder}: {len(rows)} rows for a {matrix.shape} vector matrix")
    if chunks is not None and len(chunks) != len(rows):
        raise ExportError(f"{folder}: {len(chunks)} chunk entries for {len(rows)} rows")
    if chunks is not None and (order := unordered_chunk(chunks)) is not None:
        raise ExportError(f"{folder}: chunk {order}")
    folder.mkdir()
    blob = matrix.tobytes(order="C")
    file = blob_name(backend_spec)
    (folder / file).write_bytes(blob)
    if chunks is not None:
        entries = [{k: c[k] for k in CHUNK_FIELDS} for c in chunks]
        (folder / chunks_name(file)).write_bytes(json.dumps(entries, indent=1).encode())
    index: dict[str, Any] = {
        "backend_spec": backend_spec,
        "file": file,
        "dtype": "float32",
        "byte_order": "little",
        "dim": int(matrix.shape[1]),
        "count": int(matrix.shape[0]),
        "layout": "row_major",
        "normalized": normalized,
        "metric": "cosine",
        "row_key": row_key,
        "rows": list(rows),
        "sha256": hashlib.sha256(blob).hexdigest(),
    }
    if probe is not None:
        index["probe"] = probe
    (folder / INDEX_FILE).write_bytes(json.dumps(index, indent=1).encode())
    return index


def parse_index(data: bytes, *, where: str) -> dict[str, Any]:
    """``index.json`` read and checked for the fields and types of §3.

    Raises:
        ExportError: not JSON, or a field missing, of the wrong type or out of range (``dim``
            from 1 to ``MAX_DIM``, ``count`` not negative, the probe's vector ``dim`` finite
            numbers), named, with ``where``.
    """
    try:
        index = json.loads(data)
    except ValueError as exc:
        raise ExportError(f"{where}: index.json is not JSON: {exc}") from None
    if not isinstance(index, dict):
        raise ExportError(f"{where}: index.json must be an object")
    types: dict[str, type | tuple[type, ...]] = {
        "backend_spec": str,
        "file": str,
        "dim": int,
        "count": int,
        "normalized": bool,
        "row_key": str,
        "rows": list,
        "sha256": str,
    }
    for name, type_ in types.items():
        if not isinstance(index.get(name), type_):
            raise ExportError(f"{where}: index.json field {name!r} is missing or not {type_}")
    fixed = {"dtype": "float32", "byte_order": "little", "layout": "row_major", "metric": "cosine"}
    for name, value in fixed.items():
        if index.get(name) != value:
            raise ExportError(
                f"{where}: index.json {name!r} is {index.get(name)!r}; this reader knows {value!r}"
            )
    if "/" in index["file"].replace("\\", "/") or index["file"] in ("", ".", ".."):
        raise ExportError(f"{where}: index.json 'file' must name a file beside it")
    for name, low, high in (("dim", 1, MAX_DIM), ("count", 0, None)):
        value = index[name]
        if isinstance(value, bool) or value < low or (high is not None and value > high):
            bounds = f"from {low} to {high}" if high is not None else f"of at least {low}"
            raise ExportError(f"{where}: index.json {name!r} is {value!r}; it must be {bounds}")
    probe = index.get("probe")
    if probe is not None and not (
        isinstance(probe, dict)
        and isinstance(probe.get("text"), str)
        and isinstance(probe.get("vector"), list)
        and len(probe["vector"]) == index["dim"]
        and _finite_numbers(probe["vector"])
    ):
        raise ExportError(
            f"{where}: index.json 'probe' must be {{text, vector}} of dim finite numbers"
        )
    return index


def _finite_numbers(values: list[Any]) -> bool:
    try:
        return all(type(x) in (int, float) and math.isfinite(x) for x in values)
    except OverflowError:  # an integer past any float
        return False


def blob_problems(index: dict[str, Any], blob: bytes) -> list[str]:
    """What is wrong with ``blob`` for ``index``: its length and sha256 (empty when none)."""
    problems = []
    expected = index["count"] * index["dim"] * 4
    if len(blob) != expected:
        problems.append(
            f"blob is {len(blob)} bytes, index.json says count*dim*4 = {expected} bytes"
        )
    digest = hashlib.sha256(blob).hexdigest()
    if digest != index["sha256"]:
        problems.append(f"blob sha256 is {digest}, index.json says {index['sha256']}")
    if len(index["rows"]) != index["count"]:
        problems.append(f"index.json lists {len(index['rows'])} rows for count {index['count']}")
    return problems


def decode_blob(index: dict[str, Any], blob: bytes) -> npt.NDArray[np.float32]:
    """The blob as a ``(count, dim)`` float32 matrix in native byte order."""
    matrix = np.frombuffer(blob, dtype=LITTLE_F32).reshape(index["count"], index["dim"])
    return matrix.astype(np.float32)


def rows_problems(
    index: dict[str, Any],
    vectors: npt.NDArray[np.float32],
    chunks: object = None,
) -> list[str]:
    """What is wrong with an export's decoded rows for its ``index`` (empty when none): every
    value finite, unit length when it says ``normalized``; a per-profile export (row key
    ``chunk_index``) has its probe (§3.1: it MUST) and a chunks file of one entry a row, each
    with the fields of §5, in the index's row order, unique and ascending by ``(source_id,
    chunk_index)``. ``chunks`` is the chunks file as parsed (None for an export without
    one)."""
    problems = []
    if not np.all(np.isfinite(vectors)):
        problems.append("the blob holds values that are not finite (NaN or infinite)")
    elif index["normalized"] and len(vectors):
        norms = np.linalg.norm(vectors.astype(np.float64), axis=1)
        off = int(np.sum(np.abs(norms - 1.0) > NORM_TOLERANCE))
        if off:
            problems.append(f"normalized is true but {off} row(s) are not of unit length")
    probe = index.get("probe")  # its vector is checked with index.json (parse_index)
    if index["row_key"] != "chunk_index":
        return problems
    if probe is None:
        problems.append("a per-profile export has no probe (every one must have it)")
    if not isinstance(chunks, list):
        return [*problems, "the chunks file must be a list of entries"]
    if len(chunks) != index["count"]:
        return [*problems, f"the chunks file has {len(chunks)} entries for count {index['count']}"]
    malformed = [
        i
        for i, c in enumerate(chunks)
        if not isinstance(c, dict)
        or not isinstance(c.get("source_id"), str)
        or not isinstance(c.get("source_type"), str)
        or type(c.get("chunk_index")) is not int
        or type(c.get("char_count")) is not int
        or not isinstance(c.get("section"), str | None)
    ]
    if malformed:
        problems.append(
            f"the chunks file's entry {malformed[0]} lacks a field of §5 or has the wrong type "
            f"({len(malformed)} such entries)"
        )
    elif [c["chunk_index"] for c in chunks] != index["rows"]:
        problems.append("the chunks file's chunk indexes differ from index.json's rows")
    else:
        # index.json's rows name only a chunk index: the source of each row is the chunks
        # file's alone, so entries swapped between sources would show their hits under the
        # wrong source. The writer sorts them; any other order is a broken file.
        order = unordered_chunk(chunks)
        if order is not None:
            problems.append(f"the chunks file {chunks_name(index['file'])}: {order}")
    return problems


def chunk_key(chunk: dict[str, Any]) -> tuple[str, int]:
    """Where a chunk entry sorts in its chunks file: by ``(source_id, chunk_index)``."""
    return str(chunk["source_id"]), int(chunk["chunk_index"])


def unordered_chunk(chunks: Sequence[dict[str, Any]]) -> str | None:
    """The first chunk entry not strictly after the one before it in ``(source_id,
    chunk_index)`` order (a repeat or one out of order), said in words; None when none is."""
    for i in range(1, len(chunks)):
        before, entry = chunk_key(chunks[i - 1]), chunk_key(chunks[i])
        if entry <= before:
            what = "repeats" if entry == before else "comes before"
            return (
                f"entry {i} ({entry[0]}#{entry[1]}) {what} entry {i - 1} "
                f"({before[0]}#{before[1]}); entries must be unique and in ascending "
                "(source_id, chunk_index) order"
            )
    return None


def export_problems(folder: Path | Location) -> list[str]:
    """An export checked against its own files: index.json's fields, the blob's length and
    sha256, and its rows (:func:`rows_problems`, with the chunks file when the row key is
    ``chunk_index``)."""
    folder = Location.of(folder)
    where = str(folder / INDEX_FILE)
    try:
        index = parse_index((folder / INDEX_FILE).read_bytes(), where=where)
        blob = (folder / index["file"]).read_bytes()
    except (OSError, ExportError) as exc:
        return [str(exc)]
    problems = [f"{where}: {p}" for p in blob_problems(index, blob)]
    if problems:
        return problems
    chunks = None
    if index["row_key"] == "chunk_index":
        path = folder / chunks_name(index["file"])
        try:
            chunks = json.loads(path.read_bytes())
        except (OSError, ValueError) as exc:
            return [f"{path}: cannot be read: {exc}"]
    return [f"{where}: {p}" for p in rows_problems(index, decode_blob(index, blob), chunks)]
