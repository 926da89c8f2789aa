"""definitions.py loads and declares the graph of DESIGN §7."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from assets.resources import holds_home_alone
from corpus_index.config import Settings
from definitions import build_definitions

ROOT = Path(__file__).resolve().parents[2]

EXPECTED_ASSETS = {
    "source_manifest",
    "parsed_blocks",
    "linked_groups",
    "conversation_timeline",
    "embedding_inputs",
    "embeddings",
    "sidecars",
    "flat_exports",
    "index_rows",
    "index_generation",
    "active_generation",
    "retrieval_evals",
}


def test_definitions_declare_assets_checks_and_jobs(home: Settings) -> None:
    defs = build_definitions(home)
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert keys == EXPECTED_ASSETS
    checks = {(k.asset_key.to_user_string(), k.name) for k in graph.asset_check_keys}
    for expected in [
        ("embeddings", "vectors_have_profile_dim"),
        ("embeddings", "vectors_are_finite"),
        ("embeddings", "vector_norms_match_profile"),
        ("embeddings", "vectors_share_one_backend_spec"),
        ("embeddings", "vectors_match_their_inputs"),
        ("index_rows", "rows_have_tenant_and_acl"),
        ("index_rows", "no_rows_from_removed_documents"),
        ("index_generation", "row_counts_reconcile"),
        ("index_generation", "indexes_cover_every_row"),
        ("index_generation", "no_orphan_vectors"),
        ("index_rows", "index_rows_pass_expectation_suite"),
        ("index_generation", "retrieval_not_worse_than_active"),
        ("linked_groups", "group_members_exist_and_are_live"),
        ("linked_groups", "groups_stay_within_one_tenant"),
        ("linked_groups", "group_acl_within_members"),
        ("index_rows", "group_rows_have_groups"),
        ("flat_exports", "exports_match_their_index"),
        ("flat_exports", "no_restricted_chunk_in_public_blob"),
        ("flat_exports", "probe_verifies_against_own_model"),
        ("flat_exports", "exports_share_generation_backend_spec"),
    ]:
        assert expected in checks
    for job in [
        "ingest_job",
        "embed_job",
        "generation_job",
        "promote_generation_job",
        "rollback_generation_job",
        "retire_generation_job",
        "purge_collection_job",
        "compaction_job",
        "eval_report_job",
        "reprocess_job",
    ]:
        assert defs.resolve_job_def(job) is not None
    assert {s.name for s in defs.sensors or []} == {
        "source_update_sensor",
        "corpus_automation_sensor",
        "run_failure_alert_sensor",
        "orphaned_run_sensor",
    }
    # every sensor runs as soon as `make ui` starts the daemon, the failure alerts included
    assert {s.default_status for s in defs.sensors or []} == {dg.DefaultSensorStatus.RUNNING}
    assert {s.name for s in defs.schedules or []} == {"compaction_schedule", "reprocess_schedule"}
    assert {s.default_status for s in defs.schedules or []} == {dg.DefaultScheduleStatus.RUNNING}
    # source changes flow downstream by declarative automation; promotion never does
    for name in ("embeddings", "sidecars", "flat_exports", "index_rows", "index_generation"):
        assert defs.resolve_assets_def(name).automation_conditions_by_key
        assert all(defs.resolve_assets_def(name).automation_conditions_by_key.values())
    assert not any(
        defs.resolve_assets_def("active_generation").automation_conditions_by_key.values()
    )


def test_partitions_follow_config(home: Settings) -> None:
    defs = build_definitions(home)
    emb = defs.resolve_assets_def("embeddings")
    pdef = emb.partitions_def
    assert isinstance(pdef, dg.MultiPartitionsDefinition)
    dims = {d.name: d.partitions_def for d in pdef.partitions_defs}
    assert set(dims) == {"profile", "collection"}
    assert dims["profile"].get_partition_keys() == ["main"]
    assert isinstance(dims["collection"], dg.DynamicPartitionsDefinition)
    gen = defs.resolve_assets_def("index_generation")
    assert gen.partitions_def.get_partition_keys() == ["main"]  # type: ignore[union-attr]


def test_repository_definitions_load_with_the_bundled_config() -> None:
    """The code location the UI loads (workspace.yaml -> definitions.py) imports cleanly."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import definitions; print(len(list(definitions.defs().resolve_asset_graph().get_all_asset_keys())))",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={
            "PATH": "/usr/bin:/bin",
            "CORPUS_CONFIG": str(ROOT / "corpus.yaml"),
            "CORPUS_HOME": "/tmp/unused-home",
        },
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(len(EXPECTED_ASSETS))


def test_generation_writers_share_one_pool_and_nothing_else_is_pooled(home: Settings) -> None:
    defs = build_definitions(home)
    pools = {
        key.to_user_string(): defs.get_assets_def(key).op.pool
        for key in defs.resolve_asset_graph().get_all_asset_keys()
    }
    assert {k for k, pool in pools.items() if pool} == {"index_rows", "index_generation"}
    assert pools["index_rows"] == pools["index_generation"] == "generation_writes"


def test_the_executor_and_the_run_lock_follow_corpus_executor(
    home: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    default = build_definitions(home)
    assert default.executor is not None and default.executor.name == "in_process"
    assert default.resources is not None and not default.resources["corpus"].runs_share_home
    monkeypatch.setenv("CORPUS_EXECUTOR", "multiprocess")
    parallel = build_definitions(home)
    assert parallel.executor is not None and parallel.executor.name == "multiprocess"
    assert parallel.resources is not None and parallel.resources["corpus"].runs_share_home


def test_the_jobs_that_work_on_the_whole_home_hold_it_alone(home: Settings) -> None:
    """Where runs share the home, only the jobs that work on every table or every collection
    (not on what one step's scope lock guards), and those that move the ACTIVE pointer (which
    must not move beside a run writing a generation), hold it exclusively."""
    defs = build_definitions(home)
    jobs = defs.get_repository_def().get_all_jobs()
    alone = {j.name for j in jobs if holds_home_alone(j.run_tags)}
    assert alone == {
        "compaction_job",
        "purge_collection_job",
        "retire_generation_job",
        "reprocess_job",
        "promote_generation_job",
        "rollback_generation_job",
    }


def test_the_registry_url_is_never_a_configured_value_the_ui_shows(
    home: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dagster._core.remote_representation.external_data import RepositorySnap

    url = "postgresql://corpus:S3cretPW@127.0.0.1:1/registry"
    monkeypatch.setenv("CORPUS_REGISTRY", url)
    settings = Settings(config_path=home.config_path, home=home.home, registry_url=url)
    defs = build_definitions(settings)
    snap = RepositorySnap.from_def(defs.get_repository_def())  # what the Resources page reads
    (corpus,) = snap.resources
    assert "S3cretPW" not in str(corpus.configured_values)
    assert "CORPUS_REGISTRY" in str(corpus.configured_values["registry_url"])
    assert defs.resources is not None
    with dg.build_resources({"corpus": defs.resources["corpus"]}) as resources:
        assert resources.corpus.settings().registry_url == url  # a run reads it from its env
