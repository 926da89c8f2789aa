"""Cost proportional to the change, writes before deletes, and a kill -9 that loses nothing.

Every test starts from the same home, synced once for the module through one local
OpenAI-protocol server; each gets its own copy to change. The refusal tests copy that home
after one more sync, in which the server refused one deal's input.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml

from corpus_index import gates, steps
from corpus_index.api import CorpusIndex
from corpus_index.config import Settings
from corpus_index.deletion import audit_deletion
from corpus_index.embedders.hashing import HashEmbedder
from corpus_index.errors import RetryableError
from corpus_index.home import Home
from corpus_index.refusals import read_refusals
from corpus_index.search import Principal, Searcher
from definitions import dagster_runner
from tests.corpusgen import deal_text, write_home
from tests.support.openai_server import FakeOpenAIServer, serve

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
DEAL = Path("sources") / "beta" / "deal-beta-001.uw.md"
QUERY = ("beta", ("beta-team",), "rents market growth jobs")


def served_home(root: Path, server: FakeOpenAIServer) -> Settings:
    """The generated home with one profile embedding through the local OpenAI-protocol server."""
    config_path = write_home(root)
    config = yaml.safe_load(config_path.read_text())
    config["profiles"] = {
        "remote": {
            "embedder": "openai:text-embedding-3-small",
            "dimensions": 64,
            "base_url": server.base_url,
            "namespace": "deals",
            "batch_size": 16,
        }
    }
    config_path.write_text(yaml.safe_dump(config))
    return Settings(config_path=config_path, home=root / "home")


def corpus_cli(settings: Settings, *args: str) -> list[str]:
    """The command line of ``corpus ARGS`` on the home of ``settings``."""
    config, home = str(settings.config_path), str(settings.home)
    return [sys.executable, "-m", "corpus_index.cli", "--config", config, "--home", home, *args]


def inputs_sent(server: FakeOpenAIServer, since: int = 0) -> int:
    return sum(len(r["input"]) for r in server.requests[since:])


def answers(settings: Settings) -> list[dict[str, Any]]:
    tenant, groups, text = QUERY
    return [
        h.to_json()
        for h in Searcher(Home(settings))
        .search(text, principal=Principal(tenant, groups), k=10, mode="dense")
        .hits
    ]


@pytest.fixture(scope="module")
def server() -> Iterator[FakeOpenAIServer]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_API_KEY", "test-key")
        model = HashEmbedder(64)
        with serve(embed=lambda texts, dim: model.embed(list(texts))) as srv:
            yield srv


class Synced(NamedTuple):
    root: Path  # sources, corpus.yaml and home
    inputs_sent: int  # what its first sync sent to the server


@pytest.fixture(scope="module")
def synced(tmp_path_factory: pytest.TempPathFactory, server: FakeOpenAIServer) -> Synced:
    """The served home after its first sync."""
    root = tmp_path_factory.mktemp("synced")
    mark = len(server.requests)
    assert dagster_runner().sync(served_home(root, server)).ok
    return Synced(root, inputs_sent(server, mark))


def copy_of(root: Path, server: FakeOpenAIServer, to: Path) -> Settings:
    """A copy of the home at ``root``, free to change (the server's script and refusals
    emptied)."""
    server.script.clear()
    server.refuse.clear()
    shutil.copytree(root, to)
    return Settings(config_path=to / "corpus.yaml", home=to / "home")


@pytest.fixture
def settings(synced: Synced, server: FakeOpenAIServer, tmp_path: Path) -> Settings:
    """A copy of the synced home, free to change."""
    return copy_of(synced.root, server, tmp_path / "copy")


def test_one_changed_block_embeds_one_input_and_rewrites_one_row(
    settings: Settings, synced: Synced, server: FakeOpenAIServer
) -> None:
    corpus = Home(settings)
    distinct = set()
    for collection in ("alpha-deals", "beta-deals"):
        table = corpus.warehouse.read("embedding_inputs", (collection,))
        assert table is not None
        distinct |= set(table["input_hash"].to_pylist())
    gen = corpus.registry.live_generation("remote")
    assert gen is not None
    # every distinct input embedded once across collections (identical text is shared), and
    # the few cache hits vectors_share_one_backend_spec embeds again to check the cache
    again = sum(
        int(check.get("cache_hits_embedded_again", 0))
        for name, check in gen.checks.items()
        if "vectors_share_one_backend_spec" in name
    )
    assert 0 < again <= 4 * 2  # CACHE_HITS_AGAIN per collection at most
    assert synced.inputs_sent == len(distinct) + again and len(distinct) < 24
    table = corpus.store.table(gen)
    version_before = table.version

    deal = settings.config_path.parent / DEAL
    deal.write_text(deal.read_text().replace("Rents grew four", "Rents grew eleven"))
    mark = len(server.requests)
    report = dagster_runner().sync(settings)
    assert report.ok
    assert inputs_sent(server, mark) == 1 and len(server.requests) - mark == 1
    assert report.embedded == 1
    beta = report.collections["beta-deals"]
    assert (beta["changed"], beta["added"], beta["removed"]) == (1, 0, 0)
    assert report.collections["alpha-deals"]["changed"] == 0

    # write before delete: every version between the two states holds the whole collection,
    # and the replacement is one commit (new row in, old row out, together)
    table = corpus.store.table(gen)
    versions = [v["version"] for v in table.list_versions() if v["version"] > version_before]
    assert versions
    for v in versions:
        at = corpus.store.table(gen)
        at.checkout(v)
        assert at.count_rows("collection = 'beta-deals'") >= 12, f"version {v} lost rows"
    old_row = "source_id = 'beta-deals/deal-beta-001' AND text LIKE '%Rents grew four%'"

    def at(version: int, where: str) -> int:
        t = corpus.store.table(gen)
        t.checkout(version)
        return int(t.count_rows(where))

    commit = next(v for v in versions if at(v, "text LIKE '%Rents grew eleven%'") == 1)
    assert at(commit - 1, old_row) == 1 and at(commit - 1, "text LIKE '%eleven%'") == 0
    assert at(commit, old_row) == 0  # the old row left in the same commit the new one arrived


def _kill_mid_sync(
    settings: Settings, server: FakeOpenAIServer, *, hold_s: float, after_s: float
) -> None:
    """Start `corpus sync` in a subprocess, and SIGKILL it ``after_s`` seconds after its first
    embedding request reached the server (which holds that request ``hold_s`` seconds)."""
    server.script.append({"sleep": hold_s})
    mark = len(server.requests)
    env = {**os.environ, "OPENAI_API_KEY": "test-key", "LANCE_LOG": "error"}
    proc = subprocess.Popen(  # noqa: S603 - our own CLI, fixed arguments
        corpus_cli(settings, "sync"),
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 180
        while len(server.requests) == mark:
            assert proc.poll() is None, "sync ended before it embedded anything"
            assert time.monotonic() < deadline, "sync never reached the embedder"
            time.sleep(0.05)
        time.sleep(after_s)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.parametrize(
    ("hold_s", "after_s"),
    [(30.0, 0.5), (0.2, 1.5)],
    ids=["while-embedding", "after-embedding"],
)
def test_kill_9_mid_sync_keeps_serving_and_the_next_run_converges(
    settings: Settings, server: FakeOpenAIServer, hold_s: float, after_s: float
) -> None:
    assert dagster_runner().promote(settings, "deals", "").success
    before = answers(settings)
    assert before

    deal = settings.config_path.parent / DEAL
    deal.write_text(deal.read_text().replace("Rents grew four", "Rents grew eleven"))
    _kill_mid_sync(settings, server, hold_s=hold_s, after_s=after_s)

    # the previous state (or, if the kill came after the commit, the new one) still serves,
    # whole: never a mix of the edited deal's two versions, never a row twice
    after_kill = answers(settings)
    texts = {h["excerpt"] for h in after_kill}
    refs = [h["provenance"]["chunk_ref"] for h in after_kill]
    assert len(refs) == len(set(refs))
    edited = {r.split("/")[4] for r in refs if "/deal-beta-001/" in r}
    assert len(edited) == 1, edited
    if not any("eleven" in t for t in texts):
        assert after_kill == before

    server.script.clear()
    report = dagster_runner().sync(settings)
    assert report.ok, report.failed_runs
    corpus = Home(settings)
    gen = corpus.registry.active("deals")
    assert gen is not None and gen.status == "ACTIVE"
    # every check passed, but the eval gate: no golden set here, so it did not run
    assert (
        {n for n, c in gen.checks.items() if not c["passed"]}
        == {n for n, c in gen.checks.items() if gates.not_run(c)}
        == {"index_generation:retrieval_not_worse_than_active"}
    )
    assert corpus.store.count(gen, "text LIKE '%Rents grew eleven%'") == 1
    assert corpus.store.count(gen) == 24


def test_narrowing_a_collections_acl_in_the_config_reaches_the_index(
    settings: Settings, server: FakeOpenAIServer
) -> None:
    assert dagster_runner().promote(settings, "deals", "").success

    def sources(group: str) -> set[str]:
        found = Searcher(Home(settings)).search(
            "rents market growth jobs", principal=Principal("alpha", (group,)), k=20, mode="dense"
        )
        return {h.source_id for h in found.hits}

    every = {f"alpha-deals/deal-alpha-{i:03d}" for i in range(3)}
    assert sources("alpha-credit") == sources("alpha-uw") == every
    # alpha-credit taken off the collection in the config; one deal narrowed to fit the new
    # scope, the others still naming the group taken away (they would widen it)
    config = yaml.safe_load(settings.config_path.read_text())
    config["collections"]["alpha-deals"]["acl_groups"] = ["alpha-uw"]
    settings.config_path.write_text(yaml.safe_dump(config))
    deal = settings.config_path.parent / "sources" / "alpha" / "deal-alpha-000.uw.md"
    deal.write_text(deal.read_text().replace("- alpha-credit\n", ""))
    mark = len(server.requests)
    report = dagster_runner().sync(settings)
    assert report.ok, report.failed_runs
    # the texts are as they were: nothing embedded again, every row rewritten all the same
    assert inputs_sent(server, mark) == 0
    assert sources("alpha-credit") == set()
    assert sources("alpha-uw") == {"alpha-deals/deal-alpha-000"}
    quarantined = Home(settings).read("quarantine", ("alpha-deals",))
    assert sorted(quarantined["doc_id"].to_pylist()) == ["deal-alpha-001", "deal-alpha-002"]


REFUSAL = "This model's maximum context length is 8192 tokens, however you requested 9120 tokens"


def test_an_input_the_server_refuses_holds_back_its_document_and_the_rest_goes_through(
    settings: Settings, server: FakeOpenAIServer
) -> None:
    assert dagster_runner().promote(settings, "deals", "").success
    root = settings.config_path.parent
    beta = root / "sources" / "beta"
    held, other = root / DEAL, beta / "deal-beta-000.uw.md"
    held.write_text(held.read_text().replace("Rents grew four", "Rents grew OVERLONG"))
    other.write_text(other.read_text().replace("Rents grew four", "Rents grew twelve"))
    (beta / "deal-beta-009.uw.md").write_text(
        deal_text(
            "DEAL-BETA-009",
            tenant="beta",
            acl=["beta-team"],
            market="Rents grew OVERLONG again on steady job growth.",
        )
    )
    server.refuse["OVERLONG"] = REFUSAL
    report = dagster_runner().sync(settings)

    assert report.ok, report.failed_runs
    assert report.refused_inputs == 2
    assert report.collections["beta-deals"]["profiles"]["remote"]["refused_inputs"] == 2
    by_source = {r["source_id"]: r for r in report.refused}
    assert set(by_source) == {"beta-deals/deal-beta-001", "beta-deals/deal-beta-009"}
    row = by_source["beta-deals/deal-beta-001"]
    assert row["profile"] == "remote" and row["path"] == str(held)
    assert row["error"].startswith(f"{held}: block 'market_analysis/0': the embedder refused")
    assert "answered HTTP 400: " + REFUSAL in row["error"]
    assert "test-key" not in json.dumps(report.to_json())
    corpus = Home(settings)
    gen = corpus.registry.live_generation("remote")
    assert gen is not None
    assert gen.checks["index_generation:row_counts_reconcile"]["passed"]
    assert gen.checks["embeddings:vectors_match_their_inputs[beta-deals]"]["passed"]
    # the other edit is indexed and found; the held deal serves its last good version whole;
    # the new deal waits for its inputs to be embedded
    hits = Searcher(corpus).search(
        "Rents grew twelve", principal=Principal("beta", ("beta-team",)), k=3, mode="dense"
    )
    assert hits.hits[0].source_id == "beta-deals/deal-beta-000"
    assert "twelve" in hits.hits[0].to_json()["excerpt"]
    assert corpus.store.count(gen, "text LIKE '%OVERLONG%'") == 0
    assert corpus.store.count(gen, "source_id = 'beta-deals/deal-beta-001'") == 4
    assert (
        corpus.store.count(
            gen, "source_id = 'beta-deals/deal-beta-001' AND text LIKE '%Rents grew four%'"
        )
        == 1
    )
    assert corpus.store.count(gen, "source_id = 'beta-deals/deal-beta-009'") == 0
    recorded = corpus.warehouse.read("embedding_refusals", ("remote", "beta-deals"))
    assert recorded is not None and recorded["doc_id"].to_pylist() == [
        "deal-beta-001",
        "deal-beta-009",
    ]

    # a sync asked to retry them sends them again; once the server takes them, the held
    # deal's new version and the new deal are indexed
    server.refuse.clear()
    report = dagster_runner().sync(settings, retry_refused=True)
    assert report.ok, report.failed_runs
    assert report.refused_inputs == 0 and report.refused == []
    memo = Home(settings).refusal_memo(gen.spec)
    assert memo.exists() and memo.lookup(recorded["input_hash"].to_pylist()) == {}
    gen = Home(settings).registry.live_generation("remote")
    assert gen is not None
    assert corpus.store.count(gen, "text LIKE '%OVERLONG%'") == 2
    assert corpus.store.count(gen, "source_id = 'beta-deals/deal-beta-009'") == 4


def refuse_held_deal(settings: Settings, server: FakeOpenAIServer) -> Path:
    """The deal whose market analysis the server refuses from now on (its path)."""
    held = settings.config_path.parent / DEAL
    held.write_text(held.read_text().replace("Rents grew four", "Rents grew OVERLONG"))
    server.refuse["OVERLONG"] = REFUSAL
    return held


@pytest.fixture(scope="module")
def refused_once(
    synced: Synced, server: FakeOpenAIServer, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The synced home after a sync in which the server refused the held deal's market
    analysis (its root): the refusal is remembered."""
    settings = copy_of(synced.root, server, tmp_path_factory.mktemp("refused") / "home")
    refuse_held_deal(settings, server)
    first = dagster_runner().sync(settings)
    assert first.ok and first.refused_inputs == 1, first.failed_runs
    return settings.config_path.parent


