"""The content-addressed embedding cache: vectors keyed by (backend_spec, revision, input_hash).

Shared across collections and generations, so an unchanged block is never embedded twice and
switching back to an old model costs nothing.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from corpus_index import lance, predicates
from corpus_index.errors import DimensionMismatchError
from corpus_index.hashing import canonical_json, sha256_hex

log = logging.getLogger(__name__)

LOOKUP_CHUNK = 2000
# the field metadata naming the (backend_spec, revision) a table of folded name belongs to
OWNER_KEY = "corpus_index:owner"
# tries of a put whose table another writer's creation overwrote meanwhile (see put)
RECREATED_ATTEMPTS = 3


def cache_schema(dim: int) -> pa.Schema:
    return pa.schema(
        [
            ("input_hash", pa.string()),
            ("vector", pa.list_(pa.float32(), dim)),
            ("created_at", pa.timestamp("us", tz="UTC")),
        ]
    )


def folded_table_name(backend_spec: str, revision: str) -> str:
    """The name a cache table had before names were exact: two names that fold alike (case,
    punctuation: ``bge-m3``, ``BGE.M3``) get the same one."""
    return f"cache__{lance.slug(backend_spec)}__{lance.slug(revision)}"


def exact_table_name(backend_spec: str, revision: str) -> str:
    """``cache__<model>__<revision>__<digest>``: the slugs, for the eye, and the first 10 hex
    digits of the sha256 of the exact ``[backend_spec, revision]``, so each has its own."""
    digest = sha256_hex(canonical_json([backend_spec, revision]))[:10]
    return f"{folded_table_name(backend_spec, revision)}__{digest}"


def is_folded_name(name: str) -> bool:
    """Whether ``name`` is a cache table's named before names were exact: the slugs alone,
    ``cache__<model>__<revision>`` (a slug never holds ``__``)."""
    return name.startswith("cache__") and len(name.split("__")) == 3


class FoldedOwner(NamedTuple):
    """The ``(backend_spec, revision)`` a table named before names were exact belongs to,
    whether its metadata records it (else the home's generations decide), or None and why."""

    owner: tuple[str, str] | None
    recorded: bool
    why: str


def folded_owner(table: Any, claimants: Collection[tuple[str, str]]) -> FoldedOwner:
    """Whose ``table`` (named by the folded slugs alone) is: the name its ``vector`` field's
    metadata records, else the only one of ``claimants`` (the ``(backend_spec, revision)``
    the home's generations were built with) that folds to its name; none where no claimant
    or several do, since any of those may have written it."""
    recorded = (table.schema.field("vector").metadata or {}).get(OWNER_KEY.encode())
    if recorded is not None:
        spec, revision = json.loads(recorded.decode())
        return FoldedOwner((str(spec), str(revision)), True, "")
    alike = sorted(c for c in claimants if folded_table_name(*c) == table.name)
    if len(alike) == 1:
        return FoldedOwner(alike[0], False, "")
    if not alike:
        why = "no generation of the home was built with a model whose name folds to it"
    else:
        names = ", ".join(f"{spec} at revision {revision}" for spec, revision in alike)
        why = (
            f"the home's generations were built with {len(alike)} models whose names fold "
            f"to it ({names}), and which of them wrote it cannot be told"
        )
    return FoldedOwner(None, False, why)


class Unclaimed(NamedTuple):
    """A cache table named before names were exact that no model reads, and why."""

    table: str
    why: str


@lance.reads_tables
def unclaimed_tables(uri: str, claimants: Collection[tuple[str, str]]) -> list[Unclaimed]:
    """The cache tables in ``uri`` named before names were exact whose owner cannot be
    decided (see :func:`folded_owner`): no model reads them, each embeds into its own."""
    db = lance.connect(uri)
    found = []
    for name in sorted(n for n in lance.table_names(db) if is_folded_name(n)):
        owner = folded_owner(db.open_table(name), claimants)
        if owner.owner is None:
            found.append(Unclaimed(name, owner.why))
    return found


class EmbeddingCache:
    """One LanceDB table per (backend_spec, revision): ``cache__<slug>__<digest>``.

    A home made before names carried a digest has tables named by the slugs alone, which two
    names that fold alike shared. Such a table stays the cache of the name that owns it: the
    one its ``vector`` field's metadata names, or, before any does, the only one of
    ``claimants`` (the ``(backend_spec, revision)`` the home's generations were built with)
    that folds to it, which a writer then records there (:meth:`claim`). Any other name has a
    table of its own.
    """

    def __init__(
        self,
        uri: str,
        *,
        backend_spec: str,
        revision: str,
        dim: int,
        claimants: Collection[tuple[str, str]] = (),
    ) -> None:
        self.uri = uri
        self.backend_spec = backend_spec
        self.revision = revision
        self.dim = dim
        self._claimants = frozenset(claimants)
        self._name: str | None = None
        self._db = lance.connect(uri)

    @property
    @lance.reads_tables
    def table_name(self) -> str:
        """The table's name, found once: an owned table of the folded name, else the exact."""
        if self._name is None:
            folded = folded_table_name(self.backend_spec, self.revision)
            owned = folded in lance.table_names(self._db) and self._owns(folded)
            self._name = folded if owned else exact_table_name(self.backend_spec, self.revision)
        return self._name

    def _owns(self, folded: str) -> bool:
        """Whether the table named by the folded slugs alone is this name's (see the class)."""
        found = folded_owner(self._db.open_table(folded), self._claimants)
        if found.owner is None:
            log.warning(
                "the embedding cache table %s in %s was named before cache names were exact, "
                "and %s: %s at revision %s does not read it and embeds into %s (drop %s once "
                "no model needs it)",
                folded,
                self.uri,
                found.why,
                self.backend_spec,
                self.revision,
                exact_table_name(self.backend_spec, self.revision),
                folded,
            )
            return False  # another name may have written it, or the home knows of none
        return found.owner == (self.backend_spec, self.revision)

    @lance.reads_tables
    def claim(self) -> None:
        """Record this name in its table named before names were exact, where the home's
        generations decided it is this name's and the table does not say so yet, so a model
        of a name that folds alike, added later, cannot make it unclaimed. A metadata write:
        for the steps that write (the sync's ``embeddings``, a ``put``), never a reading
        command, which decides the owner the same way without it."""
        name = self.table_name
        if not is_folded_name(name):
            return
        table = self._db.open_table(name)
        if folded_owner(table, self._claimants).recorded:
            return
        me = canonical_json([self.backend_spec, self.revision])
        stamp = {"path": "vector", "metadata": {OWNER_KEY: me}}
        lance.retry_commits(lambda: table.update_field_metadata(stamp), table=table)

    def _table(self, *, create: bool) -> Any:
        if self.table_name in lance.table_names(self._db):
            return self._db.open_table(self.table_name)
        if not create:
            return None
        return self._db.create_table(self.table_name, schema=cache_schema(self.dim), exist_ok=True)

    def _vectors_table(self, *, create: bool) -> Any:
        """The table, refused when its vectors are not ``dim`` wide: the name says only which
        model and revision, so a table written under another ``dim`` (a profile truncating
        the model's vectors, a copied home) would be read as vectors cut at the wrong place.

        Raises:
            DimensionMismatchError: naming the table, its width and the width wanted.
        """
        table = self._table(create=create)
        if table is None:
            return None
        kind = table.schema.field("vector").type
        if not (pa.types.is_fixed_size_list(kind) and kind.list_size == self.dim):
            width = kind.list_size if pa.types.is_fixed_size_list(kind) else "variable"
            exc = DimensionMismatchError(
                f"the embedding cache table {self.table_name} holds vectors of dimension "
                f"{width}, but {self.backend_spec} at revision {self.revision} is configured "
                f"for dimension {self.dim}"
            )
            exc.add_note(
                f"the table is only a cache: drop {self.table_name} from {self.uri} and the "
                "vectors are embedded again"
            )
            raise exc
        return table

    @lance.reads_tables
    def lookup(self, hashes: Sequence[str]) -> dict[str, npt.NDArray[np.float32]]:
        """Cached vectors for the given input hashes (missing ones are absent from the result).

        Raises:
            DimensionMismatchError: the table holds vectors of another width than ``dim``.
        """
        table = self._vectors_table(create=False)
        found: dict[str, npt.NDArray[np.float32]] = {}
        if table is None or not hashes:
            return found
        for result in _matching(table, sorted(set(hashes)), ["input_hash", "vector"]):
            if result.num_rows == 0:
                continue
            keys = result.column("input_hash").to_pylist()
            flat = result.column("vector").combine_chunks()
            vectors = flat.values.to_numpy(zero_copy_only=False).reshape(-1, self.dim)
            for key, vec in zip(keys, vectors, strict=True):
                found[key] = vec.astype(np.float32, copy=False)
        return found

    @lance.reads_tables
    def put(self, hashes: Sequence[str], vectors: npt.NDArray[np.float32]) -> int:
        """Store vectors; keys already stored are left untouched. Returns how many were offered.

        The keys present are looked up first and only the others appended. A ``merge_insert``
        on ``input_hash`` would do the same in one call, but it joins against the whole table,
        so its memory grows with the cache (measured: +75 MiB per window at 160,000 entries,
        against +30 MiB for this). Two writers racing on the same new key can both append it;
        ``lookup`` takes either copy, and the duplicates cost only space. Two writers that both
        found the table missing both create it, and LanceDB commits the second creation as an
        overwrite of the first: an append made on the first then conflicts with it, and is
        made again on the table as it now is (what the overwrite dropped is only cache).
        """
        if len(hashes) == 0:
            return 0
        self.claim()
        table = self._vectors_table(create=True)
        matrix = np.asarray(vectors, dtype=np.float32).reshape(len(hashes), self.dim)
        for attempt in range(1, RECREATED_ATTEMPTS + 1):
            try:
                self._append_absent(table, hashes, matrix)
                return len(hashes)
            except (RuntimeError, OSError, ValueError) as exc:
                if attempt == RECREATED_ATTEMPTS or not lance.is_overwritten(exc):
                    raise
                table.checkout_latest()
        raise AssertionError("unreachable")  # the loop returns or raises

    def _append_absent(self, table: Any, hashes: Sequence[str], matrix: np.ndarray) -> None:
        # one row per key: its first occurrence among the offered, if the table lacks it
        first: dict[str, int] = {}
        for i, h in enumerate(hashes):
            first.setdefault(h, i)
        for result in _matching(table, list(first), ["input_hash"]):  # the keys it holds
            for key in result.column("input_hash").to_pylist():
                first.pop(key, None)
        if not first:
            return
        rows = list(first.values())
        now = dt.datetime.now(dt.UTC)
        data = pa.table(
            {
                "input_hash": pa.array(list(first), pa.string()),
                "vector": pa.FixedSizeListArray.from_arrays(
                    pa.array(matrix[rows].ravel(), pa.float32()), self.dim
                ),
                "created_at": pa.array([now] * len(rows), pa.timestamp("us", tz="UTC")),
            },
            schema=cache_schema(self.dim),
        )
        lance.retry_commits(lambda: table.add(data), table=table)

    @lance.reads_tables
    def count(self) -> int:
        table = self._table(create=False)
        return 0 if table is None else int(table.count_rows())

    @lance.reads_tables
    def delete(self, hashes: Iterable[str]) -> int:
        """Remove entries (cache purge at compaction)."""
        return delete_entries(self._table(create=False), hashes)


def delete_entries(table: Any, hashes: Iterable[str]) -> int:
    """Remove the rows of ``hashes`` from ``table`` (a table keyed by ``input_hash``, or None:
    nothing), LOOKUP_CHUNK keys per commit. Returns how many rows went."""
    keys = sorted(set(hashes))
    if table is None or not keys:
        return 0
    before = int(table.count_rows())
    for start in range(0, len(keys), LOOKUP_CHUNK):
        where = predicates.is_in("input_hash", keys[start : start + LOOKUP_CHUNK])
        lance.retry_commits(functools.partial(table.delete, where), table=table)
    return before - int(table.count_rows())


def _matching(table: Any, keys: Sequence[str], columns: list[str]) -> Iterator[pa.Table]:
    """``columns`` of the rows whose key is among ``keys``, LOOKUP_CHUNK keys per query; every
    match, so a key stored twice by racing writers comes back twice."""
    for start in range(0, len(keys), LOOKUP_CHUNK):
        chunk = keys[start : start + LOOKUP_CHUNK]
        yield (
            table.search()
            .where(predicates.is_in("input_hash", chunk))
            .select(columns)
            .limit(None)
            .to_arrow()
        )
