"""What the ``linked_groups`` step hashed of each unit, kept for the next run: a unit whose
parsed blocks are as they were is not hashed again.

A run of the step tells what changed by digests of every unit: the groupings' fingerprint of
its message (:meth:`~corpus_index.linked.memo.Memo.fingerprint`), the linker's
(:func:`~corpus_index.linked.relink.fingerprint`, with the link model's digest) and the
identity pass's digest of its record (:func:`~corpus_index.identity_resume.record_digest`).
Each is a function of the unit's parsed-block rows and of the code that reads them, and made
in Python they cost about 0.6 s at 50,000 messages, a tenth of a run in which nothing changed;
keeping them costs about half that (the rows' digests, reading, making and writing the
table), so a run saves 0.1-0.2 s (bench/README, "What changed, told by Arrow").

The ``unit_prints`` partition (:data:`PRINTS_SCHEMA`, one row per unit, per collection) keeps
them beside a digest of the unit's rows (:func:`row_digests`: every column the step reads of
a block, hashed in Arrow by polars, about 0.05 s at that size). The next run takes a unit's
kept digests only where its rows' digest is the same and the table was written by the same
code (:func:`code_key`, in the table's metadata); every other unit is hashed as before. What a
run computes is unchanged either way; only the hashing of units that did not change is
skipped. A table of another code, a missing one or a damaged one costs a run its full
hashing, nothing else.

Each unit read from one parsed-block row also keeps the message it was read as
(:func:`~corpus_index.kinds.messages.message_from`): the next run takes it for a row of the
same digest instead of decoding the row's JSON (:func:`kept_messages`; the record the
identity pass reads of it is decoded only if the pass reads more than its id, which it does
not when only units were appended). A message whose fields are not of the types a reading
makes is not kept; it is decoded again, as is a unit of several rows. A message taken has its
kept row written again as it is (:class:`KeptMessages`), not made anew from its fields.

Beside them each row keeps what the run scored of the unit as a question (the key of its
scored answers, or that it asks none) and the TF-IDF block it was weighed in, with what each
block was weighed by, each block's digest and size, and the answer window in the table's
metadata (a block the next run finds as it was is not hashed again): the next run reads the
candidates of only the questions a change reaches
(:mod:`corpus_index.linked.questions`; an edited unit reaches them both where it stands now
and where it stood, read from its kept message columns; every question is read after an
edit to a unit not kept so); and each unit's digest in a settled group's key, taken while the unit is as it
was and weighed as it was, and what its text says to the decision threads
(:mod:`corpus_index.linked.lastrun`).

The rows' digest is 128 bits of polars' hash (two seeds): not a cryptographic digest, but two
versions of one unit that differ collide by chance only (about one in 2^128). Polars keeps
its hash stable within a version only, so its version is in the code key.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from operator import attrgetter
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from corpus_index import identity_resume
from corpus_index.linked import memo
from corpus_index.linked.lastrun import LastRun
from corpus_index.linked.messages import Message

PRINTS = "unit_prints"
# the message a unit was read as (:func:`~corpus_index.kinds.messages.message_from`), its
# fields after its unit id in :class:`Message`'s order, as the table keeps it for a unit of
# one block (null ``message_timestamp``: not kept, see :func:`kept_messages`)
_MESSAGE_FIELDS = {
    "channel": pa.string(),
    "author": pa.string(),
    "text": pa.string(),
    "timestamp": pa.float64(),
    "reply_to": pa.string(),
    "mentions": pa.list_(pa.string()),
    "system": pa.bool_(),
    "source": pa.string(),
    "location": pa.string(),
    "title": pa.string(),
    "event_date": pa.string(),
}
assert list(_MESSAGE_FIELDS) == [f.name for f in dataclasses.fields(Message)][1:]
PRINTS_SCHEMA = pa.schema(
    [
        ("unit_id", pa.string()),
        ("source_id", pa.string()),  # the document it came from, so deleting it removes the row
        ("tenant_id", pa.string()),
        ("blocks", pa.string()),  # :func:`row_digests` of its rows, in order, joined by "+"
        ("fingerprint", pa.string()),  # the groupings' (empty: not made by the run)
        ("link_model", pa.string()),  # the link model's digest that ``link_print`` was made with
        ("link_print", pa.string()),  # the linker's (empty: not a linked message)
        ("record", pa.string()),  # the identity pass's (empty: not read by it)
        # what the groupings left of it (see corpus_index.linked.lastrun), null where none:
        ("question", pa.string()),  # the key of its question's scored answers ("": asks none)
        ("block", pa.int32()),  # the TF-IDF block it was weighed in
        ("parts", pa.binary()),  # its digest in a settled group's key
        ("decides", pa.string()),  # the sentence it decides by ("": none)
        ("proposes", pa.bool_()),  # whether it puts a proposal to decide
        # the message the unit was read as, one column a field (see _MESSAGE_FIELDS)
        *((f"message_{name}", kind) for name, kind in _MESSAGE_FIELDS.items()),
    ]
)
# the message columns, in the order of Message's fields after its unit id
MESSAGE_COLUMNS = [f"message_{name}" for name in _MESSAGE_FIELDS]
# the columns of what the groupings left of each unit, and where a run's LastRun holds them
_LAST_RUN_COLUMNS: dict[str, Callable[[LastRun], Mapping[str, Any]]] = {
    "question": lambda a: a.made_keys,
    "block": lambda a: a.made_blocks,
    "parts": lambda a: a.made_parts,
    "decides": lambda a: a.made_decides,
    "proposes": lambda a: a.made_proposes,
}
CODE_KEY = b"corpus_index.unit_prints.code"
# {"window_s": the answer window, "weighing": {tenant: what each block was weighed by},
#  "digests": {tenant: [each block's digest, its units]}}
LAST_RUN_KEY = b"corpus_index.unit_prints.last_run"
_SEEDS = (0x636F7270, 0x75732D69)  # two seeds: 128 bits a row
# the modules, besides the groupings' and the identity pass's, that make a unit's message and
# record from its rows, or hash them
_CODE = ("kinds/messages.py", "steps/linked_groups.py", "hashing.py", "unit_prints.py")


@lru_cache(maxsize=1)
def code_key() -> str:
    """A digest of the code every kept digest depends on: the groupings' package
    (:func:`~corpus_index.linked.memo.code_digest`), the identity pass
    (:func:`~corpus_index.identity_resume.code_digest`), the modules that read a unit from its
    rows, and the polars version that hashes them."""
    h = hashlib.sha256()
    for part in (pl.__version__, memo.code_digest(), identity_resume.code_digest()):
        h.update(part.encode() + b"\0")
    here = Path(__file__).resolve().parent
    for name in _CODE:
        h.update(name.encode() + b"\0" + (here / name).read_bytes() + b"\0")
    return h.hexdigest()


def row_digests(rows: pa.Table) -> list[str]:
    """One digest per row of ``rows`` (two 64-bit hashes, in decimal), of all its columns:
    equal for equal rows, and different (but by chance) when any value differs, a null and
    an empty value included."""
    if not rows.num_rows:
        return []
    frame = pl.from_arrow(rows)
    assert isinstance(frame, pl.DataFrame)
    row = pl.struct(pl.all())
    first, second = (row.hash(seed).cast(pl.String) for seed in _SEEDS)
    digests: list[str] = (
        frame.select(pl.concat_str(first, second, separator=":")).to_series().to_list()
    )
    return digests


@dataclass(slots=True)
class KnownPrints:
    """The digests kept for the units whose rows are as they were (by unit id), to seed this
    run's hashing; and how many units that is."""

    fingerprints: dict[str, str] = field(default_factory=dict)
    links: dict[str, tuple[str, str]] = field(default_factory=dict)  # (model digest, print)
    records: dict[str, str] = field(default_factory=dict)
    units: int = 0
    # tenant -> the messages the last run read its units edited or taken out since as (where
    # they stood); None when one of those was not kept (a unit of several rows, or not
    # storable)
    gone: dict[str, list[Message]] | None = None
    questions: dict[str, str] = field(default_factory=dict)  # unit -> its question's key
    blocks: dict[str, int] = field(default_factory=dict)  # unit -> the block it was weighed in
    weighing: dict[str, list[str]] = field(default_factory=dict)  # tenant -> by block
    # tenant -> each block's digest and how many units it held
    digests: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    window_s: float | None = None  # the answer window the questions' keys were made with
    parts: dict[str, dict[str, bytes]] = field(default_factory=dict)  # tenant -> unit -> digest
    decides: dict[str, str] = field(default_factory=dict)  # unit -> its decision sentence
    proposes: dict[str, bool] = field(default_factory=dict)  # unit -> whether it proposes

    def last_run(self, tenant: str) -> LastRun:
        """What the last run left of ``tenant``'s units (no question keys when a unit was
        edited or taken out since and where it stood is not kept)."""
        return LastRun(
            keys=self.questions if self.gone is not None else {},
            blocks=self.blocks,
            weighing=self.weighing.get(tenant, []),
            digests=self.digests.get(tenant, []),
            window_s=self.window_s,
            parts=self.parts.get(tenant, {}),
            decides=self.decides,
            proposes=self.proposes,
            gone=(self.gone or {}).get(tenant, []),
        )


