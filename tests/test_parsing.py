"""Parsing (DESIGN §3): ``.uw.md`` underwriting files and BEIR records into blocks."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from corpus_index.config import CollectionConfig
from corpus_index.errors import ConfigError, ParseError
from corpus_index.hashing import sha256_hex
from corpus_index.kinds import beir, parse_document, read_documents
from corpus_index.kinds import uw_deals as uw
from corpus_index.records import Block, SourceDoc
from corpus_index.sources import document_version
from tests.corpusgen import deal_text

TENANT = "alpha"
GROUPS = ("alpha-uw", "alpha-credit")


def collection(
    root: Path, *, kind: str = "uw_deals", tier: str = "restricted", name: str = "alpha-deals"
) -> CollectionConfig:
    return CollectionConfig(
        name=name, kind=kind, path=root, tenant=TENANT, acl_groups=GROUPS, tier=tier
    )


def doc_from_text(
    text: str, *, doc_id: str = "deal-1", path: str = "/src/deal-1.uw.md"
) -> SourceDoc:
    raw = text.encode("utf-8")
    return SourceDoc(doc_id=doc_id, path=path, raw=raw, size=len(raw), mtime=0.0)


def parse_text(text: str, coll: CollectionConfig | None = None) -> list[Block]:
    doc = doc_from_text(text)
    coll = coll or collection(Path("/src"))
    return uw.parse(coll, doc, document_version(sha256_hex(doc.raw), coll.block_scope))


def line_of(text: str, needle: str) -> int:
    """1-based line of the first line of ``text`` that contains ``needle`` (exactly once)."""
    hits = [i for i, line in enumerate(text.splitlines(), start=1) if needle in line]
    assert len(hits) == 1, f"{needle!r} must occur on exactly one line, found {hits}"
    return hits[0]


def independent_content_hash(content: object) -> str:
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


HANDWRITTEN = """\
---
uw_version: "1.1"
deal_id: DEAL-7
title: Saguaro Flats
asset_class: multifamily
subtype: garden
geo:
  state: AZ
  metro: Phoenix
units: 120
date: 2026-03-02
---

# Saguaro Flats

Free prose between sections is ignored.

## property
```yaml
name: Saguaro Flats
built: 1986
```

## risk_assessment
```yaml
flags:
  - id: roof
    description: Roofs are past their useful life.
inspected: 2026-02-20
```

```yaml
_meta:
  notes: second block in the same section
summary: Deferred maintenance.
```

