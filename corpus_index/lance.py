"""Opening LanceDB with the settings corpus-index relies on."""

from __future__ import annotations

import contextlib
import functools
import os
import random
import re
import time
from collections.abc import Callable, Iterator
from typing import Any, ParamSpec, TypeVar

from corpus_index.errors import CommitConflictError, DamagedTableError, StoreUnreachableError
from corpus_index.held_locks import confirm_held
from corpus_index.storage import unreachable

P = ParamSpec("P")
R = TypeVar("R")

# a LanceDB file named in an error: ``<table>.lance/data/<file>.lance`` or similar, not from
# inside another name; in an object store's request URL (``http://host:port/bucket/key``) the
# path after the host and port
_LANCE_PATH = re.compile(r"(?<![\w.:/-])(?:https?://[^/\s]+/)?([\w./-]+\.lance(?:/[\w./-]+)?)")
# what an object store's client says when a request failed on the way or was refused (a 5xx,
# throttling, a 403, its retries spent, no answer): about the store, not a file of a table
_TRANSPORT = re.compile(
    r"Generic (?:S3|GCS|MicrosoftAzure|HTTP) error|Server returned non-2xx|RetryError"
    r"|retries exhausted|after \d+ retries|error sending request|connection refused"
    r"|dns error|timed out",
    re.I,
)
# ... unless it says the object is not there (the store answered: a file of the table is gone)
_MISSING_OBJECT = re.compile(r"Not found:|\b404 Not Found|status: 404|NoSuchKey", re.I)


def connect(uri: str) -> Any:
    """A LanceDB connection (local folder or object-store URI)."""
    import lancedb

    return lancedb.connect(uri)


# what LanceDB says when a commit lost a race it could not resolve by its own retries (it
# rebases compatible concurrent commits itself; these reach the caller)
_CONFLICT = re.compile(
    r"Retryable commit conflict|Commit conflict for version|Too many concurrent writ", re.I
)
COMMIT_ATTEMPTS = 6
BACKOFF_BASE_S = 0.05
BACKOFF_MAX_S = 2.0


def is_commit_conflict(exc: BaseException) -> bool:
    """Whether LanceDB refused a commit because another writer committed first."""
    return isinstance(exc, RuntimeError | OSError | ValueError) and bool(_CONFLICT.search(str(exc)))


# what LanceDB says when a commit lost to a concurrent overwrite of the table (a second
# creation of a table two writers both found missing commits as one)
_OVERWRITTEN = re.compile(r"incompatible with concurrent transaction Overwrite", re.I)


def is_overwritten(exc: BaseException) -> bool:
    """Whether LanceDB refused a commit because another writer overwrote the table first."""
    return isinstance(exc, RuntimeError | OSError | ValueError) and bool(
        _OVERWRITTEN.search(str(exc))
    )


def retry_commits(
    write: Callable[[], R],
    *,
    table: Any = None,
    attempts: int = COMMIT_ATTEMPTS,
    base_s: float = BACKOFF_BASE_S,
    max_s: float = BACKOFF_MAX_S,
    sleep: Callable[[float], None] = time.sleep,
) -> R:
    """Run ``write`` (one LanceDB commit, which must be safe to run again: its input a table,
    not a stream already read), retrying a commit conflict after a jittered exponential
    backoff (``base_s`` doubling up to ``max_s``). Writers sharing a table on an object store
    race on its manifest (a conditional PUT); the loser sees the conflict and tries again on
    the new version: ``table`` (the LanceDB table ``write`` commits to) is moved to the
    version that won before each retry, as a table object stays on the version it read.

    Each try first confirms the locks this thread holds
    (:func:`~corpus_index.held_locks.confirm_held`): a step that lost its lock commits
    nothing (a delete, a merge, an ``optimize``; a stream of rows read on LanceDB's threads is
    confirmed as it is read, see ``steps.index_rows``).

    Raises:
        CommitConflictError: still in conflict after ``attempts`` tries (the last error chained).
        LockLostError: a lock this thread holds was lost; nothing was committed.
    """
    for attempt in range(1, attempts + 1):
        confirm_held()
        try:
            return write()
        except (RuntimeError, OSError, ValueError) as exc:
            if not is_commit_conflict(exc):
                raise
            if attempt == attempts:
                err = CommitConflictError(
                    f"a LanceDB commit still conflicted after {attempts} attempts: "
                    f"{str(exc).splitlines()[0]}"
                )
                err.add_note("another writer keeps committing to the same table; run it again")
                raise err from exc
            delay = min(max_s, base_s * 2 ** (attempt - 1))
            sleep(delay * random.uniform(0.5, 1.0))  # noqa: S311 - jitter, not security
            if table is not None:
                table.checkout_latest()
    raise AssertionError("unreachable")  # the loop returns or raises


