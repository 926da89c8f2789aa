"""The ``linked_groups`` step: a grouped collection's units linked into groups (conversations
and the other groupings of :func:`corpus_index.linked.groups.link_units`), with their members,
tenancy and ``group-v1`` input text (DESIGN §10b).

Four partitions: ``linked_groups`` (one row per group), ``group_members`` (one row per
member), ``conversation_links`` (each message's link in its channel, see
:mod:`corpus_index.linked.relink`) and ``group_memo`` (what the run computed, by a key of its
inputs, see :mod:`corpus_index.linked.memo`), and the identity partitions of
:mod:`corpus_index.identity_store` (``identities``, ``identity_mentions``,
``identity_sightings``, and ``identity_pass``, what the pass read): before grouping, each
tenant's units go through the identity pass (:mod:`corpus_index.identity_pass`), so groups
anchor to the tenant's registry with its merges applied; a run that only appends units reads
only those (:mod:`corpus_index.identity_resume`). A collection whose kind is not grouped (or
set ``grouping: false``) gets all of them empty; so does the identity side of an ``irc``
collection (chat nicks, no people).

Each run starts from the last: conversations are linked again only from each channel's first
changed message on (from the start among a channel's first messages), and a question whose
candidate answers, or a group whose members and identity anchors, are as they were (with what
their TF-IDF vectors are weighed by) keeps its scored answers, its description and its row.
The groups are those of a full re-run, at the cost of the change; an unchanged group keeps its
id and its input hash, so it is never embedded twice. The re-processing queue
(:mod:`corpus_index.reprocess_queue`) is kept from the groups each run writes.
"""

from __future__ import annotations

import contextlib
import gc
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from corpus_index import gates, identity_resume, identity_store, tokens
from corpus_index.answer_verifier import OpenAIAnswerVerifier, answer_verifier
from corpus_index.errors import DamagedWarehouseError
from corpus_index.group_gates import (
    group_acl_within_members,
    group_members_exist_and_are_live,
    groups_stay_within_one_tenant,
    unit_scopes,
)
from corpus_index.group_records import GROUP_SCHEMA, MEMBER_SCHEMA, GroupTables, Unit, group_tables
from corpus_index.home import Home
from corpus_index.identities import IDENTITY_SCHEMA, identities_table
from corpus_index.identity_mentions import MENTION_SCHEMA
from corpus_index.identity_pass import TenantIdentities, display_names, unit_record
from corpus_index.identity_resume import PassState
from corpus_index.identity_sightings import SIGHTING_SCHEMA
from corpus_index.kinds import kind_of
from corpus_index.kinds.messages import message_from
from corpus_index.linked.groups import Group
from corpus_index.linked.lastrun import LastRun
from corpus_index.linked.memo import MEMO_SCHEMA, Memo, memo_table
from corpus_index.linked.messages import Message
from corpus_index.linked.relink import (
    LINK_SCHEMA,
    ChannelTail,
    Relinker,
    links_table,
    read_links,
    read_tails,
)
from corpus_index.linked.reprocess import REPROCESS_WINDOWS
from corpus_index.linked.settled import unmade_index
from corpus_index.records import BLOCK_SCHEMA, MANIFEST_SCHEMA
from corpus_index.reprocess_queue import (
    QUEUE,
    Linker,
    Linking,
    arrivals,
    queue_table,
    read_queue,
    refresh,
    woken,
)
from corpus_index.sources import live_documents
from corpus_index.unit_prints import (
    PRINTS,
    PRINTS_SCHEMA,
    KeptMessages,
    kept_messages,
    known_prints,
    prints_table,
    row_digests,
)
from corpus_index.warehouse import Background

GROUPS = "linked_groups"
MEMBERS = "group_members"
LINKS = "conversation_links"
MEMO = "group_memo"


