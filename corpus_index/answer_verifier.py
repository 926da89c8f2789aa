"""A chat model that judges whether a question's chosen answer answers it (a collection's
``answer_verifier:``), for :func:`corpus_index.linked.groups.link_units`.

Each pair the scorer would take is put to the model as two messages: a fixed instruction
(:data:`SYSTEM`) and the question's text and the candidate answer's text, each cut to
:data:`MAX_TEXT_CHARS` characters (:func:`prompt`); nothing else of either message (no author,
channel, place or time) is sent. A reply that says yes or no, and nothing else but an
explanation after a comma or full stop, is the verdict; any other reply, a request the server
refuses for what it holds (400, 413, 422), and a transient failure (429, 5xx, a timeout, a
dropped connection) that outlasts the bounded retries give no opinion (None): the scorer's own
choice stands. After such a failure the server is not asked again in the same run (a server
that is down would cost every question its retries). A bad key, an unknown model or a wrong
API root (401, 403, 404) raises :class:`~corpus_index.errors.VerifierError`: every answer would
go unverified. The requests are made as the OpenAI embedder makes its own (the ``openai``
client, its retries off and ours counted, backoff with jitter honouring ``Retry-After``).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from typing import Any

from corpus_index.collection import VerifierConfig
from corpus_index.embedders.openai_backend import (
    DEFAULT_BASE_URL,
    backoff_s,
    checked_api_key,
    openai_client,
    retry_after,
    server_message,
)
from corpus_index.errors import ConfigError, VerifierError
from corpus_index.hashing import canonical_json, sha256_hex
from corpus_index.linked.messages import Message

SYSTEM = (
    "You check whether a message answers a question asked in a team's messages. "
    "Reply with one word: yes or no."
)
MAX_TEXT_CHARS = 2000  # of each text sent: a long e-mail is judged by its opening
MAX_REPLY_CHARS = 200  # of a reply read (a chatty one is no clear verdict anyway)
_RETRY_STATUSES = frozenset({408, 409, 429})  # and every 5xx
_FATAL_STATUSES = frozenset({401, 403, 404})
# of a server's message quoted in an error or a refusal (its text is never echoed whole)
_MESSAGE_CHARS = 300
_MAX_BACKOFF_S = 10.0
# "yes", "No.", "Yes, it gives the code": a verdict; "no idea", "yes and no": none
_VERDICT = re.compile(r"(yes|no)(?:[.!]?|[.!,;:]\s.*)", re.IGNORECASE | re.DOTALL)


def cut(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """``text`` within ``limit`` characters (an ellipsis marks a cut)."""
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def prompt(question: Message, answer: Message) -> str:
    """The user message sent for a pair: the two texts, cut, and the question put."""
    return (
        f"Question:\n{cut(question.text)}\n\nCandidate answer:\n{cut(answer.text)}\n\n"
        "Does this answer that question?"
    )


def verdict(reply: str) -> bool | None:
    """True for a reply that says yes, False for no, None for anything else."""
    found = _VERDICT.fullmatch(reply.strip()[:MAX_REPLY_CHARS])
    return None if found is None else found.group(1).lower() == "yes"


class OpenAIAnswerVerifier:
    """An :class:`~corpus_index.linked.questions.AnswerVerifier` asking a chat-completions
    model of the OpenAI API or any server that speaks its protocol (see the module)."""

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        api_key_env: str = "OPENAI_API_KEY",
        base_url: str | None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        max_retries: int = 2,
        timeout: float = 20.0,
        backoff_base: float = 0.5,
    ) -> None:
        """Configure the verifier; no request is made and no client is built yet.

        Args:
            model: the chat model the server knows.
            api_key: the bearer token; whitespace around it is dropped.
            api_key_env: the environment variable the key came from, named in errors.
            base_url: the API root (``.../v1``); None means OpenAI's.
            temperature, max_tokens: sent with each request when given (None: the
                server's defaults).
            max_retries: retries of one request after a transient failure.
            timeout: seconds to wait for one response.
            backoff_base: first backoff in seconds; it doubles with every retry.

        Raises:
            ConfigError: the key is empty or holds a character a header cannot carry.
        """
        api_key = checked_api_key(api_key, who=f"answer verifier {model}", api_key_env=api_key_env)
        self.model = model
        self.base_url = base_url or DEFAULT_BASE_URL
        # what each request sends beside the model and the messages (only what was given)
        self.options: dict[str, float | int] = {
            k: v
            for k, v in (("temperature", temperature), ("max_tokens", max_tokens))
            if v is not None
        }
        self.max_retries = max_retries
        self.timeout = timeout
        self.backoff_base = backoff_base
        self.asked = 0  # pairs put to the model
        self.unclear = 0  # of those, answered with no clear yes or no, or not answered
        self.refused = 0  # of those, refused by the server for what was sent (a 4xx)
        self.refusal = ""  # the first refusal, "HTTP 400: <the server's message>"
        self._api_key = api_key
        self._api_key_env = api_key_env
        self._down = False  # a transient failure outlasted the retries: not asked again
        self._client: Any = None
        self._openai: Any = None

    @property
    def identity(self) -> str:
        """What a verdict depends on beyond the pair: the model, the API root, what is asked
        and the sampling options given (never the key). Verdicts are kept by it, so another model or server asks
        again (see :func:`corpus_index.linked.questions.find_answers`)."""
        what: dict[str, object] = {"model": self.model, "base_url": self.base_url}
        what |= {"system": SYSTEM, "max_chars": MAX_TEXT_CHARS, "asks": prompt(_EMPTY, _EMPTY)}
        what |= self.options  # a verifier without options keeps the verdicts it had
        return sha256_hex(canonical_json(what))[:16]

    def __repr__(self) -> str:
        return f"OpenAIAnswerVerifier({self.model!r}, base_url={self.base_url!r})"

    def close(self) -> None:
        """Close the HTTP connections, if any were opened."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def verify(self, question: Message, answer: Message) -> bool | None:
        """Whether ``answer`` answers ``question``: the model's yes or no, or None (see the
        module).

        Raises:
            VerifierError: the server refused the key, the model or the path (401, 403, 404).
        """
        if self._down:
            return None
        self.asked += 1
        reply = self._request(prompt(question, answer))
        found = None if reply is None else verdict(reply)
        self.unclear += found is None
        return found

    def _client_and_module(self) -> tuple[Any, Any]:
        if self._client is None:  # retried in _request, so that every attempt is bounded
            self._client, self._openai = openai_client(
                self._api_key, self.base_url, self.timeout, needed_by="the answer verifier"
            )
        return self._client, self._openai

    def _request(self, text: str) -> str | None:
        """The model's reply to ``text`` (None: no reply to read)."""
        client, oa = self._client_and_module()
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]
        for attempt in range(self.max_retries + 1):
            wait: float | None = None
            try:
                response = client.chat.completions.create(
                    model=self.model, messages=messages, **self.options
                )
            except oa.APIStatusError as exc:
                status = int(exc.status_code)
                if status in _FATAL_STATUSES:
                    raise self._fatal(status, server_message(exc)) from exc
                if status not in _RETRY_STATUSES and status < 500:
                    # refused for what it holds: no opinion on this pair; the first refusal
                    # is kept to say why (every pair refused alike is a misconfiguration: a
                    # reasoning model refusing a temperature, say)
                    self.refused += 1
                    if not self.refusal:
                        self.refusal = f"HTTP {status}: {self._quoted(server_message(exc))}"
                    return None
                wait = retry_after(exc.response.headers)
            except (oa.APITimeoutError, oa.APIConnectionError):
                pass
            except (oa.OpenAIError, ValueError):  # a body that is no chat completion
                return None
            else:
                return _content(response)
            if attempt < self.max_retries:
                time.sleep(self._backoff(attempt, wait))
        self._down = True
        return None

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        return backoff_s(attempt, retry_after, self.backoff_base, _MAX_BACKOFF_S)

    def _quoted(self, message: str) -> str:
        """A server's ``message`` as quoted: its key named by its variable (a server may echo
        the request), cut to :data:`_MESSAGE_CHARS` (one quoting a long text would fill the
        log)."""
        return cut(message.replace(self._api_key, f"<{self._api_key_env}>"), _MESSAGE_CHARS)

    def _fatal(self, status: int, message: str) -> VerifierError:
        message = self._quoted(message)
        text = f"answer verifier {self.model}: {self.base_url} answered HTTP {status}: {message}"
        if status in (401, 403):
            text += f"; check the API key: set {self._api_key_env} to a valid key for this server"
        else:
            text += f"; check base_url and that the server serves the model {self.model!r}"
        return VerifierError(text)


