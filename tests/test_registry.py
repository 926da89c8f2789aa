"""The generation registry on both backends (a real DuckDB file, a real PostgreSQL database):
lifecycle, promotion gates, the cached ACTIVE pointer; DuckDB's file lock."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corpus_index.errors import MissingGenerationError, PromotionRefusedError, RetryableError
from corpus_index.registry import GenerationSpec, Registry
from tests.registry_backends import Place

SPEC = GenerationSpec(
    namespace="deals",
    profile="main",
    backend_spec="hash:v1-64",
    model_revision="v1",
    dim=64,
    normalized=True,
    input_format="default-v1",
    chunking="sections-v1",
)
OTHER_MODEL = dataclasses.replace(SPEC, backend_spec="hash:v1-32", dim=32)
PASSED = {"vectors_have_profile_dim": {"passed": True}, "rows_reconcile": {"passed": True}}


def registry(tmp_path: Path, **kwargs: float) -> Registry:
    return Registry(tmp_path / "home" / "registry.duckdb", **kwargs)


def ready(reg: Registry, spec: GenerationSpec, *, rows: int = 10) -> str:
    gen = reg.open_generation(spec)
    reg.record_build(gen.id, row_count=rows, checks=PASSED, ready=True)
    return gen.id


def test_open_generation_creates_g0001_building_and_reuses_it(place: Place) -> None:
    reg = place.open()
    first = reg.open_generation(SPEC, run_id="run-1")
    assert (first.id, first.status, first.table_name, first.row_count) == (
        "g0001",
        "BUILDING",
        "gen_g0001",
        0,
    )
    assert first.spec == SPEC
    assert first.run_ids == ["run-1"]
    assert first.ready_at is first.activated_at is first.retired_at is None
    again = reg.open_generation(SPEC, run_id="run-2")
    assert again.id == "g0001"
    reg.open_generation(SPEC, run_id="run-2")
    assert reg.require("g0001").run_ids == ["run-1", "run-2"]  # each run recorded once
    assert [g.id for g in reg.generations()] == ["g0001"]


VECTOR_CHANGES: list[dict[str, object]] = [
    {"backend_spec": "hash:v1-32", "dim": 32},
    {"model_revision": "v2"},
    {"input_format": "default-v2"},
    {"chunking": "paragraphs-v1"},
    {"namespace": "other"},
]


def test_a_different_spec_for_the_same_profile_opens_a_new_generation(place: Place) -> None:
    reg = place.open()
    reg.open_generation(SPEC)
    for n, change in enumerate(VECTOR_CHANGES, start=2):
        other = reg.open_generation(dataclasses.replace(SPEC, **change))  # type: ignore[arg-type]
        assert (other.id, other.status) == (f"g{n:04d}", "BUILDING"), change
        assert reg.open_generation(dataclasses.replace(SPEC, **change)).id == other.id  # type: ignore[arg-type]
    assert reg.open_generation(SPEC).id == "g0001"  # the first is still live and still matches
    assert len(reg.generations(profile="main")) == 1 + len(VECTOR_CHANGES)


def test_normalized_flag_alone_does_not_split_generations(place: Place) -> None:
    reg = place.open()
    reg.open_generation(SPEC)
    assert reg.open_generation(dataclasses.replace(SPEC, normalized=False)).id == "g0001"


def test_retired_or_failed_generations_are_not_reused(place: Place) -> None:
    reg = place.open()
    reg.open_generation(SPEC)
    reg.set_status("g0001", "FAILED")
    assert reg.open_generation(SPEC).id == "g0002"
    reg.set_status("g0002", "RETIRED")
    assert reg.require("g0002").retired_at is not None
    assert reg.open_generation(SPEC).id == "g0003"
    assert reg.live_generation("main").id == "g0003"  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="unknown status"):
        reg.set_status("g0003", "DONE")


def test_record_build_makes_building_ready(place: Place) -> None:
    reg = place.open()
    gen = reg.open_generation(SPEC)
    not_yet = reg.record_build(gen.id, row_count=5, checks={"x": {"passed": False}}, ready=False)
    assert (not_yet.status, not_yet.row_count, not_yet.ready_at) == ("BUILDING", 5, None)
    built = reg.record_build(gen.id, row_count=42, checks=PASSED, ready=True)
    # outcomes merge: a check not re-run keeps its last outcome
    assert (built.status, built.row_count) == ("READY", 42)
    assert built.checks == {"x": {"passed": False}, **PASSED}
    assert built.ready_at is not None
    assert built.updated_at >= built.created_at
    rebuilt = reg.record_build(gen.id, row_count=43, checks=PASSED, ready=True)
    assert rebuilt.ready_at == built.ready_at  # the first time it became ready is kept


def test_record_checks_and_eval_merge(place: Place) -> None:
    reg = place.open()
    gen_id = ready(reg, SPEC)
    reg.record_checks(gen_id, {"retrieval_eval": {"passed": True, "ndcg": 0.7}})
    reg.record_eval(gen_id, {"ndcg@10": 0.7})
    reg.record_eval(gen_id, {"recall@10": 0.9})
    gen = reg.require(gen_id)
    assert gen.checks == {**PASSED, "retrieval_eval": {"passed": True, "ndcg": 0.7}}
    assert gen.eval == {"ndcg@10": 0.7, "recall@10": 0.9}


def test_promote_moves_the_pointer_and_remembers_the_previous(place: Place) -> None:
    reg = place.open()
    assert reg.active("deals") is None
    assert reg.previous("deals") is None
    g1 = ready(reg, SPEC)
    g2 = ready(reg, OTHER_MODEL)

    first = reg.promote(g1, run_id="run-a")
    assert (first.id, first.status) == ("g0001", "ACTIVE")
    assert first.activated_at is not None
    assert reg.active("deals").id == g1  # type: ignore[union-attr]
    assert reg.previous("deals") is None

    second = reg.promote(g2, run_id="run-b")
    assert second.status == "ACTIVE"
    assert reg.active("deals").id == g2  # type: ignore[union-attr]
    assert reg.previous("deals").id == g1  # type: ignore[union-attr]
    assert reg.require(g1).status == "READY"  # the old ACTIVE stays live, ready for rollback

    rolled_back = reg.promote(g1, action="rollback")
    assert rolled_back.status == "ACTIVE"
    assert reg.require(g2).status == "READY"
    assert reg.previous("deals").id == g2  # type: ignore[union-attr]

    history = reg.history("deals")
    assert [
        (h["action"], h["from_generation"], h["to_generation"], h["run_id"]) for h in history
    ] == [
        ("promote", None, "g0001", "run-a"),
        ("promote", "g0001", "g0002", "run-b"),
        ("rollback", "g0002", "g0001", None),
    ]
    assert all(h["namespace"] == "deals" for h in history)
    assert reg.history("other") == []


def test_promoting_the_active_generation_again_changes_nothing(place: Place) -> None:
    reg = place.open()
    g1 = ready(reg, SPEC)
    reg.promote(g1)
    assert reg.promote(g1).status == "ACTIVE"
    assert len(reg.history("deals")) == 1
    assert reg.previous("deals") is None


def test_promote_refuses_a_building_generation(place: Place) -> None:
    reg = place.open()
    gen = reg.open_generation(SPEC)
    with pytest.raises(PromotionRefusedError, match="g0001 is BUILDING; only a READY generation"):
        reg.promote(gen.id)
    assert reg.active("deals") is None


def test_promote_refuses_dead_generations(place: Place) -> None:
    reg = place.open()
    for status in ("FAILED", "RETIRED"):
        gen_id = ready(reg, SPEC)
        reg.set_status(gen_id, status)
        with pytest.raises(PromotionRefusedError, match=f"{gen_id} is {status}"):
            reg.promote(gen_id)


def test_promote_refuses_a_failed_check_and_names_it(place: Place) -> None:
    reg = place.open()
    g1 = ready(reg, SPEC)
    reg.promote(g1)
    g2 = reg.open_generation(OTHER_MODEL).id
    checks = {
        "vectors_have_profile_dim": {"passed": True},
        "retrieval_not_worse": {"passed": False, "ndcg": 0.1},
        "fts_covers_rows": {},  # a check with no outcome has not passed
    }
    reg.record_build(g2, row_count=10, checks=checks, ready=True)
    with pytest.raises(PromotionRefusedError) as info:
        reg.promote(g2)
    assert str(info.value) == (
        "generation g0002 cannot be promoted: failed checks: fts_covers_rows, retrieval_not_worse"
    )
    assert reg.active("deals").id == g1  # type: ignore[union-attr]
    assert reg.require(g2).status == "READY"


def test_missing_generation(place: Place) -> None:
    reg = place.open()
    assert reg.get("g0042") is None
    with pytest.raises(MissingGenerationError, match="no generation 'g0042'"):
        reg.require("g0042")
    with pytest.raises(MissingGenerationError):
        reg.promote("g0042")


def test_generations_filter_and_to_json(place: Place) -> None:
    reg = place.open()
    reg.open_generation(SPEC)
    reg.open_generation(dataclasses.replace(SPEC, profile="alt", namespace="lab"))
    assert [g.id for g in reg.generations(namespace="lab")] == ["g0002"]
    assert [g.id for g in reg.generations(profile="main", namespace="deals")] == ["g0001"]
    assert reg.generations(profile="main", namespace="lab") == []
    data = reg.require("g0001").to_json()
    assert data["id"] == "g0001"
    assert data["backend_spec"] == "hash:v1-64"
    assert data["status"] == "BUILDING"
    assert data["ready_at"] is None
    assert isinstance(data["created_at"], str)


def test_two_registry_objects_on_one_file_in_sequence(place: Place) -> None:
    a = place.open()
    b = place.open()
    g1 = ready(a, SPEC)
    assert b.open_generation(SPEC).id == g1
    b.promote(g1)
    assert a.active("deals").id == g1  # type: ignore[union-attr]
    g2 = ready(a, OTHER_MODEL)
    b.promote(g2)
    assert a.previous("deals").id == g1  # type: ignore[union-attr]
    assert [h["to_generation"] for h in a.history("deals")] == ["g0001", "g0002"]


PROMOTER = """
import sys
from pathlib import Path
from corpus_index.registry import Registry
Registry(sys.argv[1], journal=Path(sys.argv[2])).promote(sys.argv[3])
"""


def test_cached_active_is_reused_until_the_registry_changes(place: Place) -> None:
    reader = place.open()
    writer = place.open()
    assert reader.active("deals", cached=True) is None
    g1 = ready(writer, SPEC)
    assert reader.active("deals", cached=True) is None  # READY is not ACTIVE
    writer.promote(g1)
    first = reader.active("deals", cached=True)
    assert first is not None and first.id == g1 and first.status == "ACTIVE"
    assert reader.active("deals", cached=True) is first  # unchanged files: no database read
    assert reader.active("deals") == first  # the uncached read agrees
    g2 = ready(writer, OTHER_MODEL)
    writer.promote(g2)  # another Registry object in this process
    assert reader.active("deals", cached=True).id == g2  # type: ignore[union-attr]
    # another process moves the pointer back: the cached reader sees it on its next call
    promoter = [sys.executable, "-c", PROMOTER, str(place.location), str(place.journal), g1]
    subprocess.run(promoter, check=True)
    again = reader.active("deals", cached=True)
    assert again is not None and again.id == g1 and again.status == "ACTIVE"
    assert reader.active("other", cached=True) is None


# -- another process holding the write lock ------------------------------------------------

HOLDER = """
import sys, time, duckdb
con = duckdb.connect(sys.argv[1])
con.execute("CREATE TABLE IF NOT EXISTS held (x INTEGER)")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
con.close()
"""


def hold_lock(path: Path, seconds: float) -> subprocess.Popen[str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path), str(seconds)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # blocks until the holder has the file open
    if line.strip() != "locked":
        proc.kill()
        raise RuntimeError(
            f"lock holder did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}"
        )
    return proc


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


def test_connect_retries_then_raises_retryable_while_another_process_writes(tmp_path: Path) -> None:
    reg = registry(tmp_path, lock_timeout_s=0.6)
    holder = hold_lock(reg.path, 30)
    try:
        started = time.monotonic()
        with pytest.raises(RetryableError, match="registry is busy") as info:
            reg.generations()
        waited = time.monotonic() - started
        assert holder.poll() is None, "the holder must still hold the lock when the error is raised"
    finally:
        stop(holder)
    assert 0.6 <= waited < 10, f"waited {waited:.2f}s for a 0.6s lock timeout"
    assert "lock" in str(info.value.__cause__).lower()
    assert reg.generations() == []  # once the holder is gone, the same object works


def test_connect_waits_for_a_lock_released_within_the_timeout(tmp_path: Path) -> None:
    reg = registry(tmp_path, lock_timeout_s=15)
    holder = hold_lock(reg.path, 0.8)
    try:
        started = time.monotonic()
        gen = reg.open_generation(SPEC)
        waited = time.monotonic() - started
    finally:
        stop(holder)
    assert gen.id == "g0001"
    assert waited >= 0.3, "the registry should have had to wait for the holder"


def test_promote_requires_every_named_gate_to_have_run(place: Place) -> None:
    reg = place.open()
    g1 = ready(reg, SPEC)
    required = {*PASSED, "index_generation:retrieval_not_worse_than_active"}
    with pytest.raises(PromotionRefusedError) as info:
        reg.promote(g1, required=required)
    assert str(info.value) == (
        "generation g0001 cannot be promoted: checks not run: "
        "index_generation:retrieval_not_worse_than_active"
    )
    reg.record_checks(g1, {"index_generation:retrieval_not_worse_than_active": {"passed": True}})
    assert reg.promote(g1, required=required).status == "ACTIVE"


def test_record_checks_keep_drops_outcomes_no_longer_required(place: Place) -> None:
    reg = place.open()
    g1 = ready(reg, SPEC)
    reg.record_checks(g1, {"embeddings:vectors_are_finite[gone]": {"passed": False}})
    reg.record_checks(g1, {}, keep=set(PASSED))
    assert reg.require(g1).checks == PASSED


def test_retire_refuses_active_rollback_target_and_window(place: Place) -> None:
    import datetime as dt

    from corpus_index.errors import RetireRefusedError

    reg = place.open()
    g1 = ready(reg, SPEC)
    g2 = ready(reg, OTHER_MODEL)
    g3 = ready(reg, dataclasses.replace(SPEC, backend_spec="hash:v1-16", dim=16))
    reg.promote(g1)
    reg.promote(g2)  # g1 is now the rollback target
    with pytest.raises(RetireRefusedError, match="g0002 is ACTIVE"):
        reg.retire(g2, window_hours=0)
    with pytest.raises(RetireRefusedError, match="g0001 is the rollback target"):
        reg.retire(g1, window_hours=0)
    # g3 never served: its window counts from when it became READY
    with pytest.raises(RetireRefusedError, match="safety window: 0.00 h since it was built"):
        reg.retire(g3, window_hours=24)
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=25)
    retired = reg.retire(g3, window_hours=24, now=later)
    assert retired.status == "RETIRED" and retired.retired_at is not None
    assert reg.retire(g3, window_hours=24).status == "RETIRED"  # again: a no-op
    # a RETIRED generation never receives rows again: the same spec opens a new one
    again = reg.open_generation(dataclasses.replace(SPEC, backend_spec="hash:v1-16", dim=16))
    assert again.id == "g0004" and again.status == "BUILDING"


def test_retire_window_counts_from_when_it_last_served(place: Place) -> None:
    import datetime as dt

    from corpus_index.errors import RetireRefusedError

    reg = place.open()
    g1, g2, g3 = (
        ready(reg, SPEC),
        ready(reg, OTHER_MODEL),
        ready(reg, dataclasses.replace(SPEC, backend_spec="hash:v1-16", dim=16)),
    )
    for g in (g1, g2, g3):  # g1 served, then g2; now g3 serves and g2 is the rollback target
        reg.promote(g)
    served_until = reg.deactivated_at(g1)
    assert served_until is not None
    with pytest.raises(RetireRefusedError, match="since it last served"):
        reg.retire(g1, window_hours=1, now=served_until + dt.timedelta(minutes=59))
    assert reg.retire(g1, window_hours=1, now=served_until + dt.timedelta(minutes=61)).status == (
        "RETIRED"
    )


def test_stale_sources_evals_and_tombstones(place: Place) -> None:
    reg = place.open()
    broken = {"serving_version": "v1", "broken_version": "v2", "path": "a.md", "line": 3}
    reg.set_stale("deals-a", [{"source_id": "deals-a/x", **broken, "error": "bad table"}])
    reg.set_stale("deals-b", [{"source_id": "deals-b/y", **broken, "error": "bad", "line": None}])
    since = reg.stale_sources("deals-a")[0]["since"]
    # still broken at the same version: keeps its since; a second one joins it
    reg.set_stale(
        "deals-a",
        [
            {"source_id": "deals-a/x", **broken, "error": "bad table"},
            {"source_id": "deals-a/z", **broken, "error": "bad list"},
        ],
    )
    rows = reg.stale_sources("deals-a")
    assert [(r["source_id"], r["line"]) for r in rows] == [("deals-a/x", 3), ("deals-a/z", 3)]
    assert rows[0]["since"] == since and rows[1]["since"] > since
    reg.clear_stale(["deals-a/x", "deals-b/y", "deals-b/none"])
    assert [r["source_id"] for r in reg.stale_sources()] == ["deals-a/z"]

    result = {"dataset": "tiny", "mode": "dense", "generation": "g0001", "profile": "main"}
    reg.record_dataset_evals([{**result, "backend_spec": "hash:v1-64", "ndcg@10": 0.5}])
    reg.record_dataset_evals([{**result, "backend_spec": "hash:v1-64", "ndcg@10": 0.7}])
    assert [e["ndcg@10"] for e in reg.dataset_evals("tiny")] == [0.5, 0.7]
    assert reg.dataset_evals("other") == []

    stone = {"collection": "deals-a", "namespace": "deals", "content_hashes": ["c2", "c1"]}
    reg.add_tombstones(
        [
            {"source_id": "deals-a/gone", **stone, "reason": "removed"},
            {"source_id": "deals-a/p'q", **stone, "reason": "purged"},
        ]
    )
    assert reg.tombstoned("deals-a", "removed") == {"deals-a/gone"}
    assert reg.tombstone("deals-a/p'q")["content_hashes"] == ["c1", "c2"]  # type: ignore[index]
    state = reg.tombstones_state()
    reg.mark_purged(["deals-a/p'q"])
    assert [t["source_id"] for t in reg.tombstones(pending_purge=True)] == ["deals-a/gone"]
    assert reg.lift_tombstones(["deals-a/gone", "deals-a/never"]) == 1
    assert reg.tombstones_state() != state  # a lifted tombstone changes the set
    assert [t["source_id"] for t in reg.tombstones(namespace="deals")] == ["deals-a/p'q"]


def test_the_schema_version_is_recorded_and_a_newer_one_refused(place: Place) -> None:
    from corpus_index.errors import PermanentError
    from corpus_index.registry_sql import REGISTRY_SCHEMA_VERSION

    reg = place.open()
    with reg.connect() as con:
        assert con.execute("SELECT version FROM registry_schema").fetchall() == [
            (REGISTRY_SCHEMA_VERSION,)
        ]
        con.execute("UPDATE registry_schema SET version = ?", [REGISTRY_SCHEMA_VERSION + 1])
    assert reg.generations() == []  # this object created the tables before the change
    with pytest.raises(PermanentError, match=f"schema is version {REGISTRY_SCHEMA_VERSION + 1}"):
        place.open().generations()


def test_corpus_registry_selects_postgres_and_anything_else_is_refused(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from corpus_index.cli import main
    from corpus_index.config import settings_from_env
    from corpus_index.errors import ConfigError
    from corpus_index.registry import open_registry

    url = "postgresql://corpus@127.0.0.1:5432/registry"
    on_pg = open_registry(settings_from_env({"CORPUS_REGISTRY": url}, cwd=tmp_path))
    assert on_pg.on_postgres and on_pg.path is None and on_pg.location == url
    assert on_pg.journal.path == tmp_path / ".corpus" / "registry.journal.jsonl"
    default = open_registry(settings_from_env({"CORPUS_REGISTRY": ""}, cwd=tmp_path))
    assert default.path == tmp_path / ".corpus" / "registry.duckdb" and not default.on_postgres
    secret = settings_from_env({"CORPUS_REGISTRY": "postgresql://u:pw@db:5432/r"}, cwd=tmp_path)
    assert open_registry(secret).location == "postgresql://u:***@db:5432/r"
    # libpq also takes the password as a query parameter
    query = "postgresql://u@db:5432/r?sslmode=disable&PASSWORD=pw&password=pw2"
    in_query = open_registry(settings_from_env({"CORPUS_REGISTRY": query}, cwd=tmp_path))
    assert in_query.location == "postgresql://u@db:5432/r?sslmode=disable&PASSWORD=***&password=***"
    for bad, message in [
        ("mysql://db/registry", "'mysql://db/registry' is not a PostgreSQL URL"),
        ("/srv/registry.duckdb", "is not a PostgreSQL URL"),
        ("postgresql://db:5432", "the URL names no database"),
    ]:
        with pytest.raises(ConfigError, match=message) as raised:
            settings_from_env({"CORPUS_REGISTRY": bad}, cwd=tmp_path)
        assert str(raised.value).startswith("CORPUS_REGISTRY: ")
    result = CliRunner().invoke(
        main, ["--registry", "mysql://db/r", "--home", str(tmp_path), "generations"]
    )
    assert (
        result.exit_code == 2 and "--registry" in result.output and "mysql://db/r" in result.output
    )
    with pytest.raises(ValueError, match="needs a journal path"):
        Registry(url)


def test_an_unreachable_postgres_registry_is_named_without_its_password(tmp_path: Path) -> None:
    import socket

    from click.testing import CliRunner

    from corpus_index.cli import main

    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgresql://corpus:s3cret@127.0.0.1:{port}/registry"
    result = CliRunner(env={"CORPUS_REGISTRY": url}).invoke(
        main, ["--home", str(tmp_path), "generations"]
    )
    assert result.exit_code == 1, result.output
    assert f"postgresql://corpus:***@127.0.0.1:{port}/registry" in result.output
    assert "cannot reach the registry database" in result.output and "s3cret" not in result.output


def test_a_home_key_is_made_once_and_kept(place: Place) -> None:
    """The secret a home keys its receipts' hashes with: the same for every reader, made once,
    another for another name."""
    reg = place.open()
    key = reg.home_key("deletion-details")
    assert len(key) == 32
    assert place.open().home_key("deletion-details") == key
    assert reg.home_key("another") != key
