"""The ``profiles`` kind: researcher profiles (seed "Embeddings"), one ``<slug>/`` folder per
researcher holding ``.md`` / ``.txt`` source files, each of one ``source_type``.

A file's source type is the front matter's ``source_type`` when given, else its file name up to
the first ``--`` or dot: ``cv.md``, ``expertise.md``, ``paper_summary--graph-kernels.md``,
``grant--nsf-2024.txt``. Its tier follows the derivation rule of seed §6: every chunk inherits
its source's tier; ``cv``, ``web`` and ``grant`` default to ``restricted``, the others to the
collection's tier; ``processing.tiers`` in corpus.yaml overrides a source type
(``grant: public``) or one file (``ada-okafor/cv.md: public``), the file winning; no tier is
ever wider than the collection's. Front matter may narrow a file's tier, never widen it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from corpus_index.errors import ConfigError, ParseError
from corpus_index.kinds.base import utf8_text
from corpus_index.kinds.text_files import (
    CHUNKING,
    TextFileKind,
    check_chunking,
    split_front_matter,
)
from corpus_index.records import Block, SourceDoc

if TYPE_CHECKING:
    from corpus_index.collection import CollectionConfig

SOURCE_TYPES = ("expertise", "soul", "paper_summary", "paper_abstract", "grant", "cv", "web")
RESTRICTED_BY_ROLE = frozenset({"cv", "web", "grant"})
TIERS = "tiers"  # processing.tiers: source type or <slug>/<file> -> tier
EXPORTS = "exports"  # processing.exports.restricted: separate | off
RESTRICTED_EXPORTS = ("separate", "off")
CENTROIDS_SLUG = "collection"  # the centroids' folder: no researcher may take the name


def source_type_of(doc_id: str, front: Mapping[str, Any]) -> str | None:
    """The source type a file declares (front matter) or is named for, or None."""
    declared = front.get("source_type")
    if declared is not None:
        return str(declared)
    name = doc_id.rsplit("/", 1)[-1]
    return name.split("--", 1)[0].split(".", 1)[0]


def restricted_exports(collection: CollectionConfig) -> str:
    """``separate`` (the restricted chunks get their own export, outside the public path) or
    ``off`` (they are exported nowhere)."""
    return str(collection.processing.get(EXPORTS, {}).get("restricted", "separate"))


class Profiles(TextFileKind):
    """Researcher profile source files, chunked; the slug is the folder's name."""

    name = "profiles"
    source_types = SOURCE_TYPES
    flat_exports = True
    shardable = False
    unshardable_why = "its flat exports and centroids are built over the whole collection"

    def default_tier(self, collection: CollectionConfig, source_type: str) -> str:
        """The role default (``cv``, ``web``, ``grant``: restricted), or the configured
        override for the source type; never wider than the collection's tier."""
        tiers = collection.processing.get(TIERS, {})
        role = "restricted" if source_type in RESTRICTED_BY_ROLE else collection.tier
        tier = str(tiers.get(source_type, role))
        return "restricted" if collection.tier == "restricted" else tier

    def file_tier(self, collection: CollectionConfig, doc_id: str, source_type: str) -> str:
        """The tier of one file: its ``processing.tiers`` entry, else its source type's."""
        tier = collection.processing.get(TIERS, {}).get(doc_id)
        if tier is None or collection.tier == "restricted":
            return self.default_tier(collection, source_type)
        return str(tier)

    def parse(self, collection: CollectionConfig, doc: SourceDoc, version: str) -> list[Block]:
        """One block per chunk, with the slug, source type and the file's tier.

        Raises:
            ParseError: the file is not in a ``<slug>/`` folder, names no known source type, or
                its front matter would widen its tier; bad front matter; not UTF-8.
        """
        parts = doc.doc_id.split("/")
        if len(parts) != 2:
            raise ParseError(
                doc.path,
                "a profile source file lives directly in its researcher's <slug>/ folder "
                f"(found {doc.doc_id!r}); move it there",
                line=1,
            )
        slug = parts[0]
        if slug == CENTROIDS_SLUG:
            raise ParseError(
                doc.path, f"{CENTROIDS_SLUG!r} is reserved for the collection's centroids", line=1
            )
        front, body, first = split_front_matter(doc.path, utf8_text(doc), collection)
        source_type = source_type_of(doc.doc_id, front)
        if source_type not in SOURCE_TYPES:
            raise ParseError(
                doc.path,
                f"unknown source_type {source_type!r}: name the file <source_type>.md or "
                f"<source_type>--<name>.md, or set source_type in its front matter "
                f"(one of {', '.join(SOURCE_TYPES)})",
                line=2 if "source_type" in front else 1,
            )
        tier = self.file_tier(collection, doc.doc_id, source_type)
        if front.get("tier") == "public" and tier == "restricted":
            raise ParseError(
                doc.path,
                f"front matter tier 'public' would widen this {source_type} file's "
                f"'restricted' tier; set collections.{collection.name}.processing.tiers in "
                "corpus.yaml instead",
                line=2,
            )
        title = str(front.get("title") or f"{slug} {source_type.replace('_', ' ')}")
        return self.chunk_blocks(
            collection,
            doc,
            version,
            source_type=source_type,
            title=title,
            front=front,
            body=body,
            first_line=first,
            default_tier=tier,
            extra={"slug": slug},
        )

    def check_options(self, collection: CollectionConfig, *, key: str) -> None:
        """``processing`` holds ``tiers`` (source type or ``<slug>/<file>`` -> tier),
        ``exports.restricted`` (``separate`` or ``off``) and ``chunking.max_chars``.

        Raises:
            ConfigError: naming the setting that is wrong.
        """
        if collection.format:
            raise ConfigError(f"{key}.format: the profiles kind has no such setting")
        known = (TIERS, EXPORTS, CHUNKING)
        unknown = sorted(set(collection.processing) - set(known))
        if unknown:
            raise ConfigError(
                f"{key}.processing: unknown setting(s) {', '.join(unknown)} "
                f"(known: {', '.join(known)})"
            )
        for name, tier in collection.processing.get(TIERS, {}).items():
            if tier not in ("public", "restricted"):
                raise ConfigError(
                    f"{key}.processing.{TIERS}.{name}: must be public or restricted (got {tier!r})"
                )
            if "/" not in str(name) and name not in SOURCE_TYPES:
                raise ConfigError(
                    f"{key}.processing.{TIERS}.{name}: not a source type "
                    f"({', '.join(SOURCE_TYPES)}) nor a <slug>/<file> path"
                )
        exports = collection.processing.get(EXPORTS, {})
        unknown = sorted(set(exports) - {"restricted"})
        if unknown or restricted_exports(collection) not in RESTRICTED_EXPORTS:
            raise ConfigError(
                f"{key}.processing.{EXPORTS}: only 'restricted: separate' or "
                f"'restricted: off' is known (got {dict(exports)!r})"
            )
        check_chunking(collection, key=key)


PROFILES = Profiles()
