"""Opening LanceDB with the settings corpus-index relies on."""

from __future__ import annotations

import re
from typing import Any


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
