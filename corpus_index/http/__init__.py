"""``corpus serve``: the HTTP face of the library (FastAPI), with API keys mapped to principals.

``app`` builds the app; ``routes`` holds the ``/v1`` API; ``auth`` and ``keys`` turn a key into a
principal; ``cursor`` pins paging to a generation; ``problems`` speaks RFC 9457; ``metrics`` and
``audit`` count what an operator watches; ``service`` holds what the routes share.
"""

from __future__ import annotations

from corpus_index.http.app import create_app

__all__ = ["create_app"]
