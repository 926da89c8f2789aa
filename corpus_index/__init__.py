"""corpus-index: a governed, searchable embedding index of a document corpus.

This package is the domain library. It never imports Dagster; the asset graph in
``assets/`` and ``pipelines/`` is thin wiring over it.
"""

from __future__ import annotations

__version__ = "0.1.0"
