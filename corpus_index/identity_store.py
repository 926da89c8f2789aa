"""Where a home keeps identities: the warehouse partitions the ``linked_groups`` step writes
for each messages collection, and the merges an operator records (DESIGN §10b).

Warehouse partitions (one Parquet file per collection, ``warehouse/<asset>/<collection>.parquet``):

- ``identities``: the tenant's registry as this collection's sync left it (the people file,
  the identities discovered in the collection, merges applied), ``IDENTITY_SCHEMA``;
- ``identity_mentions``: one row per (unit, identity, role), ``MENTION_SCHEMA`` plus the
  ``collection`` and the unit's ``source_id``;
- ``identity_sightings``: what an external identity system reads (seed §8.1),
  ``SIGHTING_SCHEMA`` exactly; its ``source_id`` is the unit's id;
- ``identity_pass``: what each tenant's last identity pass read, before merges, which the next
  one resumes from (``PASS_SCHEMA`` of :mod:`corpus_index.identity_resume`).

Merges recorded by ``corpus identities merge`` are in ``identities/<tenant>/merges.yaml`` of
the home, in the merges-file format (:func:`~corpus_index.identity_merges.load_merges`), and
are applied by every later sync of that tenant's collections after the collection's own
merges file.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
import yaml

from corpus_index import identity_resume
from corpus_index.collection import CollectionConfig, tenant_problem
from corpus_index.errors import ConfigError, IdentityError
from corpus_index.home import Home
from corpus_index.identities import IDENTITY_SCHEMA, load_people, read_small_file, yaml_of
from corpus_index.identity_mentions import MENTION_SCHEMA
from corpus_index.identity_merges import conflicts, load_merges, merges_in, one_already
from corpus_index.kinds import fingerprint, kind_of
from corpus_index.limits import Limits

IDENTITIES = "identities"
MENTIONS = "identity_mentions"
SIGHTINGS = "identity_sightings"
PASS = "identity_pass"
STORED_MENTION_SCHEMA = pa.schema(
    [*MENTION_SCHEMA, pa.field("collection", pa.string()), pa.field("source_id", pa.string())]
)
# the unit column of each partition that holds units' words (a context snippet)
UNIT_COLUMN = {MENTIONS: "unit_id", SIGHTINGS: "source_id"}


def merges_file(home: Home, tenant: str) -> Path:
    """The merges recorded for ``tenant`` in the home."""
    return recorded_merges_path(home.settings.home, tenant)


def recorded_merges_path(home_dir: Path, tenant: str) -> Path:
    """The merges recorded for ``tenant`` in the home folder ``home_dir``.

    Raises:
        ConfigError: ``tenant`` is not one folder name (``x/../beta`` would be ``beta``'s
            file), whatever let it through.
    """
    if problem := tenant_problem(tenant):
        raise ConfigError(f"{home_dir}: tenant {problem}; its merges have no folder of their own")
    return home_dir / "identities" / tenant / "merges.yaml"


def source_fingerprint(home_dir: Path, collection: CollectionConfig, *, rule: bytes) -> str:
    """The collection's :func:`~corpus_index.kinds.fingerprint` under the input ``rule``
    (``embedding.config_input_rule``), with the merges recorded in the home for its tenant
    when its kind is grouped (``corpus identities merge`` changes what its next sync writes,
    so the source sensor must see it)."""
    grouped = kind_of(collection).grouped
    also = [recorded_merges_path(home_dir, collection.tenant)] if grouped else []
    return fingerprint(collection, also=also, rule=rule)


def recorded_merges(home: Home, tenant: str) -> list[tuple[str, str]]:
    """The ``(merged, survivor)`` pairs recorded for ``tenant``, oldest first (none while no
    merge was recorded).

    Raises:
        ConfigError: something else stands in the file's place (a folder, a link), or the file
            cannot be read (named: a sync would otherwise apply none of the merges).
    """
    path = merges_file(home, tenant)
    return load_merges(path) if os.path.lexists(path) else []


def record_merge(home: Home, tenant: str, merged: str, survivor: str) -> Path:
    """Append a merge to ``tenant``'s merges file (written aside, then renamed into place).

    Raises:
        ConfigError: the file holds something other than merges (named, left as it is).
        IdentityError: ``merged`` is recorded as merged into another person already: a sync
            would refuse this merge (applied, it would merge that person too).
    """
    path = merges_file(home, tenant)
    data: dict[str, Any] = {"merges": []}
    if os.path.lexists(path):  # a folder or a link in its place is named, never written over
        limits = Limits()
        text = read_small_file(path, limits, "merges file")
        data = yaml_of(path, text, limits, unique_keys=True)  # rewritten: nothing dropped
        pairs = merges_in(data, path)  # ConfigError naming the file when it is not a merges file
        new = len(pairs)
        clash = [j for i, j in conflicts([*pairs, (merged, survivor)], tenant=tenant) if i == new]
        if clash:
            raise IdentityError(
                f"{merged!r} is recorded as merged into {pairs[clash[0]][1]!r} already "
                f"(in {path}); merging it into {survivor!r} would merge that person too: "
                "to correct the first merge, edit that file before the next sync"
            )
        if one_already(pairs, (merged, survivor), tenant=tenant):
            raise IdentityError(
                f"{merged!r} and {survivor!r} are one person already by the merges recorded "
                f"in {path}; a sync would pass this merge over (to keep the other as the "
                "survivor, edit that file before the next sync)"
            )
    at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    data["merges"].append({"merge": merged, "into": survivor, "recorded_at": at})
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".merges.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        yaml.safe_dump(data, out, sort_keys=False)
    os.replace(tmp, path)
    return path


class KnownIdentity(NamedTuple):
    """One identity of a tenant, over all its collections."""

    identity_id: str
    tenant_id: str
    key: str
    name: str
    aliases: list[str]
    emails: list[str]
    phones: list[str]
    role: str
    origin: str
    confidence: float
    mentions: int
    collections: list[str]


def known_identities(home: Home, *, tenant: str | None = None) -> list[KnownIdentity]:
    """Every identity the last sync of each messages collection left, per tenant (one tenant
    only with ``tenant``), with its mention count; an identity seen in several collections of
    its tenant is one, its aliases and details joined."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for name, cfg in sorted(home.config.collections.items()):
        if tenant is not None and cfg.tenant != tenant:
            continue
        people = home.warehouse.read(IDENTITIES, (name,), IDENTITY_SCHEMA)
        if people is None:
            continue
        counts = _mention_counts(home, name)
        for row in people.to_pylist():
            key = (row["tenant_id"], row["identity_id"])
            seen = found.setdefault(key, {**row, "mentions": 0, "collections": []})
            for col in ("aliases", "emails", "phones"):
                seen[col] = list(dict.fromkeys([*seen[col], *row[col]]))
            seen["confidence"] = max(seen["confidence"], row["confidence"])
            seen["mentions"] += counts.get(row["identity_id"], 0)
            seen["collections"].append(name)
    return [
        KnownIdentity(**{f: row[f] for f in KnownIdentity._fields})
        for _, row in sorted(found.items(), key=lambda kv: (kv[0][0], kv[1]["name"], kv[0][1]))
    ]