@dataclass(slots=True)
class LinkedGroupsOutcome:
    """What the ``linked_groups`` step did for one collection."""

    grouped: bool
    units: int = 0
    groups: int = 0
    members: int = 0
    by_type: dict[str, int] = field(default_factory=dict)
    unindexed: int = 0  # groups whose members share no ACL group (kept, never indexed)
    cut: int = 0  # groups whose input text was cut to the model's input limit
    # what the groups' texts were cut to: the smallest input limit of the models embedding
    # the collection (tokens.group_fit), described
    input_limit: str = ""
    queued: int = 0  # items in the re-processing queue after this run
    woken: list[str] = field(default_factory=list)  # incidents a new shift note re-evaluated
    identities: int = 0
    discovered: int = 0
    mentions_by_role: dict[str, int] = field(default_factory=dict)
    sightings: int = 0
    identity_read: int = 0  # units whose mentions the identity pass read (the rest carried over)
    merges: int = 0  # merges that moved mentions
    merges_not_here: int = 0  # merges naming an identity this collection never saw
    # merges not applied, as "tenant: merged -> survivor": their merged side was merged into
    # another person before, so applying them would merge that person
    merges_refused: list[str] = field(default_factory=list)
    reanchored: int = 0  # groups holding a unit whose mentions a merge moved
    sightings_path: str = ""  # the Parquet file an external identity system reads
    relinked: int = 0  # messages whose conversation link was decided again (the rest reused)
    # channels decided again, and of those, the ones decided from their recent window
    channels_relinked: int = 0
    from_window: int = 0
    reused: int = 0  # questions scored and groups described as the last run did (memo)
    computed: int = 0  # questions scored and groups described anew
    # settled groups (every input as it was), whose rows were the last run's, carried over
    # without being described again (the rest made anew)
    carried: int = 0
    # of those, conversations, questions and days as they were, carried before being made
    # (see corpus_index.linked.settled.Settled.token)
    unmade: int = 0
    prints_kept: int = 0  # units whose blocks were as they were, so not hashed again
    # parsed-block rows whose message was the last run's, so not decoded again
    rows_not_decoded: int = 0
    # questions no change reached, whose scored answers were kept without reading candidates
    questions_unread: int = 0
    # question-answer pairs put to the collection's answer verifier (the others' verdicts
    # were the last run's), and of those, the ones it gave no clear verdict on
    verified: int = 0
    unverified: int = 0
    # of those, refused by its server for what was sent, and the first refusal (why)
    verifier_refused: int = 0
    verifier_refusal: str = ""
    gates: list[gates.Gate] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(g.passed for g in self.gates)


def run(
    home: Home,
    collection: str,
    *,
    progress: Callable[[str], None] | None = None,
    reprocessed: Mapping[str, float] | None = None,
) -> LinkedGroupsOutcome:
    """Link the collection's units, check the groups, and write the group and identity
    partitions when every check passes (otherwise the last good ones stay). ``progress`` is
    told what is done as each part of the work ends (the units read, the identity pass, each
    grouping of each tenant, the checks), with the seconds since the start.

    ``reprocessed`` (queue key -> when, as :func:`corpus_index.reprocess_queue.take_due` took
    them) are the re-processing items this run re-detects: the queue it writes counts each
    one attempt more then, if it is still queued for the same reason. A run whose checks fail
    writes no queue, so they stay due.

    Returns:
        Counts of units, groups (by type), members, identities and mentions (by role), and
        the checks' outcomes.

    Raises:
        ConfigError: the collection's people or merges file is invalid, or the environment
            variable its ``answer_verifier`` reads the key from is not set.
        VerifierError: the answer verifier's server refused its key, model or API root.
    """
    with _collector_paused():
        return _run(home, collection, _Progress(progress), dict(reprocessed or {}))


