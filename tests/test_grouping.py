"""Conversation grouping (``corpus_index.linked``): the scoring of SOURCE.md on hand-made cases
with known values, the clusters format, the irc reader, and grouping a tiny log."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corpus_index.errors import ConfigError, ParseError
from corpus_index.grouping_eval import evaluate_grouping
from corpus_index.linked import conversations
from corpus_index.linked.clusters import (
    ANNOTATED_FROM,
    format_clusters,
    from_index,
    gold_named,
    parse_clusters,
    read_clusters,
    write_clusters,
)
from corpus_index.linked.conversations import (
    decode,
    five_minute_rule,
    group_conversations,
    link_parents,
)
from corpus_index.linked.features import channel_features
from corpus_index.linked.irc import log_date, parse_log, read_folder
from corpus_index.linked.messages import Message
from corpus_index.linked.model import Example, LinkModel, fit
from corpus_index.linked.scoring import score
from corpus_index.linked.topic import band_similarity

EVALDATA = Path("/work/shared/evaldata/irc-disentanglement")

# -- scoring ------------------------------------------------------------------------------------


def ids(stem: str, *indices: int) -> list[str]:
    return [f"{stem}:{i}" for i in indices]


def test_identical_groupings_score_full_marks() -> None:
    gold = [ids("a", 0, 1, 2), ids("a", 3), ids("b", 0, 1)]
    s = score(gold, [list(reversed(c)) for c in reversed(gold)])
    assert (s.vi, s.one_to_one, s.precision, s.recall, s.f) == (100.0, 100.0, 100.0, 100.0, 100.0)
    assert (s.messages, s.gold_conversations, s.auto_conversations) == (6, 2, 2)


@pytest.mark.parametrize(
    ("gold", "auto", "vi", "one", "p", "r"),
    [
        # two gold pairs merged: H(A|G) = 0, H(G|A) = 1 bit, log2 4 = 2
        ([ids("a", 0, 1), ids("a", 2, 3)], [ids("a", 0, 1, 2, 3)], 50.0, 50.0, 0.0, 0.0),
        # joint counts (A1,G1)=2, (A2,G1)=1, (A2,G2)=1: H(G|A) = 0.5, H(A|G) = the rest
        (
            [ids("a", 0, 1, 2), ids("a", 3)],
            [ids("a", 0, 1), ids("a", 2, 3)],
            100 * (1 - (0.5 + 0.5 * math.log2(3 / 2) + 0.25 * math.log2(3)) / 2),
            75.0,
            0.0,
            0.0,
        ),
        # one of two non-singleton conversations found exactly on each side
        (
            [ids("a", 0, 1), ids("a", 2, 3), ids("a", 4)],
            [ids("a", 0, 1), ids("a", 2), ids("a", 3, 4)],
            None,
            80.0,
            50.0,
            50.0,
        ),
    ],
)
def test_scores_of_hand_made_cases(
    gold: list[list[str]], auto: list[list[str]], vi: float | None, one: float, p: float, r: float
) -> None:
    s = score(gold, auto)
    if vi is not None:
        assert s.vi == pytest.approx(vi)
    assert s.one_to_one == pytest.approx(one)
    assert (s.precision, s.recall) == pytest.approx((p, r))
    assert s.f == pytest.approx(2 * p * r / (p + r) if p + r else 0.0)


def test_everything_singletons_against_one_conversation() -> None:
    gold = [ids("a", 0, 1, 2, 3)]
    s = score(gold, [])  # messages no auto conversation holds are singletons
    assert s.vi == pytest.approx(0.0)  # H(A|G) = log2 4 = the scale
    assert s.one_to_one == pytest.approx(25.0)
    assert (s.auto_conversations, s.f) == (0, 0.0)


def test_scoring_looks_only_at_gold_messages_and_matches_within_each_log() -> None:
    gold = [ids("a", 0, 1), ids("b", 0, 1)]
    # the unannotated a:9 is cut away; b:0 and b:1 share a conversation index with nothing in a
    s = score(gold, [ids("a", 0, 1, 9), ids("b", 0, 1)])
    assert (s.one_to_one, s.f) == (100.0, 100.0)


def test_a_message_in_two_conversations_is_refused() -> None:
    with pytest.raises(ValueError, match="a:1 is in two auto"):
        score([ids("a", 0, 1)], [ids("a", 0, 1), ids("a", 1)])
    with pytest.raises(ValueError, match="no gold"):
        score([], [ids("a", 0)])


# -- the clusters format --------------------------------------------------------------------------


def test_clusters_round_trip(tmp_path: Path) -> None:
    clusters = [ids("2004-11-15_03", 1031), ids("2004-11-15_03", 1021, 1018), ids("b.train-c", 4)]
    text = format_clusters(clusters)
    assert text == "2004-11-15_03:1018 1021\n2004-11-15_03:1031\nb.train-c:4\n"
    write_clusters(tmp_path / "c.txt", clusters)
    assert read_clusters(tmp_path / "c.txt") == parse_clusters(text)
    assert parse_clusters(text)[0] == ids("2004-11-15_03", 1018, 1021)


def test_malformed_clusters_name_their_line(tmp_path: Path) -> None:
    with pytest.raises(ParseError, match=r"c\.txt:2: expected"):
        parse_clusters("a:1 2\nno-index 3\n", path="c.txt")
    # a message in two conversations is refused where it is read, not when it is scored
    with pytest.raises(ParseError, match=r"c\.txt:3: a:2 is in the conversation of line 1"):
        parse_clusters("a:1 2\nb:2\na:2 3\n", path="c.txt")
    (tmp_path / "c.txt").write_bytes(b"a:1 2\nb:1\xe9\n")
    with pytest.raises(ParseError, match=r"c\.txt:2: not UTF-8"):
        read_clusters(tmp_path / "c.txt")
    with pytest.raises(ValueError, match="spans logs a, b"):
        format_clusters([["a:1", "b:2"]])


@pytest.mark.parametrize(
    ("stems", "gold", "named"),
    [
        # the train split's files are <date>.train-<x>, its gold names <date>; dev's the stem
        (["2004-12-25.train-c", "2004-11-15_03"], [], ["2004-12-25", "2004-11-15_03"]),
        # a stem the gold names whole keeps it
        (["a.b"], [["a.b:0"]], ["a.b"]),
        # two logs of one date each keep their own stem: their ids never merge
        (["d.train-a", "d.train-b", "e.train-c"], [], ["d.train-a", "d.train-b", "e"]),
        (["d", "d.train-c"], [], ["d", "d.train-c"]),
    ],
)
def test_clusters_are_named_as_the_gold_files_name_them(
    stems: list[str], gold: list[list[str]], named: list[str]
) -> None:
    clusters = [ids(stem, 3, 1) for stem in stems]
    assert gold_named(clusters, gold=gold) == [ids(n, 3, 1) for n in named]


# -- the irc layout ----------------------------------------------------------------------------

LOG = """\
[10:00] <alice> how do I mount a usb drive?
[10:00] <bob> anyone know a good irc client for gnome?
[10:01] <carol> alice: plug it in and it mounts under /media
[10:01] <dave> bob: try xchat, it is a nice client
=== eve [~eve@example.org] has joined #ubuntu
[10:02] <alice> carol: thanks, found the drive under /media
[10:02] <bob> dave: xchat works great, thanks
[10:02]  * carol waves
"""
STEM = "2020-01-02_10"


def test_irc_lines_authors_times_and_system_lines() -> None:
    lines = parse_log(LOG)
    assert [(x.index, x.author, x.system) for x in lines][3:5] == [
        (3, "dave", False),
        (4, "eve", True),
    ]
    assert (lines[7].author, lines[7].text, lines[7].minute) == ("carol", "waves", 602)
    assert log_date("2004-12-25.train-c") is not None and log_date("notes") is None


def test_irc_clock_runs_past_midnight() -> None:
    lines = parse_log("[23:59] <a> late\n=== b has quit\n[00:01] <b> early\n")
    assert [x.minute for x in lines] == [1439, None, 1441]


def test_a_stamp_that_is_no_time_of_day_is_no_clock() -> None:
    """``[25:99]`` taken as 25 h 99 min would make the next ``[10:01]`` 'more than an hour
    back', dating every later line the next day: it is a line in no layout instead."""
    lines = parse_log("[10:00] <a> x\n[25:99] <b> y\n[10:01] <c> z\n[09:60]  * d waves\n")
    assert [x.minute for x in lines] == [600, None, 601, None]
    assert (lines[1].system, lines[1].text) == (True, "[25:99] <b> y")


