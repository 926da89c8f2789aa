"""The structure-aware chunker and the two kinds built on it (``documents``, ``profiles``):
headings, paragraphs and the size cap; heading paths as sections and input context; the tier
derivation rule of the profiles seed (§6) with its config overrides."""

from __future__ import annotations

import sys
from pathlib import Path
from types import FrameType

import pytest

from corpus_index.chunking import chunk_text
from corpus_index.collection import CollectionConfig
from corpus_index.errors import ConfigError, ParseError
from corpus_index.inputs import input_units
from corpus_index.kinds import kind_named, parse_document
from corpus_index.records import Block

DOC = """---
title: Travel policy
---
# Travel policy

Staff book travel through the portal.
Receipts within 30 days.

## Flights

Economy for flights under six hours.

### Upgrades

Business class needs a director's approval.

## Hotels

Up to the city rate.
"""


def test_chunks_follow_headings_and_keep_their_path() -> None:
    chunks = chunk_text(DOC.split("---\n", 2)[2], max_chars=400)
    assert [(c.section, c.line) for c in chunks] == [
        ("Travel policy", 3),
        ("Travel policy > Flights", 8),
        ("Travel policy > Flights > Upgrades", 12),
        ("Travel policy > Hotels", 16),
    ]
    assert chunks[0].text == "Staff book travel through the portal.\nReceipts within 30 days."


def test_paragraphs_pack_up_to_the_cap_and_long_ones_cut_between_sentences() -> None:
    paras = "\n\n".join(f"Paragraph {i} says one short thing." for i in range(6))
    chunks = chunk_text(paras, max_chars=80)
    assert all(len(c.text) <= 80 for c in chunks)
    assert len(chunks) == 3  # two whole paragraphs per chunk, never half of one
    assert all(c.text.count("Paragraph") == 2 for c in chunks)
    long = " ".join(f"Sentence number {i} ends here." for i in range(20))
    pieces = chunk_text(long, max_chars=100)
    assert all(len(c.text) <= 100 and c.text.endswith("here.") for c in pieces)
    assert " ".join(c.text for c in pieces) == long
    assert chunk_text("no headings\n# here", markdown=False)[0].section is None
    with pytest.raises(ValueError, match="max_chars"):
        chunk_text("x", max_chars=10)


def test_chunking_work_grows_with_the_paragraphs_not_with_their_square() -> None:
    # one-word paragraphs under a wide cap: each paragraph once summed the sizes of all those
    # already in its chunk (an 8 MB file of them took a minute to parse; more with a wider cap)
    calls = 0

    def count(frame: FrameType, event: str, arg: object) -> None:
        nonlocal calls
        calls += event == "call"

    paragraphs = 4000
    sys.setprofile(count)
    try:
        chunks = chunk_text("a\n\n" * paragraphs, max_chars=12_000)
    finally:
        sys.setprofile(None)
    assert [len(c.text) for c in chunks] == [3 * paragraphs - 2]
    assert calls < 20 * paragraphs


def _collection(root: Path, kind: str, **processing: dict[str, object]) -> CollectionConfig:
    return CollectionConfig(
        name="c",
        kind=kind,
        path=root,
        tenant="t",
        acl_groups=("g",),
        tier="public",
        processing=processing,
    )


def _parse(collection: CollectionConfig) -> list[Block]:
    kind = kind_named(collection.kind)
    blocks: list[Block] = []
    for doc_id, path in kind.list_documents(collection) or []:
        doc = kind.load_document(collection, doc_id, path)
        blocks.extend(parse_document(collection, doc, "v1"))
    return blocks


def test_documents_put_the_heading_path_in_section_and_input(tmp_path: Path) -> None:
    (tmp_path / "travel.md").write_text(DOC)
    (tmp_path / "plain.txt").write_text("# not a heading in text\n\nsecond paragraph\n")
    blocks = _parse(_collection(tmp_path, "documents"))
    assert [(b.doc_id, b.block_key, b.section) for b in blocks] == [
        ("plain.txt", "chunk/0", ""),  # plain text: no headings, one chunk under the cap
        ("travel.md", "chunk/0", "Travel policy"),
        ("travel.md", "chunk/1", "Travel policy > Flights"),
        ("travel.md", "chunk/2", "Travel policy > Flights > Upgrades"),
        ("travel.md", "chunk/3", "Travel policy > Hotels"),
    ]
    upgrades = next(b for b in blocks if b.section.endswith("Upgrades"))
    unit = input_units(
        "heading-context-v1",
        section=upgrades.section,
        content=upgrades.content,
        source_type=upgrades.source_type,
        document=upgrades.metadata,
    )[0]
    assert unit.text == (
        "Travel policy > Flights > Upgrades\nBusiness class needs a director's approval."
    )
    assert kind_named("documents").excerpt(unit.text, section=upgrades.section) == (
        "Business class needs a director's approval."
    )
    assert upgrades.line == 15 and upgrades.tier == "public"
    assert {b.metadata["char_count"] for b in blocks} == {len(b.content["text"]) for b in blocks}


