"""The openai: embedder against a real local HTTP server that speaks the embeddings protocol."""

from __future__ import annotations

import importlib.util
import math
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from corpus_index.embedders import Embedder, make_embedder
from corpus_index.embedders.openai_backend import OpenAIEmbedder
from corpus_index.embedding import embed_with_cache
from corpus_index.errors import (
    ConfigError,
    DimensionMismatchError,
    EmbedderError,
    RefusedInputError,
    RetryableError,
)
from corpus_index.refusals import Refusals
from tests.support.openai_server import FakeOpenAIServer, count_tokens, serve, vector_for

TEXTS = ["alpha beta", "gamma delta epsilon", "zeta", "eta theta iota kappa"]


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with serve() as srv:
        yield srv


def embedder(
    srv: FakeOpenAIServer, model: str = "text-embedding-3-small", **kw: Any
) -> OpenAIEmbedder:
    options: dict[str, Any] = {"api_key": "test", "backoff_base": 0.01, "timeout": 5.0}
    options.update(kw)
    return OpenAIEmbedder(model, base_url=srv.base_url, **options)


def batch_sizes(srv: FakeOpenAIServer) -> list[int]:
    return [len(body["input"]) for body in srv.requests]


# --- happy path ---------------------------------------------------------------------------------


def test_embeds_in_order_with_float32_unit_vectors(server: FakeOpenAIServer) -> None:
    emb = embedder(server)
    vectors = emb.embed(TEXTS)

    assert vectors.shape == (len(TEXTS), 1536)
    assert vectors.dtype == np.float32
    for row, text in zip(vectors, TEXTS, strict=True):
        np.testing.assert_array_equal(row, vector_for(text, 1536))
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    body = server.requests[0]
    assert body["model"] == "text-embedding-3-small"
    assert body["input"] == TEXTS
    assert body["encoding_format"] == "base64"
    assert "dimensions" not in body
    assert server.authorization == ["Bearer test"]


def test_is_deterministic(server: FakeOpenAIServer) -> None:
    emb = embedder(server)
    np.testing.assert_array_equal(emb.embed(TEXTS), emb.embed(TEXTS))
    np.testing.assert_array_equal(emb.embed(TEXTS[1:2])[0], emb.embed(TEXTS)[1])


def test_describes_itself() -> None:
    emb = OpenAIEmbedder("text-embedding-3-large", base_url=None, api_key="k")
    assert isinstance(emb, Embedder)
    assert (emb.backend_spec, emb.dim, emb.normalized, emb.revision) == (
        "openai:text-embedding-3-large",
        3072,
        True,
        "text-embedding-3-large",
    )
    assert emb.base_url == "https://api.openai.com/v1"
    ada = OpenAIEmbedder("text-embedding-ada-002", base_url=None, api_key="k")
    assert (ada.dim, ada.normalized) == (1536, True)


def test_sends_dimensions_for_text_embedding_3(server: FakeOpenAIServer) -> None:
    emb = embedder(server, dimensions=256)
    assert emb.backend_spec == "openai:text-embedding-3-small@256"
    assert emb.dim == 256
    vectors = emb.embed(TEXTS)

    assert vectors.shape == (len(TEXTS), 256)
    assert server.requests[0]["dimensions"] == 256
    np.testing.assert_array_equal(vectors[2], vector_for(TEXTS[2], 256, full_dim=1536))
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_does_not_send_dimensions_to_other_models() -> None:
    with serve(default_dim=384) as srv:
        emb = embedder(srv, "local-minilm", dimensions=384)
        assert emb.backend_spec == "openai:local-minilm@384"
        assert emb.embed(TEXTS).shape == (len(TEXTS), 384)
        assert "dimensions" not in srv.requests[0]


@pytest.mark.parametrize(
    ("model", "options", "words"),
    [
        ("text-embedding-ada-002", {"dimensions": 256}, "does not support dimensions"),
        ("text-embedding-3-small", {"dimensions": 4096}, "at most 1536"),
        ("text-embedding-3-small", {"dimensions": 0}, "dimensions must be >= 1"),
        ("text-embedding-3-small", {"batch_size": 0}, "batch_size"),
        ("text-embedding-3-small", {"max_batch_tokens": 0}, "max_batch_tokens"),
        ("text-embedding-3-small", {"max_retries": -1}, "max_retries"),
        ("text-embedding-3-small", {"timeout": 0}, "timeout"),
        ("text-embedding-3-small", {"api_key": ""}, "OPENAI_API_KEY"),
    ],
)
def test_rejects_bad_options(model: str, options: dict[str, Any], words: str) -> None:
    kw: dict[str, Any] = {"api_key": "k"}
    kw.update(options)
    with pytest.raises(ConfigError, match=words):
        OpenAIEmbedder(model, base_url=None, **kw)


