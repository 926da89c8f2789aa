"""Sightings: people seen in units, as a table an external identity system reads (seed §8.1).

Every identity mention is also a sighting, with the raw name, e-mail address or phone number it
was seen as, the context, the unit and a confidence from 0 to 100, the shape of the seed's
``recordSighting``. The identity system uses them to discover people, reinforce them and find
conflicting details; :func:`corroborate` is the same reinforcement inside corpus-index, for the
identities it discovered itself.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from corpus_index.identities import EVIDENCE_CONFIDENCE, IdentityRegistry, noisy_or, records_table

SIGHTING_SOURCE_TYPE = "embedding_extraction"


@dataclass(frozen=True, slots=True)
class Sighting:
    """A person seen in a unit, as an external identity system reads it (seed §8.1)."""

    sighting_id: str
    tenant_id: str
    identity_id: str
    raw_name: str | None
    email: str | None
    phone: str | None
    context: str
    source_type: str  # always SIGHTING_SOURCE_TYPE: how the sighting was made
    source_id: str  # the unit
    unit_source: str  # discord_chat, email_thread, ...
    mention_type: str
    confidence: int  # 0-100, as the seed's recordSighting takes it
    seen_at: str


SIGHTING_SCHEMA = pa.schema(
    [
        ("sighting_id", pa.string()),
        ("tenant_id", pa.string()),
        ("identity_id", pa.string()),
        ("raw_name", pa.string()),
        ("email", pa.string()),
        ("phone", pa.string()),
        ("context", pa.string()),
        ("source_type", pa.string()),
        ("source_id", pa.string()),
        ("unit_source", pa.string()),
        ("mention_type", pa.string()),
        ("confidence", pa.int8()),
        ("seen_at", pa.string()),
    ]
)


def corroborate(registry: IdentityRegistry, sightings: Iterable[Sighting]) -> dict[str, float]:
    """Raise each discovered identity's confidence by the kinds of source that saw it.

    Each kind of source (e-mail, phone call, chat ...) that saw a discovered person adds the
    discovery confidence, combined (noisy-or): seen in one e-mail, 0.5; also in a phone call,
    0.75; also in chat, 0.875. Sightings in more units of one kind add nothing: one mailbox
    repeating a name is not corroboration. People on file keep 1.0. Returns the new confidence
    of every identity changed.
    """
    return corroborate_seen(registry, ((s.identity_id, s.unit_source) for s in sightings))


def corroborate_seen(
    registry: IdentityRegistry, seen: Iterable[tuple[str, str]]
) -> dict[str, float]:
    """:func:`corroborate` from each sighting's ``(identity id, unit source)``."""
    kinds: dict[str, set[str]] = defaultdict(set)
    for identity, source in seen:
        kinds[registry.canonical(identity)].add(source)
    changed: dict[str, float] = {}
    for pid, sources in kinds.items():
        person = registry.get(pid)
        if person is None or person.origin != "discovered":
            continue
        confidence = noisy_or([EVIDENCE_CONFIDENCE["discovered"]] * len(sources))
        if confidence != person.confidence:
            registry.put(replace(person, confidence=confidence))
            changed[pid] = confidence
    return changed


def sightings_table(sightings: Iterable[Sighting]) -> pa.Table:
    """Sightings as a table of ``SIGHTING_SCHEMA`` (what an identity system reads)."""
    return records_table(sightings, SIGHTING_SCHEMA)


def write_sightings(sightings: Iterable[Sighting], path: Path) -> Path:
    """Write sightings as one Parquet file (written aside, then renamed into place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(sightings_table(sightings), tmp)
    tmp.replace(path)
    return path
