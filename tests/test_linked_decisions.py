"""Decision threads and topic clusters: which sentences decide and which do not, the thread a
decision closes in each structure it can sit in, open threads, clusters only where the data
supports them, and both types on the messages sample."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corpus_index.identities import load_people
from corpus_index.linked.decisions import (
    confirms,
    decision_sentence,
    decision_threads,
    proposes,
    requests,
)
from corpus_index.linked.groups import Group, link_units
from corpus_index.linked.messages import Message
from corpus_index.linked.records import MEMBER_ROLES
from corpus_index.linked.similarity import Similarity
from corpus_index.linked.topics import MAX_UNITS, topic_clusters
from tests.test_linked_contexts import (
    HOUR,
    SAMPLE,
    T0,
    msg,
    of_type,
    sample,
    sample_groups,
    truth,
)

DAY = 24 * HOUR

# ---------------------------------------------------------------------- what decides


@pytest.mark.parametrize(
    ("text", "sentence"),
    [
        (
            "Good point. Let's do both then, roast chicken and pork.",
            "Let's do both then, roast chicken and pork.",
        ),
        (
            "Hi Bob,\n\nApproved, please go ahead. Tom will bring it in.",
            "Approved, please go ahead.",
        ),
        ("OK team, we'll go with the Thursday slot.", "OK team, we'll go with the Thursday slot."),
        ("We decided on the blue sling", "We decided on the blue sling"),
        ("No worries, we'll go with Thursday then.", "No worries, we'll go with Thursday then."),
        ("Agreed. Thursdays from now on", "Agreed."),
        ("Final call: pizza night is Friday", "Final call: pizza night is Friday"),
        (
            "Leanne signed off the new roster this morning",
            "Leanne signed off the new roster this morning",
        ),
    ],
)
def test_a_decision_statement_is_found(text: str, sentence: str) -> None:
    assert decision_sentence(text) == sentence


@pytest.mark.parametrize(
    "text",
    [
        "Has the quote been approved?",  # asked, not decided
        "We haven't decided yet, waiting on Leanne",  # negated
        "It's not approved yet",
        "Once it's approved I'll book it",  # conditional
        "Not sure yet, it hasn't been approved",
        "If we go with Thursday, Tom can drive",
        "Set an agreed time to be back",  # an adjective
        "Thinking a roast. Chicken or pork?",
        "yes pumpkin please",
        "Kevin asked me not to tell his brother but later we could talk",
    ],
)
def test_questions_negations_conditions_and_adjectives_do_not_decide(text: str) -> None:
    assert decision_sentence(text) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Yes if Dave's mum drives them. Add it to his calendar", "Yes if Dave's mum drives them."),
        (
            "Hi Helen,\n\nYes of course, John will be so happy.",
            "Yes of course, John will be so happy.",
        ),
        ("Dear Margaret, Of course, come any time after 9.", "Of course, come any time after 9."),
        ("no worries", None),
        ("added 👍", None),
        ("Thinking yes but ask Leanne", None),
    ],
)
def test_confirmations_open_the_reply(text: str, expected: str | None) -> None:
    assert confirms(text) == expected


@pytest.mark.parametrize(
    ("text", "asks"),
    [
        ("Is Peter allowed to go to the cricket on the 27th?", True),
        ("Would it be OK for John to come home with me from Boxing Day?", True),
        ("I'd like to visit on Christmas morning, if that's all right.", True),
        ("Thinking a roast. Chicken or pork?", True),
        ("Should we move the house meeting to Thursdays?", True),
        ("Has anyone seen the van keys?", False),
        ("Does Kevin still need his fluids charted?", False),
        ("We are allowed two visitors.", False),  # not asked
    ],
)
def test_requests_for_permission_or_a_choice(text: str, asks: bool) -> None:
    assert requests(text) is asks


def test_a_proposal_asks_or_proposes() -> None:
    assert proposes("I suggest we swap to the Arjo slings")
    assert proposes("Quote to replace both rotors: $386")
    assert not proposes("Van's back, pads done.")


# ---------------------------------------------------------------------- the thread it closes


def threads_of(
    units: list[Message], conversations: list[list[str]], answers: dict[str, str]
) -> list[Group]:
    return [t.group for t in decision_threads(units, conversations=conversations, answers=answers)]


def house_meeting() -> list[Message]:
    return [
        msg(
            "p",
            "Priya",
            "Should we move the house meeting to Thursdays? Tuesdays clash with respite.",
            0,
        ),
        msg("a", "Tom H", "Thursday works for me", 10, reply_to="p"),
        msg("x", "DanK", "anyone seen the bin keys", 12),
        msg("b", "DanK", "Thu +1, Kevin's home then", 30, reply_to="p"),
        msg("d", "Priya", "Decided: house meetings are Thursdays at 4 from the 18th.", 60),
        msg("c", "Tom H", "great", 65),
    ]


def test_a_conversation_gives_proposal_discussion_and_decision_ending_at_the_decision() -> None:
    units = house_meeting()
    (thread,) = threads_of(units, [["p", "a", "b", "d", "c"]], {})
    assert thread.member_ids == ("p", "a", "b", "d")  # the acknowledgement after is not in it
    assert [m.role for m in thread.members] == ["initiator", "response", "response", "decision"]
    assert [m.primary for m in thread.members] == [False, False, False, True]
    assert {m.role for m in thread.members} <= set(MEMBER_ROLES)
    assert thread.resolved_by_unit_id == "d" and thread.resolution_status == "resolved"


def test_the_thread_opens_at_the_first_proposal_and_needs_someone_else() -> None:
    units = [
        msg("h", "Priya", "morning all", 0),
        msg("p", "Priya", "Options are Tuesday or Thursday for the meeting", 5),
        msg("d", "Priya", "Decided, Thursday it is.", 6),
    ]
    assert threads_of(units, [["h", "p", "d"]], {}) == []  # a monologue decides nothing
    units.insert(2, msg("a", "Tom H", "Thursday", 5.5))
    (thread,) = threads_of(units, [["h", "p", "a", "d"]], {})
    assert thread.member_ids == ("p", "a", "d")


def test_the_thread_opens_at_the_proposal_on_the_decisions_topic_or_the_one_it_replies_to() -> None:
    units = chat(
        ("w", "DanK", "what's the wifi password at Tahmoor?"),
        ("w2", "Priya", "WattleTahmoor2025"),
        ("p", "Tom H", "Proposal: house meetings move to Thursdays at 4pm"),
        ("a", "Jane O.", "Thursdays could work"),
        ("d", "Priya", "Decided: house meetings are Thursdays at 4pm from the 8th."),
    )
    ids = [[m.unit_id for m in units]]
    units = [*chatter(30), *units]  # rare words weigh: the wifi question shares none with it
    (thread,) = threads_of(units, ids, {})
    assert thread.member_ids[0] == "w"  # without similarity: the first proposal
    (thread,) = [
        t.group
        for t in decision_threads(
            units, conversations=ids, answers={}, similarity=Similarity(units)
        )
    ]
    assert thread.member_ids == ("p", "a", "d")
    replied = [replace(m, reply_to="a") if m.unit_id == "d" else m for m in units]
    (thread,) = threads_of(replied, ids, {})
    assert thread.member_ids == ("a", "d")


def test_a_decision_with_nothing_proposed_before_it_is_no_thread() -> None:
    units = [msg("a", "Tom H", "Van's back.", 0), msg("d", "Sarah J", "Approved.", 5)]
    assert threads_of(units, [["a", "d"]], {}) == []


def chat(*lines: tuple[str, str, str]) -> list[Message]:
    """Messages of one channel, five minutes apart, from ``(id, author, text)``."""
    return [msg(uid, who, text, 5 * k) for k, (uid, who, text) in enumerate(lines)]


def test_the_last_decision_of_a_conversation_closes_its_one_thread() -> None:
    units = chat(
        ("p", "Sarah J", "Chicken or pork for Christmas?"),
        ("a", "mikeb", "pork gets my vote"),
        ("d1", "Sarah J", "Let's do both then."),
        ("b", "Jane O.", "and pavlova?"),
        ("d2", "Sarah J", "Agreed, pavlova too."),
    )
    (thread,) = threads_of(units, [[m.unit_id for m in units]], {})
    assert thread.resolved_by_unit_id == "d2" and thread.member_ids[-1] == "d2"


def test_an_email_thread_holds_its_decision_even_outside_a_conversation() -> None:
    quote = msg(
        "q",
        "Bob",
        "Quote to replace both front rotors: $386.",
        0,
        channel="van-rotor",
        source="email_thread",
    )
    other = msg("o", "Bob", "Invoice attached", 30, channel="other", source="email_thread")
    yes = msg(
        "y",
        "Leanne W",
        "Hi Bob,\n\nApproved, please go ahead.",
        120,
        channel="van-rotor",
        source="email_thread",
    )
    (thread,) = threads_of([quote, other, yes], [], {})
    assert thread.member_ids == ("q", "y") and thread.processing_profile == "email_thread"


def test_a_yes_decides_a_request_it_answers_but_not_a_plain_question() -> None:
    ask = msg("q", "Ravi P", "Is Peter allowed to go to the cricket on the 27th?", 0)
    yes = msg("y", "Karen D", "Yes if Dave's mum drives them", 30, channel="#other")
    (thread,) = threads_of([ask, yes], [], {"q": "y"})
    assert thread.member_ids == ("q", "y") and thread.resolved_by_unit_id == "y"
    plain = msg("q", "Tom H", "Does Kevin still need his fluids charted?", 0)
    assert threads_of([plain, yes], [], {"q": "y"}) == []
    assert threads_of([ask, yes], [], {}) == []  # not its answer: no structure holds them
    own = msg("y", "Ravi P", "Yes, I'll ask Karen", 30)
    assert threads_of([ask, own], [], {"q": "y"}) == []  # the asker does not decide


def test_an_explicit_proposal_discussed_by_two_others_is_open_until_decided() -> None:
    units = house_meeting()[:4]
    (thread,) = threads_of(units, [["p", "a", "b"]], {})
    assert thread.resolution_status == "open" and thread.resolved_by_unit_id is None
    assert thread.completeness == "evolving" and thread.member_ids == ("p", "a", "b")
    assert threads_of(units, [["p", "a"]], {}) == []  # one reply is not yet a discussion
    chat = [
        msg("q", "Tom H", "Chicken or pork?", 0),
        msg("a", "mikeb", "pork", 1),
        msg("b", "Jane O.", "both", 2),
    ]
    assert threads_of(chat, [["q", "a", "b"]], {}) == []  # a question is not a proposal to vote on


def test_link_units_records_who_decided_and_when() -> None:
    groups = link_units(house_meeting())
    (thread,) = of_type(groups, "decision_thread")
    assert thread.title.startswith("Decided: house meetings are Thursdays at 4")
    assert thread.primary_identity == "Priya"  # no registry: as written
    assert thread.latest_content_at == T0 + 60 * 60  # the decision's time
    assert thread.summary.startswith("Decided by Priya on ")


# ---------------------------------------------------------------------- topic clusters


def chatter(n: int, *, seed: int = 3) -> list[Message]:
    """``n`` unrelated messages over three channels and four days: each of its own few words
    (of a large vocabulary), so that no two share a topic."""
    rnd = random.Random(seed)
    vocabulary = [f"{a}{b}" for a in ("ka", "lo", "mi", "nu", "pe", "ri") for b in range(200)]
    return [
        msg(
            f"n{i}",
            rnd.choice(["A", "B", "C"]),
            " ".join(rnd.sample(vocabulary, 4)),
            i * 100,
            channel=f"#c{i % 3}",
        )
        for i in range(n)
    ]


def van_story() -> list[Message]:
    """The van's brakes in the chat, an SMS to the garage and its e-mailed quote over two
    days, among unrelated chatter (so the words they share are rare in the collection)."""
    return [*chatter(40), *VAN]


VAN = [
    msg(
        "c1",
        "Tom H",
        "Van's making a grinding noise when you brake, front left",
        0,
        channel="#picton",
    ),
    msg(
        "c2",
        "mikeb",
        "yeah the brakes sound like metal on metal",
        5,
        channel="#picton",
        reply_to="c1",
    ),
    msg(
        "s1",
        "Tom H",
        "Hi Bob, van brakes grinding front left, can you fit us in",
        60,
        channel="tom-bob",
        source="sms_message",
    ),
    msg(
        "s2",
        "Bob",
        "Thurs 8am, probably the brake pads",
        70,
        channel="tom-bob",
        source="sms_message",
        reply_to="s1",
    ),
    msg(
        "e1",
        "Bob",
        "Brake pads replaced, front left rotor scored: quote for rotors $386",
        2 * DAY / 60,
        channel="van-rotor",
        source="email_thread",
    ),
    msg(
        "c3",
        "Tom H",
        "Van's back, pads were metal on metal, rotor quote coming",
        2 * DAY / 60 + 30,
        channel="#picton",
    ),
]


def test_a_topic_across_chat_sms_and_email_over_days_is_one_cluster() -> None:
    units = van_story()
    (cluster,) = topic_clusters(
        units, conversations=[["c1", "c2"], ["s1", "s2"]], similarity=Similarity(units)
    )
    assert set(cluster.member_ids) == {m.unit_id for m in VAN}
    assert all(m.role == "context" and 0 < m.relevance <= 1 for m in cluster.members)
    (described,) = of_type(link_units(units), "topic_cluster")
    assert described.title.startswith("Topic: vehicle")


def test_one_channel_one_day_or_too_few_threads_make_no_cluster() -> None:
    units = van_story()
    same_day = [m for m in units if m.timestamp < T0 + DAY or m.unit_id.startswith("n")]
    assert (
        topic_clusters(
            same_day, conversations=[["c1", "c2"], ["s1", "s2"]], similarity=Similarity(same_day)
        )
        == []
    )
    chat_only = [m for m in units if m.channel == "#picton" or m.unit_id.startswith("n")]
    assert topic_clusters(chat_only, conversations=[], similarity=Similarity(chat_only)) == []


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_noise_makes_no_clusters(seed: int) -> None:
    units = chatter(200, seed=seed)
    assert topic_clusters(units, conversations=[], similarity=Similarity(units)) == []
    assert of_type(link_units(units), "topic_cluster") == []


def test_one_word_in_common_is_a_coincidence_not_a_topic() -> None:
    units = chatter(40)
    for k, (a, b) in enumerate(
        [("alpha", "beta"), ("gamma", "delta"), ("omega", "sigma"), ("theta", "kappa")]
    ):
        units.append(msg(f"z{k}", "A", f"zeta {a} {b}", k * 24 * 60 + 7, channel=f"#z{k}"))
    found = topic_clusters(units, conversations=[], similarity=Similarity(units))
    assert found == []
    units.append(msg("z9", "B", "zeta alpha gamma omega theta", 5 * 24 * 60, channel="#z9"))
    units += [
        replace(u, unit_id=f"{u.unit_id}b", text=f"{u.text} eta")
        for u in units
        if u.unit_id.startswith("z")
    ]
    (cluster,) = topic_clusters(units, conversations=[], similarity=Similarity(units))
    assert all(i.startswith("z") for i in cluster.member_ids)


@settings(max_examples=15, deadline=None)
@given(order=st.permutations(range(52)))
def test_clusters_and_threads_do_not_depend_on_input_order(order: list[int]) -> None:
    units = [*van_story(), *house_meeting()]
    shuffled = [units[k] for k in order]
    kinds = ("topic_cluster", "decision_thread")
    assert [g for g in link_units(shuffled) if g.group_type in kinds] == [
        g for g in link_units(units) if g.group_type in kinds
    ]


# ---------------------------------------------------------------------- the sample


@pytest.mark.parametrize("tenant", ["wattle", "bluegum"])
def test_sample_decisions_are_those_of_the_truth_file_with_who_decided(tenant: str) -> None:
    registry = load_people(SAMPLE / tenant / "people.yaml", tenant_id=tenant)
    found = {g.member_ids: g for g in of_type(sample_groups(tenant, True), "decision_thread")}
    expected = truth(tenant)["decisions"]
    assert sorted(found) == sorted(tuple(d["members"]) for d in expected)
    for d in expected:
        g = found[tuple(d["members"])]
        assert g.resolution_status == d["status"] and g.resolved_by_unit_id == d["decision"]
        if d["decision"] is None:
            assert g.primary_identity is None and g.title.startswith("Undecided: ")
            continue
        assert g.primary_identity == registry.by_key(d["decided_by"]).id  # type: ignore[union-attr]
        assert [m.role for m in g.members][-1] == "decision" and g.members[-1].primary
        unit = {m.unit_id: m for m in sample(tenant)}[d["decision"]]
        assert g.latest_content_at == unit.timestamp  # when: the thread ends at the decision


def test_sample_topic_clusters_span_sources_and_days_within_bounds() -> None:
    units = {m.unit_id: m for m in sample("wattle")}
    clusters = of_type(sample_groups("wattle", True), "topic_cluster")
    assert clusters
    van = [g for g in clusters if {"wg-dc-026", "wg-sms-010", "wg-em-009"} <= set(g.member_ids)]
    assert len(van) == 1 and "vehicle" in van[0].topic_tags
    for g in clusters:
        assert len(g.members) <= MAX_UNITS
        assert len({(units[i].source, units[i].channel) for i in g.member_ids}) >= 2
        assert g.event_date != g.event_date_end and g.title.startswith("Topic: ")
