"""What the ``documents`` and ``profiles`` kinds share: ``.md`` / ``.txt`` files with optional
YAML front matter, cut by the structure-aware chunker into one block per chunk.

Every chunk block has ``content = {"text": <chunk>}``, its heading path (joined with `` > ``) as
its ``section`` (empty before the first heading), ``block_key = chunk/<n>`` and, in its
``metadata``: ``title``, ``heading_path``, ``source_type``, ``chunk_index`` (0-based within its
document) and ``char_count``. The ``heading-context-v1`` input format reads ``title`` and
``heading_path`` to put the chunk in its context.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from corpus_index.chunking import DEFAULT_MAX_CHARS, chunk_text
from corpus_index.errors import ConfigError, LimitExceededError, ParseError
from corpus_index.kinds.base import FileKind, list_files, narrowed_scope, new_block
from corpus_index.kinds.uw_deals import _jsonable, _load_yaml
from corpus_index.records import Block, SourceDoc

if TYPE_CHECKING:
    from corpus_index.collection import CollectionConfig

SUFFIXES = (".md", ".txt")
CHUNKING = "chunking"  # processing.chunking.max_chars: the size cap of a chunk


def split_front_matter(
    path: str, text: str, collection: CollectionConfig
) -> tuple[dict[str, Any], str, int]:
    """``(front matter, body, line the body starts on)``; a text without ``---`` on its first
    line has no front matter.

    Raises:
        ParseError: the front matter is not closed, not YAML or not a mapping.
    """
    lines = text.split("\n")
    if not lines or lines[0].strip() != "---":
        return {}, text, 1
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        raise ParseError(path, "front matter is not closed by '---'", line=1) from None
    front = _load_yaml(path, "\n".join(lines[1:end]), 2, "front matter", collection.limits) or {}
    if not isinstance(front, dict):
        raise ParseError(path, "front matter must be a mapping", line=2)
    return _jsonable(front), "\n".join(lines[end + 1 :]), end + 2


def max_chars(collection: CollectionConfig) -> int:
    """The collection's chunk size cap (``processing.chunking.max_chars``)."""
    value = collection.processing.get(CHUNKING, {}).get("max_chars", DEFAULT_MAX_CHARS)
    return int(value)


def check_chunking(collection: CollectionConfig, *, key: str) -> None:
    """``processing.chunking`` holds only ``max_chars``, an integer of at least 40.

    Raises:
        ConfigError: naming the setting.
    """
    chunking = collection.processing.get(CHUNKING, {})
    if not isinstance(chunking, Mapping):
        raise ConfigError(f"{key}.processing.{CHUNKING}: must be a mapping")
    unknown = sorted(set(chunking) - {"max_chars"})
    if unknown:
        raise ConfigError(f"{key}.processing.{CHUNKING}: unknown setting(s) {', '.join(unknown)}")
    value = chunking.get("max_chars", DEFAULT_MAX_CHARS)
    if isinstance(value, bool) or not isinstance(value, int) or value < 40:
        raise ConfigError(
            f"{key}.processing.{CHUNKING}.max_chars: must be an integer >= 40 (got {value!r})"
        )


class TextFileKind(FileKind):
    """``.md`` and ``.txt`` files under the root, one document each (doc_id: the posix path below
    the root, suffix kept, so ``a.md`` and ``a.txt`` are two documents)."""

    name = ""  # each kind names itself

    def parse(self, collection: CollectionConfig, doc: SourceDoc, version: str) -> list[Block]:
        """Each kind parses its own files (see :meth:`chunk_blocks`)."""
        raise NotImplementedError

    def list_documents(self, collection: CollectionConfig) -> list[tuple[str, str]]:
        """Every ``.md`` and ``.txt`` file, in doc_id order, none opened."""
        found = [
            (doc_id + suffix, path)
            for suffix in SUFFIXES
            for doc_id, path in list_files(collection.path, suffix)
            if collection.owns(doc_id + suffix)
        ]
        return sorted(found)

    def fingerprint_files(self, collection: CollectionConfig) -> list[tuple[str, str]]:
        """Every document file, named by its path below the root."""
        return self.list_documents(collection)

    def excerpt(self, text: str, *, section: str) -> str:
        """The chunk's own text: the input less its context line (and ``text:`` label)."""
        body = text.split("\n", 1)[1] if "\n" in text else text
        body = body.removeprefix("text: ")
        return " ".join(body.split())

    def chunk_blocks(
        self,
        collection: CollectionConfig,
        doc: SourceDoc,
        version: str,
        *,
        source_type: str,
        title: str,
        front: Mapping[str, Any],
        body: str,
        first_line: int,
        default_tier: str,
        extra: Mapping[str, Any] | None = None,
    ) -> list[Block]:
        """One block per chunk of ``body``, in the scope the front matter narrows.

        Raises:
            ParseError: the front matter widens the scope, or the file is not UTF-8.
            LimitExceededError: a chunk is over ``limits.max_block_chars``.
        """
        groups, tier = narrowed_scope(
            doc.path, collection, front, default_tier, line=2 if front else 1
        )
        chunks = chunk_text(
            body, max_chars=max_chars(collection), markdown=not doc.path.endswith(".txt")
        )
        blocks = []
        for n, chunk in enumerate(chunks):
            if len(chunk.text) > collection.limits.max_block_chars:
                raise LimitExceededError(
                    doc.path,
                    f"chunk is {len(chunk.text)} characters, over limits.max_block_chars",
                    line=first_line + chunk.line - 1,
                )
            blocks.append(
                new_block(
                    self,
                    collection,
                    doc,
                    version,
                    source_type=source_type,
                    section=chunk.section or "",
                    block_key=f"chunk/{n}",
                    content={"text": chunk.text},
                    line=first_line + chunk.line - 1,
                    acl_groups=groups,
                    tier=tier,
                    metadata={
                        "title": title,
                        "heading_path": list(chunk.heading_path),
                        "source_type": source_type,
                        "chunk_index": n,
                        "char_count": len(chunk.text),
                        **(extra or {}),
                    },
                )
            )
        return blocks
