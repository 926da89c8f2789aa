"""A local HTTP server that speaks the OpenAI embeddings protocol (and, given ``reply``, the
chat-completions one), with scripted faults.

It listens on 127.0.0.1 only, on a free port, in a daemon thread, and stops when the
``serve()`` context exits. Vectors are deterministic per text (from the sha256 of the text), so
tests can compare results across calls without any model.

Faults are scripted per request: each request consumes the first entry of ``server.script``
(if any). An entry is a dict with one or more of these keys:

- ``{"status": 429, "retry_after": 0}``: answer with that status and an OpenAI-style error body;
  ``message`` sets the error message, ``retry_after`` / ``retry_after_ms`` add those headers.
- ``{"sleep": 2.0}``: wait that long before answering (to make the client time out).
- ``{"disconnect": True}``: close the connection without answering.
- ``{"vector_dim": 7}``: return vectors of that length instead of the requested one.
- ``{"nan": True}``: put a NaN in the first vector.
- ``{"shuffle": True}``: return the embeddings in reverse order (``index`` still correct).
- ``{"float": True}``: answer with float lists even when base64 was asked for, as some
  OpenAI-compatible servers do.
- ``{"body": ...}``: answer 200 with that JSON value as the whole body (bytes: sent as they
  are), for responses no server should give.

``server.refuse`` maps a text to a message: a request with an input holding that text is
answered 400 with the message, as OpenAI answers one with an input over the model's context
length (the whole batch refused for one input).

``serve(reply=...)`` answers ``POST /v1/chat/completions`` too: ``reply(messages)`` (the
request's messages, role and content each) gives the assistant's reply; each request is in
``server.chats``. Faults are scripted for it as for embeddings.

``serve(embed=...)`` backs the server with a real embedding function instead (for example the
hash embedder or MiniLM), for tests that need vectors with meaning: a self-hosted model behind
an OpenAI-compatible endpoint.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

MODEL_DIMS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}


def count_tokens(text: str) -> int:
    """The token count this server reports for one input: ceil(len / 4), at least 1."""
    return max(1, math.ceil(len(text) / 4))


def vector_for(text: str, dim: int, *, full_dim: int | None = None) -> np.ndarray[Any, Any]:
    """The deterministic unit vector this server returns for ``text``.

    Like text-embedding-3 models, a shortened vector is the first ``dim`` components of the
    full-length vector, renormalized.
    """
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
    full = np.random.default_rng(seed).standard_normal(max(dim, full_dim or dim))
    vec = full[:dim]
    return (vec / np.linalg.norm(vec)).astype("<f4")


@dataclass
class FakeOpenAIServer:
    """What ``serve()`` yields: where the server is and what it has seen."""

    base_url: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    script: list[dict[str, Any]] = field(default_factory=list)
    authorization: list[str | None] = field(default_factory=list)
    refuse: dict[str, str] = field(default_factory=dict)
    chats: list[dict[str, Any]] = field(default_factory=list)


def _error_body(message: str, kind: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _make_handler(
    state: FakeOpenAIServer,
    lock: threading.Lock,
    stopping: threading.Event,
    *,
    api_key: str | None,
    default_dim: int,
    normalize: bool,
    embed: EmbedFn | None,
    reply: ReplyFn | None = None,
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
            pass

        def _send_json(
            self, status: int, payload: object, headers: dict[str, str] | None = None
        ) -> None:
            data = json.dumps(payload).encode("utf-8")
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout) before we answered

        def _send_body(self, body: object) -> None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            chat = reply is not None and self.path.rstrip("/") == "/v1/chat/completions"
            if self.path.rstrip("/") != "/v1/embeddings" and not chat:
                problem = f"Unknown path {self.path}"
                self._send_json(404, _error_body(problem, "invalid_request_error"))
                return
            try:
                body = json.loads(raw)
            except ValueError:
                problem = "Request body is not JSON"
                self._send_json(400, _error_body(problem, "invalid_request_error"))
                return
            with lock:
                (state.chats if chat else state.requests).append(body)
                state.authorization.append(self.headers.get("Authorization"))
                fault = state.script.pop(0) if state.script else {}

            auth = self.headers.get("Authorization") or ""
            token = auth[len("Bearer ") :] if auth.startswith("Bearer ") else ""
            if not token.strip() or (api_key is not None and token != api_key):
                self._send_json(
                    401,
                    _error_body(
                        "Incorrect API key provided." if token.strip() else "Missing API key.",
                        "invalid_request_error",
                        "invalid_api_key",
                    ),
                )
                return

            if "body" in fault:
                self._send_body(fault["body"])
                return
            if fault.get("sleep"):
                stopping.wait(float(fault["sleep"]))
            if fault.get("disconnect"):
                self.close_connection = True
                return
            if "status" in fault:
                headers = {}
                if "retry_after" in fault:
                    headers["Retry-After"] = str(fault["retry_after"])
                if "retry_after_ms" in fault:
                    headers["retry-after-ms"] = str(fault["retry_after_ms"])
                status = int(fault["status"])
                message = fault.get("message", f"Injected error {status}")
                kind = "server_error" if status >= 500 else "invalid_request_error"
                self._send_json(status, _error_body(message, kind), headers)
                return

            if chat:
                self._send_json(200, self._chat(body))
                return
            refusal, status, payload = self._embed(body, fault)
            if refusal:
                self._send_json(status, _error_body(refusal, "invalid_request_error"))
            else:
                self._send_json(200, payload)

        def _chat(self, body: Any) -> dict[str, Any]:
            assert reply is not None
            content = reply(list(body.get("messages") or []))
            return {
                "id": "chatcmpl-local",
                "object": "chat.completion",
                "created": 0,
                "model": str(body.get("model", "")),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }

        def _embed(
            self, body: Any, fault: dict[str, Any]
        ) -> tuple[str | None, int, dict[str, Any]]:
            if not isinstance(body, dict) or "model" not in body or "input" not in body:
                return "'model' and 'input' are required", 400, {}
            model = str(body["model"])
            texts = body["input"]
            if isinstance(texts, str):
                texts = [texts]
            if not isinstance(texts, list) or not texts:
                return "'input' must be a non-empty string or array of strings", 400, {}
            if not all(isinstance(t, str) for t in texts):
                return "token-array inputs are not supported by this test server", 400, {}
            if any(t == "" for t in texts):
                return "'$.input' is invalid: empty strings are not allowed", 400, {}
            for needle, message in list(state.refuse.items()):
                if any(needle in t for t in texts):
                    return message, 400, {}
            full_dim = MODEL_DIMS.get(model, default_dim)
            dim = full_dim
            if body.get("dimensions") is not None:
                if not model.startswith("text-embedding-3"):
                    return "This model does not support specifying dimensions.", 400, {}
                dim = int(body["dimensions"])
                if not 1 <= dim <= full_dim:
                    return f"dimensions must be between 1 and {full_dim}", 400, {}
            if "vector_dim" in fault:
                dim = int(fault["vector_dim"])
            encoding = body.get("encoding_format") or "float"
            if encoding not in ("float", "base64"):
                return f"unsupported encoding_format {encoding!r}", 400, {}
            if fault.get("float"):
                encoding = "float"

            if embed is not None:
                vectors = [np.asarray(v, dtype="<f4") for v in embed(texts, dim)]
            else:
                vectors = [vector_for(t, dim, full_dim=full_dim) for t in texts]
            if not normalize:
                vectors = [(v * np.float32(3.0)).astype("<f4") for v in vectors]
            if fault.get("nan"):
                vectors[0] = vectors[0].copy()
                vectors[0][0] = np.float32("nan")
            data = []
            for i, vec in enumerate(vectors):
                embedding: object
                if encoding == "base64":
                    embedding = base64.b64encode(vec.astype("<f4").tobytes()).decode("ascii")
                else:
                    embedding = [float(x) for x in vec]
                data.append({"object": "embedding", "index": i, "embedding": embedding})
            if fault.get("shuffle"):
                data.reverse()
            tokens = sum(count_tokens(t) for t in texts)
            payload = {
                "object": "list",
                "data": data,
                "model": model,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
            return None, 200, payload

    return Handler


EmbedFn = Callable[[Sequence[str], int], Any]
ReplyFn = Callable[[list[dict[str, Any]]], str]


@contextmanager
def serve(
    *,
    api_key: str | None = None,
    default_dim: int = 1536,
    normalize: bool = True,
    embed: EmbedFn | None = None,
    reply: ReplyFn | None = None,
) -> Iterator[FakeOpenAIServer]:
    """Run the server for the duration of the ``with`` block.

    Args:
        api_key: the only bearer token accepted; None accepts any non-empty token.
        default_dim: vector length for models this server does not know.
        normalize: False returns vectors of norm 3 (a model that does not normalize).
        embed: ``embed(texts, dim)`` computes the vectors (a real model behind the endpoint);
            by default they are deterministic random unit vectors per text.
        reply: ``reply(messages)`` answers chat completions (none: that path is unknown).

    Yields:
        The server's address, the JSON bodies it received and its mutable fault script.
    """
    lock = threading.Lock()
    stopping = threading.Event()
    state = FakeOpenAIServer(base_url="")
    handler = _make_handler(
        state,
        lock,
        stopping,
        api_key=api_key,
        default_dim=default_dim,
        normalize=normalize,
        embed=embed,
        reply=reply,
    )
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    host, port = httpd.server_address[:2]
    state.base_url = f"http://{host!s}:{port}/v1"
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield state
    finally:
        stopping.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