def _mention_counts(home: Home, collection: str) -> dict[str, int]:
    mentions = home.warehouse.read(MENTIONS, (collection,), columns=["identity_id"])
    if mentions is None or not mentions.num_rows:
        return {}
    counts = pc.value_counts(mentions["identity_id"]).to_pylist()
    return {c["values"]: c["counts"] for c in counts}


def find_identity(
    home: Home, ref: str, *, tenant: str | None = None
) -> tuple[KnownIdentity | None, list[KnownIdentity]]:
    """The identity ``ref`` (an id or a people-file/discovered key) names in ``tenant`` (or in
    any tenant), and the identities of the same ref in the other tenants.

    Raises:
        IdentityError: without ``tenant``, ``ref`` names identities of several tenants.
    """
    everyone = known_identities(home)
    hits = [p for p in everyone if ref in (p.identity_id, p.key)]
    if tenant is not None:
        mine = [p for p in hits if p.tenant_id == tenant]
        return (mine[0] if mine else None), [p for p in hits if p.tenant_id != tenant]
    tenants = sorted({p.tenant_id for p in hits})
    if len(tenants) > 1:
        raise IdentityError(
            f"{ref!r} names identities of tenants {', '.join(tenants)}; "
            "say which with --tenant (merges never cross tenants)"
        )
    return (hits[0] if hits else None), []