def test_orders_results_by_index(server: FakeOpenAIServer) -> None:
    server.script.append({"shuffle": True})
    vectors = embedder(server).embed(TEXTS)
    for row, text in zip(vectors, TEXTS, strict=True):
        np.testing.assert_array_equal(row, vector_for(text, 1536))


def test_accepts_float_lists_from_servers_that_ignore_base64(server: FakeOpenAIServer) -> None:
    server.script.append({"float": True})
    vectors = embedder(server).embed(TEXTS)
    np.testing.assert_allclose(vectors[1], vector_for(TEXTS[1], 1536), rtol=0, atol=1e-7)


def test_a_learned_dim_is_forgotten_and_probed_again_a_known_one_stays() -> None:
    """A learned length (a self-hosted model) is forgotten on request and probed again, so one
    wrong answer is not the model's length for good; a known or configured one is kept."""
    with serve(default_dim=48) as srv:
        learned = embedder(srv, "self-hosted")
        srv.script[:] = [{"vector_dim": 7}]
        assert learned.dim_learned and learned.dim == 7
        learned.forget_dim()
        assert learned.dim == 48 and len(srv.requests) == 2
        for known in (embedder(srv, "text-embedding-3-small"), embedder(srv, "m", dimensions=32)):
            assert not known.dim_learned
            known.forget_dim()
            assert known.dim in (1536, 32) and len(srv.requests) == 2


def test_empty_input_makes_no_request(server: FakeOpenAIServer) -> None:
    emb = embedder(server)
    assert emb.embed([]).shape == (0, 1536)
    assert server.requests == []


def test_learns_dim_and_normalization_of_unknown_models() -> None:
    with serve(default_dim=384) as srv:
        emb = embedder(srv, "my-local-model")
        assert emb.backend_spec == "openai:my-local-model"
        assert emb.dim == 384
        assert emb.normalized is True
        assert [body["input"] for body in srv.requests] == [["dimension probe"]]
        assert emb.embed(TEXTS).shape == (len(TEXTS), 384)
        assert len(srv.requests) == 2
    with serve(default_dim=384, normalize=False) as srv:
        raw = embedder(srv, "raw-model")
        assert raw.embed(TEXTS).shape == (len(TEXTS), 384)
        assert raw.normalized is False
        assert raw.dim == 384
        assert len(srv.requests) == 1


# --- batching ------------------------------------------------------------------------------------


def test_batches_by_batch_size(server: FakeOpenAIServer) -> None:
    texts = [f"text number {i}" for i in range(10)]
    emb = embedder(server, batch_size=4)
    vectors = emb.embed(texts)

    assert batch_sizes(server) == [4, 4, 2]
    assert [t for body in server.requests for t in body["input"]] == texts
    assert (emb.stats.calls, emb.stats.inputs) == (3, 10)
    np.testing.assert_array_equal(vectors[9], vector_for(texts[9], 1536))


@pytest.mark.skipif(
    importlib.util.find_spec("tiktoken") is not None,
    reason="expected batches assume the 4-characters-a-token estimate",
)
def test_batches_by_token_budget(server: FakeOpenAIServer) -> None:
    texts = ["x" * 40] * 6 + ["y" * 400] + ["z" * 4]  # 10 tokens each, then 100, then 1
    emb = embedder(server, batch_size=64, max_batch_tokens=25)
    vectors = emb.embed(texts)

    # two 10-token texts fit in 25; the 100-token text exceeds the budget and goes alone
    assert batch_sizes(server) == [2, 2, 2, 1, 1]
    assert vectors.shape == (8, 1536)
    np.testing.assert_array_equal(vectors[6], vector_for("y" * 400, 1536))


# --- retries -------------------------------------------------------------------------------------


def test_retries_a_429_then_succeeds(server: FakeOpenAIServer) -> None:
    server.script.append({"status": 429, "retry_after": 0})
    emb = embedder(server)
    vectors = emb.embed(TEXTS)

    assert vectors.shape == (len(TEXTS), 1536)
    assert emb.stats.retries == 1
    assert emb.stats.calls == 2
    assert len(server.requests) == 2


def test_waits_as_long_as_retry_after_asks(server: FakeOpenAIServer) -> None:
    server.script.append({"status": 429, "retry_after": 0.4})
    emb = embedder(server)
    start = time.monotonic()
    emb.embed(TEXTS)
    assert time.monotonic() - start >= 0.4
    assert emb.stats.retries == 1


