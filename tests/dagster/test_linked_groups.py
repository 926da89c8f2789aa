"""The sample messages collections through the real graph: their units are linked into groups,
the groups are rows of the generation (``kind: group``) beside their units, scoped like them,
and a deleted unit leaves its groups in every generation."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pyarrow.compute as pc
import pytest
import yaml
from click.testing import CliRunner

from assets.graph import PacedProgress
from corpus_index.cli import main
from corpus_index.config import Settings
from corpus_index.conversation_timeline import collection_timeline
from corpus_index.eligibility import Principal, eligibility
from corpus_index.group_records import GROUP_SCHEMA, MEMBER_SCHEMA
from corpus_index.home import Home
from tests.dagster.harness import Graph, check_outcomes, metadata

SAMPLE = Path(__file__).resolve().parents[2] / "sample_corpus" / "messages"
# the Christmas meal-planning thread of truth.yaml ('#picton-sil/xmas')
CHRISTMAS = {f"wg-dc-0{n}" for n in (22, 23, 24, 25, 27, 28, 30, 31, 32)}
PUMPKIN = "wg-dc-028"  # "yes pumpkin please"
# the house meeting moved to Thursdays (truth.yaml's decision 'house-meeting-day')
HOUSE_MEETING = ("wg-dc-099", "wg-dc-100", "wg-dc-101", "wg-dc-102")


def _config(
    root: Path, *, tenants: tuple[str, ...] = ("wattle", "bluegum"), alt: bool = False
) -> Settings:
    """The sample streams (copied, so a test may delete a record), one hash profile (and a
    second, ``alt``, when asked)."""
    for tenant in tenants:
        shutil.copytree(SAMPLE / tenant, root / tenant)
    common = {"kind": "messages", "tier": "restricted", "namespace": "messages"}
    common["timezone"] = "Australia/Sydney"  # as corpus.yaml counts the sample's days
    collections = {
        "wattle-messages": {
            **common,
            "path": "wattle",
            "tenant": "wattle",
            "acl_groups": ["wattle-staff", "wattle-managers"],
            "people": "people.yaml",
        },
        "bluegum-messages": {
            **common,
            "path": "bluegum",
            "tenant": "bluegum",
            "acl_groups": ["bluegum-staff", "bluegum-coordinators"],
            "people": "people.yaml",
        },
    }
    profiles = {"hash": {"embedder": "hash:v1-64", "namespace": "messages"}}
    if alt:
        profiles["alt"] = {"embedder": "hash:v1-32", "namespace": "messages"}
    config = root / "corpus.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "collections": {k: v for k, v in collections.items() if v["path"] in tenants},
                "profiles": profiles,
                "namespaces": {"messages": {"eval_gate": "off"}},
            }
        )
    )
    return Settings(config_path=config, home=root / "home")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Graph:
    g = Graph(_config(tmp_path_factory.mktemp("linked")))
    g.build_all()
    return g


def _groups(home: Home, collection: str) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    groups = home.read("linked_groups", (collection,), GROUP_SCHEMA).to_pylist()
    members = home.read("group_members", (collection,), MEMBER_SCHEMA).to_pylist()
    return groups, members


def _group_rows(home: Home, where: str | None = None) -> list[dict[str, object]]:
    gen = home.registry.live_generation("hash")
    assert gen is not None
    query = home.store.table(gen).search()
    if where:
        query = query.where(where, prefilter=True)
    rows: list[dict[str, object]] = query.limit(100_000).to_list()
    return [r for r in rows if r["kind"] == "group"]


def test_groups_are_written_and_indexed_beside_their_units(built: Graph) -> None:
    home = Home(built.settings)
    r = built.materialize(["linked_groups"], "wattle-messages")
    assert r.success and all(check_outcomes(r).values())
    assert set(check_outcomes(r)) == {
        "group_members_exist_and_are_live",
        "groups_stay_within_one_tenant",
        "group_acl_within_members",
    }
    md = metadata(r, "linked_groups")
    assert md["units_as_they_were"] == md["units"]  # linked by the build: nothing hashed again
    groups, members = _groups(home, "wattle-messages")
    assert md["groups"] == len(groups) > 10 and md["members"] == len(members)
    # cut to the hash embedder's stand-in for the model we ship (tests/test_input_limits.py)
    assert md["group_input_limit"] == "256 tokens of hash:v1-64, counted by 4 characters a token"
    assert md["group_inputs_cut"] == sum(g["input_cut"] for g in groups) > 0
    # nor a question's candidates read again: its ingest's arrivals were seen by the sync, so
    # they wake nothing again, and no change reaches any question
    assert md["questions_unread"] == sum(g["group_type"] == "qa_pair" for g in groups) > 5
    # "yes pumpkin please" is in one conversation, of the Christmas meal thread only
    christmas = _conversation_of(groups, members, PUMPKIN)
    gid = christmas["group_id"]
    mine = {m["unit_id"] for m in members if m["group_id"] == gid}
    assert PUMPKIN in mine and mine <= CHRISTMAS
    # a group's scope is its members': one tenant, the intersection of their ACL groups
    assert {g["tenant_id"] for g in groups} == {"wattle"}
    assert christmas["acl_groups"] == ["wattle-managers", "wattle-staff"]
    # ... and it is a row of the generation, marked kind=group, under group-v1
    rows = {r["doc_id"]: r for r in _group_rows(home)}
    assert gid in rows
    row = rows[gid]
    assert row["input_format"] == "group-v1" and row["source_type"] == "conversation"
    assert "yes pumpkin please" in str(row["text"]) and "\ndates: 10 Dec" in str(row["text"])
    assert json.loads(str(row["metadata"]))["member_count"] == len(mine)
    indexed = {g["group_id"] for g in groups if g["acl_groups"]}
    tenants = {str(r["doc_id"]): r["tenant_id"] for r in rows.values()}
    assert indexed <= set(tenants)
    assert {tenants[g] for g in indexed} == {"wattle"}
    # decisions and topics are groups like the others, indexed under their type
    for kind in ("decision_thread", "topic_cluster"):
        ids = {g["group_id"] for g in groups if g["group_type"] == kind}
        assert ids and ids <= set(rows) and md["groups_by_type"][kind] == len(ids)
        assert {rows[i]["source_type"] for i in ids} == {kind}


def _conversation_of(
    groups: list[dict[str, object]], members: list[dict[str, object]], unit: str
) -> dict[str, object]:
    with_unit = {m["group_id"] for m in members if m["unit_id"] == unit}
    found = [g for g in groups if g["group_id"] in with_unit and g["group_type"] == "conversation"]
    assert len(found) == 1
    return found[0]


def test_the_christmas_thread_is_one_conversation(built: Graph) -> None:
    """All nine, "Amelia can't do pork ..." (wg-dc-024) among them: its author back after six
    days reads to the link model as someone arriving, but it names one of the alternatives the
    thread's question offered ("Chicken or pork?"), which is how such a question is answered
    (corpus_index/linked/responses.py)."""
    groups, members = _groups(Home(built.settings), "wattle-messages")
    gid = _conversation_of(groups, members, PUMPKIN)["group_id"]
    assert {m["unit_id"] for m in members if m["group_id"] == gid} == CHRISTMAS


def test_the_written_groups_link_the_samples_answers_and_incidents(built: Graph) -> None:
    """The issue's two figures on what the graph wrote (not only on the library's groups):
    at least 80% of the sample's answered questions linked to their answer, none of the
    unanswered ones, and every incident with exactly its shift notes, complete."""
    home = Home(built.settings)
    truth = yaml.safe_load((SAMPLE / "truth.yaml").read_text(encoding="utf-8"))["tenants"]
    linked = total = 0
    for tenant in ("wattle", "bluegum"):
        groups, members = _groups(home, f"{tenant}-messages")
        first = {m["group_id"]: m["unit_id"] for m in members if m["order"] == 1}
        held: dict[object, set[object]] = {}
        for m in members:
            held.setdefault(m["group_id"], set()).add(m["unit_id"])
        answer_of = {
            first[g["group_id"]]: g["resolved_by_unit_id"]
            for g in groups
            if g["group_type"] == "qa_pair"
        }
        for q in truth[tenant]["answered_questions"]:
            total += 1
            linked += answer_of.get(q["question"]) in q["answers"]
        for q in truth[tenant]["unanswered_questions"]:
            assert answer_of.get(q) is None, q
        incidents = {
            first[g["group_id"]]: g for g in groups if g["group_type"] == "incident_context"
        }
        for incident in truth[tenant]["incidents"]:
            ctx = incidents[incident["incident"]]
            mine = held[ctx["group_id"]]
            # a shift note's id holds "-sn-" in both tenants' files
            assert {u for u in mine if "-sn-" in str(u)} == set(incident["shift_notes"])
            assert mine - {incident["incident"]} <= {*incident["shift_notes"], *incident["related"]}
            assert ctx["completeness"] == "complete", incident["key"]
    assert total == 41 and linked / total >= 0.8, f"{linked}/{total}"


def test_the_run_log_tells_what_the_grouping_did(built: Graph) -> None:
    """What ``linked_groups`` has done reaches each run's log (the UI's run view): every run
    of the step ends with its checks, once; the sample's runs are shorter than a second, so
    that line is all they log (see the pacing test below)."""
    runs = {
        run.run_id: [
            e.user_message
            for e in built.instance.all_logs(run.run_id)
            if e.step_key == "linked_groups" and not e.is_dagster_event  # the step's own lines
        ]
        for run in built.instance.get_runs()
    }
    said = [lines for lines in runs.values() if lines]
    assert len(said) >= 2  # a run for each tenant's collection at least
    for lines in said:
        assert sum(m.startswith("checks passed: ") for m in lines) == 1
        assert lines[-1].startswith("checks passed: ")


def test_progress_is_logged_at_most_once_a_second_and_the_last_line_always() -> None:
    """Each progress line is an event in the run's storage: a long step logs one a second at
    most (the latest when its turn comes), a short one only its last."""
    now = [0.0]
    logged: list[str] = []
    paced = PacedProgress(logged.append, every_s=1.0, clock=lambda: now[0])
    for t, line in [(0.2, "read"), (0.5, "identities"), (1.1, "conversations"), (1.3, "questions")]:
        now[0] = t
        paced(line)
    assert logged == ["conversations"]  # held: read, identities (under a second), questions
    now[0] = 2.4
    paced("incidents")
    paced("checks passed")
    assert logged == ["conversations", "incidents"]
    paced.flush()
    paced.flush()
    assert logged == ["conversations", "incidents", "checks passed"]

    short: list[str] = []
    quick = PacedProgress(short.append, every_s=1.0, clock=lambda: 0.0)
    for line in ("read", "conversations", "checks passed"):
        quick(line)
    quick.flush()
    assert short == ["checks passed"]


def test_the_timeline_shows_the_christmas_thread_beside_the_others(built: Graph) -> None:
    """Materialized on demand (no sync draws it): a picture of a channel's conversations in
    the run's metadata and in the home's reports; the Christmas thread is one lane of nine
    among the conversations running at the same time in its channel. A channel that does not
    exist fails the run, naming the channel and the ones that do."""
    home = Home(built.settings)
    busiest = built.materialize(["conversation_timeline"], "wattle-messages")
    assert busiest.success
    shown = metadata(busiest, "conversation_timeline")
    picture = str(shown["picture"])
    assert picture.startswith("![") and "data:image/png;base64," in picture
    png = base64.b64decode(picture.split("base64,", 1)[1].rstrip(")"))
    assert png.startswith(b"\x89PNG") and Path(str(shown["path"])).read_bytes() == png
    assert int(str(shown["conversations"])) >= 2 and 0 < int(str(shown["messages"])) <= 150

    groups, members = _groups(home, "wattle-messages")
    gid = str(_conversation_of(groups, members, PUMPKIN)["group_id"])
    channel = "discord_chat/#picton-sil"
    xmas = built.materialize(
        ["conversation_timeline"],
        "wattle-messages",
        {"conversation_timeline": {"channel": channel}},
    )
    assert xmas.success and metadata(xmas, "conversation_timeline")["channel"] == channel
    t = collection_timeline(home.warehouse, "wattle-messages", channel=channel)
    assert t is not None and f"9 messages · {gid[:12]}" in [lane.label for lane in t.lanes]
    assert sum(1 for lane in t.lanes if not lane.alone) >= 5  # others at the same time

    base = ["--config", str(built.settings.config_path), "--home", str(built.settings.home)]
    cli = CliRunner()
    out = cli.invoke(
        main, [*base, "conversations", "wattle-messages", "--channel", channel, "--json"]
    )
    assert out.exit_code == 0, out.output
    lanes = json.loads(out.output)["lanes"]
    assert [lane["label"] for lane in lanes] == [lane.label for lane in t.lanes]
    text = cli.invoke(main, [*base, "conversations", "wattle-messages", "--channel", channel])
    assert text.exit_code == 0 and text.output.startswith(f"{channel} (wattle): ")
    (xmas_line,) = [x for x in text.output.splitlines() if x.startswith(f"9 messages · {gid[:12]}")]
    assert "o" in xmas_line.split("|")[1]
    drawn = built.settings.home.parent / "xmas.png"
    args = [*base, "conversations", "wattle-messages", "--channel", channel, "--picture"]
    pictured = cli.invoke(main, [*args, str(drawn)])
    assert pictured.exit_code == 0 and drawn.read_bytes().startswith(b"\x89PNG")
    # a picture that cannot be written (a file where its folder should be) is named, exit 2
    unwritable = cli.invoke(main, [*args, str(drawn / "xmas.png")])
    assert unwritable.exit_code == 2, unwritable.output
    assert f"error: cannot write the picture to {drawn / 'xmas.png'} (" in unwritable.output
    for bad, why in (
        (["nowhere-messages"], "no collection 'nowhere-messages'"),
        (["wattle-messages", "--channel", "#nowhere"], "'#nowhere' has no messages"),
        (["wattle-messages", "--messages", "0"], "messages must be from 1"),
    ):
        refused = cli.invoke(main, [*base, "conversations", *bad])
        assert refused.exit_code == 2 and why in refused.output, refused.output
    # a collection configured but never synced has no links to draw: a failure, not a picture
    unsynced = cli.invoke(main, ["--config", str(built.settings.config_path), "--home",
                                 str(built.settings.home.parent / "empty-home"), "conversations",
                                 "wattle-messages"])  # fmt: skip
    assert unsynced.exit_code == 1 and "not synced yet" in unsynced.output, unsynced.output

    wrong = built.materialize(
        ["conversation_timeline"],
        "wattle-messages",
        {"conversation_timeline": {"channel": "#nowhere"}},
    )
    assert not wrong.success
    failure = next(e for e in wrong.all_events if e.event_type_value == "STEP_FAILURE")
    assert "'#nowhere' has no messages" in str(failure.event_specific_data)
    assert channel in str(failure.event_specific_data)


def test_a_group_is_hidden_from_whoever_may_not_see_a_member(built: Graph) -> None:
    home = Home(built.settings)
    groups, members = _groups(home, "wattle-messages")
    narrowed = {
        g["group_id"] for g in groups if g["acl_groups"] == ["wattle-managers"]
    }  # a member narrowed to managers makes its group managers-only
    assert narrowed
    staff = Principal("wattle", ("wattle-staff",))
    managers = Principal("wattle", ("wattle-managers",))
    collections = ["wattle-messages", "bluegum-messages"]
    seen_by_staff = {r["doc_id"] for r in _group_rows(home, eligibility(staff, collections))}
    seen_by_managers = {r["doc_id"] for r in _group_rows(home, eligibility(managers, collections))}
    assert narrowed <= seen_by_managers
    assert not narrowed & seen_by_staff
    assert seen_by_staff  # the rest of the groups are theirs to see
    other = Principal("bluegum", ("wattle-staff", "wattle-managers"))
    assert not {r["doc_id"] for r in _group_rows(home, eligibility(other, collections))} & (
        seen_by_managers
    )


def test_generation_rows_reconcile_with_unit_and_group_inputs(built: Graph) -> None:
    r = built.generation("hash")
    checks = check_outcomes(r)
    assert r.success and checks["row_counts_reconcile"] and checks["no_orphan_vectors"]
    home = Home(built.settings)
    inputs = home.read("embedding_inputs", ("wattle-messages",))
    groups = inputs.filter(pc.equal(inputs["input_format"], "group-v1"))
    assert groups.num_rows == len(
        [g for g in _groups(home, "wattle-messages")[0] if g["acl_groups"]]
    )


def test_deleted_units_leave_their_groups_in_every_generation(tmp_path: Path) -> None:
    settings = _config(tmp_path, tenants=("wattle",), alt=True)
    g = Graph(settings)
    g.build_all()
    corpus = Home(settings)
    generations = corpus.registry.generations()
    assert len(generations) == 2
    groups, members = _groups(corpus, "wattle-messages")
    by_group: dict[object, list[str]] = {}
    for m in members:
        by_group.setdefault(m["group_id"], []).append(str(m["unit_id"]))
    # "yes pumpkin please", and the last message of the largest chat conversation
    pumpkin_group = _conversation_of(groups, members, PUMPKIN)["group_id"]
    largest = max(
        (gr for gr in groups if gr["group_type"] == "conversation"),
        key=lambda gr: (len(by_group[gr["group_id"]]), str(gr["group_id"])),
    )["group_id"]
    assert len(by_group[largest]) >= 4
    # a unit of the house meeting's discussion: its decision thread is grouped again
    typed = {gr["group_id"]: gr["group_type"] for gr in groups}
    decision = {i for i, ids in by_group.items() if typed[i] == "decision_thread"}
    (decided,) = [i for i in decision if tuple(by_group[i]) == HOUSE_MEETING]
    (topic,) = [i for i, ids in by_group.items() if typed[i] == "topic_cluster" and PUMPKIN in ids]
    gone = {PUMPKIN, by_group[largest][-1], HOUSE_MEETING[2]}
    old = {pumpkin_group, largest, decided, topic}
    for gid in old:
        assert {corpus.store.count(gen, f"doc_id = '{gid}'") for gen in generations} == {1}
    files = {
        u: next(f for f in (tmp_path / "wattle").glob("*.jsonl") if f'"{u}"' in f.read_text())
        for u in gone
    }
    for u, path in files.items():
        lines = path.read_text(encoding="utf-8").splitlines()
        path.write_text("\n".join(x for x in lines if f'"{u}"' not in x) + "\n", encoding="utf-8")

    r = g.ingest("wattle-messages")
    assert r.success and metadata(r, "source_manifest")["removed"] == len(gone) == 3
    units = {f"wattle-messages/{u}" for u in gone}
    # at once, before anything is embedded again: the units and their old groups leave both
    # generations
    for gen in generations:
        for unit in units:
            assert corpus.store.count(gen, f"source_id = '{unit}'") == 0
        for gid in old:
            assert corpus.store.count(gen, f"doc_id = '{gid}'") == 0
    for profile in ("hash", "alt"):
        r = g.embed(profile, "wattle-messages")
        assert r.success and all(check_outcomes(r).values())
        assert check_outcomes(r)["group_rows_have_groups"]
    groups, members = _groups(corpus, "wattle-messages")
    assert not gone & {str(m["unit_id"]) for m in members}
    links = corpus.warehouse.read("conversation_links", ("wattle-messages",))
    assert links is not None and not gone & set(links["unit_id"].to_pylist())  # nor their links
    # the largest conversation's other members are grouped again, under a new id, and that
    # group is embedded in both generations without the deleted words
    mates = set(by_group[largest]) - gone
    again = {m["group_id"] for m in members if m["unit_id"] in mates}
    assert again and not again & old
    # ... so are the decision thread (without the deleted reply) and the topic cluster
    now = {}
    for m in members:
        now.setdefault(m["group_id"], []).append(str(m["unit_id"]))
    kinds = {gr["group_id"]: gr["group_type"] for gr in groups}
    (thread,) = [
        i for i, ids in now.items() if kinds[i] == "decision_thread" and HOUSE_MEETING[0] in ids
    ]
    assert tuple(now[thread]) == HOUSE_MEETING[:2] + HOUSE_MEETING[3:] and thread not in old
    # the Christmas topic cluster, without "yes pumpkin please", is no longer one
    indexed = {gr["group_id"] for gr in groups if gr["acl_groups"]}
    clusters = {i for i in indexed if kinds[i] == "topic_cluster"}
    assert clusters and not clusters & old and not any(PUMPKIN in now[i] for i in clusters)
    for gen in generations:
        assert {corpus.store.count(gen, f"doc_id = '{i}'") for i in {thread, *clusters}} == {1}
    last = by_group[largest][-1]
    record = next(
        json.loads(x) for x in (SAMPLE / "wattle" / files[last].name).open() if f'"{last}"' in x
    )
    line = f"{record['author']}: {' '.join(record['text'].split())}"  # its line in group-v1
    for gen in generations:
        for gid in again:
            (row,) = corpus.store.table(gen).search().where(f"doc_id = '{gid}'").to_list()
            assert row["kind"] == "group" and line not in row["text"].split("\n")
    for unit in units:
        tomb = corpus.registry.tombstone(unit)
        assert tomb is not None
        receipt = json.loads(Path(tomb["receipt"]).read_text())
        assert receipt["source_ids"] == sorted(units)  # groups leave too; only units are tombstoned
        removed = {Path(a["location"]).parent.name for a in receipt["artifacts"]}
        assert {"linked_groups", "group_members", "embedding_inputs"} <= removed

    # the audit covers group rows: clean once compaction has rewritten the fragments
    cli = CliRunner()
    args = ["--config", str(settings.config_path), "--home", str(settings.home)]
    out = cli.invoke(main, [*args, "compact", "--json"])
    assert out.exit_code == 0, out.output
    for unit in units:
        out = cli.invoke(main, [*args, "audit-deletion", unit, "--json"])
        audit = json.loads(out.output)
        assert audit["clean"], audit["remaining"]
        assert audit["byte_scan"]["status"] == "done"