## debt_terms
```yml
loan_amount: 1000000
```
"""


# -- a valid file --------------------------------------------------------------------------


def test_valid_file_gives_one_block_per_fenced_yaml_keyed_by_section_and_position() -> None:
    blocks = parse_text(HANDWRITTEN)
    assert [b.block_key for b in blocks] == [
        "property/0",
        "risk_assessment/0",
        "risk_assessment/1",
        "debt_terms/0",
    ]
    assert [b.section for b in blocks] == [
        "property",
        "risk_assessment",
        "risk_assessment",
        "debt_terms",
    ]
    assert blocks[0].content == {"name": "Saguaro Flats", "built": 1986}
    # YAML dates become ISO strings so the content has a canonical JSON form
    assert blocks[1].content["inspected"] == "2026-02-20"
    assert blocks[2].content == {
        "_meta": {"notes": "second block in the same section"},
        "summary": "Deferred maintenance.",
    }


def test_block_line_is_the_first_line_inside_its_fence() -> None:
    blocks = parse_text(HANDWRITTEN)
    assert blocks[0].line == line_of(HANDWRITTEN, "name: Saguaro Flats")
    assert blocks[1].line == line_of(HANDWRITTEN, "flags:")
    assert blocks[2].line == line_of(HANDWRITTEN, "_meta:")
    assert blocks[3].line == line_of(HANDWRITTEN, "loan_amount:")


def test_identity_fields_come_from_content_and_version() -> None:
    doc = doc_from_text(HANDWRITTEN, doc_id="sub/deal-7")
    version = hashlib.sha256(HANDWRITTEN.encode("utf-8")).hexdigest()[:16]
    blocks = uw.parse(collection(Path("/src")), doc, version)
    for b in blocks:
        assert b.content_hash == independent_content_hash(b.content)
        assert b.chunk_ref == f"chunk://alpha-deals/sub/deal-7/v{version}/{b.block_key}"
        assert b.source_version == version
        assert b.source_id == "alpha-deals/sub/deal-7"
        assert (b.collection, b.kind, b.source_type, b.path) == (
            "alpha-deals",
            "uw_deals",
            "uw_block",
            "/src/deal-1.uw.md",
        )


def test_blocks_inherit_scope_and_front_matter_metadata() -> None:
    blocks = parse_text(HANDWRITTEN)
    for b in blocks:
        assert b.tenant_id == TENANT
        assert b.acl_groups == GROUPS
        assert b.tier == "restricted"
        assert b.event_date == "2026-03-02"
        assert b.metadata == {
            "deal_id": "DEAL-7",
            "uw_version": "1.1",
            "asset_class": "multifamily",
            "subtype": "garden",
            "state": "AZ",
            "metro": "Phoenix",
            "units": 120,
            "deal_date": "2026-03-02",
            "title": "Saguaro Flats",
        }


def test_generated_deal_parses_with_its_narrowed_acl() -> None:
    text = deal_text(
        "DEAL-GEN", tenant=TENANT, acl=["alpha-uw"], state="TX", metro="Dallas", units=33
    )
    blocks = parse_text(text)
    assert [b.block_key for b in blocks] == [
        "property/0",
        "market_analysis/0",
        "risk_assessment/0",
        "borrower_sponsor/0",
        "debt_terms/0",
    ]
    assert {b.acl_groups for b in blocks} == {("alpha-uw",)}
    meta = blocks[0].metadata
    assert (meta["deal_id"], meta["state"], meta["metro"], meta["units"], meta["deal_date"]) == (
        "DEAL-GEN",
        "TX",
        "Dallas",
        33,
        "2026-01-15",
    )


def test_content_hash_ignores_key_order_but_not_values() -> None:
    a = HANDWRITTEN.replace("name: Saguaro Flats\nbuilt: 1986", "built: 1986\nname: Saguaro Flats")
    b = HANDWRITTEN.replace("built: 1986", "built: 1987")
    base, reordered, changed = parse_text(HANDWRITTEN)[0], parse_text(a)[0], parse_text(b)[0]
    assert reordered.content_hash == base.content_hash
    assert changed.content_hash != base.content_hash


SCOPE_OK: list[tuple[str, str, str, tuple[str, ...], str]] = [
    # (case, collection tier, extra front matter, expected groups, expected tier)
    ("nothing declared inherits", "restricted", "", GROUPS, "restricted"),
    ("same tenant is allowed", "restricted", "tenant: alpha\n", GROUPS, "restricted"),
    ("acl subset narrows", "restricted", "acl: [alpha-credit]\n", ("alpha-credit",), "restricted"),
    ("acl as a single string", "restricted", "acl: alpha-uw\n", ("alpha-uw",), "restricted"),
    ("public collection, restricted doc", "public", "tier: restricted\n", GROUPS, "restricted"),
    ("public collection inherits public", "public", "", GROUPS, "public"),
]


@pytest.mark.parametrize(
    ("case", "coll_tier", "extra", "groups", "tier"), SCOPE_OK, ids=[c[0] for c in SCOPE_OK]
)
def test_scope_narrowing_rules(
    case: str, coll_tier: str, extra: str, groups: tuple[str, ...], tier: str
) -> None:
    text = HANDWRITTEN.replace("units: 120\n", f"units: 120\n{extra}")
    blocks = parse_text(text, collection(Path("/src"), tier=coll_tier))
    assert {(b.acl_groups, b.tier, b.tenant_id) for b in blocks} == {(groups, tier, TENANT)}


# -- broken files: every error names the file and the 1-based line ---------------------------

BROKEN_BLOCK = """\
---
uw_version: "1.1"
deal_id: D-1
asset_class: office
geo: {state: CA, metro: Oakland}
units: 10
date: 2026-01-01
---

## property
```yaml
name: fine
```