_EMPTY = Message(unit_id="", channel="", author="", text="", timestamp=0.0)


def _content(response: Any) -> str | None:
    """The first choice's text of a chat completion, or None."""
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list) or not choices:
        return None
    content = getattr(getattr(choices[0], "message", None), "content", None)
    return content if isinstance(content, str) else None


def answer_verifier(
    config: VerifierConfig, *, where: str, environ: Mapping[str, str] | None = None
) -> OpenAIAnswerVerifier:
    """The verifier a collection's ``answer_verifier`` names, its key read from the variable
    it names (``environ``: the process's environment by default, read now, as
    :func:`corpus_index.embedders.make_embedder` reads a profile's).

    Args:
        where: the configuration key that names it, for errors
            (``<file>: collections.<name>.answer_verifier``).

    Raises:
        ConfigError: the variable is not set (or empty), naming it and ``where``.
    """
    env = os.environ if environ is None else environ
    key = env.get(config.api_key_env, "")
    if not key.strip():
        raise ConfigError(
            f"{where}.api_key_env: the environment variable {config.api_key_env} is not set; "
            f"set it to the API key of {config.base_url or DEFAULT_BASE_URL}, or remove "
            "answer_verifier to link answers without a model"
        )
    return OpenAIAnswerVerifier(
        config.model,
        base_url=config.base_url,
        api_key=key,
        api_key_env=config.api_key_env,
        temperature=config.temperature,
        max_tokens=config.max_tokens,
    )
