"""The ``uw_deals`` kind: RFC 0013 underwriting files (``*.uw.md``) with YAML front matter,
``## section`` headings and fenced ``yaml`` blocks, one block each."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import yaml

from corpus_index.errors import LimitExceededError, ParseError
from corpus_index.kinds import bounded_yaml
from corpus_index.kinds.base import FileKind, narrowed_scope, new_block, utf8_text
from corpus_index.limits import Limits
from corpus_index.records import Block, SourceDoc

if TYPE_CHECKING:
    from corpus_index.collection import CollectionConfig

SUFFIX = ".uw.md"
REQUIRED_FRONT_MATTER = ("uw_version", "deal_id", "asset_class", "geo", "units", "date")
SOURCE_TYPE = "uw_block"


def _yaml_error(path: str, exc: yaml.YAMLError, first_line: int, what: str) -> ParseError:
    mark = getattr(exc, "problem_mark", None)
    line = first_line + mark.line if mark is not None else first_line
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    context_mark = getattr(exc, "context_mark", None)
    if context and context_mark is not None and context_mark.line != (mark.line if mark else None):
        problem = f"{problem} ({context} started at line {first_line + context_mark.line})"
    return ParseError(path, f"broken YAML in {what}: {problem}", line=line)


def _jsonable(value: Any) -> Any:
    """YAML gives dates as date objects; canonical JSON wants strings."""
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def _load_yaml(path: str, text: str, first_line: int, what: str, limits: Limits) -> Any:
    try:
        return bounded_yaml.load(text, limits)
    except bounded_yaml.YamlLimitError as exc:
        raise LimitExceededError(
            path,
            f"YAML in {what} {exc}; simplify it or raise the limit in corpus.yaml",
            line=first_line + exc.line,
        ) from None
    except yaml.YAMLError as exc:
        raise _yaml_error(path, exc, first_line, what) from None


def parse_text(
    path: str, text: str, *, limits: Limits | None = None
) -> tuple[dict[str, Any], list[tuple[str, int, dict[str, Any]]]]:
    """Split a ``.uw.md`` text into front matter and ``(section, line, content)`` blocks.

    Raises:
        ParseError: with the file and the 1-based line of the problem.
        LimitExceededError: the YAML exceeds ``limits`` (default :class:`Limits`).
    """
    limits = limits or Limits()
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise ParseError(path, "missing YAML front matter (the file must start with '---')", line=1)
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        raise ParseError(path, "front matter is not closed by '---'", line=1) from None
    front = _load_yaml(path, "\n".join(lines[1:end]), 2, "front matter", limits) or {}
    if not isinstance(front, dict):
        raise ParseError(path, "front matter must be a mapping", line=2)
    front = _jsonable(front)

    blocks: list[tuple[str, int, dict[str, Any]]] = []
    section: str | None = None
    i = end + 1
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if line.startswith("## "):
            section = stripped[3:].strip()
            if not section:
                raise ParseError(path, "empty section heading", line=i + 1)
        elif stripped in ("```yaml", "```yml"):
            start = i + 1
            j = start
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            if j >= len(lines):
                raise ParseError(path, "fenced yaml block is not closed by ```", line=i + 1)
            if section is None:
                raise ParseError(path, "yaml block before any '## section' heading", line=i + 1)
            what = f"section {section!r}"
            content = _load_yaml(path, "\n".join(lines[start:j]), start + 1, what, limits)
            if not isinstance(content, dict):
                raise ParseError(
                    path, f"block in section {section!r} must be a mapping", line=start + 1
                )
            blocks.append((section, start + 1, _jsonable(content)))
            i = j
        i += 1
    return front, blocks


def _front_matter_fields(path: str, front: dict[str, Any]) -> dict[str, Any]:
    missing = [k for k in REQUIRED_FRONT_MATTER if k not in front]
    if missing:
        raise ParseError(
            path, f"front matter lacks required field(s): {', '.join(missing)}", line=2
        )
    geo = front["geo"]
    if not isinstance(geo, dict):
        raise ParseError(path, "front matter 'geo' must be a mapping with state and metro", line=2)
    units = front["units"]
    if isinstance(units, bool) or not isinstance(units, int) or units < 0:
        raise ParseError(
            path, f"front matter 'units' must be a non-negative integer (got {units!r})", line=2
        )
    try:
        deal_date = dt.date.fromisoformat(str(front["date"])).isoformat()
    except ValueError:
        raise ParseError(
            path, f"front matter 'date' is not an ISO date: {front['date']!r}", line=2
        ) from None
    return {
        "deal_id": str(front["deal_id"]),
        "uw_version": str(front["uw_version"]),
        "asset_class": str(front["asset_class"]),
        "subtype": str(front.get("subtype", "")),
        "state": str(geo.get("state", "")),
        "metro": str(geo.get("metro", "")),
        "units": units,
        "deal_date": deal_date,
        "title": str(front.get("title", "")),
    }


def parse(collection: CollectionConfig, doc: SourceDoc, version: str) -> list[Block]:
    """Blocks of one underwriting file, each inheriting the document's scope and metadata."""
    front, raw_blocks = parse_text(doc.path, utf8_text(doc), limits=collection.limits)
    meta = _front_matter_fields(doc.path, front)
    groups, tier = narrowed_scope(
        doc.path, collection, front, UW_DEALS.default_tier(collection, SOURCE_TYPE), line=2
    )
    counters: dict[str, int] = {}
    blocks: list[Block] = []
    for section, line, content in raw_blocks:
        n = counters.get(section, 0)
        counters[section] = n + 1
        key = f"{section}/{n}"
        blocks.append(
            new_block(
                UW_DEALS,
                collection,
                doc,
                version,
                source_type=SOURCE_TYPE,
                section=section,
                block_key=key,
                content=content,
                line=line,
                acl_groups=groups,
                tier=tier,
                event_date=meta["deal_date"],
                metadata=meta,
            )
        )
    return blocks


# -- the kind ---------------------------------------------------------------------------------

PROMOTED_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("deal_id", pa.string()),
    ("asset_class", pa.string()),
    ("state", pa.string()),
    ("metro", pa.string()),
    ("units", pa.int64()),
    ("deal_date", pa.string()),
)


class UwDeals(FileKind):
    """Underwriting files: blocks by section, embedded per the section registry, filtered by the
    deal's front matter, with RFC 0013 sidecars, and writable through ``CorpusIndex``; a hit
    reads as the block's values (a risk flag's description and mitigant), see
    :func:`~corpus_index.kinds.base.prose`."""

    name = "uw_deals"
    source_types = (SOURCE_TYPE,)
    suffix = SUFFIX
    sidecars = True
    writable = True
    promoted_columns = PROMOTED_COLUMNS

    def parse(self, collection: CollectionConfig, doc: SourceDoc, version: str) -> list[Block]:
        """See :func:`parse`."""
        return parse(collection, doc, version)

    def granularity(self, section: str, sections: Mapping[str, str]) -> str | None:
        """The section registry's granularity; None for a section it leaves out (financials)."""
        return sections.get(section)

    def promote(self, metadata: Mapping[str, Any]) -> dict[str, Any]:
        """The deal's id, asset class, place, size and date, from its front matter."""
        return {name: metadata.get(name) for name, _ in PROMOTED_COLUMNS}


UW_DEALS = UwDeals()