@pytest.fixture
def refused(refused_once: Path, server: FakeOpenAIServer, tmp_path: Path) -> Settings:
    """A copy of the home whose held deal was refused once; the server refuses it still."""
    settings = copy_of(refused_once, server, tmp_path / "copy")
    server.refuse["OVERLONG"] = REFUSAL
    return settings


def asked(server: FakeOpenAIServer, since: int, word: str) -> bool:
    """Whether an input holding ``word`` was sent to the server since request ``since``."""
    return any(word in t for r in server.requests[since:] for t in r["input"])


def test_a_refused_input_is_not_asked_again_until_it_changes(
    refused: Settings, server: FakeOpenAIServer
) -> None:
    settings, held = refused, refused.config_path.parent / DEAL
    mark = len(server.requests)
    again = dagster_runner().sync(settings)
    assert again.ok, again.failed_runs
    assert not asked(server, mark, "OVERLONG")
    # still held, and still named REFUSED, with the server's first answer
    assert again.refused_inputs == 1
    (row,) = again.refused
    assert row["source_id"] == "beta-deals/deal-beta-001" and REFUSAL in row["error"]

    # the input changed: asked again, and taken
    held.write_text(held.read_text().replace("Rents grew OVERLONG", "Rents grew OVERLONGER"))
    server.refuse.clear()
    mark = len(server.requests)
    taken = dagster_runner().sync(settings)
    assert taken.ok and taken.refused_inputs == 0, taken.failed_runs
    assert asked(server, mark, "OVERLONGER")