def test_grouping_untangles_two_interleaved_conversations(tmp_path: Path) -> None:
    (tmp_path / f"{STEM}.ascii.txt").write_text(LOG, encoding="utf-8")
    messages = read_folder(tmp_path)[STEM]
    assert [m.unit_id for m in messages] == ids(STEM, *range(8))
    ours = sorted(sorted(c) for c in group_conversations(messages))
    assert ours == sorted([ids(STEM, 0, 2, 5, 7), ids(STEM, 1, 3, 6), ids(STEM, 4)])
    assert len(five_minute_rule(messages)) == 1  # the channel-wide rule merges them all
    assert score([ids(STEM, 0, 2, 5, 7), ids(STEM, 1, 3, 6)], ours).f == 100.0


def test_grouping_a_folder_of_logs_only_writes_every_line(tmp_path: Path) -> None:
    (tmp_path / f"{STEM}.ascii.txt").write_text(LOG, encoding="utf-8")
    (tmp_path / "2020-01-03_11.ascii.txt").write_text("[11:00] <zed> hello\n", encoding="utf-8")
    logs = read_folder(tmp_path)  # no annotation or gold file anywhere
    clusters = group_conversations([m for ms in logs.values() for m in ms])
    written = parse_clusters(format_clusters(clusters))
    assert sorted(u for c in written for u in c) == sorted(
        [*ids(STEM, *range(8)), "2020-01-03_11:0"]
    )


