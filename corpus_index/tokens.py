"""Counting an embedder's input tokens offline: the model's own tokenizer where one is at hand
(tiktoken for OpenAI models, the local model's ``tokenizer.json``), else an estimate at 4
characters a token. ``corpus plan-migration`` and the ``embeddings`` step count alike.

And each embedder's input limit (:func:`input_limit`): the most of one input its model reads,
in its own tokens, with the fit that cuts a linked group's ``group-v1`` text to it (the
``linked_groups`` step cuts to the smallest limit of the models that embed the collection,
:func:`group_fit`)."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from corpus_index.config import CorpusConfig
from corpus_index.embedders.local import model_path
from corpus_index.embedders.openai_backend import _token_counter
from corpus_index.group_records import DEFAULT_FIT
from corpus_index.linked.group_input import CUT_MARK, GroupInput, TextFit, WithinChars

ESTIMATE = "estimate (4 chars/token)"


def estimate(text: str) -> int:
    """Tokens of ``text`` at 4 characters each (at least 1)."""
    return max(1, math.ceil(len(text) / 4))


def token_counter(embedder_spec: str) -> tuple[Callable[[str], int], str]:
    """The best token counter available offline for the model of ``embedder_spec``, and its
    name."""
    if embedder_spec.startswith("openai:"):
        model = embedder_spec.split(":", 1)[1].split("@", 1)[0]
        count = _token_counter(model)
        return count, ("tiktoken" if count.__name__ == "count" else ESTIMATE)
    if embedder_spec.startswith("st:"):
        tok = _local_tokenizer(embedder_spec.split(":", 1)[1])
        if tok is not None:

            def count(text: str) -> int:
                return len(tok.encode(text).ids)

            return count, "model tokenizer"
    return estimate, ESTIMATE


# OpenAI's embedding models (text-embedding-3-small and -large, ada-002) read 8,191 tokens
OPENAI_INPUT_TOKENS = 8191
# what a fit reads of a text for a limit of n tokens: n times this many characters (no
# tokenizer's token covers more of a text whose words are split at whitespace)
CHARS_A_TOKEN_AT_MOST = 32


@dataclass(frozen=True, slots=True)
class InputLimit:
    """The most of one input ``embedder``'s model reads (``tokens``, counted by
    ``counted_by``), and the fit that cuts a text to it (see
    :class:`~corpus_index.linked.group_input.TextFit`)."""

    embedder: str
    tokens: int
    counted_by: str
    fit: TextFit

    @property
    def key(self) -> str:
        return self.fit.key

    def __call__(self, text: str) -> GroupInput:
        return self.fit(text)

    def describe(self) -> str:
        """``256 tokens of st:all-MiniLM-L6-v2, counted by model tokenizer``."""
        by = "4 characters a token" if self.counted_by == ESTIMATE else self.counted_by
        return f"{self.tokens:,} tokens of {self.embedder or 'no model'}, counted by {by}"


# no profile embeds the collection: the input of the model we ship, estimated
NO_MODEL = InputLimit("", 256, ESTIMATE, DEFAULT_FIT)


@functools.lru_cache(maxsize=8)
def input_limit(embedder_spec: str) -> InputLimit:
    """``embedder_spec``'s input limit: a local model's ``max_seq_length`` counted by its own
    tokenizer (special tokens included), an OpenAI model's 8,191 tokens counted by tiktoken
    (estimated at 4 characters a token without it), and for the hash embedder, which has no
    limit of its own and stands in for the model we ship, that model's 256 tokens estimated
    (1,024 characters).

    Raises:
        ConfigError: a local model whose weights are not installed.
    """
    if embedder_spec.startswith("st:"):
        name = embedder_spec.split(":", 1)[1]
        tokens = _max_seq_length(Path(model_path(name)))
        tok = _local_tokenizer(name)
        if tok is not None:
            fit = TokenizerFit(tokens, embedder_spec, tok)
            return InputLimit(embedder_spec, tokens, "model tokenizer", fit)
        return InputLimit(embedder_spec, tokens, ESTIMATE, WithinChars(tokens * 4))
    if embedder_spec.startswith("openai:"):
        model = embedder_spec.split(":", 1)[1].split("@", 1)[0]
        count = _token_counter(model)
        if count.__name__ == "count":
            counted = CountingFit(OPENAI_INPUT_TOKENS, f"tiktoken:{model}", count)
            return InputLimit(embedder_spec, OPENAI_INPUT_TOKENS, "tiktoken", counted)
        within = WithinChars(OPENAI_INPUT_TOKENS * 4)
        return InputLimit(embedder_spec, OPENAI_INPUT_TOKENS, ESTIMATE, within)
    return InputLimit(embedder_spec, NO_MODEL.tokens, ESTIMATE, DEFAULT_FIT)


@functools.lru_cache(maxsize=4)
def _local_tokenizer(name: str) -> Any:
    """The bundled model ``name``'s own tokenizer (``tokenizer.json``), neither truncating
    nor padding (the file pads every input to 128), or None where the model has no such file.

    Raises:
        ConfigError: the package carrying the model is not installed.
    """
    tokenizer_file = Path(model_path(name)) / "tokenizer.json"
    if not tokenizer_file.is_file():
        return None
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_file))
    tok.no_truncation()
    tok.no_padding()
    return tok


def _max_seq_length(folder: Path) -> int:
    """The ``max_seq_length`` a sentence-transformers model folder declares (256 where it
    declares none, as the model we ship does)."""
    try:
        declared = json.loads((folder / "sentence_bert_config.json").read_text(encoding="utf-8"))
        value = declared.get("max_seq_length") if isinstance(declared, dict) else None
    except (OSError, ValueError):
        value = None
    return value if isinstance(value, int) and value > 2 else NO_MODEL.tokens


def group_fit(config: CorpusConfig, namespace: str) -> InputLimit:
    """The input limit a linked group's text of ``namespace`` is cut to: the smallest of the
    models of the profiles that embed it (the first in configuration order of two alike), so
    every model reads all of it; :data:`NO_MODEL` when no profile does."""
    return smallest([input_limit(p.embedder) for p in config.profiles_in(namespace)])


def smallest(limits: Sequence[InputLimit]) -> InputLimit:
    """The limit of ``limits`` with the fewest tokens (the first of two alike), or
    :data:`NO_MODEL` for none."""
    return min(limits, key=lambda limit: limit.tokens, default=NO_MODEL)


@dataclass(frozen=True, slots=True)
class _TokenFit:
    """A fit of at most ``limit`` tokens, as ``name`` counts them."""

    limit: int
    name: str
    kind: ClassVar[str]  # how it counts (its key says)

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.name}:{self.limit}"


@dataclass(frozen=True, slots=True)
class TokenizerFit(_TokenFit):
    """A fit of at most ``limit`` tokens of a Hugging Face tokenizer (its special tokens
    included), cut after the last whole token that fits with the cut mark."""

    tokenizer: Any  # tokenizers.Tokenizer, neither truncating nor padding
    kind: ClassVar[str] = "tokenizer"

    def count(self, text: str) -> int:
        return len(self.tokenizer.encode(text).ids)

    def __call__(self, text: str) -> GroupInput:
        probe = text[: self.limit * CHARS_A_TOKEN_AT_MOST]
        encoding = self.tokenizer.encode(probe)
        if len(probe) == len(text) and len(encoding.ids) <= self.limit:
            return GroupInput(text, False)
        ends = [
            e
            for (_, e), special in zip(encoding.offsets, encoding.special_tokens_mask, strict=True)
            if not special
        ]
        base = self.count("")  # the special tokens every input has
        room = min(self.limit - base - (self.count(CUT_MARK) - base), len(ends))
        while room > 0:
            cut = probe[: ends[room - 1]].rstrip() + CUT_MARK
            if self.count(cut) <= self.limit:  # a word cut inside may count more
                return GroupInput(cut, True)
            room -= 1
        return GroupInput(CUT_MARK, True)


@dataclass(frozen=True, slots=True)
class CountingFit(_TokenFit):
    """A fit of at most ``limit`` tokens of ``count`` (a tokenizer's count with no offsets,
    as tiktoken's): the longest cut that fits, found by halving."""

    count: Callable[[str], int]
    kind: ClassVar[str] = "counted"

    def __call__(self, text: str) -> GroupInput:
        probe = text[: self.limit * CHARS_A_TOKEN_AT_MOST]
        if len(probe) == len(text) and self.count(text) <= self.limit:
            return GroupInput(text, False)
        low, high = 0, len(probe)  # the longest fitting cut is at least low, below high + 1
        while low < high:
            mid = (low + high + 1) // 2
            if self.count(probe[:mid].rstrip() + CUT_MARK) <= self.limit:
                low = mid
            else:
                high = mid - 1
        return GroupInput(probe[:low].rstrip() + CUT_MARK, True)
