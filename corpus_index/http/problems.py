"""RFC 9457 problem details: one stable ``type`` per kind of failure, and the mapping from the
library's named exceptions to them.

Every problem says whether retrying can help (``retryable``): permanent failures (a bad filter,
an unknown namespace, a query across models) will fail again unchanged; retryable ones (no
ACTIVE generation yet, a busy registry, the embedding model saturated) may succeed later, and
carry ``Retry-After``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from corpus_index import errors

TYPE_BASE = "urn:corpus-index:problem:"
MEDIA_TYPE = "application/problem+json"


@dataclass(frozen=True, slots=True)
class ProblemType:
    """A kind of failure: its URI slug, status, title, and whether a retry may succeed."""

    slug: str
    status: int
    title: str
    retryable: bool = False

    @property
    def uri(self) -> str:
        return TYPE_BASE + self.slug


BAD_FILTER = ProblemType("bad-filter", 400, "The filter is invalid")
BAD_CURSOR = ProblemType("bad-cursor", 400, "The paging cursor is invalid for this request")
UNAUTHORIZED = ProblemType("unauthorized", 401, "A valid API key is required")
FORBIDDEN = ProblemType("forbidden", 403, "The request asks for more than the key grants")
NOT_FOUND = ProblemType("not-found", 404, "No such resource")
UNKNOWN_NAMESPACE = ProblemType("unknown-namespace", 404, "The namespace is not configured")
UNKNOWN_GENERATION = ProblemType("unknown-generation", 404, "No such generation")
CROSS_MODEL = ProblemType("cross-model-query", 409, "The query cannot be compared with the index")
UNMAINTAINED = ProblemType(
    "generation-not-maintained", 409, "The generation no longer receives its sources' updates"
)
GENERATION_GONE = ProblemType("generation-gone", 410, "The cursor's generation no longer serves")
VALIDATION = ProblemType("validation", 422, "The request is not valid")
LIMIT = ProblemType("limit-exceeded", 422, "The request exceeds a limit")
TOO_LARGE = ProblemType("body-too-large", 413, "The request body is too large")
INTERNAL = ProblemType("internal", 500, "The server failed")
EMBEDDING_FAILED = ProblemType("embedding-failed", 502, "The embedding model failed")
NO_ACTIVE = ProblemType("no-active-generation", 503, "No generation is ACTIVE", retryable=True)
NOT_READY = ProblemType("index-not-ready", 503, "The index is not ready", retryable=True)
BUSY = ProblemType("busy", 503, "The server is busy; retry shortly", retryable=True)
KEYS_UNAVAILABLE = ProblemType(
    "keys-unavailable", 503, "The API keys file cannot be read", retryable=True
)

ALL = (
    BAD_FILTER,
    BAD_CURSOR,
    UNAUTHORIZED,
    FORBIDDEN,
    NOT_FOUND,
    UNKNOWN_NAMESPACE,
    UNKNOWN_GENERATION,
    CROSS_MODEL,
    UNMAINTAINED,
    GENERATION_GONE,
    VALIDATION,
    LIMIT,
    TOO_LARGE,
    INTERNAL,
    EMBEDDING_FAILED,
    NO_ACTIVE,
    NOT_READY,
    BUSY,
    KEYS_UNAVAILABLE,
)
RETRY_AFTER_S = 5


class Problem(Exception):
    """A failure to answer with a problem document."""

    def __init__(self, kind: ProblemType, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail
        self.extra = extra

    def document(self, *, instance: str, request_id: str) -> dict[str, Any]:
        """The RFC 9457 body."""
        return {
            "type": self.kind.uri,
            "title": self.kind.title,
            "status": self.kind.status,
            "detail": self.detail,
            "instance": instance,
            "retryable": self.kind.retryable,
            "request_id": request_id,
            **self.extra,
        }

    def headers(self) -> dict[str, str]:
        out = {"Retry-After": str(RETRY_AFTER_S)} if self.kind.retryable else {}
        if self.kind is UNAUTHORIZED:
            out["WWW-Authenticate"] = 'Bearer realm="corpus-index"'
        return out


# most specific first: the first class an exception is an instance of decides
_MAPPING: tuple[tuple[type[BaseException], ProblemType], ...] = (
    (errors.InvalidFilterError, BAD_FILTER),
    (errors.IncompatibleEmbedderError, CROSS_MODEL),
    (errors.DimensionMismatchError, CROSS_MODEL),
    (errors.UnknownNamespaceError, UNKNOWN_NAMESPACE),
    (errors.MissingIndexError, NOT_READY),
    (errors.MissingGenerationError, UNKNOWN_GENERATION),
    (errors.InvalidQueryError, VALIDATION),
    (errors.EmbedderError, EMBEDDING_FAILED),
    (errors.DamagedStateError, INTERNAL),
    (errors.RetryableError, BUSY),
)


# the kinds whose messages are the server's own state (a file's path, a database's address, a
# process id, an embedding server's address): the caller gets a fixed detail, the log the rest
_LOGGED_ONLY = {
    INTERNAL: "the server failed; see its log",
    BUSY: "the server is busy (its registry or store is locked or unreachable); retry shortly",
    NOT_READY: "the index is not ready; retry shortly",
    EMBEDDING_FAILED: "the embedding model failed; see the server's log",
}


def from_error(exc: BaseException) -> Problem:
    """The problem a library exception stands for (an unexpected one is ``internal``): the
    exception's message is the detail where it speaks of the request, a fixed one where it
    speaks of the server (:data:`_LOGGED_ONLY`; :func:`logged_only` says which)."""
    for cls, kind in _MAPPING:
        if isinstance(exc, cls):
            return Problem(kind, _LOGGED_ONLY.get(kind, str(exc)))
    return Problem(INTERNAL, _LOGGED_ONLY[INTERNAL])


def logged_only(problem: Problem) -> bool:
    """Whether ``problem``'s exception is only told in the server's log."""
    return problem.kind in _LOGGED_ONLY
