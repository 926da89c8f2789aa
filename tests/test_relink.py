"""Re-linking only what changed gives the conversations a full re-link gives."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import replace

import pytest

from corpus_index.linked import relink
from corpus_index.linked.conversations import group_conversations
from corpus_index.linked.groups import link_units
from corpus_index.linked.messages import Message
from corpus_index.linked.model import LinkModel
from corpus_index.linked.relink import (
    LINK_COLUMNS_FIRST,
    Relinker,
    linked_conversations,
    links_table,
    read_links,
)
from corpus_index.linked.topic import FIRST_WEIGHED, TOPIC_BLOCK
from tests.streamgen import stream
from tests.test_linked_contexts import sample


def canon(conversations: list[list[str]]) -> list[tuple[str, ...]]:
    return sorted(tuple(sorted(c)) for c in conversations)


def relinked(previous: Relinker, messages: list[Message]) -> Relinker:
    """A second run from the first's links, through their table (as the step keeps them)."""
    again = Relinker(read_links(links_table(previous.links)))
    assert canon(again.group(messages)) == canon(group_conversations(messages))
    return again


@pytest.fixture(scope="module")
def long_stream() -> list[Message]:
    """Two channels; one longer than a TF-IDF block, so a change at its end keeps a prefix."""
    other = [replace(m, unit_id=f"o{m.unit_id}", channel="#other") for m in stream(300, seed=8)]
    both = [*stream(TOPIC_BLOCK + 300, channels=1, seed=7), *other]
    return sorted(both, key=lambda m: (m.timestamp, m.unit_id))


@pytest.fixture(scope="module")
def first(long_stream: list[Message]) -> Relinker:
    first = Relinker()
    assert canon(first.group(long_stream)) == canon(group_conversations(long_stream))
    assert first.reused == 0 and first.relinked == len(long_stream)
    return first


def test_the_links_alone_give_the_conversations(
    first: Relinker, long_stream: list[Message]
) -> None:
    """Each link names its message and time: the conversations come from the table alone, the
    same as the relinker's, each in time order."""
    by_id = {m.unit_id: m for m in long_stream}
    read = linked_conversations(read_links(links_table(first.links)))
    assert canon([[x.unit_id for x in c] for c in read]) == canon(group_conversations(long_stream))
    for conversation in read:
        assert [x.timestamp for x in conversation] == [
            by_id[x.unit_id].timestamp for x in conversation
        ]
        assert len({x.channel for x in conversation}) == 1


def test_links_an_earlier_version_wrote_still_relink(
    first: Relinker, long_stream: list[Message]
) -> None:
    """A table without ``unit_id`` and ``timestamp`` (an earlier version's) is read with them
    empty and reused whole; only the conversations-from-links reading refuses it, by name."""
    old = links_table(first.links).select(list(LINK_COLUMNS_FIRST))
    again = Relinker(read_links(old))
    assert canon(again.group(long_stream)) == canon(group_conversations(long_stream))
    assert again.relinked == 0 and again.links == first.links  # written whole again
    with pytest.raises(ValueError, match="no unit id"):
        linked_conversations(read_links(old))


def test_a_removed_parent_starts_its_links_own_conversation(first: Relinker) -> None:
    """A deletion drops a source's link rows before the next run links the channel again:
    the links whose parent is gone start their own conversations (none is lost or doubled)."""
    links = first.links
    continued = next(x for x in links if x.parent != x.position)
    gone = next(
        x for x in links if x.channel == continued.channel and x.position == continued.parent
    )
    left = [x for x in links if x is not gone]
    read = linked_conversations(left)
    assert sorted(x.unit_id for c in read for x in c) == sorted(x.unit_id for x in left)
    assert any(c[0].unit_id == continued.unit_id for c in read)


def test_nothing_changed_decides_nothing_again(first: Relinker, long_stream: list[Message]) -> None:
    again = relinked(first, long_stream)
    assert again.relinked == 0 and again.channels_relinked == 0
    assert again.links == first.links


def test_a_new_message_past_the_first_block_relinks_only_itself(
    first: Relinker, long_stream: list[Message]
) -> None:
    counts = Counter(m.channel for m in long_stream)
    channel, size = counts.most_common(1)[0]
    assert size > TOPIC_BLOCK
    last = long_stream[-1]
    new = replace(last, unit_id="new", channel=channel, text="Sarah: van booked for thursday", timestamp=last.timestamp + 60)  # fmt: skip
    again = relinked(first, [*long_stream, new])
    assert again.channels_relinked == 1
    assert again.relinked == 1  # neither its block nor the whole channel
    assert again.reused == len(long_stream)


def test_a_new_message_among_a_channels_first_messages_relinks_that_channel(
    long_stream: list[Message],
) -> None:
    """A channel's first messages are weighed together (FIRST_WEIGHED), so a new one among
    them changes its channel's similarities: that channel is decided again from the start
    (and no other channel)."""
    short = [replace(m, unit_id=f"s{m.unit_id}", channel="#short") for m in stream(40, seed=9)]
    assert len(short) < FIRST_WEIGHED
    messages = sorted([*long_stream, *short], key=lambda m: (m.timestamp, m.unit_id))
    first = Relinker()
    first.group(messages)
    new = replace(short[-1], unit_id="snew", text="Sarah: van booked for thursday", timestamp=short[-1].timestamp + 60)  # fmt: skip
    again = relinked(first, [*messages, new])
    assert again.channels_relinked == 1
    assert again.relinked == len(short) + 1
    assert again.reused == len(long_stream)