def _profile_files(root: Path) -> None:
    ada = root / "ada-okafor"
    ada.mkdir()
    (ada / "expertise.md").write_text("# Expertise\n\nGraph kernels.\n\n## Methods\n\nSpectral.\n")
    (ada / "cv.md").write_text("# CV\n\nBorn 1980. PhD 2008.\n")
    (ada / "grant--nsf-2024.md").write_text("Three-year award for graph learning.\n")
    (ada / "paper_summary--kernels.txt").write_text("We compare kernels.\n\nThey work.\n")
    (ada / "web.md").write_text("---\nsource_type: soul\n---\nWhy I do research.\n")


def test_profile_chunks_carry_their_source_and_the_role_tier(tmp_path: Path) -> None:
    _profile_files(tmp_path)
    blocks = _parse(_collection(tmp_path, "profiles"))
    seen = {(b.doc_id, b.source_type, b.metadata["chunk_index"], b.section, b.tier) for b in blocks}
    assert seen == {
        ("ada-okafor/cv.md", "cv", 0, "CV", "restricted"),
        ("ada-okafor/expertise.md", "expertise", 0, "Expertise", "public"),
        ("ada-okafor/expertise.md", "expertise", 1, "Expertise > Methods", "public"),
        ("ada-okafor/grant--nsf-2024.md", "grant", 0, "", "restricted"),
        ("ada-okafor/paper_summary--kernels.txt", "paper_summary", 0, "", "public"),
        ("ada-okafor/web.md", "soul", 0, "", "public"),  # front matter names the type
    }
    assert {b.metadata["slug"] for b in blocks} == {"ada-okafor"}


def test_config_overrides_tiers_per_source_type_and_per_file(tmp_path: Path) -> None:
    _profile_files(tmp_path)
    tiers = {"grant": "public", "expertise": "restricted", "ada-okafor/cv.md": "public"}
    blocks = _parse(_collection(tmp_path, "profiles", tiers=tiers))
    tier = {b.source_type: b.tier for b in blocks}
    assert tier == {
        "cv": "public",  # the file's entry wins over the role default
        "grant": "public",
        "expertise": "restricted",
        "paper_summary": "public",
        "soul": "public",
    }
    restricted = CollectionConfig(
        name="c", kind="profiles", path=tmp_path, tenant="t", acl_groups=("g",),
        tier="restricted", processing={"tiers": tiers},
    )  # fmt: skip
    assert {b.tier for b in _parse(restricted)} == {"restricted"}  # never wider than its own


def test_bad_profile_files_are_named_with_what_is_wrong(tmp_path: Path) -> None:
    collection = _collection(tmp_path, "profiles")
    kind = kind_named("profiles")
    cases = {
        "ada/notes.md": "unknown source_type 'notes'",
        "loose.md": "directly in its researcher's <slug>/ folder",
        "collection/cv.md": "reserved for the collection's centroids",
        "ada/cv--old.md": "would widen this cv file's 'restricted' tier",
    }
    for rel, message in cases.items():
        path = tmp_path / rel
        path.parent.mkdir(exist_ok=True)
        path.write_text("---\ntier: public\n---\ntext\n" if "old" in rel else "text\n")
        doc = kind.load_document(collection, rel, str(path))
        with pytest.raises(ParseError, match=message) as exc:
            parse_document(collection, doc, "v1")
        assert str(path) in str(exc.value)
    with pytest.raises(ConfigError, match=r"processing.tiers.pets: not a source type"):
        kind.check_options(_collection(tmp_path, "profiles", tiers={"pets": "public"}), key="k")
    with pytest.raises(ConfigError, match=r"processing.exports"):
        kind.check_options(
            _collection(tmp_path, "profiles", exports={"restricted": "public"}), key="k"
        )


def test_front_matter_after_a_byte_order_mark_still_narrows_the_scope(tmp_path: Path) -> None:
    # an editor on Windows saves UTF-8 with a byte order mark (and CRLF): the front matter is
    # still front matter, so its narrower acl and tier hold and it is not indexed as text
    memo = "---\r\nacl: [legal]\r\ntier: restricted\r\n---\r\n# Memo\r\n\r\nSettlement.\r\n"
    (tmp_path / "memo.md").write_bytes(b"\xef\xbb\xbf" + memo.encode())
    wide = CollectionConfig(
        name="c", kind="documents", path=tmp_path, tenant="t", acl_groups=("g", "legal"),
        tier="public",
    )  # fmt: skip
    (block,) = _parse(wide)
    assert (block.acl_groups, block.tier) == (("legal",), "restricted")
    assert (block.content, block.section, block.line) == ({"text": "Settlement."}, "Memo", 7)
    profiles = tmp_path / "profiles"
    (profiles / "ada").mkdir(parents=True)
    (profiles / "ada" / "web.md").write_bytes(b"\xef\xbb\xbf---\nsource_type: soul\n---\nWhy.\n")
    (soul,) = _parse(_collection(profiles, "profiles"))
    assert (soul.source_type, soul.tier, soul.content) == ("soul", "public", {"text": "Why."})


def test_a_byte_that_is_not_utf8_is_named_at_its_line(tmp_path: Path) -> None:
    (tmp_path / "cafe.md").write_bytes(b"# Menu\n\nTea.\n\nCaf\xe9 au lait.\n")
    with pytest.raises(ParseError) as exc:
        _parse(_collection(tmp_path, "documents"))
    assert str(exc.value) == (
        f"{tmp_path / 'cafe.md'}:5: not UTF-8 text (byte 17); save the file as UTF-8"
    )