class _Progress:
    """A step's progress lines, each with the seconds since the step started (none without a
    listener)."""

    def __init__(self, listener: Callable[[str], None] | None) -> None:
        self._listener = listener
        self._start = time.perf_counter()

    def __call__(self, what: str) -> None:
        if self._listener is not None:
            self._listener(f"{what} ({time.perf_counter() - self._start:.1f} s)")


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused (and restored as it was): grouping makes
    millions of small records and tuples and no cycles of its own, and each full pass of the
    collector walks all of them again (a sixth of a one-message run's CPU at 20,000
    messages). What the step leaves is freed by reference counting as it returns; a cycle
    would wait for the next pass after it, with all it holds, and that pass would walk it
    (a cycle through the settled groups' digests once held every unit and message: 0.09 s
    of a one-message run at 50,000 messages; a test keeps the step free of them)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _run(
    home: Home, collection: str, say: _Progress, reprocessed: dict[str, float]
) -> LinkedGroupsOutcome:
    cfg = home.collection(collection)
    with Background() as io:
        if not kind_of(cfg).grouped or not cfg.grouping:
            return _not_grouped(home, collection, io)
        return _grouped(home, collection, say, io, reprocessed)


def _not_grouped(home: Home, collection: str, io: Background) -> LinkedGroupsOutcome:
    """:func:`run` of a collection whose kind is not grouped (or ``grouping: false``): every
    partition of the step written empty (on ``io``'s worker), its re-processing queue too
    (a collection grouped before would keep items of groups that are gone, naming their
    units)."""
    wh = home.warehouse
    io.stage(wh, QUEUE, (collection,), queue_table(collection, [], Linking()))
    io.stage(wh, GROUPS, (collection,), GROUP_SCHEMA.empty_table())
    io.stage(wh, MEMBERS, (collection,), MEMBER_SCHEMA.empty_table())
    io.stage(wh, LINKS, (collection,), LINK_SCHEMA.empty_table())
    io.stage(wh, MEMO, (collection,), MEMO_SCHEMA.empty_table())
    io.stage(wh, PRINTS, (collection,), PRINTS_SCHEMA.empty_table())
    _stage_identities(home, collection, {}, io=io)
    io.publish()
    return LinkedGroupsOutcome(grouped=False)


