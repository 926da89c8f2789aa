"""The inputs an embedder's server refused, remembered per model so that none is sent again.

An input the server refused alone (see ``corpus_index.refusals``) is recorded here, keyed by
the model (``backend_spec``, revision and dimension, as the embedding cache keys its vectors)
and the input's hash, with the server's first answer. The next run of any collection or
profile of that model holds the input back without a request, until its text changes (another
hash), the model changes (another table), or a run is asked to retry the refused inputs
(``corpus sync --retry-refused``).

The memo is a table of the embedding cache, ``<cache table>__refused_<dim>``: its entries go
where the cache's do (those no live input uses are purged by ``corpus compact``, so a deleted
source's are, and ``corpus audit-deletion`` looks for them in every ``cache__`` table).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from corpus_index import lance, predicates
from corpus_index.cache import LOOKUP_CHUNK, delete_entries, exact_table_name

MEMO_SCHEMA = pa.schema(
    [
        ("input_hash", pa.string()),
        ("error", pa.string()),  # the server's first answer
        ("refused_at", pa.timestamp("us", tz="UTC")),
    ]
)


def memo_table_name(backend_spec: str, revision: str, dim: int) -> str:
    """``cache__<model>__<revision>__<digest>__refused_<dim>``: the model's cache table's
    name, and the dimension its vectors are asked at."""
    return f"{exact_table_name(backend_spec, revision)}__refused_{dim}"


class RefusalMemo:
    """The inputs one model's server refused: input hash -> the server's first answer."""

    def __init__(self, uri: str, *, backend_spec: str, revision: str, dim: int) -> None:
        self.uri = uri
        self.table_name = memo_table_name(backend_spec, revision, dim)
        self._db = lance.connect(uri)

    def _table(self, *, create: bool) -> Any:
        if self.table_name in lance.table_names(self._db):
            return self._db.open_table(self.table_name)
        if not create:
            return None
        return self._db.create_table(self.table_name, schema=MEMO_SCHEMA, exist_ok=True)

    @lance.reads_tables
    def exists(self) -> bool:
        """Whether any refusal of this model was ever remembered (its table is there)."""
        return self.table_name in lance.table_names(self._db)

    @lance.reads_tables
    def lookup(self, hashes: Sequence[str]) -> dict[str, str]:
        """The remembered answer of each of ``hashes`` the server refused (the others absent)."""
        table = self._table(create=False)
        found: dict[str, str] = {}
        if table is None or not hashes:
            return found
        keys = sorted(set(hashes))
        for start in range(0, len(keys), LOOKUP_CHUNK):
            rows = (
                table.search()
                .where(predicates.is_in("input_hash", keys[start : start + LOOKUP_CHUNK]))
                .select(["input_hash", "error", "refused_at"])
                .limit(None)
                .to_arrow()
                .sort_by("refused_at")
            )
            for key, error in zip(
                rows["input_hash"].to_pylist(), rows["error"].to_pylist(), strict=True
            ):
                found.setdefault(key, error)  # the first answer, where racing runs wrote two
        return found

    @lance.reads_tables
    def put(self, refused: Mapping[str, str]) -> int:
        """Remember ``refused`` (input hash -> the server's answer); an input remembered
        already keeps its first answer. Returns how many were added."""
        if not refused:
            return 0
        table = self._table(create=True)
        known = self.lookup(list(refused))
        new = {h: e for h, e in refused.items() if h not in known}
        if not new:
            return 0
        now = dt.datetime.now(dt.UTC)
        data = pa.table(
            {
                "input_hash": pa.array(list(new), pa.string()),
                "error": pa.array(list(new.values()), pa.string()),
                "refused_at": pa.array([now] * len(new), pa.timestamp("us", tz="UTC")),
            },
            schema=MEMO_SCHEMA,
        )
        lance.retry_commits(lambda: table.add(data), table=table)
        return len(new)

    @lance.reads_tables
    def forget(self, hashes: Iterable[str]) -> int:
        """Forget ``hashes`` (asked again and taken, or to be asked again). Returns how many
        entries went."""
        return delete_entries(self._table(create=False), hashes)
