"""``build_inputs`` reusing the previous partition: the same table as a rebuild, never stale."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from corpus_index import steps
from corpus_index.config import Settings
from corpus_index.embedding import INPUT_RULE_KEY, build_inputs, input_rule
from corpus_index.home import Home
from tests.corpusgen import deal_text, write_home

SECTIONS = {"market_analysis": "block", "risk_assessment": "paragraph", "property": "block"}


def parsed(corpus: Home, collection: str = "alpha-deals") -> pa.Table:
    steps.source_manifest.run(corpus, collection)
    steps.parsed_blocks.run(corpus, collection)
    blocks = corpus.warehouse.read("parsed_blocks", (collection,))
    assert blocks is not None and blocks.num_rows
    return blocks


def tampered(table: pa.Table) -> pa.Table:
    """``table`` with every text replaced: any row taken from it is recognisable."""
    texts = pa.array(["TAMPERED"] * table.num_rows, pa.string())
    return table.set_column(table.schema.get_field_index("text"), "text", texts)


def test_reuse_gives_the_same_table_as_a_rebuild_and_rebuilds_only_changed_blocks(
    tmp_path: Path,
) -> None:
    corpus = Home(Settings(config_path=write_home(tmp_path), home=tmp_path / "home"))
    blocks = parsed(corpus)
    formats = ["default-v1", "default-v2"]
    fresh = build_inputs(blocks, sections=SECTIONS, input_formats=formats)
    assert fresh.schema.metadata[INPUT_RULE_KEY] == input_rule(SECTIONS, formats)
    assert build_inputs(blocks, sections=SECTIONS, input_formats=formats, previous=fresh).equals(
        fresh, check_metadata=True
    )
    # every row of an unchanged block comes from the previous partition, none is rebuilt
    reused = build_inputs(
        blocks, sections=SECTIONS, input_formats=formats, previous=tampered(fresh)
    )
    assert set(reused["text"].to_pylist()) == {"TAMPERED"}

    # one deal edited: its rows are rebuilt, in block order; the others still come from before
    edited = tmp_path / "sources" / "alpha" / "deal-alpha-001.uw.md"
    edited.write_text(
        deal_text("DEAL-ALPHA-001", tenant="alpha", acl=["alpha-uw"], market="Rents rose 4%."),
        encoding="utf-8",
    )
    blocks2 = parsed(corpus)
    rebuilt = build_inputs(blocks2, sections=SECTIONS, input_formats=formats)
    incremental = build_inputs(blocks2, sections=SECTIONS, input_formats=formats, previous=fresh)
    assert incremental.equals(rebuilt, check_metadata=True)
    mixed = build_inputs(
        blocks2, sections=SECTIONS, input_formats=formats, previous=tampered(fresh)
    )
    is_edited = pc.equal(mixed["doc_id"], "deal-alpha-001")
    assert set(mixed.filter(is_edited)["text"].to_pylist()) & {"TAMPERED"} == set()
    assert set(mixed.filter(pc.invert(is_edited))["text"].to_pylist()) == {"TAMPERED"}


def test_rows_built_under_another_rule_are_never_reused(tmp_path: Path) -> None:
    corpus = Home(Settings(config_path=write_home(tmp_path), home=tmp_path / "home"))
    blocks = parsed(corpus)
    old = tampered(build_inputs(blocks, sections=SECTIONS, input_formats=["default-v1"]))
    for sections, formats in (
        (SECTIONS, ["default-v1", "default-v2"]),  # a format added
        ({**SECTIONS, "risk_assessment": "block"}, ["default-v1"]),  # a granularity changed
        ({"market_analysis": "block"}, ["default-v1"]),  # a section dropped
    ):
        got = build_inputs(blocks, sections=sections, input_formats=formats, previous=old)
        assert "TAMPERED" not in got["text"].to_pylist()
        assert got.equals(build_inputs(blocks, sections=sections, input_formats=formats))
    # a partition written before the rule was recorded is rebuilt too
    unlabeled = old.replace_schema_metadata(None)
    got = build_inputs(blocks, sections=SECTIONS, input_formats=["default-v1"], previous=unlabeled)
    assert "TAMPERED" not in got["text"].to_pylist()