## risk_assessment
```yaml
flags:
  - id: a
summary: ok
score: 3
  dangling: value
```
"""


def test_broken_yaml_inside_a_block_reports_the_broken_line() -> None:
    with pytest.raises(ParseError) as info:
        parse_text(BROKEN_BLOCK)
    expected = line_of(BROKEN_BLOCK, "dangling: value")
    assert info.value.line == expected
    assert info.value.path == "/src/deal-1.uw.md"
    assert str(info.value).startswith(
        f"/src/deal-1.uw.md:{expected}: broken YAML in section 'risk_assessment'"
    )


def test_broken_yaml_in_front_matter_reports_the_broken_line() -> None:
    text = BROKEN_BLOCK.replace("units: 10\n", "units: 10\n  oops: 1\n")
    with pytest.raises(ParseError) as info:
        parse_text(text)
    assert info.value.line == line_of(text, "oops: 1")
    assert "front matter" in info.value.reason


FRONT = (
    'uw_version: "1.1"\ndeal_id: D-1\nasset_class: office\n'
    "geo: {state: CA, metro: Oakland}\nunits: 10\ndate: 2026-01-01\n"
)

BROKEN: list[tuple[str, str, str, str]] = [
    # (case, text, text on the reported line (or "@1"/"@2" for a fixed line), message fragment)
    (
        "missing front matter",
        "## property\n```yaml\na: 1\n```\n",
        "@1",
        "missing YAML front matter",
    ),
    ("empty file", "", "@1", "missing YAML front matter"),
    ("front matter never closed", f"---\n{FRONT}## property\n", "@1", "not closed by '---'"),
    ("front matter not a mapping", "---\n- a\n- b\n---\n", "@2", "must be a mapping"),
    (
        "unclosed fence",
        f"---\n{FRONT}---\n## property\n```yaml\na: 1\nb: 2\n",
        "```yaml",
        "not closed by ```",
    ),
    (
        "block before any section",
        f"---\n{FRONT}---\n```yaml\na: 1\n```\n",
        "```yaml",
        "before any '## section'",
    ),
    (
        "empty section heading",
        f"---\n{FRONT}---\n##   \n```yaml\na: 1\n```\n",
        "##",
        "empty section heading",
    ),
    (
        "block is a list",
        f"---\n{FRONT}---\n## property\n```yaml\n- a\n- b\n```\n",
        "- a",
        "must be a mapping",
    ),
    (
        "block is empty",
        f"---\n{FRONT}---\n## property\n```yaml\n```\n",
        "```\n",
        "must be a mapping",
    ),
    (
        "missing required field",
        f"---\n{FRONT.replace('deal_id: D-1', 'title: x')}---\n",
        "@2",
        "lacks required field(s): deal_id",
    ),
    (
        "several required fields missing",
        "---\nuw_version: '1.1'\ndeal_id: D\nasset_class: office\n---\n",
        "@2",
        "lacks required field(s): geo, units, date",
    ),
    (
        "geo not a mapping",
        f"---\n{FRONT.replace('{state: CA, metro: Oakland}', 'CA')}---\n",
        "@2",
        "'geo' must be",
    ),
    (
        "negative units",
        f"---\n{FRONT.replace('units: 10', 'units: -1')}---\n",
        "@2",
        "'units' must be",
    ),
    (
        "boolean units",
        f"---\n{FRONT.replace('units: 10', 'units: true')}---\n",
        "@2",
        "'units' must be",
    ),
    (
        "bad date",
        f"---\n{FRONT.replace('date: 2026-01-01', 'date: next tuesday')}---\n",
        "@2",
        "not an ISO date",
    ),
    (
        "tenant differs from the collection's",
        f"---\n{FRONT}tenant: beta\n---\n",
        "@2",
        "tenant 'beta' differs from the collection's tenant 'alpha'",
    ),
    (
        "acl group outside the collection's",
        f"---\n{FRONT}acl: [alpha-uw, beta-team]\n---\n",
        "@2",
        "acl group(s) beta-team are not in the collection's acl_groups",
    ),
    ("empty acl list", f"---\n{FRONT}acl: []\n---\n", "@2", "'acl' must be a non-empty list"),
    (
        "unknown tier",
        f"---\n{FRONT}tier: secret\n---\n",
        "@2",
        "'tier' must be public or restricted",
    ),
    ("public widens restricted", f"---\n{FRONT}tier: public\n---\n", "@2", "would widen"),
]


@pytest.mark.parametrize(("case", "text", "where", "fragment"), BROKEN, ids=[c[0] for c in BROKEN])
def test_broken_files_raise_parse_error_with_file_and_line(
    case: str, text: str, where: str, fragment: str
) -> None:
    if where.startswith("@"):
        expected = int(where[1:])
    elif where == "```\n":  # the line right after an opening fence that closes at once
        expected = line_of(text, "```yaml") + 1
    else:
        expected = line_of(text, where)
    with pytest.raises(ParseError) as info:
        parse_text(text)
    err = info.value
    assert err.line == expected, str(err)
    assert err.path == "/src/deal-1.uw.md"
    assert str(err).startswith(f"/src/deal-1.uw.md:{expected}: ")
    assert fragment in err.reason


def test_non_utf8_file_is_a_parse_error() -> None:
    raw = b"---\nuw_version: '1.1'\ntitle: caf\xe9\n---\n"
    doc = SourceDoc(doc_id="d", path="/src/d.uw.md", raw=raw, size=len(raw), mtime=0.0)
    offset = raw.index(b"\xe9")
    with pytest.raises(ParseError) as info:
        uw.parse(collection(Path("/src")), doc, "0" * 16)
    assert info.value.line == 3
    assert (
        str(info.value) == f"/src/d.uw.md:3: not UTF-8 text (byte {offset}); save the file as UTF-8"
    )


# -- reading a uw collection -----------------------------------------------------------------


def test_uw_reader_finds_nested_files_in_sorted_order_with_posix_doc_ids(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "z.uw.md").write_text("z", encoding="utf-8")
    (tmp_path / "b" / "a.uw.md").write_text("a", encoding="utf-8")
    (tmp_path / "notes.md").write_text("ignored", encoding="utf-8")
    docs = list(read_documents(collection(tmp_path)))
    assert [d.doc_id for d in docs] == ["b/a", "z"]
    assert [d.raw for d in docs] == [b"a", b"z"]
    assert docs[0].path == str(tmp_path / "b" / "a.uw.md")
    assert docs[0].size == 1


def test_uw_reader_refuses_a_missing_root(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="collection root does not exist"):
        list(read_documents(collection(tmp_path / "nope")))


def test_unknown_kind_is_a_config_error(tmp_path: Path) -> None:
    coll = collection(tmp_path, kind="slack")
    unknown = r"collections\.alpha-deals\.kind: unknown collection kind 'slack' \(known: "
    with pytest.raises(ConfigError, match=unknown):
        read_documents(coll)
    with pytest.raises(ConfigError, match=unknown):
        parse_document(coll, doc_from_text(HANDWRITTEN), "0" * 16)


# -- beir ------------------------------------------------------------------------------------

BEIR_LINES = [
    json.dumps(
        {"_id": "d1", "title": "Rates", "text": "Cap rates rose.", "metadata": {"year": 2024}}
    ),
    "",
    json.dumps({"_id": 7, "text": "Numeric id, no title."}),
    '{"_id": "d3", "text": "unterminated',
    json.dumps({"title": "no id"}),
    json.dumps({"_id": "d5", "metadata": ["not", "an", "object"]}),
]


def write_beir(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "corpus.jsonl").write_text("\n".join(BEIR_LINES) + "\n", encoding="utf-8")
    return root


def test_beir_reader_yields_one_document_per_nonblank_line_with_its_line_number(
    tmp_path: Path,
) -> None:
    docs = list(read_documents(collection(write_beir(tmp_path), kind="beir")))
    # passages with their own ids in file order, then the lines named by their place, which
    # are named once every own id is known (so no place takes a passage's id)
    assert [(d.doc_id, d.line) for d in docs] == [
        ("d1", 1),
        ("7", 3),
        ("d5", 6),
        ("line-4", 4),
        ("line-5", 5),
    ]
    assert docs[0].raw == BEIR_LINES[0].encode("utf-8")


def test_beir_good_record_gives_one_passage_block(tmp_path: Path) -> None:
    coll = collection(write_beir(tmp_path), kind="beir", tier="public", name="eval")
    docs = list(read_documents(coll))
    (block,) = parse_document(coll, docs[0], "v" * 16)
    assert block.block_key == "passage/0"
    assert block.section == block.source_type == "passage"
    assert block.content == {"title": "Rates", "text": "Cap rates rose."}
    assert block.content_hash == independent_content_hash(block.content)
    assert block.chunk_ref == f"chunk://eval/d1/v{'v' * 16}/passage/0"
    assert block.metadata == {"year": 2024}
    assert (block.tenant_id, block.acl_groups, block.tier, block.line) == (
        TENANT,
        GROUPS,
        "public",
        1,
    )
    (numeric,) = parse_document(coll, docs[1], "v" * 16)
    assert numeric.doc_id == "7"
    assert numeric.content == {"title": "", "text": "Numeric id, no title."}


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        (4, "not valid JSON"),
        (5, "record lacks '_id'"),
        (6, "'metadata' must be an object"),
    ],
    ids=["bad JSON", "no _id", "metadata not an object"],
)
def test_beir_bad_records_name_the_file_and_line(tmp_path: Path, line: int, fragment: str) -> None:
    coll = collection(write_beir(tmp_path), kind="beir")
    (doc,) = [d for d in read_documents(coll) if d.line == line]
    with pytest.raises(ParseError) as info:
        beir.parse(coll, doc, "0" * 16)
    assert info.value.line == line
    assert info.value.path == str(tmp_path / "corpus.jsonl")
    assert str(info.value).startswith(f"{tmp_path / 'corpus.jsonl'}:{line}: ")
    assert fragment in info.value.reason


def test_beir_reader_needs_corpus_jsonl(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="needs corpus.jsonl"):
        list(read_documents(collection(tmp_path, kind="beir")))


def test_a_byte_order_mark_before_the_front_matter_is_not_its_first_line() -> None:
    bom = parse_text("\ufeff" + HANDWRITTEN.replace("\n", "\r\n"))
    assert [(b.block_key, b.line, b.content) for b in bom] == [
        (b.block_key, b.line, b.content) for b in parse_text(HANDWRITTEN)
    ]
