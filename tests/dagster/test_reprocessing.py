"""Temporal re-processing through the real graph: the queue each ``linked_groups`` run keeps,
``corpus reprocess --now`` moving the clock over an unanswered question, a shift note that
arrives later waking its incident in a sync, and ``reprocess_job`` run in-process at a given
time. Small collections, a hash profile; time is moved, never slept."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from click.testing import CliRunner, Result

from assets import CorpusResource
from corpus_index import steps
from corpus_index.cli import main
from corpus_index.config import Settings
from corpus_index.deletion import audit_deletion
from corpus_index.gates import Gate
from corpus_index.group_records import GROUP_SCHEMA, MEMBER_SCHEMA
from corpus_index.home import Home
from corpus_index.linked.reprocess import DAY, HOUR
from corpus_index.reprocess_queue import Queued, read_queue
from corpus_index.steps import reprocess
from pipelines.reprocess import reprocess_schedule
from tests.corpusgen import write_home
from tests.dagster.harness import QUIET, Graph

ASKED = dt.datetime(2025, 12, 8, 9, 0, tzinfo=dt.UTC)
REPORT = (
    "People involved: John Pereira (participant). Staff present: Mike Brennan, Jane Okafor.\n"
    "What happened: John had a seizure in the lounge after dinner."
)


def record(uid: str, source: str, author: str, at: dt.datetime, text: str, **kw: str) -> str:
    channel = {"incident_report": "incident-portal", "shift_note": "shift-notes"}.get(
        source, "#picton-sil"
    )
    row = {
        "id": uid,
        "source": source,
        "channel": channel,
        "author": author,
        "timestamp": at.isoformat(),
        "location": "Picton SIL",
        "text": text,
        "recipients": [],
        "cc": [],
        **kw,
    }
    return json.dumps(row) + "\n"


def home_with(root: Path, files: dict[str, str]) -> Settings:
    """One messages collection (tenant wattle) holding ``files``, one hash profile."""
    data = root / "wattle"
    data.mkdir(parents=True)
    for name, text in files.items():
        (data / name).write_text(text)
    config = root / "corpus.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "collections": {
                    "wattle-messages": {
                        "kind": "messages",
                        "path": "wattle",
                        "tenant": "wattle",
                        "acl_groups": ["wattle-staff"],
                        "namespace": "messages",
                    }
                },
                "profiles": {"hash": {"embedder": "hash:v1-64", "namespace": "messages"}},
                "namespaces": {"messages": {"eval_gate": "off"}},
            }
        )
    )
    return Settings(config_path=config, home=root / "home")


def invoke(settings: Settings, *args: str) -> Result:
    """``corpus <args>`` on this home, in this process."""
    return CliRunner().invoke(
        main, ["--config", str(settings.config_path), "--home", str(settings.home), *args]
    )


def cli(settings: Settings, *args: str) -> dict[str, Any]:
    out = invoke(settings, *args)
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout) if "--json" in args else {}


def queued(settings: Settings, key: str) -> Queued | None:
    found = [
        q
        for q in read_queue(Home(settings).warehouse, "wattle-messages").items
        if q.item.key == key
    ]
    return found[0] if found else None


def group_of(settings: Settings, group_type: str, unit: str) -> dict[str, Any]:
    home = Home(settings)
    groups = home.read("linked_groups", ("wattle-messages",), GROUP_SCHEMA).to_pylist()
    members = home.read("group_members", ("wattle-messages",), MEMBER_SCHEMA).to_pylist()
    ids = {m["group_id"] for m in members if m["unit_id"] == unit}
    (found,) = [g for g in groups if g["group_id"] in ids and g["group_type"] == group_type]
    found["members"] = sorted(
        (m["order"], m["unit_id"]) for m in members if m["group_id"] == found["group_id"]
    )
    return found


def at(offset_s: float) -> str:
    return (ASKED + dt.timedelta(seconds=offset_s)).isoformat()


QUESTION = record(
    "q1", "discord_chat", "Jane O.", ASKED, "has anyone got a spare charger for the office?"
)


def test_an_unanswered_question_is_reprocessed_at_6h_24h_48h_and_7d_then_times_out(
    tmp_path: Path,
) -> None:
    """The clock moved over a week, through the re-processing step ``corpus reprocess`` and
    ``reprocess_job`` run (ingestion only: embedding is the next test's)."""
    settings = home_with(tmp_path, {"chat.jsonl": QUESTION})
    assert Graph(settings).ingest("wattle-messages").success
    item = queued(settings, "qa_pair:q1")
    assert item is not None and item.tenant_id == "wattle"
    assert (item.item.priority, item.item.attempts, item.item.last_reprocessed_at) == (8, 0, None)
    checks = []
    for offset in (5 * HOUR, 6 * HOUR, 7 * HOUR, 23 * HOUR, DAY, 47 * HOUR, 2 * DAY,
                   7 * DAY - HOUR, 7 * DAY, 8 * DAY):  # fmt: skip
        report = reprocess.run(Home(settings), ASKED.timestamp() + offset)
        if "qa_pair:q1" in [t["key"] for t in report.taken]:
            checks.append(offset)
            item = queued(settings, "qa_pair:q1")
            if offset < 7 * DAY:
                assert item is not None and item.item.attempts == len(checks)
                assert item.item.last_reprocessed_at == ASKED.timestamp() + offset
                assert report.timed_out == []
            else:
                assert item is None and report.timed_out == ["qa_pair:q1"]
    assert checks == [6 * HOUR, DAY, 2 * DAY, 7 * DAY]
    qa = group_of(settings, "qa_pair", "q1")
    assert (qa["resolution_status"], qa["reprocess_priority"]) == ("timeout", 0)


def test_a_run_whose_grouping_checks_fail_uses_up_no_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The 6 h check of a question whose re-linking fails its checks is taken again at the next
    run, and counted only then: an attempt is recorded by the run that writes the groups."""
    settings = home_with(tmp_path, {"chat.jsonl": QUESTION})
    assert Graph(settings).ingest("wattle-messages").success
    real = steps.linked_groups.check

    def failing(*args: Any, **kwargs: Any) -> list[Any]:
        return [*real(*args, **kwargs), Gate("members_live", False, "a member is not live")]

    monkeypatch.setattr(steps.linked_groups, "check", failing)
    report = reprocess.run(Home(settings), ASKED.timestamp() + 6 * HOUR)
    assert [t["key"] for t in report.taken] == ["qa_pair:q1"] and not report.passed
    item = queued(settings, "qa_pair:q1")
    assert item is not None
    assert (item.item.attempts, item.item.last_reprocessed_at) == (0, None)
    monkeypatch.undo()
    report = reprocess.run(Home(settings), ASKED.timestamp() + 7 * HOUR)
    assert [(t["key"], t["attempt"]) for t in report.taken] == [("qa_pair:q1", 1)]
    assert report.passed
    item = queued(settings, "qa_pair:q1")
    assert item is not None
    assert (item.item.attempts, item.item.last_reprocessed_at) == (1, ASKED.timestamp() + 7 * HOUR)
    # counted once: the next check is the 24 h one
    assert reprocess.run(Home(settings), ASKED.timestamp() + 8 * HOUR).taken == []


def test_corpus_reprocess_at_7_days_times_the_question_out_and_reindexes(tmp_path: Path) -> None:
    settings = home_with(tmp_path, {"chat.jsonl": QUESTION})
    cli(settings, "sync", "--json")
    out = invoke(settings, "reprocess", "--now", at(7 * DAY))
    assert out.exit_code == 0, out.output
    # the counts, then each item taken, named, with what became of it
    assert "1 items taken" in out.output and "1 items timed out" in out.output
    assert "0 groups changed" not in out.output  # the question's group is now a timeout
    assert "    qa_pair:q1 (priority 8, attempt 1)  timed out" in out.output.splitlines()
    qa = group_of(settings, "qa_pair", "q1")
    assert qa["resolution_status"] == "timeout"
    home = Home(settings)
    gen = home.registry.live_generation("hash")
    assert gen is not None
    rows = home.store.table(gen).search().limit(10_000).to_list()
    (row,) = [r for r in rows if r["kind"] == "group" and r["doc_id"] == qa["group_id"]]
    assert row["content_hash"] == qa["content_hash"]
    report = cli(settings, "reprocess", "--now", at(8 * DAY), "--json")
    assert (report["items_taken"], report["groups_changed"], report["timed_out"]) == (0, 0, [])
    assert report["sync"] is None  # nothing taken, nothing synced


def test_a_shift_note_that_arrives_later_wakes_its_incident_in_a_sync(tmp_path: Path) -> None:
    reported = ASKED
    incident = record(
        "ir1", "incident_report", "Mike Brennan", reported, REPORT, title="Seizure - John"
    )
    settings = home_with(tmp_path, {"incidents.jsonl": incident})
    cli(settings, "sync", "--json")
    ctx = group_of(settings, "incident_context", "ir1")
    assert (ctx["resolution_status"], ctx["reprocess_priority"]) == ("pending_context", 10)
    item = queued(settings, "incident_context:ir1")
    assert item is not None and item.item.priority == 10

    # Jane's late entry, 30 hours on: past the first pass's day either side of the report
    note = record(
        "sn1",
        "shift_note",
        "Jane Okafor",
        reported + dt.timedelta(hours=30),
        "Late entry. John: I timed the seizure, about three minutes.",
    )
    (tmp_path / "wattle" / "shift-notes.jsonl").write_text(note)
    cli(settings, "sync", "--json")
    ctx = group_of(settings, "incident_context", "ir1")
    assert ctx["members"] == [(1, "ir1"), (2, "sn1")]
    assert ctx["reprocess_priority"] < 10  # Mike's note is still to come: daily, not 6-hourly
    item = queued(settings, "incident_context:ir1")
    assert item is None or item.item.priority < 10
    # the new group is indexed: the generation holds its row
    home = Home(settings)
    gen = home.registry.live_generation("hash")
    assert gen is not None
    rows = home.store.table(gen).search().limit(10_000).to_list()
    assert ctx["group_id"] in {r["doc_id"] for r in rows if r["kind"] == "group"}


def test_a_shift_note_wakes_its_incident_once_not_in_every_run_on_its_ingest(
    tmp_path: Path,
) -> None:
    """A note at the incident's place, five days on (past even the wider window, so the
    incident stays without context), wakes it in the sync that brings the note: one attempt
    more, judged with the wider windows. Linking the same ingest again (a materialization of
    ``linked_groups`` on its own) sees no new arrival: no attempt more, nothing judged
    again."""
    incident = record(
        "ir1", "incident_report", "Mike Brennan", ASKED, REPORT, title="Seizure - John"
    )
    settings = home_with(tmp_path, {"incidents.jsonl": incident})
    cli(settings, "sync", "--json")
    first = queued(settings, "incident_context:ir1")
    assert first is not None and first.item.attempts == 0
    note = record(
        "sn1", "shift_note", "Jane Okafor", ASKED + dt.timedelta(days=5), "Quiet night, all well."
    )
    (tmp_path / "wattle" / "shift-notes.jsonl").write_text(note)
    cli(settings, "sync", "--json")
    woken = queued(settings, "incident_context:ir1")
    assert woken is not None and woken.item.attempts == 1
    assert group_of(settings, "incident_context", "ir1")["members"] == [(1, "ir1")]
    home = Home(settings)
    judged = read_queue(home.warehouse, "wattle-messages").linking
    again = steps.linked_groups.run(home, "wattle-messages")
    assert again.passed and again.woken == []
    stored = read_queue(home.warehouse, "wattle-messages")
    assert stored.linking == judged
    assert [q.item for q in stored.items if q.item.key == "incident_context:ir1"] == [woken.item]


def test_reprocess_job_runs_in_process_at_the_time_given(tmp_path: Path) -> None:
    settings = home_with(tmp_path, {"chat.jsonl": QUESTION})
    graph = Graph(settings)
    assert graph.ingest("wattle-messages").success
    job = graph.defs.resolve_job_def("reprocess_job")
    early = job.execute_in_process(
        instance=graph.instance,
        run_config={"ops": {"reprocess_op": {"config": {"now": at(HOUR)}}}, **QUIET},
    )
    assert early.success and early.output_for_node("reprocess_op")["items_taken"] == 0
    # a scheduled run is judged at its tick: the schedule gives it in the run's config
    (request,) = tick(settings, ASKED + dt.timedelta(hours=6)).run_requests or []
    result = job.execute_in_process(
        instance=graph.instance, run_config={**request.run_config, **QUIET}
    )
    assert result.success
    report = result.output_for_node("reprocess_op")
    assert report["now"] == at(6 * HOUR)
    assert "qa_pair:q1" in [t["key"] for t in report["taken"]]
    partitions = {
        (ev.asset_key.to_user_string(), ev.partition)  # type: ignore[union-attr]
        for ev in result.get_asset_materialization_events()
    }
    assert partitions == {
        ("linked_groups", "wattle-messages"),
        ("embedding_inputs", "wattle-messages"),
    }
    item = queued(settings, "qa_pair:q1")
    assert item is not None and item.item.attempts == 1


def test_the_schedule_is_hourly_and_running_by_default() -> None:
    assert reprocess_schedule.cron_schedule == "0 * * * *"
    assert reprocess_schedule.default_status == dg.DefaultScheduleStatus.RUNNING
    assert reprocess_schedule.job_name == "reprocess_job"


def tick(settings: Settings, when: dt.datetime) -> dg.ScheduleExecutionData:
    """``reprocess_schedule``'s tick at ``when``."""
    resource = CorpusResource(config_path=str(settings.config_path), home=str(settings.home))
    with dg.build_schedule_context(
        resources={"corpus": resource}, scheduled_execution_time=when
    ) as context:
        return reprocess_schedule.evaluate_tick(context)


