"""Parsing and input building stream a range of documents at a time, and give the same
partitions as building everything at once."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from corpus_index import embedding, sources, steps
from corpus_index.config import CollectionConfig, Settings
from corpus_index.home import Home
from corpus_index.kinds import load_documents
from corpus_index.ordered import DocCursor, OrderError, whole_documents
from tests.corpusgen import RISKS, deal_text, write_home

SCHEMA = pa.schema([("doc_id", pa.string()), ("n", pa.int64())])


def stream(doc_ids: list[str], batch: int) -> list[pa.RecordBatch]:
    table = pa.table({"doc_id": doc_ids, "n": list(range(len(doc_ids)))}, schema=SCHEMA)
    return table.to_batches(max_chunksize=batch)


def test_whole_documents_never_splits_a_document() -> None:
    ids = ["a"] * 3 + ["b"] * 5 + ["c"] + ["d"] * 2 + ["e"] * 4
    chunks = list(whole_documents(stream(ids, 2), SCHEMA, 4, what="t"))
    assert pa.concat_tables(chunks)["n"].to_pylist() == list(range(len(ids)))  # all, in order
    seen: set[str] = set()
    for chunk in chunks:
        docs = set(chunk["doc_id"].to_pylist())
        assert not docs & seen, "a document reached two chunks"
        seen |= docs
    # at most 4 rows each, but b (5 rows) goes whole, alone
    assert [c.num_rows for c in chunks] == [3, 5, 3, 4]
    # one batch bigger than a table is cut the same way
    chunks = list(whole_documents(stream(ids, 100), SCHEMA, 4, what="t"))
    assert [c.num_rows for c in chunks] == [3, 5, 3, 4]


def test_doc_cursor_hands_out_each_row_once_by_document_range() -> None:
    ids = ["a", "a", "b", "d", "d", "d", "f"]
    cursor = DocCursor(stream(ids, 2), SCHEMA, what="t")
    assert cursor.through("a")["doc_id"].to_pylist() == ["a", "a"]
    assert cursor.through("c")["doc_id"].to_pylist() == ["b"]
    assert cursor.through("c").num_rows == 0
    assert cursor.through("e")["n"].to_pylist() == [3, 4, 5]
    assert cursor.through("z")["doc_id"].to_pylist() == ["f"]
    assert cursor.through("zz").num_rows == 0


@pytest.mark.parametrize("ids", [["a", "c", "b"], ["c", "d", "a", "b"]])
def test_a_stream_out_of_doc_order_is_an_error_naming_it(ids: list[str]) -> None:
    with pytest.raises(OrderError, match="parsed_blocks of x: rows are not in doc_id order"):
        list(whole_documents(stream(ids, 2), SCHEMA, 1, what="parsed_blocks of x"))
    with pytest.raises(OrderError, match="not in doc_id order"):
        DocCursor(stream(ids, 2), SCHEMA, what="t").through("z")


def _uw(root: Path) -> CollectionConfig:
    root.mkdir(parents=True, exist_ok=True)
    return CollectionConfig(
        name="alpha-deals", kind="uw_deals", path=root, tenant="alpha", acl_groups=("alpha-uw",)
    )


def _deal(root: Path, doc_id: str, **kwargs: object) -> None:
    text = deal_text(doc_id.upper(), tenant="alpha", acl=["alpha-uw"], **kwargs)  # type: ignore[arg-type]
    (root / f"{doc_id}.uw.md").write_text(text, encoding="utf-8")


def test_parse_writes_ranges_of_documents_that_add_up_to_the_whole_collection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "deals"
    coll = _uw(root)
    for i in range(11):
        _deal(root, f"d{i:02d}")
    first = sources.scan_manifest(coll, None)
    built = sources.parse_collection(coll, first.table, None, None)

    # an edit, a removal, an addition and a document that stops parsing, spread over the range
    _deal(root, "d03", risk=RISKS[2])
    (root / "d07.uw.md").unlink()
    _deal(root, "d05b")
    broken = root / "d09.uw.md"
    broken.write_text(broken.read_text().replace("severity:", "severity: : :", 1))
    second = sources.scan_manifest(coll, first.table)

    whole = sources.parse_collection(coll, second.table, built.blocks, None)  # one range
    monkeypatch.setattr(sources, "PARSE_BATCH", 3)
    calls: list[pa.Table] = []
    summary = sources.parse_into(
        calls.append,
        coll,
        second.table,
        sources.PreviousBlocks.of_table(built.blocks),
        None,
    )
    assert len(calls) == 4  # 11 live documents, 3 at a time
    assert all(len(set(c["doc_id"].to_pylist())) <= 3 for c in calls)
    assert pa.concat_tables(calls).equals(whole.blocks)
    assert summary.block_rows == whole.blocks.num_rows
    # d03 and d05b parsed; d09 failed and serves its last good version; 8 carried unread
    assert (summary.parsed_documents, summary.carried_documents, summary.stale_documents) == (
        2,
        8,
        1,
    )
    (stale,) = summary.stale
    assert stale["source_id"] == "alpha-deals/d09"
    assert (
        stale["serving_version"]
        == built.blocks.filter(pc.equal(built.blocks["doc_id"], "d09"))["source_version"][0].as_py()
    )
    assert "d07" not in whole.blocks["doc_id"].to_pylist()
    keys = whole.blocks.select(["doc_id", "block_key"]).to_pylist()
    assert keys == sorted(keys, key=lambda r: (r["doc_id"], r["block_key"]))


def test_beir_records_load_in_doc_id_order_one_at_a_time(tmp_path: Path) -> None:
    root = tmp_path / "beir"
    root.mkdir()
    ids = ["d10", "d2", "d1", "d30", "d03"]
    lines = [json.dumps({"_id": i, "title": f"t {i}", "text": f"text {i}"}) for i in ids]
    (root / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    coll = CollectionConfig(
        name="eval", kind="beir", path=root, tenant="lab", acl_groups=("lab",), tier="public"
    )
    paths = {i: str(root / "corpus.jsonl") for i in ("d30", "d1", "d10")}
    docs = list(load_documents(coll, paths))
    assert [d.doc_id for d in docs] == ["d1", "d10", "d30"]
    assert [json.loads(d.raw)["_id"] for d in docs] == ["d1", "d10", "d30"]
    assert [d.line for d in docs] == [3, 1, 4]

    parsed = sources.parse_collection(coll, sources.scan_manifest(coll, None).table, None, None)
    assert parsed.blocks["doc_id"].to_pylist() == sorted(ids)


def _partitions(corpus: Home) -> dict[str, pa.Table]:
    out = {}
    for asset in ("parsed_blocks", "embedding_inputs"):
        table = corpus.warehouse.read(asset, ("alpha-deals",))
        assert table is not None and table.num_rows
        out[asset] = table
    return out


def _steps(corpus: Home) -> None:
    steps.source_manifest.run(corpus, "alpha-deals")
    steps.parsed_blocks.run(corpus, "alpha-deals")
    steps.embedding_inputs.run(corpus, "alpha-deals")


def _rebuilt(corpus: Home) -> dict[str, pa.Table]:
    """The partitions built from nothing, in one range each."""
    for asset in ("parsed_blocks", "embedding_inputs"):
        corpus.warehouse.delete(asset, ("alpha-deals",))
    _steps(corpus)
    return _partitions(corpus)


def test_steps_streamed_in_small_ranges_write_what_a_whole_rebuild_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = Home(
        Settings(config_path=write_home(tmp_path, deals_per_tenant=7), home=tmp_path / "home")
    )
    with monkeypatch.context() as small:
        small.setattr(sources, "PARSE_BATCH", 2)
        small.setattr(embedding, "INPUT_BATCH", 3)
        _steps(corpus)
        streamed = _partitions(corpus)
    assert _rebuilt(corpus) == streamed

    # incremental, in small ranges: one deal edited, one removed
    folder = tmp_path / "sources" / "alpha"
    (folder / "deal-alpha-002.uw.md").write_text(
        deal_text("DEAL-ALPHA-002", tenant="alpha", acl=["alpha-uw"], market="Rents fell 3%."),
        encoding="utf-8",
    )
    (folder / "deal-alpha-005.uw.md").unlink()
    with monkeypatch.context() as small:
        small.setattr(sources, "PARSE_BATCH", 2)
        small.setattr(embedding, "INPUT_BATCH", 3)
        _steps(corpus)
        incremental = _partitions(corpus)
    assert "deal-alpha-005" not in incremental["parsed_blocks"]["doc_id"].to_pylist()
    texts = incremental["embedding_inputs"].filter(
        pc.equal(incremental["embedding_inputs"]["doc_id"], "deal-alpha-002")
    )["text"]
    assert any("Rents fell 3%." in t for t in texts.to_pylist())
    assert _rebuilt(corpus) == incremental