def _grouped(
    home: Home, collection: str, say: _Progress, io: Background, reprocessed: dict[str, float]
) -> LinkedGroupsOutcome:
    """:func:`run` of a grouped collection: the partitions it reads later are read, and those
    it writes staged as each is made, on ``io``'s worker beside the decoding, the grouping
    and the checks; they are published when the checks pass."""
    cfg = home.collection(collection)
    wh = home.warehouse
    verifier = _verifier(home, cfg.name)  # a missing key fails the step before any work
    kept_read = io.read(lambda: _kept_prints(home, collection))  # needed first
    manifest_read = io.read(lambda: home.read("source_manifest", (collection,), MANIFEST_SCHEMA))
    queue_read = io.read(lambda: read_queue(wh, collection))
    links_read = io.read(lambda: wh.read(LINKS, (collection,)))
    memo_read = io.read(lambda: wh.read(MEMO, (collection,)))
    pass_read = io.read(lambda: wh.read(identity_store.PASS, (collection,)))
    groups_read = io.read(lambda: wh.read(GROUPS, (collection,), GROUP_SCHEMA))
    members_read = io.read(lambda: wh.read(MEMBERS, (collection,), MEMBER_SCHEMA))
    blocks = home.read("parsed_blocks", (collection,), BLOCK_SCHEMA)
    rows = unit_row_digests(blocks)  # hashed in polars while the worker reads the kept prints
    kept_prints, kept = kept_read.result()
    units, records, digests, taken = unit_reading(
        blocks, records=cfg.format != "irc", digests=rows, kept=kept
    )
    manifest = manifest_read.result()
    live = set(live_documents(manifest))
    # what the last run hashed of the units whose blocks are as they were (unit_prints)
    known = known_prints(kept_prints, digests)
    say(f"read {len(units):,} units ({known.units:,} as they were, {taken:,} rows not decoded)")
    stored = queue_read.result()
    linking = stored.linking
    # what the last ingest brought: seen by an earlier run when its queue keeps their digest
    changed, arrived = arrivals(manifest)
    now = linking.now_for([u.message for u in units])
    wake = (
        []
        if now is None or arrived == stored.arrived
        else woken(stored, [u.message for u in units if u.doc_id in changed], now)
    )
    if wake:  # a shift note finds its incident: re-evaluated now, with the wider windows
        linking = Linking(REPROCESS_WINDOWS, now)
    linker = Linker(linking)
    links_kept = links_read.result()
    previous = read_links(links_kept)  # as written, see read_links
    tails = read_tails(links_kept)  # what deciding a channel's next messages reads
    tenant_of = {u.message.unit_id: u.tenant_id for u in units}
    sources = {u.message.unit_id: f"{collection}/{u.doc_id}" for u in units}
    kept_memo = memo_read.result()  # with its units, read as written
    remembered = kept_memo is not None and kept_memo.num_rows > 0
    relinkers: list[Relinker] = []
    memos: dict[str, Memo] = {}
    lasts: dict[str, LastRun] = {}

    def memo_for(tenant: str) -> Memo:
        if tenant not in memos:
            memos[tenant] = Memo(
                kept_memo if kept_memo is not None else (),
                tenant_id=tenant,
                prints=known.fingerprints,
                unmade=unmade_index(kept_memo, tenant),
            )
        return memos[tenant]

    def link(messages: Sequence[Message], **options: Any) -> list[Group]:
        tenant = tenant_of[messages[0].unit_id] if messages else ""
        relinkers.append(
            Relinker(
                previous,
                sources=sources,
                tenant_id=tenant,
                prints=known.links,
                history=tails.get(tenant, {}),
            )
        )

        def grouped(what: str, n: int) -> None:
            say(f"{tenant}: {n:,} {what} of {len(messages):,} units")

        lasts[tenant] = known.last_run(tenant)
        return linker(
            messages,
            relinker=relinkers[-1],
            memo=memo_for(tenant),
            last=lasts[tenant],
            progress=grouped,
            verifier=verifier,
            **options,
        )

    found, states = (
        ({}, {})
        if cfg.format == "irc"
        else _identify(home, collection, records, known.records, pass_read.result())
    )
    if found:
        read = sum(f.read for f in found.values())
        say(f"identities of {len(found)} tenant(s): {read:,} of {len(units):,} units read")
    # each table staged as soon as it is made, written beside the work after it (the checks
    # included), and published only if the checks pass (see Background)
    at = (collection,)
    _stage_identities(home, collection, found, sources, states, io=io)
    registries = {t: f.registry for t, f in found.items()}
    names = {t: display_names(r) for t, r in registries.items()}
    # what settles a group beside its members: the same registry, resolved by the same code
    resolving = {t: f"{r.digest()}:{identity_resume.code_digest()}" for t, r in registries.items()}
    fit = tokens.group_fit(home.config, cfg.namespace)
    tables = group_tables(
        collection,
        units,
        link,
        registries=registries,
        names=names,
        memo_for=memo_for,
        previous=groups_read.result() if remembered else None,
        previous_members=members_read.result() if remembered else None,
        resolving=resolving,
        fit=fit,
    )
    io.stage(wh, GROUPS, at, tables.groups)
    io.stage(wh, MEMBERS, at, tables.members)
    kept_tails: dict[str, dict[str, ChannelTail]] = {}
    for r in relinkers:
        kept_tails.setdefault(r.tenant_id, {}).update(r.tails)
    io.stage(wh, LINKS, at, links_table((x for r in relinkers for x in r.links), kept_tails))
    io.stage(wh, MEMO, at, memo_table(memos.values(), kept_memo))
    prints = _prints(units, digests, sources, memos, relinkers, states, lasts, linking, kept)
    io.stage(wh, PRINTS, at, prints)
    roles = Counter(r for f in found.values() for r in f.mentions.column("mention_type"))
    merged_units = {u for f in found.values() for r in f.merges for u in r.units}
    held = tables.members.filter(
        pc.is_in(tables.members["unit_id"], pa.array(sorted(merged_units), pa.string()))
    )
    outcome = LinkedGroupsOutcome(
        grouped=True,
        units=len(units),
        groups=tables.groups.num_rows,
        members=tables.members.num_rows,
        by_type=dict(sorted(Counter(tables.groups["group_type"].to_pylist()).items())),
        unindexed=sum(1 for a in tables.groups["acl_groups"].to_pylist() if not a),
        cut=sum(1 for c in tables.groups["input_cut"].to_pylist() if c),
        input_limit=fit.describe(),
        identities=sum(len(f.registry) for f in found.values()),
        discovered=sum(1 for f in found.values() for p in f.registry if p.origin == "discovered"),
        mentions_by_role=dict(sorted(roles.items())),
        sightings=sum(len(f.sightings) for f in found.values()),
        identity_read=sum(f.read for f in found.values()),
        merges=sum(len(f.merges) for f in found.values()),
        merges_not_here=sum(len(f.not_here) for f in found.values()),
        merges_refused=[f"{t}: {a} -> {b}" for t, f in found.items() for a, b in f.refused],
        reanchored=len(set(held["group_id"].to_pylist())),
        sightings_path=str(home.warehouse.path(identity_store.SIGHTINGS, collection)),
        relinked=sum(r.relinked for r in relinkers),
        channels_relinked=sum(r.channels_relinked for r in relinkers),
        from_window=sum(r.from_window for r in relinkers),
        reused=sum(m.reused for m in memos.values()),
        computed=sum(m.computed for m in memos.values()),
        carried=tables.carried,
        unmade=tables.unmade,
        prints_kept=known.units,
        rows_not_decoded=taken,
        questions_unread=sum(a.kept for a in lasts.values()),
        verified=0 if verifier is None else verifier.asked,
        unverified=0 if verifier is None else verifier.unclear,
        verifier_refused=0 if verifier is None else verifier.refused,
        verifier_refusal="" if verifier is None else verifier.refusal,
        gates=check(tables, [u for u in units if u.doc_id in live]),
    )
    if outcome.passed:
        keys = [i.key for i in wake]
        done = {**({k: now for k in keys} if now is not None else {}), **reprocessed}
        queue = refresh(collection, stored, linker, tenant_of, processed=done)
        io.stage(wh, QUEUE, at, queue_table(collection, queue, linking, arrived))
        outcome.queued, outcome.woken = len(queue), keys
        # the memo, which names the rows a later run carries, after the rows; the prints,
        # which name the memo's entries, after it
        io.publish(last=[MEMO, PRINTS])
        io.wait()
        say(f"checks passed: {outcome.groups:,} groups written ({outcome.carried:,} carried)")
    else:
        failed = ", ".join(g.name for g in outcome.gates if not g.passed)
        say(f"checks failed ({failed}): the last good groups stay")
    if verifier is not None:
        verifier.close()
    return outcome


