"""RFC 0013 embedding sidecars: ``<deal>.embeddings.json`` beside each ``<deal>.uw.md``.

A sidecar carries one vector per embeddable block, each pinned to the ``content_hash`` of the
block version it was computed from. When a block changes, its pin no longer matches and the
entry is marked ``stale: true`` until it is re-embedded. The shape is fixed by
``schemas/embedding-sidecar.schema.json``; what JSON Schema cannot say (vector length equals
``embedder.dim``, values finite, keys unique) is checked here.
"""

from __future__ import annotations

import copy
import datetime as dt
import functools
import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
from jsonschema import Draft202012Validator

from corpus_index.errors import ParseError, SidecarError
from corpus_index.hashing import content_hash
from corpus_index.kinds.base import json_depth
from corpus_index.kinds.uw_deals import SUFFIX, parse_text
from corpus_index.storage import Location

SCHEMA_PATH = Path(__file__).resolve().parents[1] / "schemas" / "embedding-sidecar.schema.json"
SIDECAR_SUFFIX = ".embeddings.json"

_PIN = re.compile(r"sha256:[0-9a-f]{64}")
_NORM_TOLERANCE = 1e-3  # float32 vectors written as JSON keep about 7 significant digits
# a sidecar file larger than this is refused before it is read: parsed, its numbers take a few
# times their text in memory. A 3072-dim vector is about 64 KiB of JSON, so this holds a
# thousand of them, well past the blocks of one deal
MAX_SIDECAR_BYTES = 64 * 2**20
# a conformant sidecar nests 4 deep (document, blocks, entry, vector); one nested past this is
# refused before the schema's checks, which recurse into it
_MAX_DEPTH = 64


@dataclass(frozen=True, slots=True)
class SidecarEntry:
    """One embedded block: where it is, which version of it, and its vector."""

    section: str
    block_key: str
    content_hash: str
    vector: Sequence[float]
    input_hash: str | None = None


class StaleResult(NamedTuple):
    """What :func:`mark_stale` returns: the marked copy and the keys of its stale entries."""

    sidecar: dict[str, Any]
    stale: list[str]


def sidecar_path(uw_path: Path) -> Path:
    """Where the sidecar of ``uw_path`` lives: ``<deal>.uw.md`` -> ``<deal>.embeddings.json``."""
    name = uw_path.name
    stem = name[: -len(SUFFIX)] if name.endswith(SUFFIX) else uw_path.stem
    return uw_path.with_name(stem + SIDECAR_SUFFIX)


# The warehouse's record of what each sidecar file was written from (``digest``: sha256 of the
# embedder identity and the entries' pins) and the file's size and mtime right after writing.
SIDECAR_PINS_SCHEMA = pa.schema(
    [
        ("source_id", pa.string()),
        ("doc_id", pa.string()),
        ("digest", pa.string()),
        ("size", pa.int64()),
        ("mtime_ns", pa.int64()),
    ]
)


def _timestamp(value: dt.datetime | None) -> str:
    if value is None:
        value = dt.datetime.now(dt.UTC)
    if value.tzinfo is None or value.utcoffset() is None:
        raise SidecarError(
            "$.generated_at", f"{value.isoformat()} has no time zone; pass an aware datetime (UTC)"
        )
    utc = value.astimezone(dt.UTC).replace(microsecond=0)
    return utc.strftime("%Y-%m-%dT%H:%M:%SZ")


