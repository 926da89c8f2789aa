"""The timeline of a channel's conversations, read from the links alone: every message of the
window drawn once, on its conversation's lane, each reply's arc ending at it and starting at
the message it continues."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from markdown_it import MarkdownIt

from corpus_index import conversation_timeline as ct
from corpus_index.conversation_timeline import as_json, picture, strips, timeline
from corpus_index.linked.groups import conversation_groups
from corpus_index.linked.messages import Message
from corpus_index.linked.records import group_id
from corpus_index.linked.relink import Link, Relinker
from corpus_index.plots import bar_chart, markdown_image
from tests.streamgen import stream


@pytest.fixture(scope="module")
def linked() -> tuple[list[Message], list[Link]]:
    """A busy channel and a quiet one, linked."""
    busy = stream(400, channels=1, seed=3)
    quiet = [replace(m, unit_id=f"q{m.unit_id}", channel="#quiet") for m in stream(60, seed=4)]
    messages = sorted([*busy, *quiet], key=lambda m: (m.timestamp, m.unit_id))
    relinker = Relinker(tenant_id="t1")
    relinker.group(messages)
    return messages, relinker.links


def test_every_message_of_the_window_is_drawn_once_on_its_conversations_lane(
    linked: tuple[list[Message], list[Link]],
) -> None:
    messages, links = linked
    t = timeline(links, collection="c", messages=120)
    assert t is not None and t.tenant_id == "t1"
    mine = sorted((x for x in links if x.channel == t.channel), key=lambda x: x.position)
    window = mine[-120:]
    assert t.start == window[0].timestamp and t.end == window[-1].timestamp
    assert t.messages == 120 and t.hidden == 0
    drawn = sorted(p for lane in t.lanes for p in lane.places)
    assert drawn == list(range(120))
    unit_at = {k: x.unit_id for k, x in enumerate(window)}
    by_id = {m.unit_id: m for m in messages}
    conversations = {
        group_id("t1", "c", "conversation", g.member_ids)[:12]: set(g.member_ids)
        for g in conversation_groups([by_id[x.unit_id] for x in mine])
    }
    for lane in t.lanes:
        units = {unit_at[p] for p in lane.places}
        assert [by_id[unit_at[p]].timestamp for p in lane.places] == list(lane.times)
        if lane.alone:
            assert all(len(c & units) == 0 for c in conversations.values())
            continue
        size, gid = lane.label.split(" messages · ")
        assert units <= conversations[gid] and int(size) == len(conversations[gid])
        for a, b in lane.edges:  # an arc ends at one of the lane's dots, after its start
            assert b in lane.places and a < b and (a == -1 or a in lane.places)


def test_the_busiest_channel_is_drawn_unless_one_is_named(
    linked: tuple[list[Message], list[Link]],
) -> None:
    _, links = linked
    busiest = timeline(links, collection="c")
    assert busiest is not None and busiest.channel.endswith("#site-0")
    quiet = timeline(
        links, collection="c", channel=next(x.channel for x in links if "quiet" in x.channel)
    )
    assert quiet is not None and quiet.channel.endswith("#quiet") and quiet.messages == 60
    assert sorted(busiest.channels) == busiest.channels and quiet.channel in busiest.channels


def test_a_window_of_hours_ends_at_the_channels_newest_message(
    linked: tuple[list[Message], list[Link]],
) -> None:
    _, links = linked
    t = timeline(links, collection="c", hours=6)
    assert t is not None and t.end - t.start == 6 * 3600
    newest = [x for x in links if x.channel == t.channel and x.timestamp >= t.start]
    assert t.messages == len(newest) and t.end == max(x.timestamp for x in newest)


def test_lanes_past_the_limit_are_counted_not_drawn(
    linked: tuple[list[Message], list[Link]], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, links = linked
    whole = timeline(links, collection="c", messages=120)
    assert whole is not None and whole.hidden == 0
    drawn = [lane for lane in whole.lanes if not lane.alone]
    monkeypatch.setattr(ct, "MAX_LANES", 3)
    cut = timeline(links, collection="c", messages=120)
    assert cut is not None
    assert len([lane for lane in cut.lanes if not lane.alone]) == 3
    assert cut.hidden == len(drawn) - 3 and cut.conversations == whole.conversations
    assert cut.messages == whole.messages == 120  # the hidden lanes' messages still counted
    assert len(strips(cut)) == 1 + len(cut.lanes)  # every place still maps into the strip
    longest = sorted(drawn, key=lambda lane: (-len(lane.places), lane.places[0]))[:3]
    assert {lane.label for lane in cut.lanes if not lane.alone} == {x.label for x in longest}


def test_the_picture_is_a_png(linked: tuple[list[Message], list[Link]]) -> None:
    _, links = linked
    t = timeline(links, collection="c")
    assert t is not None
    png = picture(t, "c")
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert width == 990 and height > 300  # 9 inches at 110 dpi; a row a lane


def test_the_terminal_strips_mark_each_message_once(
    linked: tuple[list[Message], list[Link]],
) -> None:
    """A window no wider than the strip: a column a message, each lane's marks at its places,
    dashes only between its first and last."""
    _, links = linked
    t = timeline(links, collection="c", messages=50)
    assert t is not None
    heading, *rows = strips(t, width=60)
    assert heading.startswith(f"{t.channel} (t1): 50 messages, ")
    assert len(rows) == len(t.lanes)
    for lane, row in zip(t.lanes, rows, strict=True):
        label, cells = row.split("  |", 1)
        cells = cells.removesuffix("|")
        assert label.strip() == lane.label and len(cells) == 50
        mark = "." if lane.alone else "o"
        assert [k for k, c in enumerate(cells) if c == mark] == sorted(lane.places)
        inside = set(cells[min(lane.places) : max(lane.places) + 1])
        assert inside <= ({mark, " "} if lane.alone else {mark, "-"})
        assert set(cells) <= {mark, "-", " "}
    assert as_json(t)["messages"] == 50


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"channel": "#nowhere"}, "'#nowhere' has no messages"),
        ({"messages": 0}, "messages must be from 1"),
        ({"messages": ct.MAX_MESSAGES + 1}, "messages must be from 1"),
        ({"hours": -1.0}, "hours must be from 0"),
    ],
)
def test_a_bad_request_is_refused_by_name(
    linked: tuple[list[Message], list[Link]], options: dict[str, object], error: str
) -> None:
    _, links = linked
    with pytest.raises(ValueError, match=error):
        timeline(links, collection="c", **options)  # type: ignore[arg-type]


def test_a_time_no_date_holds_leaves_its_label_blank_not_the_timeline_broken() -> None:
    """Units indexed before their years were checked (year 0 or 10000 in UTC) still draw."""
    links = [
        Link("#audit", 0, "f0", 0, unit_id="u0", timestamp=-62135647200.0),  # year 0 UTC
        Link("#audit", 1, "f1", 0, unit_id="u1", timestamp=0.0),
        Link("#audit", 2, "f2", 2, unit_id="u2", timestamp=253402351199.0),  # year 10000 UTC
    ]
    t = timeline(links, collection="c", messages=3)
    assert t is not None and [label for _, label in t.ticks] == ["?", "01 Jan 00:00", "?"]
    assert strips(t)[0].startswith("#audit (): 3 messages, ? to ? UTC")
    assert picture(t, "c").startswith(b"\x89PNG")


def test_no_links_no_timeline() -> None:
    assert timeline([], collection="c") is None


def test_a_channel_named_with_dollar_signs_is_drawn_as_named() -> None:
    """A channel named after an e-mail's subject may hold two ``$``: the picture draws the
    name, never reading it as matplotlib's mathtext (which failed on this one)."""
    channel = "email_thread/Re: $5 off_$10 orders"
    links = [
        Link(channel, i, f"f{i}", max(i - 1, 0), unit_id=f"u{i}", timestamp=1.7e9 + 60 * i)
        for i in range(5)
    ]
    t = timeline(links, collection="c")
    assert t is not None and t.channel == channel
    assert picture(t, "c").startswith(b"\x89PNG")
    chart = bar_chart({"Re: $5 off_$10 orders": {"ndcg@10": 0.5}}, ["ndcg@10"], title="$_$")
    assert chart.startswith(b"\x89PNG")