def details_only_of(home: Home, collection: str, units: Iterable[str]) -> set[str]:
    """The e-mail addresses and phone numbers (case-folded) the sightings of ``units`` saw that
    no other unit's sightings see, nor the people file gives: what the registry may have
    learned from those units alone (a discovered person's key, an address added to someone),
    which their deletion takes out of it (:func:`remove_units`)."""
    table = home.warehouse.read(SIGHTINGS, (collection,), columns=["source_id", "email", "phone"])
    wanted = pa.array(sorted(set(units)), pa.string())
    if table is None or not len(wanted):
        return set()
    mine = pc.is_in(table["source_id"], wanted)
    theirs, others = table.filter(mine), table.filter(pc.invert(mine))
    return _details(theirs) - _details(others) - on_file(home, collection)


def _details(table: pa.Table) -> set[str]:
    return {v.casefold() for c in ("email", "phone") for v in table[c].to_pylist() if v}


def on_file(home: Home, collection: str) -> set[str]:
    """The addresses and numbers (case-folded) the collection's people file gives its people:
    theirs whatever a unit saw. Empty when there is no file, or it cannot be read (then what
    a deletion takes out of a person's details the next identity pass puts back)."""
    cfg = home.config.collections.get(collection)
    if cfg is None or cfg.people is None:
        return set()
    try:
        registry = load_people(cfg.people, tenant_id=cfg.tenant, limits=cfg.limits)
    except (ConfigError, IdentityError, OSError):
        return set()
    return {v.casefold() for p in registry for v in (*p.emails, *p.phones)}


def remove_units(
    home: Home, collection: str, units: Iterable[str], *, details: Iterable[str] = ()
) -> list[tuple[str, int]]:
    """Drop the mentions and sightings of ``units`` from ``collection``'s partitions, and from
    its registry what only they showed: the ``details`` (:func:`details_only_of`, taken before
    the sightings go) in each person's addresses and numbers; a discovered identity keyed by
    one, with its mentions and sightings in other units (the next identity pass finds that
    person again, by what is left); and the discovered identities no unit left mentions. What
    the last identity pass read is dropped whole if it read any of the units.

    The registry is not left for the next pass to rebuild: a pass that fails (an invalid
    people or merges file in the sync of the deletion) keeps the last good one.

    Returns:
        ``(path, rows removed or changed)`` of each partition that changed.
    """
    gone = pa.array(sorted(set(units)), pa.string())
    if not len(gone):
        return []
    changed = []
    people = home.warehouse.read(IDENTITIES, (collection,))
    scrubbed, dropped = _scrub(people, set(details))
    for asset, column in UNIT_COLUMN.items():
        table = home.warehouse.read(asset, (collection,))
        if table is None:
            continue
        drop = pc.or_(
            pc.is_in(table[column], gone),
            pc.is_in(table["identity_id"], pa.array(sorted(dropped), pa.string())),
        )
        kept = table.filter(pc.invert(drop))
        if kept.num_rows != table.num_rows:
            home.warehouse.write(asset, (collection,), kept)
            changed.append(
                (str(home.warehouse.path(asset, collection)), table.num_rows - kept.num_rows)
            )
    mentions = home.warehouse.read(MENTIONS, (collection,), columns=["identity_id"])
    if people is not None and scrubbed is not None:
        kept = scrubbed
        if changed and mentions is not None:  # the discovered nobody is left mentioning
            seen = pa.array(sorted(set(mentions["identity_id"].to_pylist())), pa.string())
            unseen = pc.invert(pc.is_in(kept["identity_id"], seen))
            kept = kept.filter(pc.invert(pc.and_(pc.equal(kept["origin"], "discovered"), unseen)))
        touched = _rows_changed(people, kept)
        if touched:
            home.warehouse.write(IDENTITIES, (collection,), kept)
            changed.append((str(home.warehouse.path(IDENTITIES, collection)), touched))
    # what the last identity pass read holds the units' snippets too: their rows go, and the
    # header values it listed (the next pass re-reads from the units left)
    resume_from = home.warehouse.read(PASS, (collection,))
    if resume_from is not None:
        kept = identity_resume.without_units(resume_from, gone)
        if kept.num_rows != resume_from.num_rows:
            home.warehouse.write(PASS, (collection,), kept)
            path = str(home.warehouse.path(PASS, collection))
            changed.append((path, resume_from.num_rows - kept.num_rows))
    return changed


