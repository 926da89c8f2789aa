"""A channel that only grew is decided from its recent window and the tail the last run kept
of it, to the links and tails the whole channel gives; what reaches before that window
decides the channel whole."""

from __future__ import annotations

import random
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from corpus_index.deletion import propagate_deletion
from corpus_index.home import Home
from corpus_index.linked.features import SELF_FEATURES, channel_features
from corpus_index.linked.messages import Message
from corpus_index.linked.relink import (
    TAILS_KEY,
    ChannelTail,
    Relinker,
    links_table,
    read_links,
    read_tails,
)
from corpus_index.linked.topic import TOPIC_BLOCK
from tests.streamgen import stream
from tests.test_linked_incremental import SAMPLE, configure, link

WINDOW = 50  # the shipped model's


def _long(n: int = TOPIC_BLOCK + 400, seed: int = 7) -> list[Message]:
    """One channel past a TF-IDF block and a window, and a short one beside it."""
    other = [replace(m, unit_id=f"o{m.unit_id}", channel="#other") for m in stream(120, seed=8)]
    both = [*stream(n, channels=1, seed=seed), *other]
    return sorted(both, key=lambda m: (m.timestamp, m.unit_id))


def _again(previous: Relinker, messages: list[Message]) -> Relinker:
    """A run from ``previous``'s links and tails, through their table (as the step keeps
    them), checked against a run over every message: the same parents and the same tails."""
    table = links_table(previous.links, {"": previous.tails})
    again = Relinker(read_links(table), history=read_tails(table).get("", {}))
    again.group(messages)
    whole = Relinker()
    whole.group(messages)
    assert [x.parent for x in again.links] == [x.parent for x in whole.links]
    assert again.tails == whole.tails
    return again


def _first(messages: list[Message]) -> Relinker:
    first = Relinker()
    first.group(messages)
    return first


def test_appended_messages_are_decided_from_the_window_as_from_the_whole_channel() -> None:
    messages = _long()
    channel = messages[0].channel
    cut = len(messages) - 180
    done, rest = messages[:cut], messages[cut:]
    run = _first(done)
    assert {len(t.tail) for t in run.tails.values()} == {WINDOW}
    rng = random.Random(3)
    windowed = 0
    while rest:
        k = min(rng.choice([1, 1, 2, 5]), len(rest))
        done, rest = [*done, *rest[:k]], rest[k:]
        run = _again(run, done)
        windowed += run.from_window
        long_grew = any(m.channel == channel for m in done[-k:])
        assert run.from_window == (1 if long_grew else 0)
        assert run.relinked == k
    assert windowed > 20


def test_a_slices_features_are_the_whole_channels_where_it_reads_what_came_before() -> None:
    """A new message by someone who last wrote long before the slice, and one addressing
    them by name: their features from the slice and the tail are the whole channel's."""
    messages = [m for m in _long() if m.channel != "#other"]
    messages[3] = replace(messages[3], author="Zelda Quinn")
    run = _first(messages)
    (tail,) = run.tails.values()
    last, start = messages[-1], len(messages)
    new = [
        replace(
            last,
            unit_id="z1",
            text="zelda: are the van keys with you?",
            timestamp=last.timestamp + 60,
        ),  # fmt: skip
        replace(
            last,
            unit_id="z2",
            author="Zelda Quinn",
            text="yes, in my bag",
            timestamp=last.timestamp + 120,
        ),  # fmt: skip
    ]
    channel = [*messages, *new]
    lo = start - WINDOW - TOPIC_BLOCK + 1
    whole = channel_features(channel, window=WINDOW, start=start)
    part = channel_features(channel[lo:], window=WINDOW, start=start - lo, earlier=tail.before(lo))
    assert np.array_equal(part.self_[start - lo :], whole.self_[start:])
    pairs = part.pair_rows(start - lo, len(channel) - lo)
    assert np.array_equal(pairs, whole.pair_rows(start, len(channel)))
    first_word = SELF_FEATURES.index("author_first_message")
    assert whole.self_[start + 1, first_word] == 0  # she wrote at message 3
    assert part.addressee[-2] == part.author[-1] >= 0  # "zelda:" names her
    _again(run, channel)


def test_a_reply_before_the_window_decides_the_channel_whole() -> None:
    messages = [m for m in _long() if m.channel != "#other"]
    run = _first(messages)
    last = messages[-1]
    start = len(messages)
    for target in (messages[10], messages[start - WINDOW - 5]):  # before the slice; in it
        new = replace(last, unit_id="new", reply_to=target.unit_id, timestamp=last.timestamp + 60)
        again = _again(run, [*messages, new])
        assert again.channels_relinked == 1 and again.from_window == 0
        assert again.links[-1].parent == messages.index(target)


