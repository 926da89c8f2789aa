"""``openai:<model>``: the OpenAI embeddings API, or any server that speaks its protocol.

Requests are batched by count and by an estimated token budget. Rate limits (429), server errors
(5xx), timeouts and dropped connections are retried here, with exponential backoff and jitter,
honouring ``Retry-After``; the client's own retries are turned off so that every HTTP request is
counted in ``stats``. Other 4xx answers fail at once: retrying a bad request or a bad key does
not fix it. A request refused for what it holds (400, 413, 422: an input too long or invalid
for the model) raises ``RefusedInputError``, so that the caller can split the batch to find the
input (see ``corpus_index.refusals``).
"""

from __future__ import annotations

import base64
import binascii
import email.utils
import math
import random
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from corpus_index.embedders.base import EmbedStats
from corpus_index.errors import (
    ConfigError,
    DimensionMismatchError,
    EmbedderError,
    NonFiniteVectorError,
    RefusedInputError,
    RetryableError,
)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
KNOWN_DIMS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
PROBE_TEXT = "dimension probe"

_RETRY_STATUSES = frozenset({408, 409, 429})  # and every 5xx
# a request refused for what it holds: 400 (OpenAI: an input over the model's context length),
# 413 (a body too large), 422 (a self-hosted server's input validation)
_REFUSED_STATUSES = frozenset({400, 413, 422})
_MAX_MESSAGE_CHARS = 300  # of a server's error message quoted in an error
_MAX_RETRY_AFTER_S = 60.0  # a server asking for longer is waited on for this long at most
_MAX_BACKOFF_S = 30.0
_NORM_TOLERANCE = 1e-3


def _supports_dimensions(model: str) -> bool:
    return model.startswith("text-embedding-3")


def _known_normalized(model: str) -> bool | None:
    if model.startswith("text-embedding-3") or model == "text-embedding-ada-002":
        return True
    return None


def _import_openai(needed_by: str = "the openai: embedder") -> Any:
    try:
        import openai
    except ImportError:
        raise ImportError(f"{needed_by} needs the openai client: pip install openai") from None
    return openai


def openai_client(
    api_key: str, base_url: str, timeout: float, *, needed_by: str
) -> tuple[Any, Any]:
    """An ``openai.OpenAI`` client of ``base_url`` with its own retries off (each attempt is
    made, bounded and counted by its caller), and the ``openai`` module, imported now
    (``needed_by`` is named if it is not installed)."""
    openai = _import_openai(needed_by)
    client = openai.OpenAI(api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout)
    return client, openai


def checked_api_key(api_key: str | None, *, who: str, api_key_env: str) -> str:
    """``api_key`` without the whitespace around it, as a bearer header can carry it.

    Raises:
        ConfigError: it is empty, or holds a control or non-ASCII character (named by ``who``
            and ``api_key_env``, never quoting the key: an HTTP client's error would).
    """
    key = (api_key or "").strip()
    if not key:
        raise ConfigError(f"{who}: the API key is empty; set {api_key_env}")
    if not (key.isascii() and key.isprintable()):
        raise ConfigError(
            f"{who}: the API key in {api_key_env} holds a character an HTTP header cannot "
            "carry (a control character or a non-ASCII one); set it to the key alone"
        )
    return key


def backoff_s(attempt: int, retry_after: float | None, base: float, most: float) -> float:
    """Seconds to wait before retry ``attempt`` + 1: what the server asked for (at most
    ``_MAX_RETRY_AFTER_S``), else ``base`` doubled each attempt up to ``most``, half fixed,
    half random, so that clients that failed together do not retry together."""
    if retry_after is not None:
        return min(retry_after, _MAX_RETRY_AFTER_S)
    delay = min(base * 2.0**attempt, most)
    return delay / 2 + random.uniform(0, delay / 2)


def _token_counter(model: str) -> Callable[[str], int]:
    """tiktoken's count when it is installed and has the encoding, else about 4 chars a token."""

    def estimate(text: str) -> int:
        return max(1, math.ceil(len(text) / 4))

    try:
        import tiktoken
    except ImportError:
        return estimate
    try:
        try:
            encoding = tiktoken.encoding_for_model(model)
        except KeyError:
            encoding = tiktoken.get_encoding("cl100k_base")
    except Exception:  # the encoding files may need a download this machine cannot make
        return estimate

    def count(text: str) -> int:
        return max(1, len(encoding.encode(text, disallowed_special=())))

    return count


