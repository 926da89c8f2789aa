"""Proof of deletion from the bytes: fingerprints of deleted content, and a scan of every file
of a home for them (DESIGN §8).

What is kept of a deleted text or vector is never the content, only fingerprints: the first 64
bits of the sha256 of 32-byte windows of it (with a key of the home: an HMAC, and the rolling
hash that picks and tags the windows salted from the same key, so that someone holding a
receipt without the key cannot confirm a guessed text from it). Windows are chosen by their content (a fast rolling
hash, about one window in eight), so a scanner sliding over any file picks the same windows
wherever the bytes reappear, and at most ``MAX_PER_BLOB`` are kept per text, so a receipt stays
small. Windows of fewer than eight distinct bytes (runs of spaces, zeros) are never kept: they
would match everywhere; a vector's windows need twenty (a sparse vector's few repeated values
recur in other vectors).

Files are streamed in 1 MiB chunks. Parquet files (LZ4-compressed in the warehouse, so raw bytes
hide their content) and DuckDB files (whose strings may be compressed) are also decoded column
by column; every other file (LanceDB data and deletion files, JSON, SQLite, logs, temp files) is
read as raw bytes. LanceDB data files cannot be decoded without the separate ``pylance``
package, and LanceDB may store a text page compressed (FSST) where its own compaction rewrote
it; vectors (fixed-size float32) are always stored plain, so in LanceDB data files a deleted row
is proven absent by its vector's fingerprints (a row's vector lies in the same data file as its
text, and an exclusive text has an exclusive vector). Cost: one pass over each byte, plus one decode pass over Parquet and DuckDB
files; the rolling hash is vectorized, and sha256 runs only on windows whose hash tag matches a
fingerprint's.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from corpus_index.storage import Location

WINDOW = 32
MAX_PER_BLOB = 16
MIN_DISTINCT_BYTES = 8
# a window of a vector is kept only where its floats carry that much: eight float32s of a
# dense model's vector hold 25-30 distinct bytes, while a window of a sparse vector (mostly
# zeros, a few repeated magnitudes) recurs in other vectors and would prove nothing
VECTOR_MIN_DISTINCT_BYTES = 20
DUCKDB_BATCH_ROWS = 10_000
READ_CHUNK = 1 << 20  # bytes read from a file at a time
HASH_CHUNK = 1 << 14  # bytes hashed at a time (arrays that stay in cache: measured fastest)
_SELECT_SHIFT = np.uint64(61)  # a window is sampled when the top 3 bits of its hash are 0
_TAG_SHIFT = np.uint64(32)
_TAG_MASK = np.uint64(0xFFFF)
_BASE = 0x100000001B3
_MOD = 1 << 64
SCHEME = "sha256[:8] of 32-byte windows sampled by content (1 in 8), at most 16 per text"
KEYED_SCHEME = (
    "HMAC-SHA256[:8] under a key of the home of 32-byte windows sampled by a rolling hash "
    "salted from it (1 in 8), at most 16 per text"
)

U64 = npt.NDArray[np.uint64]


@cache
def _powers() -> tuple[U64, U64]:
    n = HASH_CHUNK + WINDOW
    up = np.full(n, _BASE, dtype=np.uint64)
    down = np.full(n, pow(_BASE, -1, _MOD), dtype=np.uint64)
    up[0] = down[0] = 1
    with np.errstate(over="ignore"):
        np.cumprod(up, out=up)
        np.cumprod(down, out=down)
    return up, down


_UNSALTED = np.uint64(0)


def salt_of(key: bytes | None) -> np.uint64:
    """The rolling hash's salt from a key (0 without one: the windows of an unkeyed receipt)."""
    if key is None:
        return _UNSALTED
    return np.uint64(int.from_bytes(hmac.digest(key, b"window salt", "sha256")[:8], "little"))


def window_hashes(data: npt.NDArray[np.uint8], salt: np.uint64 = _UNSALTED) -> U64:
    """A mixed 64-bit hash of every ``WINDOW``-byte window of ``data`` (at most HASH_CHUNK +
    WINDOW bytes), computed from prefix sums: window i's polynomial sum divided by base^i,
    xor ``salt`` before the mixing (which window is picked, and its tag, then need the salt)."""
    n = len(data)
    if n < WINDOW:
        return np.empty(0, dtype=np.uint64)
    up, down = _powers()
    with np.errstate(over="ignore"):
        weighted = (data.astype(np.uint64) + np.uint64(1)) * up[:n]
        prefix = np.zeros(n + 1, dtype=np.uint64)
        np.cumsum(weighted, out=prefix[1:])
        h = (prefix[WINDOW:] - prefix[: n - WINDOW + 1]) * down[: n - WINDOW + 1]
        h ^= salt
        h ^= h >> np.uint64(33)
        h *= np.uint64(0xFF51AFD7ED558CCD)
        h ^= h >> np.uint64(33)
        h *= np.uint64(0xC4CEB9FE1A85EC53)
        h ^= h >> np.uint64(33)
    return h


