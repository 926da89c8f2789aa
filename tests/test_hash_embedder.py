"""``hash:v1-<dim>``: deterministic feature hashing, and backend_spec validation."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from corpus_index.embedders import Embedder, make_embedder, validate_backend_spec
from corpus_index.embedders.hashing import HashEmbedder
from corpus_index.errors import ConfigError

TEXTS = [
    "market_analysis\nsummary: Rents grew four percent in Phoenix.",
    "risk_assessment\nflags[0].description: Roofs are past their useful life.",
    "Zürich 東京 café",
    "",
]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_vectors_are_identical_across_instances() -> None:
    a = HashEmbedder(64).embed(TEXTS)
    b = HashEmbedder(64).embed(TEXTS)
    assert a.tobytes() == b.tobytes()


def test_vectors_are_identical_across_processes_with_different_hash_seeds() -> None:
    # Python's hash() is salted per process; the embedder must not depend on it
    script = (
        "import sys, json\n"
        "from corpus_index.embedders.hashing import HashEmbedder\n"
        "print(HashEmbedder(64).embed(json.loads(sys.argv[1])).tobytes().hex())\n"
    )
    outputs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", script, json.dumps(TEXTS)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        outputs.add(out.stdout.strip())
    assert outputs == {HashEmbedder(64).embed(TEXTS).tobytes().hex()}


def test_one_text_embeds_the_same_alone_or_in_a_batch() -> None:
    emb = HashEmbedder(32)
    batch = emb.embed(TEXTS)
    for i, text in enumerate(TEXTS):
        assert emb.embed([text])[0].tobytes() == batch[i].tobytes()


@pytest.mark.parametrize("dim", [1, 8, 64, 384])
def test_shape_dtype_and_unit_norm(dim: int) -> None:
    vectors = HashEmbedder(dim).embed(TEXTS)
    assert vectors.shape == (len(TEXTS), dim)
    assert vectors.dtype == np.float32
    assert np.all(np.isfinite(vectors))
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-6)


def test_no_texts_gives_an_empty_matrix() -> None:
    out = HashEmbedder(16).embed([])
    assert out.shape == (0, 16)
    assert out.dtype == np.float32


@pytest.mark.parametrize("text", ["", "   ", "!!! ... ---", "\n\t"])
def test_text_without_words_gets_the_first_unit_vector(text: str) -> None:
    expected = np.zeros(16, np.float32)
    expected[0] = 1.0
    assert HashEmbedder(16).embed([text])[0].tobytes() == expected.tobytes()


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Rent Growth in PHOENIX", "rent growth in phoenix"),
        ("rent growth, in phoenix!", "rent growth in phoenix"),
        ("rent  growth\nin\tphoenix", "rent growth in phoenix"),
    ],
    ids=["case", "punctuation", "whitespace"],
)
def test_case_punctuation_and_spacing_do_not_matter(a: str, b: str) -> None:
    emb = HashEmbedder(64)
    va, vb = emb.embed([a, b])
    assert va.tobytes() == vb.tobytes()


def test_word_order_matters_through_bigrams() -> None:
    va, vb = HashEmbedder(256).embed(["cap rate exit", "exit rate cap"])
    assert va.tobytes() != vb.tobytes()
    assert cosine(va, vb) > 0.3  # same unigrams


@pytest.mark.parametrize(
    ("anchor", "related", "unrelated"),
    [
        (
            "multifamily rent growth in Phoenix",
            "Phoenix multifamily rent growth remains strong",
            "windstorm insurance premiums doubled at renewal",
        ),
        (
            "roofs and boilers are past their useful life",
            "the boilers are past their useful life",
            "sponsor has never operated an asset of this size",
        ),
        ("東京 オフィス 賃料", "東京 オフィス 空室率", "Phoenix garden apartments"),
    ],
    ids=["market", "risk", "non-latin"],
)
def test_texts_sharing_words_are_closer_than_unrelated_ones(
    anchor: str, related: str, unrelated: str
) -> None:
    va, vr, vu = HashEmbedder(256).embed([anchor, related, unrelated])
    assert cosine(va, vr) > cosine(va, vu) + 0.3
    assert cosine(va, vr) > 0.4


def test_stats_count_calls_and_inputs() -> None:
    emb = HashEmbedder(8)
    emb.embed(["a", "b"])
    emb.embed([])
    assert (emb.stats.calls, emb.stats.inputs, emb.stats.tokens, emb.stats.cost_usd) == (
        2,
        2,
        0,
        0.0,
    )


def test_make_embedder_builds_the_hash_backend() -> None:
    emb = make_embedder("hash:v1-32")
    assert isinstance(emb, HashEmbedder)
    assert isinstance(emb, Embedder)
    assert (emb.backend_spec, emb.dim, emb.normalized, emb.revision) == (
        "hash:v1-32",
        32,
        True,
        "v1",
    )
    assert emb.embed(["x"]).shape == (1, 32)
    assert emb.embed(["x"]).tobytes() == HashEmbedder(32).embed(["x"]).tobytes()


def test_make_embedder_refuses_a_bad_spec() -> None:
    with pytest.raises(ConfigError, match="unknown backend 'hash:v2-32'"):
        make_embedder("hash:v2-32")


def test_make_embedder_openai_needs_its_key_from_the_environment() -> None:
    with pytest.raises(ConfigError, match="set the API key in the environment variable MY_KEY"):
        make_embedder("openai:text-embedding-3-small", api_key_env="MY_KEY", environ={})


SPECS: list[tuple[str, str | None]] = [
    # (spec, fragment of the problem, or None when well formed)
    ("hash:v1-32", None),
    ("hash:v1-1", None),
    ("hash:v1-8192", None),
    ("hash:v1-0", "hash dimension must be 1..8192 (got 0)"),
    ("hash:v1-8193", "hash dimension must be 1..8192 (got 8193)"),
    ("hash:v1-", "unknown backend"),
    ("hash:v1--4", "unknown backend"),
    ("hash:v2-32", "unknown backend"),
    ("hash:v1-32x", "unknown backend"),
    ("HASH:v1-32", "unknown backend"),
    ("st:all-MiniLM-L6-v2", None),
    ("st:all-mpnet-base-v2", "unknown sentence-transformers model 'all-mpnet-base-v2'"),
    ("st:", "unknown sentence-transformers model ''"),
    ("openai:text-embedding-3-small", None),
    ("openai:my-local-model", None),
    ("openai:", "needs a model name"),
    ("", "unknown backend ''"),
    ("bert-base", "unknown backend 'bert-base'"),
]


@pytest.mark.parametrize(("spec", "problem"), SPECS, ids=[s[0] or "(empty)" for s in SPECS])
def test_validate_backend_spec(spec: str, problem: str | None) -> None:
    result = validate_backend_spec(spec)
    if problem is None:
        assert result is None
    else:
        assert result is not None and problem in result
