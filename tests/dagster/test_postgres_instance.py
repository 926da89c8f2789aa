"""Dagster's production pieces on a real PostgreSQL (issue 21): the instance the project writes
for ``CORPUS_DAGSTER_POSTGRES_URL`` keeps its runs there, and two collections' runs with the
multiprocess executor run side by side on it, with the results of the embedded default.

The home is the whole production setup at once: Dagster and the registry in PostgreSQL, the
stores on an S3-compatible server (``CORPUS_STORAGE``), runs in parallel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest
import yaml
from click.testing import CliRunner

from assets.resources import HOLDING, RELEASING
from corpus_index.cli import main
from corpus_index.config import Settings
from corpus_index.dagster_home import (
    MAX_CONCURRENT_RUNS,
    POOL_DEFAULT_LIMIT,
    POSTGRES_URL_ENV,
    RUN_TAG_LIMITS,
    prepare,
)
from corpus_index.eligibility import Principal
from corpus_index.environment import POSTGRES_SCHEME
from corpus_index.home import Home
from corpus_index.search import Searcher
from definitions import build_definitions
from pipelines.runner import initialize_pools
from tests.corpusgen import write_home
from tests.dagster.harness import Graph
from tests.support.postgres import LocalPostgres
from tests.support.s3_server import LocalS3

pytestmark = pytest.mark.prod

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "not-in-the-file-7f3a"
COLLECTIONS = ("alpha-deals", "beta-deals")
QUERIES = ["roofs and boilers past their useful life", "anchor tenant lease renewal"]
# the column that names the run that wrote a row, not what the row is
RUN_COLUMNS = {"run_id"}
BUCKET = "prod-home"


@dataclass(frozen=True)
class ProdHome:
    settings: Settings
    dagster_home: Path
    env: dict[str, str]


@pytest.fixture(scope="module")
def prod(
    postgres_server: LocalPostgres, s3_server: LocalS3, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProdHome]:
    """A two-collection hash-embedder home whose Dagster instance and registry are on
    PostgreSQL and whose stores are on the S3 server."""
    root = tmp_path_factory.mktemp("prod-home")
    # the registry in PostgreSQL too (CORPUS_REGISTRY), so runs write it from many processes
    registry = postgres_server.create_database("registry_prod")
    s3_server.create_bucket(BUCKET)
    storage = f"s3://{BUCKET}/prod"
    settings = Settings(
        config_path=write_home(root), home=root / "home", registry_url=registry, storage=storage
    )
    db = postgres_server.create_database("dagster_prod")
    # trust authentication accepts any password: one in the URL shows it never reaches a file
    url = db.replace(
        f"postgresql://{postgres_server.user}@",
        f"{POSTGRES_SCHEME}{postgres_server.user}:{PASSWORD}@",
    )
    env = {
        POSTGRES_URL_ENV: url,
        "DAGSTER_HOME": str(settings.dagster_home),
        "CORPUS_CONFIG": str(settings.config_path),
        "CORPUS_HOME": str(settings.home),
        "CORPUS_EXECUTOR": "multiprocess",
        "CORPUS_REGISTRY": registry,
        "CORPUS_STORAGE": storage,
        **s3_server.env(),
    }
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        prepare(settings.dagster_home, postgres=True)
        yield ProdHome(settings, settings.dagster_home, env)


@dg.op
def noted() -> int:
    return 1


@dg.job
def ping_job() -> None:
    noted()


def test_the_instance_keeps_runs_in_postgres_seen_from_another_process(prod: ProdHome) -> None:
    text = (prod.dagster_home / "dagster.yaml").read_text(encoding="utf-8")
    assert PASSWORD not in text and "127.0.0.1" not in text  # the URL stays in the environment
    assert yaml.safe_load(text)["storage"]["postgres"]["postgres_url"] == {"env": POSTGRES_URL_ENV}
    with dg.DagsterInstance.from_config(str(prod.dagster_home)) as instance:
        storages = [instance.run_storage, instance.event_log_storage, instance.schedule_storage]
        assert [type(s).__name__ for s in storages] == [
            "PostgresRunStorage",
            "PostgresEventLogStorage",
            "PostgresScheduleStorage",
        ]
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        concurrency = instance.get_concurrency_config()
        queue = concurrency.run_queue_config
        assert queue is not None and queue.max_concurrent_runs == MAX_CONCURRENT_RUNS
        assert [(t["key"], t["limit"]) for t in queue.tag_concurrency_limits] == RUN_TAG_LIMITS
        assert concurrency.pool_config.default_pool_limit == POOL_DEFAULT_LIMIT
        run_id = ping_job.execute_in_process(instance=instance).run_id
    seen = subprocess.run(  # noqa: S603 - fixed arguments
        [
            sys.executable,
            "-c",
            "import sys, dagster as dg\n"
            "with dg.DagsterInstance.get() as i:\n"
            "    r = i.get_run_by_id(sys.argv[1])\n"
            "    print(r.job_name, r.status.value, type(i.run_storage).__name__)",
            run_id,
        ],
        env={**os.environ, **prod.env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert seen.returncode == 0, seen.stderr
    assert seen.stdout.split() == ["ping_job", "SUCCESS", "PostgresRunStorage"]


def run_side_by_side(prod: ProdHome, job: str, keys: list[str]) -> list[str]:
    """Start one run per partition key at once (each its own process, a process per step);
    returns their run ids once all have ended."""
    env = {**os.environ, **prod.env, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(  # noqa: S603 - fixed arguments
            [sys.executable, "-m", "tests.dagster.prod_jobs", job, key],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for key in keys
    ]
    run_ids = []
    for proc, key in zip(procs, keys, strict=True):
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{job} {key}: {out}\n{err[-3000:]}"
        run_ids.append(json.loads(out.strip().splitlines()[-1])["run_id"])
    return run_ids


def lock_spans(instance: dg.DagsterInstance, run_id: str, step: str) -> list[tuple[float, float]]:
    """When the step ``step`` of a run held its scope locks (its log's two lines, both written
    while it held them)."""
    took: list[float] = []
    spans: list[tuple[float, float]] = []
    for event in instance.all_logs(run_id):
        if event.step_key != step or not event.user_message:
            continue
        if event.user_message.startswith(HOLDING):
            took.append(event.timestamp)
        elif event.user_message.startswith(RELEASING):
            spans.append((took.pop(), event.timestamp))
    assert not took, f"{step} of {run_id} took its locks without giving them up"
    return spans


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def rows_of(home: Home) -> list[dict[str, object]]:
    """The rows of the profile's generation, in chunk order, without what names their run."""
    g = home.registry.generations(profile="main")[-1]
    rows = home.store.table(g).to_arrow().to_pylist()
    return sorted(
        ({k: v for k, v in r.items() if k not in RUN_COLUMNS} for r in rows),
        key=lambda r: str(r["chunk_ref"]),
    )