def test_a_train_log_is_scored_and_written_under_its_gold_files_ids(tmp_path: Path) -> None:
    """The train split's logs are ``<date>.train-<x>.ascii.txt``, its gold clusters name
    ``<date>:<index>``: scored under the log's own ids, no gold message is found among ours
    and a perfect grouping scores F 0."""
    folder = tmp_path / "train"
    folder.mkdir()
    (folder / "2020-01-02.train-c.ascii.txt").write_text(LOG, encoding="utf-8")
    gold = tmp_path / "gold.train.clusters.txt"
    write_clusters(gold, [ids("2020-01-02", 0, 2, 5, 7), ids("2020-01-02", 1, 3, 6)])
    report = evaluate_grouping(folder)  # in-process: the pipeline's reader and grouper
    assert report.scores is not None and report.scores.f == 100.0, report.scores
    assert sorted(map(sorted, report.conversations))[0] == ids("2020-01-02", 0, 2, 5, 7)


def test_only_the_gold_of_logs_grouped_is_scored(tmp_path: Path) -> None:
    """Gold conversations of a log the folder does not hold would each count as messages of
    ours left alone: a perfect grouping of the folder's log scores far below 100."""
    folder = tmp_path / "dev"
    folder.mkdir()
    (folder / f"{STEM}.ascii.txt").write_text(LOG, encoding="utf-8")
    gold = [ids(STEM, 0, 2, 5, 7), ids(STEM, 1, 3, 6), ids(STEM, 4)]
    write_clusters(tmp_path / "gold.dev.clusters.txt", [*gold, ids("2020-01-09_10", 0, 1, 2)])
    report = evaluate_grouping(folder)
    assert report.scores is not None and report.gold_logs_skipped == ["2020-01-09_10"]
    assert report.scores.messages == 8, report.scores  # the folder's log's
    assert (report.scores.vi, report.scores.one_to_one, report.scores.f) == (100.0,) * 3
    write_clusters(tmp_path / "gold.dev.clusters.txt", [ids("2020-01-09_10", 0, 1, 2)])
    with pytest.raises(ConfigError, match=r"no conversation of a log grouped in .*2020-01-09_10"):
        evaluate_grouping(folder)


@pytest.mark.skipif(not EVALDATA.is_dir(), reason="no irc-disentanglement data")
def test_the_clusters_of_a_real_train_log_name_its_gold_files_messages(tmp_path: Path) -> None:
    folder = tmp_path / "train"
    folder.mkdir()
    name = "2004-12-25.train-c.ascii.txt"
    (folder / name).write_bytes((EVALDATA / "train" / name).read_bytes())
    report = evaluate_grouping(folder, score_it=False)
    written = parse_clusters(format_clusters(from_index(report.conversations, ANNOTATED_FROM)))
    gold = {u for c in read_clusters(EVALDATA / "gold.train.clusters.txt") for u in c}
    ours = {u for c in written for u in c}
    assert ours and ours <= gold, sorted(ours - gold)[:3]


def test_an_explicit_reply_wins_however_far_back() -> None:
    messages = [Message(f"c:{i}", "c", f"user{i}", f"topic {i} words", 60.0 * i) for i in range(80)]
    messages.append(Message("c:80", "c", "late", "yes, that", 60.0 * 80, reply_to="c:2"))
    parents = link_parents(messages)
    assert parents[80] == 2  # 78 messages back, beyond the model's window


