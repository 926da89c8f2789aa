"""Query traces (beside a DuckDB registry, or in PostgreSQL): recorded per search, newest kept,
a busy store tolerated, a forgotten trace's bytes gone, an older home's traces moved out of its
registry."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from corpus_index.cli import main
from corpus_index.config import Settings
from corpus_index.errors import RetryableError
from corpus_index.home import Home
from corpus_index.registry import Registry, open_registry
from corpus_index.search import Principal, Searcher
from corpus_index.traces import TRACE_DDL, TraceStore
from tests.corpusgen import write_home
from tests.registry_backends import Place
from tests.searchkit import active, build_home


def record(store: TraceStore, i: int, tenant: str = "alpha") -> int:
    return store.record(
        query=f"query {i}",
        tenant=tenant,
        groups=("g1", "g'2"),
        trace={"mode": "hybrid", "k": i, "total_ms": float(i), "namespace": "deals", "x": [i]},
        hits=i,
    )


def test_record_and_read_back(place: Place) -> None:
    store = place.traces()
    assert store.recent() == [] and store.count() == 0
    seqs = [record(store, i) for i in range(3)]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3
    newest = store.recent(2)
    assert [t["query"] for t in newest] == ["query 2", "query 1"]
    t = newest[0]
    assert t["groups"] == ["g1", "g'2"] and t["trace"]["x"] == [2] and t["k"] == 2
    assert t["mode"] == "hybrid" and t["hits"] == 2 and t["total_ms"] == 2.0
    assert t["kind"] == "search" and t["recorded_at"].startswith("20")
    # the registry's own tables are untouched and usable
    assert place.open().generations() == []


def test_only_the_newest_are_kept(place: Place) -> None:
    store = place.traces(keep=3)
    for i in range(7):
        record(store, i, tenant="beta" if i % 2 else "alpha")
    assert store.count() == 3
    assert [t["query"] for t in store.recent(10)] == ["query 6", "query 5", "query 4"]
    assert [t["query"] for t in store.recent(10, tenant="beta")] == ["query 5"]
    # a second store over the same file continues the sequence and the pruning
    other = place.traces(keep=3)
    record(other, 7)
    assert [t["query"] for t in other.recent(10)] == ["query 7", "query 6", "query 5"]


def test_keep_must_be_positive(place: Place) -> None:
    with pytest.raises(ValueError):
        place.traces(keep=0)


def test_default_keeps_one_thousand(place: Place) -> None:
    store = TraceStore(place.open())
    assert store.keep == 1000


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Home:
    root = tmp_path_factory.mktemp("traced")
    return build_home(Settings(config_path=write_home(root), home=root / "home"))


def test_every_search_stores_its_trace(corpus: Home) -> None:
    store = TraceStore(open_registry(corpus.settings))
    searcher = Searcher(corpus, traces=store)
    before = store.count()
    p = Principal("alpha", ("alpha-uw",))
    results = [
        searcher.search("roofs and boilers", principal=p, mode=m)
        for m in ("dense", "lexical", "hybrid")
    ]
    assert store.count() == before + 3
    stored = store.recent(3)
    assert [t["seq"] for t in stored] == [r.trace["trace_id"] for r in reversed(results)]
    for t, r in zip(stored, reversed(results), strict=True):
        assert t["query"] == "roofs and boilers" and t["tenant"] == "alpha"
        assert t["hits"] == len(r.hits) and t["mode"] == r.trace["mode"]
        for stage in ("embedding", "filter", "dense", "lexical", "fusion", "rerank"):
            assert t["trace"][f"{stage}_ms"] == r.trace[f"{stage}_ms"]
    # no store, no trace
    Searcher(corpus).search("roofs", principal=p)
    assert store.count() == before + 3


HOLD = """
import sys, time, duckdb
con = duckdb.connect(sys.argv[1])
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
"""


def test_busy_traces_do_not_fail_the_search(corpus: Home) -> None:
    """Another process holding the traces file (``traces.duckdb`` beside the registry) makes
    the trace fail, not the search."""
    store = TraceStore(open_registry(corpus.settings, lock_timeout_s=0.3))
    searcher = Searcher(corpus, traces=store)
    p = Principal("beta", ("beta-team",))
    gen = active(corpus).id
    searcher.search("lease", principal=p, generation=gen)  # caches the generation's record
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(corpus.settings.home / "traces.duckdb"), "20"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(RetryableError, match="registry is busy"):
            record(store, 1)
        started = time.monotonic()
        result = searcher.search("lease", principal=p, generation=gen)
        assert result.hits and "registry is busy" in result.trace["trace_error"]
        assert "trace_id" not in result.trace
        assert time.monotonic() - started < 10
    finally:
        holder.kill()
        holder.wait()
    assert searcher.search("lease", principal=p, generation=gen).trace["trace_id"] > 0


def test_cli_search_records_and_traces_lists(corpus: Home) -> None:
    base = ["--config", str(corpus.settings.config_path), "--home", str(corpus.settings.home)]
    runner = CliRunner()
    out = runner.invoke(
        main, [*base, "search", "boilers", "--tenant", "alpha", "--group", "alpha-uw", "--json"]
    )
    assert out.exit_code == 0, out.output
    trace_id = json.loads(out.stdout)["trace"]["trace_id"]
    listed = json.loads(runner.invoke(main, [*base, "traces", "--json", "--limit", "1"]).stdout)
    assert [t["seq"] for t in listed["traces"]] == [trace_id]
    quiet = runner.invoke(
        main,
        [
            *base,
            "search",
            "boilers",
            "--tenant",
            "alpha",
            "--group",
            "alpha-uw",
            "--json",
            "--no-trace",
        ],
    )
    assert "trace_id" not in json.loads(quiet.stdout)["trace"]
    human = runner.invoke(main, [*base, "traces", "--tenant", "alpha"])
    assert human.exit_code == 0 and "boilers" in human.output and "dense=" in human.output


SECRET = "Quarry blasting next door cracked the east garage slab; its variance lapses in March."


def test_a_forgotten_trace_leaves_no_byte_behind(place: Place) -> None:
    """``forget`` takes out the traces quoting what must go and keeps the others; beside a
    DuckDB registry the traces file is written anew, so the words are not in its bytes (DuckDB
    kept them in the block a DELETE freed), and the next trace continues the sequence."""
    store = place.traces()
    store.record(query=SECRET, tenant="alpha", groups=(), trace={}, hits=0)
    seqs = [record(store, i) for i in range(3)]
    kept = store.recent(3)
    store.record(query="newest", tenant="alpha", groups=(), trace={"note": SECRET}, hits=0)
    assert store.forget(lambda text: SECRET in text) == 2
    assert store.recent(10) == kept
    assert record(store, 9) == seqs[-1] + 2  # the forgotten newest's number is not handed out
    if place.backend == "postgres":
        return
    assert isinstance(place.location, Path)
    home = place.location.parent
    for path in home.iterdir():
        assert SECRET.encode() not in path.read_bytes(), path
    assert "traces.duckdb.rewrite.tmp" not in {p.name for p in home.iterdir()}


def test_an_older_homes_traces_move_out_of_its_registry(tmp_path: Path) -> None:
    """A home made before kept its traces in ``registry.duckdb``: the first use moves them into
    the traces file, numbers and all, and leaves none of their bytes in the registry."""
    path = tmp_path / "home" / "registry.duckdb"
    registry = Registry(path)
    key = registry.home_key("deletion-fingerprints")
    with registry.connect(TRACE_DDL) as con:
        for i, query in enumerate([SECRET, "query 1", "query 2"], start=1):
            con.execute(
                "INSERT INTO query_traces (seq, recorded_at, kind, tenant, groups, query, hits, "
                "trace) VALUES (nextval('query_trace_seq'), now(), 'search', 'alpha', '[]', ?, "
                "?, '{}')",
                [query, i],
            )
        con.execute("FORCE CHECKPOINT")
    assert SECRET.encode() in path.read_bytes()
    store = TraceStore(Registry(path))
    assert [t["query"] for t in store.recent(10)] == ["query 2", "query 1", SECRET]
    assert [t["seq"] for t in store.recent(10)] == [3, 2, 1]
    assert SECRET.encode() not in path.read_bytes()  # the registry's freed blocks overwritten
    with Registry(path).connect() as con:
        tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    assert "query_traces" not in tables and "generations" in tables
    assert Registry(path).home_key("deletion-fingerprints") == key
    assert store.forget(lambda text: SECRET in text) == 1
    assert SECRET.encode() not in (path.parent / "traces.duckdb").read_bytes()
    assert record(store, 4) == 4
    assert [t["seq"] for t in TraceStore(Registry(path)).recent(10)] == [4, 3, 2]


WRITER = """
import os
import sys
from corpus_index.registry import Registry
from corpus_index.traces import TraceStore
store = TraceStore(Registry(sys.argv[1], lock_timeout_s=30))
print("started", flush=True)
# at least argv[2] records, and on until the forgetting side has rewritten the file twice
# (argv[4] appears): on a loaded machine one forget can wait out 80 records, and then no
# rewrite overlapped them (at most 1,000: the test reads 1,000 back); prints how many it wrote
i = 0
while i < int(sys.argv[2]) or (not os.path.exists(sys.argv[4]) and i < 1000):
    query = f"{sys.argv[3]} {i}" if i % 10 == 0 else f"written {i}"
    store.record(query=query, tenant="alpha", groups=(), trace={}, hits=0)
    if i % 10:
        assert store.recent(1)[0]["query"] == query, store.recent(1)
    i += 1
