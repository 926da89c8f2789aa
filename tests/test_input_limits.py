"""Each embedder's input limit, counted in its own tokens, and the fit that cuts a linked
group's ``group-v1`` text to the smallest limit of the models that embed its collection: the
local model's 256 word pieces by its own tokenizer, an OpenAI model's 8,191 tokens (estimated
at 4 characters a token without tiktoken), the hash embedder's stand-in 1,024 characters."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from corpus_index import steps
from corpus_index.config import Settings, load_config
from corpus_index.group_records import DEFAULT_FIT
from corpus_index.home import Home
from corpus_index.linked.group_input import CUT_MARK
from corpus_index.steps.linked_groups import GROUPS
from corpus_index.tokens import (
    NO_MODEL,
    OPENAI_INPUT_TOKENS,
    CountingFit,
    TokenizerFit,
    group_fit,
    input_limit,
    token_counter,
)

MINILM = "st:all-MiniLM-L6-v2"
OPENAI = "openai:text-embedding-3-small"
WORDS = [
    "roast",
    "pumpkin",
    "gravy",
    "carrots",
    "potatoes",
    "pudding",
    "custard",
    "ham",
    "turkey",
    "stuffing",
    "beans",
    "peas",
    "Christmas",
    "lunch",
    "residents",
    "kitchen",
    "roster",
    "Picton",
    "Bowral",
    "shift",
    "volunteers",
    "dessert",
]


def prose(n_words: int) -> str:
    return " ".join(WORDS[(i * 7) % len(WORDS)] for i in range(n_words))


def test_the_local_model_counts_its_own_tokens_not_its_padding() -> None:
    count, by = token_counter(MINILM)
    assert by == "model tokenizer"
    assert count("roast pumpkin") == 4  # [CLS] roast pumpkin [SEP]; the file pads to 128


def test_the_local_model_fit_keeps_as_much_as_its_tokens_allow() -> None:
    limit = input_limit(MINILM)
    assert (limit.tokens, limit.counted_by) == (256, "model tokenizer")
    count, _ = token_counter(MINILM)
    short = prose(40)
    assert limit(short) == (short, False)
    text = prose(600)
    cut, was_cut = limit(text)
    assert was_cut and cut.endswith(CUT_MARK) and text.startswith(cut[: -len(CUT_MARK)])
    assert 250 <= count(cut) <= 256  # every whole word that fits, and no more
    following = text[: len(cut) - len(CUT_MARK) + len(text[len(cut) - 1 :].split()[0]) + 1]
    assert count(following + CUT_MARK) > 256
    # neither at a fixed 1,024 characters nor at 4 a token: these words are a token each
    assert len(cut) > 1_024


def test_an_openai_model_reads_8191_tokens_and_the_hash_embedder_stands_in_for_ours() -> None:
    openai = input_limit(OPENAI)
    assert openai.tokens == OPENAI_INPUT_TOKENS
    text = prose(3_000)  # about 24,000 characters: whole for OpenAI's model
    assert openai(text) == (text, False)
    assert openai(text * 2).cut and len(openai(text * 2).text) <= OPENAI_INPUT_TOKENS * 4
    hashed = input_limit("hash:v1-64")
    assert hashed.key == DEFAULT_FIT.key == NO_MODEL.key  # the texts groups had before limits
    assert hashed(text) == DEFAULT_FIT(text) and len(hashed(text).text) == 1_024


def test_a_count_without_offsets_finds_the_longest_cut_that_fits() -> None:
    def words(text: str) -> int:  # a tokenizer of whole words, as tiktoken counts text
        return len(text.split())

    fit = CountingFit(10, "words", words)
    text = prose(30)
    cut, was_cut = fit(text)
    assert was_cut and words(cut) == 10 and text.startswith(cut[: -len(CUT_MARK)])
    assert fit(prose(9)) == (prose(9), False)


def write(root: Path, embedders: list[str], n_messages: int = 24) -> Settings:
    """A messages collection of one long conversation (every message about 120 characters,
    a minute apart), embedded by one profile per embedder of ``embedders``."""
    source = root / "source"
    source.mkdir(parents=True, exist_ok=True)
    start = dt.datetime(2025, 12, 6, 9, 0, tzinfo=dt.UTC)
    authors = ["Sarah J", "mikeb", "Jane O."]
    records = [
        {
            "id": f"m{i:03d}",
            "source": "discord_chat",
            "channel": "house-chat",
            "author": authors[i % 3],
            "timestamp": (start + dt.timedelta(minutes=i)).isoformat(),
            "location": "Picton SIL",
            "text": f"for Christmas lunch {prose(16 + i % 3)}",
        }
        for i in range(n_messages)
    ]
    (source / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), "utf-8")
    spec: dict[str, Any] = {"kind": "messages", "path": str(source), "tenant": "care"}
    spec |= {"acl_groups": ["care-staff"], "namespace": "messages"}
    config = {
        "collections": {"care": spec},
        "profiles": {
            f"p{i}": {"embedder": e, "namespace": "messages"} for i, e in enumerate(embedders)
        },
        "namespaces": {"messages": {"eval_gate": "off"}},
    }
    path = root / "corpus.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return Settings(config_path=path, home=root / "home")


def grouped(settings: Settings) -> tuple[steps.linked_groups.LinkedGroupsOutcome, pa.Table]:
    """The outcome of the steps up to ``linked_groups`` and the groups' rows it wrote."""
    home = Home(settings)
    for ingest in (steps.source_manifest, steps.parsed_blocks):
        ingest.run(home, "care")
    outcome = steps.linked_groups.run(home, "care")
    rows = home.warehouse.read(GROUPS, ("care",))
    assert outcome.passed and rows is not None
    return outcome, rows