def known_prints(table: pa.Table | None, blocks: Mapping[str, str]) -> KnownPrints:
    """The digests ``table`` (the last run's :data:`PRINTS_SCHEMA` rows) keeps for the units
    whose rows' digest is still the one in ``blocks`` (unit id -> digest, this run's); none
    when ``table`` is missing, of another layout or of other code."""
    if table is None or not table.num_rows or not _readable(table):
        return KnownPrints()
    units = table["unit_id"].to_pylist()
    same = [blocks.get(u) == d for u, d in zip(units, table["blocks"].to_pylist(), strict=True)]
    # the rows of units edited since, or taken out of a file still there (the rows of a
    # deleted file went with it, at the scan)
    edited = table.filter(pc.invert(pa.array(same, pa.bool_())))
    last = json.loads((table.schema.metadata or {}).get(LAST_RUN_KEY, b"{}"))
    kept = (
        table.select(
            ["unit_id", "tenant_id", "fingerprint", "link_model", "link_print", "record"]
            + ["question", "block", "parts", "decides", "proposes"]
        )
        .filter(pa.array(same, pa.bool_()))
        .to_pydict()
    )
    units = kept["unit_id"]
    links = zip(kept["link_model"], kept["link_print"], strict=True)
    return KnownPrints(
        fingerprints={u: p for u, p in zip(units, kept["fingerprint"], strict=True) if p},
        links={u: (m, p) for u, (m, p) in zip(units, links, strict=True) if p},
        records={u: r for u, r in zip(units, kept["record"], strict=True) if r},
        units=len(units),
        gone=_gone(edited),
        questions=_present(units, kept["question"]),
        blocks=_present(units, kept["block"]),
        weighing={str(t): [str(w) for w in ws] for t, ws in last.get("weighing", {}).items()},
        digests={
            str(t): [(str(d), int(n)) for d, n in ds] for t, ds in last.get("digests", {}).items()
        },
        window_s=last.get("window_s"),
        parts=_by_tenant(units, kept["tenant_id"], kept["parts"]),
        decides=_present(units, kept["decides"]),
        proposes=_present(units, kept["proposes"]),
    )


