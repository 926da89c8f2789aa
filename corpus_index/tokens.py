"""Counting an embedder's input tokens offline: the model's own tokenizer where one is at hand
(tiktoken for OpenAI models, the local model's ``tokenizer.json``), else an estimate at 4
characters a token. ``corpus plan-migration`` and the ``embeddings`` step count alike."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from corpus_index.embedders.local import model_path
from corpus_index.embedders.openai_backend import _token_counter

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
        tokenizer_file = Path(model_path(embedder_spec.split(":", 1)[1])) / "tokenizer.json"
        if tokenizer_file.is_file():
            from tokenizers import Tokenizer

            tok = Tokenizer.from_file(str(tokenizer_file))
            tok.no_truncation()

            def count(text: str) -> int:
                return len(tok.encode(text).ids)

            return count, "model tokenizer"
    return estimate, ESTIMATE
