"""The identity pass from where the last one stopped: what each tenant's last pass read, kept
as a table (the ``identity_pass`` warehouse partition of its collection), and the choice
between reading only the units appended since and reading them all (DESIGN §10b).

A pass resumes when its other inputs are the same (people file, merges file, recorded merges,
limits and the code of the pass, see :func:`inputs_fingerprint`):

- when units were only appended (every unit it read still there with the same record, the new
  units all after the last one read, in time order) and their headers name no one new, it
  reads the new units alone and not the others' headers
  (:func:`~corpus_index.identity_pass.resume`);
- after any other change to the units (an edit, a deletion, a unit arriving late), when the
  registry grown from all their header values is the one the last pass read with, it reads the
  new and changed units alone and takes the others' mentions and sightings from the rows it
  kept (:func:`~corpus_index.identity_pass.reread`). Their places in the order and their
  header values are kept in those rows too, so a unit as it was is not read at all.

Otherwise the full pass runs. All three give the same registry, mentions, sightings and
merges. A deletion (:func:`~corpus_index.identity_store.remove_units`) drops the removed units'
rows and the header values the state lists, so the next pass takes the second way.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from corpus_index.carried import Carried
from corpus_index.hashing import canonical_json, sha256_hex, value_digest
from corpus_index.identity_mentions import (
    MENTION_SCHEMA,
    Extraction,
    IdentityMention,
    in_order,
    mentions_table,
    record_headers,
    record_key,
)
from corpus_index.identity_pass import (
    Reading,
    TenantIdentities,
    carried_mentions,
    carried_sightings,
    identify,
    reread,
    resume,
)
from corpus_index.identity_sightings import SIGHTING_SCHEMA, Sighting, sightings_table
from corpus_index.limits import Limits

# one row per unit read, in the order read, with its mentions and sightings before merges
PASS_SCHEMA = pa.schema(
    [
        ("tenant_id", pa.string()),
        ("unit_id", pa.string()),
        ("digest", pa.string()),  # of the unit's record (:func:`record_digest`)
        # where the record falls in the pass's order (its time, the first of its record_key)
        ("key", pa.string()),
        # its header values, as record_headers gives them: a re-read takes the registry's
        # growth from these, without reading the records that are as they were
        ("headers", pa.list_(pa.string())),
        ("mentions", pa.list_(pa.struct(list(MENTION_SCHEMA)))),
        ("sightings", pa.list_(pa.struct(list(SIGHTING_SCHEMA)))),
    ]
)
# the columns that came later: a state without them is not read (the next pass is full, and
# writes them)
PASS_COLUMNS_LATER = ("key", "headers")
_LISTS = ("mentions", "sightings")
_R = TypeVar("_R", IdentityMention, Sighting)
# the schema metadata key holding each tenant's state beside its rows (JSON)
STATE_KEY = b"corpus_index.identity_pass"
# the modules whose code decides what the pass finds: a change to any makes the next pass full
_CODE = (
    "identities identity_forms identity_mentions identity_merges identity_pass identity_sightings"
)


@dataclass(frozen=True, slots=True)
class PassState:
    """What one tenant's last identity pass read, and from what."""

    fingerprint: str  # of the pass's inputs other than the units (:func:`inputs_fingerprint`)
    units: dict[str, str]  # unit id -> digest of its record, in the order read
    last: tuple[str, str]  # the key (:func:`~corpus_index.identity_mentions.record_key`)
    # of the last unit read
    reading: Reading
    # the stored rows of its first units, as read: written again as they are, not rebuilt
    kept: pa.Table | None = field(default=None, compare=False, repr=False)
    # False once a deletion dropped units and header values from it: the next pass re-reads
    # (see :func:`without_units`) rather than resuming after appends
    appendable: bool = True
    # unit id -> its record's key and header values, for the units after the kept rows
    # (their rows are made from these, see :func:`state_table`)
    details: Mapping[str, tuple[str, tuple[str, ...]]] = field(
        default_factory=dict, compare=False, repr=False
    )


def inputs_fingerprint(
    tenant: str,
    *,
    people: Path | None,
    merges_file: Path | None,
    recorded: Sequence[tuple[str, str]],
    limits: Limits | None,
) -> str:
    """A digest of what the identity pass of ``tenant`` reads besides its units: the bytes of
    the people and merges files, the merges recorded in the home, the limits and the code of
    the pass."""
    inputs = {
        "tenant": tenant,
        "people": _file_digest(people),
        "merges_file": _file_digest(merges_file),
        "recorded": [list(pair) for pair in recorded],
        "limits": asdict(limits) if limits is not None else None,
        "code": code_digest(),
    }
    return sha256_hex(canonical_json(inputs))


