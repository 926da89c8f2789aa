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

from corpus_index.errors import CommitConflictError, DamagedTableError
from corpus_index.held_locks import confirm_held

P = ParamSpec("P")
R = TypeVar("R")

# a LanceDB file named in an error: ``<table>.lance/data/<file>.lance`` or similar
_LANCE_PATH = re.compile(r"[\w./-]+\.lance(?:/[\w./-]+)?")


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


def is_damage(exc: BaseException) -> bool:
    """Whether LanceDB failed because a file of a table is missing or unreadable."""
    text = str(exc)
    return isinstance(exc, RuntimeError | OSError | ValueError) and (
        "Not found:" in text or "LanceError(IO)" in text or "corrupt" in text.lower()
    )


@contextlib.contextmanager
def damage(where: str) -> Iterator[None]:
    """Turns LanceDB's error for a missing or unreadable data file into a DamagedTableError
    naming the file (or ``where`` when the error names none)."""
    try:
        yield
    except DamagedTableError:
        raise
    except (RuntimeError, OSError, ValueError) as exc:
        if not is_damage(exc):
            raise
        found = _LANCE_PATH.search(str(exc))
        path = found.group(0) if found else where
        if (
            found
            and not path.startswith("/")
            and os.path.isdir("/" + path.split(".lance")[0] + ".lance")
        ):
            path = "/" + path  # LanceDB names local files without their leading slash
        first = str(exc).splitlines()[0]
        raise DamagedTableError("a LanceDB table file", path, first) from None


def reads_tables(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` with :func:`damage` around it."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with damage("LanceDB"):
            return fn(*args, **kwargs)

    return wrapper
