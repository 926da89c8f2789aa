"""Identity merges: one identity folded into another, and the re-indexing it asks for (seed §8.2).

When two identities turn out to be one person (an external identity system resolves them, or an
operator says so), the mentions of the merged one move to the survivor, the survivor takes its
details, and the report names the units and groups whose identity anchors changed, so the
groups' anchors are recomputed and the groups re-indexed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

from corpus_index.errors import ConfigError, IdentityError
from corpus_index.identities import (
    Identity,
    IdentityRegistry,
    identity_id,
    read_small_file,
    yaml_of,
)
from corpus_index.identity_mentions import IdentityMention, mention_id
from corpus_index.limits import Limits


class MergeReport(NamedTuple):
    """What a merge changed: the re-indexing it asks for (seed §8.2)."""

    survivor: str
    merged: str
    moved: int  # mentions now anchored to the survivor
    units: tuple[str, ...]  # units whose identity anchors changed
    groups: tuple[str, ...]  # groups whose identity anchors must be recomputed and re-indexed


def merge_identities(
    registry: IdentityRegistry,
    mentions: Iterable[IdentityMention],
    merged: str,
    survivor: str,
    *,
    group_members: Mapping[str, Iterable[str]] | None = None,
) -> tuple[list[IdentityMention], MergeReport]:
    """Merge identity ``merged`` into ``survivor``: details, mentions and later lookups.

    The survivor takes the merged identity's name (as an alias), aliases, e-mails and phones;
    the merged id keeps resolving to it. Each mention of the merged identity (or of one merged
    into it before) moves to the survivor; where the survivor already has that role in that unit the two become one, with
    the higher confidence. ``group_members`` (group id -> member unit ids) names the groups
    holding an affected unit; mentions already attached to a group count too.

    ``merged`` and ``survivor`` are identity ids or people-file ids (discovered keys).

    Raises:
        IdentityError: either is not an identity of this registry's tenant, they are the same,
            ``merged`` was merged into someone else before (merging it again would merge that
            survivor, a person nobody named), or a mention is of another tenant. Nothing is
            changed then.
    """
    a, b = _identity(registry, merged), _identity(registry, survivor)
    if a.id == b.id:
        raise IdentityError(f"cannot merge identity {a.id!r} into itself")
    if registry.id_of(merged) != a.id:
        raise IdentityError(
            f"identity {merged!r} was merged into {a.id!r} ({a.name}) already; "
            f"merging it into {b.id!r} would merge {a.name} too"
        )
    mentions = list(mentions)
    for m in mentions:
        if m.tenant_id != registry.tenant_id:
            raise IdentityError(
                f"mention {m.mention_id} is of tenant {m.tenant_id!r}, not {registry.tenant_id!r}"
            )
    names = (a.name, *a.aliases) if "@" not in a.name and a.name not in a.phones else a.aliases
    registry.put(
        replace(
            b,
            aliases=_union(b.aliases, names),
            emails=_union(b.emails, a.emails),
            phones=_union(b.phones, a.phones),
            confidence=max(a.confidence, b.confidence),
        )
    )
    registry.remove(a.id, merged_into=b.id)
    kept: dict[tuple[str, str, str], IdentityMention] = {}
    units: set[str] = set()
    groups: set[str] = set()
    moved = 0
    for m in mentions:
        if registry.canonical(m.identity_id) == b.id and m.identity_id != b.id:
            moved += 1
            units.add(m.unit_id)
            if m.group_id:
                groups.add(m.group_id)
            m = replace(
                m,
                identity_id=b.id,
                mention_id=mention_id(m.tenant_id, m.unit_id, b.id, m.mention_type),
            )
        key = (m.unit_id, m.identity_id, m.mention_type)
        other = kept.get(key)
        if other is None or m.confidence > other.confidence:
            kept[key] = m
    for gid, members in (group_members or {}).items():
        if units.intersection(members):
            groups.add(gid)
    report = MergeReport(b.id, a.id, moved, tuple(sorted(units)), tuple(sorted(groups)))
    return list(kept.values()), report


def _identity(registry: IdentityRegistry, ref: str) -> Identity:
    person = registry.get(ref) or registry.by_key(ref)
    if person is None:
        raise IdentityError(
            f"no identity {ref!r} in tenant {registry.tenant_id!r}; merges never cross tenants"
        )
    return person


def _union(first: Sequence[str], more: Iterable[str]) -> tuple[str, ...]:
    out = list(first)
    for x in more:
        if x not in out:
            out.append(x)
    return tuple(out)


def load_merges(path: Path, limits: Limits | None = None) -> list[tuple[str, str]]:
    """The ``(merged, survivor)`` pairs of a merges file, in file order.

    The file is YAML: ``merges:`` a list of ``{merge: <id or key>, into: <id or key>}``.

    Raises:
        ConfigError: the file is missing, over ``limits.max_document_bytes``, not UTF-8 or
            not YAML, gives a key twice in one mapping (YAML would keep the last), or an entry
            lacks ``merge`` or ``into``; the message names the file and the entry (or line).
    """
    limits = limits or Limits()
    text = read_small_file(path, limits, "merges file")
    return merges_in(yaml_of(path, text, limits, unique_keys=True), path)


def merges_in(data: Any, path: Path) -> list[tuple[str, str]]:
    """The ``(merged, survivor)`` pairs of ``data``, the YAML value of the merges file ``path``.

    Raises:
        ConfigError: ``data`` holds no list under ``merges``, or an entry lacks ``merge`` or
            ``into``; the message names the file and the entry.
    """
    if not isinstance(data, dict) or not isinstance(data.get("merges"), list):
        raise ConfigError(f"{path}: a merges file needs a list under 'merges'")
    pairs = []
    for i, entry in enumerate(data["merges"]):
        if not isinstance(entry, dict) or not all(
            isinstance(entry.get(k), str) and entry[k] for k in ("merge", "into")
        ):
            raise ConfigError(
                f"{path}: merges[{i}]: needs 'merge' and 'into' (identity ids or keys)"
            )
        pairs.append((entry["merge"], entry["into"]))
    return pairs


class Applied(NamedTuple):
    """What :func:`apply_merges` did."""

    mentions: list[IdentityMention]
    reports: list[MergeReport]
    # pairs not applied: their merged side was merged into another person before
    refused: list[tuple[str, str]]


def apply_merges(
    registry: IdentityRegistry,
    mentions: Iterable[IdentityMention],
    pairs: Iterable[tuple[str, str]],
    *,
    group_members: Mapping[str, Iterable[str]] | None = None,
) -> Applied:
    """Apply merges in order; a pair whose two sides are already one person is skipped, and
    one whose merged side an earlier pair merged into another person is refused (returned,
    not applied): following it to that survivor would merge a person nobody named (``zed``
    into ``sarah``, then ``zed`` into ``mike``, would merge Sarah into Mike).

    Raises:
        IdentityError: as :func:`merge_identities`.
    """
    current = list(mentions)
    reports = []
    refused = []
    for merged, survivor in pairs:
        a, b = _identity(registry, merged), _identity(registry, survivor)
        if a.id == b.id:  # merged before (a merges file is applied at every sync)
            continue
        if registry.id_of(merged) != a.id:
            refused.append((merged, survivor))
            continue
        current, report = merge_identities(
            registry, current, a.id, b.id, group_members=group_members
        )
        reports.append(report)
    return Applied(current, reports, refused)


def side_id(ref: str, tenant: str) -> str:
    """The identity id a side of a merge names: an identity id as it is, a key of one
    (people-file id, discovered key) as the tenant's id of it."""
    return ref if ref.startswith("idn_") else identity_id(tenant, ref)