def _verifier(home: Home, name: str) -> OpenAIAnswerVerifier | None:
    """The answer verifier collection ``name`` configures (none by default), its key read
    from the environment now: a missing one is a :class:`ConfigError` naming the variable
    and where the configuration names it, before the step reads anything."""
    config = home.config.collections[name].answer_verifier
    if config is None:
        return None
    where = f"{home.config.path}: collections.{name}.answer_verifier"
    return answer_verifier(config, where=where)


def _identify(
    home: Home,
    collection: str,
    records: dict[str, Mapping[str, Any]],
    known: dict[str, str],
    last_pass: pa.Table | None,
) -> tuple[dict[str, TenantIdentities], dict[str, PassState]]:
    """The identity pass of each tenant's units (``records``: unit id -> its record, see
    :func:`unit_reading`; the collection's people file seeds its own tenant's registry only:
    a record of another tenant starts from an empty one), resumed from what the last pass
    read where only units were appended since, and what the next pass resumes from
    (``known``: the digests of records as they were, see :mod:`corpus_index.unit_prints`;
    ``last_pass``: the last pass's partition, none if never written)."""
    cfg = home.collection(collection)
    by_tenant: dict[str, list[Mapping[str, Any]]] = {}
    for record in records.values():
        by_tenant.setdefault(str(record["tenant_id"]), []).append(record)
    last = identity_resume.read_states(last_pass)
    found: dict[str, TenantIdentities] = {}
    states: dict[str, PassState] = {}
    for tenant, mine in sorted(by_tenant.items()):
        found[tenant], states[tenant] = identity_resume.identify_since(
            last.get(tenant),
            tenant,
            mine,
            people=cfg.people if tenant == cfg.tenant else None,
            merges_file=cfg.merges if tenant == cfg.tenant else None,
            recorded=identity_store.recorded_merges(home, tenant),
            limits=cfg.limits,
            known=known,
        )
    return found, states


