"""Partition definitions: collections (dynamic), profiles and namespaces (static, from config)."""

from __future__ import annotations

import dagster as dg

from assets import CorpusPartitions
from corpus_index.config import CorpusConfig

collections_partitions = dg.DynamicPartitionsDefinition(name="collections")


def build_partitions(config: CorpusConfig) -> CorpusPartitions:
    """Partitions for ``config``: adding a profile to corpus.yaml adds a profile column."""
    profiles_partitions = dg.StaticPartitionsDefinition(list(config.profiles))
    return CorpusPartitions(
        collections=collections_partitions,
        profiles=profiles_partitions,
        profile_collection=dg.MultiPartitionsDefinition(
            {"profile": profiles_partitions, "collection": collections_partitions}
        ),
        namespaces=dg.StaticPartitionsDefinition(sorted(config.namespaces)),
    )
