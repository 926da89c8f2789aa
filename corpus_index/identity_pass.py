"""The identity pass of one tenant's units in one collection: its registry seeded from the
people file and grown by the people discovered in the units, every unit's mentions and
sightings, then the merges (the collection's merges file, then those recorded in the home)
applied, so mentions and later lookups name the survivors (DESIGN §10b, seed §3.3, §8).

The ``linked_groups`` step runs it before grouping, so groups anchor to the merged registry.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa

from corpus_index.carried import Carried
from corpus_index.errors import ConfigError
from corpus_index.identities import (
    IdentityRegistry,
    discovered_key,
    load_people,
    table_records,
)
from corpus_index.identity_mentions import (
    Extraction,
    IdentityMention,
    discover,
    header_values,
    in_order,
    mentions_in,
    mentions_table,
    resolve_headers,
)
from corpus_index.identity_merges import MergeReport, apply_merges, conflicts, load_merges, side_id
from corpus_index.identity_sightings import Sighting, corroborate_seen, sightings_table
from corpus_index.limits import Limits


class Reading(NamedTuple):
    """What an identity pass read, before merges: the mentions and sightings of its units,
    with the header values read in order, and its registry's digest after discovery and as
    the mentions were read."""

    found: Extraction
    discovered: str
    seen: str


class TenantIdentities(NamedTuple):
    """What the identity pass found for one tenant's units."""

    registry: IdentityRegistry
    mentions: Carried[IdentityMention]
    sightings: Carried[Sighting]
    merges: list[MergeReport]  # the merges that changed something
    not_here: list[tuple[str, str]]  # merges naming an identity this collection never saw
    # merges not applied: their merged side was merged into another person before
    refused: list[tuple[str, str]]
    reading: Reading  # what a later pass resumes from (``identity_resume``)
    read: int  # units whose mentions this pass read (the others were carried over)