def one_already(pairs: Sequence[tuple[str, str]], pair: tuple[str, str], *, tenant: str) -> bool:
    """Whether ``pairs``, applied in order, leave the two sides of ``pair`` one person already
    (``pair`` recorded before, or its survivor merged into its merged side: a merge
    :func:`apply_merges` would pass over). Sides as :func:`conflicts` reads them."""
    into: dict[str, str] = {}

    def canonical(ref: str) -> str:
        ref = side_id(ref, tenant)
        seen: set[str] = set()
        while ref in into and ref not in seen:
            seen.add(ref)
            ref = into[ref]
        return ref

    for merged, survivor in pairs:
        a, b = canonical(merged), canonical(survivor)
        if a != b:
            into[a] = b
    return canonical(pair[0]) == canonical(pair[1])


def conflicts(pairs: Sequence[tuple[str, str]], *, tenant: str) -> list[tuple[int, int]]:
    """The pairs :func:`apply_merges` refuses where both sides of every pair are seen: the
    index of each pair whose merged side an earlier pair merged into another person, with
    that earlier pair's index. Sides are identity ids or keys (people-file ids, discovered
    keys as discovery writes them) of ``tenant``."""
    into: dict[str, str] = {}  # merged id -> the survivor's id then
    by: dict[str, int] = {}  # merged id -> the pair that merged it

    def canonical(ref: str) -> str:
        while ref in into:
            ref = into[ref]
        return ref

    out = []
    for i, pair in enumerate(pairs):
        a, b = (side_id(r, tenant) for r in pair)
        if canonical(a) == canonical(b):
            continue
        if a in into:
            out.append((i, by[a]))
            continue
        into[a], by[a] = canonical(b), i
    return out
