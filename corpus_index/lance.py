"""Opening LanceDB with the settings corpus-index relies on."""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Callable, Iterator
from typing import Any, ParamSpec, TypeVar

from corpus_index.errors import DamagedTableError

P = ParamSpec("P")
R = TypeVar("R")

# a LanceDB file named in an error: ``<table>.lance/data/<file>.lance`` or similar
_LANCE_PATH = re.compile(r"[\w./-]+\.lance(?:/[\w./-]+)?")


def connect(uri: str) -> Any:
    """A LanceDB connection (local folder or object-store URI)."""
    import lancedb

    return lancedb.connect(uri)


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