def test_a_conversation_silent_past_two_days_is_not_continued_by_the_models_choice() -> None:
    """Someone addressed days after their last exchange is asked something new (the model,
    trained on irc, where nobody is silent for days, would continue that exchange); an
    explicit reply still continues it."""
    day = 24 * 3600.0

    def channel(gap_days: float, reply_to: str | None = None) -> list[Message]:
        return [
            Message("r1", "#house", "Sarah J", "Roster is up for next week, swaps to me", 0.0),
            Message("r2", "#house", "DanK", "I can swap my Tuesday night", 600.0),
            Message("r3", "#house", "Sarah J", "done, updated", 1200.0),
            Message(
                "m1",
                "#house",
                "DanK",
                "Sarah the MAR for Amelia has a gap at 8pm, I've done the incident report",
                1200.0 + gap_days * day,
                reply_to=reply_to,
            ),
        ]

    assert link_parents(channel(1.5))[3] != 3  # a day and a half: the model continues it
    assert link_parents(channel(3))[3] == 3  # three days: a conversation of its own
    assert link_parents(channel(3, reply_to="r3"))[3] == 2


def test_named_people_in_mentions_link_messages_of_other_sources() -> None:
    messages = [
        Message("m1", "staff", "Sarah Jones", "Who is cooking on the 25th?", 0.0),
        Message("m2", "staff", "Mike", "Van is booked for Friday", 30.0),
        Message("m3", "staff", "Jane", "Sarah I can cook, roast pumpkin?", 90.0),
    ]
    pair = channel_features(messages, window=2).pair_rows(0, 3)
    assert pair[2, 1, 15] == 1.0  # m3 names m1's author (first name) two back
    assert pair[2, 0, 15] == 0.0


# -- the model ---------------------------------------------------------------------------------


def test_shipped_weights_load_and_round_trip(tmp_path: Path) -> None:
    model = LinkModel.load()
    assert model.window > 0 and "train" in model.trained_on
    model.save(tmp_path / "w.json")
    again = LinkModel.load(tmp_path / "w.json")
    assert again.window == model.window
    assert again.pair_weights == pytest.approx(model.pair_weights, abs=1e-6)
    (tmp_path / "bad.json").write_text('{"format": "other"}', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad\.json: weights format .other., expected"):
        LinkModel.load(tmp_path / "bad.json")


def test_fit_learns_what_the_gold_links_say() -> None:
    # every message replies to the one two back (two interleaved threads of one author each)
    messages = [Message(f"c:{i}", "c", "ab"[i % 2], f"w{i}", 10.0 * i) for i in range(40)]
    window = 3
    gold = np.zeros((40, 1 + window), dtype=bool)
    gold[:2, 0] = True
    gold[2:, 2] = True
    features = channel_features(messages, window=window)
    example = Example(features.pair_rows(0, 40), features, gold)
    model = fit([example], window=window, l2=0.01)
    again = fit([example], window=window, l2=0.01)
    assert model == again  # deterministic
    assert link_parents(messages, model=model)[2:] == list(range(38))


def test_five_minute_rule_follows_the_channel_clock() -> None:
    times = [0, 60, 400, 420, 1000]  # gaps 1, 5.7, 0.3 and 9.7 minutes
    messages = [Message(f"c:{i}", "c", "a", "x", float(t)) for i, t in enumerate(times)]
    messages.insert(2, Message("c:9", "c", "", "=== b joined", 380.0, system=True))
    assert sorted(map(sorted, five_minute_rule(messages))) == [
        ["c:0", "c:1"],
        ["c:2", "c:3", "c:9"],
        ["c:4"],
    ]
    alone = five_minute_rule(messages, system_alone=True)
    assert sorted(map(sorted, alone)) == [["c:0", "c:1"], ["c:2", "c:3"], ["c:4"], ["c:9"]]


def test_topic_similarity_by_tfidf_or_an_embedding_hook() -> None:
    texts = ["mount the usb drive", "irc client for gnome", "the usb drive mounts", "gnome irc"]
    band = band_similarity(texts, 2)
    assert band.shape == (4, 2) and band[0].tolist() == [0.0, 0.0]  # nothing before the first
    assert band[2, 1] > 0.3 and band[2, 0] == 0.0  # shares words two back, none one back
    assert band[3, 1] > 0.3

    def embed(batch: list[str]) -> np.ndarray:
        return np.array([[1.0, 0.0] if "usb" in t else [0.0, 2.0] for t in batch])

    by_vectors = band_similarity(texts, 2, embed=embed)
    assert by_vectors[2].tolist() == [0.0, 1.0] and by_vectors[3].tolist() == [0.0, 1.0]
    grouped = group_conversations(
        [Message(f"c:{i}", "c", f"u{i}", t, 10.0 * i) for i, t in enumerate(texts)], embed=embed
    )
    assert sorted(u for c in grouped for u in c) == [f"c:{i}" for i in range(4)]


# -- invariants -------------------------------------------------------------------------------

_message = st.tuples(
    st.sampled_from(["c1", "c2"]),
    st.sampled_from(["ann", "bob", "cy", "dee"]),
    st.sampled_from(["ann: yes", "bob, try xchat", "usb drive?", "thanks", "hi all", ""]),
    st.integers(min_value=0, max_value=3 * 3600),
    st.booleans(),
)


@settings(max_examples=40, deadline=None)
@given(st.lists(_message, max_size=40))
def test_grouping_is_a_partition_that_scores_full_marks_against_itself(
    rows: list[tuple[str, str, str, int, bool]],
) -> None:
    messages = [
        Message(f"log:{i}", channel, author, text, float(t), system=system)
        for i, (channel, author, text, t, system) in enumerate(rows)
    ]
    grouped = group_conversations(messages)
    units = [u for c in grouped for u in c]
    assert sorted(units) == sorted(m.unit_id for m in messages)  # each exactly once
    channel_of = {m.unit_id: m.channel for m in messages}
    assert all(len({channel_of[u] for u in c}) == 1 for c in grouped)  # never across channels
    assert group_conversations(messages) == grouped  # deterministic
    if messages:
        s = score(grouped, grouped)
        assert (s.vi, s.one_to_one) == (100.0, 100.0)


def test_a_long_channel_is_decided_in_blocks_as_if_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / f"{STEM}.ascii.txt").write_text(LOG * 3, encoding="utf-8")
    messages = read_folder(tmp_path)[STEM]
    model = LinkModel.load()
    whole = decode(messages, channel_features(messages, window=model.window), model)
    monkeypatch.setattr(conversations, "BLOCK", 5)  # blocks end mid-conversation
    assert link_parents(messages, model=model) == whole