def conversation(rows: pa.Table) -> dict[str, Any]:
    """The conversation of the most messages."""
    found = [r for r in rows.to_pylist() if r["group_type"] == "conversation"]
    return max(found, key=lambda r: (r["member_count"], r["group_id"]))


def test_the_smallest_model_of_the_namespace_decides_the_cut(tmp_path: Path) -> None:
    both = load_config(write(tmp_path / "a", [OPENAI, MINILM]).config_path)
    assert group_fit(both, "messages").embedder == MINILM
    assert group_fit(both, "no-such-namespace") == NO_MODEL


def test_a_groups_text_is_cut_to_its_models_limit_and_made_again_when_it_changes(
    tmp_path: Path,
) -> None:
    count, _ = token_counter(MINILM)
    settings = write(tmp_path, [MINILM])
    outcome, rows = grouped(settings)
    assert outcome.input_limit == f"256 tokens of {MINILM}, counted by model tokenizer"
    conv = conversation(rows)
    assert conv["input_cut"] == 1 and count(conv["input_text"]) <= 256
    # the profile now embeds with a model that reads far more: the text is made again, whole
    write(tmp_path, [OPENAI])
    outcome, rows = grouped(settings)
    assert outcome.input_limit == f"8,191 tokens of {OPENAI}, counted by 4 characters a token"
    whole = conversation(rows)
    assert whole["group_id"] == conv["group_id"] and whole["input_cut"] == 0
    assert whole["input_text"].startswith(conv["input_text"][: -len(CUT_MARK)])
    members = whole["member_count"]
    assert members >= 5 and len(whole["input_text"].splitlines()) == 5 + members  # the header
    assert whole["input_hash"] != conv["input_hash"]


@pytest.mark.parametrize("embedder", [MINILM, OPENAI, "hash:v1-64"])
def test_every_fit_leaves_a_short_text_as_it_is(embedder: str) -> None:
    assert input_limit(embedder)("roast pumpkin") == ("roast pumpkin", False)


@settings(max_examples=60, deadline=None)
@given(
    words=st.lists(
        st.text(alphabet=st.characters(codec="utf-8"), max_size=12),
        max_size=400,
    ),
    limit=st.integers(min_value=8, max_value=300),
)
def test_a_fit_never_passes_its_limit_and_keeps_the_texts_start(
    words: list[str], limit: int
) -> None:
    """Any text (any script, emoji, control characters, empty words): the local model's fit
    and a counting fit give at most ``limit`` tokens, the text's own start and the cut mark,
    and a text that fits as it is."""
    text = " ".join(words)
    count, _ = token_counter(MINILM)
    local = input_limit(MINILM).fit
    assert isinstance(local, TokenizerFit)
    for fit, counts in (
        (TokenizerFit(limit, MINILM, local.tokenizer), count),
        (CountingFit(limit, "words", lambda t: len(t.split())), lambda t: len(t.split())),
    ):
        cut, was_cut = fit(text)
        assert counts(cut) <= limit or cut == CUT_MARK
        if was_cut:
            assert cut.endswith(CUT_MARK) and text.startswith(cut[: -len(CUT_MARK)].rstrip())
        else:
            assert cut == text and counts(text) <= limit
