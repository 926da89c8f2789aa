"""A collection's ``answer_verifier``: a chat model, asked over the OpenAI protocol (a real
local server here), that may refuse a question's chosen answer; the next best is then taken.
No clear yes or no, or a server that fails, leaves the scorer's choice. Verdicts are kept by
the verifier's identity and the pair, so the same verifier is not asked again about an
unchanged pair, while configuring, changing or removing it decides the questions again."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from corpus_index import steps
from corpus_index.answer_verifier import (
    MAX_TEXT_CHARS,
    SYSTEM,
    OpenAIAnswerVerifier,
    answer_verifier,
    verdict,
)
from corpus_index.collection import VerifierConfig
from corpus_index.config import Settings
from corpus_index.errors import ConfigError, VerifierError
from corpus_index.home import Home
from corpus_index.linked.groups import link_units
from corpus_index.linked.memo import Memo, memo_table
from corpus_index.records import BLOCK_SCHEMA
from corpus_index.steps.linked_groups import GROUPS, read_units
from tests.dagster.harness import Graph, metadata
from tests.support.openai_server import FakeOpenAIServer, serve
from tests.test_linked_contexts import msg, qa_of

KEY = "sk-local-test"
ENV = "CARE_VERIFIER_KEY"
START = dt.datetime(2025, 12, 1, 8, 0, tzinfo=dt.timezone(dt.timedelta(hours=11)))
WRONG = "1-2-3-4"  # the first reply's code, which the model says does not answer

UNITS = [
    msg("q", "Ellie T", "does anyone know the code for the key safe?", 0),
    msg("a1", "BenO", "yes it's 1-2-3-4", 5),
    msg("a2", "Sarah (Bowral)", "Ellie it's 4-7-1-9 now, then push the lever down", 60),
]


def candidate(messages: list[dict[str, Any]]) -> str:
    """The candidate answer's text in a verifier's request."""
    text = str(messages[-1]["content"])
    return text.split("Candidate answer:\n", 1)[1].split("\n\nDoes this", 1)[0]


def refuses_the_old_code(messages: list[dict[str, Any]]) -> str:
    return "No." if WRONG in candidate(messages) else "Yes, it gives the code."


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with serve(api_key=KEY, reply=refuses_the_old_code) as s:
        yield s


def verifier(server: FakeOpenAIServer, model: str = "judge-1") -> OpenAIAnswerVerifier:
    return OpenAIAnswerVerifier(
        model, base_url=server.base_url, api_key=KEY, max_retries=2, backoff_base=0.0
    )


def test_without_a_verifier_the_scorer_takes_the_first_reply() -> None:
    assert qa_of(link_units(UNITS), "q").resolved_by_unit_id == "a1"


def test_a_refusal_from_the_model_makes_the_next_best_answer_win(server: FakeOpenAIServer) -> None:
    judge = verifier(server)
    assert qa_of(link_units(UNITS, verifier=judge), "q").resolved_by_unit_id == "a2"
    assert [candidate(c["messages"]) for c in server.chats] == [UNITS[1].text, UNITS[2].text]
    assert judge.asked == 2 and judge.unclear == 0
    assert server.authorization[0] == f"Bearer {KEY}"


def test_only_the_two_texts_and_the_instruction_are_sent_each_cut(
    server: FakeOpenAIServer,
) -> None:
    long = msg("a1", "BenO", "yes it's 1-2-3-4 " + "and more " * 1000, 5)
    link_units([UNITS[0], long, UNITS[2]], verifier=verifier(server))
    sent = server.chats[0]
    assert sent["model"] == "judge-1"
    assert set(sent) == {"model", "messages"}  # no sampling option unless configured
    system, user = sent["messages"]
    assert system == {"role": "system", "content": SYSTEM}
    assert user["role"] == "user"
    assert candidate(sent["messages"]) == long.text[: MAX_TEXT_CHARS - 1] + "…"
    assert UNITS[0].text in user["content"]
    for unsent in ("BenO", "Ellie T", "#house", "Picton SIL"):  # no author, channel or place
        assert unsent not in json.dumps(sent)


@pytest.mark.parametrize(
    ("reply", "found"),
    [
        ("yes", True),
        ("Yes.", True),
        ("YES!", True),
        ("No", False),
        ("no, it asks something else", False),
        ("Yes. The code is given.", True),
        ("no idea", None),
        ("yes and no", None),
        ("Maybe", None),
        ("", None),
        ("The answer is yes", None),
    ],
)
def test_only_a_clear_yes_or_no_is_a_verdict(reply: str, found: bool | None) -> None:
    assert verdict(reply) is found


def test_an_unclear_reply_leaves_the_scorers_choice() -> None:
    with serve(api_key=KEY, reply=lambda _: "It depends on which key safe.") as s:
        judge = verifier(s)
        assert qa_of(link_units(UNITS, verifier=judge), "q").resolved_by_unit_id == "a1"
        assert judge.asked == 1 and judge.unclear == 1


def test_a_server_that_keeps_failing_leaves_the_scorers_choice_and_is_asked_no_more(
    server: FakeOpenAIServer,
) -> None:
    server.script = [{"status": 500}] * 3  # the first try and both retries
    judge = verifier(server)
    a = msg("q2", "Ellie T", "is the van back?", 100)
    b = msg("b", "BenO", "yes it's in the drive", 101)
    groups = link_units([*UNITS, a, b], verifier=judge)
    assert qa_of(groups, "q").resolved_by_unit_id == "a1"
    assert qa_of(groups, "q2").resolved_by_unit_id == "b"
    assert len(server.chats) == 3  # bounded: the second question is not asked of it
    assert judge.unclear == 1


def test_a_bad_key_fails_with_the_variable_to_set(server: FakeOpenAIServer) -> None:
    judge = OpenAIAnswerVerifier(
        "judge-1", base_url=server.base_url, api_key="sk-wrong", api_key_env=ENV
    )
    with pytest.raises(VerifierError, match=f"HTTP 401.*set {ENV}") as caught:
        link_units(UNITS, verifier=judge)
    assert "sk-wrong" not in str(caught.value)


def test_the_key_is_read_from_the_variable_the_configuration_names(
    server: FakeOpenAIServer,
) -> None:
    config = VerifierConfig("judge-1", base_url=server.base_url, api_key_env=ENV)
    where = "corpus.yaml: collections.care.answer_verifier"
    judge = answer_verifier(config, where=where, environ={ENV: f" {KEY}\n"})
    assert qa_of(link_units(UNITS, verifier=judge), "q").resolved_by_unit_id == "a2"
    assert set(server.authorization) == {f"Bearer {KEY}"}
    for environ in ({}, {ENV: " "}, {"OPENAI_API_KEY": KEY}):
        with pytest.raises(ConfigError, match=re.escape(f"{where}.api_key_env: the envir")):
            answer_verifier(config, where=where, environ=environ)


def test_verdicts_are_kept_by_the_verifier_and_the_pair(server: FakeOpenAIServer) -> None:
    first = Memo()
    groups = link_units(UNITS, verifier=verifier(server), memo=first)
    assert qa_of(groups, "q").resolved_by_unit_id == "a2"
    asked = len(server.chats)
    again = Memo(memo_table([first]))
    same = verifier(server)
    assert qa_of(link_units(UNITS, verifier=same, memo=again), "q").resolved_by_unit_id == "a2"
    assert same.asked == 0 and len(server.chats) == asked  # kept: not asked again
    other = verifier(server, model="judge-2")
    groups = link_units(UNITS, verifier=other, memo=Memo(memo_table([again])))
    assert qa_of(groups, "q").resolved_by_unit_id == "a2" and other.asked == 2
    edited = [UNITS[0], UNITS[1], msg("a2", "Sarah (Bowral)", "Ellie it's 4-7-1-9", 60)]
    changed = verifier(server)
    link_units(edited, verifier=changed, memo=Memo(memo_table([again])))
    assert changed.asked == 1  # the pair of the edited answer only


# ---------------------------------------------------------------------- the step


def configure(root: Path, verifier_spec: dict[str, Any] | None) -> Settings:
    source = root / "source"
    source.mkdir(exist_ok=True)
    records = [
        {
            "id": m.unit_id,
            "source": "discord_chat",
            "channel": m.channel,
            "author": m.author,
            "timestamp": (START + dt.timedelta(seconds=m.timestamp)).isoformat(),
            "location": m.location,
            "text": m.text,
        }
        for m in UNITS
    ]
    (source / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), "utf-8")
    spec: dict[str, Any] = {"kind": "messages", "path": str(source), "tenant": "care"}
    spec |= {"acl_groups": ["care-staff"], "namespace": "messages"}
    if verifier_spec is not None:
        spec["answer_verifier"] = verifier_spec
    config = {
        "collections": {"care": spec},
        "profiles": {"main": {"embedder": "hash:v1-64", "namespace": "messages"}},
        "namespaces": {"messages": {"eval_gate": "off"}},
    }
    path = root / "corpus.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return Settings(config_path=path, home=root / "home")


def answered(settings: Settings) -> tuple[str, steps.linked_groups.LinkedGroupsOutcome]:
    """The text of the question's answer after a run of the steps up to ``linked_groups``."""
    home = Home(settings)
    steps.source_manifest.run(home, "care")
    steps.parsed_blocks.run(home, "care")
    outcome = steps.linked_groups.run(home, "care")
    assert outcome.passed
    rows = home.warehouse.read(GROUPS, ("care",))
    assert rows is not None
    (qa,) = [r for r in rows.to_pylist() if r["group_type"] == "qa_pair"]
    texts = {
        u.message.unit_id: u.message.text
        for u in read_units(home.read("parsed_blocks", ("care",), BLOCK_SCHEMA))
    }
    return texts[qa["resolved_by_unit_id"]], outcome


