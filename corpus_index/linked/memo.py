"""What the last run of the groupings computed, kept by a key of everything it was computed
from, so a run computes again only what changed (seed "Linked Context" §5 at scale).

A key is the sha256 of the inputs of one computation: a question's scored answers (the
question, its candidates, what their TF-IDF vectors are weighed by, the window), an answer
verifier's verdict on a pair (the verifier's identity and the two messages), a group's
description (the group, its members, their weighing, their identity anchors, the hints), and the
code of this package; what a key reads of each unit is hashed once a run
(:class:`UnitParts`), so a key holds one digest a member. A key found in the earlier run's
entries is its result; any other is computed and kept. A run keeps only the entries it used,
so entries of what changed or went away are dropped. The results are the same as computing
everything again, by construction: anything a result reads is in its key.

Entries are kept as :data:`MEMO_SCHEMA` rows (key, JSON value, tenant, the units it was
computed from), one warehouse partition per collection. An entry can quote the units it read,
so deleting a unit drops the entries that read it (:func:`without_units`), and only those: any
other entry is what a run after the deletion computes again from the same inputs. A checkpoint
of a pass over the units in time order (the topic clustering's) reads every unit before it:
it names the newest time it read instead, and a deletion drops it only when a removed unit is
no newer.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import marshal
import math
import operator
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from itertools import chain
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from corpus_index.linked.messages import Message
from corpus_index.linked.records import Group, Member

MEMO_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("value", pa.string()),
        ("tenant_id", pa.string()),
        # the units the result was computed from; null: any unit before it (a checkpoint of a
        # sequential pass), so that deleting any unit drops it
        ("units", pa.list_(pa.string())),
        # of an entry of null units: the newest time (seconds since the epoch) of the units it
        # read, so that deleting only newer units keeps it; null: any unit
        ("until", pa.float64()),
    ]
)
# what a run reads of the entries (never their units, which only a deletion reads)
MEMO_READ = ["key", "value", "tenant_id"]


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


def _fields(cls: type) -> Callable[[Any], tuple[Any, ...]]:
    get = _getter_of(cls)
    if get is None:
        raise TypeError(f"{cls.__qualname__} is not a record")
    return get


def _all_atoms(values: Iterable[Any]) -> bool:
    return _ATOMS.issuperset(map(type, values))


def _declared(cls: type, prefix: str) -> list[int]:
    """The places of ``cls``'s fields whose declared type starts with ``prefix``."""
    return [k for k, f in enumerate(dataclasses.fields(cls)) if str(f.type).startswith(prefix)]


def _picker(places: list[int]) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    """The values at ``places`` of a tuple, as a tuple."""
    if len(places) == 1:
        return lambda t: (t[places[0]],)
    return operator.itemgetter(*places)


def _others(cls: type, places: list[int]) -> list[int]:
    return [k for k in range(len(dataclasses.fields(cls))) if k not in places]


_GROUP = _fields(Group)
_MEMBER = _fields(Member)
_MEMBERS_AT = _declared(Group, "tuple[Member")[0]
_GROUP_TUPLES = _picker(_declared(Group, "tuple[str"))  # anchors and tags
_GROUP_SCALARS = _picker(_others(Group, [_MEMBERS_AT, *_declared(Group, "tuple[str")]))
_MEMBER_TYPE = frozenset({Member})
_TUPLE_TYPE = frozenset({tuple})


def _quick_group(g: Group) -> Any:
    f = _GROUP(g)
    members = f[_MEMBERS_AT]
    tuples = _GROUP_TUPLES(f)
    if (
        type(members) is tuple
        and _MEMBER_TYPE.issuperset(map(type, members))
        and _TUPLE_TYPE.issuperset(map(type, tuples))
    ):
        fields = tuple(map(_MEMBER, members))
        if _all_atoms(chain(_GROUP_SCALARS(f), *tuples, *fields)):
            kept = tuple([("Member", *m) for m in fields])
            return ("Group", *f[:_MEMBERS_AT], kept, *f[_MEMBERS_AT + 1 :])
    return plain(g)


def _quick_member(m: Member) -> Any:
    f = _MEMBER(m)
    return ("Member", *f) if _all_atoms(f) else plain(m)


# :func:`plain` of the records keys are mostly made of (a group and its members), in one
# pass without recursion where their fields hold the types they are declared with (atoms,
# tuples of atoms, members), else by :func:`plain`
_QUICK: dict[type, Callable[[Any], Any]] = {
    Group: _quick_group,
    Member: _quick_member,
}


def _quick(value: Any) -> Any:
    """:func:`plain` of ``value``, the quick way for the records of :data:`_QUICK` and the
    lists of atoms in a tuple of parts (the same result, several times faster)."""
    cls = type(value)
    quick = _QUICK.get(cls)
    if quick is not None:
        return quick(value)
    if cls is not tuple:
        return plain(value)
    out = []
    for v in value:
        t = type(v)
        if t in _ATOMS:
            out.append(v)
        elif t in _QUICK:
            out.append(_QUICK[t](v))
        elif (t is list or t is tuple) and _all_atoms(v):
            out.append(tuple(v))
        else:
            out.append(plain(v))
    return tuple(out)