def table_names(db: Any) -> list[str]:
    """Names of the tables in ``db`` (handles the paginated listing of newer LanceDB)."""
    if hasattr(db, "list_tables"):
        names: list[str] = []
        page_token = None
        while True:
            response = db.list_tables(page_token=page_token, limit=1000)
            names.extend(response.tables)
            page_token = getattr(response, "page_token", None)
            if not page_token:
                return names
    return list(db.table_names())


def slug(text: str) -> str:
    """A table-name-safe slug: lowercase, ``[a-z0-9_]`` only."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def is_transport(exc: BaseException) -> bool:
    """Whether LanceDB failed because its object store failed or refused a request (a 5xx,
    throttling, credentials, no answer): the table's files may be whole; a missing bucket is
    one too, an object the store says is not there is not."""
    text = str(exc)
    if not isinstance(exc, RuntimeError | OSError | ValueError) or not _TRANSPORT.search(text):
        return False
    return "NoSuchBucket" in text or not _MISSING_OBJECT.search(text)


def is_damage(exc: BaseException) -> bool:
    """Whether LanceDB failed because a file of a table is missing or unreadable (an object
    store's failed request is not: see :func:`is_transport`)."""
    text = str(exc)
    return (
        isinstance(exc, RuntimeError | OSError | ValueError)
        and not is_transport(exc)
        and ("Not found:" in text or "LanceError(IO)" in text or "corrupt" in text.lower())
    )


@contextlib.contextmanager
def damage(where: str) -> Iterator[None]:
    """Turns LanceDB's error for a missing or unreadable data file into a DamagedTableError
    naming the file (or ``where`` when the error names none), and its error for an object
    store's failed request into a StoreUnreachableError naming the store (``where`` when it
    is the store's URI, else the request's URL): that one is retried, never repaired.

    Raises:
        DamagedTableError: a file of a table is missing or unreadable.
        StoreUnreachableError: the object store failed or refused a request.
    """
    try:
        yield
    except (DamagedTableError, StoreUnreachableError):
        raise
    except (RuntimeError, OSError, ValueError) as exc:
        if is_transport(exc):
            raise unreachable(_store_named(where, exc), exc) from None
        if not is_damage(exc):
            raise
        first = str(exc).splitlines()[0]
        raise DamagedTableError("a LanceDB table file", _file_named(where, exc), first) from None


def _file_named(where: str, exc: BaseException) -> str:
    """The table file ``exc`` names (LanceDB names a local one without its leading slash and
    an object's by its key), else ``where``."""
    found = _LANCE_PATH.search(str(exc))
    if not found:
        return where
    path = found.group(1)
    scheme, sep, rest = where.partition("://")
    if sep:  # an object store's URI: s3://bucket/prefix
        bucket = rest.split("/", 1)[0]
        return (
            f"{scheme}://{path}" if path.startswith(f"{bucket}/") else f"{scheme}://{bucket}/{path}"
        )
    if not path.startswith("/") and os.path.isdir("/" + path.split(".lance")[0] + ".lance"):
        return "/" + path
    return path


def _store_named(where: str, exc: BaseException) -> str:
    """The store of a failed request: ``where`` when it is a URI, else the request's URL
    (without its query), else ``where``."""
    if "://" in where:
        return where
    url = re.search(r"https?://[^\s,?)]+", str(exc))
    return url.group(0) if url else where


def reads_tables(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` with :func:`damage` around it."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with damage("LanceDB"):
            return fn(*args, **kwargs)

    return wrapper