def _kept_prints(home: Home, collection: str) -> tuple[pa.Table | None, KeptMessages]:
    """The last run's ``unit_prints`` rows and the messages they keep (by the digest of the
    row each was read from, :func:`~corpus_index.unit_prints.kept_messages`); none when its
    file cannot be read: they only spare hashing and decoding, so a damaged file costs this
    run its hashing and decoding and is written anew."""
    try:
        table = home.warehouse.read(PRINTS, (collection,))
    except DamagedWarehouseError:
        return None, KeptMessages()
    return table, kept_messages(table)


def _prints(
    units: Sequence[Unit],
    digests: dict[str, str],
    sources: dict[str, str],
    memos: dict[str, Memo],
    relinkers: Sequence[Relinker],
    states: dict[str, PassState],
    lasts: dict[str, LastRun],
    linking: Linking,
    kept: KeptMessages,
) -> pa.Table:
    """The ``unit_prints`` rows of this run: what it hashed of each unit (or was given), what
    it scored of each question, and the message of each unit read from one row (its kept
    columns as they were, for a message taken from ``kept``), for the next run to take where
    the unit's blocks stay as they are."""
    return prints_table(
        (
            (u.message.unit_id, sources[u.message.unit_id], u.tenant_id, digests[u.message.unit_id])
            for u in units
        ),
        fingerprints=_merged([m.prints for m in memos.values()]),
        links={x.unit_id: (r.model_key, x.fingerprint) for r in relinkers for x in r.links},
        records=_merged([s.units for s in states.values()]),
        last=lasts,
        window_s=linking.windows.answer_s,
        # a unit of several rows was read as their messages joined: no one row's message
        messages=[None if "+" in digests[u.message.unit_id] else u.message for u in units],
        kept=kept,
    )


def _merged(maps: Sequence[Mapping[str, str]]) -> Mapping[str, str]:
    """One mapping of what ``maps`` hold (a later one's value for a key in two): the one
    itself, not a copy, when there is one."""
    if len(maps) == 1:
        return maps[0]
    return {k: v for m in maps for k, v in m.items()}


def _stage_identities(
    home: Home,
    collection: str,
    found: dict[str, TenantIdentities],
    sources: dict[str, str] | None = None,
    states: dict[str, PassState] | None = None,
    *,
    io: Background,
) -> None:
    people = [identities_table(f.registry) for f in found.values()]
    mentions = pa.concat_tables(
        [MENTION_SCHEMA.empty_table(), *(f.mentions.table() for f in found.values())]
    )
    mentions = mentions.append_column(
        "collection", pa.array([collection] * mentions.num_rows, pa.string())
    ).append_column(
        "source_id",
        pa.array([(sources or {}).get(u, "") for u in mentions["unit_id"].to_pylist()]),
    )
    sightings = pa.concat_tables(
        [SIGHTING_SCHEMA.empty_table(), *(f.sightings.table() for f in found.values())]
    )
    wh, at = home.warehouse, (collection,)
    identities = pa.concat_tables([IDENTITY_SCHEMA.empty_table(), *people])
    io.stage(wh, identity_store.IDENTITIES, at, identities)
    io.stage(wh, identity_store.MENTIONS, at, mentions)
    io.stage(wh, identity_store.SIGHTINGS, at, sightings)
    io.stage(wh, identity_store.PASS, at, identity_resume.state_table(states or {}))


