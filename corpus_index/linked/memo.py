"""What the last run of the groupings computed, kept by a key of everything it was computed
from, so a run computes again only what changed (seed "Linked Context" §5 at scale).

A key is the sha256 of the inputs of one computation: a question's scored answers (the
question, its candidates, the TF-IDF blocks they are weighed in, the window), a group's
description (the group, its members, their blocks, their identity anchors, the hints), and the
code of this package. A key found in the earlier run's entries is its result; any other is
computed and kept. A run keeps only the entries it used, so entries of what changed or went
away are dropped. The results are the same as computing everything again, by construction:
anything a result reads is in its key.

Entries are kept as :data:`MEMO_SCHEMA` rows (key, JSON value, tenant), one warehouse
partition per collection; entries hold text derived from units, so deleting a unit drops them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import marshal
import operator
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import pyarrow as pa

from corpus_index.linked.messages import Message

MEMO_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("value", pa.string()),
        ("tenant_id", pa.string()),
    ]
)


@lru_cache(maxsize=1)
def code_digest() -> str:
    """sha256 of this package's code and weights: other code computes other results."""
    h = hashlib.sha256()
    here = Path(__file__).resolve().parent
    for path in sorted([*here.glob("*.py"), *here.glob("*.json")]):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


_ATOMS = frozenset({str, int, float, bool, type(None), bytes})
# a record type -> a function giving its fields as a tuple, in order (None: not a record)
_GETTERS: dict[type, Callable[[Any], tuple[Any, ...]] | None] = {}


def _getter_of(cls: type) -> Callable[[Any], tuple[Any, ...]] | None:
    """A record type's fields as a tuple, read in one call (None for any other type)."""
    if cls not in _GETTERS:
        names: tuple[str, ...] = ()
        if hasattr(cls, "_fields"):  # a named tuple
            names = tuple(cls._fields)
        elif dataclasses.is_dataclass(cls):
            names = tuple(f.name for f in dataclasses.fields(cls))
        if not names:
            _GETTERS[cls] = None
        elif len(names) == 1:
            get = operator.attrgetter(names[0])
            _GETTERS[cls] = lambda v: (get(v),)
        else:
            _GETTERS[cls] = operator.attrgetter(*names)
    return _GETTERS[cls]


def plain(value: Any) -> Any:
    """``value`` with every record (dataclass, named tuple) as a tuple of its type's name and
    its fields, recursively, every list as a tuple, and a value of any other type (a dict, a
    NumPy scalar) as its type's name in angle brackets and its repr: atoms in tuples only,
    what a key is made of (see :func:`encoded`)."""
    cls = type(value)
    if cls in _ATOMS:
        return value
    if cls is list or cls is tuple:
        return tuple([v if type(v) in _ATOMS else plain(v) for v in value])
    get = _getter_of(cls)
    if get is not None:
        return (cls.__name__, *[v if type(v) in _ATOMS else plain(v) for v in get(value)])
    return (f"<{cls.__module__}.{cls.__qualname__}>", repr(value))


# marshal's version 2 writes a value by what it is: no references to objects written before
# (version 3 on), whose bytes would depend on which equal values are the same object
_MARSHAL_VERSION = 2


def encoded(value: Any) -> bytes:
    """The bytes a key hashes of a value :func:`plain` gave (atoms in tuples): equal values
    give equal bytes, different values different bytes. Marshalled, in a fixed layout
    (several times faster than its repr)."""
    return marshal.dumps(value, _MARSHAL_VERSION)


class Memo:
    """The entries of an earlier run of one tenant (``previous``: key -> JSON value), and
    those this run used (:attr:`kept`), to give the next run.

    Args:
        previous: the earlier run's entries (none: compute everything).
        tenant_id: whose units these are; only entries of this tenant are read.
    """

    def __init__(self, previous: Iterable[Mapping[str, str]] = (), *, tenant_id: str = "") -> None:
        self.tenant_id = tenant_id
        self._previous = {r["key"]: r["value"] for r in previous if r["tenant_id"] == tenant_id}
        self.kept: dict[str, str] = {}
        self.reused = 0
        self.computed = 0
        self._prints: dict[str, str] = {}

    def fingerprint(self, m: Message) -> str:
        """sha256 of everything of ``m`` (by unit id, once a run)."""
        found = self._prints.get(m.unit_id)
        if found is None:
            found = hashlib.sha256(encoded(plain(m))).hexdigest()
            self._prints[m.unit_id] = found
        return found

    def key(self, *parts: Any) -> str:
        """The key of a computation from ``parts`` (plain values and records)."""
        return hashlib.sha256(encoded((code_digest(), plain(parts)))).hexdigest()

    def get(self, key: str) -> Any | None:
        """The earlier run's result for ``key`` (kept for the next run), or None."""
        raw = self._previous.get(key)
        if raw is None:
            return None
        self.kept[key] = raw
        self.reused += 1
        return json.loads(raw)

    def put(self, key: str, value: Any) -> None:
        """Keep ``value`` (plain JSON data) as the result for ``key``."""
        self.kept[key] = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        self.computed += 1


def memo_table(memos: Iterable[Memo]) -> pa.Table:
    """The entries ``memos`` kept, as a table of :data:`MEMO_SCHEMA` (sorted by key)."""
    rows = [
        {"key": k, "value": v, "tenant_id": m.tenant_id} for m in memos for k, v in m.kept.items()
    ]
    rows.sort(key=lambda r: (r["tenant_id"], r["key"]))
    return pa.Table.from_pylist(rows, schema=MEMO_SCHEMA)


def read_memo(table: pa.Table | None) -> list[dict[str, str]]:
    """The entries of a table of :data:`MEMO_SCHEMA` (none for ``None``)."""
    if table is None:
        return []
    rows: list[dict[str, str]] = table.select(MEMO_SCHEMA.names).to_pylist()
    return rows