def _gone(rows: pa.Table) -> dict[str, list[Message]] | None:
    """The messages the last run read the units of ``rows`` (its rows of units edited or
    taken out since) as, by tenant; None when one of them was not kept
    (:func:`kept_messages`)."""
    if not rows.num_rows:
        return {}
    if not pc.all(_keeps_message(rows)).as_py():
        return None
    out: dict[str, list[Message]] = {}
    for tenant, message in zip(rows["tenant_id"].to_pylist(), _messages(rows), strict=True):
        out.setdefault(tenant, []).append(message)
    return out


def _keeps_message(rows: pa.Table) -> pa.ChunkedArray:
    """Whether each row keeps the message its unit was read as: a unit of one row whose
    message the columns could hold (:func:`prints_table`)."""
    one_block = pc.invert(pc.match_substring(rows["blocks"], "+"))
    return pc.and_(pc.is_valid(rows["message_timestamp"]), one_block)


def _messages(rows: pa.Table) -> list[Message]:
    """The message each row keeps (its ``unit_id`` and message columns, none null)."""
    columns = [rows[c].to_pylist() for c in ("unit_id", *MESSAGE_COLUMNS)]
    at = MESSAGE_COLUMNS.index("message_mentions") + 1
    columns[at] = list(map(tuple, columns[at]))
    return list(map(Message, *columns))