@pytest.mark.parametrize("where", ["edit", "delete", "late"])
def test_changes_anywhere_give_what_a_full_relink_gives(
    first: Relinker, long_stream: list[Message], where: str
) -> None:
    messages = list(long_stream)
    k = len(messages) // 3
    if where == "edit":
        messages[k] = replace(messages[k], text="the plumber fixed the bathroom leak")
    elif where == "delete":
        del messages[k]
    else:  # a message arriving late, dated among the older ones
        messages.append(replace(messages[k], unit_id="late", timestamp=messages[k].timestamp + 1))
    again = relinked(first, messages)
    assert again.relinked >= 1


def test_other_weights_relink_everything(first: Relinker, long_stream: list[Message]) -> None:
    shipped = LinkModel.load()
    other = replace(shipped, self_weights=(shipped.self_weights[0] + 0.5, *shipped.self_weights[1:]))  # fmt: skip
    again = Relinker(first.links, model=other)
    assert canon(again.group(long_stream)) == canon(group_conversations(long_stream, model=other))
    assert again.reused == 0


@pytest.mark.parametrize("version", ["RESPONSES_VERSION", "FEATURES_VERSION"])
def test_another_version_of_the_rule_pass_or_the_features_relinks_everything(
    first: Relinker, long_stream: list[Message], monkeypatch: pytest.MonkeyPatch, version: str
) -> None:
    """Links kept from a run whose replies were read by another version of
    corpus_index/linked/responses.py, or whose features another version of
    corpus_index/linked/features.py computed, are decided again, not reused."""
    same = Relinker(first.links)
    same.group(long_stream)
    assert same.reused == len(long_stream)
    monkeypatch.setattr(relink, version, "v0")
    again = Relinker(first.links)
    assert canon(again.group(long_stream)) == canon(group_conversations(long_stream))
    assert again.reused == 0


def test_links_of_the_earlier_fingerprint_are_decided_again(
    first: Relinker, long_stream: list[Message]
) -> None:
    """Links kept with fingerprints of the earlier form (sha256 of the fields' JSON) match no
    message: every one is decided again, to the same conversations."""
    model = relink.model_digest(LinkModel.load())

    def earlier(m: Message) -> str:
        data = [model, m.unit_id, m.author, m.text, m.timestamp, m.reply_to, list(m.mentions)]
        raw = json.dumps([*data, m.system], sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(raw.encode("utf-8")).hexdigest()

    of = {relink.fingerprint(m, model=model): m for m in long_stream}
    old = [x._replace(fingerprint=earlier(of[x.fingerprint])) for x in first.links]
    assert len(old) == len(long_stream)
    assert all(o.fingerprint != x.fingerprint for o, x in zip(old, first.links, strict=True))
    again = Relinker(old)
    assert canon(again.group(long_stream)) == canon(group_conversations(long_stream))
    assert again.reused == 0 and again.relinked == len(long_stream)


@pytest.mark.parametrize(
    "change",
    [
        {"unit_id": "other"},
        {"author": "someone else"},
        {"text": "another text"},
        {"timestamp": 1.5},
        {"reply_to": "m1"},
        {"mentions": ("Sarah",)},
        {"system": True},
    ],
    ids=lambda c: next(iter(c)),
)
def test_a_fingerprint_moves_with_what_linking_reads(
    long_stream: list[Message], change: dict[str, object]
) -> None:
    m = long_stream[5]
    assert relink.fingerprint(replace(m, **change), model="w") != relink.fingerprint(m, model="w")  # type: ignore[arg-type]
    assert relink.fingerprint(m, model="w2") != relink.fingerprint(m, model="w")
    assert relink.fingerprint(replace(m), model="w") == relink.fingerprint(m, model="w")


@pytest.mark.parametrize("tenant", ["wattle", "bluegum"])
def test_the_sample_links_the_same_groups_from_an_earlier_run(tenant: str) -> None:
    units = list(sample(tenant))
    chat = [u for u in units if u.source == "discord_chat"]
    dropped = chat[len(chat) // 2]  # the earlier run did not have this message yet
    earlier = Relinker()
    link_units([u for u in units if u is not dropped], relinker=earlier)
    later = Relinker(earlier.links)
    assert link_units(units, relinker=later) == link_units(units)
    assert later.reused > 0 and later.relinked > 0


def test_a_kept_link_names_the_document_its_message_comes_from_now(
    long_stream: list[Message],
) -> None:
    """A message as it was, moved to another document: its link is kept (not decided again)
    but names the new document, so deleting that document removes it; the other links are
    the earlier ones."""
    sources = {m.unit_id: "chat/a.jsonl" for m in long_stream}
    first = Relinker(sources=sources)
    first.group(long_stream)
    moved = long_stream[len(long_stream) // 2].unit_id
    again = Relinker(
        read_links(links_table(first.links)), sources={**sources, moved: "chat/b.jsonl"}
    )
    assert canon(again.group(long_stream)) == canon(group_conversations(long_stream))
    assert again.relinked == 0
    changed = [(x, y) for x, y in zip(first.links, again.links, strict=True) if x != y]
    assert [(y.unit_id, y.source_id) for _, y in changed] == [(moved, "chat/b.jsonl")]
    assert changed[0][0]._replace(source_id="chat/b.jsonl") == changed[0][1]
