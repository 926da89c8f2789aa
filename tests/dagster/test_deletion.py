"""Deletion reaches every generation, sidecar and warehouse row, with a tombstone, a receipt,
and an audit that is clean once compaction has run.

Every test starts from the same home, synced once for the module (two profiles, both
generations built), or from that home after one deal's file was removed and synced (also once
for the module); each gets its own copy to change.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow.compute as pc
import pytest
import yaml
from click.testing import CliRunner

from corpus_index import byte_audit, steps
from corpus_index.cli import main
from corpus_index.config import Settings
from corpus_index.home import Home
from corpus_index.registry import Registry
from corpus_index.search import Principal, Searcher
from corpus_index.traces import TraceStore
from definitions import dagster_runner
from tests.corpusgen import deal_text, give_words_of_its_own, write_home

pytestmark = pytest.mark.slow
GONE = "alpha-deals/deal-alpha-001"


@pytest.fixture(scope="module")
def synced(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-profile home after its first sync (sources, corpus.yaml and home under one root)."""
    root = tmp_path_factory.mktemp("synced")
    config = write_home(
        root, extra_profiles={"alt": {"embedder": "hash:v1-32", "namespace": "deals"}}
    )
    # the audit of its deletion expects the byte scan to find the deal's bytes
    give_words_of_its_own(root / "sources" / "alpha" / "deal-alpha-001.uw.md", seed=GONE)
    assert dagster_runner().sync(Settings(config_path=config, home=root / "home")).ok
    return root


def copy_of(root: Path, tmp_path: Path) -> Settings:
    """A copy of the home under ``root`` (its sources in ``<copy>/sources``), free to change."""
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    return Settings(config_path=copy / "corpus.yaml", home=copy / "home")


@pytest.fixture
def settings(synced: Path, tmp_path: Path) -> Settings:
    return copy_of(synced, tmp_path)


class Deleted(NamedTuple):
    root: Path
    report: Any  # the SyncReport of the sync that saw the file gone
    sidecars: list[Path]  # the removed deal's sidecars before, relative to the root


@pytest.fixture(scope="module")
def deleted(synced: Path, tmp_path_factory: pytest.TempPathFactory) -> Deleted:
    """The synced home with g0001 promoted, then GONE's file removed and synced."""
    settings = copy_of(synced, tmp_path_factory.mktemp("deleted"))
    root = settings.config_path.parent
    assert dagster_runner().promote(settings, "deals", "g0001").success
    assert set(rows_of(Home(settings), GONE).values()) == {4}  # both generations hold its 4
    sidecars = sorted((settings.exports / "sidecars").glob("*/alpha-deals/deal-alpha-001.*"))
    assert len(sidecars) == 2
    source(settings, "alpha/deal-alpha-001.uw.md").unlink()
    report = dagster_runner().sync(settings)
    assert report.ok, report.failed_runs
    return Deleted(root, report, [p.relative_to(root) for p in sidecars])


def source(settings: Settings, name: str) -> Path:
    return settings.config_path.parent / "sources" / name


def rows_of(corpus: Home, source_id: str) -> dict[str, int]:
    return {
        g.id: corpus.store.count(g, f"source_id = '{source_id}'")
        for g in corpus.registry.generations()
    }