def _present(units: list[str], values: list[Any]) -> dict[str, Any]:
    """Unit id -> its value, of the units that have one (not null)."""
    return {u: v for u, v in zip(units, values, strict=True) if v is not None}


def _by_tenant(
    units: list[str], tenants: list[str], digests: list[bytes | None]
) -> dict[str, dict[str, bytes]]:
    out: dict[str, dict[str, bytes]] = {}
    for unit, tenant, digest in zip(units, tenants, digests, strict=True):
        if digest is not None:
            out.setdefault(tenant, {})[unit] = digest
    return out


def _readable(table: pa.Table) -> bool:
    meta = table.schema.metadata or {}
    if meta.get(CODE_KEY, b"").decode() != code_key():
        return False
    return all(
        f.name in table.column_names and table.schema.field(f.name).type == f.type
        for f in PRINTS_SCHEMA
    )


def prints_table(
    units: Iterable[tuple[str, str, str, str]],
    *,
    fingerprints: Mapping[str, str],
    links: Mapping[str, tuple[str, str]],
    records: Mapping[str, str],
    last: Mapping[str, LastRun] | None = None,
    window_s: float | None = None,
    messages: Sequence[Message | None] = (),
    kept: KeptMessages | None = None,
) -> pa.Table:
    """This run's rows: one per unit of ``units`` (unit id, source id, tenant, its rows'
    digest), with the digests the run made or was given of it (empty where it has none), the
    code key in the metadata; with ``last`` (tenant -> what its run noted), what the
    groupings left of each unit (:data:`_LAST_RUN_COLUMNS`), and the blocks' weighing and
    ``window_s`` in the metadata; with ``messages`` (one per unit, in order; None: not to
    keep), the message each unit was read as, for :func:`kept_messages`: where it is the one
    ``kept`` holds for the unit's digest (taken from it, not decoded), its row of the kept
    columns is written again as it is, not made anew from the message."""
    rows = list(units)
    ids = [r[0] for r in rows]
    linked = [links.get(u, ("", "")) for u in ids]
    columns = [
        ids,
        [r[1] for r in rows],
        [r[2] for r in rows],
        [r[3] for r in rows],
        [fingerprints.get(u, "") for u in ids],
        [m for m, _ in linked],
        [p for _, p in linked],
        [records.get(u, "") for u in ids],
    ]
    noted = last or {}
    none = LastRun()
    at: dict[str, list[int]] = {}  # tenant -> the positions of its units
    for i, r in enumerate(rows):
        at.setdefault(r[2], []).append(i)
    arrays = [pa.array(c, pa.string()) for c in columns]
    for name, made in _LAST_RUN_COLUMNS.items():
        values: list[Any] = [None] * len(ids)
        for tenant, positions in at.items():  # each unit's value in its tenant's run
            value_of = made(noted.get(tenant, none)).get
            if len(positions) == len(ids):  # one tenant: every unit, in order
                values = list(map(value_of, ids))
                break
            for i in positions:
                values[i] = value_of(ids[i])
        arrays.append(pa.array(values, PRINTS_SCHEMA.field(name).type))
    arrays.extend(_message_arrays(messages, [r[3] for r in rows], kept))
    table = pa.Table.from_arrays(arrays, schema=PRINTS_SCHEMA)
    left = {
        "window_s": window_s,
        "weighing": {t: a.made_weighing for t, a in noted.items()},
        "digests": {t: a.made_digests for t, a in noted.items()},
    }
    return table.replace_schema_metadata(
        {CODE_KEY: code_key().encode(), LAST_RUN_KEY: json.dumps(left, sort_keys=True).encode()}
    )