def _scrub(people: pa.Table | None, details: set[str]) -> tuple[pa.Table | None, set[str]]:
    """``people`` without ``details`` in anyone's addresses and numbers, and without the
    discovered identities keyed by one; and those identities' ids."""
    if people is None or not details:
        return people, set()
    rows, dropped = [], set()
    for p in people.to_pylist():
        if p["origin"] == "discovered" and p["key"].partition(":")[2].casefold() in details:
            dropped.add(p["identity_id"])
            continue
        for column in ("emails", "phones"):
            p[column] = [v for v in p[column] if v.casefold() not in details]
        rows.append(p)
    return pa.Table.from_pylist(rows, people.schema), dropped


def _rows_changed(before: pa.Table, after: pa.Table) -> int:
    """How many rows of ``before`` are gone or not as they were in ``after``."""
    if before.num_rows == after.num_rows and before.equals(after):
        return 0
    kept = {json.dumps(r, sort_keys=True) for r in after.to_pylist()}
    return sum(1 for r in before.to_pylist() if json.dumps(r, sort_keys=True) not in kept)


def identity_details(home: Home, collection: str) -> list[tuple[str, str]]:
    """``(identity id, detail)`` for each address, number and discovered key (case-folded)
    of ``collection``'s registry: what :func:`corpus_index.deletion.audit_deletion` looks in
    for the details a deleted unit alone showed."""
    people = home.warehouse.read(IDENTITIES, (collection,))
    out: list[tuple[str, str]] = []
    for p in people.to_pylist() if people is not None else []:
        values = [*p["emails"], *p["phones"]]
        if p["origin"] == "discovered":
            values.append(p["key"].partition(":")[2])
        out.extend((p["identity_id"], v.casefold()) for v in values if v)
    return out


def live_details(home: Home, collection: str) -> set[str]:
    """The addresses and numbers (case-folded) the collection's sightings see now, and those
    its people file gives."""
    table = home.warehouse.read(SIGHTINGS, (collection,), columns=["email", "phone"])
    return (set() if table is None else _details(table)) | on_file(home, collection)


def unit_texts(home: Home, collection: str, units: Iterable[str]) -> tuple[list[str], list[str]]:
    """The context snippets the mentions and sightings of ``units`` hold (what a deletion
    fingerprints, so the audit finds them wherever they were copied), and those of every other
    unit of the collection (a header such as ``author: Sarah Jones <sarah@...>`` is in many
    units' snippets: what the others hold proves nothing of the deleted ones)."""
    wanted = pa.array(sorted(set(units)), pa.string())
    theirs: list[str] = []
    others: list[str] = []
    for asset, column in UNIT_COLUMN.items():
        table = home.warehouse.read(asset, (collection,))
        if table is None:
            continue
        mine = pc.is_in(table[column], wanted)
        snippet = "context_snippet" if asset == MENTIONS else "context"
        theirs.extend(t for t in table.filter(mine)[snippet].to_pylist() if t)
        others.extend(t for t in table.filter(pc.invert(mine))[snippet].to_pylist() if t)
    return theirs, others
