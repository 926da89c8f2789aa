"""The collection-kind protocol, table-driven over every registered kind, and its registry."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from corpus_index import kinds
from corpus_index.config import DEFAULT_SECTIONS, CollectionConfig, parse_config
from corpus_index.errors import ConfigError
from corpus_index.index_store import PROMOTED_COLUMNS
from corpus_index.inputs import input_units
from corpus_index.kinds import KINDS, KindDefaults, kind_of, uw_deals
from tests.corpusgen import deal_text

ROOT = Path(__file__).resolve().parents[1]


def write_deals(root: Path) -> None:
    (root / "nested").mkdir(parents=True, exist_ok=True)
    for doc_id in ("nested/deal-b", "deal-a"):
        text = deal_text(doc_id.rsplit("/", 1)[-1].upper(), tenant="lab", acl=["lab"])
        (root / f"{doc_id}.uw.md").write_text(text, encoding="utf-8")
    (root / "readme.md").write_text("not a deal", encoding="utf-8")


def write_passages(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    records = [
        {"_id": "p2", "title": "Rates", "text": "Cap rates rose: a lot."},
        {"_id": "p1", "title": "", "text": "Rents fell."},
    ]
    (root / "corpus.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")


def write_messages(root: Path) -> None:
    (root / "chat").mkdir(parents=True, exist_ok=True)
    records = [
        {"id": "m2", "source": "discord_chat", "channel": "staff", "author": "Sarah",
         "timestamp": "2025-12-10T09:00:00+11:00", "location": "Picton", "text": "Pumpkin?"},
        {"id": "m1", "source": "discord_chat", "channel": "staff", "author": "Mike",
         "timestamp": "2025-12-10T09:05:00+11:00", "text": "yes pumpkin please"},
    ]  # fmt: skip
    lines = "\n".join(json.dumps(r) for r in records) + "\n"
    (root / "chat" / "staff.jsonl").write_text(lines, encoding="utf-8")
    (root / "notes.txt").write_text("not a stream", encoding="utf-8")


def write_documents(root: Path) -> None:
    (root / "policies").mkdir(parents=True, exist_ok=True)
    (root / "policies" / "leave.md").write_text("# Leave\n\n## Parental\n\nSixteen weeks.\n")
    (root / "notes.txt").write_text("Plain notes.\n", encoding="utf-8")
    (root / "image.png").write_bytes(b"not text")


def write_profiles(root: Path) -> None:
    (root / "ada").mkdir(parents=True, exist_ok=True)
    (root / "ada" / "expertise.md").write_text("# Expertise\n\nGraph kernels.\n")
    (root / "ada" / "cv.md").write_text("# CV\n\nPhD 2008.\n")


@dataclass(frozen=True)
class Case:
    kind: str
    write: Callable[[Path], None]
    doc_ids: list[str]  # in reading order
    listed: bool  # one file per document, listed without reading
    fingerprinted: list[str]
    units: dict[str, str | None]  # section -> granularity under the default section registry
    promoted: dict[str, Any]  # of the first block
    capabilities: dict[str, bool]
    excerpt: tuple[str, str, str]  # stored text, section -> excerpt


CASES = [
    Case(
        kind="uw_deals",
        write=write_deals,
        doc_ids=["deal-a", "nested/deal-b"],
        listed=True,
        fingerprinted=["deal-a.uw.md", "nested/deal-b.uw.md"],
        units={"risk_assessment": "block", "property": "block", "debt_terms": None},
        promoted={
            "deal_id": "DEAL-A",
            "asset_class": "multifamily",
            "state": "AZ",
            "metro": "Phoenix",
            "units": 40,
            "deal_date": "2026-01-15",
        },
        capabilities={"sidecars": True, "writable": True, "grouped": False},
        excerpt=(
            "risk_assessment\nflags[0].id: roof_age\nflags[0].severity: high\n"
            "flags[0].description: Roofs leak: all of them\nflags[0].mitigant: New roofs in year one",
            "risk_assessment",
            "Roof age. Severity: high. Roofs leak: all of them. New roofs in year one.",
        ),
    ),
    Case(
        kind="beir",
        write=write_passages,
        doc_ids=["p2", "p1"],
        listed=False,
        fingerprinted=["corpus.jsonl"],
        units={"passage": "block", "anything": "block"},
        promoted={},
        capabilities={"sidecars": False, "writable": False, "grouped": False},
        excerpt=("Rates Cap rates rose: a lot.", "passage", "Rates Cap rates rose: a lot."),
    ),
    Case(
        kind="messages",
        write=write_messages,
        doc_ids=["m2", "m1"],
        listed=False,
        fingerprinted=["chat/staff.jsonl"],
        units={"discord_chat": "block", "irc_chat": "block", "irc_system": None},
        promoted={},
        capabilities={"sidecars": False, "writable": False, "grouped": True},
        excerpt=(
            "discord_chat\nauthor: Mike\ntext: yes pumpkin please",
            "discord_chat",
            "Mike: yes pumpkin please.",
        ),
    ),
    Case(
        kind="documents",
        write=write_documents,
        doc_ids=["notes.txt", "policies/leave.md"],
        listed=True,
        fingerprinted=["notes.txt", "policies/leave.md"],
        units={"Leave > Parental": "block", "": "block"},
        promoted={},
        capabilities={"sidecars": False, "writable": False, "grouped": False},
        excerpt=("leave > Parental\nSixteen weeks.", "Leave > Parental", "Sixteen weeks."),
    ),
    Case(
        kind="profiles",
        write=write_profiles,
        doc_ids=["ada/cv.md", "ada/expertise.md"],
        listed=True,
        fingerprinted=["ada/cv.md", "ada/expertise.md"],
        units={"Expertise": "block"},
        promoted={},
        capabilities={"sidecars": False, "grouped": False, "flat_exports": True},
        excerpt=("ada expertise\ntext: Graph kernels.", "Expertise", "Graph kernels."),
    ),
]
IDS = [c.kind for c in CASES]


def collection_of(case: Case, root: Path) -> CollectionConfig:
    return CollectionConfig(
        name="c", kind=case.kind, path=root, tenant="lab", acl_groups=("lab",), tier="public"
    )


@pytest.fixture(params=CASES, ids=IDS)
def case(request: pytest.FixtureRequest) -> Case:
    return request.param  # type: ignore[no-any-return]


def test_every_registered_kind_has_a_case() -> None:
    assert sorted(KINDS) == sorted(IDS)


def test_kind_is_found_under_its_name(case: Case, tmp_path: Path) -> None:
    kind = kind_of(collection_of(case, tmp_path))
    assert kind is KINDS[case.kind] and kind.name == case.kind


def test_reads_documents_in_a_stable_order(case: Case, tmp_path: Path) -> None:
    case.write(tmp_path)
    coll = collection_of(case, tmp_path)
    docs = list(kinds.read_documents(coll))
    assert [d.doc_id for d in docs] == case.doc_ids
    listing = kinds.list_documents(coll)
    assert (listing is not None) == case.listed
    if listing is not None:
        assert [doc_id for doc_id, _ in listing] == case.doc_ids
    paths = {d.doc_id: d.path for d in reversed(docs)}
    again = list(kinds.load_documents(coll, paths))
    assert [d.doc_id for d in again] == sorted(case.doc_ids)
    assert {d.doc_id: d.raw for d in again} == {d.doc_id: d.raw for d in docs}


def test_fingerprint_names_the_files_and_moves_with_them(case: Case, tmp_path: Path) -> None:
    coll = collection_of(case, tmp_path / "root")
    assert kinds.fingerprint(coll) == "missing"
    case.write(coll.path)
    files = KINDS[case.kind].fingerprint_files(coll)
    assert [rel for rel, _ in files] == case.fingerprinted
    before = kinds.fingerprint(coll)
    assert before.startswith(f"{len(files)}:")
    Path(files[0][1]).write_text("changed\n", encoding="utf-8")
    assert kinds.fingerprint(coll) != before


def test_blocks_carry_the_kind_and_its_default_tier(case: Case, tmp_path: Path) -> None:
    case.write(tmp_path)
    coll = collection_of(case, tmp_path)
    kind = kind_of(coll)
    for doc in kinds.read_documents(coll):
        blocks = kinds.parse_document(coll, doc, "0" * 16)
        assert blocks
        for b in blocks:
            assert b.kind == case.kind and b.tenant_id == "lab"
            # the collection's tier, but where a source type's role restricts it (profiles)
            role = "restricted" if b.source_type in ("cv", "web", "grant") else "public"
            assert b.tier == kind.default_tier(coll, b.source_type) == role


def test_embeddable_units_follow_the_section_registry(case: Case) -> None:
    kind = KINDS[case.kind]
    for section, granularity in case.units.items():
        assert kind.granularity(section, DEFAULT_SECTIONS) == granularity
        assert kinds.unit_granularity(case.kind, section, DEFAULT_SECTIONS) == granularity


def test_promoted_columns_are_declared_and_filled(case: Case, tmp_path: Path) -> None:
    case.write(tmp_path)
    coll = collection_of(case, tmp_path)
    kind = kind_of(coll)
    first = kinds.parse_document(coll, next(kinds.read_documents(coll)), "0" * 16)[0]
    promoted = kind.promote(first.metadata)
    assert promoted == case.promoted
    declared = dict(kind.promoted_columns)
    assert set(promoted) <= set(declared)
    assert set(declared.items()) <= set(PROMOTED_COLUMNS)


def test_capabilities(case: Case) -> None:
    kind = KINDS[case.kind]
    assert {name: getattr(kind, name) for name in case.capabilities} == case.capabilities


def test_excerpt_reads_as_the_kind_renders_it(case: Case) -> None:
    text, section, expected = case.excerpt
    assert kinds.excerpt_of({"kind": case.kind, "text": text, "section": section}) == expected


# -- uw_deals excerpts: values, never field paths ----------------------------------------------

DOTTED_OR_INDEXED = re.compile(r"\w\[\d+\]|[A-Za-z_]\w*\.[A-Za-z_]\w*: ")


def _paths(value: Any, path: str = "") -> list[str]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _paths(v, f"{path}.{k}" if path else k)]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _paths(v, f"{path}[{i}]")]
    return [path] if isinstance(value, str) else []


@pytest.mark.parametrize("input_format", ["default-v1", "default-v2"])
@pytest.mark.parametrize("granularity", ["block", "paragraph"])
def test_uw_deals_excerpt_has_no_field_paths(input_format: str, granularity: str) -> None:
    files = sorted((ROOT / "sample_corpus").rglob("*.uw.md"))
    assert files
    seen = 0
    for path in files:
        front, blocks = uw_deals.parse_text(str(path), path.read_text(encoding="utf-8"))
        for section, _, content in blocks:
            if section not in DEFAULT_SECTIONS:
                continue
            units = input_units(
                input_format,
                section=section,
                content=content,
                source_type=uw_deals.SOURCE_TYPE,
                granularity=granularity,
                document=front,
            )
            for unit in units:
                assert f"{section}\n" in unit.text  # the canonical input keeps its paths
                shown = kinds.excerpt_of(
                    {"kind": "uw_deals", "text": unit.text, "section": section}
                )
                assert shown and not DOTTED_OR_INDEXED.search(shown), shown
                assert not any(f"{p}: " in shown for p in _paths(content)), shown
                assert not shown.startswith(section)
                seen += 1
    assert seen > 50


def test_uw_deals_risk_flag_excerpt_is_its_description_and_mitigant() -> None:
    path = ROOT / "sample_corpus" / "meridian" / "deal-2026-0042.uw.md"
    _, blocks = uw_deals.parse_text(str(path), path.read_text(encoding="utf-8"))
    ((content,),) = [[c for s, _, c in blocks if s == "risk_assessment"]]
    (unit,) = input_units(
        "default-v1", section="risk_assessment", content=content, source_type="uw_block"
    )
    shown = kinds.excerpt_of({"kind": "uw_deals", "text": unit.text, "section": "risk_assessment"})
    flag = content["flags"][0]
    assert shown.startswith("Building systems end of life. Severity: high. Domestic water supply")
    for field in ("description", "mitigant", "resolution"):
        assert " ".join(flag[field].split()) in shown


def test_a_row_of_an_unregistered_kind_shows_its_text() -> None:
    assert kinds.excerpt_of({"kind": "gone", "text": "a\n  b: c", "section": "a"}) == "a b: c"


# -- the registry -------------------------------------------------------------------------------


def test_unknown_kind_names_the_collection_and_the_kind(tmp_path: Path) -> None:
    coll = CollectionConfig(name="chat", kind="slack", path=tmp_path, tenant="t", acl_groups=("g",))
    with pytest.raises(ConfigError) as info:
        kind_of(coll)
    assert str(info.value) == (
        "collections.chat.kind: unknown collection kind 'slack' (known: beir, documents, messages, profiles, "
        "uw_deals)"
    )


def test_config_allows_exactly_the_registered_kinds(tmp_path: Path) -> None:
    def config(kind: str) -> dict[str, Any]:
        return {
            "collections": {"c": {"kind": kind, "path": ".", "tenant": "t", "acl_groups": ["g"]}},
            "profiles": {"p": {"embedder": "hash:v1-8"}},
        }

    for name in KINDS:
        assert parse_config(config(name), path=tmp_path / "corpus.yaml").collections["c"].kind
    with pytest.raises(
        ConfigError,
        match=r"collections\.c\.kind: must be one of uw_deals, beir, messages, documents, profiles \(got .slack.\)",
    ):
        parse_config(config("slack"), path=tmp_path / "corpus.yaml")


class _Extra(KindDefaults):
    name = "extra"
    promoted_columns = (("channel", pa.string()),)


def test_register_refuses_a_taken_name_and_columns_the_schema_lacks() -> None:
    with pytest.raises(ConfigError, match="'uw_deals' is already registered"):
        kinds.register(KINDS["uw_deals"])
    with pytest.raises(ConfigError, match="promotes channel, which generation tables lack"):
        kinds.register(_Extra())  # type: ignore[arg-type]
    assert "extra" not in KINDS


def test_promoted_columns_are_the_union_the_kinds_declare() -> None:
    union = [col for kind in KINDS.values() for col in kind.promoted_columns]
    assert list(PROMOTED_COLUMNS) == list(dict(union).items())
    assert [name for name, _ in PROMOTED_COLUMNS] == [
        "deal_id",
        "asset_class",
        "state",
        "metro",
        "units",
        "deal_date",
    ]