@pytest.mark.parametrize(
    "channel", ["email_thread/Re: leak] fixed", "email_thread/[EXT] Re: leak", "irc/#c\\]d"]
)
def test_the_pictures_markdown_is_an_image_whatever_the_channel_is_named(channel: str) -> None:
    """The UI renders the ``picture`` metadata as CommonMark: a bracket or a backslash in the
    channel's name (the alt text) must not turn the image into its base64 as text."""
    html = MarkdownIt("commonmark").render(markdown_image(b"\x89PNG", f"{channel} conversations"))
    assert html.startswith('<p><img src="data:image/png;base64,iVBORw=="')
    assert f'alt="{channel} conversations"' in html


def test_a_metric_an_evaluation_did_not_measure_is_not_drawn_as_a_zero() -> None:
    """``corpus eval --k 1,10`` measures no recall@5: the evaluations' chart says n/a there
    (as for a NaN), never a bar of 0.000 beside the measured ones."""
    metrics = ["ndcg@10", "recall@5"]
    measured = {"ndcg@10": 0.61, "recall@10": 0.7}
    missing = bar_chart({"scifact hybrid g0001": measured}, metrics, title="retrieval evals")
    nan = bar_chart(
        {"scifact hybrid g0001": {**measured, "recall@5": math.nan}},
        metrics,
        title="retrieval evals",
    )
    zero = bar_chart(
        {"scifact hybrid g0001": {**measured, "recall@5": 0.0}}, metrics, title="retrieval evals"
    )
    assert missing == nan != zero


def test_a_window_of_hours_draws_at_most_the_newest_max_messages() -> None:
    """A busy channel's hours hold more messages than a picture may draw: the newest
    MAX_MESSAGES are drawn and the earlier ones counted (every message of a year of hours was
    drawn, a reply an arc each: 20,000 messages took 10 s and a year's channel minutes)."""
    n = ct.MAX_MESSAGES + 300
    links = [
        Link(
            "#busy",
            i,
            f"f{i}",
            max(i - 1, 0),
            tenant_id="t1",
            unit_id=f"u{i}",
            timestamp=1.75e9 + i,
        )
        for i in range(n)
    ]
    t = timeline(links, collection="c", hours=24)
    assert t is not None
    assert t.messages == ct.MAX_MESSAGES and t.earlier == 300
    assert t.start == links[300].timestamp and t.end == links[-1].timestamp
    assert sorted(p for lane in t.lanes for p in lane.places) == list(range(ct.MAX_MESSAGES))
    assert "300 earlier messages of the 24 hours not drawn" in strips(t)[0]
    assert as_json(t)["earlier"] == 300