def build_sidecar(
    *,
    uw_version: str,
    deal_id: str,
    backend_spec: str,
    dim: int,
    input_format: str,
    entries: Sequence[SidecarEntry],
    generated_at: dt.datetime | None = None,
    revision: str | None = None,
    normalized: bool | None = None,
) -> dict[str, Any]:
    """Assemble a sidecar document and validate it.

    Args:
        uw_version: ``uw_version`` from the source file's front matter.
        deal_id: ``deal_id`` from the source file's front matter.
        backend_spec: the embedder that produced the vectors (written as ``embedder.model``).
        dim: the embedder's dimension; every vector must have this length.
        input_format: the input format the vectors were computed from (``default-v1``, ...).
        entries: one per embeddable block, in document order.
        generated_at: an aware datetime; now (UTC) if omitted. Written in UTC, whole seconds.
        revision: the embedder's weights or algorithm version, if known.
        normalized: whether the vectors have unit norm, if known.

    Returns:
        The sidecar as a JSON-ready dict.

    Raises:
        SidecarError: the result would not conform (bad pin, wrong vector length, NaN, ...).
    """
    embedder: dict[str, Any] = {"model": backend_spec, "dim": dim, "input_format": input_format}
    if revision is not None:
        embedder["revision"] = revision
    if normalized is not None:
        embedder["normalized"] = normalized
    blocks: list[dict[str, Any]] = []
    for entry in entries:
        block: dict[str, Any] = {
            "section": entry.section,
            "block_key": entry.block_key,
            "content_hash": entry.content_hash,
            "vector": [float(x) for x in entry.vector],
        }
        if entry.input_hash is not None:
            block["input_hash"] = entry.input_hash
        blocks.append(block)
    doc: dict[str, Any] = {
        "uw_version": uw_version,
        "deal_id": deal_id,
        "embedder": embedder,
        "generated_at": _timestamp(generated_at),
        "blocks": blocks,
    }
    validate_sidecar(doc)
    return doc


@functools.cache
def _validator() -> Draft202012Validator:
    try:
        schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{SCHEMA_PATH}: sidecar schema not found; run from a source checkout of corpus-index"
        ) from None
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


def _json_path(parts: Iterable[str | int]) -> str:
    out = "$"
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _path_order(parts: Sequence[str | int]) -> tuple[tuple[int, int, str], ...]:
    """Sort key that puts ``blocks[2]`` before ``blocks[10]``."""
    return tuple((0, p, "") if isinstance(p, int) else (1, 0, p) for p in parts)


def _finite(x: float) -> bool:
    try:
        return math.isfinite(x)
    except OverflowError:  # an integer literal too large for a float
        return False