def test_removed_file_leaves_every_generation_and_store(deleted: Deleted, tmp_path: Path) -> None:
    settings = copy_of(deleted.root, tmp_path)
    corpus = Home(settings)
    assert deleted.report.collections["alpha-deals"]["removed"] == 1

    assert set(rows_of(corpus, GONE).values()) == {0}
    assert not any((settings.config_path.parent / p).exists() for p in deleted.sidecars)
    for asset in ("parsed_blocks", "embedding_inputs"):
        table = corpus.warehouse.read(asset, ("alpha-deals",))
        assert table is not None and GONE not in table["source_id"].to_pylist()
    hits = (
        Searcher(corpus)
        .search(
            "roofs boilers anchor tenant lease windstorm",
            principal=Principal("alpha", ("alpha-uw",)),
            k=50,
        )
        .hits
    )
    assert hits and GONE not in {h.source_id for h in hits}

    tomb = Registry(settings.registry_path).tombstone(GONE)
    assert tomb is not None and tomb["reason"] == "source file removed"
    assert (
        len(tomb["content_hashes"]) == 5 and len(tomb["input_hashes"]) == 4
    )  # 5 blocks, 4 embedded
    receipt = json.loads(Path(tomb["receipt"]).read_text())
    assert receipt["source_ids"] == [GONE]
    by_store: dict[str, int] = {}
    for a in receipt["artifacts"]:
        by_store[a["store"]] = by_store.get(a["store"], 0) + a.get("rows", a.get("files", 0))
        assert a["removed_at"] >= receipt["started_at"]
    lance_rows = [a for a in receipt["artifacts"] if a["store"] == "lance"]
    assert sorted(a["rows"] for a in lance_rows) == [4, 4]  # ACTIVE g0001 and READY g0002
    assert by_store["exports"] == 2 and by_store["warehouse"] >= 5 + 4

    # the audit finds what is left: old LanceDB versions, cache entries and the bytes of both,
    # and the doc_id and full-text indexes built before the deletion (they hold its id and
    # words); compaction clears it
    cli = CliRunner()
    args = ["--config", str(settings.config_path), "--home", str(settings.home)]
    out = cli.invoke(main, [*args, "audit-deletion", GONE, "--json"])
    audit = json.loads(out.output)
    assert out.exit_code == 1 and not audit["clean"]
    stores = {r["store"] for r in audit["remaining"]}
    assert stores == {"lance", "cache", "bytes", "lance index"}  # bytes: masked rows
    indexes = {(r["table"], r["index"]) for r in audit["remaining"] if r["store"] == "lance index"}
    tables = [g.table_name for g in corpus.registry.generations()]
    assert indexes == {(t, i) for t in tables for i in ("doc_id_idx", "text_idx")}
    assert all(not r["current"] for r in audit["remaining"] if r["store"] == "lance")
    # its fingerprints were keyed (the bytes found above were found with the key); a registry
    # holding another key (rebuilt from its journal) says it cannot look, finding nothing
    assert receipt["fingerprints"]["scheme"] == byte_audit.KEYED_SCHEME
    registry = Registry(settings.registry_path)
    with registry.connect() as con:
        kept = con.execute("SELECT * FROM home_keys").fetchall()
        con.execute("DELETE FROM home_keys")
    out = cli.invoke(main, [*args, "audit-deletion", GONE, "--json"])
    blind = json.loads(out.output)
    assert blind["byte_scan"]["status"].startswith("not done: its fingerprints were keyed with")
    assert "bytes" not in {r["store"] for r in blind["remaining"]}
    with registry.connect() as con:
        con.execute("DELETE FROM home_keys")
        con.executemany("INSERT INTO home_keys VALUES (?, ?, ?)", [list(r) for r in kept])
    out = cli.invoke(main, [*args, "compact", "--json"])
    assert out.exit_code == 0, out.output
    compaction = json.loads(out.output)
    # its property and market sections are its own, under two embedders; its other inputs have
    # identical text in live deals (the shared sponsor block, and beta-000 carries the same risk
    # flag)
    assert compaction["tombstones_purged"] == [GONE] and compaction["cache_entries_purged"] == 4
    out = cli.invoke(main, [*args, "audit-deletion", GONE])
    assert out.exit_code == 0, out.output
    assert "clean: nothing remains" in out.output
    # and the generations are whole: every row indexed, still searchable
    for g in corpus.registry.generations():
        cov = corpus.store.coverage(g)
        assert cov.rows == 20 and cov.fts_unindexed == 0


@pytest.mark.parametrize("asset", ["parsed_blocks", "source_manifest"])
def test_the_audit_names_a_damaged_warehouse_partition(
    deleted: Deleted, tmp_path: Path, asset: str
) -> None:
    """A partition file the audit cannot read (truncated) is named with what to do, exit 3,
    never a traceback: the audit cannot say what it holds."""
    settings = copy_of(deleted.root, tmp_path)
    path = Home(settings).warehouse.path(asset, "alpha-deals")
    path.write_bytes(path.read_bytes()[:100])
    args = ["--config", str(settings.config_path), "--home", str(settings.home)]
    out = CliRunner().invoke(main, [*args, "audit-deletion", GONE])
    assert out.exit_code == 3, out.output
    assert f"the warehouse partition of {asset} is damaged" in out.output
    assert "corpus doctor" in out.output


def test_a_source_that_comes_back_is_indexed_again(
    synced: Path, deleted: Deleted, tmp_path: Path
) -> None:
    settings = copy_of(deleted.root, tmp_path)
    text = (synced / "sources" / "alpha" / "deal-alpha-001.uw.md").read_text()
    source(settings, "alpha/deal-alpha-001.uw.md").write_text(text)
    report = dagster_runner().sync(settings)
    assert report.ok and report.embedded == 0  # vectors still in the cache until compaction
    corpus = Home(settings)
    assert set(rows_of(corpus, GONE).values()) == {4}
    assert corpus.registry.tombstone(GONE) is None


def test_tombstones_replay_into_a_generation_built_later(
    synced: Path, deleted: Deleted, tmp_path: Path
) -> None:
    """A generation built after the deletion from inputs that still mention the source (say a
    restored warehouse backup) never receives it."""
    backup = Settings(config_path=synced / "corpus.yaml", home=synced / "home").warehouse
    settings = copy_of(deleted.root, tmp_path)
    shutil.rmtree(settings.warehouse)
    shutil.copytree(backup, settings.warehouse)  # the stale inputs (from before it) are back
    config = yaml.safe_load(settings.config_path.read_text())
    config["profiles"]["late"] = {"embedder": "hash:v1-16", "namespace": "deals"}
    settings.config_path.write_text(yaml.safe_dump(config))
    corpus = Home(settings)
    for collection in ("alpha-deals", "beta-deals"):
        steps.embeddings.run(corpus, "late", collection)
        outcome = steps.index_rows.run(corpus, "late", collection, run_id="test")
        assert outcome.passed
    late = corpus.registry.live_generation("late")
    assert late is not None
    assert corpus.store.count(late, f"source_id = '{GONE}'") == 0
    assert corpus.store.count(late, "collection = 'alpha-deals'") == 8