def test_the_schedule_starts_a_run_only_when_an_item_is_due(tmp_path: Path) -> None:
    """``reprocess_job`` takes the home alone (under the multiprocess executor, every other
    run's next step waits for it): an hourly tick with nothing due starts no run."""
    deals = write_home(tmp_path / "deals")  # uw_deals collections only: nothing is ever queued
    nothing = tick(Settings(config_path=deals, home=tmp_path / "deals" / "home"), ASKED)
    assert not nothing.run_requests and "no linked group is due" in str(nothing.skip_message)
    settings = home_with(tmp_path, {"chat.jsonl": QUESTION})
    assert Graph(settings).ingest("wattle-messages").success
    assert queued(settings, "qa_pair:q1") is not None  # first due 6 h after it was asked
    early = tick(settings, ASKED + dt.timedelta(hours=1))
    assert not early.run_requests and early.skip_message
    due = tick(settings, ASKED + dt.timedelta(hours=6))
    # judged at the tick, as the run will be: its time in the run's config
    assert [r.run_config["ops"] for r in due.run_requests or []] == [
        {"reprocess_op": {"config": {"now": at(6 * HOUR), "collection": ""}}}
    ]
    item = queued(settings, "qa_pair:q1")  # asking took nothing from the queue
    assert item is not None and item.item.attempts == 0