def _message_arrays(
    messages: Sequence[Message | None], digests: Sequence[str], kept: KeptMessages | None
) -> list[pa.Array]:
    """The message columns of one row per digest: each message's fields where it is given and
    of the types reading gives (a ``reply_to`` and each mention a string), else nulls; the
    row ``kept`` has where the message is the one it holds for the digest. When a text
    cannot be stored (a lone surrogate), the messages not kept get nulls: what is not kept
    is only read again."""
    rows = len(digests)
    if len(messages) != rows:
        return [pa.nulls(rows, kind) for kind in _MESSAGE_FIELDS.values()]
    held = kept if kept is not None else KeptMessages()
    at = held.positions()
    n_kept = held.columns.num_rows
    fresh: list[Message] = []
    where: list[int | None] = []  # each row's in the kept columns followed by the fresh ones
    for m, digest in zip(messages, digests, strict=True):
        if m is None:
            where.append(None)
        elif (k := at.get(digest)) is not None and held.get(digest) is m:
            where.append(k)
        elif _storable(m):
            where.append(n_kept + len(fresh))
            fresh.append(m)
        else:
            where.append(None)
    made = _fresh_arrays(fresh)
    if made is None:  # a text that cannot be written: only the kept rows are kept
        where = [None if k is None or k >= n_kept else k for k in where]
        made = [pa.nulls(0, kind) for kind in _MESSAGE_FIELDS.values()]
    indices = pa.array(where, pa.int64())
    return [
        pa.concat_arrays([*held.columns[f"message_{name}"].chunks, fresh_column]).take(indices)
        for name, fresh_column in zip(_MESSAGE_FIELDS, made, strict=True)
    ]


def _fresh_arrays(messages: Sequence[Message]) -> list[pa.Array] | None:
    """The message columns of ``messages`` (each storable), one array a field; None when a
    text cannot be written."""
    try:
        return [
            pa.array(list(map(attrgetter(name), messages)), kind)  # mentions: tuples, as lists
            for name, kind in _MESSAGE_FIELDS.items()
        ]
    except (pa.ArrowException, UnicodeEncodeError):
        return None


def _storable(m: Message) -> bool:
    """Whether the message columns give ``m`` back exactly: its fields are of the types a
    reading makes (strings, a float time, a flag), which the columns hold as they are."""
    return (
        type(m.reply_to) in _REPLY_TYPES
        and all(type(p) is str for p in m.mentions)
        and type(m.timestamp) is float
        and type(m.system) is bool
        and type(m.unit_id) is type(m.channel) is type(m.author) is type(m.text) is str
        and type(m.source) is type(m.location) is type(m.title) is type(m.event_date) is str
    )


_REPLY_TYPES = (str, type(None))


class KeptMessages(dict[str, Message]):
    """The messages the last run's rows keep, by the digest of the one parsed-block row each
    was read from (:func:`kept_messages`), and those rows' message columns (``columns``; its
    k-th row is the k-th message's), written again as they are for the units that take
    them."""

    def __init__(
        self, messages: Iterable[tuple[str, Message]] = (), columns: pa.Table | None = None
    ) -> None:
        super().__init__(messages)
        self.columns = (
            pa.schema([(f"message_{n}", k) for n, k in _MESSAGE_FIELDS.items()]).empty_table()
            if columns is None
            else columns
        )

    def positions(self) -> dict[str, int]:
        """Digest -> its message's row of ``columns`` (the messages are held in its order)."""
        return {d: k for k, d in enumerate(self)}


def kept_messages(table: pa.Table | None) -> KeptMessages:
    """The messages the last run's rows (``table``, of :data:`PRINTS_SCHEMA`) keep, by the
    digest of the one parsed-block row each was read from (:func:`row_digests`): a row of
    this run with that digest reads as that message (the message is a function of the row's
    columns, and the code that reads it is the code key's). Empty when ``table`` is missing,
    of another layout or of other code."""
    if table is None or not table.num_rows or not _readable(table):
        return KeptMessages()
    table = table.select(["blocks", "unit_id", *MESSAGE_COLUMNS]).filter(_keeps_message(table))
    # one row a digest (the last, as a dict keeps it): a digest is of a whole row, so two
    # rows of one digest hold one message
    digests = table["blocks"].to_pylist()
    last = {d: k for k, d in enumerate(digests)}
    if len(last) < len(digests):
        table = table.take(pa.array(sorted(last.values()), pa.int64()))
        digests = table["blocks"].to_pylist()
    return KeptMessages(zip(digests, _messages(table), strict=True), table.select(MESSAGE_COLUMNS))
