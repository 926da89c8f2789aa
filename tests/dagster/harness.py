"""Running the real asset graph of a test home on an ephemeral Dagster instance."""

from __future__ import annotations

import warnings
from collections.abc import Iterable

import dagster as dg

from corpus_index.config import Settings
from definitions import build_definitions

warnings.filterwarnings("ignore", message=r".*is currently in (preview|beta)")

QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}


class Graph:
    """The home's Definitions on one ephemeral instance, with the collections added as partitions."""

    def __init__(self, settings: Settings, instance: dg.DagsterInstance | None = None) -> None:
        self.settings = settings
        self.defs = build_definitions(settings)
        self.config = settings.load()
        self.instance = instance or dg.DagsterInstance.ephemeral()
        existing = set(self.instance.get_dynamic_partitions("collections"))
        new = [c for c in self.config.collections if c not in existing]
        if new:
            self.instance.add_dynamic_partitions("collections", new)

    def materialize(
        self,
        selection: Iterable[str],
        partition_key: str | dg.MultiPartitionKey,
        ops: dict[str, dict[str, object]] | None = None,
    ) -> dg.ExecuteInProcessResult:
        """The ``selection`` of assets run for ``partition_key``, with each asset's config of
        ``ops`` (asset name -> its config) when given."""
        config: dict[str, object] = dict(QUIET)
        if ops:
            config["ops"] = {name: {"config": c} for name, c in ops.items()}
        return dg.materialize(
            self.defs.assets,  # type: ignore[arg-type]
            selection=list(selection),
            partition_key=partition_key,
            instance=self.instance,
            resources=self.defs.resources,
            run_config=config,
            raise_on_error=False,
        )

    def ingest(self, collection: str) -> dg.ExecuteInProcessResult:
        return self.materialize(
            ["source_manifest", "parsed_blocks", "linked_groups", "embedding_inputs"], collection
        )

    def embed(self, profile: str, collection: str) -> dg.ExecuteInProcessResult:
        key = dg.MultiPartitionKey({"profile": profile, "collection": collection})
        return self.materialize(["embeddings", "sidecars", "flat_exports", "index_rows"], key)

    def generation(self, profile: str) -> dg.ExecuteInProcessResult:
        return self.materialize(["index_generation"], profile)

    def build_all(self) -> None:
        for c in self.config.collections:
            assert self.ingest(c).success
        for p in self.config.profiles:
            for c in self.config.collections:
                if self.config.profile_covers(p, c):
                    assert self.embed(p, c).success
            assert self.generation(p).success


def metadata(result: dg.ExecuteInProcessResult, asset: str) -> dict[str, object]:
    for event in result.get_asset_materialization_events():
        mat = event.event_specific_data.materialization  # type: ignore[union-attr]
        if mat.asset_key.to_user_string() == asset:
            return {k: getattr(v, "value", v) for k, v in mat.metadata.items()}
    raise AssertionError(f"{asset} was not materialized")


def check_outcomes(result: dg.ExecuteInProcessResult) -> dict[str, bool]:
    return {ev.check_name: ev.passed for ev in result.get_asset_check_evaluations()}


def materialized(result: dg.ExecuteInProcessResult) -> set[str]:
    return {
        e.event_specific_data.materialization.asset_key.to_user_string()  # type: ignore[union-attr]
        for e in result.get_asset_materialization_events()
    }
