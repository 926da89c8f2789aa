"""The ``linked_groups`` step from its last run's links and kept results gives what a full
re-run gives, after a message is appended, edited, deleted or arrives late, or a merge or a
people file change follows runs that left every group settled, and a sync leaves in the
generation the group rows a fresh build makes; ``grouping: false`` leaves the group and
identity partitions empty; the per-block TF-IDF keeps a unit's vector while its block is
unchanged."""

from __future__ import annotations

import datetime as dt
import gc
import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import yaml

from corpus_index import doctor, identity_store, steps
from corpus_index.config import Settings
from corpus_index.group_records import GroupTables, Unit, group_tables
from corpus_index.home import Home
from corpus_index.identities import identity_id
from corpus_index.linked import topics
from corpus_index.linked.groups import Group, _units, conversation_groups, link_units
from corpus_index.linked.lastrun import LastRun
from corpus_index.linked.memo import Memo, memo_table
from corpus_index.linked.messages import Message
from corpus_index.linked.relink import LINK_SCHEMA, linked_conversations, read_links
from corpus_index.linked.similarity import Similarity, block_starts
from corpus_index.linked.topic import TOPIC_BLOCK
from corpus_index.linked.topics import topic_clusters
from corpus_index.reprocess_queue import QUEUE
from corpus_index.steps.linked_groups import GROUPS, LINKS, MEMBERS, MEMO
from corpus_index.unit_prints import PRINTS
from tests.streamgen import stream, write_jsonl
from tests.test_linked_contexts import sample

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_corpus" / "messages" / "wattle"
COLLECTION = "wattle"
PARTITIONS = (GROUPS, MEMBERS, identity_store.IDENTITIES, identity_store.MENTIONS)
PARTITIONS += (identity_store.SIGHTINGS,)


def configure(root: Path, source: Path, **extra: Any) -> Settings:
    spec = {"kind": "messages", "path": str(source), "tenant": "wattle", "people": "people.yaml"}
    spec |= {"acl_groups": ["wattle-staff"], "namespace": "messages", **extra}
    config = {
        "collections": {COLLECTION: spec},
        "profiles": {"main": {"embedder": "hash:v1-64", "namespace": "messages"}},
        "namespaces": {"messages": {"eval_gate": "off"}},
    }
    path = root / "corpus.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return Settings(config_path=path, home=root / "home")


def link(settings: Settings) -> steps.linked_groups.LinkedGroupsOutcome:
    home = Home(settings)
    steps.source_manifest.run(home, COLLECTION)
    steps.parsed_blocks.run(home, COLLECTION)
    return steps.linked_groups.run(home, COLLECTION)