def _skeleton(doc: Any) -> Any:
    """``doc`` with each vector cut to its first value, for the schema validator.

    The schema says only that a vector is a non-empty array of numbers; walking thousands of
    floats through the JSON Schema validator costs ~20 ms per sidecar, so the values after the
    first are checked by :func:`_entry_problems` instead (type, count, finiteness, norm).
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("blocks"), list):
        return doc
    blocks = [
        {**b, "vector": b["vector"][:1]}
        if isinstance(b, dict) and isinstance(b.get("vector"), list)
        else b
        for b in doc["blocks"]
    ]
    return {**doc, "blocks": blocks}


def _schema_problems(doc: Any) -> list[tuple[str, str]]:
    problems: list[tuple[tuple[tuple[int, int, str], ...], str, str]] = []
    for error in _validator().iter_errors(_skeleton(doc)):
        parts = list(error.absolute_path)
        message = error.message
        if error.validator == "format":  # one wording, whichever format checkers are installed
            message = f"{error.instance!r} is not a valid {error.validator_value}"
        if error.validator == "required" and isinstance(error.instance, dict):
            missing = [k for k in error.validator_value if k not in error.instance]
            if missing:
                parts.append(missing[0])
                message = "is required"
                if missing[0] == "content_hash":
                    message += " (RFC 0013: every entry MUST be pinned to a content_hash)"
        problems.append((_path_order(parts), _json_path(parts), message))
    problems.sort()
    return [(where, message) for _, where, message in problems]


def _entry_problems(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """Checks JSON Schema cannot express; runs only on a schema-valid document."""
    problems: list[tuple[str, str]] = []
    embedder = doc["embedder"]
    dim: int = embedder["dim"]
    normalized = embedder.get("normalized")
    try:
        dt.datetime.fromisoformat(doc["generated_at"])
    except ValueError:
        problems.append(("$.generated_at", f"{doc['generated_at']!r} is not a valid date-time"))
    seen: dict[str, int] = {}
    for i, block in enumerate(doc["blocks"]):
        where = f"$.blocks[{i}]"
        if not _PIN.fullmatch(block["content_hash"]):
            problems.append(
                (f"{where}.content_hash", f"{block['content_hash']!r} is not sha256:<64 hex>")
            )
        key: str | None = block.get("block_key")  # optional, as in the RFC's example
        if key is not None and not key.startswith(block["section"] + "/"):
            problems.append(
                (f"{where}.block_key", f"{key!r} does not belong to section {block['section']!r}")
            )
        if key is not None and key in seen:
            problems.append((f"{where}.block_key", f"{key!r} repeats $.blocks[{seen[key]}]"))
        if key is not None:
            seen.setdefault(key, i)
        vector: list[float] = block["vector"]
        not_number = next(
            (
                j
                for j, x in enumerate(vector)
                if isinstance(x, bool) or not isinstance(x, int | float)
            ),
            None,
        )
        if not_number is not None:
            problems.append(
                (f"{where}.vector[{not_number}]", f"{vector[not_number]!r} is not of type 'number'")
            )
            continue
        if len(vector) != dim:
            problems.append((f"{where}.vector", f"has {len(vector)} values, embedder.dim is {dim}"))
        try:
            values = np.asarray(vector, dtype=np.float64)
            finite = bool(np.isfinite(values).all())
        except OverflowError:  # an integer literal too large for a float
            finite = False
        bad = None if finite else next((j for j, x in enumerate(vector) if not _finite(x)), None)
        if bad is not None:
            problems.append((f"{where}.vector[{bad}]", f"{vector[bad]!r} is not a finite number"))
        elif normalized is True:
            norm = math.sqrt(float(np.dot(values, values)))
            if abs(norm - 1.0) > _NORM_TOLERANCE:
                problems.append(
                    (f"{where}.vector", f"norm is {norm:.6f} but embedder.normalized is true")
                )
    return problems


def validate_sidecar(doc: Any, *, source: str | os.PathLike[str] | None = None) -> None:
    """Check a sidecar against the schema and the rules the schema cannot express.

    Args:
        doc: the parsed sidecar.
        source: the file it came from, named in error messages.

    Raises:
        SidecarError: naming the JSON path of the first problem (``$.blocks[2].vector[5]: ...``);
            further problems are attached as notes.
    """
    depth = json_depth(_skeleton(doc))
    if depth > _MAX_DEPTH:
        problems = [("$", f"nested {depth} deep; a sidecar nests 4 deep")]
    else:
        problems = _schema_problems(doc)
    if not problems:
        problems = _entry_problems(doc)
    if not problems:
        return
    json_path, message = problems[0]
    err = SidecarError(json_path, message, source=None if source is None else os.fspath(source))
    for other_path, other in problems[1:6]:
        err.add_note(f"also: {other_path}: {other}")
    if len(problems) > 6:
        err.add_note(f"... and {len(problems) - 6} more problem(s)")
    raise err


def mark_stale(sidecar: Mapping[str, Any], current_hashes: Mapping[str, str]) -> StaleResult:
    """Mark each entry stale or current against the blocks as they are now.

    An entry is stale when its block's current content_hash differs from its pin, or when the
    block no longer exists. Paragraph entries (``<section>/<n>#p<m>``) follow their block. An
    entry without a ``block_key`` (the RFC's example shape) is current when some block of its
    section has its pin now.

    Args:
        sidecar: a sidecar document; it is validated and not modified.
        current_hashes: ``block_key -> content_hash`` of the file as it is now
            (see :func:`current_block_hashes`).

    Returns:
        A copy with ``stale`` set on every entry, and the stale block keys in entry order (an
        entry without a key is named by its section and position).

    Raises:
        SidecarError: the sidecar is non-conformant.
    """
    validate_sidecar(sidecar)
    marked = copy.deepcopy(dict(sidecar))
    stale: list[str] = []
    by_section = {(key.split("/", 1)[0], pin) for key, pin in current_hashes.items() if "/" in key}
    for i, block in enumerate(marked["blocks"]):
        key: str | None = block.get("block_key")
        if key is None:
            block["stale"] = (block["section"], block["content_hash"]) not in by_section
        else:
            block["stale"] = current_hashes.get(key.split("#", 1)[0]) != block["content_hash"]
        if block["stale"]:
            stale.append(key if key is not None else f"{block['section']} ($.blocks[{i}])")
    return StaleResult(marked, stale)


def uw_text(path: Path) -> str:
    """The text of a ``.uw.md`` file.

    Raises:
        ParseError: the file is not UTF-8.
        OSError: the file cannot be read.
    """
    raw = Path(path).read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ParseError(str(path), f"not UTF-8 text (byte {exc.start})") from None


def current_block_hashes(path: Path, sections: Iterable[str]) -> dict[str, str]:
    """``block_key -> content_hash`` for the blocks of ``sections`` in a ``.uw.md`` file.

    Block keys are numbered as the parser numbers them: ``<section>/<n>``, ``n`` counting the
    blocks of that section from 0 in file order.

    Raises:
        ParseError: the file is not UTF-8 or not a well-formed ``.uw.md`` file.
        OSError: the file cannot be read.
    """
    _, blocks = parse_text(str(path), uw_text(path))
    wanted = set(sections)
    counters: dict[str, int] = {}
    hashes: dict[str, str] = {}
    for section, _line, content in blocks:
        n = counters.get(section, 0)
        counters[section] = n + 1
        if section in wanted:
            hashes[f"{section}/{n}"] = content_hash(content)
    return hashes


def _dumps(doc: Mapping[str, Any]) -> str:
    """Indented JSON, except that each block entry (with its long vector) stays on one line."""

    def dump(value: Any, indent: int | None = None) -> str:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, indent=indent)

    items = list(doc.items())
    lines = ["{"]
    for i, (key, value) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        if key == "blocks" and isinstance(value, list) and value:
            entries = ",\n".join("    " + dump(b) for b in value)
            lines.append(f"  {dump(key)}: [\n{entries}\n  ]{comma}")
        else:
            body = dump(value, indent=2).replace("\n", "\n  ")
            lines.append(f"  {dump(key)}: {body}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_sidecar(
    path: Path | Location, sidecar: Mapping[str, Any], *, validate: bool = True
) -> None:
    """Validate ``sidecar`` and write it to ``path`` (here or on an object store) atomically
    (temp file, synced, then rename; see ``Location.write_bytes``).

    ``validate=False`` skips the check for a document ``build_sidecar`` just returned (it
    validated it; checking twice was two thirds of the time to write a sidecar).

    Raises:
        SidecarError: the sidecar is non-conformant; nothing is written.
        OSError: the file cannot be written; any previous file is left as it was.
    """
    path = Location.of(path)
    if validate:
        validate_sidecar(sidecar, source=str(path))
    path.write_text(_dumps(sidecar))


def read_sidecar(
    path: Path | Location, *, validate: bool = True, max_bytes: int = MAX_SIDECAR_BYTES
) -> dict[str, Any]:
    """Read a sidecar file, validating it unless ``validate`` is false.

    The file is refused unread past ``max_bytes``, and so is JSON that Python cannot take in
    (arrays or objects nested past the interpreter's recursion limit, an integer of more
    digits than ``int`` converts), as any other broken sidecar.

    Raises:
        SidecarError: the file is too large, not JSON, not an object, or (when validating)
            non-conformant.
        OSError: the file cannot be read.
    """
    path = Location.of(path)
    with path.open_input() as fh:
        raw = bytes(fh.read(max_bytes + 1))  # the file may grow between a stat and the read
    if len(raw) > max_bytes:
        raise SidecarError(
            "$", f"the file is over {max_bytes:,} bytes; it is not read", source=str(path)
        )
    try:
        doc = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise SidecarError(
            "$", "not a JSON document that can be read (nested too deeply)", source=str(path)
        ) from None
    except ValueError as exc:  # not UTF-8, not JSON, or an integer past int's digit limit
        raise SidecarError("$", f"not a JSON document ({exc})", source=str(path)) from None
    if not isinstance(doc, dict):
        raise SidecarError(
            "$", f"expected a JSON object, got {type(doc).__name__}", source=str(path)
        )
    if validate:
        validate_sidecar(doc, source=str(path))
    return doc