def test_a_bad_now_is_refused_naming_it(tmp_path: Path) -> None:
    settings = home_with(tmp_path, {"chat.jsonl": QUESTION})
    out = invoke(settings, "reprocess", "--now", "next tuesday")
    assert out.exit_code == 2
    assert "'next tuesday' is not an ISO 8601 time" in out.output
    # an empty one (an unset shell variable) is refused too, not read as the clock
    out = invoke(settings, "reprocess", "--now", "")
    assert out.exit_code == 2 and "now='' is not an ISO 8601 time" in out.output
    out = invoke(settings, "reprocess", "--collection", "nope")
    assert out.exit_code == 2 and "no collection 'nope' is configured" in out.output
    # outside the years a time may have: named, not a traceback
    for far in ("9999-12-31T23:59:59-10:00", "0001-01-01T00:00:00+10:00"):
        out = invoke(settings, "reprocess", "--now", far)
        assert out.exit_code == 2 and "outside the supported years" in out.output, out.output
    # ahead of the present: the queue would keep that clock for every later sync
    out = invoke(settings, "reprocess", "--now", "2999-01-01T00:00:00Z")
    assert out.exit_code == 2 and "is after the present" in out.output, out.output


def test_grouping_turned_off_empties_the_queue_and_leaves_nothing_to_reprocess(
    tmp_path: Path,
) -> None:
    """``grouping: false`` on a collection that was grouped: its queue is emptied with its
    groups (no unit is named there any more, and no item of a group that is gone is taken
    again at every check), and the collection is no longer one that is re-processed."""
    settings = home_with(tmp_path, {"chat.jsonl": QUESTION})
    cli(settings, "sync", "--json")
    assert queued(settings, "qa_pair:q1") is not None
    config = yaml.safe_load(settings.config_path.read_text())
    config["collections"]["wattle-messages"]["grouping"] = False
    settings.config_path.write_text(yaml.safe_dump(config))
    (tmp_path / "wattle" / "chat.jsonl").unlink()  # the question deleted as well
    cli(settings, "sync", "--json")
    assert read_queue(Home(settings).warehouse, "wattle-messages").items == []
    report = cli(settings, "reprocess", "--now", at(6 * HOUR), "--json")
    assert (report["items_taken"], report["collections"]) == (0, {})
    out = invoke(settings, "reprocess", "--collection", "wattle-messages", "--now", at(DAY))
    assert out.exit_code == 2 and "is not grouped" in out.output, out.output