def retry_after(headers: Any) -> float | None:
    """Seconds the server asked us to wait (``retry-after-ms`` or ``Retry-After``), if any."""
    if headers is None:
        return None
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def server_message(exc: Any) -> str:
    """The ``error.message`` the server sent, or the client's summary of the failure."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        message = body.get("message")
        if isinstance(message, str) and message:
            return message
    return str(getattr(exc, "message", "") or exc)


class OpenAIEmbedder:
    """Embeddings from the OpenAI API or an OpenAI-compatible server.

    ``dim`` and ``normalized`` are known up front for OpenAI's models (or when ``dimensions`` is
    given); for other models they are learned from the first response, and reading them before
    any ``embed`` call embeds the text ``"dimension probe"`` once.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None,
        api_key: str,
        api_key_env: str = "OPENAI_API_KEY",
        dimensions: int | None = None,
        batch_size: int = 64,
        max_batch_tokens: int = 8000,
        price_per_million_tokens: float | None = None,
        max_retries: int = 5,
        timeout: float = 30.0,
        backoff_base: float = 0.5,
    ) -> None:
        """Configure the embedder; no request is made and no client is built yet.

        Args:
            model: the model name the server knows, e.g. ``text-embedding-3-small``.
            base_url: the API root (``.../v1``); None means OpenAI's.
            api_key: the bearer token; whitespace around it (a key file's newline) is dropped.
            api_key_env: the environment variable the key came from, named in errors.
            dimensions: shortened vectors (text-embedding-3 models); for other models, the
                vector length the server is expected to return.
            batch_size: most inputs in one request.
            max_batch_tokens: most estimated tokens in one request (a longer single input
                still goes alone).
            price_per_million_tokens: USD per million tokens, for ``stats.cost_usd``.
            max_retries: retries of one request after a transient failure.
            timeout: seconds to wait for one response.
            backoff_base: first backoff in seconds; it doubles with every retry.

        Raises:
            ConfigError: an option is out of range or the model cannot honour ``dimensions``.
        """
        if not model:
            raise ConfigError("openai: needs a model name, e.g. openai:text-embedding-3-small")
        api_key = checked_api_key(api_key, who=f"openai:{model}", api_key_env=api_key_env)
        if dimensions is not None:
            if dimensions < 1:
                raise ConfigError(f"openai:{model}: dimensions must be >= 1 (got {dimensions})")
            native = KNOWN_DIMS.get(model)
            if native is not None and not _supports_dimensions(model):
                raise ConfigError(
                    f"openai:{model}: this model does not support dimensions; "
                    "use a text-embedding-3 model or drop dimensions"
                )
            if native is not None and dimensions > native:
                raise ConfigError(
                    f"openai:{model}: dimensions must be at most {native} (got {dimensions})"
                )
        for name, value in (("batch_size", batch_size), ("max_batch_tokens", max_batch_tokens)):
            if value < 1:
                raise ConfigError(f"openai:{model}: {name} must be >= 1 (got {value})")
        if max_retries < 0:
            raise ConfigError(f"openai:{model}: max_retries must be >= 0 (got {max_retries})")
        if not timeout > 0:
            raise ConfigError(f"openai:{model}: timeout must be > 0 seconds (got {timeout})")
        if backoff_base < 0:
            raise ConfigError(f"openai:{model}: backoff_base must be >= 0 (got {backoff_base})")
        if price_per_million_tokens is not None and price_per_million_tokens < 0:
            raise ConfigError(
                f"openai:{model}: price_per_million_tokens must be >= 0 "
                f"(got {price_per_million_tokens})"
            )

        self.model = model
        self.base_url = base_url or DEFAULT_BASE_URL
        self.dimensions = dimensions
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self.price_per_million_tokens = price_per_million_tokens
        self.max_retries = max_retries
        self.timeout = timeout
        self.backoff_base = backoff_base
        self.backend_spec = f"openai:{model}" + (f"@{dimensions}" if dimensions else "")
        self.revision = model
        self.stats = EmbedStats()
        self._api_key = api_key
        self._api_key_env = api_key_env
        self._dim: int | None = dimensions or KNOWN_DIMS.get(model)
        self._normalized: bool | None = _known_normalized(model)
        self._client: Any = None
        self._openai: Any = None
        self._count_tokens: Callable[[str], int] | None = None

    def __repr__(self) -> str:
        return f"OpenAIEmbedder({self.backend_spec!r}, base_url={self.base_url!r})"

    @property
    def dim(self) -> int:
        """Vector length; learned from one probe request when the model is unknown."""
        dim = self._dim
        if dim is None:
            # the probe's own length: another thread may forget what it taught meanwhile
            dim = int(self.embed([PROBE_TEXT]).shape[1])
        return dim

    # The Embedder protocol declares plain attributes, which type checkers treat as settable;
    # the setters exist for that check only, since dim and normalized belong to the model.
    @dim.setter
    def dim(self, value: int) -> None:
        raise AttributeError(f"{self.backend_spec}: dim is fixed by the model and dimensions")

    @property
    def dim_learned(self) -> bool:
        """Whether ``dim`` is learned from the server's answers: no ``dimensions`` was given
        and the model's vector length is not known up front (a self-hosted model)."""
        return self.dimensions is None and self.model not in KNOWN_DIMS

    def forget_dim(self) -> None:
        """Forget a learned ``dim`` and ``normalized``, so that reading them probes again; a
        configured or known dimension stays."""
        if self.dim_learned:
            self._dim = None
        if _known_normalized(self.model) is None:
            self._normalized = None

    @property
    def normalized(self) -> bool:
        """Whether vectors are unit length; learned from the first response when unknown."""
        if self._normalized is None:
            self.embed([PROBE_TEXT])
        return bool(self._normalized)

    @normalized.setter
    def normalized(self, value: bool) -> None:
        raise AttributeError(f"{self.backend_spec}: normalized is a property of the model")

    def close(self) -> None:
        """Close the HTTP connections, if any were opened."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Vectors for ``texts``, in order.

        Args:
            texts: the inputs; each must be non-empty for the OpenAI API.

        Returns:
            float32 array of shape ``(len(texts), dim)``.

        Raises:
            DimensionMismatchError: the server returned vectors of another length than ``dim``.
            EmbedderError: the server refused the request (4xx), or answered with non-finite
                values or a malformed response.
            RetryableError: a transient failure persisted through ``max_retries`` retries.
        """
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of strings, not one string")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        parts = [self._embed_batch(batch) for batch in self._batches(texts)]
        return np.concatenate(parts, axis=0) if len(parts) > 1 else parts[0]

    def _batches(self, texts: Sequence[str]) -> Iterator[list[str]]:
        if self._count_tokens is None:
            self._count_tokens = _token_counter(self.model)
        batch: list[str] = []
        budget = 0
        for text in texts:
            tokens = self._count_tokens(text)
            if batch and (len(batch) >= self.batch_size or budget + tokens > self.max_batch_tokens):
                yield batch
                batch, budget = [], 0
            batch.append(text)
            budget += tokens
        if batch:
            yield batch

    def _client_and_module(self) -> tuple[Any, Any]:
        if self._client is None:  # retried in _request, so every attempt is seen and counted
            self._client, self._openai = openai_client(
                self._api_key, self.base_url, self.timeout, needed_by="the openai: embedder"
            )
        return self._client, self._openai

    def _embed_batch(self, batch: list[str]) -> npt.NDArray[np.float32]:
        response = self._request(batch)
        vectors = self._decode(response, len(batch))
        tokens = getattr(getattr(response, "usage", None), "total_tokens", None)
        tokens = tokens if isinstance(tokens, int) and tokens > 0 else 0
        self.stats.inputs += len(batch)
        self.stats.tokens += tokens
        if self.price_per_million_tokens is not None:
            self.stats.cost_usd += tokens * self.price_per_million_tokens / 1_000_000
        return vectors

    def _request(self, batch: list[str]) -> Any:
        client, oa = self._client_and_module()
        kwargs: dict[str, Any] = {
            "model": self.model,
            "input": batch,
            # explicit base64: the client then hands the string over untouched, and
            # np.frombuffer decodes it far faster than a list of Python floats
            "encoding_format": "base64",
        }
        if self.dimensions is not None and _supports_dimensions(self.model):
            kwargs["dimensions"] = self.dimensions
        last = "no attempt made"
        last_exc: Exception | None = None
        for attempt in range(self.max_retries + 1):
            self.stats.calls += 1
            wait: float | None = None
            try:
                return client.embeddings.create(**kwargs)
            except oa.APIStatusError as exc:
                status = int(exc.status_code)
                message = server_message(exc)
                if status not in _RETRY_STATUSES and status < 500:
                    raise self._permanent(status, message) from exc
                last, last_exc = f"HTTP {status} ({message})", exc
                wait = retry_after(exc.response.headers)
            except oa.APITimeoutError as exc:
                last, last_exc = f"timeout: no response within {self.timeout:g}s", exc
            except oa.APIConnectionError as exc:
                detail = exc.__cause__ or exc
                last, last_exc = f"connection error ({type(detail).__name__}: {detail})", exc
            except oa.OpenAIError as exc:
                raise EmbedderError(
                    f"{self.backend_spec}: bad response from {self.base_url}: {exc}"
                ) from exc
            except ValueError as exc:  # the client parses the body as JSON
                raise EmbedderError(
                    f"{self.backend_spec}: {self.base_url} answered with a body that is not "
                    f"JSON ({exc})"
                ) from exc
            if attempt == self.max_retries:
                break
            self.stats.retries += 1
            time.sleep(self._backoff(attempt, wait))
        raise RetryableError(
            f"{self.backend_spec}: gave up after {self.max_retries + 1} attempts "
            f"at {self.base_url}; last error: {last}"
        ) from last_exc

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        return backoff_s(attempt, retry_after, self.backoff_base, _MAX_BACKOFF_S)

    def _permanent(self, status: int, message: str) -> EmbedderError:
        # a server may echo the request (its key included) in its message, and one that
        # quotes a long input would fill the run's log and a quarantine entry with it
        message = message.replace(self._api_key, f"<{self._api_key_env}>")
        if len(message) > _MAX_MESSAGE_CHARS:
            message = message[: _MAX_MESSAGE_CHARS - 3] + "..."
        text = f"{self.backend_spec}: {self.base_url} answered HTTP {status}: {message}"
        if status in _REFUSED_STATUSES:
            return RefusedInputError(text)
        if status == 401:
            text += f"; check the API key: set {self._api_key_env} to a valid key for this server"
        elif status == 404:
            text += f"; check base_url and that the server serves the model {self.model!r}"
        return EmbedderError(text)

    def _decode(self, response: Any, expected: int) -> npt.NDArray[np.float32]:
        data = getattr(response, "data", None) or []
        if not isinstance(data, list):
            raise EmbedderError(
                f"{self.backend_spec}: the response's data from {self.base_url} is "
                f"{type(data).__name__}, not a list of embeddings"
            )
        indices: list[int] = []
        for position, item in enumerate(data):
            index = getattr(item, "index", None)
            if not isinstance(index, int) or isinstance(index, bool):
                raise EmbedderError(
                    f"{self.backend_spec}: embedding {position} of the response from "
                    f"{self.base_url} has no integer index"
                )
            indices.append(index)
        ordered = sorted(indices)
        if ordered != list(range(expected)):
            raise EmbedderError(
                f"{self.backend_spec}: the server returned {len(data)} embeddings for "
                f"{expected} inputs (indices {ordered[:10]}{'...' if len(ordered) > 10 else ''})"
            )
        rows: list[npt.NDArray[np.float32]] = [np.empty(0, dtype=np.float32)] * expected
        for item, index in zip(data, indices, strict=True):
            rows[index] = self._vector(getattr(item, "embedding", None), index)
        lengths = {row.shape[0] for row in rows}
        if len(lengths) != 1:
            raise DimensionMismatchError(
                f"{self.backend_spec}: the server returned vectors of mixed lengths "
                f"{sorted(lengths)} in one response"
            )
        (length,) = lengths
        if self._dim is None:
            self._dim = length
        elif length != self._dim:
            raise DimensionMismatchError(
                f"{self.backend_spec}: the server returned {length}-dimensional vectors, "
                f"expected {self._dim}; check the model name and dimensions"
            )
        matrix = np.stack(rows)
        if not np.isfinite(matrix).all():
            bad = int(np.flatnonzero(~np.isfinite(matrix).all(axis=1))[0])
            raise NonFiniteVectorError(
                f"{self.backend_spec}: the server returned non-finite values (NaN or inf) "
                f"in the vector for input {bad} of the batch"
            )
        if self._normalized is None:
            norms = np.linalg.norm(matrix.astype(np.float64), axis=1)
            self._normalized = bool(np.all(np.abs(norms - 1.0) <= _NORM_TOLERANCE))
        return matrix

    def _vector(self, embedding: object, index: int) -> npt.NDArray[np.float32]:
        if isinstance(embedding, str):
            try:
                raw = base64.b64decode(embedding, validate=True)
            except binascii.Error as exc:
                raise EmbedderError(
                    f"{self.backend_spec}: embedding {index} is not valid base64 ({exc})"
                ) from exc
            if not raw or len(raw) % 4:
                raise EmbedderError(
                    f"{self.backend_spec}: embedding {index} is {len(raw)} bytes of base64, "
                    "not a whole number of float32 values"
                )
            return np.frombuffer(raw, dtype="<f4").astype(np.float32)
        # a server that ignores encoding_format sends a list of floats; nothing else is one
        # (strings, booleans, nested lists and null would otherwise be cast into a vector)
        if (
            not isinstance(embedding, list)
            or not embedding
            or not all(type(x) in (float, int) for x in embedding)
        ):
            raise EmbedderError(
                f"{self.backend_spec}: embedding {index} is not a non-empty list of numbers"
            )
        with np.errstate(over="ignore"):  # a number past float32 becomes inf: refused below
            return np.asarray(embedding, dtype=np.float32)
