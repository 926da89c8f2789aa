"""Structure-aware chunking of plain text and Markdown (the ``documents`` and ``profiles`` kinds).

A chunk never crosses a heading. Under one heading, whole paragraphs are packed together up to
a size cap; a paragraph over the cap is cut between sentences, and a sentence over the cap
between words. Nothing is cut at a fixed token count regardless of structure. Each chunk keeps
its heading path (the headings above it, outermost first) and the 1-based line it starts on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_MAX_CHARS = 1200

_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^(```|~~~)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")
_WS = re.compile(r"[ \t]+")


@dataclass(frozen=True, slots=True)
class Chunk:
    """One chunk of a text: its heading path, the line it starts on, and its text."""

    heading_path: tuple[str, ...]
    line: int
    text: str

    @property
    def section(self) -> str | None:
        """The heading path joined with `` > ``, or None before the first heading."""
        return " > ".join(self.heading_path) if self.heading_path else None


@dataclass(frozen=True, slots=True)
class _Paragraph:
    path: tuple[str, ...]
    line: int
    text: str


def chunk_text(
    text: str, *, max_chars: int = DEFAULT_MAX_CHARS, markdown: bool = True
) -> list[Chunk]:
    """The chunks of ``text`` in reading order.

    Args:
        text: the document (front matter already removed).
        max_chars: the size cap of a chunk, in characters (at least 40).
        markdown: read ``#`` headings (ATX) as structure; plain text has paragraphs only.

    Raises:
        ValueError: ``max_chars`` is below 40.
    """
    if max_chars < 40:
        raise ValueError(f"max_chars must be at least 40 (got {max_chars})")
    chunks: list[Chunk] = []
    current: list[_Paragraph] = []
    size = 0  # of the current chunk's paragraphs, each with its separator: kept, not summed again

    def flush() -> None:
        nonlocal size
        if current:
            chunks.append(
                Chunk(current[0].path, current[0].line, "\n\n".join(p.text for p in current))
            )
            current.clear()
        size = 0

    for para in _paragraphs(text, markdown=markdown):
        if current and (para.path != current[0].path or size + len(para.text) > max_chars):
            flush()
        if len(para.text) <= max_chars:
            current.append(para)
            size += len(para.text) + 2
            continue
        for piece in _split_long(para.text, max_chars):
            chunks.append(Chunk(para.path, para.line, piece))
    flush()
    return chunks


def _paragraphs(text: str, *, markdown: bool) -> list[_Paragraph]:
    """Paragraphs with their heading path; a fenced block stays one paragraph."""
    out: list[_Paragraph] = []
    path: list[tuple[int, str]] = []
    lines: list[str] = []
    start = 0
    fenced = False

    def end_paragraph() -> None:
        body = "\n".join(_WS.sub(" ", ln.strip()) for ln in lines).strip()
        if body:
            out.append(_Paragraph(tuple(h for _, h in path), start, body))
        lines.clear()

    for n, line in enumerate(text.splitlines(), start=1):
        if markdown and _FENCE.match(line.strip()):
            if not lines:
                start = n
            lines.append(line)
            fenced = not fenced
            if not fenced:
                end_paragraph()
            continue
        if fenced:
            lines.append(line)
            continue
        heading = _HEADING.match(line) if markdown else None
        if heading:
            end_paragraph()
            level = len(heading.group(1))
            while path and path[-1][0] >= level:
                path.pop()
            path.append((level, heading.group(2).strip()))
            continue
        if not line.strip():
            end_paragraph()
            continue
        if not lines:
            start = n
        lines.append(line)
    end_paragraph()
    return out


def _split_long(text: str, max_chars: int) -> list[str]:
    """A paragraph over the cap, cut between sentences (between words for a longer sentence)."""
    parts: list[str] = []
    for sentence in _SENTENCE_END.split(text):
        if len(sentence) <= max_chars:
            parts.append(sentence)
            continue
        words: list[str] = []
        for word in sentence.split():  # an unbroken run longer than the cap is cut in pieces
            words.extend(word[i : i + max_chars] for i in range(0, len(word), max_chars))
        parts.extend(_packed(words, max_chars))
    return _packed(parts, max_chars)


def _packed(parts: list[str], max_chars: int) -> list[str]:
    """``parts`` joined with spaces into as few pieces as fit the cap, in order."""
    pieces: list[str] = []
    current = ""
    for part in parts:
        if current and len(current) + 1 + len(part) > max_chars:
            pieces.append(current)
            current = part
        else:
            current = f"{current} {part}" if current else part
    if current:
        pieces.append(current)
    return pieces