def unit_records(blocks: pa.Table, texts: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """One message record per unit of ``blocks`` (parsed messages blocks): the fields mentions
    read from its first block's metadata, its text from ``texts`` (unit id -> its words), its
    tenant and the source it came from."""
    out: dict[str, dict[str, Any]] = {}
    rows = zip(
        blocks["doc_id"].to_pylist(),
        blocks["source_id"].to_pylist(),
        blocks["tenant_id"].to_pylist(),
        blocks["metadata"].to_pylist(),
        strict=True,
    )
    for doc_id, source_id, tenant, meta_json in rows:
        meta = json.loads(meta_json) if meta_json else {}
        unit = str(meta.get("unit_id", doc_id))
        if unit not in out:
            out[unit] = unit_record(meta, unit, texts.get(unit, ""), tenant, source_id)
    return out


def unit_record(
    meta: Mapping[str, Any], unit: str, text: str, tenant: str, source_id: str
) -> dict[str, Any]:
    """The message record of one unit (see :func:`unit_records`) from its first block's
    decoded metadata (the message fields mentions read: the messages kind keeps them in each
    block's metadata), for a caller that has decoded it already."""
    get = meta.get  # a literal: twice as fast as a loop over the field names, per unit
    return {
        "author": get("author"),
        "recipients": get("recipients"),
        "cc": get("cc"),
        "title": get("title"),
        "subject": get("subject"),
        "source": get("source"),
        "timestamp": get("timestamp"),
        "id": unit,
        "text": text,
        "tenant_id": tenant,
        "source_id": source_id,
    }


def merges_of(
    path: Path | None, registry: IdentityRegistry, limits: Limits | None = None
) -> list[tuple[str, str]]:
    """The pairs of a collection's merges file, checked against the registry its people file
    seeds: an entry naming a people-file id that is not on file is an error; one naming a
    discovered identity or an identity id is applied where that identity was seen. A
    discovered key's address, number or name is normalised as discovery normalises it (with
    the people file's country code), so it names the key however the message wrote it.

    Raises:
        ConfigError: the file is invalid, an entry names a person not on file, merges an
            identity into itself, or merges one an earlier entry merged into another person
            (the message names the file and the entry).
    """
    if path is None:
        return []
    key = partial(discovered_key, country_code=registry.country_code)
    pairs = [(key(merged), key(survivor)) for merged, survivor in load_merges(path, limits)]
    for i, pair in enumerate(pairs):
        for ref in pair:
            seen_only = ref.startswith(("discovered:", "idn_"))
            if not seen_only and registry.get(ref) is None and registry.by_key(ref) is None:
                raise ConfigError(
                    f"{path}: merges[{i}]: {ref!r} is no one in the people file of tenant "
                    f"{registry.tenant_id!r}; name a people-file id, a discovered key "
                    "(discovered:<address|phone|name>) or an identity id"
                )
    for i, (merged, survivor) in enumerate(pairs):
        if side_id(merged, registry.tenant_id) == side_id(survivor, registry.tenant_id):
            raise ConfigError(
                f"{path}: merges[{i}]: merges {merged!r} into {survivor!r}, the same identity; "
                "an identity is never merged into itself: name the other person, or remove "
                "the entry"
            )
    for i, j in conflicts(pairs, tenant=registry.tenant_id):
        (merged, survivor), earlier = pairs[i], pairs[j][1]
        raise ConfigError(
            f"{path}: merges[{i}]: {merged!r} is merged into {earlier!r} by merges[{j}]; "
            f"merging it into {survivor!r} too would merge {earlier!r} as well: keep one "
            "of the two entries"
        )
    return pairs


def identify(
    tenant: str,
    records: Iterable[Mapping[str, Any]],
    *,
    people: Path | None,
    merges_file: Path | None = None,
    recorded: Sequence[tuple[str, str]] = (),
    limits: Limits | None = None,
) -> TenantIdentities:
    """The identity pass over ``records`` (one tenant's units).

    Args:
        tenant: the tenant the units are of; the registry is that tenant's alone.
        people: the people file seeding the registry (None: start empty, discover everyone).
        merges_file: the collection's merges file, applied first.
        recorded: merges recorded in the home for this tenant, applied next.

    Raises:
        ConfigError: the people or merges file is invalid.
    """
    grown = _grow(tenant, records, people, merges_file, recorded, limits)
    found = mentions_in(grown.registry, grown.ordered, grown.headers)
    reading = Reading(found, grown.discovered, grown.registry.digest())
    return _settle(grown.registry, reading, grown.pairs, read=len(grown.ordered))


class _Grown(NamedTuple):
    """A tenant's registry grown from the header values of all its units, and those resolved."""

    registry: IdentityRegistry
    pairs: list[tuple[str, str]]  # the merges to apply, from the file then recorded
    ordered: list[Mapping[str, Any]]  # the units in time order
    headers: dict[str, tuple[str | None, str, float]]
    discovered: str  # the registry's digest after discovery, before resolving the headers


def _grow(
    tenant: str,
    records: Iterable[Mapping[str, Any]],
    people: Path | None,
    merges_file: Path | None,
    recorded: Sequence[tuple[str, str]],
    limits: Limits | None,
) -> _Grown:
    ordered = in_order(records)
    return _grow_from(
        tenant, header_values(ordered), people, merges_file, recorded, limits
    )._replace(ordered=ordered)


def _grow_from(
    tenant: str,
    raws: Sequence[str],
    people: Path | None,
    merges_file: Path | None,
    recorded: Sequence[tuple[str, str]],
    limits: Limits | None,
) -> _Grown:
    """:func:`_grow` from the units' header values (``raws``: each once, in the units' order),
    no unit given."""
    registry = _seed(tenant, people, limits)
    pairs = [*merges_of(merges_file, registry, limits), *recorded]
    discover(registry, raws)
    discovered = registry.digest()
    headers = resolve_headers(registry, raws)
    return _Grown(registry, pairs, [], headers, discovered)


def resume(
    tenant: str,
    records: Iterable[Mapping[str, Any]],
    last: Reading,
    *,
    people: Path | None,
    merges_file: Path | None = None,
    recorded: Sequence[tuple[str, str]] = (),
    limits: Limits | None = None,
) -> TenantIdentities | None:
    """The identity pass over ``last``'s units and ``records``, reading only ``records``: what
    :func:`identify` gives for both, provided ``records`` all come after ``last``'s units (in
    the order of :func:`~corpus_index.identity_mentions.in_order`) and the pass that found
    ``last`` read the same units from the same people file.

    The registry is grown again from the header values ``last`` read, in their order, then
    from those of ``records``. Returns None when that does not leave it as ``last`` read its
    units (someone new is discovered, a discovered person is seen with a new address or
    number, or the people file says otherwise): the units read before could then name
    someone else, so only the full pass is right.

    Raises:
        ConfigError: the people or merges file is invalid.
    """
    registry = _seed(tenant, people, limits)
    pairs = [*merges_of(merges_file, registry, limits), *recorded]
    fresh = in_order(records)
    discover(registry, last.found.headers)
    if registry.digest() != last.discovered:
        return None
    known = set(last.found.headers)
    more = [raw for raw in header_values(fresh) if raw not in known]
    discover(registry, more)
    if registry.digest() != last.discovered:
        return None
    headers = resolve_headers(registry, [*last.found.headers, *more])
    if registry.digest() != last.seen:
        return None
    new = mentions_in(registry, fresh, headers)
    mentions = carried_mentions(last.found.mentions).then(new.mentions)
    sightings = carried_sightings(last.found.sightings).then(new.sightings)
    found = Extraction(mentions, sightings, new.headers)
    return _settle(registry, last._replace(found=found), pairs, read=len(fresh))


def reread(
    tenant: str,
    raws: Sequence[str],
    fresh: Sequence[Mapping[str, Any]],
    last: Reading,
    *,
    splice: Callable[[Extraction], Extraction],
    people: Path | None,
    merges_file: Path | None = None,
    recorded: Sequence[tuple[str, str]] = (),
    limits: Limits | None = None,
) -> TenantIdentities | None:
    """The identity pass over a tenant's units reading only the ``fresh`` records (new, or
    changed since ``last``, wherever they fall in the order; in order): what :func:`identify`
    gives, provided the registry grown from all the units' header values (``raws``: each
    once, in the units' order, as :func:`~corpus_index.identity_mentions.header_values`
    gives them) is the one ``last`` read its units with (the same digest after discovery and
    after resolving the headers). The others' mentions and sightings are then theirs in
    ``last``: ``splice`` is given what the fresh records hold and returns every record's, in
    order.

    Returns None when the registry comes out otherwise (someone new, a detail seen first
    elsewhere, a removed unit that was the first to name someone): only the full pass is
    right then.

    Raises:
        ConfigError: the people or merges file is invalid.
    """
    grown = _grow_from(tenant, raws, people, merges_file, recorded, limits)
    if grown.discovered != last.discovered or grown.registry.digest() != last.seen:
        return None
    found = splice(mentions_in(grown.registry, fresh, grown.headers))
    reading = Reading(found, last.discovered, last.seen)
    return _settle(grown.registry, reading, grown.pairs, read=len(fresh))


def carried_mentions(
    mentions: Sequence[IdentityMention], kept: pa.Table | None = None
) -> Carried[IdentityMention]:
    """``kept`` (rows of ``MENTION_SCHEMA``) then ``mentions``; ``mentions`` as they are when
    they are carried already."""
    if isinstance(mentions, Carried) and kept is None:
        return mentions
    return Carried(
        kept, mentions, decode=lambda t: table_records(t, IdentityMention), encode=mentions_table
    )


def carried_sightings(
    sightings: Sequence[Sighting], kept: pa.Table | None = None
) -> Carried[Sighting]:
    """As :func:`carried_mentions`, for sightings (rows of ``SIGHTING_SCHEMA``)."""
    if isinstance(sightings, Carried) and kept is None:
        return sightings
    return Carried(
        kept, sightings, decode=lambda t: table_records(t, Sighting), encode=sightings_table
    )


def _seed(tenant: str, people: Path | None, limits: Limits | None) -> IdentityRegistry:
    if people is None:
        return IdentityRegistry(tenant)
    return load_people(people, tenant_id=tenant, limits=limits)


def _settle(
    registry: IdentityRegistry,
    reading: Reading,
    pairs: Sequence[tuple[str, str]],
    *,
    read: int,
) -> TenantIdentities:
    """The merges applied to the registry and to what was found, then the discovered
    identities corroborated by the sightings."""
    known = [pair for pair in pairs if all(registry.get(r) or registry.by_key(r) for r in pair)]
    not_here = [p for p in pairs if p not in known]
    mentions = carried_mentions(reading.found.mentions)
    reports: list[MergeReport] = []
    refused: list[tuple[str, str]] = []
    if known:  # otherwise the mentions stay as they are (carried rows undecoded)
        merged, reports, refused = apply_merges(registry, mentions, known)
        mentions = carried_mentions(merged)
    sightings = carried_sightings(reading.found.sightings)
    if any(registry.canonical(i) != i for i in set(sightings.column("identity_id"))):
        sightings = carried_sightings(
            [replace(s, identity_id=registry.canonical(s.identity_id)) for s in sightings]
        )
    corroborate_seen(
        registry, zip(sightings.column("identity_id"), sightings.column("unit_source"), strict=True)
    )
    moved = [r for r in reports if r.moved or r.units]
    return TenantIdentities(registry, mentions, sightings, moved, not_here, refused, reading, read)


def display_names(registry: IdentityRegistry) -> Callable[[str], str]:
    """A function from a written name to the people file's name for that person (as written
    when the registry does not know them surely: no match, several, or only a fuzzy guess; and
    for a person the people file does not list, whose registry name some unit gave it: a
    group's text names them only as its own members write them, since that unit may be one a
    reader of the group may not see)."""
    memo: dict[str, str] = {}

    def name(raw: str) -> str:
        if raw not in memo:
            match = registry.resolve(raw)
            person = registry.get(match.identity_id) if match.identity_id else None
            sure = person is not None and not match.reason.startswith("fuzzy")
            listed = person is not None and person.origin == "people_file"
            memo[raw] = person.name if sure and listed and person is not None else raw
        return memo[raw]

    return name