def test_retries_500_twice_then_succeeds(server: FakeOpenAIServer) -> None:
    server.script.extend([{"status": 500}, {"status": 502}])
    emb = embedder(server)
    vectors = emb.embed(TEXTS)

    np.testing.assert_array_equal(vectors[0], vector_for(TEXTS[0], 1536))
    assert emb.stats.retries == 2
    assert len(server.requests) == 3


def test_retries_a_timeout_then_succeeds(server: FakeOpenAIServer) -> None:
    server.script.append({"sleep": 2.0})
    emb = embedder(server, timeout=0.3)
    start = time.monotonic()
    vectors = emb.embed(TEXTS)

    assert vectors.shape == (len(TEXTS), 1536)
    assert emb.stats.retries == 1
    assert time.monotonic() - start < 1.9  # did not wait for the slow answer


def test_retries_a_dropped_connection(server: FakeOpenAIServer) -> None:
    server.script.append({"disconnect": True})
    emb = embedder(server)
    assert emb.embed(TEXTS).shape == (len(TEXTS), 1536)
    assert emb.stats.retries == 1


def test_gives_up_after_max_retries(server: FakeOpenAIServer) -> None:
    server.script.extend([{"status": 503}] * 3)
    emb = embedder(server, max_retries=2)
    with pytest.raises(RetryableError, match="503") as info:
        emb.embed(TEXTS)

    assert "3 attempts" in str(info.value)
    assert len(server.requests) == 3
    assert (emb.stats.calls, emb.stats.retries, emb.stats.inputs) == (3, 2, 0)


def test_gives_up_on_repeated_timeouts(server: FakeOpenAIServer) -> None:
    server.script.extend([{"sleep": 2.0}] * 2)
    emb = embedder(server, timeout=0.2, max_retries=1)
    with pytest.raises(RetryableError, match="timeout"):
        emb.embed(TEXTS)
    assert len(server.requests) == 2


def test_unreachable_server_is_retryable() -> None:
    with serve() as srv:
        base_url = srv.base_url  # the port is closed once the block exits
    emb = OpenAIEmbedder(
        "text-embedding-3-small", base_url=base_url, api_key="k", max_retries=1, backoff_base=0.01
    )
    with pytest.raises(RetryableError, match="connection error"):
        emb.embed(["x"])
    assert emb.stats.calls == 2


# --- permanent failures --------------------------------------------------------------------------


def test_400_fails_at_once_with_the_server_message(server: FakeOpenAIServer) -> None:
    server.script.append({"status": 400, "message": "Input too long for this model"})
    emb = embedder(server)
    with pytest.raises(EmbedderError) as info:
        emb.embed(TEXTS)

    message = str(info.value)
    assert "400" in message
    assert "Input too long for this model" in message
    assert server.base_url in message
    assert len(server.requests) == 1
    assert emb.stats.retries == 0


@pytest.mark.parametrize("status", [403, 404, 422])
def test_other_client_errors_fail_at_once(server: FakeOpenAIServer, status: int) -> None:
    server.script.append({"status": status, "message": f"refused with {status}"})
    emb = embedder(server)
    with pytest.raises(EmbedderError, match=f"HTTP {status}: refused with {status}"):
        emb.embed(TEXTS)
    assert len(server.requests) == 1


def test_401_names_the_key_variable() -> None:
    with serve(api_key="right") as srv:
        emb = embedder(srv, api_key="wrong")
        with pytest.raises(EmbedderError) as info:
            emb.embed(TEXTS)
        assert len(srv.requests) == 1
    message = str(info.value)
    assert "401" in message
    assert "Incorrect API key" in message
    assert "OPENAI_API_KEY" in message


def test_a_key_with_surrounding_whitespace_is_sent_without_it(server: FakeOpenAIServer) -> None:
    emb = embedder(server, api_key="  sk-from-a-file\r\n")
    assert emb.embed(TEXTS[:1]).shape == (1, 1536)
    assert server.authorization == ["Bearer sk-from-a-file"]


@pytest.mark.parametrize("key", ["sk-sec\nret", "sk-a\r\nX-Extra: 1", "sk-secr\u00e9t", "sk-\x00x"])
def test_a_key_no_header_can_carry_is_refused_without_quoting_it(key: str) -> None:
    with serve() as srv:
        with pytest.raises(ConfigError) as info:
            make_embedder(
                "openai:text-embedding-3-small",
                base_url=srv.base_url,
                api_key_env="EMBEDDINGS_KEY",
                environ={"EMBEDDINGS_KEY": key},
            )
        assert srv.requests == []
    message = str(info.value)
    assert "EMBEDDINGS_KEY" in message
    assert "HTTP header" in message
    assert "sk-" not in message