def test_a_sync_that_retries_refused_inputs_asks_again_and_one_refused_again_stays_held(
    refused: Settings, server: FakeOpenAIServer
) -> None:
    settings = refused
    mark = len(server.requests)
    report = dagster_runner().sync(settings, retry_refused=True)
    assert report.ok and report.refused_inputs == 1, report.failed_runs
    assert asked(server, mark, "OVERLONG")
    # remembered still: the next plain sync asks nothing of it
    mark = len(server.requests)
    assert dagster_runner().sync(settings).refused_inputs == 1
    assert not asked(server, mark, "OVERLONG")

    # through the CLI: taken once the server takes it, and the deal's new text is indexed
    server.refuse.clear()
    env = {**os.environ, "OPENAI_API_KEY": "test-key", "LANCE_LOG": "error"}
    done = subprocess.run(  # noqa: S603 - our own CLI, fixed arguments
        corpus_cli(settings, "sync", "--retry-refused", "--json"),
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["refused_inputs"] == 0
    assert_live_once(settings, "OVERLONG")


def assert_live_once(settings: Settings, word: str) -> None:
    """The live generation of the remote profile holds one row whose text has ``word``."""
    gen = Home(settings).registry.live_generation("remote")
    assert gen is not None
    assert Home(settings).store.count(gen, f"text LIKE '%{word}%'") == 1


def test_the_library_sync_retries_refused_inputs_when_asked(
    refused: Settings, server: FakeOpenAIServer
) -> None:
    settings = refused
    tenant, groups, _ = QUERY
    index = CorpusIndex(settings, principal=Principal(tenant, groups), runner=dagster_runner())
    mark = len(server.requests)
    assert index.sync().to_json()["refused_inputs"] == 1
    assert not asked(server, mark, "OVERLONG")

    server.refuse.clear()
    mark = len(server.requests)
    report = index.sync(retry_refused=True)
    assert report.ok and report.to_json()["refused_inputs"] == 0
    assert asked(server, mark, "OVERLONG")
    assert_live_once(settings, "OVERLONG")


def test_deleting_a_source_forgets_its_refused_inputs_at_compaction(
    refused: Settings, server: FakeOpenAIServer
) -> None:
    settings, held = refused, refused.config_path.parent / DEAL
    text = held.read_text()
    gen = Home(settings).registry.live_generation("remote")
    assert gen is not None
    memo = Home(settings).refusal_memo(gen.spec)

    held.unlink()
    assert dagster_runner().sync(settings).ok
    # deleted, the memo's entry is named by the audit until the compaction purges it
    source = "beta-deals/deal-beta-001"
    remaining = audit_deletion(Home(settings), source)["remaining"]
    assert any(r.get("table") == memo.table_name and r["current"] for r in remaining), remaining
    outcome, _ = dagster_runner().compact(settings, 0)
    assert outcome.success, outcome.error
    remaining = audit_deletion(Home(settings), source)["remaining"]
    assert not any(r.get("table") == memo.table_name for r in remaining), remaining

    # the same text added again is asked for again: nothing of the deleted source was kept
    held.write_text(text)
    mark = len(server.requests)
    assert dagster_runner().sync(settings).refused_inputs == 1
    assert asked(server, mark, "OVERLONG")


def test_a_server_error_still_fails_the_embeddings_step_and_is_never_split(
    settings: Settings, server: FakeOpenAIServer
) -> None:
    deal = settings.config_path.parent / DEAL
    deal.write_text(deal.read_text().replace("Rents grew four", "Rents grew nine"))
    corpus = Home(settings)
    for step in (steps.source_manifest, steps.parsed_blocks, steps.embedding_inputs):
        step.run(corpus, "beta-deals")
    before = corpus.warehouse.read("embeddings", ("remote", "beta-deals"))
    mark = len(server.requests)
    server.script.extend([{"status": 500, "retry_after": 0}] * 6)  # every attempt
    with pytest.raises(RetryableError, match="gave up after 6 attempts.*HTTP 500"):
        steps.embeddings.run(corpus, "remote", "beta-deals")
    assert [len(r["input"]) for r in server.requests[mark:]] == [1] * 6
    assert corpus.warehouse.read("embeddings", ("remote", "beta-deals")).equals(before)  # type: ignore[union-attr]
    assert read_refusals(corpus.warehouse, "remote", "beta-deals").num_rows == 0