def test_the_step_asks_the_configured_verifier_and_keeps_its_verdicts(
    server: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, KEY)
    spec = {"model": "judge-1", "base_url": server.base_url, "api_key_env": ENV}
    plain = configure(tmp_path, None)
    got, outcome = answered(plain)
    assert got == UNITS[1].text and outcome.verified == 0 and not server.chats
    # configured after a run without: the question is decided again, the old code refused
    got, outcome = answered(configure(tmp_path, spec))
    assert got == UNITS[2].text and outcome.verified == 2 == len(server.chats)
    # the same verifier again: its verdicts are kept, nothing is sent
    got, outcome = answered(configure(tmp_path, spec))
    assert got == UNITS[2].text and outcome.verified == 0 and len(server.chats) == 2
    # another model: asked anew
    got, outcome = answered(configure(tmp_path, spec | {"model": "judge-2"}))
    assert got == UNITS[2].text and outcome.verified == 2 and len(server.chats) == 4
    # removed: the scorer's choice again
    got, outcome = answered(configure(tmp_path, None))
    assert got == UNITS[1].text and len(server.chats) == 4


def test_the_step_refuses_to_start_without_the_key(
    server: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV, raising=False)
    spec = {"model": "judge-1", "base_url": server.base_url, "api_key_env": ENV}
    settings = configure(tmp_path, spec)
    home = Home(settings)  # the configuration loads: the key is read where it is used
    steps.source_manifest.run(home, "care")
    steps.parsed_blocks.run(home, "care")
    where = f"{settings.config_path}: collections.care.answer_verifier.api_key_env"
    with pytest.raises(ConfigError, match=re.escape(f"{where}: the environment variable {ENV}")):
        steps.linked_groups.run(home, "care")
    assert not server.chats


