"""A shift note arriving at the place of a complete incident (priority 3, waiting for its
validation pass 48 h after its newest content) leaves it waiting: a wake would count as its
one attempt, and the pass would never run (the queue then differed from the one a fresh home
builds from the same inputs). Incidents still waiting for notes are woken."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from corpus_index import steps
from corpus_index.config import Settings
from corpus_index.home import Home
from corpus_index.linked.groups import link_units
from corpus_index.linked.messages import Message
from corpus_index.linked.reprocess import DAY, HOUR, due, queue_of, reprocess
from corpus_index.reprocess_queue import read_queue, write_queue
from tests.test_linked_incremental import configure

T0 = 1_765_000_000.0
REPORT = (
    "People involved: John Pereira (participant). Staff present: Mike Brennan, Jane Okafor.\n"
    "What happened: John had a seizure in the lounge after dinner."
)


def unit(uid: str, author: str, text: str, at: float, source: str) -> Message:
    channel = {"incident_report": "incidents", "shift_note": "notes"}[source]
    return Message(uid, channel, author, text, T0 + at, source=source, location="Picton SIL")


INCIDENT = unit("ir", "Mike Brennan", REPORT, 0, "incident_report")
MIKE = unit("n-mike", "Mike Brennan", "John: seizure at 7:40, slept after.", HOUR, "shift_note")
JANE = unit(
    "n-jane", "Jane Okafor", "John: I timed the seizure, 3 minutes.", 2 * HOUR, "shift_note"
)
OTHER = unit(
    "n-dan", "Daniel Kim", "Amelia: slept well. House: quiet night.", 5 * HOUR, "shift_note"
)


def test_a_shift_note_does_not_use_up_a_complete_incidents_validation_pass() -> None:
    units = [INCIDENT, MIKE, JANE]
    queue = queue_of(link_units(units, now=T0 + 3 * HOUR), {m.unit_id: m for m in units})
    (inc,) = [i for i in queue if i.key == "incident_context:ir"]
    assert inc.priority == 3  # complete: waits for its validation pass only
    # another shift note arrives at the same place 5 hours on
    run = reprocess([*units, OTHER], queue, now=T0 + 5 * HOUR, arrived=[OTHER])
    later = [i for i in run.queue if i.key == "incident_context:ir"]
    # from scratch, the same units at the same time still give the validation item
    scratch = queue_of(
        link_units([*units, OTHER], now=T0 + 5 * HOUR),
        {m.unit_id: m for m in [*units, OTHER]},
    )
    assert [i.key for i in scratch if i.key == "incident_context:ir"] == ["incident_context:ir"]
    assert later, "the woken incident's validation pass was used up by the wake and dropped"
    # and it is due 48 h after its newest content
    assert due(run.queue, later[0].since + 2 * DAY)


def _write(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def _record(m: Message) -> dict[str, Any]:
    """``m`` as a line of a message stream (the fields the kind reads)."""
    fields = ("source", "channel", "author", "location", "text")
    record: dict[str, Any] = {"id": m.unit_id, **{f: getattr(m, f) for f in fields}}
    record["timestamp"] = dt.datetime.fromtimestamp(m.timestamp, dt.UTC).isoformat()
    return record


def _link(settings: Settings) -> None:
    home = Home(settings)
    steps.source_manifest.run(home, "wattle")
    steps.parsed_blocks.run(home, "wattle")
    assert steps.linked_groups.run(home, "wattle").passed


def _queue(settings: Settings) -> dict[str, tuple[int, float]]:
    stored = read_queue(Home(settings).warehouse, "wattle")
    return {q.item.key: (q.item.priority, q.item.since) for q in stored.items}


def test_step_queue_after_a_shift_note_matches_a_fresh_home(tmp_path: Path) -> None:
    src = tmp_path / "a" / "source"
    src.mkdir(parents=True)
    (src / "people.yaml").write_text("tenant: wattle\npeople: []\n", encoding="utf-8")
    _write(src / "incidents.jsonl", [_record(INCIDENT)])
    _write(src / "notes.jsonl", [_record(MIKE), _record(JANE)])
    inc = configure(tmp_path / "a", src)
    _link(inc)
    assert _queue(inc)["incident_context:ir"][0] == 3
    _write(src / "notes.jsonl", [_record(MIKE), _record(JANE), _record(OTHER)])
    _link(inc)  # the new note "wakes" the incident
    # a fresh home with the same inputs and the same linking (windows, judged time)
    fsrc = tmp_path / "b" / "source"
    fsrc.mkdir(parents=True)
    for p in src.iterdir():
        (fsrc / p.name).write_bytes(p.read_bytes())
    fresh = configure(tmp_path / "b", fsrc)
    write_queue(
        Home(fresh).warehouse, "wattle", [], read_queue(Home(inc).warehouse, "wattle").linking
    )
    _link(fresh)
    assert "incident_context:ir" in _queue(fresh)
    assert _queue(inc) == _queue(fresh)


def test_an_incident_still_waiting_for_notes_is_woken_by_one() -> None:
    units = [INCIDENT]  # no note yet: without context, re-processed every 6 hours
    queue = queue_of(link_units(units, now=T0 + HOUR), {m.unit_id: m for m in units})
    (inc,) = [i for i in queue if i.key == "incident_context:ir"]
    assert inc.priority == 10
    assert due(queue, T0 + 2 * HOUR) == []  # not due by time yet
    assert [i.key for i in due(queue, T0 + 2 * HOUR, arrived=[MIKE])] == [inc.key]
