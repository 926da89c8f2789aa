"""Jobs over the asset graph: one per partitioning, so each can run on its own key."""

from __future__ import annotations

import dagster as dg

from assets import CorpusPartitions

INGEST_ASSETS = ["source_manifest", "parsed_blocks", "embedding_inputs"]
EMBED_ASSETS = ["embeddings", "sidecars", "index_rows"]


def build_jobs(p: CorpusPartitions) -> list[dg.UnresolvedAssetJobDefinition]:
    """ingest (per collection), embed (per profile × collection), generation (per profile), promotion."""
    ingest_job = dg.define_asset_job(
        "ingest_job",
        selection=dg.AssetSelection.assets(*INGEST_ASSETS),
        description="Scan, parse and derive canonical inputs for one collection.",
    )
    embed_job = dg.define_asset_job(
        "embed_job",
        selection=dg.AssetSelection.assets(*EMBED_ASSETS),
        description="Embed one collection under one profile and write its rows into the profile's generation.",
    )
    generation_job = dg.define_asset_job(
        "generation_job",
        selection=dg.AssetSelection.assets("index_generation"),
        description="Refresh a profile generation's indexes and run its gates.",
    )
    promote_generation_job = dg.define_asset_job(
        "promote_generation_job",
        selection=dg.AssetSelection.assets("active_generation"),
        description="Point a namespace at a READY generation whose gates all passed.",
    )
    rollback_generation_job = dg.define_asset_job(
        "rollback_generation_job",
        selection=dg.AssetSelection.assets("active_generation"),
        config={"ops": {"active_generation": {"config": {"action": "rollback", "generation": ""}}}},
        description="Point a namespace back at its previous ACTIVE generation, in one step.",
    )
    return [ingest_job, embed_job, generation_job, promote_generation_job, rollback_generation_job]
