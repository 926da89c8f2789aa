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
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa

from corpus_index.errors import ConfigError
from corpus_index.identities import IdentityRegistry, load_people
from corpus_index.identity_mentions import IdentityMention, extract_mentions
from corpus_index.identity_merges import MergeReport, apply_merges, load_merges
from corpus_index.identity_sightings import Sighting, corroborate
from corpus_index.limits import Limits

# message fields the mentions read (the messages kind keeps them in each block's metadata)
_FIELDS = ("author", "recipients", "cc", "title", "subject", "source", "timestamp")


class TenantIdentities(NamedTuple):
    """What the identity pass found for one tenant's units."""

    registry: IdentityRegistry
    mentions: list[IdentityMention]
    sightings: list[Sighting]
    merges: list[MergeReport]  # the merges that changed something
    not_here: list[tuple[str, str]]  # merges naming an identity this collection never saw


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
        if unit in out:
            continue
        record = {k: meta.get(k) for k in _FIELDS}
        record.update(id=unit, text=texts.get(unit, ""), tenant_id=tenant, source_id=source_id)
        out[unit] = record
    return out


def merges_of(path: Path | None, registry: IdentityRegistry) -> list[tuple[str, str]]:
    """The pairs of a collection's merges file, checked against the registry its people file
    seeds: an entry naming a people-file id that is not on file is an error; one naming a
    discovered identity or an identity id is applied where that identity was seen.

    Raises:
        ConfigError: the file is invalid, or an entry names a person not on file (the message
            names the file and the entry).
    """
    if path is None:
        return []
    pairs = load_merges(path)
    for i, pair in enumerate(pairs):
        for ref in pair:
            seen_only = ref.startswith(("discovered:", "idn_"))
            if not seen_only and registry.get(ref) is None and registry.by_key(ref) is None:
                raise ConfigError(
                    f"{path}: merges[{i}]: {ref!r} is no one in the people file of tenant "
                    f"{registry.tenant_id!r}; name a people-file id, a discovered key "
                    "(discovered:<address|phone|name>) or an identity id"
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
    registry = (
        load_people(people, tenant_id=tenant, limits=limits)
        if people is not None
        else IdentityRegistry(tenant)
    )
    file_pairs = merges_of(merges_file, registry)
    found = extract_mentions(registry, records)
    known = [
        pair
        for pair in [*file_pairs, *recorded]
        if all(registry.get(r) or registry.by_key(r) for r in pair)
    ]
    not_here = [p for p in [*file_pairs, *recorded] if p not in known]
    mentions, reports = apply_merges(registry, found.mentions, known)
    sightings = [
        s
        if registry.canonical(s.identity_id) == s.identity_id
        else replace(s, identity_id=registry.canonical(s.identity_id))
        for s in found.sightings
    ]
    corroborate(registry, sightings)
    moved = [r for r in reports if r.moved or r.units]
    return TenantIdentities(registry, mentions, sightings, moved, not_here)


def display_names(registry: IdentityRegistry) -> Callable[[str], str]:
    """A function from a written name to the registry's name for that person (as written when
    the registry does not know them surely: no match, several, or only a fuzzy guess)."""
    memo: dict[str, str] = {}

    def name(raw: str) -> str:
        if raw not in memo:
            match = registry.resolve(raw)
            person = registry.get(match.identity_id) if match.identity_id else None
            sure = person is not None and not match.reason.startswith("fuzzy")
            memo[raw] = person.name if sure and person is not None else raw
        return memo[raw]

    return name