def tables(settings: Settings) -> dict[str, list[dict[str, Any]]]:
    wh = Home(settings).warehouse
    out = {}
    for name in PARTITIONS:
        table = wh.read(name, (COLLECTION,))
        assert table is not None, name
        out[name] = table.to_pylist()
    queue = wh.read(QUEUE, (COLLECTION,))  # not written where nothing is grouped
    out[QUEUE] = [] if queue is None else queue.to_pylist()
    return out


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def write(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def append(source: Path) -> None:
    chat = source / "chat-picton-sil.jsonl"
    records = lines(chat)
    new = dict(records[-1], id="wg-dc-new", text="Can someone check the van keys are back?")
    new["timestamp"] = "2025-12-31T23:50:00+11:00"
    new.pop("reply_to", None)
    write(chat, [*records, new])


def edit(source: Path) -> None:
    chat = source / "chat-picton-sil.jsonl"
    records = lines(chat)
    records[10] = dict(records[10], text="Who has the chemist run today? The script is ready.")
    write(chat, records)


def delete(source: Path) -> None:
    chat = source / "chat-tahmoor-sil.jsonl"
    records = lines(chat)
    write(chat, records[:5] + records[6:])


def late(source: Path) -> None:
    """A shift note written days ago, arriving only now."""
    notes = source / "shift-notes.jsonl"
    records = lines(notes)
    new = dict(records[0], id="wg-sn-late", author="Jane Okafor")
    new["text"] = "John: settled after the seizure, obs normal. Mike Brennan and I stayed with him."
    write(notes, [*records, new])


CHANGES: list[Callable[[Path], None]] = [append, edit, delete, late]


@pytest.fixture(scope="module")
def incremental(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Settings]:
    root = tmp_path_factory.mktemp("incremental")
    source = root / "source"
    shutil.copytree(SAMPLE, source)
    settings = configure(root, source)
    first = link(settings)
    assert first.passed and first.reused == 0 and first.computed > 0
    assert {"decision_thread", "topic_cluster"} <= set(first.by_type)  # every type is covered
    return source, settings


@pytest.mark.parametrize("change", CHANGES, ids=lambda c: c.__name__)
def test_a_run_from_the_last_gives_what_a_full_run_gives(
    incremental: tuple[Path, Settings], change: Callable[[Path], None], tmp_path: Path
) -> None:
    source, settings = incremental  # the changes pile up, in order, on one home
    change(source)
    again = link(settings)
    assert again.passed and again.computed > 0  # the sample is one TF-IDF block: all again
    fresh_source = tmp_path / "source"
    shutil.copytree(source, fresh_source)
    fresh = configure(tmp_path, fresh_source)
    whole = link(fresh)
    assert whole.reused == 0
    assert (again.groups, again.members, again.by_type) == (
        whole.groups,
        whole.members,
        whole.by_type,
    )
    assert tables(settings) == tables(fresh)


def test_nothing_changed_computes_nothing_again(incremental: tuple[Path, Settings]) -> None:
    _, settings = incremental
    link(settings)
    again = link(settings)
    assert again.computed == 0 and again.reused > 0 and again.relinked == 0
    assert again.carried == again.groups  # every group settled: nothing described again


def test_the_step_says_what_it_has_done_as_it_goes(tmp_path: Path) -> None:
    """A long run's log: the units read, the identity pass, each grouping with the groups it
    made (the counts of the tables written), then the checks; each line with its seconds."""
    source = tmp_path / "source"
    shutil.copytree(SAMPLE, source)
    home = Home(configure(tmp_path, source))
    steps.source_manifest.run(home, COLLECTION)
    steps.parsed_blocks.run(home, COLLECTION)
    said: list[str] = []
    out = steps.linked_groups.run(home, COLLECTION, progress=said.append)
    assert out.passed
    seconds = [float(line.rsplit("(", 1)[1].removesuffix(" s)")) for line in said]
    assert seconds == sorted(seconds)
    lines = [line.rsplit(" (", 1)[0] for line in said]
    assert lines[0] == (
        f"read {out.units:,} units ({out.prints_kept:,} as they were, "
        f"{out.rows_not_decoded:,} rows not decoded)"
    )
    assert (
        lines[1] == f"identities of 1 tenant(s): {out.identity_read:,} of {out.units:,} units read"
    )
    names = {
        "conversation": "conversations",
        "qa_pair": "questions",
        "incident_context": "incidents",
        "daily_context": "days",
        "decision_thread": "decisions",
        "topic_cluster": "topics",
    }
    assert lines[2:8] == [
        f"wattle: {out.by_type.get(t, 0):,} {what} of {out.units:,} units"
        for t, what in names.items()
    ]
    assert lines[8:] == [f"checks passed: {out.groups:,} groups written ({out.carried:,} carried)"]


def test_the_kept_links_alone_give_the_conversations(incremental: tuple[Path, Settings]) -> None:
    """The links the step keeps name each message and its time, so the conversations (their
    members in order, their time spans) are read from that table alone, no message decoded,
    after the changes of the tests before too (a removal, an edit, a late note)."""
    _, settings = incremental
    link(settings)
    wh = Home(settings).warehouse
    kept = wh.read(LINKS, (COLLECTION,))
    assert kept is not None and set(kept.column_names) == set(LINK_SCHEMA.names)
    read = [c for c in linked_conversations(read_links(kept)) if len(c) > 1]
    groups = wh.read(GROUPS, (COLLECTION,))
    members = wh.read(MEMBERS, (COLLECTION,))
    assert groups is not None and members is not None
    convs = {
        g["group_id"]: (g["earliest_content_at"], g["latest_content_at"])
        for g in groups.to_pylist()
        if g["group_type"] == "conversation"
    }
    ordered: dict[str, list[tuple[int, str]]] = {}
    for m in members.to_pylist():
        if m["group_id"] in convs:
            ordered.setdefault(m["group_id"], []).append((m["order"], m["unit_id"]))
    want = {gid: [u for _, u in sorted(ms)] for gid, ms in ordered.items()}
    assert len(read) == len(want) > 5
    by_members = {tuple(ms): gid for gid, ms in want.items()}
    for conversation in read:
        gid = by_members[tuple(x.unit_id for x in conversation)]
        times = [x.timestamp for x in conversation]
        assert times == sorted(times) and (times[0], times[-1]) == convs[gid]


def _same_as_a_full_run(source: Path, settings: Settings, root: Path, **extra: Any) -> None:
    fresh_source = root / "fresh"
    shutil.copytree(source, fresh_source)
    assert link(fresh := configure(root, fresh_source, **_SCOPE, **extra)).passed
    assert tables(settings) == tables(fresh)


_SCOPE = {"acl_groups": ["wattle-staff", "wattle-leads"]}


def test_a_group_settles_while_its_inputs_stay_not_once_one_moves(tmp_path: Path) -> None:
    """A group whose members, their weighing and scope, and the registry are as they were is
    carried whole; narrowing one message's access (its text as it was) stops the groups it
    is in from settling, the people file read again to the same registry stops none, and a
    merge (another registry) stops every group; each run leaves what a full run leaves."""
    source = tmp_path / "source"
    shutil.copytree(SAMPLE, source)
    settings = configure(tmp_path, source, **_SCOPE)
    assert link(settings).carried == 0  # no last tables: nothing to carry, the keys kept
    same = link(settings)
    assert same.carried == same.groups

    chat = source / "chat-picton-sil.jsonl"
    records = lines(chat)
    records[3] = dict(records[3], acl=["wattle-leads"])
    write(chat, records)
    narrowed = link(settings)
    members = Home(settings).warehouse.read(MEMBERS, (COLLECTION,))
    assert members is not None
    mine = members.filter(pc.equal(members["unit_id"], records[3]["id"]))
    holding = set(mine["group_id"].to_pylist())
    assert holding and narrowed.carried == narrowed.groups - len(holding)
    _same_as_a_full_run(source, settings, tmp_path / "narrowed")

    people = source / "people.yaml"
    people.write_text(people.read_text(encoding="utf-8") + "\n# read again\n", encoding="utf-8")
    assert link(settings).carried == narrowed.groups  # the same registry: all settle

    merges = {"merges": [{"merge": "mike-brennan", "into": "sarah-jones"}]}
    (source / "merges.yaml").write_text(yaml.safe_dump(merges), encoding="utf-8")
    settings = configure(tmp_path, source, **_SCOPE, merges="merges.yaml")
    merged = link(settings)
    assert merged.passed and merged.merges == 1 and merged.carried == 0
    _same_as_a_full_run(source, settings, tmp_path / "merged", merges="merges.yaml")


def _merge_in_file(source: Path, settings: Settings) -> Settings:
    merges = {"merges": [{"merge": "mike-brennan", "into": "sarah-jones"}]}
    (source / "merges.yaml").write_text(yaml.safe_dump(merges), encoding="utf-8")
    return configure(settings.config_path.parent, source, merges="merges.yaml")


def _merge_recorded(source: Path, settings: Settings) -> Settings:
    identity_store.record_merge(Home(settings), "wattle", "mike-brennan", "sarah-jones")
    return settings


def _alias_removed(source: Path, settings: Settings) -> Settings:
    people = yaml.safe_load((source / "people.yaml").read_text(encoding="utf-8"))
    mike = next(p for p in people["people"] if p["id"] == "mike-brennan")
    mike["aliases"].remove("mikeb")  # his chat handle: still his, by a fuzzy match
    mike["phones"] = []  # the number three of the calls are from: someone found there now
    (source / "people.yaml").write_text(yaml.safe_dump(people), encoding="utf-8")
    return settings


IDENTITY_CHANGES: dict[str, Callable[[Path, Settings], Settings]] = {
    "a merge in the merges file": _merge_in_file,
    "a recorded merge": _merge_recorded,
    "an alias and a phone removed from the people file": _alias_removed,
}


def _copy_home(root: Path, to: Path) -> tuple[Path, Settings]:
    """A copy of the home at ``root`` (made by :func:`configure`): its source and settings."""
    shutil.copytree(root, to)
    return to / "source", configure(to, to / "source")


@pytest.fixture(scope="module")
def sample_settled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample linked twice, every group settled (the root of its source and home)."""
    root = tmp_path_factory.mktemp("settled")
    shutil.copytree(SAMPLE, root / "source")
    settings = configure(root, root / "source")
    assert link(settings).passed
    settled = link(settings)
    assert settled.carried == settled.groups
    return root


@pytest.mark.parametrize("change", list(IDENTITY_CHANGES.values()), ids=list(IDENTITY_CHANGES))
def test_an_identity_change_after_settled_groups_gives_what_a_full_run_gives(
    sample_settled: Path, tmp_path: Path, change: Callable[[Path, Settings], Settings]
) -> None:
    """Every group settled and carried whole, then a merge (in the merges file or recorded
    by ``corpus identities merge``) or an alias and a phone taken out of the people file, and
    nothing else: no group is carried as it was, and the mentions, identities and every
    group's anchors, title and summary are what a full run on the same inputs makes."""
    source, settings = _copy_home(sample_settled, tmp_path / "home")
    before = tables(settings)

    settings = change(source, settings)
    again = link(settings)
    assert again.passed and again.carried == 0
    after = tables(settings)
    assert after[identity_store.MENTIONS] != before[identity_store.MENTIONS]

    fresh_source = tmp_path / "fresh" / "source"
    shutil.copytree(source, fresh_source)
    fresh = configure(
        fresh_source.parent,
        fresh_source,
        **({"merges": "merges.yaml"} if (source / "merges.yaml").exists() else {}),
    )
    if change is _merge_recorded:
        identity_store.record_merge(Home(fresh), "wattle", "mike-brennan", "sarah-jones")
    whole = link(fresh)
    assert whole.passed and whole.reused == 0
    assert after == tables(fresh)
    mike = identity_id("wattle", "mike-brennan")
    anchored = {a for g in after[GROUPS] for a in g["identity_anchors"]}
    if change is _alias_removed:
        assert mike in anchored  # still named by his name and other aliases
    else:
        assert mike not in anchored
        assert mike not in {m["identity_id"] for m in after[identity_store.MENTIONS]}


def test_groups_are_carried_unmade_only_from_rows_the_last_run_left(tmp_path: Path) -> None:
    """Days after the stream's end, the next message appended finds most groups as they
    were, carried before their groupings make them (those with a check to come too, their
    queue items as a full run makes them). With the last run's groups gone (its memo kept),
    none is carried, and the groups are made again as a full run makes them."""
    (tmp_path / "long").mkdir()
    source, settings = _long_linked(tmp_path / "long")
    _long_append_days_later(source)
    assert link(settings).passed
    _long_append(source)
    again = link(settings)
    assert again.passed and again.carried >= again.unmade > 0.8 * again.groups
    _same_tables_as_a_full_run(source, settings, tmp_path / "appended")
    _long_append(source)
    Home(settings).warehouse.path(GROUPS, COLLECTION).unlink()
    lost = link(settings)
    assert lost.passed and lost.carried == lost.unmade == 0
    _same_tables_as_a_full_run(source, settings, tmp_path / "fresh")


def test_a_long_stream_computes_again_only_what_a_new_unit_touches() -> None:
    """Past the first TF-IDF block a new unit changes no other unit's vector: only the
    results that read it are computed again (not its block's)."""
    messages = stream(TOPIC_BLOCK + 150, channels=3, seed=5)
    earlier = Memo(tenant_id="t")
    link_units(messages, memo=earlier)
    grown = [*messages, replace(messages[-1], unit_id="new", text="can someone check the van?")]
    grown[-1] = replace(grown[-1], timestamp=messages[-1].timestamp + 60)
    rows = memo_table([earlier]).to_pylist()
    later = Memo(rows, tenant_id="t")
    assert link_units(grown, memo=later) == link_units(grown)
    assert later.reused > 50 * later.computed > 0  # its block's other results kept too
    assert Memo(rows, tenant_id="other").get(rows[0]["key"]) is None  # tenants never mix


def test_grouping_off_leaves_groups_and_identities_empty(tmp_path: Path) -> None:
    source = tmp_path / "source"
    shutil.copytree(SAMPLE, source)
    settings = configure(tmp_path, source, grouping=False)
    outcome = link(settings)
    assert not outcome.grouped
    assert all(not rows for rows in tables(settings).values())
    wh = Home(settings).warehouse
    assert all(wh.read(p, (COLLECTION,)).num_rows == 0 for p in (LINKS, MEMO))  # type: ignore[union-attr]


def test_a_unit_keeps_its_vector_while_the_block_before_its_own_is_unchanged() -> None:
    """Past the first block a unit is weighed by the block before its own: a unit added at
    the end changes no other vector; an edit in the first block changes that block's vectors
    and the next block's, not the one after; a unit added to a collection of one block
    changes every vector, as that block weighs itself."""
    messages = stream(10, channels=2, seed=3)
    before = Similarity(messages, block=4)  # blocks (by their units' ids): 0-2, 3-7, 8-9
    assert block_starts([m.unit_id for m in messages], 4) == [0, 3, 8]
    grown = [*messages, replace(messages[-1], unit_id="new", text="van keys pumpkin roster")]
    after = Similarity(grown, block=4)
    edited = Similarity([replace(messages[0], text="roster swap"), *messages[1:]], block=4)
    for i, m in enumerate(messages):
        assert before.block_digest(m.unit_id) == after.block_digest(m.unit_id)
        assert before.vector(m.unit_id) == after.vector(m.unit_id)
        kept = before.block_digest(m.unit_id) == edited.block_digest(m.unit_id)
        assert kept == (i >= 8)
        if i >= 8:
            assert before.vector(m.unit_id) == edited.vector(m.unit_id)
    assert before.digest(2) != after.digest(2)  # what block 2 holds changed, not its weights
    small = Similarity(messages[:2], block=4)  # one block, not closed yet
    small_grown = Similarity([*messages[:2], grown[-1]], block=4)
    for m in messages[:2]:
        assert small.block_digest(m.unit_id) != small_grown.block_digest(m.unit_id)
    picked = [messages[0].unit_id, messages[9].unit_id, messages[5].unit_id, "nobody"]
    first, second = f"own:{before.digest(0)}", f"before:{before.digest(0)}"
    third = f"before:{before.digest(1)}"
    assert before.digests(picked) == [first, second, third]
    assert [before.block_digest(i) for i in picked] == [first, third, second, None]
    ids = [m.unit_id for m in messages[:4]]
    sims = before.matrix(ids)
    assert sims[0, 1] == pytest.approx(before.pair(ids[0], ids[1]))
    assert before.against(ids[0], ids[1:]) == pytest.approx(list(sims[0, 1:]))
    assert before.pair(ids[0], "nobody") == 0.0 and before.vector("nobody") == {}


def _tables_from_last(
    units: list[Unit], last: GroupTables | None, rows: list[dict[str, str]]
) -> tuple[GroupTables, Memo]:
    """``group_tables`` of ``units`` as the step calls it: from the last run's kept results
    (``rows``) and tables (``last``), or from nothing."""
    memo = Memo(rows, tenant_id="t")

    def link(messages: Sequence[Message], **options: Any) -> list[Group]:
        return link_units(messages, memo=memo, **options)

    previous = None if last is None else last.groups
    members = None if last is None else last.members
    tables = group_tables(
        "c", units, link, memo_for=lambda _: memo, previous=previous, previous_members=members
    )
    return tables, memo


def _as_units(messages: list[Message]) -> list[Unit]:
    return [Unit(m, "t", ("staff",), "restricted", m.unit_id) for m in messages]


class _LastRun(NamedTuple):
    messages: list[Message]
    tables: GroupTables
    memo: list[dict[str, str]]


@pytest.fixture(scope="module")
def last_run() -> _LastRun:
    """Two runs on a stream of two TF-IDF blocks: the second from the first, as the step
    runs them."""
    messages = stream(TOPIC_BLOCK + 150, channels=3, seed=5)
    first, memo = _tables_from_last(_as_units(messages), None, [])
    second, memo = _tables_from_last(_as_units(messages), first, memo_table([memo]).to_pylist())
    assert second.carried == second.groups.num_rows  # nothing changed: every row carried
    return _LastRun(messages, second, memo_table([memo]).to_pylist())


@pytest.mark.parametrize("change", ["append", "edit", "delete"])
def test_group_rows_carried_over_as_arrow_equal_rows_made_anew(
    last_run: _LastRun, change: str
) -> None:
    messages = last_run.messages
    if change == "append":
        new = replace(messages[-1], unit_id="new", text="can someone check the van?")
        grown = [*messages, replace(new, timestamp=messages[-1].timestamp + 60)]
    elif change == "edit":  # a unit of the second TF-IDF block: its groups' rows change
        k = len(messages) - 40
        grown = [*messages[:k], replace(messages[k], text="roster swap sunday"), *messages[k + 1 :]]
    else:
        grown = messages[:-30] + messages[-29:]
    later, _ = _tables_from_last(_as_units(grown), last_run.tables, last_run.memo)
    whole = group_tables("c", _as_units(grown), link_units)
    assert later.carried > later.groups.num_rows // 2  # most rows carried over
    assert later.groups.equals(whole.groups)
    assert later.members.equals(whole.members)
    assert later.groups.to_pylist() == whole.groups.to_pylist()


def sync(settings: Settings, run_id: str) -> None:
    """The collection's whole sync, step by step: scanned, parsed, linked, embedded and written
    to the profile's generation."""
    home = Home(settings)
    assert link(settings).passed
    steps.embedding_inputs.run(home, COLLECTION)
    assert steps.embeddings.run(home, "main", COLLECTION).passed
    assert steps.index_rows.run(home, "main", COLLECTION, run_id=run_id).passed


# columns of a generation row that name the run or the generation that wrote it
RUN_COLUMNS = ("run_id", "generation")


def group_rows(settings: Settings) -> list[dict[str, Any]]:
    """The group rows of the profile's generation, without the columns naming their run,
    sorted by vector id."""
    home = Home(settings)
    gen = home.registry.live_generation("main")
    assert gen is not None
    table = home.store.table(gen).to_arrow()
    rows = [r for r in table.to_pylist() if r["kind"] == "group"]
    return sorted(
        ({k: v for k, v in r.items() if k not in RUN_COLUMNS} for r in rows),
        key=lambda r: str(r["vector_id"]),
    )


def narrow(source: Path) -> None:
    """A chat message, member of a conversation, narrowed to the managers: the conversation
    keeps its members, and its row must narrow with it."""
    chat = source / "chat-picton-sil.jsonl"
    records = lines(chat)
    records[3] = dict(records[3], acl=["wattle-managers"])
    write(chat, records)


@pytest.mark.parametrize("change", [append, narrow], ids=lambda c: c.__name__)
def test_a_sync_leaves_the_group_rows_a_fresh_build_makes(
    change: Callable[[Path], None], tmp_path: Path
) -> None:
    """After one message is appended (every group's TF-IDF weights shift: scores and
    summaries of groups whose members stay) or narrowed (its groups' ACL narrows), the
    generation holds the group rows a build from scratch of the same data makes: none stale,
    none twice."""
    acl = {"acl_groups": ["wattle-staff", "wattle-managers"]}
    source = tmp_path / "a" / "source"
    shutil.copytree(SAMPLE, source)
    settings = configure(tmp_path / "a", source, **acl)
    sync(settings, "first")
    before = group_rows(settings)
    change(source)
    sync(settings, "second")
    fresh_source = tmp_path / "b" / "source"
    shutil.copytree(source, fresh_source)
    fresh = configure(tmp_path / "b", fresh_source, **acl)
    sync(fresh, "fresh")
    after, whole = group_rows(settings), group_rows(fresh)
    assert len({r["doc_id"] for r in after}) == len(after)  # one row a group
    stale = sorted(str(r["doc_id"]) for r in after if r not in whole)
    assert not stale, f"{len(stale)} of {len(after)} group rows are not a fresh build's"
    assert after == whole
    # unchanged members, another row: the change reached groups it does not belong to
    kept = {r["doc_id"] for r in before} & {r["doc_id"] for r in after}
    changed = {r["doc_id"] for r in before if r["doc_id"] in kept} - {
        r["doc_id"] for r in before if r in after
    }
    assert changed


def test_the_first_sync_after_a_full_one_makes_again_only_the_rows_it_touches(
    tmp_path: Path,
) -> None:
    """A full sync keeps its groups' row keys, so the first one-message sync after it makes
    again only the rows of the groups the new message is in: past the first TF-IDF block it
    shifts no other unit's weights (its block is weighed by the one before); every other
    group's row is carried, those of its own block too."""
    messages = stream(TOPIC_BLOCK + 150, channels=3, seed=5)
    source = tmp_path / "source"
    source.mkdir()
    shutil.copy(SAMPLE / "people.yaml", source)
    write_jsonl(messages, source / "chat.jsonl")
    settings = configure(tmp_path, source)
    first = link(settings)
    assert first.passed and first.carried == 0
    new = replace(messages[-1], unit_id="new", text="can someone check the van?", reply_to=None)
    grown = [*messages, replace(new, timestamp=messages[-1].timestamp + 60)]
    write_jsonl(grown, source / "chat.jsonl")
    again = link(settings)
    assert again.passed
    members = Home(settings).read("group_members", (COLLECTION,)).to_pylist()
    ordered = _units(grown)
    position = {m.unit_id: i for i, m in enumerate(ordered)}
    last_block = block_starts([m.unit_id for m in ordered])[-1]
    assert last_block > 0  # two blocks: the new message in the second
    in_block = {m["group_id"] for m in members if position[m["unit_id"]] >= last_block}
    holding = {m["group_id"] for m in members if m["unit_id"] == "new"}
    assert again.groups - again.carried == len(holding) > 0
    assert len(in_block) > 10 * len(holding)  # its block's other groups carried


# ------------------------------------------------------------ topic clusters from a checkpoint
EVERY = 4  # threads between two checkpoints: the sample's ~100 threads make ~25
BLOCK = 32  # units a TF-IDF block, about: the sample in several (as one, any change reaches all)


@pytest.mark.parametrize("change", ["remove", "late", "edit"])
def test_a_change_in_the_middle_reweighs_its_block_and_the_next_only(change: str) -> None:
    """Blocks end where their units' ids say (:func:`block_starts`), not at a count: a unit
    removed, arriving late or edited in the middle changes what its own block and the one
    after are weighed by, and no other block's, so the results of the units past them are
    kept (with blocks of a fixed count every later unit would move to another block)."""
    messages = _units(stream(600, channels=3, seed=5))
    at = len(messages) // 2
    target = messages[at]
    if change == "remove":
        changed = [m for m in messages if m.unit_id != target.unit_id]
    elif change == "late":
        late = replace(target, unit_id="late", text="chemist has the webster pack")
        changed = _units([*messages, replace(late, timestamp=target.timestamp + 0.5)])
    else:
        changed = [replace(m, text="roster swap") if m is target else m for m in messages]
    before, after = Similarity(messages, block=32), Similarity(changed, block=32)
    assert len(block_starts([m.unit_id for m in messages], 32)) > 10  # blocks of about 32
    block = before.block_of(target.unit_id)
    assert block is not None and 2 < block < len(before._starts) - 3
    moved = {
        before.block_of(m.unit_id)
        for m in messages
        if m.unit_id in after._row
        and before.block_digest(m.unit_id) != after.block_digest(m.unit_id)
    }
    assert moved == {block + 1}
    kept = [m for m in messages if (before.block_of(m.unit_id) or 0) > block + 1]
    assert kept and all(before.vector(m.unit_id) == after.vector(m.unit_id) for m in kept)


@pytest.mark.parametrize("change", ["remove", "late", "edit", "append", "remove-last"])
def test_a_block_digest_taken_from_the_last_run_is_the_one_hashing_gives(change: str) -> None:
    """A run takes the digest of a block from the last run (not hashing its units' texts)
    only where the block holds the same units, each as it was, as many as then: after any
    change, each block's digest is the one a fresh hashing gives, and only the blocks the
    change touched are hashed again."""
    messages = _units(stream(600, channels=3, seed=5))
    target = messages[len(messages) // 2]
    if change == "remove":
        changed = [m for m in messages if m.unit_id != target.unit_id]
    elif change == "late":
        late = replace(target, unit_id="late", text="chemist has the webster pack")
        changed = _units([*messages, replace(late, timestamp=target.timestamp + 0.5)])
    elif change == "edit":
        changed = [replace(m, text="roster swap") if m is target else m for m in messages]
    elif change == "append":
        extra = replace(messages[-1], unit_id="new", timestamp=messages[-1].timestamp + 60)
        changed = [*messages, extra]
    else:
        changed = messages[:-1]
    before = LastRun()
    before.weigh(Similarity(messages, block=BLOCK))
    # what the next run is given: the blocks of the units as they were (an edited unit's
    # rows differ, so it has none), and each block's digest and size
    edited = {target.unit_id} if change == "edit" else set()
    last = LastRun(
        blocks={u: b for u, b in before.made_blocks.items() if u not in edited},
        weighing=before.made_weighing,
        digests=before.made_digests,
    )
    after = Similarity(changed, block=BLOCK)
    taken = last._still_digested(after)
    fresh = Similarity(changed, block=BLOCK)
    assert all(taken[b] == fresh.digest(b) for b in taken)
    n = len(after.blocks())
    assert n > 10 and n - 3 <= len(taken) < n  # the touched blocks only are hashed again
    last.weigh(after)
    assert last.made_digests == fresh.digested()
    assert last.made_weighing == [w for w, _ in fresh.weighing()]


def _topic_input(messages: Sequence[Message]) -> tuple[list[Message], list[tuple[str, ...]]]:
    units = _units(messages)
    return units, [g.member_ids for g in conversation_groups(units)]


def _clusters_and_state(
    messages: Sequence[Message], memo: Memo | None
) -> tuple[list[Group], list[Any]]:
    """The topic clusters of ``messages`` (from ``memo``'s checkpoints when given), and what
    the clustering left: each cluster's thread positions, centroid and newest time."""
    units, conversations = _topic_input(messages)
    similarity = Similarity(units, block=BLOCK)
    groups = topic_clusters(
        units, conversations=conversations, similarity=similarity, memo=memo, checkpoint=EVERY
    )
    threads = topics._threads(units, conversations)
    vectors = {id(t): topics._unit_vector(similarity, t) for t in threads}
    state = topics._clustered(threads, lambda t: vectors[id(t)], similarity, memo, EVERY)
    return groups, [(c.positions, c.centroid, c.latest) for c in state]


def _edited(messages: list[Message], at: int) -> list[Message]:
    """``messages`` with the text of the ``at``-th unit (in time order) changed."""
    ordered = _units(messages)
    target = ordered[at].unit_id
    return [
        replace(m, text="roster swap sunday please") if m.unit_id == target else m for m in messages
    ]


TOPIC_CHANGES: dict[str, Callable[[list[Message]], list[Message]]] = {
    # a unit on its own at the end (a channel of its own): the last checkpoint stands
    "append": lambda ms: [
        *ms,
        replace(
            max(ms, key=lambda m: m.timestamp),
            unit_id="wg-new",
            channel="#new",
            text="van brakes quote approved",
            timestamp=max(m.timestamp for m in ms) + 60,
            reply_to=None,
        ),
    ],
    "edit_last": lambda ms: _edited(ms, -1),
    # before every checkpoint: none stands
    "edit_first": lambda ms: _edited(ms, 0),
    "delete_first": lambda ms: [m for m in ms if m.unit_id != _units(ms)[0].unit_id],
}


@pytest.mark.parametrize("change", list(TOPIC_CHANGES))
def test_topic_clusters_from_a_checkpoint_are_those_from_the_start(change: str) -> None:
    messages = list(sample("wattle"))
    first = Memo(tenant_id="t")
    before, _ = _clusters_and_state(messages, first)
    assert before  # the sample has topic clusters
    changed = TOPIC_CHANGES[change](messages)
    later = Memo(memo_table([first]).to_pylist(), tenant_id="t")
    resumed, resumed_state = _clusters_and_state(changed, later)
    fresh, fresh_state = _clusters_and_state(changed, None)
    assert resumed == fresh and resumed_state == fresh_state
    if change.endswith("_first"):
        assert later.reused == 0  # an edit or a deletion before a checkpoint invalidates it
    else:
        assert later.reused > 0  # resumed, not clustered from the start


def _keys(messages: Sequence[Message]) -> dict[int, str]:
    """The topic checkpoints' keys of ``messages`` (thread count -> key)."""
    units, conversations = _topic_input(messages)
    threads = topics._threads(units, conversations)
    similarity = Similarity(units, block=BLOCK)
    return topics._checkpoint_keys(threads, similarity, Memo(tenant_id="t"), EVERY)


def _appended_after_a_full_run() -> tuple[Memo, list[Message], dict[int, str]]:
    """The sample clustered from the start, then with a unit appended, from its memo: what
    the second run kept, the messages and their checkpoints' keys."""
    messages = list(sample("wattle"))
    first = Memo(tenant_id="t")
    _clusters_and_state(messages, first)
    appended = TOPIC_CHANGES["append"](messages)
    second = Memo(memo_table([first]).to_pylist(), tenant_id="t")
    _clusters_and_state(appended, second)
    return second, appended, _keys(appended)


def _standing(keys: dict[int, str], edited: dict[int, str]) -> int:
    """The last checkpoint of ``keys`` whose key ``edited`` (and every one before) keeps."""
    same = 0
    for k in sorted(edited):
        if edited[k] != keys.get(k):
            break
        same = k
    return same


def _resumed_from(edited: list[Message], kept: Memo) -> int:
    """The checkpoint a run over ``edited`` resumes from, given what ``kept`` kept, once its
    clusters are checked against those of a run from the start."""
    resumed, resumed_state = _clusters_and_state(
        edited, Memo(memo_table([kept]).to_pylist(), tenant_id="t")
    )
    fresh, fresh_state = _clusters_and_state(edited, None)
    assert resumed == fresh and resumed_state == fresh_state
    probe = Memo(memo_table([kept]).to_pylist(), tenant_id="t")
    threads = topics._threads(*_topic_input(edited))
    start, _ = topics._resumed(threads, _keys(edited), probe, lambda t: {})
    return start


def test_an_edit_far_back_resumes_from_a_sparse_checkpoint_kept_through_an_append() -> None:
    """Besides the last checkpoints, every ``SPARSE_CHECKPOINTS``-th is kept, and a run that
    resumes after one keeps it too: after an append (resumed near the end), an edit before
    the last checkpoints resumes from one of them before it, not from the start, and
    clusters as a run from the start does."""
    second, appended, keys = _appended_after_a_full_run()
    sparse = EVERY * topics.SPARSE_CHECKPOINTS
    last = sorted(keys)[-topics.KEPT_CHECKPOINTS]
    assert sparse < last
    # an edited unit whose TF-IDF blocks no thread before a sparse checkpoint reads, before
    # the last checkpoints (the sample's threads run long: most units are read early)
    units = _units(appended)
    edited = next(
        e
        for e in (_edited(appended, at) for at in range(3 * len(units) // 4, 0, -1))
        if sparse <= _standing(keys, _keys(e)) < last
    )
    expected = _standing(keys, _keys(edited)) // sparse * sparse
    assert _resumed_from(edited, second) == expected > 0


def test_a_change_before_the_last_checkpoint_resumes_from_the_one_before_it() -> None:
    """A run resumed from the last checkpoint keeps the last ones before it too: after an
    append (resumed from the last), an edit that changes the last checkpoint's threads but
    not those of one of the last few before it resumes from that one, not from a sparse
    checkpoint further back, and clusters as a run from the start does."""
    second, appended, keys = _appended_after_a_full_run()
    recent = sorted(keys)[-topics.KEPT_CHECKPOINTS :]
    sparse = EVERY * topics.SPARSE_CHECKPOINTS
    units = _units(appended)
    edited, left = next(
        (e, left)
        for e in (_edited(appended, at) for at in range(len(units) - 1, 0, -1))
        if (left := _standing(keys, _keys(e))) in recent[:-1] and left % sparse
    )
    assert _resumed_from(edited, second) == left


def test_a_checkpoint_key_changes_from_the_first_changed_thread_on() -> None:
    """Checkpoints before the first thread that reads the edited unit's TF-IDF block (or
    later ones) keep their keys; every checkpoint after the edited unit's thread gets
    another."""
    units, conversations = _topic_input(sample("wattle"))
    threads = topics._threads(units, conversations)
    target = threads[len(threads) // 2][0]  # the first unit of the middle thread
    edited = [replace(m, text=f"{m.text} roster") if m is target else m for m in units]
    edited_threads = topics._threads(*_topic_input(edited))
    before, after = Similarity(units, block=BLOCK), Similarity(edited, block=BLOCK)
    # a memo a run (one fingerprints a unit once a run, by its id)
    keys = topics._checkpoint_keys(threads, before, Memo(tenant_id="t"), EVERY)
    edited_keys = topics._checkpoint_keys(edited_threads, after, Memo(tenant_id="t"), EVERY)
    assert sorted(keys) == sorted(edited_keys)

    def position(ts: list[list[Message]]) -> int:
        return next(k for k, t in enumerate(ts) if any(m.unit_id == target.unit_id for m in t))

    block = before.block_of(target.unit_id)
    reads = next(
        k
        for k, t in enumerate(threads)
        if any((before.block_of(m.unit_id) or 0) >= (block or 0) for m in t)
    )
    last = max(position(threads), position(edited_threads))
    assert reads >= EVERY and last < max(keys)  # checkpoints on both sides
    assert all(keys[k] == edited_keys[k] for k in keys if k <= reads)
    assert all(keys[k] != edited_keys[k] for k in keys if k > last)


def test_the_step_leaves_the_garbage_collector_as_it_found_it(
    incremental: tuple[Path, Settings],
) -> None:
    """The step pauses the cyclic collector while it groups (see ``_collector_paused``), and
    gives it back as it was, on or off."""
    _, settings = incremental
    assert gc.isenabled()
    assert link(settings).passed
    assert gc.isenabled()
    gc.disable()
    try:
        assert link(settings).passed
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_step_leaves_no_cycle_holding_what_it_read(
    incremental: tuple[Path, Settings],
) -> None:
    """What the step made is freed as it returns, not by a later pass of the cyclic collector
    (which it pauses): a cycle through its records would hold every unit and message until
    then, and that pass costs a tenth of a one-message run at 50,000 messages."""
    _, settings = incremental
    assert link(settings).passed  # the next run carries its groups (the settled path)
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        again = link(settings)
        gc.collect()
        held = [o for o in gc.garbage if isinstance(o, (Message, Unit))]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert again.passed and again.carried > 0
    assert held == []


# ------------------------------------------- a long stream, step by step, against full runs
LONG = TOPIC_BLOCK + 600  # two TF-IDF blocks; each of the three channels past its first 256


def _long_records(source: Path) -> list[dict[str, Any]]:
    return lines(source / "chat.jsonl")


def _long_write(source: Path, records: list[dict[str, Any]]) -> None:
    write(source / "chat.jsonl", records)


def _at_time(records: list[dict[str, Any]], k: int) -> dict[str, Any]:
    """The ``k``-th record in time order."""
    return sorted(records, key=lambda r: (r["timestamp"], r["id"]))[k]


def _after(record: dict[str, Any], seconds: float) -> str:
    """``record``'s time and ``seconds`` more, as the stream writes times."""
    return (
        dt.datetime.fromisoformat(record["timestamp"]) + dt.timedelta(seconds=seconds)
    ).isoformat()


def _long_append(source: Path) -> None:
    records = _long_records(source)
    last = _at_time(records, -1)
    new = dict(last, id="x-append", text="does anyone know where the van keys are?")
    new["timestamp"] = _after(last, 60)
    new.pop("reply_to", None)
    _long_write(source, [*records, new])


def _long_edit_second_block(source: Path) -> None:
    records = _long_records(source)
    target = _at_time(records, TOPIC_BLOCK + 200)["id"]
    _long_write(
        source,
        [dict(r, text="roster swap sunday night, who can cover?") if r["id"] == target else r
         for r in records],
    )  # fmt: skip


def _long_delete_second_block(source: Path) -> None:
    records = _long_records(source)
    target = _at_time(records, TOPIC_BLOCK + 100)["id"]
    _long_write(source, [r for r in records if r["id"] != target])


def _long_late(source: Path) -> None:
    """A message written in the second block's time, arriving only now (at the file's end)."""
    records = _long_records(source)
    then = _at_time(records, TOPIC_BLOCK + 300)
    new = dict(then, id="x-late", author="Priya", text="mikeb: chemist has the webster pack")
    new["timestamp"] = _after(then, 1)
    new.pop("reply_to", None)
    _long_write(source, [*records, new])


def _long_reply_far_back(source: Path) -> None:
    """A new message replying to one some 1,500 messages back."""
    records = _long_records(source)
    old, last = _at_time(records, len(records) - 1500), _at_time(records, -1)
    new = dict(last, id="x-reply", author="Grace F", text="sorted now, the plumber came")
    new["timestamp"] = _after(last, 120)
    new["reply_to"] = old["id"]
    _long_write(source, [*records, new])


def _long_append_days_later(source: Path) -> None:
    """A message nine days after the newest: "now" moves, taking the groups before it past
    their validation pass (48 hours) and the conversations past a week (no longer active)."""
    records = _long_records(source)
    last = _at_time(records, -1)
    new = dict(last, id="x-later", text="back from leave, anything I missed?")
    new["timestamp"] = _after(last, 9 * 24 * 3600)
    new.pop("reply_to", None)
    _long_write(source, [*records, new])


def _long_edit_first_block(source: Path) -> None:
    """An edit in the first block: the second block's weights change with it."""
    records = _long_records(source)
    target = _at_time(records, 100)["id"]
    _long_write(
        source,
        [dict(r, text="lunch menu: roast pumpkin") if r["id"] == target else r for r in records],
    )


LONG_CHANGES: list[Callable[[Path], None]] = [
    _long_append,
    _long_edit_second_block,
    _long_delete_second_block,
    _long_late,
    _long_reply_far_back,
    _long_append_days_later,
    _long_edit_first_block,
]


def _long_linked(root: Path) -> tuple[Path, Settings]:
    """The long stream linked once in a home under ``root``: its source folder and settings."""
    source = root / "source"
    source.mkdir()
    shutil.copy(SAMPLE / "people.yaml", source)
    write_jsonl(stream(LONG, channels=3, seed=11), source / "chat.jsonl")
    settings = configure(root, source)
    assert link(settings).passed
    return source, settings


@pytest.fixture(scope="module")
def long_incremental(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Settings]:
    return _long_linked(tmp_path_factory.mktemp("long"))


@pytest.mark.parametrize("change", LONG_CHANGES, ids=lambda c: c.__name__.removeprefix("_long_"))
def test_a_long_stream_from_the_last_run_gives_what_a_full_run_gives(
    long_incremental: tuple[Path, Settings], change: Callable[[Path], None], tmp_path: Path
) -> None:
    """Past the first TF-IDF block and each channel's first messages (where a run re-links
    from the changed message and weighs by the block before), the step from its last run
    leaves the partitions a full run leaves, after each change in turn: the groups, members,
    identities, mentions and each message's conversation link."""
    source, settings = long_incremental  # the changes pile up, in order, on one home
    change(source)
    again = link(settings)
    assert again.passed and again.computed > 0
    if change is _long_edit_first_block:  # both blocks' vectors move: most computed again
        assert again.computed > again.reused
    elif change is _long_append_days_later:  # and every group whose timing moved
        assert again.reused > 2 * again.computed
    else:  # only what reads the changed unit
        assert again.reused > 10 * again.computed
    if change is _long_edit_first_block:  # every unit's weighing moved: none settles
        assert again.carried == 0
    elif change is _long_append_days_later:  # the groups whose timing moved do not settle
        assert 0 < again.carried < again.groups - 50
    else:  # the rest settled: neither described nor laid out again
        assert again.carried > 0.9 * again.groups
    if change is _long_edit_first_block:  # every unit weighed anew: every question read
        assert again.questions_unread == 0
    else:  # new units, one edited (where it stood and where it stands) or removed (its kept
        # results went with it): the questions out of their reach keep their answers unread
        assert again.questions_unread > 0
    fresh_source = tmp_path / "source"
    shutil.copytree(source, fresh_source)
    fresh = configure(tmp_path, fresh_source)
    whole = link(fresh)
    assert whole.reused == 0 and whole.groups == again.groups
    assert tables(settings) == tables(fresh)
    links = [Home(s).warehouse.read(LINKS, (COLLECTION,)) for s in (settings, fresh)]
    assert links[0] is not None and links[1] is not None
    assert links[0].to_pylist() == links[1].to_pylist()


def _questions(settings: Settings) -> dict[str, list[str]]:
    """Each question of the home's ``qa_pair`` groups -> its members in order (question first,
    then its answer, if any)."""
    wh = Home(settings).warehouse
    groups, members = wh.read(GROUPS, (COLLECTION,)), wh.read(MEMBERS, (COLLECTION,))
    assert groups is not None and members is not None
    qa = set(groups.filter(pc.equal(groups["group_type"], "qa_pair"))["group_id"].to_pylist())
    held: dict[str, list[tuple[int, str]]] = {}
    for m in members.to_pylist():
        if m["group_id"] in qa:
            held.setdefault(m["group_id"], []).append((m["order"], m["unit_id"]))
    return {ids[0]: ids for ids in ([u for _, u in sorted(v)] for v in held.values())}


def _same_tables_as_a_full_run(source: Path, settings: Settings, root: Path) -> None:
    fresh_source = root / "source"
    shutil.copytree(source, fresh_source)
    fresh = configure(root, fresh_source)
    assert link(fresh).reused == 0
    assert tables(settings) == tables(fresh)


@pytest.fixture(scope="module")
def long_settled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The long stream linked, a message appended days later and linked again (the root of
    its source folder and home): one more message appended leaves most groups carried."""
    root = tmp_path_factory.mktemp("long-settled")
    source, settings = _long_linked(root)
    _long_append_days_later(source)
    assert link(settings).passed
    return root


@pytest.mark.parametrize("change", list(IDENTITY_CHANGES.values()), ids=list(IDENTITY_CHANGES))
def test_an_identity_change_with_a_message_appended_carries_no_group_as_it_was(
    long_settled: Path, tmp_path: Path, change: Callable[[Path, Settings], Settings]
) -> None:
    """Past the first TF-IDF block, where one message appended leaves most groups carried
    whole, a merge or a people file change in the same sync carries none of them with its
    old anchors: the step leaves what a full run on the same inputs leaves."""
    source, settings = _copy_home(long_settled, tmp_path / "long")
    settings = change(source, settings)
    _long_append(source)
    again = link(settings)
    assert again.passed and again.carried == 0
    fresh_source = tmp_path / "fresh" / "source"
    shutil.copytree(source, fresh_source)
    merges = {"merges": "merges.yaml"} if (source / "merges.yaml").exists() else {}
    fresh = configure(fresh_source.parent, fresh_source, **merges)
    if change is _merge_recorded:
        identity_store.record_merge(Home(fresh), "wattle", "mike-brennan", "sarah-jones")
    assert link(fresh).reused == 0
    assert tables(settings) == tables(fresh)


def _answer_to(question: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A message by someone else that answers ``question`` to its asker by name."""
    author = "Grace F" if question["author"] != "Grace F" else "Priya"
    asker = question["author"].split()[0]
    text = f"{asker}: yes, found them, they're in the office drawer"
    new = dict(question, author=author, text=text, **fields)
    return {k: v for k, v in new.items() if k != "reply_to" or "reply_to" in fields}


def test_a_new_message_in_an_open_questions_window_has_it_read_again(tmp_path: Path) -> None:
    """A question is kept unread only while no new unit lies in its window: a message
    answering the newest open question, a minute after the newest unit, is read for the
    questions whose window it is in and becomes an answer, as in a full run; the questions out
    of its reach keep their scored answers unread."""
    source, settings = _long_linked(tmp_path)
    records = _long_records(source)
    by_id = {r["id"]: r for r in records}
    newest = _at_time(records, -1)
    open_ones = [ids[0] for ids in _questions(settings).values() if len(ids) == 1]
    asked = max((by_id[q] for q in open_ones), key=lambda r: (r["timestamp"], r["id"]))
    new = _answer_to(asked, id="x-answer", timestamp=_after(newest, 60))
    _long_write(source, [*records, new])
    again = link(settings)
    assert again.passed and again.questions_unread > 0
    assert again.questions_unread < again.by_type["qa_pair"]
    assert "x-answer" in {ids[1] for ids in _questions(settings).values() if len(ids) > 1}
    _same_tables_as_a_full_run(source, settings, tmp_path / "fresh")


def test_an_explicit_reply_to_an_old_question_has_it_read_again(tmp_path: Path) -> None:
    """A reply to a question asked days before the newest unit (far out of any window) makes
    that question read again: the reply is its answer, as in a full run."""
    source, settings = _long_linked(tmp_path)
    records = _long_records(source)
    by_id = {r["id"]: r for r in records}
    newest = _at_time(records, -1)
    end = dt.datetime.fromisoformat(newest["timestamp"])
    old = [
        by_id[ids[0]]
        for ids in _questions(settings).values()
        if len(ids) == 1
        and end - dt.datetime.fromisoformat(by_id[ids[0]]["timestamp"]) > dt.timedelta(days=4)
    ]
    asked = max(old, key=lambda r: (r["timestamp"], r["id"]))
    new = _answer_to(asked, id="x-reply", timestamp=_after(newest, 60), reply_to=asked["id"])
    _long_write(source, [*records, new])
    again = link(settings)
    assert again.passed and again.questions_unread > 0
    assert _questions(settings)[asked["id"]] == [asked["id"], "x-reply"]
    _same_tables_as_a_full_run(source, settings, tmp_path / "fresh")


def test_an_answer_edited_away_has_its_question_read_again(tmp_path: Path) -> None:
    """An edit reaches the questions both where the unit stands now and where it stood: an
    answer moved to another channel at another place (out of its question's reach) leaves
    the question read again and answered as a full run answers it, while the questions out
    of both reaches keep their scored answers unread."""
    source, settings = _long_linked(tmp_path)
    records = _long_records(source)
    by_id = {r["id"]: r for r in records}
    second_block = {r["id"] for r in sorted(records, key=lambda r: (r["timestamp"], r["id"]))[
        TOPIC_BLOCK:
    ]}  # fmt: skip
    answered = [
        ids
        for ids in _questions(settings).values()
        if len(ids) == 2 and set(ids) <= second_block and not by_id[ids[1]].get("reply_to")
    ]
    question, answer = answered[0]
    moved = dict(by_id[answer], channel="#elsewhere", location="Elsewhere")
    _long_write(source, [moved if r["id"] == answer else r for r in records])
    again = link(settings)
    assert again.passed and 0 < again.questions_unread < again.by_type["qa_pair"]
    assert _questions(settings)[question][1:] != [answer]
    _same_tables_as_a_full_run(source, settings, tmp_path / "fresh")


def test_a_unit_arriving_in_the_first_block_has_every_question_read_again(
    tmp_path: Path,
) -> None:
    """A message arriving late into the first TF-IDF block changes what every unit is
    weighed by (the first block weighs itself, the second by the first): no question keeps
    its scored answers unread, and the groups are a full run's."""
    source, settings = _long_linked(tmp_path)
    records = _long_records(source)
    then = _at_time(records, 100)
    new = dict(then, id="x-early", author="Priya", text="mikeb: chemist has the webster pack")
    new["timestamp"] = _after(then, 1)
    new.pop("reply_to", None)
    _long_write(source, [*records, new])
    again = link(settings)
    assert again.passed and again.questions_unread == 0
    _same_tables_as_a_full_run(source, settings, tmp_path / "fresh")


def _linked_sample(root: Path) -> tuple[Path, Settings, pa.Table]:
    """The sample linked once in a home under ``root``: its source folder, settings and kept
    results."""
    source = root / "source"
    shutil.copytree(SAMPLE, source)
    settings = configure(root, source)
    assert link(settings).passed
    kept = Home(settings).warehouse.read(MEMO, (COLLECTION,))
    assert kept is not None
    return source, settings, kept


def test_a_removed_unit_takes_with_it_the_kept_results_that_quote_it(tmp_path: Path) -> None:
    """Removing a message drops at once the kept results that read it (a summary quoting it),
    keeps the others, and the next run computes what it needs again: what a full run gives."""
    source, settings, before = _linked_sample(tmp_path)
    wh = Home(settings).warehouse
    # a chat message some kept summary quotes
    chat = source / "chat-picton-sil.jsonl"
    records = lines(chat)
    values = "\n".join(before["value"].to_pylist())
    quoted = next(r for r in records if len(r["text"]) > 40 and r["text"][:40] in values)
    write(chat, [r for r in records if r["id"] != quoted["id"]])
    home = Home(settings)
    prints = wh.read(PRINTS, (COLLECTION,))
    assert prints is not None and quoted["id"] in prints["unit_id"].to_pylist()
    assert steps.source_manifest.run(home, COLLECTION).receipt is not None
    prints = wh.read(PRINTS, (COLLECTION,))  # what the run hashed of it goes with it
    assert prints is not None and quoted["id"] not in prints["unit_id"].to_pylist()
    after = wh.read(MEMO, (COLLECTION,))
    assert after is not None
    assert quoted["text"][:40] not in "\n".join(after["value"].to_pylist())
    assert all(quoted["id"] not in (units or ()) for units in after["units"].to_pylist())
    assert 0 < after.num_rows < before.num_rows
    dropped = before.num_rows - after.num_rows
    assert dropped < before.num_rows // 4  # the entries that read it, not all
    steps.parsed_blocks.run(home, COLLECTION)
    again = steps.linked_groups.run(home, COLLECTION)
    assert again.passed  # (the sample is one TF-IDF block: most results are computed again)
    fresh_source = tmp_path / "fresh" / "source"
    shutil.copytree(source, fresh_source)
    fresh = configure(tmp_path / "fresh", fresh_source)
    assert link(fresh).passed
    assert tables(settings) == tables(fresh)


def _checkpoints(table: pa.Table | None) -> list[dict[str, Any]]:
    """The kept entries of null units (the topic clustering's checkpoints)."""
    assert table is not None
    return [r for r in table.to_pylist() if r["units"] is None]


def test_removing_a_unit_newer_than_a_checkpoint_keeps_the_checkpoint(tmp_path: Path) -> None:
    """A topic checkpoint reads every unit before it, and names the newest time it read: a
    removed unit newer than that leaves it kept, and the next run resumes from it (what a
    full run gives); a removed unit no newer drops it, as it may hold the unit's words."""
    source, settings = _long_linked(tmp_path)
    wh = Home(settings).warehouse
    before = _checkpoints(wh.read(MEMO, (COLLECTION,)))
    assert before and all(r["until"] is not None for r in before)
    records = _long_records(source)
    newest = _at_time(records, -1)
    _long_write(source, [r for r in records if r["id"] != newest["id"]])
    assert steps.source_manifest.run(Home(settings), COLLECTION).receipt is not None
    gone_at = dt.datetime.fromisoformat(newest["timestamp"]).timestamp()
    kept = _checkpoints(wh.read(MEMO, (COLLECTION,)))
    assert kept and all(r["until"] < gone_at for r in kept)
    assert {r["key"] for r in kept} <= {r["key"] for r in before}
    steps.parsed_blocks.run(Home(settings), COLLECTION)
    again = steps.linked_groups.run(Home(settings), COLLECTION)
    assert again.passed
    resumed = {r["key"] for r in _checkpoints(wh.read(MEMO, (COLLECTION,)))}
    assert resumed & {r["key"] for r in kept}  # the clustering went on from one of them
    fresh_source = tmp_path / "fresh" / "source"
    shutil.copytree(source, fresh_source)
    fresh = configure(tmp_path / "fresh", fresh_source)
    assert link(fresh).passed
    assert tables(settings) == tables(fresh)
    # the oldest unit: every checkpoint read it
    records = _long_records(source)
    _long_write(source, [r for r in records if r["id"] != _at_time(records, 0)["id"]])
    assert steps.source_manifest.run(Home(settings), COLLECTION).receipt is not None
    assert _checkpoints(wh.read(MEMO, (COLLECTION,))) == []


def test_kept_results_written_before_they_named_their_units_are_read_and_kept(
    tmp_path: Path,
) -> None:
    """A home whose kept results predate their ``units`` column: the doctor finds nothing
    wrong, the next run reuses them (each as read from any unit), and removing a message then
    drops every one of those, as removing any message did when they were written."""
    source, settings, written = _linked_sample(tmp_path)
    wh = Home(settings).warehouse
    assert written["units"].null_count < written.num_rows
    wh.write(MEMO, (COLLECTION,), written.drop_columns(["units"]))
    assert not [f for f in doctor.check(settings) if f.name.startswith(MEMO)]
    again = link(settings)
    assert again.passed and again.computed == 0 and again.reused > 0
    upgraded = wh.read(MEMO, (COLLECTION,))
    assert upgraded is not None and upgraded["units"].null_count == upgraded.num_rows
    chat = source / "chat-picton-sil.jsonl"
    write(chat, lines(chat)[1:])
    assert steps.source_manifest.run(Home(settings), COLLECTION).receipt is not None
    emptied = wh.read(MEMO, (COLLECTION,))
    assert emptied is not None and emptied.num_rows == 0


@pytest.mark.parametrize("change", list(IDENTITY_CHANGES.values()), ids=list(IDENTITY_CHANGES))
def test_an_identity_change_replaces_the_rows_of_the_groups_it_reanchors(
    change: Callable[[Path, Settings], Settings], tmp_path: Path
) -> None:
    """After syncs that left every group settled, a merge or a people file change and nothing
    else leaves in the generation the group rows a fresh build makes: the rows of the groups
    that anchored the person merged replaced, none stale, none twice."""
    source = tmp_path / "a" / "source"
    shutil.copytree(SAMPLE, source)
    settings = configure(tmp_path / "a", source)
    sync(settings, "first")
    sync(settings, "settled")
    before = group_rows(settings)
    settings = change(source, settings)
    sync(settings, "second")
    fresh_source = tmp_path / "b" / "source"
    shutil.copytree(source, fresh_source)
    merges = {"merges": "merges.yaml"} if (source / "merges.yaml").exists() else {}
    fresh = configure(tmp_path / "b", fresh_source, **merges)
    if change is _merge_recorded:
        identity_store.record_merge(Home(fresh), "wattle", "mike-brennan", "sarah-jones")
    sync(fresh, "fresh")
    after, whole = group_rows(settings), group_rows(fresh)
    assert len({r["doc_id"] for r in after}) == len(after)  # one row a group
    assert after == whole
    mike = identity_id("wattle", "mike-brennan")
    anchors = [set(json.loads(r["metadata"])["identity_anchors"]) for r in before]
    then = [set(json.loads(r["metadata"])["identity_anchors"]) for r in after]
    if change is _alias_removed:  # his number is someone found in the messages now
        assert set().union(*then) - set().union(*anchors)
        return
    anchored = [r for r, a in zip(before, anchors, strict=True) if mike in a]
    assert anchored and not any(r in after for r in anchored)
    assert not any(mike in a for a in then)  # merged: no row anchors him any more