@functools.cache
def code_digest() -> str:
    """A digest of the source of the modules the identity pass runs (where their source is
    not there to read, one no later process repeats: every pass is then full)."""
    here = Path(__file__).parent
    try:
        sources = [sha256_hex((here / f"{m}.py").read_bytes()) for m in _CODE.split()]
    except OSError:
        return "unread:" + uuid.uuid4().hex
    return sha256_hex(canonical_json(sources))


def _file_digest(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        return sha256_hex(path.read_bytes())
    except OSError:  # missing or unreadable: the pass says so; no state matches this
        return "unreadable"


def record_digest(record: Mapping[str, Any]) -> str:
    """A digest of one unit's record, as the identity pass reads it (32 hex digits of
    :func:`~corpus_index.hashing.value_digest`; a digest an earlier version stored, of the
    record's canonical JSON, matches none of these, so a state it left is read as every unit
    changed: the next pass is full)."""
    return value_digest(record if type(record) is dict else dict(record), size=16)


def identify_since(
    last: PassState | None,
    tenant: str,
    records: Sequence[Mapping[str, Any]],
    *,
    people: Path | None,
    merges_file: Path | None = None,
    recorded: Sequence[tuple[str, str]] = (),
    limits: Limits | None = None,
    known: Mapping[str, str] | None = None,
) -> tuple[TenantIdentities, PassState]:
    """The identity pass over ``records`` (one tenant's units), reading only those appended
    since ``last`` when it can (see the module doc), and what the next pass resumes from.
    ``known``: the :func:`record_digest` of records known to be as they were when it was
    made (unit id -> it; see :mod:`corpus_index.unit_prints`), taken instead of hashing them.

    The result's ``read`` says how many units were read: all of them when the pass was full.

    Raises:
        ConfigError: the people or merges file is invalid.
    """
    fingerprint = inputs_fingerprint(
        tenant, people=people, merges_file=merges_file, recorded=recorded, limits=limits
    )
    known = known or {}
    digests = {str(r["id"]): known.get(str(r["id"])) or record_digest(r) for r in records}
    options: dict[str, Any] = {
        "people": people,
        "merges_file": merges_file,
        "recorded": recorded,
        "limits": limits,
    }
    found: TenantIdentities | None = None
    kept: pa.Table | None = None
    units: dict[str, str] | None = None  # every unit's digest, in the order read
    read: Sequence[Mapping[str, Any]] = ()  # the records whose rows the state makes
    before: Mapping[str, tuple[str, tuple[str, ...]]] = {}  # the rows made of units before
    same = last if last is not None and last.fingerprint == fingerprint else None
    end = ("", "")
    if same is not None and same.appendable:
        new = appended(same, records, digests)
        found = None if new is None else resume(tenant, new, same.reading, **options)
        if new is not None and found is not None:
            read = in_order(new)
            units = {**same.units, **{str(r["id"]): digests[str(r["id"])] for r in read}}
            kept = same.kept
            # a state not read back from its table keeps no rows: its units' rows are made
            before = same.details if kept is None else {}
            # the units read before are as they were and the new ones fall after them: only
            # the new records are read (the others may not be decoded, see unit_reading)
            end = record_key(read[-1]) if read else same.last
    if found is None and same is not None:
        spliced = _reread(same, tenant, records, digests, options)
        if spliced is not None:
            found, kept, units, end = spliced
    if found is None:  # every record is read: put in order once, for every step of the pass
        read = in_order(records)
        found = identify(tenant, read, **options)
        units = {str(r["id"]): digests[str(r["id"])] for r in read}
        end = record_key(read[-1]) if read else ("", "")
    assert units is not None
    details = {
        **before,
        **{str(r["id"]): (record_key(r)[0], tuple(record_headers(r))) for r in read},
    }
    return found, PassState(fingerprint, units, end, found.reading, kept, details=details)


def _reread(
    last: PassState,
    tenant: str,
    records: Sequence[Mapping[str, Any]],
    digests: Mapping[str, str],
    options: Mapping[str, Any],
) -> tuple[TenantIdentities, pa.Table, dict[str, str], tuple[str, str]] | None:
    """:func:`~corpus_index.identity_pass.reread` from ``last``: the units whose record is new
    or changed are read, the others' rows taken from ``last``'s, and so are their places in
    the order and their header values: a record as it was is not read at all. The result,
    every unit's row in order (the state's rows, written again as they are), every unit's
    digest in order and the key of the last."""
    kept = last.kept
    if kept is None:
        return None
    fresh = in_order(r for r in records if last.units.get(str(r["id"])) != digests[str(r["id"])])
    fresh_ids = [str(r["id"]) for r in fresh]
    held = kept.filter(
        pc.invert(pc.is_in(kept["unit_id"], pa.array(fresh_ids, pa.string())))
    ).select(PASS_SCHEMA.names)
    held = held.filter(pc.is_in(held["unit_id"], pa.array(list(digests), pa.string())))
    if held.num_rows + len(fresh) != len(records):  # a unit as it was without its kept row
        return None
    details = {str(r["id"]): (record_key(r)[0], record_headers(r)) for r in fresh}
    held_ids = held["unit_id"].to_pylist()
    # every unit's place: the kept rows' keys, the fresh records' own
    places = sorted(
        [
            *zip(held["key"].to_pylist(), held_ids, strict=True),
            *((key, u) for u, (key, _) in details.items()),
        ]
    )
    order = [u for _, u in places]
    held_headers = dict(zip(held_ids, held["headers"].to_pylist(), strict=True))
    raws = list(
        dict.fromkeys(
            raw for u in order for raw in (held_headers[u] if u in held_headers else details[u][1])
        )
    )
    spliced: list[pa.Table] = []

    def splice(new: Extraction) -> Extraction:
        made = pa.table(
            {
                "tenant_id": pa.array([tenant] * len(fresh_ids), pa.string()),
                "unit_id": pa.array(fresh_ids, pa.string()),
                "digest": pa.array([digests[u] for u in fresh_ids], pa.string()),
                "key": pa.array([details[u][0] for u in fresh_ids], pa.string()),
                "headers": pa.array([details[u][1] for u in fresh_ids], pa.list_(pa.string())),
                "mentions": _per_unit(fresh_ids, mentions_table(new.mentions)),
                "sightings": _per_unit(
                    fresh_ids, sightings_table(new.sightings), unit_column="source_id"
                ),
            },
            schema=PASS_SCHEMA,
        )
        both = pa.concat_tables([held.replace_schema_metadata(None).cast(PASS_SCHEMA), made])
        at = pc.index_in(both["unit_id"], pa.array(order, pa.string()))
        rows = both.take(pc.sort_indices(at)).combine_chunks()
        spliced.append(rows)
        return Extraction(
            carried_mentions([], _flat(rows["mentions"])),
            carried_sightings([], _flat(rows["sightings"])),
            new.headers,
        )

    found = reread(tenant, raws, fresh, last.reading, splice=splice, **options)
    if found is None:
        return None
    units = {u: digests[u] for u in order}
    return found, spliced[0], units, (places[-1][0], places[-1][1]) if places else ("", "")


def appended(
    last: PassState, records: Iterable[Mapping[str, Any]], digests: Mapping[str, str]
) -> list[Mapping[str, Any]] | None:
    """The records of ``records`` that ``last`` did not read, when they are all that changed:
    None when a unit ``last`` read is gone or its record changed, or a new one falls before
    the last unit read."""
    if any(digests.get(unit) != digest for unit, digest in last.units.items()):
        return None
    new = [r for r in records if str(r["id"]) not in last.units]
    if any(record_key(r) <= last.last for r in new):
        return None
    return new


# ---------------------------------------------------------------------- stored form


def state_table(states: Mapping[str, PassState]) -> pa.Table:
    """``states`` (tenant -> its state) as a table of ``PASS_SCHEMA``, each tenant's units in
    the order read, the rest of each state in the schema metadata."""
    parts = [PASS_SCHEMA.empty_table()]
    meta: dict[str, Any] = {}
    for tenant, state in sorted(states.items()):
        found = state.reading.found
        kept = state.kept if state.kept is not None else PASS_SCHEMA.empty_table()
        units = list(state.units)[kept.num_rows :]
        # the kept rows hold the first mentions and sightings; the rest are the new units'
        held = [int(pc.sum(pc.list_value_length(kept[c])).as_py() or 0) for c in _LISTS]
        mentions, sightings = _beyond(found.mentions, held[0]), _beyond(found.sightings, held[1])
        parts.append(kept.replace_schema_metadata(None).cast(PASS_SCHEMA))
        parts.append(
            pa.table(
                {
                    "tenant_id": pa.array([tenant] * len(units), pa.string()),
                    "unit_id": pa.array(units, pa.string()),
                    "digest": pa.array([state.units[u] for u in units], pa.string()),
                    "key": pa.array([state.details[u][0] for u in units], pa.string()),
                    "headers": pa.array(
                        [list(state.details[u][1]) for u in units], pa.list_(pa.string())
                    ),
                    "mentions": _per_unit(units, mentions_table(mentions)),
                    "sightings": _per_unit(
                        units, sightings_table(sightings), unit_column="source_id"
                    ),
                },
                schema=PASS_SCHEMA,
            )
        )
        meta[tenant] = {
            "fingerprint": state.fingerprint,
            "last": list(state.last),
            "headers": list(found.headers),
            "discovered": state.reading.discovered,
            "seen": state.reading.seen,
            "appendable": state.appendable,
        }
    table = pa.concat_tables(parts)
    return table.replace_schema_metadata({STATE_KEY: json.dumps(meta).encode()})


def _beyond(records: Sequence[_R], n: int) -> Sequence[_R]:
    """The records after the first ``n`` (not decoding carried rows when they are those)."""
    if isinstance(records, Carried) and records.kept_rows == n:
        return records.more
    return records[n:]


def _per_unit(units: list[str], rows: pa.Table, *, unit_column: str = "unit_id") -> pa.Array:
    """``rows`` (in the order of ``units``, a unit's rows together) as one list per unit."""
    at = {unit: i for i, unit in enumerate(units)}
    owners = [at[u] for u in rows[unit_column].to_pylist()]
    if any(b < a for a, b in zip(owners, owners[1:], strict=False)):
        raise ValueError("the rows of the identity pass are not in the order of its units")
    counts = [0] * (len(units) + 1)
    for i in owners:
        counts[i + 1] += 1
    offsets = list(_running(counts))
    values = pa.StructArray.from_arrays(
        [rows.column(i).combine_chunks() for i in range(rows.num_columns)],
        fields=list(rows.schema),
    )
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values)