def test_401_names_the_profiles_key_variable() -> None:
    with serve(api_key="right") as srv:
        emb = make_embedder(
            "openai:text-embedding-3-small",
            base_url=srv.base_url,
            api_key_env="EMBEDDINGS_KEY",
            environ={"EMBEDDINGS_KEY": "wrong"},
        )
        with pytest.raises(EmbedderError, match="401.*set EMBEDDINGS_KEY to a valid key"):
            emb.embed(TEXTS)


def test_server_error_for_empty_text_is_permanent(server: FakeOpenAIServer) -> None:
    with pytest.raises(EmbedderError, match="400"):
        embedder(server).embed(["fine", ""])
    assert len(server.requests) == 1


def test_wrong_dimension_raises(server: FakeOpenAIServer) -> None:
    server.script.append({"vector_dim": 7})
    with pytest.raises(DimensionMismatchError, match="7-dimensional vectors, expected 1536"):
        embedder(server).embed(TEXTS)


def test_nan_raises(server: FakeOpenAIServer) -> None:
    server.script.append({"nan": True})
    emb = embedder(server)
    with pytest.raises(EmbedderError, match="non-finite"):
        emb.embed(TEXTS)
    assert len(server.requests) == 1


def _item(index: object, embedding: object) -> dict[str, object]:
    return {"object": "embedding", "index": index, "embedding": embedding}


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"<html>gateway</html>", "not JSON"),
        ({"data": {"index": 0}}, "not a list of embeddings"),
        ({"data": [{"embedding": [0.6, 0.8]}]}, "no integer index"),
        ({"data": [_item("0", [0.6, 0.8])]}, "no integer index"),
        ({"data": [[0, [0.6, 0.8]]]}, "no integer index"),
        ({"data": [_item(0, None)]}, "not a non-empty list of numbers"),
        ({"data": [_item(0, [])]}, "not a non-empty list of numbers"),
        ({"data": [_item(0, ["0.6", "0.8"])]}, "not a non-empty list of numbers"),
        ({"data": [_item(0, [[0.6], [0.8]])]}, "not a non-empty list of numbers"),
        ({"data": [_item(0, "abc")]}, "not valid base64"),
        ({"data": [_item(0, "!!!!")]}, "not valid base64"),
        ({"data": [_item(0, "")]}, "0 bytes of base64"),
    ],
)
def test_a_malformed_response_fails_with_a_clear_error(body: object, words: str) -> None:
    with serve(default_dim=2) as srv:
        srv.script.append({"body": body})
        emb = embedder(srv, "my-local-model")
        with pytest.raises(EmbedderError, match=words):
            emb.embed(["one input"])
        assert (emb.stats.inputs, emb.stats.retries) == (0, 0)
        # nothing was learned from it: the next answer sets the dimension
        assert emb.embed(["one input"]).shape == (1, 2)
        assert emb.dim == 2


def test_usage_that_is_no_count_counts_no_tokens(server: FakeOpenAIServer) -> None:
    vector = vector_for("x", 1536).tolist()
    server.script.append({"body": {"data": [_item(0, vector)], "usage": {"total_tokens": "lots"}}})
    emb = embedder(server)
    np.testing.assert_array_equal(emb.embed(["x"])[0], vector_for("x", 1536))
    assert emb.stats.tokens == 0


# --- accounting ----------------------------------------------------------------------------------


def test_counts_tokens_and_cost(server: FakeOpenAIServer) -> None:
    emb = embedder(server, batch_size=2, price_per_million_tokens=0.02)
    emb.embed(TEXTS)
    emb.embed(TEXTS[:1])

    tokens = sum(count_tokens(t) for t in TEXTS) + count_tokens(TEXTS[0])
    assert emb.stats.tokens == tokens
    assert emb.stats.inputs == len(TEXTS) + 1
    assert emb.stats.calls == 3
    assert math.isclose(emb.stats.cost_usd, tokens * 0.02 / 1_000_000)


def test_cost_stays_zero_without_a_price(server: FakeOpenAIServer) -> None:
    emb = embedder(server)
    emb.embed(TEXTS)
    assert emb.stats.tokens > 0
    assert emb.stats.cost_usd == 0.0


# --- make_embedder -------------------------------------------------------------------------------


def test_make_embedder_builds_it(server: FakeOpenAIServer) -> None:
    emb = make_embedder(
        "openai:text-embedding-3-small",
        base_url=server.base_url,
        dimensions=64,
        environ={"OPENAI_API_KEY": "test"},
    )
    assert isinstance(emb, OpenAIEmbedder)
    assert isinstance(emb, Embedder)
    assert emb.backend_spec == "openai:text-embedding-3-small@64"
    assert emb.embed(TEXTS).shape == (len(TEXTS), 64)
    assert server.authorization == ["Bearer test"]