def test_a_deleted_question_leaves_the_queue_with_its_deletion(tmp_path: Path) -> None:
    """The deletion itself (the ``source_manifest`` step, before any ``linked_groups`` run:
    a sync cut short there, or whose grouping checks fail) takes the deleted question's item
    out of the queue; a queue that names it still is found by the audit."""
    other = record("c1", "discord_chat", "Mike B", ASKED, "Bins are out, all good tonight.")
    settings = home_with(tmp_path, {"chat.jsonl": QUESTION, "other.jsonl": other})
    cli(settings, "sync", "--json")
    assert queued(settings, "qa_pair:q1") is not None
    home = Home(settings)
    before = home.warehouse.path("reprocess_queue", "wattle-messages").read_bytes()
    (tmp_path / "wattle" / "chat.jsonl").unlink()
    steps.source_manifest.run(home, "wattle-messages")
    anchors = [q.item.anchor for q in read_queue(home.warehouse, "wattle-messages").items]
    assert "c1" in anchors and "q1" not in anchors

    def queue_findings() -> list[str]:
        audit = audit_deletion(home, "wattle-messages/q1")
        return [r["match"] for r in audit["remaining"] if "reprocess_queue" in r.get("path", "")]

    assert queue_findings() == []
    # a queue written before the deletion, put back: the audit names it
    home.warehouse.path("reprocess_queue", "wattle-messages").write_bytes(before)
    assert queue_findings() == ["unit"]


@pytest.mark.parametrize("args", [["reprocess", "--help"]])
def test_reprocess_has_help(args: list[str]) -> None:
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0 and "--now" in out.output