def digest(value: Any) -> str:
    """sha256 (hex) of :func:`encoded` :func:`plain` ``value``."""
    return hashlib.sha256(encoded(_quick(value))).hexdigest()


_UNIT_ID = operator.attrgetter("unit_id")


class UnitParts:
    """Each unit's digest of what a keyed result reads of it (``parts`` of its unit id: its
    fingerprint, the TF-IDF block it is weighed in, its identity anchors, ...), made once and
    then looked up by unit id: a group's key hashes one short digest a member instead of all
    they are made of again. Made afresh for each run's units (what a unit id stands for is
    fixed within one run, not across runs). Parts that are atoms only (a list's items spread
    after the parts of fixed place) are hashed as they are, the quickest way.
    """

    def __init__(
        self, parts: Callable[[str], tuple[Any, ...]], known: Mapping[str, bytes] | None = None
    ) -> None:
        self._parts = parts
        # ``known``: units' digests made by an earlier run from the same parts
        self._made: dict[str, bytes] = dict(known or {})

    @property
    def made(self) -> Mapping[str, bytes]:
        """Each unit's digest made (or known) so far, by unit id."""
        return self._made

    def __call__(self, units: Iterable[Any]) -> list[bytes]:
        """The digests (sha256, raw) of ``units`` (members or messages: anything with a
        ``unit_id``), in their order."""
        ids = list(map(_UNIT_ID, units))
        made = self._made
        if not all(map(made.__contains__, ids)):  # units not seen yet: made now, once each
            for unit in ids:
                if unit not in made:
                    parts = self._parts(unit)
                    raw = encoded(parts if _all_atoms(parts) else _quick(parts))
                    made[unit] = hashlib.sha256(raw).digest()
        return list(map(made.__getitem__, ids))


class Memo:
    """The entries of an earlier run of one tenant (``previous``: key -> JSON value), and
    those this run used (:attr:`kept`), to give the next run.

    Args:
        previous: the earlier run's entries (none: compute everything), or its table
            (:data:`MEMO_SCHEMA`, read as :func:`read_memo` reads it).
        tenant_id: whose units these are; only entries of this tenant are read.
        prints: the :meth:`fingerprint` of units known to be as they were when it was made
            (unit id -> it; see :mod:`corpus_index.unit_prints`), taken instead of hashing them.
        unmade: the earlier run's settled entries of the groups a grouping may carry before
            making them, by their members' ids (see
            :func:`corpus_index.linked.settled.unmade_index`).
    """

    def __init__(
        self,
        previous: Iterable[Mapping[str, str]] | pa.Table = (),
        *,
        tenant_id: str = "",
        prints: Mapping[str, str] | None = None,
        unmade: Mapping[str, tuple[str, list[Any]]] | None = None,
    ) -> None:
        self.tenant_id = tenant_id
        if isinstance(previous, pa.Table):  # a table of MEMO_SCHEMA, read column by column
            mine = previous.filter(pc.equal(previous["tenant_id"], tenant_id))
            keys, values = mine["key"].to_pylist(), mine["value"].to_pylist()
            self._previous: dict[str, str] = dict(zip(keys, values, strict=True))
        else:
            self._previous = {r["key"]: r["value"] for r in previous if r["tenant_id"] == tenant_id}
        self.kept: dict[str, str] = {}
        # the units of each entry computed by this run (the others are the earlier run's)
        self.units: dict[str, list[str] | None] = {}
        # of those of null units: the newest time of the units read (None: any)
        self.until: dict[str, float | None] = {}
        self.reused = 0
        self.computed = 0
        self._prints: dict[str, str] = dict(prints or {})
        self.unmade: Mapping[str, tuple[str, list[Any]]] = unmade or {}

    def fingerprint(self, m: Message) -> str:
        """sha256 of everything of ``m`` (by unit id, once a run)."""
        found = self._prints.get(m.unit_id)
        if found is None:
            found = digest(m)
            self._prints[m.unit_id] = found
        return found

    @property
    def prints(self) -> Mapping[str, str]:
        """The :meth:`fingerprint` of each unit this run made or was given (by unit id)."""
        return self._prints

    def key(self, *parts: Any) -> str:
        """The key of a computation from ``parts`` (plain values and records)."""
        return digest((code_digest(), *parts))

    def get(self, key: str) -> Any | None:
        """The earlier run's result for ``key`` (kept for the next run), or None."""
        raw = self._previous.get(key)
        if raw is None:
            return None
        self.kept[key] = raw
        self.reused += 1
        return json.loads(raw)

    def has(self, key: str) -> bool:
        """Whether the earlier run has a result for ``key`` (then kept for the next run, as
        by :meth:`get`), without decoding it."""
        raw = self._previous.get(key)
        if raw is None:
            return False
        self.kept[key] = raw
        self.reused += 1
        return True

    def put(
        self,
        key: str,
        value: Any,
        *,
        units: Iterable[str] | None = None,
        until: float | None = None,
        computed: bool = True,
    ) -> None:
        """Keep ``value`` (plain JSON data) as the result for ``key``, computed from ``units``
        (None: from any unit before it; deleting one then drops it, any unit when ``until``,
        the newest time of the units it read, is None). Not ``computed``: a record of what
        the run used (the description a settled group's row was made from), not counted as
        a result."""
        self.kept[key] = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        self.units[key] = None if units is None else sorted(set(units))
        self.until[key] = until if units is None else None
        self.computed += computed