def _sampled(h: U64) -> npt.NDArray[np.bool_]:
    return np.asarray((h >> _SELECT_SHIFT) == 0)


def _digest(window: bytes | memoryview, key: bytes | None) -> str:
    if key is None:
        return hashlib.sha256(window).hexdigest()[:16]
    return hmac.digest(key, window, "sha256").hex()[:16]


def fingerprints(
    blob: bytes, *, min_distinct: int = MIN_DISTINCT_BYTES, key: bytes | None = None
) -> list[str]:
    """Fingerprints of one text or vector: ``tttt`` + ``ssss...`` (a 16-bit tag of the rolling
    hash, then 64 bits of sha256), for at most ``MAX_PER_BLOB`` sampled windows of at least
    ``min_distinct`` distinct bytes (``VECTOR_MIN_DISTINCT_BYTES`` for vectors). With ``key``:
    the rolling hash salted from it, and an HMAC under it for the sha256 (KEYED_SCHEME)."""
    out: list[str] = []
    salt = salt_of(key)
    for start in range(0, max(len(blob) - WINDOW + 1, 0), HASH_CHUNK):
        piece = blob[start : start + HASH_CHUNK + WINDOW - 1]
        h = window_hashes(np.frombuffer(piece, dtype=np.uint8), salt)
        idx = np.nonzero(_sampled(h))[0]
        for i in idx[np.argsort(h[idx], kind="stable")]:
            window = piece[int(i) : int(i) + WINDOW]
            if len(set(window)) < min_distinct:
                continue
            tag = int((h[i] >> _TAG_SHIFT) & _TAG_MASK)
            out.append(f"{tag:04x}{_digest(window, key)}")
            if len(out) >= MAX_PER_BLOB:
                return out
    return out


class Needles:
    """Fingerprints to look for, each with a label saying what it came from (made with
    ``key``, as :func:`fingerprints` made them)."""

    def __init__(self, labelled: Mapping[str, str], *, key: bytes | None = None) -> None:
        self.labels = {fp[4:]: label for fp, label in labelled.items()}
        self.tags = np.unique(np.array([int(fp[:4], 16) for fp in labelled], dtype=np.uint64))
        self.key = key
        self._salt = salt_of(key)

    def __len__(self) -> int:
        return len(self.labels)

    def find(self, data: bytes | memoryview) -> set[str]:
        """The digests of the fingerprints whose window occurs in ``data``."""
        found: set[str] = set()
        if not self.labels:
            return found
        view = memoryview(data).cast("B")
        for start in range(0, max(len(view) - WINDOW + 1, 0), HASH_CHUNK):
            piece = view[start : start + HASH_CHUNK + WINDOW - 1]
            h = window_hashes(np.frombuffer(piece, dtype=np.uint8), self._salt)
            cand = _sampled(h) & np.isin((h >> _TAG_SHIFT) & _TAG_MASK, self.tags)
            for i in np.nonzero(cand)[0]:
                digest = _digest(piece[int(i) : int(i) + WINDOW], self.key)
                if digest in self.labels:
                    found.add(digest)
        return found

    def without(self, digests: Iterable[str]) -> Needles:
        drop = set(digests)
        kept = {t: lab for t, lab in self.labels.items() if t not in drop}
        out = Needles({}, key=self.key)
        out.labels = kept
        out.tags = self.tags  # a stale tag only costs a sha256
        return out


@dataclass(slots=True)
class Finding:
    """Deleted content found in one file."""

    path: str
    layer: str  # "raw bytes", "parquet column <name>", "duckdb <table>.<column>", "unreadable"
    matches: dict[str, int] = field(default_factory=dict)  # label -> distinct fingerprints
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "layer": self.layer, "matches": self.matches}
        if self.detail:
            out["detail"] = self.detail
        return out


@dataclass(slots=True)
class ScanCost:
    files: int = 0
    raw_bytes: int = 0
    decoded_bytes: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "files": self.files,
            "raw_bytes": self.raw_bytes,
            "decoded_bytes": self.decoded_bytes,
            "seconds": round(self.seconds, 3),
        }