def read_units(blocks: pa.Table) -> list[Unit]:
    """One unit per ``unit_id`` of ``blocks`` (a record cut into sections is one unit whose
    text is its sections' in order), with the scope of its first block. Only the columns a
    unit reads are decoded."""
    return unit_reading(blocks, records=False).units


class UnitReading(NamedTuple):
    """The units of a parsed-blocks table and the identity pass's record of each, from one
    decoding of each block (:func:`unit_reading`)."""

    units: list[Unit]
    # unit id -> its record (:func:`~corpus_index.identity_pass.unit_records`; a unit read
    # from a kept message has its record decoded when first read beyond its id and tenant)
    records: dict[str, Mapping[str, Any]]
    # unit id -> a digest of its blocks' rows, all a unit is read from
    # (:func:`~corpus_index.unit_prints.row_digests` of each, in order, joined by "+")
    digests: dict[str, str]
    # rows whose message was taken from ``kept`` rather than decoded
    taken: int = 0


def unit_row_digests(blocks: pa.Table) -> list[str]:
    """:func:`~corpus_index.unit_prints.row_digests` of the columns of ``blocks`` a unit is
    read from, one a row (what :func:`unit_reading` makes with ``digests``)."""
    return row_digests(blocks.select(_UNIT_COLUMNS))


def unit_reading(
    blocks: pa.Table,
    *,
    records: bool = True,
    digests: Sequence[str] | None = None,
    kept: Mapping[str, Message] | None = None,
) -> UnitReading:
    """:func:`read_units` of ``blocks`` and, with ``records``, the identity pass's record of
    each unit, the same as :func:`~corpus_index.identity_pass.unit_records` gives, built from
    the metadata the units were read from rather than decoding it again (none without); with
    ``digests`` (the rows' :func:`unit_row_digests`), a digest of the rows each unit is read
    from (none without).

    ``kept`` (with ``digests``): messages by the digest of the row each was read from
    (:func:`~corpus_index.unit_prints.kept_messages`); a row with one of those digests is
    not decoded, its message is taken, and its record is decoded only if the identity pass
    reads more of it than its id and tenant (it does not when only units were appended)."""
    units: dict[str, Unit] = {}
    made: dict[str, Mapping[str, Any]] = {}
    hashed: dict[str, str] = {}
    more: dict[str, list[str]] = {}  # unit id -> its blocks' texts, for a unit of several
    read = blocks.select(_UNIT_COLUMNS)
    row_prints = [""] * read.num_rows if digests is None else digests
    keep: Mapping[str, Message] = (kept or {}) if digests is not None else {}
    # the texts and metadata (most of the bytes) made Python strings only for the rows
    # decoded; a kept row's metadata only when its record is read beyond its id and tenant
    taken_rows = list(map(keep.__contains__, row_prints)) if keep else [False] * read.num_rows
    decoded = pc.invert(pa.array(taken_rows, pa.bool_()))
    contents = iter(read["content"].filter(decoded).to_pylist())
    metas = iter(read["metadata"].filter(decoded).to_pylist())
    kept_metas = _Column(read["metadata"])
    light = [read[c].to_pylist() for c in _UNIT_COLUMNS if c not in ("content", "metadata")]
    n_taken = 0
    for i, (doc_id, event_date, tenant, acl, tier, source_id, row_print) in enumerate(
        zip(*light, row_prints, strict=True)
    ):
        meta = None
        if taken_rows[i]:
            message = keep[row_print]
            n_taken += 1
        else:
            meta = _metadata(next(metas))
            message = message_from(_json(str(next(contents))), meta, doc_id, event_date)
        unit = message.unit_id
        if unit not in units:
            units[unit] = Unit(message, tenant, tuple(acl or ()), tier, doc_id)
            if records:
                made[unit] = (
                    unit_record(meta, unit, message.text, tenant, source_id)
                    if meta is not None
                    else _RecordLater(unit, tenant, kept_metas, i, message.text, source_id)
                )
            if digests is not None:
                hashed[unit] = row_print
        else:
            more.setdefault(unit, [units[unit].message.text]).append(message.text)
            if digests is not None:
                hashed[unit] += f"+{row_print}"
    for unit, texts in more.items():
        first = units[unit]
        units[unit] = first._replace(message=replace(first.message, text=" ".join(texts)))
        if records:
            made[unit] = {**made[unit], "text": units[unit].message.text}
    return UnitReading(list(units.values()), made, hashed, n_taken)