def memo_table(memos: Iterable[Memo], previous: pa.Table | None = None) -> pa.Table:
    """The entries ``memos`` kept, as a table of :data:`MEMO_SCHEMA` (sorted by tenant, then
    key): those computed by this run built column by column, those reused taken whole from
    ``previous`` (the earlier run's table, whose rows hold their units; without it, or where
    it has no units, a reused entry is taken as read from any unit)."""
    keys: list[str] = []
    values: list[str] = []
    tenants: list[str] = []
    units: list[list[str] | None] = []
    until: list[float | None] = []
    parts: list[pa.Table] = []
    for m in memos:
        reused = [k for k in m.kept if k not in m.units]
        if reused and previous is not None and previous.num_rows:
            mine = pc.and_(
                pc.equal(previous["tenant_id"], m.tenant_id),
                pc.is_in(previous["key"], pa.array(reused, pa.string())),
            )
            parts.append(_with_units(previous.filter(mine)))
        elif reused:
            parts.append(_unknown(reused, [m.kept[k] for k in reused], m.tenant_id))
        for key, of in m.units.items():
            keys.append(key)
            values.append(m.kept[key])
            tenants.append(m.tenant_id)
            units.append(of)
            until.append(m.until.get(key))
    parts.append(
        pa.Table.from_arrays(
            [
                pa.array(keys, pa.string()),
                pa.array(values, pa.string()),
                pa.array(tenants, pa.string()),
                pa.array(units, pa.list_(pa.string())),
                pa.array(until, pa.float64()),
            ],
            schema=MEMO_SCHEMA,
        )
    )
    table = pa.concat_tables(parts)
    return table.sort_by([("tenant_id", "ascending"), ("key", "ascending")])


def _unknown(keys: list[str], values: list[str], tenant: str) -> pa.Table:
    """Entries of one tenant whose units are not known (null: read from any unit)."""
    return pa.Table.from_arrays(
        [
            pa.array(keys, pa.string()),
            pa.array(values, pa.string()),
            pa.array([tenant] * len(keys), pa.string()),
            pa.nulls(len(keys), pa.list_(pa.string())),
            pa.nulls(len(keys), pa.float64()),
        ],
        schema=MEMO_SCHEMA,
    )


def _with_units(table: pa.Table) -> pa.Table:
    """``table``'s entries laid out as :data:`MEMO_SCHEMA`; a table written before entries
    kept their units (or a checkpoint its newest time) gets null ones (read from any unit)."""
    for name in ("units", "until"):
        if name not in table.column_names:
            kind = MEMO_SCHEMA.field(name).type
            table = table.append_column(name, pa.nulls(table.num_rows, kind))
    return table.select(MEMO_SCHEMA.names).cast(MEMO_SCHEMA)


def without_units(
    table: pa.Table, units: Iterable[str], times: Mapping[str, float | None] | None = None
) -> pa.Table:
    """The entries of ``table`` that read none of ``units`` (what deleting them leaves): an
    entry whose units are null reads every unit up to its ``until`` time, so it stays only
    when ``times`` (each removed unit's time) shows every one of ``units`` newer; a table
    written before entries kept their units reads them all."""
    table = _with_units(table)
    gone = pa.array(sorted(set(units)), pa.string())
    if not len(gone):
        return table
    column = table["units"].combine_chunks()
    read = pc.list_parent_indices(column).filter(pc.is_in(pc.list_flatten(column), gone))
    hit = pc.is_in(pa.array(range(table.num_rows), pa.int64()), read.cast(pa.int64()))
    # a removed unit of unknown time may have been read by any entry of null units
    at = [(times or {}).get(u) for u in gone.to_pylist()]
    earliest = min(-math.inf if t is None else t for t in at)
    older = pc.fill_null(pc.less(table["until"], earliest), False)
    return table.filter(pc.and_(pc.invert(hit), pc.or_(pc.is_valid(column), older)))


def read_memo(table: pa.Table | None) -> list[dict[str, str]]:
    """The entries of a table of :data:`MEMO_SCHEMA` (none for ``None``): key, value and
    tenant, not the units."""
    if table is None:
        return []
    rows: list[dict[str, str]] = table.select(MEMO_READ).to_pylist()
    return rows