def _count(needles: Needles, digests: set[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in digests:
        label = needles.labels[d]
        out[label] = out.get(label, 0) + 1
    return out


def _raw(path: Location, needles: Needles, cost: ScanCost) -> set[str]:
    found: set[str] = set()
    tail = b""
    with path.open_input() as f:
        while chunk := f.read(READ_CHUNK):
            cost.raw_bytes += len(chunk)
            found |= needles.find(tail + chunk)
            tail = chunk[-(WINDOW - 1) :]
    return found


def _array_buffers(column: pa.ChunkedArray) -> Iterator[pa.Buffer]:
    for chunk in column.chunks:
        for buf in chunk.buffers():
            if buf is not None and buf.size:
                yield buf


def _parquet(path: Location, needles: Needles, cost: ScanCost) -> Iterator[tuple[str, set[str]]]:
    pf = pq.ParquetFile(path.path, filesystem=path.fs)
    for name in pf.schema_arrow.names:
        found: set[str] = set()
        for group in range(pf.num_row_groups):
            column = pf.read_row_group(group, columns=[name]).column(0)
            for buf in _array_buffers(column):
                cost.decoded_bytes += buf.size
                found |= needles.find(buf)
        yield name, found


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _duckdb(path: Location, needles: Needles, cost: ScanCost) -> Iterator[tuple[str, set[str]]]:
    import duckdb

    local = os.fspath(path)  # the registry is a file of the home folder, never on a store
    try:
        con = duckdb.connect(local, read_only=True)
    except duckdb.ConnectionException:
        # this process already holds the file open read-write: share that instance
        con = duckdb.connect(local)
    try:
        columns = con.execute(
            "SELECT c.table_schema, c.table_name, c.column_name "
            "FROM information_schema.columns c JOIN information_schema.tables t "
            "USING (table_catalog, table_schema, table_name) "
            "WHERE t.table_type = 'BASE TABLE' "
            "AND (c.data_type IN ('VARCHAR', 'BLOB') OR c.data_type LIKE '%[]') "
            "ORDER BY 1, 2, 3"
        ).fetchall()
        for schema, table, column in columns:
            found: set[str] = set()
            query = f"SELECT {_ident(column)} FROM {_ident(schema)}.{_ident(table)}"
            reader = con.sql(query).to_arrow_reader(DUCKDB_BATCH_ROWS)
            for batch in reader:
                for buf in _array_buffers(pa.chunked_array([batch.column(0)])):
                    cost.decoded_bytes += buf.size
                    found |= needles.find(buf)
            yield f"{table}.{column}", found
    finally:
        con.close()


def _is_parquet(path: Location) -> bool:
    with path.open_input() as f:
        return bytes(f.read(4)) == b"PAR1"


def scan_file(path: Location, needles: Needles, cost: ScanCost) -> list[Finding]:
    """Every place in one file where a fingerprint occurs: its raw bytes, and its decoded
    columns when it is a Parquet or DuckDB file. A Parquet or DuckDB file that cannot be decoded
    (a half-written temp file, a damaged partition) is a finding: absence cannot be proven."""
    out: list[Finding] = []
    cost.files += 1
    raw = _raw(path, needles, cost)
    if raw:
        out.append(Finding(str(path), "raw bytes", _count(needles, raw)))
    decoder = None
    if _is_parquet(path):
        decoder, kind = _parquet, "parquet column"
    elif path.suffix == ".duckdb":
        decoder, kind = _duckdb, "duckdb"
    if decoder is None:
        return out
    try:
        for where, found in decoder(path, needles, cost):
            if found:
                out.append(Finding(str(path), f"{kind} {where}", _count(needles, found)))
    except Exception as exc:  # noqa: BLE001 - any decode failure means "cannot prove absence"
        out.append(
            Finding(
                str(path),
                "unreadable",
                detail=f"cannot decode as {kind.split()[0]} ({type(exc).__name__}: {exc}); "
                "its compressed content cannot be checked: remove or repair it",
            )
        )
    return out


def scan_tree(
    roots: Location | Iterable[Location], needles: Needles
) -> tuple[list[Finding], ScanCost]:
    """Scan every regular file under each of ``roots`` (a folder here, or a prefix of an
    object store, whose objects are read as files; symlinks are not followed)."""
    cost = ScanCost()
    t0 = time.perf_counter()
    findings: list[Finding] = []
    for root in [roots] if isinstance(roots, Location) else roots:
        for path in root.walk():
            try:
                findings.extend(scan_file(path, needles, cost))
            except FileNotFoundError:
                continue  # removed while scanning (a temp file renamed into place)
    cost.seconds = time.perf_counter() - t0
    return findings, cost
