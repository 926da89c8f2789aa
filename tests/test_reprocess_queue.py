"""The home's re-processing queue: stored per collection with its linking, read back in
another process, and taken at most 50 at a time, by priority then the longest since last
re-processed, across collections. Taking widens the linking and counts no attempt (the
``linked_groups`` run that re-detects them does; see tests/dagster/test_reprocessing.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from corpus_index.linked.groups import Windows
from corpus_index.linked.reprocess import DAY, HOUR, REPROCESS_WINDOWS, QueueItem, next_due
from corpus_index.reprocess_queue import (
    Linker,
    Linking,
    Queued,
    Stored,
    read_queue,
    refresh,
    take_due,
    write_queue,
)
from corpus_index.warehouse import Warehouse
from tests.test_reprocess import INCIDENT, unit

T0 = 1_765_000_000.0
ROOT = Path(__file__).resolve().parents[1]


def fill(warehouse: Warehouse, collection: str, n: int, priority: int, **kw: float) -> None:
    items = [
        Queued(
            collection,
            "wattle",
            QueueItem(f"qa_pair:{collection}-{priority}-{k:03d}", "qa_pair", f"u{k}", priority, T0),
        )
        for k in range(n)
    ]
    if kw:
        items = [
            q._replace(
                item=QueueItem(
                    q.item.key,
                    "incident_context",
                    q.item.anchor,
                    priority,
                    T0,
                    "picton sil",
                    kw["last"] - k,
                    1,
                )
            )
            for k, q in enumerate(items)
        ]
    before = read_queue(warehouse, collection).items
    write_queue(warehouse, collection, [*before, *items], Linking())


def test_at_most_fifty_are_taken_by_priority_then_longest_since_reprocessed(tmp_path: Path) -> None:
    wh = Warehouse(tmp_path / "warehouse")
    fill(wh, "a", 30, 8)  # questions: first check due at 6 h
    fill(wh, "b", 15, 10, last=T0 + HOUR)  # incidents without notes: every 6 h
    fill(wh, "b", 20, 3)  # validation passes: due at 48 h
    taken = take_due(wh, ["a", "b"], T0 + 3 * DAY)
    got = [(q.collection, q.item.priority) for q in taken.items]
    assert len(got) == 50
    assert [p for _, p in got] == [10] * 15 + [8] * 30 + [3] * 5
    # among the incidents, the one re-processed longest ago first
    lasts = [q.item.last_reprocessed_at for q in taken.items[:15]]
    assert lasts == sorted(lasts)  # type: ignore[type-var]
    # taking counts no attempt: the linked_groups run given the items counts it, if it passes
    after = {q.item.key: q.item for c in "ab" for q in read_queue(wh, c).items}
    before = {q.item.key: q.item for q in taken.items}
    assert all(after[k] == i for k, i in before.items())
    assert taken.keys("b") == {q.item.key: T0 + 3 * DAY for q in taken.items[:15]} | {
        q.item.key: T0 + 3 * DAY for q in taken.items[45:]
    }
    # a collection with an item taken is linked with the wider windows from now on
    for c in "ab":
        assert read_queue(wh, c).linking == Linking(REPROCESS_WINDOWS, T0 + 3 * DAY)
    # nothing recorded them, so the same fifty are due again
    again = take_due(wh, ["a", "b"], T0 + 3 * DAY)
    assert [q.item.key for q in again.items] == [q.item.key for q in taken.items]


def test_of_items_never_re_processed_the_longest_due_is_taken_first(tmp_path: Path) -> None:
    wh = Warehouse(tmp_path / "warehouse")
    fill(wh, "a", 50, 8)  # questions asked at T0, their first check due at 6 h
    old = QueueItem("qa_pair:z-old", "qa_pair", "u-old", 8, T0 - 4 * DAY)
    write_queue(wh, "b", [Queued("b", "wattle", old)], Linking())
    taken = take_due(wh, ["a", "b"], T0 + 6 * HOUR)
    assert len(taken.items) == 50
    # asked four days before the others, its 6 h check long past: first, not left out
    assert taken.items[0].item == old
    assert taken.collections == ["a", "b"]


def test_an_item_whose_reason_changes_in_its_run_is_next_due_a_period_after_it() -> None:
    """Taken at 30 h, an incident without context finds a note written at 29 h: its queue item
    is of priority 5 now, re-processed at 30 h and due a day later, not at the next run."""
    at = INCIDENT.timestamp + 30 * HOUR
    note = unit("n-mike", "Mike Brennan", "John: seizure at 7:40, slept after.", 29 * HOUR, "shift_note")  # fmt: skip
    before = QueueItem("incident_context:ir", "incident_context", "ir", 10, INCIDENT.timestamp,
                       "picton sil", INCIDENT.timestamp + DAY, 4)  # fmt: skip
    stored = Stored([Queued("c", "wattle", before)], Linking(REPROCESS_WINDOWS, at))
    linker = Linker(stored.linking)
    linker([INCIDENT, note])
    tenants = {"ir": "wattle", "n-mike": "wattle"}
    (after,) = refresh("c", stored, linker, tenants, processed={before.key: at})
    assert (after.item.priority, after.item.attempts) == (5, 0)
    assert (after.item.last_reprocessed_at, next_due(after.item)) == (at, at + DAY)


def test_nothing_is_due_before_its_time(tmp_path: Path) -> None:
    wh = Warehouse(tmp_path / "warehouse")
    fill(wh, "a", 3, 8)
    assert take_due(wh, ["a"], T0 + 5 * HOUR).items == []
    assert read_queue(wh, "a").linking == Linking()  # untouched: still the first pass's


def test_the_queue_is_read_back_in_another_process(tmp_path: Path) -> None:
    wh = Warehouse(tmp_path / "warehouse")
    fill(wh, "a", 2, 8)
    script = (
        "import sys; from pathlib import Path;"
        "from corpus_index.warehouse import Warehouse;"
        "from corpus_index.reprocess_queue import take_due;"
        f"t = take_due(Warehouse(Path(sys.argv[1])), ['a'], {T0 + DAY});"
        "print(len(t.items))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "warehouse")],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        timeout=120,
    )
    assert out.stdout.strip() == "2"
    stored = read_queue(wh, "a")
    assert [(q.item.attempts, q.item.last_reprocessed_at) for q in stored.items] == [(0, None)] * 2
    assert stored.linking == Linking(REPROCESS_WINDOWS, T0 + DAY)
    assert Windows() != REPROCESS_WINDOWS  # the wider ones, not the first pass's
