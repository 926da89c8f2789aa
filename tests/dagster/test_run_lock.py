"""Runs launched from the UI or by the daemon hold the home's lock, as `corpus sync` does
(issue 16): a run and a sync of one home never embed the same inputs at once."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import dagster as dg

from assets import CorpusResource
from assets.resources import HOLDING, RELEASING
from corpus_index.config import Settings
from corpus_index.homelock import holder
from pipelines.jobs import compaction_job
from pipelines.reprocess import reprocess_job
from tests.corpusgen import write_home
from tests.dagster import slow_writer
from tests.dagster.harness import QUIET, Graph, materialized
from tests.support.lockholder import ROOT, hold

INGEST = ["source_manifest", "parsed_blocks", "embedding_inputs"]


def resource(settings: Settings, lock_wait_s: float) -> CorpusResource:
    return CorpusResource(
        config_path=str(settings.config_path), home=str(settings.home), lock_wait_s=lock_wait_s
    )


def failure_messages(result: dg.ExecuteInProcessResult) -> str:
    """Every error a failed run recorded, causes included (a resource that could not start
    fails the run before any step)."""
    out = []
    for event in result.all_events:
        error = getattr(event.event_specific_data, "error", None)
        while error is not None:
            out.append(str(error.message))
            error = error.cause
    return "\n".join(out)


def test_a_run_waits_for_a_sync_in_flight_then_fails_naming_it(tmp_path: Path) -> None:
    settings = Settings(config_path=write_home(tmp_path), home=tmp_path / "home")
    g = Graph(settings)

    def ingest(lock_wait_s: float) -> dg.ExecuteInProcessResult:
        # what the run worker of a run launched from the UI executes
        return dg.materialize(
            g.defs.assets,  # type: ignore[arg-type]
            selection=INGEST,
            partition_key="alpha-deals",
            instance=g.instance,
            resources={"corpus": resource(settings, lock_wait_s)},
            run_config=QUIET,
            raise_on_error=False,
        )

    sync = hold(settings.home, 60)  # a `corpus sync` in flight
    try:
        r = ingest(1.0)
        assert not r.success
        assert f"pid {sync.pid} (sync)" in failure_messages(r)
        logged = [e.user_message for e in g.instance.all_logs(r.run_id)]
        assert f"waiting up to 1 s for pid {sync.pid} (sync) to release {settings.home}" in logged
        assert materialized(r) == set()  # nothing was read, parsed or derived
        assert not (settings.home / "warehouse").exists()
    finally:
        sync.kill()
        sync.wait()
    r = ingest(1.0)
    assert r.success and materialized(r) == set(INGEST)


def test_a_cli_sync_is_refused_while_a_run_holds_the_home(tmp_path: Path) -> None:
    settings = Settings(config_path=write_home(tmp_path), home=tmp_path / "home")
    seen: dict[str, object] = {}

    @dg.op
    def meanwhile(corpus: CorpusResource) -> None:
        seen["holder"] = holder(Path(corpus.home))
        sync = subprocess.run(  # noqa: S603 - fixed arguments
            [sys.executable, "-m", "corpus_index.cli", "--config", corpus.config_path]
            + ["--home", corpus.home, "sync"],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        seen["sync"] = (sync.returncode, sync.stderr)

    @dg.job(resource_defs={"corpus": resource(settings, 0.0)})
    def a_run() -> None:
        meanwhile()

    result = a_run.execute_in_process(instance=dg.DagsterInstance.ephemeral(), run_config=QUIET)
    assert result.success
    assert seen["holder"] == f"pid {os.getpid()} (run {result.run_id[:8]} of a_run)"
    code, err = seen["sync"]  # type: ignore[misc]
    assert code == 75, err
    assert f"home {settings.home} is busy" in err and "of a_run)" in err
    assert holder(settings.home) == ""  # released when the run ended


def test_two_runs_sharing_the_home_take_turns_writing_one_generation(tmp_path: Path) -> None:
    """The scope lock alone keeps two steps that write one generation apart (no pool here):
    the second waits, and each step's log shows the span in which it held the lock."""
    settings = Settings(config_path=write_home(tmp_path), home=tmp_path / "home")
    shared = CorpusResource(
        config_path=str(settings.config_path),
        home=str(settings.home),
        lock_wait_s=30.0,
        runs_share_home=True,
    )
    results: list[tuple[dg.ExecuteInProcessResult, list[str]]] = []

    def run() -> None:
        # an instance each, opened and closed in its thread: in-memory storage serves one
        with dg.DagsterInstance.ephemeral() as instance:
            result = dg.materialize(
                [slow_writer.generation_table],
                partition_key="main",
                instance=instance,
                resources={"corpus": shared},
                run_config=QUIET,
            )
            logged = [e.user_message for e in instance.all_logs(result.run_id) if e.step_key]
        results.append((result, logged))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(results) == 2 and all(r.success for r, _ in results)
    first, second = sorted(slow_writer.WROTE[r.run_id] for r, _ in results)
    assert first[1] <= second[0]  # the second write began after the first ended
    waited = []
    for _, logged in results:
        [took] = [m for m in logged if m.startswith(HOLDING)]
        assert took.startswith(f"{HOLDING} generation:main (waited ")
        assert sum(m.startswith(RELEASING) for m in logged) == 1
        waited.append(float(took.rsplit("waited ", 1)[1].split(" s)")[0]))
    assert max(waited) >= 0.5  # one of them waited for the other's write


def test_a_compaction_run_waits_for_every_run_sharing_the_home(tmp_path: Path) -> None:
    """Compaction rewrites every table's files and, with a deletion pending, removes every old
    version and ``*.tmp`` file; re-processing rewrites the groups of any collection. Where runs
    share the home (the multiprocess executor), a run of either still holds it alone: it waits
    for another run's step in flight, which the runs of the other jobs go on beside."""
    settings = Settings(config_path=write_home(tmp_path), home=tmp_path / "home")
    g = Graph(settings)
    shared = CorpusResource(
        config_path=str(settings.config_path),
        home=str(settings.home),
        lock_wait_s=1.0,
        runs_share_home=True,
    )
    whole = dg.Definitions(jobs=[compaction_job, reprocess_job], resources={"corpus": shared})
    step = hold(settings.home, 60, "run 1234abcd of embed_job", shared=True)
    try:
        ingest = dg.materialize(
            g.defs.assets,  # type: ignore[arg-type]
            selection=INGEST,
            partition_key="alpha-deals",
            instance=g.instance,
            resources={"corpus": shared},
            run_config=QUIET,
            raise_on_error=False,
        )
        assert ingest.success and materialized(ingest) == set(INGEST)
        for job in ("compaction_job", "reprocess_job"):
            r = whole.resolve_job_def(job).execute_in_process(
                instance=g.instance, run_config=QUIET, raise_on_error=False
            )
            assert not r.success, job
            assert f"home {settings.home} is busy after waiting 1 s" in failure_messages(r)
            # its op never ran: nothing compacted or re-processed beside the step in flight
            assert r.get_step_success_events() == []
            logged = " ".join(e.user_message for e in g.instance.all_logs(r.run_id))
            assert "compacted" not in logged and "re-processed" not in logged
    finally:
        step.kill()
        step.wait()
    r = whole.resolve_job_def("compaction_job").execute_in_process(
        instance=g.instance, run_config=QUIET, raise_on_error=False
    )
    assert r.success
    assert "compacted" in " ".join(e.user_message for e in g.instance.all_logs(r.run_id))