def test_a_collection_removed_from_config_is_purged(settings: Settings) -> None:
    config = yaml.safe_load(settings.config_path.read_text())
    del config["collections"]["beta-deals"]
    settings.config_path.write_text(yaml.safe_dump(config))
    report = dagster_runner().sync(settings)
    assert report.ok, report.failed_runs
    assert report.purged_collections == ["beta-deals"]
    corpus = Home(settings)
    for g in corpus.registry.generations():
        assert corpus.store.count(g, "collection = 'beta-deals'") == 0
        assert corpus.store.count(g, "collection = 'alpha-deals'") == 12
    assert not list(settings.warehouse.rglob("beta-deals*"))
    assert not list((settings.exports / "sidecars").glob("*/beta-deals"))
    tombs = Registry(settings.registry_path).tombstones()
    assert sorted(t["source_id"] for t in tombs) == [
        f"beta-deals/deal-beta-{i:03d}" for i in range(3)
    ]
    assert {t["reason"] for t in tombs} == {"collection removed from config"}
    for g in corpus.registry.generations():
        assert pc.sum(pc.equal(corpus.store.table(g).to_arrow()["tenant_id"], "beta")).as_py() in (
            None,
            0,
        )


QUOTED = "Quarry blasting next door cracked the east garage slab; its variance lapses in March."


def searched_then_deleted(settings: Settings) -> TraceStore:
    """GONE edited to carry QUOTED and synced, searched for QUOTED and for other words, then
    removed and synced; the registry's traces."""
    source(settings, "alpha/deal-alpha-001.uw.md").write_text(
        deal_text("DEAL-ALPHA-001", tenant="alpha", acl=["alpha-uw"], risk=QUOTED),
        encoding="utf-8",
    )
    assert dagster_runner().sync(settings).ok
    traces = TraceStore(Registry(settings.registry_path))
    searcher = Searcher(Home(settings), traces=traces)
    alpha = Principal("alpha", ("alpha-uw",))
    for query in (QUOTED, "anchor tenant lease renewal"):
        searcher.search(query, principal=alpha, namespace="deals", generation="g0001", k=3)
    assert {t["query"] for t in traces.recent(10)} == {QUOTED, "anchor tenant lease renewal"}
    source(settings, "alpha/deal-alpha-001.uw.md").unlink()
    assert dagster_runner().sync(settings).ok
    return traces


def test_a_query_trace_quoting_a_deleted_source_goes_with_it(settings: Settings) -> None:
    """A search whose query quotes the source's words (pasted from it) leaves a trace in the
    registry; the deletion takes that trace out (the receipt says so), keeps the others, and the
    audit finds no trace holding its words (``corpus traces`` showed them after the deletion,
    and the audit named ``query_traces.query`` until 1000 later queries pushed it out)."""
    traces = searched_then_deleted(settings)
    assert [t["query"] for t in traces.recent(10)] == ["anchor tenant lease renewal"]
    tomb = Registry(settings.registry_path).tombstone(GONE)
    assert tomb is not None
    receipt = json.loads(Path(tomb["receipt"]).read_text())
    assert {"store": "registry", "location": "query_traces", "rows": 1} in [
        {k: a[k] for k in ("store", "location", "rows") if k in a} for a in receipt["artifacts"]
    ]
    args = ["--config", str(settings.config_path), "--home", str(settings.home)]
    out = CliRunner().invoke(main, [*args, "audit-deletion", GONE, "--json"])
    layers = [r.get("layer") for r in json.loads(out.output)["remaining"]]
    assert "duckdb query_traces.query" not in layers, layers


def test_a_deleted_trace_leaves_no_byte_in_the_home_after_compaction(
    settings: Settings,
) -> None:
    """The trace the deletion took out stayed in a block of ``registry.duckdb`` that DuckDB
    marks free (the audit named the file's raw bytes after compaction): the traces live in a
    file of their own, which the deletion writes anew, so no file of the home holds the quoted
    words, every other trace is kept, and the traces' numbering goes on."""
    traces = searched_then_deleted(settings)
    kept = traces.recent(10)
    assert [t["query"] for t in kept] == ["anchor tenant lease renewal"]
    args = ["--config", str(settings.config_path), "--home", str(settings.home)]
    compacted = CliRunner().invoke(main, [*args, "compact"])
    assert compacted.exit_code == 0, compacted.output
    out = CliRunner().invoke(main, [*args, "audit-deletion", GONE, "--json"])
    remaining = json.loads(out.output)["remaining"]
    assert [r for r in remaining if "duckdb" in str(r.get("path", ""))] == []
    assert out.exit_code == 0, remaining
    for path in settings.home.rglob("*"):
        assert not path.is_file() or QUOTED.encode() not in path.read_bytes(), path
    assert traces.recent(10) == kept
    next_seq = traces.record(query="later", tenant="alpha", groups=[], trace={}, hits=0)
    assert next_seq == max(t["seq"] for t in kept) + 1
