"""Partitions in ``doc_id`` order, processed a range of documents at a time.

``parsed_blocks`` and ``embedding_inputs`` partitions are written in ``doc_id`` order (blocks
by ``(doc_id, block_key)``, inputs in block order). A step that rebuilds one of them from its
inputs and its own previous version walks both forward together, one range of documents at a
time, so it holds one range, never the whole partition.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc


class OrderError(ValueError):
    """A stream that should be in ``doc_id`` order is not."""


def _checked(batches: Iterable[pa.RecordBatch], what: str) -> Iterator[pa.Table]:
    """``batches`` as tables, each checked to continue the ``doc_id`` order of the last."""
    last: str | None = None
    for batch in batches:
        if not batch.num_rows:
            continue
        ids = batch.column(batch.schema.get_field_index("doc_id"))
        first = ids[0].as_py()
        if (last is not None and first < last) or (
            len(ids) > 1 and not pc.all(pc.greater_equal(ids[1:], ids[:-1])).as_py()
        ):
            raise OrderError(f"{what}: rows are not in doc_id order (rebuild it: `corpus sync`)")
        last = ids[-1].as_py()
        yield pa.Table.from_batches([batch])


def whole_documents(
    batches: Iterable[pa.RecordBatch], schema: pa.Schema, rows: int, *, what: str
) -> Iterator[pa.Table]:
    """Tables of at most ``rows`` rows from a stream in ``doc_id`` order, never splitting a
    document between two tables (a document with more rows than that goes alone)."""
    pending = schema.empty_table()
    for table in _checked(batches, what):
        pending = pa.concat_tables([pending, table.cast(schema)])
        while pending.num_rows > rows:
            ids = pending["doc_id"]
            at = ids[rows]  # the first row past a full table
            cut = _count(pc.less(ids, at))  # the documents that fit whole
            if not cut:  # the first document alone is longer: it goes once it is complete
                cut = _count(pc.less_equal(ids, at))
                if cut == pending.num_rows:
                    break  # it may go on in the next batch
            yield pending.slice(0, cut)
            pending = pending.slice(cut)
    if pending.num_rows:
        yield pending


def _count(mask: pa.ChunkedArray) -> int:
    return int(pc.sum(mask).as_py() or 0)


class DocCursor:
    """Reads a stream in ``doc_id`` order forward, handing out one range of documents at a
    time: each call returns the rows up to a ``doc_id`` that earlier calls did not return."""

    def __init__(self, batches: Iterable[pa.RecordBatch], schema: pa.Schema, *, what: str) -> None:
        self._tables = _checked(batches, what)
        self._schema = schema
        self._head: pa.Table | None = None

    def through(self, last_doc: str) -> pa.Table:
        """Rows not yet returned whose ``doc_id`` is at most ``last_doc``."""
        parts: list[pa.Table] = []
        while True:
            if self._head is None:
                self._head = next(self._tables, None)  # None again and again once exhausted
                if self._head is None:
                    break
            ids = self._head["doc_id"]
            n = _count(pc.less_equal(ids, last_doc))
            if n == self._head.num_rows:
                parts.append(self._head)
                self._head = None
                continue
            parts.append(self._head.slice(0, n))
            self._head = self._head.slice(n)
            break
        if not parts:
            return self._schema.empty_table()
        return pa.concat_tables([p.cast(self._schema) for p in parts])

    def rest(self) -> pa.Table:
        """Every row not yet returned."""
        parts = [] if self._head is None else [self._head]
        parts.extend(self._tables)
        self._head = None
        if not parts:
            return self._schema.empty_table()
        return pa.concat_tables([p.cast(self._schema) for p in parts])
