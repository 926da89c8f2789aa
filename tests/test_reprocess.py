"""Temporal re-processing: the queue's timings, order and batch size, and re-detection with a
wider window, with the clock moved by the tests (never slept)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from corpus_index.linked.groups import Group, link_units
from corpus_index.linked.messages import Message
from corpus_index.linked.reprocess import (
    BATCH,
    DAY,
    HOUR,
    QueueItem,
    due,
    next_due,
    queue_of,
    reprocess,
)

T0 = 1_765_000_000.0
REPORT = (
    "People involved: John Pereira (participant). Staff present: Mike Brennan, Jane Okafor.\n"
    "What happened: John had a seizure in the lounge after dinner."
)


def unit(uid: str, author: str, text: str, at: float, source: str, **kw: str) -> Message:
    channel = {"incident_report": "incidents", "shift_note": "notes"}.get(source, "#house")
    return Message(
        unit_id=uid,
        channel=channel,
        author=author,
        text=text,
        timestamp=T0 + at,
        source=source,
        location="Picton SIL",
        **kw,  # type: ignore[arg-type]
    )


INCIDENT = unit("ir", "Mike Brennan", REPORT, 0, "incident_report", title="Seizure - John")
MIKE_NOTE = unit(
    "n-mike", "Mike Brennan", "John: seizure at 7:40, slept after.", HOUR, "shift_note"
)
JANE_LATE = unit("n-jane", "Jane Okafor", "Late entry. John: I timed the seizure.", 30 * HOUR, "shift_note")  # fmt: skip
QUESTION = unit("q", "Jane O.", "has anyone got a spare charger for the office?", 0, "discord_chat")


def first_queue(units: list[Message], now: float) -> list[QueueItem]:
    groups = link_units(units, now=now)
    return queue_of(groups, {m.unit_id: m for m in units})


def item(queue: list[QueueItem], key: str) -> QueueItem:
    (found,) = [i for i in queue if i.key == key]
    return found


def group(groups: list[Group], key: str) -> Group:
    (found,) = [g for g in groups if f"{g.group_type}:{g.members[0].unit_id}" == key]
    return found


def test_an_incident_without_context_is_due_every_six_hours() -> None:
    queue = first_queue([INCIDENT], now=T0 + HOUR)
    inc = item(queue, "incident_context:ir")
    assert inc.priority == 10
    assert due(queue, T0 + 5.9 * HOUR) == []
    assert [i.key for i in due(queue, T0 + 6 * HOUR)] == ["incident_context:ir"]
    run = reprocess([INCIDENT], queue, now=T0 + 6 * HOUR)
    after = item(run.queue, "incident_context:ir")
    assert (after.attempts, after.last_reprocessed_at) == (1, T0 + 6 * HOUR)
    assert next_due(after) == T0 + 12 * HOUR
    assert due(run.queue, T0 + 11 * HOUR) == []


def test_a_late_shift_note_wakes_its_incident_and_the_wider_window_completes_it() -> None:
    queue = first_queue([INCIDENT, MIKE_NOTE], now=T0 + 2 * HOUR)
    inc = item(queue, "incident_context:ir")
    assert inc.priority == 5  # Jane was there and has written nothing yet
    assert next_due(inc) == T0 + DAY
    units = [INCIDENT, MIKE_NOTE, JANE_LATE]
    # a normal pass does not reach a note 30 hours after the report
    assert (
        "n-jane"
        not in group(link_units(units, now=T0 + 30 * HOUR), "incident_context:ir").member_ids
    )
    assert due(queue, T0 + 30 * HOUR, arrived=[]) == [inc]  # daily anyway
    assert due(queue, T0 + 20 * HOUR, arrived=[JANE_LATE]) == [inc]  # woken by the note
    run = reprocess(units, queue, now=T0 + 30 * HOUR, arrived=[JANE_LATE])
    assert run.processed == ["incident_context:ir"]
    ctx = group(run.groups, "incident_context:ir")
    assert ctx.member_ids == ("ir", "n-mike", "n-jane")
    # complete: it now waits only for its validation pass, 48 hours after its newest note
    assert (ctx.completeness, ctx.reprocess_priority) == ("complete", 3)
    after = item(run.queue, "incident_context:ir")
    assert (after.priority, after.attempts, next_due(after)) == (
        3,
        0,
        JANE_LATE.timestamp + 2 * DAY,
    )


def test_an_incident_that_finds_some_notes_late_is_next_due_a_day_after_that_run() -> None:
    """Re-processed at 30 h, an incident without context finds Mike's note (Jane's is still to
    come): partial, daily from that run, not due again an hour on for being a day past its
    report."""
    note = unit("n-mike", "Mike Brennan", "John: seizure at 7:40, slept after.", 29 * HOUR, "shift_note")  # fmt: skip
    queue = first_queue([INCIDENT], now=T0 + HOUR)
    for hours in (6, 12, 18, 24):
        queue = reprocess([INCIDENT], queue, now=T0 + hours * HOUR).queue
    run = reprocess([INCIDENT, note], queue, now=T0 + 30 * HOUR)
    inc = item(run.queue, "incident_context:ir")
    assert (inc.priority, inc.attempts, inc.last_reprocessed_at) == (5, 0, T0 + 30 * HOUR)
    assert next_due(inc) == T0 + 54 * HOUR
    assert due(run.queue, T0 + 31 * HOUR) == []


def test_an_unanswered_question_is_checked_at_6h_24h_48h_and_7d_then_times_out() -> None:
    units = [QUESTION]
    queue = first_queue(units, now=T0)
    assert item(queue, "qa_pair:q").priority == 8
    checks = []
    clock = T0
    while any(i.key == "qa_pair:q" for i in queue) and clock < T0 + 10 * DAY:
        clock += HOUR
        if due(queue, clock):
            checks.append(clock - T0)
            run = reprocess(units, queue, now=clock)
            queue = run.queue
    assert checks == [6 * HOUR, DAY, 2 * DAY, 7 * DAY]
    qa = group(run.groups, "qa_pair:q")
    assert (qa.resolution_status, qa.reprocess_priority) == ("timeout", 0)


def test_a_question_re_processed_late_passes_the_checks_it_came_after() -> None:
    queue = first_queue([QUESTION], now=T0)
    # the first run comes three days on (a first sync of old messages, a daemon that was
    # down): one run for the 6 h, 24 h and 48 h checks, not three at the same time
    run = reprocess([QUESTION], queue, now=T0 + 3 * DAY)
    after = item(run.queue, "qa_pair:q")
    assert (after.attempts, next_due(after)) == (1, T0 + 7 * DAY)
    assert due(run.queue, T0 + 3 * DAY) == []
    assert due(run.queue, T0 + 7 * DAY) == [after]


def test_a_late_answer_is_found_at_a_later_check_with_the_wider_window() -> None:
    answer = unit(
        "a", "Tom H", "Jane, yes there's a spare one in the top drawer", 3 * DAY, "discord_chat"
    )
    queue = first_queue([QUESTION], now=T0)
    run = reprocess([QUESTION], queue, now=T0 + 2 * DAY)
    assert item(run.queue, "qa_pair:q").attempts == 1  # no answer yet
    # a normal pass (48 h window) misses an answer three days on; the 7-day check does not
    assert (
        group(link_units([QUESTION, answer], now=T0 + 7 * DAY), "qa_pair:q").resolved_by_unit_id
        is None
    )
    run = reprocess([QUESTION, answer], run.queue, now=T0 + 7 * DAY)
    qa = group(run.groups, "qa_pair:q")
    assert (qa.resolution_status, qa.resolved_by_unit_id) == ("resolved", "a")
    assert all(i.key != "qa_pair:q" for i in run.queue)


def test_recent_content_gets_one_validation_pass_at_48_hours() -> None:
    units = [unit("m1", "Sarah J", "bins out tonight please", 0, "discord_chat"),
             unit("m2", "Tom H", "will do, on it", 10 * 60, "discord_chat")]  # fmt: skip
    queue = first_queue(units, now=T0 + HOUR)
    validations = [i for i in queue if i.priority == 3]
    assert validations and all(next_due(i) == i.since + 2 * DAY for i in validations)
    assert due(queue, T0 + 47 * HOUR) == []
    later = T0 + 10 * 60 + 2 * DAY
    assert {i.key for i in due(queue, later)} == {i.key for i in validations}
    run = reprocess(units, queue, now=later)
    assert [i for i in run.queue if i.priority == 3] == []


def test_an_active_conversation_is_refreshed_weekly() -> None:
    refresh = QueueItem("conversation:m1", "conversation", "m1", 1, since=T0)
    assert next_due(refresh) == T0 + 7 * DAY
    done = replace(refresh, last_reprocessed_at=T0 + 7 * DAY, attempts=1)
    assert due([done], T0 + 13 * DAY) == []
    assert due([done], T0 + 14 * DAY) == [done]


def test_a_run_takes_at_most_50_by_priority_then_longest_waiting() -> None:
    items = [
        QueueItem(f"k{n:03}", "qa_pair", f"u{n}", priority, since=T0, last_reprocessed_at=last)
        for n, (priority, last) in enumerate(
            [(1, None)] * 20 + [(10, T0 + 2 * HOUR)] * 20 + [(10, None)] * 10 + [(5, T0)] * 20
        )
    ]
    picked = due(items, T0 + 30 * DAY)
    assert len(picked) == BATCH
    assert [i.priority for i in picked] == [10] * 30 + [5] * 20
    assert all(i.last_reprocessed_at is None for i in picked[:10])
    assert all(i.last_reprocessed_at == T0 + 2 * HOUR for i in picked[10:30])


def test_of_items_never_re_processed_the_longest_due_is_taken_first() -> None:
    """A question asked five days ago and never re-processed (its 6 h check long past) is not
    held back behind 50 asked this morning whose keys sort first."""
    fresh = [QueueItem(f"qa_pair:a{n:03}", "qa_pair", f"u{n}", 8, since=T0) for n in range(50)]
    old = QueueItem("qa_pair:zzz", "qa_pair", "old", 8, since=T0 - 5 * DAY)
    picked = due([*fresh, old], T0 + 6 * HOUR)
    assert len(picked) == BATCH
    assert picked[0] == old
    assert picked[1:] == fresh[:49]  # the rest, due at the same time, by key


@pytest.mark.parametrize("limit", [1, 3])
def test_the_batch_size_is_a_parameter(limit: int) -> None:
    items = [QueueItem(f"k{n}", "qa_pair", f"u{n}", 10, since=T0) for n in range(5)]
    assert len(due(items, T0 + DAY, limit=limit)) == limit


def test_a_run_at_the_epoch_counts_as_a_run() -> None:
    """A ``last_reprocessed_at`` of 0.0 (a run judged at 1970-01-01T00:00Z; times before it
    are supported) is a time like any other, not "never re-processed"."""
    at_epoch = QueueItem("a", "incident_context", "ir", 10, since=-HOUR, last_reprocessed_at=0.0)
    never = QueueItem("b", "incident_context", "ir2", 10, since=-HOUR)
    assert next_due(at_epoch) == 6 * HOUR
    assert [i.key for i in due([at_epoch, never], 7 * HOUR)] == ["b", "a"]