def test_features_from_a_later_start_are_those_of_the_whole_channel() -> None:
    """Re-linking the end of a channel reads features computed from ``start`` on: every row
    it reads (a message's, and its pairs with the ``window`` messages before it, whose
    mentions are a pair feature) is the one a whole channel's computation gives."""
    from corpus_index.linked.topic import FIRST_WEIGHED, TOPIC_BLOCK
    from tests.streamgen import stream

    messages = stream(TOPIC_BLOCK + 300, channels=1, seed=7)
    whole = channel_features(messages, window=50)
    for start in (FIRST_WEIGHED, 700, TOPIC_BLOCK, TOPIC_BLOCK + 120):
        part = channel_features(messages, window=50, start=start)
        rows = slice(start, len(messages))
        assert np.array_equal(part.self_[rows], whole.self_[rows])
        assert np.array_equal(part.topic[rows], whole.topic[rows])
        assert np.array_equal(
            part.pair_rows(start, len(messages)), whole.pair_rows(start, len(messages))
        )


def test_tfidf_weighs_a_message_by_what_came_up_to_it() -> None:
    """Past a channel's first FIRST_WEIGHED messages, each is weighed by the TOPIC_BLOCK
    messages that end with it: rows are the same from any starting row, and adding messages
    changes none before them; the first messages are weighed together, as one TF-IDF. (Rows
    are compared by their cosines with each other: the columns' order may differ.)"""
    from corpus_index.linked.topic import tfidf_matrix, trailing_tfidf

    def cosines(rows: object) -> np.ndarray:
        m = rows.toarray()  # type: ignore[attr-defined]
        return np.asarray(m @ m.T)

    texts = [f"van {w} keys {w}{i % 7} roster" for i, w in enumerate(["brakes", "tyres"] * 40)]
    whole = trailing_tfidf(texts, 0, span=16, first=8)
    for lo in (3, 8, 20):
        part = trailing_tfidf(texts, lo, span=16, first=8)
        assert np.allclose(cosines(part), cosines(whole[lo:]))
    grown = trailing_tfidf([*texts, "van pumpkin keys"], 0, span=16, first=8)
    assert np.allclose(cosines(grown[: len(texts)]), cosines(whole))
    assert not np.allclose(cosines(trailing_tfidf(texts, 0, span=32, first=8)), cosines(whole))
    assert np.allclose(cosines(whole[:8]), cosines(tfidf_matrix(texts[:8])))
    later = trailing_tfidf([*texts[:7], "van pumpkin keys"], 0, span=16, first=8)
    assert not np.allclose(cosines(later[:7]), cosines(whole[:7]))  # the first weigh together
