"""Physical purge of deleted rows from LanceDB tables.

A LanceDB delete only writes a deletion file that masks the rows; their bytes stay in the
fragment's data file. ``optimize()`` rewrites a fragment only when a large share of it (10%) is
deleted, and the Python API of LanceDB 0.40 does not pass compaction options
(``materialize_deletions_threshold``) through; ``compact_files`` needs the separate ``pylance``
package. So a fragment that held a deleted row is rewritten here with the public ``update``: every
live row of the fragment is updated in place (``col = col``), in one commit. Lance writes the
updated rows to a new fragment, and a fragment all of whose rows are deleted leaves the manifest,
so its data file and deletion file belong to old versions only, and ``optimize(cleanup_older_than=
0)`` removes them.

Fragment ids are the high 32 bits of ``_rowaddr``; Lance never reuses a fragment id, so a
fragment recorded at deletion time that is gone from the table was rewritten since (by
``optimize``), without the deleted rows.

A deletion's receipt names the fragments holding the source's live rows then; an earlier
version of the source (its rows replaced by an edit's ``merge_insert``) may lie masked in
another fragment, which no query can see. Lance names each deletion file after its fragment
(``_deletions/<fragment>-<version>-<id>.arrow`` or ``.bin``): :func:`fragments_with_deletions`
lists the fragments holding masked rows of any kind, so a purge can rewrite them all.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from corpus_index import predicates
from corpus_index.storage import Location

FRAGMENT_BITS = 32


@dataclass(frozen=True, slots=True)
class Rewrite:
    """What one purge rewrote."""

    fragments: int
    rows: int


def fragments_of(addresses: Any) -> set[int]:
    values = np.asarray(addresses.to_numpy(zero_copy_only=False), dtype=np.uint64)
    return {int(f) for f in np.unique(values >> np.uint64(FRAGMENT_BITS))}


def fragments_where(table: Any, where: str | None = None) -> set[int]:
    """Ids of the fragments that hold a live row matching ``where`` (every fragment if None)."""
    if int(table.count_rows(where)) == 0:
        return set()
    query = table.search()
    if where is not None:
        query = query.where(where)
    return fragments_of(query.select(["_rowaddr"]).limit(None).to_arrow()["_rowaddr"])


def _fragment_range(fragment: int) -> str:
    # integers computed here, never user values
    lo, hi = fragment << FRAGMENT_BITS, (fragment + 1) << FRAGMENT_BITS
    return f"(_rowaddr >= {lo} AND _rowaddr < {hi})"


def rewrite_fragments(table: Any, fragments: Iterable[int] | None) -> Rewrite:
    """Rewrite the live rows of ``fragments`` (every fragment if None) into new fragments, in
    one commit, so the old data files hold only what the current version no longer references.

    Fragments no longer in the table are skipped. The table's indexes do not cover the rewritten
    rows until the next ``optimize``.
    """
    live = fragments_where(table)
    targets = sorted(live if fragments is None else live & set(fragments))
    if not targets:
        return Rewrite(fragments=0, rows=0)
    where = " OR ".join(_fragment_range(f) for f in targets)
    rows = int(table.count_rows(where))
    key = predicates.column(table.schema.names[0])
    table.update(where=where, values_sql={key: key})
    return Rewrite(fragments=len(targets), rows=rows)


def fragments_with_deletions(table_folder: Location) -> set[int]:
    """Ids of the fragments of the table at ``table_folder`` (``<name>.lance``, local or in an
    object store) that have a deletion file: rows masked, their bytes still in the fragment's
    data file. Files a kept older version refers to are among them; a fragment no longer in
    the table is skipped by :func:`rewrite_fragments`."""
    out: set[int] = set()
    for entry in (table_folder / "_deletions").iterdir():
        head = entry.name.split("-", 1)[0]
        if head.isdigit():
            out.add(int(head))
    return out