def test_an_email_reply_reaching_before_the_window_decides_the_channel_whole() -> None:
    base = [m for m in _long() if m.channel != "#other"]
    for at, windowed in ((5, 0), (len(base) - 3, 1)):
        messages = list(base)
        messages[at] = replace(messages[at], title="Van quote for the outing")
        run = _first(messages)
        assert run.tails[f"discord_chat/{base[0].channel}"].subjects == {
            "van quote for the outing": at
        }
        last = messages[-1]
        new = replace(
            last, unit_id="re", title="RE: Van quote for the outing", timestamp=last.timestamp + 60
        )
        again = _again(run, [*messages, new])
        assert again.from_window == windowed


def test_a_channel_without_a_tail_gets_one_though_nothing_changed() -> None:
    """Links kept without tails (an earlier version's, or a deletion's): the next run keeps
    every channel's tail, the whole channel's, changed or not, so the next message appended
    to it is decided from its window."""
    messages = _long()
    run = _first(messages)
    run.tails = {}
    again = _again(run, messages)
    assert again.relinked == 0 and len(again.tails) == 2
    last = next(m for m in reversed(messages) if m.channel != "#other")
    new = replace(last, unit_id="new", timestamp=last.timestamp + 60)
    assert _again(again, [*messages, new]).from_window == 1


def test_a_channel_tail_reads_back_as_written() -> None:
    run = _first(_long())
    (tail,) = [t for t in run.tails.values() if t.size > TOPIC_BLOCK]
    assert ChannelTail.from_json(tail.to_json()) == tail
    assert read_tails(links_table(run.links, {"t": run.tails})) == {"t": run.tails}
    assert read_tails(links_table(run.links)) == {}
    for damaged in (b"{", b'{"t": {"c": {"size": 1}}}', b'{"t": []}', b"[1]"):
        table = links_table(run.links).replace_schema_metadata({TAILS_KEY: damaged})
        assert read_tails(table) == {}  # the channels are decided whole
    assert len(tail.tail) == WINDOW and set(tail.conversations) == set(tail.tail)
    assert tail.size == sum(1 for x in run.links if x.channel == "discord_chat/#site-0")


@pytest.mark.parametrize("damage", ["conversation", "author", "last", "root"])
def test_a_tail_that_does_not_hold_decides_the_channel_whole(damage: str) -> None:
    """A tail read back whole but not consistent (a conversation of the tail not described,
    an author the channel never had, a last message outside the window, a conversation begun
    after its message) is not used: the channel is decided whole, to the same links."""
    messages = [m for m in _long() if m.channel != "#other"]
    run = _first(messages)
    ((name, tail),) = run.tails.items()
    c = tail.tail[-1]
    last, n, who = tail.conversations[c]
    if damage == "conversation":
        bad = replace(tail, conversations={k: v for k, v in tail.conversations.items() if k != c})
    elif damage == "author":
        bad = replace(tail, conversations={**tail.conversations, c: (last, n, [*who, "nobody"])})
    elif damage == "last":
        bad = replace(tail, conversations={**tail.conversations, c: (last - 500, n, who)})
    else:  # the same conversation, named by a message after the channel's last
        later = tail.size + 7
        renamed = {(later if k == c else k): v for k, v in tail.conversations.items()}
        bad = replace(tail, tail=[later if x == c else x for x in tail.tail], conversations=renamed)
    run.tails = {name: bad}
    last_message = messages[-1]
    new = replace(last_message, unit_id="new", timestamp=last_message.timestamp + 60)
    again = _again(run, [*messages, new])
    assert again.channels_relinked == 1 and again.from_window == 0


def test_a_deletion_drops_the_tails_with_the_links_it_removes(tmp_path: Path) -> None:
    source = tmp_path / "wattle"
    shutil.copytree(SAMPLE, source)
    settings = configure(tmp_path, source)
    assert link(settings).passed
    home = Home(settings)
    links = home.warehouse.read("conversation_links", ("wattle",))
    assert links is not None and read_tails(links)
    gone = str(links["source_id"][0])
    receipt = propagate_deletion(home, "wattle", [gone], namespace="messages", reason="test")
    assert receipt is not None
    after = home.warehouse.read("conversation_links", ("wattle",))
    assert after is not None and 0 < after.num_rows < links.num_rows
    assert gone not in set(after["source_id"].to_pylist())
    assert TAILS_KEY not in (after.schema.metadata or {}) and read_tails(after) == {}
    # the next run keeps the channels' tails anew
    again = link(settings)
    assert again.passed and again.from_window == 0
    kept = home.warehouse.read("conversation_links", ("wattle",))
    assert kept is not None and read_tails(kept)


@pytest.mark.parametrize("seed", [1, 2])
def test_a_quiet_or_short_channel_is_decided_whole(seed: int) -> None:
    """A channel too short to hold a TF-IDF block and a window before its new message has
    nothing to cut: it is decided whole, to the same links."""
    messages = sorted(stream(TOPIC_BLOCK // 2, channels=1, seed=seed), key=lambda m: m.timestamp)
    run = _first(messages[:-1])
    again = _again(run, messages)
    assert again.channels_relinked == 1 and again.from_window == 0