def _running(counts: Iterable[int]) -> Iterable[int]:
    total = 0
    for c in counts:
        total += c
        yield total


def read_states(table: pa.Table | None) -> dict[str, PassState]:
    """The states a table of :func:`state_table` holds (none from a table without them)."""
    raw = (table.schema.metadata or {}).get(STATE_KEY) if table is not None else None
    if table is None or raw is None or set(PASS_SCHEMA.names) - set(table.column_names):
        return {}
    out = {}
    for tenant, meta in json.loads(raw).items():
        rows = table.filter(pc.equal(table["tenant_id"], tenant))
        found = Extraction(
            carried_mentions([], _flat(rows["mentions"])),
            carried_sightings([], _flat(rows["sightings"])),
            tuple(meta["headers"]),
        )
        units = dict(zip(rows["unit_id"].to_pylist(), rows["digest"].to_pylist(), strict=True))
        last = (str(meta["last"][0]), str(meta["last"][1]))
        reading = Reading(found, meta["discovered"], meta["seen"])
        appendable = bool(meta.get("appendable", True))
        out[tenant] = PassState(meta["fingerprint"], units, last, reading, rows, appendable)
    return out


def without_units(table: pa.Table, gone: pa.Array) -> pa.Table:
    """A table of :func:`state_table` without the rows of the units ``gone``, its states
    made to re-read (:func:`~corpus_index.identity_pass.reread`) rather than resume after
    appends: the header values it listed, and the key of the last unit read, may be a removed
    unit's, so they are dropped (a re-read takes them from the units again)."""
    kept = table.filter(pc.invert(pc.is_in(table["unit_id"], gone)))
    raw = (table.schema.metadata or {}).get(STATE_KEY)
    meta = json.loads(raw) if raw is not None else {}
    for state in meta.values():
        state.update(headers=[], last=["", ""], appendable=False)
    return kept.replace_schema_metadata({STATE_KEY: json.dumps(meta).encode()})


def _flat(lists: pa.ChunkedArray) -> pa.Table:
    """The rows a column of lists of structs holds, in order, as a table."""
    values = pc.list_flatten(lists)
    names = [f.name for f in values.type]
    return pa.table([pc.struct_field(values, [name]) for name in names], names=names)