@pytest.mark.parametrize("env_var", ["OPENAI_API_KEY", "EMBEDDINGS_KEY"])
def test_make_embedder_needs_the_key(env_var: str) -> None:
    with pytest.raises(ConfigError, match=env_var):
        make_embedder(
            "openai:text-embedding-3-small",
            base_url="http://127.0.0.1:9/v1",
            api_key_env=env_var,
            environ={},
        )


# --- refused inputs ------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [400, 413, 422])
def test_a_request_refused_for_what_it_holds_is_a_refused_input(
    server: FakeOpenAIServer, status: int
) -> None:
    server.script.append({"status": status, "message": "input too long"})
    with pytest.raises(RefusedInputError, match=f"HTTP {status}: input too long"):
        embedder(server).embed(TEXTS)


@pytest.mark.parametrize("status", [401, 403, 404])
def test_other_refusals_are_not_the_inputs_fault(server: FakeOpenAIServer, status: int) -> None:
    server.script.append({"status": status, "message": "no"})
    with pytest.raises(EmbedderError) as info:
        embedder(server).embed(TEXTS)
    assert not isinstance(info.value, RefusedInputError)


def test_a_refusals_message_is_bounded_and_never_quotes_the_key(server: FakeOpenAIServer) -> None:
    server.script.append({"status": 400, "message": "bad request from sk-secret: " + "x" * 5000})
    with pytest.raises(RefusedInputError) as info:
        embedder(server, api_key="sk-secret", api_key_env="REMOTE_KEY").embed(TEXTS)
    message = str(info.value)
    assert "sk-secret" not in message and "<REMOTE_KEY>" in message
    assert len(message) < 500 and message.endswith("...")


def test_a_refused_batch_is_split_to_find_its_input_and_the_others_are_embedded(
    server: FakeOpenAIServer,
) -> None:
    texts = {f"h{i:02d}": f"text number {i}" for i in range(16)}
    texts["h07"] = "text number 7 TOO-LONG"
    server.refuse["TOO-LONG"] = "This model's maximum context length is 8192 tokens"
    refusals = Refusals(at_most=10)
    result = embed_with_cache(texts, embedder(server), None, batch_size=16, refusals=refusals)

    assert list(result.refused) == ["h07"]
    assert "HTTP 400: This model's maximum context length" in result.refused["h07"]
    assert result.hashes == sorted(set(texts) - {"h07"}) and result.embedded == 15
    for h, vector in zip(result.hashes, result.vectors, strict=True):
        np.testing.assert_array_equal(vector, vector_for(texts[h], 1536))
    # the batch, then two halves at each of log2(16) levels
    assert len(server.requests) <= 1 + 2 * 4
    assert refusals.count == 1 and refusals.requests == len(server.requests) - 1


def test_a_server_refusing_everything_fails_after_a_bounded_number_of_requests(
    server: FakeOpenAIServer,
) -> None:
    texts = {f"h{i:03d}": f"text number {i}" for i in range(256)}
    server.refuse["text"] = "Invalid model option"
    with pytest.raises(EmbedderError, match="11 inputs were refused, more than the 10") as info:
        embed_with_cache(
            texts, embedder(server), None, batch_size=64, refusals=Refusals(at_most=10)
        )
    assert not isinstance(info.value, RefusedInputError)
    assert "Invalid model option" in str(info.value)
    # 11 refused alone, each found by splitting: about two requests each, not one per input
    assert len(server.requests) <= 2 * 11 + 6


def test_a_server_error_is_retried_and_never_split(server: FakeOpenAIServer) -> None:
    texts = {f"h{i:02d}": f"text number {i}" for i in range(16)}
    server.script.extend([{"status": 500, "retry_after": 0}] * 3)
    with pytest.raises(RetryableError, match="HTTP 500"):
        embed_with_cache(
            texts,
            embedder(server, max_retries=2),
            None,
            batch_size=16,
            refusals=Refusals(at_most=10),
        )
    assert [len(r["input"]) for r in server.requests] == [16, 16, 16]


def test_without_refusals_a_refused_batch_fails_whole(server: FakeOpenAIServer) -> None:
    server.refuse["TOO-LONG"] = "too long"
    with pytest.raises(RefusedInputError):
        embed_with_cache({"a": "fine", "b": "TOO-LONG"}, embedder(server), None)
    assert len(server.requests) == 1
