"""Linking in the channel's own time: the channel's pace, the linker's indifference to how fast
a channel is, and the second look that joins conversations of one channel the linker kept
apart (same people, same topic, close in the channel's own time)."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from corpus_index.linked.conversations import IDLE_S, link_parents
from corpus_index.linked.features import PACE_FLOOR_S, channel_pace
from corpus_index.linked.groups import conversation_groups
from corpus_index.linked.merging import merge_conversations
from corpus_index.linked.messages import Message
from corpus_index.linked.similarity import Similarity

T0 = 1_765_000_000.0


def msg(uid: str, author: str, text: str, minutes: float, channel: str = "#house") -> Message:
    return Message(uid, channel, author, text, T0 + 60 * minutes, source="discord_chat")


def test_the_pace_is_the_lower_quartile_of_the_gaps_before_each_message() -> None:
    minutes = np.array([0, 1, 2, 3, 4, 604, 605, 606, 1200], dtype=np.float64)
    system = np.zeros(len(minutes), dtype=bool)
    pace = channel_pace(minutes * 60, system) / 60
    # gaps seen before message i: none for the first two (the floor), then 1, 1, 1, 1, 600, ...
    assert pace[:2].tolist() == [PACE_FLOOR_S / 60] * 2
    assert pace[2:].tolist() == [1.0] * 7  # the night's 600 minutes do not slow the channel
    # a system line is skipped, and the floor holds for a clock in whole minutes
    same_minute = channel_pace(np.zeros(5), np.array([0, 1, 0, 0, 0], dtype=bool))
    assert same_minute.tolist() == [PACE_FLOOR_S] * 5


@pytest.mark.parametrize("slower", [1, 7, 60, 600])
def test_the_linker_reads_a_slow_channel_as_it_reads_a_fast_one(slower: float) -> None:
    """The same exchanges, their clock run ``slower`` times slower (minutes become hours): the
    model makes the same links, since every time it reads is in the channel's pace. The
    replies read by how people write (``responses``) keep human time: a question is open for
    48 hours, and a conversation silent for 48 hours is not continued, so they agree while the
    exchange stays within that (600 times slower, "Amelia can't do pork" comes 90 hours after
    the question it answers)."""
    lines = [
        ("Sarah", "Christmas lunch planning, chicken or pork? who is on that day?", 0),
        ("Mike", "I'm on 7-3, pork with crackling gets my vote", 3),
        ("Jane", "Amelia can't do pork, chicken is easier to mince for her", 9),
        ("Tom", "Van's making a grinding noise when you brake. Anyone noticed?", 15),
        ("Sarah", "Good point, both then. Veg: potatoes, carrots, what else?", 16),
        ("Mike", "Tom yeah on Saturday, front left, metal on metal", 20),
        ("Mike", "roast pumpkin? John loves it", 22),
        ("Jane", "yes pumpkin please", 24),
        ("Sarah", "Tom can you book the van into Camden Auto?", 27),
        ("Tom", "booked for Thursday 8am", 41),
        ("Dan", "has anyone got a spare charger for the office?", 300),
    ]
    fast = [msg(f"m{i}", a, text, minutes) for i, (a, text, minutes) in enumerate(lines)]
    slow = [replace(m, timestamp=T0 + (m.timestamp - T0) * slower) for m in fast]
    assert channel_pace(np.array([m.timestamp for m in fast]), np.zeros(11, bool))[2:].min() > (
        PACE_FLOOR_S
    )  # above the floor, or the fast channel would be read slower than it is
    model_fast, model_slow = (
        link_parents(fast, responses=False),
        link_parents(slow, responses=False),
    )
    if slower <= 60:
        assert model_slow == model_fast
        assert link_parents(slow) == link_parents(fast)
        return
    # 600 times slower, a minute is ten hours: a conversation silent past 48 hours of it is
    # not continued (conversations.IDLE_S), so every link the fast channel makes and the slow
    # one does not reaches a conversation idle that long
    conversation = list(range(len(fast)))
    for i, parent in enumerate(model_fast):
        conversation[i] = conversation[parent]
    cut = [i for i in range(len(fast)) if model_slow[i] != model_fast[i]]
    assert cut  # the rule is met here
    for i in cut:
        last = max(j for j in range(i) if conversation[j] == conversation[model_fast[i]])
        assert slow[i].timestamp - slow[last].timestamp > IDLE_S
    assert link_parents(slow)[2] == 2 != link_parents(fast)[2]


def _sample_like(gap_minutes: float) -> tuple[list[list[str]], dict[str, Message], Similarity]:
    """A thread and a later remark on its topic by one of its people, ``gap_minutes`` after
    it, in a channel whose exchanges come a few minutes apart; and a van thread beside it."""
    messages = [
        msg("a1", "Sarah", "Christmas lunch: roast chicken or roast pork for the house?", 0),
        msg("v1", "Tom", "the van brakes are grinding again", 1),
        msg("a2", "Mike", "roast pork with crackling please", 3),
        msg("v2", "Mike", "front left brake pad, metal on metal", 5),
        msg("a3", "Sarah", "ok roast chicken and pork it is for Christmas lunch", 8),
        msg("b1", "Jane", "roast pumpkin with the chicken for Christmas lunch?", 8 + gap_minutes),
    ]
    by_id = {m.unit_id: m for m in messages}
    linked = [["a1", "a2", "a3"], ["v1", "v2"], ["b1"]]
    return linked, by_id, Similarity(messages)


def test_a_remark_joins_the_thread_of_its_people_and_topic_in_the_channels_own_time() -> None:
    linked, by_id, sim = _sample_like(gap_minutes=20)
    # Jane is named by nobody and wrote nothing else, so she shares no one with the thread yet
    assert sorted(map(sorted, merge_conversations(linked, by_id, similarity=sim))) == sorted(
        map(sorted, linked)
    )
    by_id["b1"] = Message(
        "b1", "#house", "Jane", "Mike roast pumpkin with the chicken for Christmas lunch?",
        by_id["b1"].timestamp, mentions=("Mike",), source="discord_chat",
    )  # fmt: skip
    merged = merge_conversations(linked, by_id, similarity=Similarity(list(by_id.values())))
    assert sorted(map(sorted, merged)) == [["a1", "a2", "a3", "b1"], ["v1", "v2"]]


@pytest.mark.parametrize(("speed", "joined"), [(1, False), (200, True)])
def test_the_window_is_counted_in_the_channels_paces(speed: float, joined: bool) -> None:
    """The remark comes a day after the thread's last message: out of reach where exchanges
    come minutes apart, within reach where they come hours apart (``speed`` times slower)."""
    linked, by_id, _ = _sample_like(gap_minutes=0)
    last = by_id["a3"].timestamp
    slowed = {u: replace(m, timestamp=T0 + (m.timestamp - T0) * speed) for u, m in by_id.items()}
    slowed["b1"] = replace(
        slowed["a3"], unit_id="b1", author="Mike", text=by_id["b1"].text,
        timestamp=T0 + (last - T0) * speed + 24 * 3600,
    )  # fmt: skip
    sim = Similarity(list(slowed.values()))
    merged = sorted(map(sorted, merge_conversations(linked, slowed, similarity=sim)))
    assert (["a1", "a2", "a3", "b1"] in merged) is joined


def test_other_topics_other_channels_and_strangers_stay_apart() -> None:
    linked, by_id, sim = _sample_like(gap_minutes=2)
    by_id["b1"] = Message(
        "b1", "#other", "Mike", "roast pumpkin with the chicken for Christmas lunch?",
        by_id["b1"].timestamp, source="discord_chat",
    )  # fmt: skip
    merged = merge_conversations(linked, by_id, similarity=Similarity(list(by_id.values())))
    assert ["b1"] in merged  # another channel
    # the van thread shares Mike with the lunch thread, but not its topic
    assert sorted(map(sorted, merged)) == [["a1", "a2", "a3"], ["b1"], ["v1", "v2"]]


def test_merging_does_not_depend_on_the_order_of_its_input() -> None:
    linked, by_id, sim = _sample_like(gap_minutes=20)
    by_id["b1"] = Message(
        "b1", "#house", "Mike", "roast pumpkin with the chicken for Christmas lunch?",
        by_id["b1"].timestamp, source="discord_chat",
    )  # fmt: skip
    sim = Similarity(list(by_id.values()))
    want = merge_conversations(linked, by_id, similarity=sim)
    rng = random.Random(7)
    for _ in range(5):
        shuffled = [rng.sample(c, len(c)) for c in rng.sample(linked, len(linked))]
        assert merge_conversations(shuffled, by_id, similarity=sim) == want


def test_records_written_whole_are_never_linked_into_conversations() -> None:
    notes = [
        replace(msg(f"n{i}", "Mike", f"John: good shift, ate well, note {i}", i), source=src)
        for i, src in enumerate(["shift_note", "shift_note", "incident_report", "resource_doc"])
    ]
    chat = [msg("c1", "Mike", "anyone seen the van keys?", 0), msg("c2", "Jane", "Mike: hook", 1)]
    groups = conversation_groups([*notes, *chat])
    assert [[m.unit_id for m in g.members] for g in groups] == [["c1", "c2"]]