class _RecordLater(Mapping[str, Any]):
    """The record of a unit whose message was kept (:func:`unit_reading`): its id and tenant
    at once, the rest decoded from its block's metadata when first read (the same dict
    :func:`~corpus_index.identity_pass.unit_record` makes, in the same order)."""

    __slots__ = ("_metas", "_record", "_row", "_source_id", "_tenant", "_text", "_unit")

    def __init__(
        self, unit: str, tenant: str, metas: _Column, row: int, text: str, source_id: str
    ) -> None:
        self._unit, self._tenant, self._metas, self._row = unit, tenant, metas, row
        self._text, self._source_id = text, source_id
        self._record: dict[str, Any] | None = None

    def _whole(self) -> dict[str, Any]:
        if self._record is None:
            meta = _metadata(self._metas.get(self._row))
            self._record = unit_record(meta, self._unit, self._text, self._tenant, self._source_id)
        return self._record

    def __getitem__(self, key: str) -> Any:
        if key == "id":
            return self._unit
        if key == "tenant_id":
            return self._tenant
        return self._whole()[key]

    def get(self, key: str, default: Any = None) -> Any:
        """As a dict's (one call, not the mixin's lookup through ``__getitem__``)."""
        if key in ("id", "tenant_id"):
            return self[key]
        return self._whole().get(key, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._whole())

    def __len__(self) -> int:
        return len(self._whole())

    def __repr__(self) -> str:
        return repr(self._whole())


def _metadata(meta_json: Any) -> Any:
    """A parsed block's ``metadata`` decoded (empty for none)."""
    return _json(str(meta_json)) if meta_json else {}


def _json(text: str) -> Any:
    """``json.loads(text)``, without its per-call wrapping where ``text`` is one JSON value
    and nothing more (as a parsed block's columns hold it); anything else (whitespace around
    it, or not JSON) goes through ``json.loads``, to the same value or the same error."""
    try:
        value, end = _RAW_DECODE(text)
    except ValueError:
        return json.loads(text)
    return value if end == len(text) else json.loads(text)


_RAW_DECODE = json.JSONDecoder().raw_decode


# the parsed-blocks columns :func:`unit_reading` reads (the others in this order)
_UNIT_COLUMNS = [
    "doc_id", "content", "metadata", "event_date", "tenant_id", "acl_groups", "tier", "source_id"
]  # fmt: skip


class _Column:
    """One column's values, made Python objects all at once when the first is asked for
    (a record read later reads its row's metadata from here; one read, the full pass, reads
    them all)."""

    def __init__(self, column: pa.ChunkedArray) -> None:
        self._column = column
        self._values: list[Any] | None = None

    def get(self, row: int) -> Any:
        if self._values is None:
            self._values = self._column.to_pylist()
        return self._values[row]


def check(tables: GroupTables, live_units: list[Unit]) -> list[gates.Gate]:
    """The blocking checks of DESIGN §10b on one collection's groups, against its live units
    (the check that generations hold no group row without a group runs on ``index_rows``)."""
    units = unit_scopes((u.message.unit_id, u.tenant_id, u.acl_groups, u.tier) for u in live_units)
    return [
        group_members_exist_and_are_live(tables.members, units),
        groups_stay_within_one_tenant(tables.groups, tables.members, units),
        group_acl_within_members(tables.groups, tables.members, units),
    ]
