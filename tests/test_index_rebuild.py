"""After a deletion every index of a generation table is built again from the live rows: the
``doc_id`` BTREE, the full-text index and the IVF_PQ index (whose PQ codes are an approximation
of the deleted vectors); an ANN index of a table left under ``ANN_MIN_ROWS`` is dropped.

A real LanceDB table on disk; the old index files are gone once old versions are removed, as
compaction removes them after a deletion."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa

from corpus_index.index_store import (
    ANN_INDEX,
    ANN_MIN_ROWS,
    FTS_INDEX,
    indexes_holding_rows,
    rebuild_after_deletion,
    scalar_index_name,
)

DIM = 16


def table_of(path: Path, rows: int) -> Any:
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((rows, DIM)).astype("float32")
    data = pa.table(
        {
            "doc_id": [f"doc-{i:05d}" for i in range(rows)],
            "text": [f"row {i} about topic {i % 13}" for i in range(rows)],
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), DIM),
        }
    )
    table = lancedb.connect(path).create_table("gen_test", data)
    from lancedb.index import FTS, BTree, IvfPq

    table.create_index("doc_id", config=BTree())
    table.create_index("text", config=FTS(with_position=False))
    table.create_index(
        "vector", config=IvfPq(distance_type="cosine", num_partitions=4, num_sub_vectors=2)
    )
    return table


def uuids(table: Any) -> dict[str, str]:
    return {idx.name: str(idx.index_uuid) for idx in table.list_indices()}


def old_files_removed(table: Any) -> None:
    table.optimize(cleanup_older_than=dt.timedelta(0), delete_unverified=True)


def test_every_index_holding_rows_is_built_again_after_a_deletion(tmp_path: Path) -> None:
    table = table_of(tmp_path, ANN_MIN_ROWS + 200)
    before = uuids(table)
    assert (
        set(before)
        == set(indexes_holding_rows())
        == {
            scalar_index_name("doc_id"),
            FTS_INDEX,
            ANN_INDEX,
        }
    )
    table.delete("doc_id IN ('doc-00007', 'doc-00008')")
    assert sorted(rebuild_after_deletion(table)) == sorted(before)
    after = uuids(table)
    assert set(after) == set(before) and not set(after.values()) & set(before.values())
    old_files_removed(table)
    indices = tmp_path / "gen_test.lance" / "_indices"
    on_disk = {p.name for p in indices.iterdir()}
    assert not on_disk & set(before.values())  # nothing is left of an index built before
    assert set(uuids(table).values()) <= on_disk
    # the rebuilt indexes cover every live row and answer
    for name in after:
        assert table.index_stats(name).num_unindexed_rows == 0
    assert table.search("topic").limit(3).to_list()
    assert len(table.search(np.ones(DIM, dtype="float32")).limit(5).to_list()) == 5


def test_an_ann_index_of_a_table_left_too_small_is_dropped(tmp_path: Path) -> None:
    table = table_of(tmp_path, ANN_MIN_ROWS + 10)
    table.delete("doc_id < 'doc-00100'")  # 100 rows gone: under ANN_MIN_ROWS
    assert ANN_INDEX in rebuild_after_deletion(table)
    assert ANN_INDEX not in uuids(table)
    old_files_removed(table)
    assert len(table.search(np.ones(DIM, dtype="float32")).limit(5).to_list()) == 5  # exact
