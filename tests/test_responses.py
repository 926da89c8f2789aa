"""Replies read by how people write (corpus_index/linked/responses.py): an e-mail ``Re:``
continues its thread, and a reply to an open question joins the question's conversation
(an answer, a "no idea", a choice among the alternatives it offered), where the link model
alone would have it start a conversation of its own."""

from __future__ import annotations

from dataclasses import replace

from corpus_index.linked.conversations import link_parents
from corpus_index.linked.features import channel_features
from corpus_index.linked.messages import Message
from corpus_index.linked.model import LinkModel
from corpus_index.linked.questions import question_of
from corpus_index.linked.responses import Responses, alternatives, thread_subject

T0 = 1_765_000_000.0
HOUR = 3600.0


def chat(uid: str, author: str, text: str, hours: float, source: str = "discord_chat") -> Message:
    return Message(uid, "#house", author, text, T0 + hours * HOUR, source=source)


def test_a_subject_line_without_its_reply_prefixes() -> None:
    assert thread_subject("RE: Fwd:  Quote - Toyota HiAce") == ("quote - toyota hiace", True)
    assert thread_subject("Re[2]: van") == ("van", True)
    assert thread_subject("Quote - Toyota HiAce") == ("quote - toyota hiace", False)
    assert thread_subject("Rego due") == ("rego due", False)  # "Re" only as a prefix with ":"


def test_the_alternatives_a_question_offers() -> None:
    assert alternatives("Thinking a roast. Chicken or pork? And who's on?") == {"chicken", "pork"}
    assert alternatives("Hydro on Thursday, pool or gym?") == {"pool", "gym"}
    assert alternatives("tea or a coffee?") == frozenset()  # alternatives of one word only
    assert alternatives("chicken or pork, whatever's easier") == frozenset()  # not asked


def _email(uid: str, author: str, subject: str, text: str, hours: float) -> Message:
    return Message(
        uid, "van-rotor", author, text, T0 + hours * HOUR, source="email_thread", title=subject
    )


def test_an_email_reply_continues_its_thread_days_later() -> None:
    thread = [
        _email("e1", "Bob", "Quote - HiAce front rotors", "Pads replaced, rotors scored. $420.", 0),
        _email("e2", "Leanne", "RE: Quote - HiAce front rotors", "Approved, go ahead.", 70),
    ]
    assert link_parents(thread, responses=False) == [0, 1]  # the model alone: two
    assert link_parents(thread) == [0, 0]
    other = [thread[0], _email("e2", "Leanne", "Rego due", "Rego is due in March.", 70)]
    assert link_parents(other) == [0, 1]  # another subject is another thread


def _shift_chat(reply: str, replier: str = "Mike", hours: float = 5) -> list[Message]:
    """Other talk, a question, and ``reply`` to it ``hours`` later."""
    return [
        chat("x1", "Tom", "bins went out, recycling too", 0),
        chat("x2", "Dan", "cheers Tom", 0.05),
        chat("q", "Jane", "Does anyone know if John's new Webster pack started this week?", 1),
        chat("r", replier, reply, 1 + hours),
    ]


def _response(messages: list[Message]) -> int:
    """The message the last of ``messages`` replies to by how people write, or -1."""
    features = channel_features(messages, window=LinkModel.load().window)
    return Responses(messages, features).parent(len(messages) - 1)


def test_a_reply_that_does_not_know_still_joins_the_question() -> None:
    messages = _shift_chat("no idea sorry, Grace would know")
    assert link_parents(messages, responses=False)[3] == 3
    assert link_parents(messages)[3] == 2
    assert _response(messages) == 2
    # ... but not to a question of their own, nor to one asked more than 48 hours before
    assert _response(_shift_chat("no idea sorry, Grace would know", replier="Jane")) == -1
    assert _response(_shift_chat("no idea sorry, Grace would know", hours=49)) == -1
    # nor once someone else has replied: then it is not the first reply
    late = [
        *messages[:3],
        chat("t", "Tom", "Grace said Monday", 3),
        replace(messages[3], timestamp=T0 + 7 * HOUR),
    ]
    assert _response(late) == -1


def test_an_answer_naming_an_alternative_joins_the_question() -> None:
    said = {
        "Sarah": "Christmas lunch planning! Chicken or pork? Who's on that day?",
        "Mike": "I'm on 7-3, pork with crackling gets my vote",
        "Tom": "Van's making a grinding noise when you brake again",
        "Jane": "Amelia can't do that with her swallowing plan. Chicken is easier",
    }  # three to six minutes apart, in this order
    messages = [chat(a, a, text, 0.05 * k) for k, (a, text) in enumerate(said.items())]
    assert link_parents(messages, responses=False)[3] == 3
    assert link_parents(messages)[3] == 0
    # a message naming nothing it offered is left to the model
    unrelated = [*messages[:3], chat("c", "Jane", "Amelia's physio moved to Friday", 0.1)]
    assert link_parents(unrelated)[3] == link_parents(unrelated, responses=False)[3]


def test_a_call_for_people_is_a_who_question_without_its_question_mark() -> None:
    calls = [
        "Christmas roster is up. Still need someone for the 26th PM at Picton",
        "Secret Santa, $20 limit. Say here if you don't want in.",
        "Anyone free Saturday to take Kevin to the footy",
        "Looking for a volunteer for the BBQ",
    ]
    assert [getattr(question_of(c), "kind", None) for c in calls] == ["who"] * 4
    assert question_of("We need milk and bread") is None
    assert question_of("Kevin needs someone with him at the dentist") is None  # no call: a fact


def test_a_call_is_answered_by_each_who_takes_it() -> None:
    """Everyone who answers a call for people names themselves ("in", "count me in"): each
    joins the call's conversation, not only the first reply, and a one-word "in" is an
    answer, not an acknowledgement."""
    messages = [
        chat("n", "Tom", "van's back from the mechanic", 0),
        chat(
            "c",
            "Leanne",
            "Secret Santa, $20 limit, names drawn Tuesday. Say here if you want in",
            1,
        ),
        chat("r1", "Mike", "in", 1.5),
        chat("r2", "Jane", "in! no more candles please", 1.9),
    ]
    assert link_parents(messages, responses=False)[2:] == [2, 3]  # the model alone: apart
    assert link_parents(messages)[2:] == [1, 1]
    # a reply that is not someone taking it is left to the model
    other = [*messages[:2], chat("x", "Mike", "the bins are out", 1.5)]
    assert link_parents(other)[2] == link_parents(other, responses=False)[2]
