"""Dagster software-defined assets, asset checks and resources: the lineage graph (WHAT exists)."""

from assets.graph import CorpusPartitions, build_assets
from assets.resources import CorpusResource

__all__ = ["CorpusPartitions", "CorpusResource", "build_assets"]
