"""The ``flat_exports`` step: the seed's flat-blob exports of a ``profiles`` collection under
one profile (see :mod:`corpus_index.flat_exports`)."""

from __future__ import annotations

from corpus_index.flat_exports import ExportsOutcome, build
from corpus_index.home import Home


def run(home: Home, profile: str, collection: str) -> ExportsOutcome:
    """Rebuild the exports; they replace the old ones only when every check passes."""
    return build(home, profile, collection)
