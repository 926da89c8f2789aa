"""Opaque paging cursors, pinned to the generation that answered the first page.

A cursor carries the namespace, the generation, the offset of the next page, the candidate
depth the first page's search used (deeper than ``max(5k, 50)`` where dedupe and the
per-document cap left it short of k) and a fingerprint of the request (principal, query, mode,
filters, k). The next page re-runs the same search on that generation at that depth, never
deeper, and takes the next slice: the ranking is the same list, so pages neither mix generations after a promotion
nor repeat or skip hits. Cursors are signed (HMAC-SHA256), so a client can neither forge one
nor reuse one for another query or key.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import asdict, dataclass
from typing import Any

from corpus_index.http.problems import BAD_CURSOR, Problem

_SIG_BYTES = 16


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where the next page starts."""

    namespace: str
    generation: str
    offset: int
    candidates: int
    fingerprint: str


def fingerprint(parts: dict[str, Any]) -> str:
    """A short digest of what a request asks (canonical JSON)."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


class CursorCodec:
    """Encodes and checks cursors with one secret."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def encode(self, cursor: Cursor) -> str:
        body = json.dumps(asdict(cursor), sort_keys=True, separators=(",", ":")).encode()
        sig = hmac.new(self._secret, body, hashlib.sha256).digest()[:_SIG_BYTES]
        return base64.urlsafe_b64encode(sig + body).decode().rstrip("=")

    def decode(self, token: str, *, expect: str) -> Cursor:
        """The cursor ``token`` stands for, checked against the request's fingerprint.

        Raises:
            Problem: ``bad-cursor`` when it is malformed, forged, or for another request.
        """
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except (ValueError, TypeError):
            raise Problem(BAD_CURSOR, "the cursor is not one this server issued") from None
        sig, body = raw[:_SIG_BYTES], raw[_SIG_BYTES:]
        good = hmac.new(self._secret, body, hashlib.sha256).digest()[:_SIG_BYTES]
        if len(sig) != _SIG_BYTES or not hmac.compare_digest(sig, good):
            raise Problem(
                BAD_CURSOR,
                "the cursor is not one this server issued (or the server restarted); "
                "search again without a cursor",
            )
        doc = json.loads(body)
        cursor = Cursor(**doc)
        if cursor.fingerprint != expect:
            raise Problem(
                BAD_CURSOR,
                "the cursor belongs to another request: send the same query, mode, k, filters "
                "and groups as the page that returned it",
            )
        return cursor
