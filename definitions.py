"""The only place the Dagster Definitions are assembled."""

from __future__ import annotations

import dagster as dg

from assets import CorpusResource, build_assets
from corpus_index.config import Settings, settings_from_env
from pipelines.jobs import build_jobs
from pipelines.partitions import build_partitions


def build_definitions(settings: Settings | None = None) -> dg.Definitions:
    """Definitions for ``settings``, by default those the environment names (CORPUS_CONFIG, CORPUS_HOME)."""
    settings = settings or settings_from_env()
    config = settings.load()
    partitions = build_partitions(config)
    return dg.Definitions(
        assets=build_assets(partitions),
        jobs=build_jobs(partitions),
        resources={
            "corpus": CorpusResource(
                config_path=str(settings.config_path), home=str(settings.home)
            ),
        },
    )


defs = build_definitions()
