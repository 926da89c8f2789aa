"""Canonical embedding inputs: named, versioned rules that turn a block into embedder input text.

A format is never edited once published; a changed rule is a new name (``default-v2``, ...),
so every stored vector can say exactly which text produced it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from corpus_index.hashing import input_hash

_WS = re.compile(r"\s+")
_PARAGRAPH = re.compile(r"\n\s*\n")


def _norm(value: str) -> str:
    return _WS.sub(" ", value).strip()


def _string_fields(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """Depth-first, source-order ``(path, string)`` pairs; non-strings are skipped."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, child in value.items():
            if path == "" and key == "_meta":
                continue
            yield from _string_fields(child, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from _string_fields(child, f"{path}[{i}]")


def _notes(content: dict[str, Any]) -> list[str]:
    meta = content.get("_meta")
    if not isinstance(meta, dict):
        return []
    notes = meta.get("notes")
    if isinstance(notes, str):
        notes = [notes]
    if not isinstance(notes, list):
        return []
    return [n for n in notes if isinstance(n, str)]


def default_v1(section: str, content: dict[str, Any]) -> str:
    """RFC 0013 ``default-v1``: section name, ``path: value`` for each string field, then notes."""
    parts = [section]
    for path, value in _string_fields(content, ""):
        text = _norm(value)
        if text:
            parts.append(f"{path}: {text}")
    for note in _notes(content):
        text = _norm(note)
        if text:
            parts.append(f"notes: {text}")
    return "\n".join(parts)


def passage_v1(content: dict[str, Any]) -> str:
    """Passage records (BEIR): ``title text``, the convention retrieval baselines use."""
    return _norm(f"{content.get('title', '')} {content.get('text', '')}")


@dataclass(frozen=True, slots=True)
class InputUnit:
    """One embedder input derived from a block (a whole block, or one paragraph of it)."""

    suffix: str  # "" for the whole block, "#p<n>" for paragraph granularity
    text: str
    input_hash: str


def _default_v1_units(
    section: str,
    content: dict[str, Any],
    source_type: str,
    granularity: str,
    document: dict[str, Any] | None = None,
) -> list[str]:
    if source_type == "passage":
        return [passage_v1(content)]
    if granularity == "block":
        return [default_v1(section, content)]
    texts: list[str] = []
    for path, value in _string_fields(content, ""):
        for para in _PARAGRAPH.split(value):
            text = _norm(para)
            if text:
                texts.append(f"{section}\n{path}: {text}")
    return texts


def document_context(document: dict[str, Any]) -> str:
    """One line situating a block in its document: title, asset class, place, size, date.

    Built from the document's front matter (the block's ``metadata``); missing fields are left
    out, and an empty front matter gives ''.
    """
    title = _norm(str(document.get("title") or document.get("deal_id") or ""))
    asset = _norm(str(document.get("asset_class") or "")).replace("_", " ")
    place = ", ".join(
        _norm(str(document[k])) for k in ("metro", "state") if document.get(k) not in (None, "")
    )
    parts = [title]
    if asset or place:
        parts.append(" ".join(p for p in (asset, f"in {place}" if place else "") if p))
    if isinstance(document.get("units"), int):
        parts.append(f"{document['units']} units")
    if document.get("deal_date"):
        parts.append(str(document["deal_date"]))
    return " | ".join(p for p in parts if p)


def _default_v2_units(
    section: str,
    content: dict[str, Any],
    source_type: str,
    granularity: str,
    document: dict[str, Any],
) -> list[str]:
    """``default-v2``: ``default-v1`` with the document's context line first (contextual
    retrieval: a block that never names its property still carries where and what it is)."""
    units = _default_v1_units(section, content, source_type, granularity, document)
    if source_type == "passage":
        return units
    context = document_context(document)
    return [f"{context}\n{u}" if context else u for u in units]


def heading_context(document: dict[str, Any]) -> str:
    """A chunk's context line: its document's title, then its heading path, joined with
    `` > `` (a first heading that repeats the title is not repeated)."""
    title = _norm(str(document.get("title") or ""))
    path = [_norm(str(h)) for h in document.get("heading_path") or []]
    if path and title and path[0].casefold() == title.casefold():
        path = path[1:]
    return " > ".join(p for p in [title, *path] if p)


def _heading_context_v1_units(
    section: str,
    content: dict[str, Any],
    source_type: str,
    granularity: str,
    document: dict[str, Any],
) -> list[str]:
    """``heading-context-v1``: a text chunk (a block whose metadata has a ``heading_path``: the
    ``documents`` and ``profiles`` kinds) as its context line (:func:`heading_context`), a
    newline and its text, whitespace inside each line collapsed; any other block as
    ``default-v1``."""
    if "heading_path" not in document or not isinstance(content.get("text"), str):
        return _default_v1_units(section, content, source_type, granularity, document)
    text = "\n".join(_norm(line) for line in content["text"].split("\n") if line.strip())
    context = heading_context(document)
    return [f"{context}\n{text}" if context else text]


FormatFn = Callable[[str, dict[str, Any], str, str, dict[str, Any]], list[str]]
INPUT_FORMATS: dict[str, FormatFn] = {
    "default-v1": _default_v1_units,
    "default-v2": _default_v2_units,
    "heading-context-v1": _heading_context_v1_units,
}


def input_units(
    input_format: str,
    *,
    section: str,
    content: dict[str, Any],
    source_type: str,
    granularity: str = "block",
    document: dict[str, Any] | None = None,
) -> list[InputUnit]:
    """Embedder inputs of one block under ``input_format``.

    Raises:
        KeyError: the format is unknown (configuration validation catches this earlier).
    """
    texts = INPUT_FORMATS[input_format](section, content, source_type, granularity, document or {})
    if granularity == "block" or source_type == "passage":
        return [InputUnit("", t, input_hash(input_format, t)) for t in texts if t]
    return [InputUnit(f"#p{i}", t, input_hash(input_format, t)) for i, t in enumerate(texts)]
