"""Query traces in the registry (DuckDB and PostgreSQL): recorded per search, newest kept, a busy
registry tolerated."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from corpus_index.cli import main
from corpus_index.config import Settings
from corpus_index.errors import RetryableError
from corpus_index.home import Home
from corpus_index.registry import open_registry
from corpus_index.search import Principal, Searcher
from corpus_index.traces import TraceStore
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


def test_a_busy_registry_does_not_fail_the_search(corpus: Home) -> None:
    store = TraceStore(open_registry(corpus.settings, lock_timeout_s=0.3))
    searcher = Searcher(corpus, traces=store)
    p = Principal("beta", ("beta-team",))
    gen = active(corpus).id
    searcher.search("lease", principal=p, generation=gen)  # caches the generation's record
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(corpus.settings.registry_path), "20"],
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