def hits_of(home: Home) -> list[list[tuple[str, float]]]:
    g = home.registry.generations(profile="main")[-1]
    searcher = Searcher(home)
    out = []
    for tenant, groups in (("alpha", ("alpha-uw",)), ("beta", ("beta-team",))):
        for query in QUERIES:
            result = searcher.search(
                query, principal=Principal(tenant, groups), k=5, generation=g.id, mode="hybrid"
            )
            out.append([(h.provenance.chunk_ref, round(h.score, 6)) for h in result.hits])
    return out


def test_two_collections_run_side_by_side_with_the_embedded_results(
    prod: ProdHome, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with dg.DagsterInstance.from_config(str(prod.dagster_home)) as instance:
        instance.add_dynamic_partitions("collections", list(COLLECTIONS))
        # as any `corpus` command on this instance does first (DagsterRunner.open_home): two
        # runs that both claim a pool Dagster has no row for yet collide on its unique key
        assert initialize_pools(instance, build_definitions()) == ["generation_writes"]
        ingest = run_side_by_side(prod, "ingest_job", list(COLLECTIONS))
        embed = run_side_by_side(prod, "embed_job", [f"{c}|main" for c in COLLECTIONS])
        [generation] = run_side_by_side(prod, "generation_job", ["main"])
        records = {r.dagster_run.run_id: r for r in instance.get_run_records()}
        for run_id in [*ingest, *embed, generation]:
            assert records[run_id].dagster_run.status == dg.DagsterRunStatus.SUCCESS
            logs = instance.all_logs(run_id)
            retried = [e for e in logs if e.dagster_event and e.dagster_event.is_step_up_for_retry]
            assert not retried
            assert not any("busy" in (e.user_message or "") for e in logs)
        # the two collections' runs overlapped in time, each step in a process of its own
        for a, b in (ingest, embed):
            ra, rb = records[a], records[b]
            assert overlap((ra.start_time, ra.end_time), (rb.start_time, rb.end_time))
            assert len({e.dagster_event.pid for e in instance.all_logs(a) if e.dagster_event}) > 2
        # the generation-table writers took turns. The pool's one slot schedules them, but
        # Dagster's claim on PostgreSQL can let two steps through at once (it reads the free
        # slots and takes one in separate autocommitted statements), so the scope lock of the
        # generation is what guarantees it: the spans in which the steps held it never overlap
        [held_a] = lock_spans(instance, embed[0], "index_rows")
        [held_b] = lock_spans(instance, embed[1], "index_rows")
        assert not overlap(held_a, held_b)
        assert instance.event_log_storage.get_concurrency_info("generation_writes").slot_count == 1

    assert not (prod.settings.home / "registry.duckdb").exists()  # every run used PostgreSQL
    for store in ("warehouse", "lance"):  # and the object store
        assert not (prod.settings.home / store).exists()
    parallel = Home(prod.settings)
    embedded_settings = Settings(config_path=write_home(tmp_path), home=tmp_path / "home")
    monkeypatch.delenv("CORPUS_EXECUTOR")  # the embedded default: in-process, one run at a time
    monkeypatch.delenv(POSTGRES_URL_ENV)
    monkeypatch.delenv("CORPUS_REGISTRY")
    monkeypatch.delenv("CORPUS_STORAGE")
    Graph(embedded_settings).build_all()
    embedded = Home(embedded_settings)
    rows = rows_of(parallel)
    assert {r["collection"] for r in rows} == set(COLLECTIONS)
    assert rows == rows_of(embedded)
    hits = hits_of(parallel)
    assert all(hits) and hits == hits_of(embedded)


def test_the_ui_shows_the_generation_writers_pool(prod: ProdHome) -> None:
    # the webserver's own GraphQL schema over the code location of workspace.yaml, loaded in a
    # code server process as the UI loads it
    from dagster_graphql.test.utils import define_out_of_process_context, execute_dagster_graphql

    query = "{ assetNodes { assetKey { path } pools } }"
    with (
        dg.DagsterInstance.from_config(str(prod.dagster_home)) as instance,
        define_out_of_process_context(str(ROOT / "workspace.yaml"), None, instance) as context,
    ):
        result = execute_dagster_graphql(context, query)
    assert not result.errors, result.errors
    pools = {"/".join(n["assetKey"]["path"]): n["pools"] for n in result.data["assetNodes"]}
    assert pools["index_rows"] == pools["index_generation"] == ["generation_writes"]
    assert pools["embeddings"] == [] and pools["source_manifest"] == []


def test_a_database_that_cannot_be_reached_is_named_without_its_password(tmp_path: Path) -> None:
    """A CORPUS_DAGSTER_POSTGRES_URL whose server does not answer (or refuses the password)
    fails `corpus sync` naming the variable and the URL without its password (exit 1: to run
    again), not with dagster-postgres's traceback after its retries."""
    config = write_home(tmp_path)
    url = f"{POSTGRES_SCHEME}dagster:{PASSWORD}@127.0.0.1:9/dagster"  # nothing listens on 9
    result = CliRunner(env={POSTGRES_URL_ENV: url}).invoke(
        main, ["--config", str(config), "--home", str(tmp_path / "home"), "sync"]
    )
    assert isinstance(result.exception, SystemExit) and result.exit_code == 1, result.output
    assert f"{POSTGRES_URL_ENV}: cannot reach Dagster's database" in result.output
    assert "dagster:***@127.0.0.1:9/dagster" in result.output and PASSWORD not in result.output
