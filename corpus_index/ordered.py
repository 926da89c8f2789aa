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
    """Tables of about ``rows`` rows (more only when one document has more) from a stream in
    ``doc_id`` order, never splitting a document between two tables."""
    pending: list[pa.Table] = []
    held = 0
    for table in _checked(batches, what):
        pending.append(table)
        held += table.num_rows
        if held < rows:
            continue
        whole = pa.concat_tables(pending)
        last = whole["doc_id"][-1]
        complete = int(pc.sum(pc.less(whole["doc_id"], last)).as_py() or 0)
        if complete:  # everything before the last document, which may continue in the stream
            yield whole.slice(0, complete).cast(schema)
            pending, held = [whole.slice(complete)], whole.num_rows - complete
        else:
            pending, held = [whole], whole.num_rows
    if held:
        yield pa.concat_tables(pending).cast(schema)


class DocCursor:
    """Reads a stream in ``doc_id`` order forward, handing out one range of documents at a
    time: each call returns the rows up to a ``doc_id`` that earlier calls did not return."""

    def __init__(self, batches: Iterable[pa.RecordBatch], schema: pa.Schema, *, what: str) -> None:
        self._tables = _checked(batches, what)
        self._schema = schema
        self._head: pa.Table | None = None
        self._done = False

    def through(self, last_doc: str) -> pa.Table:
        """Rows not yet returned whose ``doc_id`` is at most ``last_doc``."""
        parts: list[pa.Table] = []
        while True:
            if self._head is None:
                self._head = next(self._tables, None) if not self._done else None
                if self._head is None:
                    self._done = True
                    break
            ids = self._head["doc_id"]
            n = int(pc.sum(pc.less_equal(ids, last_doc)).as_py() or 0)
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
