"""Opening LanceDB with the settings corpus-index relies on."""

from __future__ import annotations

import os
import re
from typing import Any

os.environ.setdefault("LANCE_LOG", "error")


def connect(uri: str) -> Any:
    """A LanceDB connection (local folder or object-store URI)."""
    import lancedb

    return lancedb.connect(uri)


def table_names(db: Any) -> list[str]:
    """Names of the tables in ``db`` (handles the paginated listing of newer LanceDB)."""
    result = db.table_names(limit=100000) if _accepts_limit(db) else db.table_names()
    return list(result)


def _accepts_limit(db: Any) -> bool:
    import inspect

    try:
        return "limit" in inspect.signature(db.table_names).parameters
    except (TypeError, ValueError):
        return False


def slug(text: str) -> str:
    """A table-name-safe slug: lowercase, ``[a-z0-9_]`` only."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")