print(i, flush=True)
"""


def test_traces_written_and_read_meanwhile_survive_forgetting(tmp_path: Path) -> None:
    """A process recording and reading traces while another forgets those quoting SECRET (each
    forget writes the traces file anew and renames it over the old) never reads a partial
    file and loses no other trace; no byte of a forgotten one stays in any file of the home."""
    path = tmp_path / "home" / "registry.duckdb"
    store = TraceStore(Registry(path, lock_timeout_s=30))
    record(store, 0)
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), "80", SECRET, str(tmp_path / "forgot-twice")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert writer.stdout is not None and writer.stdout.readline().strip() == "started"
    rewrites = 0
    while writer.poll() is None:
        store.forget(lambda text: SECRET in text)
        rewrites += 1
        if rewrites == 2:
            (tmp_path / "forgot-twice").touch()
        time.sleep(0.02)
    out, err = writer.communicate(timeout=60)
    assert writer.returncode == 0, err
    assert rewrites >= 2
    store.forget(lambda text: SECRET in text)
    traces = store.recent(1000)
    written = [f"written {i}" for i in range(int(out.split()[-1])) if i % 10]
    assert sorted(t["query"] for t in traces) == sorted(["query 0", *written])
    assert len({t["seq"] for t in traces}) == len(traces)
    for held in path.parent.iterdir():
        assert SECRET.encode() not in held.read_bytes(), held
