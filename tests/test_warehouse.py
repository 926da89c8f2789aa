"""The Parquet warehouse: atomic partition files, vector columns stored packed."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from corpus_index.records import embedding_schema
from corpus_index.storage import Location
from corpus_index.warehouse import PACKED_DIM_KEY, Background, StagedPartition, Warehouse

KEY = b"corpus_index.vectors"


def vectors_table(n: int, dim: int) -> pa.Table:
    rng = np.random.default_rng(7)
    matrix = rng.standard_normal((n, dim)).astype(np.float32)
    flat = pa.array(matrix.ravel(), pa.float32())
    return pa.table(
        {
            "input_hash": pa.array([f"h{i:04d}" for i in range(n)], pa.string()),
            "vector": pa.FixedSizeListArray.from_arrays(flat, dim),
        },
        schema=embedding_schema(dim),
    ).replace_schema_metadata({KEY: b"identity"})


def test_vectors_round_trip_bit_for_bit_and_are_stored_packed(tmp_path: Path) -> None:
    wh = Warehouse(tmp_path)
    table = vectors_table(300, 8)
    path = wh.write("embeddings", ("main", "deals"), table)

    raw = pq.read_table(path)  # what any Parquet reader sees: 32-byte values, dim in metadata
    assert raw.schema.field("vector").type == pa.binary(32)
    assert raw.schema.field("vector").metadata[PACKED_DIM_KEY] == b"8"

    back = wh.read("embeddings", ("main", "deals"), embedding_schema(8))
    assert back is not None
    assert back.equals(table.replace_schema_metadata(None))
    untouched = wh.read("embeddings", ("main", "deals"))
    assert untouched is not None and untouched.schema.metadata[KEY] == b"identity"
    assert untouched["vector"].type == pa.list_(pa.float32(), 8)


def test_a_sliced_or_chunked_column_keeps_its_rows(tmp_path: Path) -> None:
    wh = Warehouse(tmp_path)
    table = vectors_table(50, 4)
    parts = pa.concat_tables([table.slice(10, 5), table.slice(30, 7)])
    wh.write("embeddings", ("p", "c"), parts)
    back = wh.read("embeddings", ("p", "c"))
    assert back is not None
    assert back["input_hash"].to_pylist() == parts["input_hash"].to_pylist()
    assert back["vector"].to_pylist() == parts["vector"].to_pylist()


def test_a_column_with_null_vectors_is_stored_as_it_is(tmp_path: Path) -> None:
    wh = Warehouse(tmp_path)
    vec = pa.array([[1.0, 2.0], None], pa.list_(pa.float32(), 2))
    table = pa.table({"input_hash": ["a", "b"], "vector": vec})
    path = wh.write("embeddings", ("p", "c"), table)
    assert pq.read_table(path).schema.field("vector").type == pa.list_(pa.float32(), 2)
    back = wh.read("embeddings", ("p", "c"))
    assert back is not None and back.equals(table)


def in_43_row_groups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Warehouse, pa.Table]:
    """A warehouse holding 300 vectors as embeddings p/c, 7 rows per row group."""
    from corpus_index import warehouse

    monkeypatch.setattr(warehouse, "ROW_GROUP_ROWS", 7)
    wh = Warehouse(tmp_path)
    table = vectors_table(300, 4)
    path = wh.write("embeddings", ("p", "c"), table)
    assert pq.ParquetFile(path).num_row_groups == 43
    return wh, table


def test_filtered_reads_and_batches_span_row_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyarrow.compute as pc

    wh, table = in_43_row_groups(tmp_path, monkeypatch)
    wanted = [f"h{i:04d}" for i in (0, 6, 7, 150, 299)]
    got = wh.read("embeddings", ("p", "c"), where=pc.field("input_hash").isin(wanted))
    assert got is not None and got["input_hash"].to_pylist() == wanted
    picked = table.filter(pc.is_in(table["input_hash"], pa.array(wanted)))
    assert got["vector"].to_pylist() == picked["vector"].to_pylist()
    assert got.schema.metadata[KEY] == b"identity"
    only = wh.read(
        "embeddings", ("p", "c"), where=pc.field("input_hash") == "h0150", columns=["input_hash"]
    )
    assert only is not None and only.column_names == ["input_hash"] and only.num_rows == 1
    none = wh.read("embeddings", ("p", "c"), where=pc.field("input_hash") == "nope")
    assert (
        none is not None and none.num_rows == 0 and none["vector"].type == pa.list_(pa.float32(), 4)
    )
    batches = list(wh.batches("embeddings", ("p", "c")))
    assert max(b.num_rows for b in batches) == 7
    assert pa.Table.from_batches(batches)["vector"].to_pylist() == table["vector"].to_pylist()
    assert list(wh.batches("embeddings", ("p", "missing"))) == []
    meta = wh.metadata("embeddings", ("p", "c"))
    assert meta is not None and meta[KEY] == b"identity"
    assert wh.metadata("embeddings", ("p", "missing")) is None


def test_keyed_lookups_decode_only_the_row_groups_holding_the_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wh, table = in_43_row_groups(tmp_path, monkeypatch)
    decoded: list[tuple[int, object]] = []
    real = pq.ParquetFile.read_row_group

    def counting(self: pq.ParquetFile, i: int, columns: object = None, **kw: object) -> pa.Table:
        decoded.append((i, columns))
        return real(self, i, columns=columns, **kw)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", counting)
    reader = wh.keyed("embeddings", ("p", "c"), "input_hash")
    assert reader is not None
    assert len(decoded) == 43 and all(c == ["input_hash"] for _, c in decoded)  # keys only
    decoded.clear()

    wanted = ["h0299", "h0008", "h0007", "h0008"]  # out of order, repeated
    got = reader.lookup(pa.array(wanted))
    assert got["input_hash"].to_pylist() == ["h0007", "h0008", "h0299"]  # file order, once
    assert got["vector"].type == pa.list_(pa.float32(), 4)
    assert got["vector"].to_pylist() == table.take([7, 8, 299])["vector"].to_pylist()
    assert got.schema.metadata[KEY] == b"identity"
    assert sorted(i for i, _ in decoded) == [1, 42]  # rows 7-13 and 294-299

    decoded.clear()
    none = reader.lookup(pa.array(["nope"]))
    assert none.num_rows == 0 and none["vector"].type == pa.list_(pa.float32(), 4)
    assert decoded == []

    # the file replaced meanwhile: the reader still reads the one it opened
    wh.write("embeddings", ("p", "c"), vectors_table(3, 4))
    assert reader.lookup(pa.array(["h0150"]))["input_hash"].to_pylist() == ["h0150"]
    reader.close()

    texts = wh.keyed("embeddings", ("p", "c"), "input_hash", columns=["input_hash"])
    assert texts is not None and texts.lookup(pa.array(["h0001"])).column_names == ["input_hash"]
    with pytest.raises(ValueError, match="must include the key"):
        wh.keyed("embeddings", ("p", "c"), "input_hash", columns=["vector"])
    assert wh.keyed("embeddings", ("p", "missing"), "input_hash") is None


def test_keyed_select_decodes_only_the_row_groups_with_selected_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyarrow.compute as pc

    wh, table = in_43_row_groups(tmp_path, monkeypatch)
    decoded: list[int] = []
    real = pq.ParquetFile.read_row_group

    def counting(self: pq.ParquetFile, i: int, columns: object = None, **kw: object) -> pa.Table:
        decoded.append(i)
        return real(self, i, columns=columns, **kw)

    with wh.keyed("embeddings", ("p", "c"), "input_hash") as reader:
        assert reader.keys.equals(table["input_hash"].combine_chunks())
        assert reader.metadata[KEY] == b"identity"
        monkeypatch.setattr(pq.ParquetFile, "read_row_group", counting)
        # every row of groups 0 and 2, one row of group 5, none elsewhere
        mask = pc.is_in(
            reader.keys, pa.array([f"h{i:04d}" for i in [*range(7), *range(14, 21), 40]])
        )
        parts = list(reader.select(mask))
        assert decoded == [0, 2, 5]
        assert [p.num_rows for p in parts] == [7, 7, 1]
        got = pa.concat_tables(parts)
        assert got["input_hash"].to_pylist() == table.filter(mask)["input_hash"].to_pylist()
        assert got["vector"].type == pa.binary(16)  # packed, as stored
        assert list(reader.select(pa.chunked_array([mask]))) != []  # chunked masks too
        with pytest.raises(ValueError, match="a mask of 3 rows for 300"):
            list(reader.select(pa.array([True, False, True])))


def test_cached_reads_follow_a_replaced_partition_and_filter_in_memory(tmp_path: Path) -> None:
    import os

    import pyarrow.compute as pc

    wh = Warehouse(tmp_path)
    first = pa.table({"tenant_id": ["a", "b", "a"], "unit_id": ["u1", "u2", "u3"]})
    path = wh.write("identity_mentions", ("chat",), first)
    mine = pc.field("tenant_id") == "a"
    got = wh.read_cached(
        "identity_mentions", ("chat",), columns=["tenant_id", "unit_id"], where=mine
    )
    assert got is not None and got["unit_id"].to_pylist() == ["u1", "u3"]
    assert wh.read_cached("identity_mentions", ("other",), columns=["unit_id"]) is None

    # the partition replaced whole (as every write is): the next read sees the new file
    second = pa.table({"tenant_id": ["a", "b"], "unit_id": ["u9", "u2"]})
    wh.write("identity_mentions", ("chat",), second)
    stamp = os.stat(path).st_mtime_ns + 1_000_000_000  # a later time of last write, always
    os.utime(path, ns=(stamp, stamp))
    got = wh.read_cached(
        "identity_mentions", ("chat",), columns=["tenant_id", "unit_id"], where=mine
    )
    assert got is not None and got["unit_id"].to_pylist() == ["u9"]
    unfiltered = wh.read_cached("identity_mentions", ("chat",), columns=["tenant_id", "unit_id"])
    assert unfiltered is not None and unfiltered.num_rows == 2


def _blocked(tmp_path: Path) -> Warehouse:
    """A warehouse whose asset ``blocked`` cannot be written (a file stands where its folder
    would go)."""
    (tmp_path / "wh").mkdir()
    (tmp_path / "wh" / "blocked").write_text("not a folder", encoding="utf-8")
    return Warehouse(tmp_path / "wh")


def test_a_staged_partition_is_out_of_readers_sight_until_published(tmp_path: Path) -> None:
    wh = Warehouse(tmp_path / "wh")
    one, two = pa.table({"x": [1]}), pa.table({"x": [2]})
    wh.write("rows", ("p",), one)
    staged = wh.stage("rows", ("p",), two)
    assert wh.read("rows", ("p",)) == one
    assert staged.publish() == wh.path("rows", "p")
    assert wh.read("rows", ("p",)) == two
    wh.stage("rows", ("p",), one).discard()
    assert wh.read("rows", ("p",)) == two
    assert wh.stage("new", ("p",), one).path == wh.path("new", "p")
    assert wh.read("new", ("p",)) is None
    assert len(list((tmp_path / "wh").rglob("*.tmp"))) == 1  # neither published nor discarded


def test_background_stages_out_of_readers_sight_and_a_failed_stage_publishes_nothing(
    tmp_path: Path,
) -> None:
    wh = _blocked(tmp_path)
    one, two = pa.table({"x": [1]}), pa.table({"x": [2]})
    wh.write("first", ("p",), one)
    with Background() as io:
        before = io.read(lambda: wh.read("first", ("p",)))
        io.stage(wh, "first", ("p",), two)
        staged = io.read(lambda: wh.read("first", ("p",)))
        io.stage(wh, "blocked", ("p",), two)
        io.stage(wh, "later", ("p",), two)
        assert before.result() == one
        assert staged.result() == one  # staged, not in place: readers see the old file
        with pytest.raises(FileExistsError):
            io.publish()
    assert wh.read("first", ("p",)) == one  # a stage failed: nothing published
    assert wh.read("later", ("p",)) is None
    assert not list((tmp_path / "wh").rglob("*.tmp"))  # and nothing left beside them


def test_background_publishes_in_the_order_staged_those_named_last_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wh = Warehouse(tmp_path / "wh")
    placed: list[str] = []
    put = StagedPartition.put  # what puts each in place, once the thread's locks are confirmed

    def noted(self: StagedPartition) -> Location:
        placed.append(self.path.parent.name)
        return put(self)

    monkeypatch.setattr(StagedPartition, "put", noted)
    with Background() as io:
        for asset in ("memo", "rows", "prints", "members"):
            io.stage(wh, asset, ("p",), pa.table({"x": [1]}))
        seen = io.read(lambda: [wh.read(a, ("p",)) for a in ("memo", "rows")])
        assert seen.result() == [None, None]  # nothing in place before it is published
        io.publish(last=["memo", "prints"])
    assert placed == ["rows", "members", "memo", "prints"]
    assert wh.read("memo", ("p",)) == pa.table({"x": [1]})


def test_background_publishes_nothing_when_a_staged_file_was_removed(tmp_path: Path) -> None:
    """A compaction clearing temporary files may remove a staged file before it is published:
    then none is, and the partitions stay as they were."""
    wh = Warehouse(tmp_path / "wh")
    wh.write("rows", ("p",), pa.table({"x": [1]}))
    with Background() as io:
        io.stage(wh, "rows", ("p",), pa.table({"x": [2]}))
        io.stage(wh, "memo", ("p",), pa.table({"x": [2]}))
        memo = _appearing(tmp_path / "wh" / "memo", "*.tmp")  # staged on a writer thread
        memo.unlink()
        with pytest.raises(FileNotFoundError, match="removed before it was published"):
            io.publish()
    assert wh.read("rows", ("p",)) == pa.table({"x": [1]})
    assert wh.read("memo", ("p",)) is None
    assert not list((tmp_path / "wh").rglob("*.tmp"))


def _appearing(folder: Path, pattern: str, wait_s: float = 10.0) -> Path:
    """The first file of ``folder`` matching ``pattern``, once there is one."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        found = sorted(folder.glob(pattern)) if folder.is_dir() else []
        if found:
            return found[0]
        time.sleep(0.01)
    raise AssertionError(f"no {pattern} in {folder} after {wait_s} s")


def test_background_removes_what_it_staged_and_did_not_publish(tmp_path: Path) -> None:
    """A step whose checks fail does not publish: the old files stay, the new ones go."""
    wh = Warehouse(tmp_path / "wh")
    wh.write("rows", ("p",), pa.table({"x": [1]}))
    with Background() as io:
        io.stage(wh, "rows", ("p",), pa.table({"x": [2]}))
        io.stage(wh, "new", ("p",), pa.table({"x": [2]}))
    assert wh.read("rows", ("p",)) == pa.table({"x": [1]})
    assert wh.read("new", ("p",)) is None
    assert not list((tmp_path / "wh").rglob("*.tmp"))


def test_background_leaves_the_blocks_own_error_as_it_is(tmp_path: Path) -> None:
    wh = _blocked(tmp_path)
    with pytest.raises(ValueError, match="the block's own"), Background() as io:
        io.stage(wh, "blocked", ("p",), pa.table({"x": [1]}))
        io.stage(wh, "fine", ("p",), pa.table({"x": [1]}))
        raise ValueError("the block's own")
    assert wh.read("fine", ("p",)) is None
    with Background() as io:  # nothing asked: nothing raised
        pass