def test_the_asset_reports_what_the_verifier_was_asked(
    server: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the graph: the ``linked_groups`` materialization counts the pairs put to the
    verifier, and the Q&A group written is the one it let through."""
    monkeypatch.setenv(ENV, KEY)
    spec = {"model": "judge-1", "base_url": server.base_url, "api_key_env": ENV}
    settings = configure(tmp_path, spec)
    graph = Graph(settings)
    r = graph.ingest("care")
    assert r.success
    md = metadata(r, "linked_groups")
    assert (md["answers_verified"], md["answers_unverified"]) == (2, 0) == (len(server.chats), 0)
    rows = Home(settings).warehouse.read(GROUPS, ("care",))
    assert rows is not None
    (qa,) = [g for g in rows.to_pylist() if g["group_type"] == "qa_pair"]
    assert qa["resolved_by_unit_id"] == "a2"


def test_a_server_refusing_every_pair_says_why_through_the_asset(
    server: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A verifier its server refuses (a 400 for each pair: a reasoning model given a
    temperature, say) leaves the scorer's choice, and the materialization says how many pairs
    were refused and the first refusal, its message cut."""
    monkeypatch.setenv(ENV, KEY)
    why = "Unsupported value: 'temperature' does not support 0 with this model." + " x" * 400
    server.script = [{"status": 400, "message": why}] * 2
    spec = {"model": "judge-1", "base_url": server.base_url, "api_key_env": ENV}
    spec |= {"temperature": 0}
    r = Graph(configure(tmp_path, spec)).ingest("care")
    assert r.success
    md = metadata(r, "linked_groups")
    # no opinion on the scorer's pick: it stands, and no other candidate is asked
    assert (md["answers_verified"], md["answers_unverified"], md["answers_refused"]) == (1, 1, 1)
    refusal = md["answer_verifier_refusal"]
    assert refusal.startswith("HTTP 400: Unsupported value: 'temperature'")
    assert refusal.endswith("…") and len(refusal) < 320


def test_sampling_options_are_sent_only_when_configured_and_keep_their_own_verdicts(
    server: FakeOpenAIServer,
) -> None:
    """``temperature`` and ``max_tokens`` go with each request when the configuration gives
    them (a reasoning model refuses both, so none is sent by default), and verdicts are kept
    apart by them."""
    config = VerifierConfig("judge-1", base_url=server.base_url, api_key_env=ENV)
    plain = answer_verifier(config, where="w", environ={ENV: KEY})
    steady = answer_verifier(
        replace(config, temperature=0.0, max_tokens=8), where="w", environ={ENV: KEY}
    )
    link_units(UNITS, verifier=steady)
    assert server.chats and all(
        (c["temperature"], c["max_tokens"]) == (0.0, 8) for c in server.chats
    )
    assert plain.identity != steady.identity
    assert plain.identity == answer_verifier(config, where="w", environ={ENV: KEY}).identity
