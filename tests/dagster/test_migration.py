"""A full embedding-model migration through the real jobs (DESIGN §7).

Generation A (profile ``main``, the hash embedder at 8 dimensions: crude) serves; profile
``remote`` is added: an OpenAI-compatible endpoint on localhost backed by the hash embedder at
256 dimensions (a better model behind the same protocol a hosted one speaks). Its first backfill
gets a NaN vector, the gate blocks promotion and names the check; the next sync heals it; B is
promoted, serves, is rolled back in one step to A's exact results, and retirement refuses the
generations that still serve or are the rollback target.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from corpus_index import steps
from corpus_index.cli import main
from corpus_index.config import Settings
from corpus_index.embedders.hashing import HashEmbedder
from corpus_index.errors import (
    DimensionProbeError,
    EmbedderError,
    PromotionRefusedError,
    RetryableError,
)
from corpus_index.home import Home
from corpus_index.lifecycle import promote
from corpus_index.registry import Registry
from corpus_index.search import Principal, Searcher
from definitions import dagster_runner
from tests.corpusgen import RISKS, write_home
from tests.dagster.harness import Graph
from tests.support.openai_server import FakeOpenAIServer, serve

QUERIES = [
    ("alpha", ("alpha-uw",), "roofs and boilers past their useful life need replacement"),
    ("alpha", ("alpha-uw",), "anchor tenant lease expires and renewal has not started"),
    ("beta", ("beta-team",), "windstorm insurance premiums doubled along the coast"),
    ("beta", ("beta-team",), "sponsor never operated an asset of this size"),
]

pytestmark = pytest.mark.slow


def golden_set(root: Path) -> Path:
    """Each risk, paraphrased, is relevant to the risk section of the deals that carry it."""
    deals = {"alpha": [0, 1, 2], "beta": [1, 2, 3]}  # write_home: risk index (i + tenant) % 4
    groups = {"alpha": ["alpha-uw"], "beta": ["beta-team"]}
    queries = []
    for tenant, risks in deals.items():
        for i, risk in enumerate(risks):
            queries.append(
                {
                    "id": f"{tenant}-{i}",
                    "tenant": tenant,
                    "groups": groups[tenant],
                    "text": RISKS[risk].lower().rstrip("."),
                    "relevant": [
                        {
                            "source_id": f"{tenant}-deals/deal-{tenant}-{i:03d}",
                            "section": "risk_assessment",
                            "grade": 2,
                        }
                    ],
                }
            )
    path = root / "golden.yaml"
    path.write_text(yaml.safe_dump({"queries": queries}), encoding="utf-8")
    return path


def configure(
    config_path: Path, *, remote: dict[str, Any] | None, golden: bool = True, **namespace: Any
) -> None:
    config = yaml.safe_load(config_path.read_text())
    config["namespaces"]["deals"] = {
        **({"golden_set": "golden.yaml"} if golden else {}),
        **namespace,
    }
    if remote is not None:
        config["profiles"]["remote"] = remote
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))


def answers(settings: Settings) -> list[list[dict[str, Any]]]:
    """Every query's hits as JSON (scores, ids, provenance), from the ACTIVE generation."""
    searcher = Searcher(Home(settings))
    return [
        [h.to_json() for h in searcher.search(q, principal=Principal(t, g), k=5).hits]
        for t, g, q in QUERIES
    ]


def served_by(settings: Settings) -> set[str]:
    searcher = Searcher(Home(settings))
    return {
        h.provenance.generation
        for t, g, q in QUERIES
        for h in searcher.search(q, principal=Principal(t, g), k=5).hits
    }


def test_migration_gate_promote_rollback_retire(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_path = write_home(tmp_path, embedder="hash:v1-8")
    golden_set(tmp_path)
    configure(config_path, remote=None, retire_after_hours=0)
    settings = Settings(config_path=config_path, home=tmp_path / "home")
    registry = Registry(settings.registry_path)
    cli = CliRunner()
    args = ["--config", str(config_path), "--home", str(settings.home)]

    # generation A serves
    assert dagster_runner().sync(settings).ok
    assert dagster_runner().promote(settings, "deals", "").success
    a = registry.active("deals")
    assert a is not None and a.spec.backend_spec == "hash:v1-8"
    assert a.eval["golden"]["queries"] == 6

    # profile B appears: a new partition column once the code location reloads
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    hashed = HashEmbedder(256)
    with serve(embed=lambda texts, dim: hashed.embed(list(texts))) as server:
        remote = {
            "embedder": "openai:text-embedding-3-small",
            "dimensions": 256,
            "base_url": server.base_url,
            "namespace": "deals",
            "price_per_million_tokens": 0.02,
        }
        configure(config_path, remote=remote, retire_after_hours=0)
        from definitions import build_definitions

        profiles = build_definitions(settings).resolve_assets_def("index_generation").partitions_def
        assert profiles is not None and set(profiles.get_partition_keys()) == {"main", "remote"}

        # the plan before the backfill: every input is new, tokens counted, priced
        out = cli.invoke(main, [*args, "plan-migration", "remote", "--json"])
        assert out.exit_code == 0, out.output
        plan = json.loads(out.output)
        assert sum(c["inputs"] for c in plan["collections"]) == 24  # 6 deals x 4 sections
        assert plan["cache_hits"] == 0 and plan["to_embed"] == plan["inputs"] > 0
        assert plan["tokens_to_embed"] > 0 and plan["existing_generation"] is None
        assert plan["cost_usd"] == pytest.approx(plan["tokens_to_embed"] * 0.02 / 1e6)
        assert not server.requests, "planning embeds nothing"

        # the backfill meets a NaN vector: the gate blocks, A keeps serving
        server.script.append({"nan": True})
        report = dagster_runner().sync(settings)
        assert not report.ok
        failed = [f for f in report.failed_runs if f["job"] == "embed_job"]
        assert failed and "embeddings:vectors_are_finite" in failed[0]["failed_checks"]
        b = next(g for g in registry.generations() if g.spec.profile == "remote")
        assert b.status == "BUILDING"
        bad_collection = failed[0]["partition"].split("/")[1]
        with pytest.raises(PromotionRefusedError) as refused:
            promote(Home(settings), "deals", b.id)
        assert f"embeddings:vectors_are_finite[{bad_collection}]" in str(refused.value)
        outcome = dagster_runner().promote(settings, "deals", b.id)
        assert not outcome.success and "vectors_are_finite" in outcome.error
        assert served_by(settings) == {a.id}

        # sources keep changing during the migration: both generations receive the edit
        deal = tmp_path / "sources" / "alpha" / "deal-alpha-000.uw.md"
        deal.write_text(deal.read_text().replace("Rents grew four", "Rents grew nine"))
        # fixed (the script is spent): the next sync heals B
        report = dagster_runner().sync(settings)
        assert report.ok, report.failed_runs
        b = registry.require(b.id)
        assert b.status == "READY", b.checks
        assert all(c["passed"] for c in b.checks.values())
        assert b.eval["golden"]["ndcg@10"] >= a.eval["golden"]["ndcg@10"] - 0.02
        store = Home(settings).store
        for gen in (registry.require(a.id), b):
            rows = store.table(gen).search().where("text LIKE '%Rents grew nine%'").to_list()
            assert len(rows) == 1, f"{gen.id} did not receive the edit"

        a_answers = answers(settings)
        out = cli.invoke(main, [*args, "retire", a.id])
        assert out.exit_code != 0 and "ACTIVE" in out.output

        # promote B: the searches come from B, embedded through the endpoint
        assert dagster_runner().promote(settings, "deals", b.id).success
        assert served_by(settings) == {b.id}
        hit = answers(settings)[0][0]
        assert hit["provenance"]["backend_spec"] == "openai:text-embedding-3-small@256"

        out = cli.invoke(main, [*args, "retire", a.id])
        assert out.exit_code != 0 and "rollback target" in out.output

        # one-step rollback: A's exact answers, nothing embedded but the queries
        requests_before = len(server.requests)
        out = cli.invoke(main, [*args, "rollback", "--namespace", "deals"])
        assert out.exit_code == 0, out.output
        assert answers(settings) == a_answers
        assert len(server.requests) == requests_before

        out = cli.invoke(main, [*args, "retire", b.id])
        assert out.exit_code != 0 and "rollback target" in out.output

        # both generations listed with status, counts, eval metrics and check outcomes
        out = cli.invoke(main, [*args, "generations", "--json"])
        gens = {g["id"]: g for g in json.loads(out.output)["generations"]}
        assert gens[a.id]["status"] == "ACTIVE" and gens[b.id]["status"] == "READY"
        for g in gens.values():
            assert g["row_count"] == 24
            assert {"recall@5", "mrr@10", "ndcg@10"} <= set(g["eval"]["golden"])
            assert "index_rows:index_rows_pass_expectation_suite[alpha-deals]" in g["checks"]
            assert "index_generation:retrieval_not_worse_than_active" in g["checks"]
        assert (settings.reports / "eval-deals.png").stat().st_size > 1000


def test_worse_retrieval_blocks_promotion(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A candidate whose golden-set metrics fall below the ACTIVE one's is refused by name."""
    config_path = write_home(tmp_path, embedder="hash:v1-256")
    golden_set(tmp_path)
    # The golden queries repeat their sections' words, so the default hybrid's z-score fusion
    # lets BM25 carry them whatever the dense side says, and a model that knows nothing is not
    # worse there. Rank fusion without feedback (declared for the namespace, as a user would)
    # gives the dense list an equal say, so the random model's rankings do get worse.
    retrieval = {"fusion": "rrf", "feedback_docs": 0}
    configure(config_path, remote=None, retrieval=retrieval)
    settings = Settings(config_path=config_path, home=tmp_path / "home")
    assert dagster_runner().sync(settings).ok
    assert dagster_runner().promote(settings, "deals", "").success
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    with serve() as server:  # random unit vectors per text: a model that knows nothing
        remote = {
            "embedder": "openai:text-embedding-3-small",
            "dimensions": 64,
            "base_url": server.base_url,
            "namespace": "deals",
        }
        configure(config_path, remote=remote, retrieval=retrieval)
        report = dagster_runner().sync(settings)
        failed = [f for f in report.failed_runs if f["job"] == "generation_job"]
        assert failed and failed[0]["failed_checks"] == [
            "index_generation:retrieval_not_worse_than_active"
        ]
        registry = Registry(settings.registry_path)
        b = next(g for g in registry.generations() if g.spec.profile == "remote")
        assert b.status == "READY"  # built and sound; only its retrieval is worse
        outcome = dagster_runner().promote(settings, "deals", b.id)
        assert not outcome.success
        assert "index_generation:retrieval_not_worse_than_active" in outcome.error
        assert registry.active("deals").spec.profile == "main"  # type: ignore[union-attr]


def test_retire_after_window_drops_the_table(tmp_path: Path) -> None:
    """A generation that never served, past its window, is retired through the job and its
    table dropped; inside the window it is refused."""
    config_path = write_home(
        tmp_path, extra_profiles={"wide": {"embedder": "hash:v1-16", "namespace": "deals"}}
    )
    settings = Settings(config_path=config_path, home=tmp_path / "home")
    assert dagster_runner().sync(settings).ok
    registry = Registry(settings.registry_path)
    wide = next(g for g in registry.generations() if g.spec.profile == "wide")
    assert dagster_runner().promote(settings, "deals", registry.generations()[0].id).success

    configure(config_path, remote=None, golden=False, retire_after_hours=1)
    outcome = dagster_runner().retire(settings, wide.id)
    assert not outcome.success and "safety window" in outcome.error
    assert Home(settings).store.exists(wide)

    configure(config_path, remote=None, golden=False, retire_after_hours=0)
    outcome = dagster_runner().retire(settings, wide.id)
    assert outcome.success, outcome.error
    assert registry.require(wide.id).status == "RETIRED"
    assert not Home(settings).store.exists(wide)
    # the next sync builds the profile a fresh generation from the cache: nothing re-embedded
    report = dagster_runner().sync(settings)
    assert report.ok and report.embedded == 0
    fresh = registry.live_generation("wide")
    assert fresh is not None and fresh.id != wide.id and fresh.row_count == 24


def remote_backfill(root: Path, server: FakeOpenAIServer) -> Home:
    """A home of 30 deals a tenant whose profile ``remote`` embeds through ``server``, 32
    inputs a request, with ``alpha-deals`` ingested."""
    config_path = write_home(root, embedder="hash:v1-8", deals_per_tenant=30)
    remote = {
        "embedder": "openai:text-embedding-3-small",
        "dimensions": 64,
        "base_url": server.base_url,
        "namespace": "deals",
        "batch_size": 32,
    }
    configure(config_path, remote=remote, golden=False, eval_gate="off")
    settings = Settings(config_path=config_path, home=root / "home")
    assert Graph(settings).ingest("alpha-deals").success
    return Home(settings)


def test_a_backfill_the_server_cuts_off_resumes_without_embedding_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The endpoint answers the backfill's first request, then fails every retry of the next
    (500s, a timeout, a dropped connection): the step fails, the vectors it was given pass
    their checks and are cached, and the next run embeds only the rest."""
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    with serve() as server:
        corpus = remote_backfill(tmp_path, server)
        spec = corpus.spec("remote")
        inputs = 36  # distinct texts of the 30 deals' sections, embedded 32 a request
        faults = [{"status": 500, "retry_after": 0}] * 4 + [{"disconnect": True}] * 2
        server.script[:] = [{}, *faults]
        with pytest.raises(RetryableError, match="gave up after 6 attempts") as failed:
            steps.embeddings.run(corpus, "remote", "alpha-deals")
        (note,) = failed.value.__notes__
        assert "collection 'alpha-deals'" in note and "the 32 vectors embedded before" in note
        assert len(server.requests) == 7 and not server.script
        rows = corpus.warehouse.read("embedding_inputs", ("alpha-deals",))
        assert rows is not None
        hash_of = {
            r["text"]: r["input_hash"]
            for r in rows.to_pylist()
            if r["input_format"] == spec.input_format
        }
        assert len(hash_of) == inputs
        first = server.requests[0]["input"]
        cached = corpus.embedding_cache(spec).lookup(sorted(hash_of[t] for t in first))
        assert len(first) == len(cached) == 32
        assert corpus.warehouse.read("embeddings", ("remote", "alpha-deals")) is None

        # the rest is embedded, then the request embedding cache hits again (to show they are
        # this model's) fails: what was embedded is kept all the same
        server.requests.clear()
        server.script[:] = [{}, *faults]
        with pytest.raises(RetryableError) as failed:
            steps.embeddings.run(Home(corpus.settings), "remote", "alpha-deals")
        rest = server.requests[0]["input"]
        assert len(rest) == inputs - 32 and not set(rest) & set(first)
        assert len(server.requests[1]["input"]) == steps.embeddings.CACHE_HITS_AGAIN
        assert f"the {inputs - 32} vectors embedded before" in failed.value.__notes__[0]

        server.requests.clear()
        out = steps.embeddings.run(Home(corpus.settings), "remote", "alpha-deals")
        assert out.passed, out.gates
        assert (out.embedded, out.cache_hits) == (0, inputs)
        # only the cache hits embedded again
        assert [len(r["input"]) for r in server.requests] == [steps.embeddings.CACHE_HITS_AGAIN]
        partition = corpus.warehouse.read("embeddings", ("remote", "alpha-deals"))
        assert partition is not None and partition.num_rows == inputs


def test_vectors_a_cut_off_backfill_was_given_off_their_norm_are_not_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the server answered before it failed is cached only if it passes a window's
    checks: vectors of norm 3 for a model that gives unit vectors are dropped."""
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    with serve(normalize=False) as server:
        corpus = remote_backfill(tmp_path, server)
        server.script[:] = [{}, *[{"status": 503, "retry_after": 0}] * 6]
        with pytest.raises(RetryableError) as failed:
            steps.embeddings.run(corpus, "remote", "alpha-deals")
        (note,) = failed.value.__notes__
        assert "run it again once the embedder's server answers" in note
        rows = corpus.warehouse.read("embedding_inputs", ("alpha-deals",))
        assert rows is not None
        cache = corpus.embedding_cache(corpus.spec("remote"))
        assert cache.lookup(sorted(set(rows["input_hash"].to_pylist()))) == {}


def test_a_wrong_answer_to_the_dimension_probe_opens_no_generation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A self-hosted model (an openai: profile without dimensions) learns its vector length
    from a probe: an answer of another length than its generations hold (a replica serving
    another model) is asked again and refused, naming the profile, the model and the lengths
    seen; no generation is opened, and a search process neither judges the generation
    unmaintained nor keeps the wrong length: a query answered so fails alone."""
    config_path = write_home(tmp_path, embedder="hash:v1-8")
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    with serve(default_dim=48) as server:
        remote = {
            "embedder": "openai:self-hosted",
            "base_url": server.base_url,
            "namespace": "deals",
        }
        configure(config_path, remote=remote, golden=False, eval_gate="off")
        settings = Settings(config_path=config_path, home=tmp_path / "home")
        first = Home(settings)
        built = first.registry.open_generation(first.spec("remote"))
        assert built.spec.dim == 48

        server.script[:] = [{"vector_dim": 7}]  # one replica answers with another model
        later = Home(settings)
        with pytest.raises(DimensionProbeError) as refused:
            later.registry.open_generation(later.spec("remote"))
        message = str(refused.value)
        assert str(config_path) in message and "'remote'" in message
        assert "openai:self-hosted" in message and built.id in message
        assert "7, 48, 48 dimensions" in message and "dimensions: 48" in message
        # a model answering with another length every time is refused as well
        server.script[:] = [{"vector_dim": 7}] * 3
        with pytest.raises(DimensionProbeError, match="7-dimensional vectors 3 times in a row"):
            later.spec("remote")
        assert [g.id for g in later.registry.generations()] == [built.id]
        # once the server answers right, the same process builds the same generation
        assert later.registry.open_generation(later.spec("remote")).id == built.id

        searching = Home(settings)
        searcher = Searcher(searching)
        server.script[:] = [{"vector_dim": 7}]
        assert searching.unmaintained(built) is None
        assert searcher.resolve_generation("deals", built.id) == built
        server.script[:] = [{"vector_dim": 7}]  # the query itself answered by that replica
        with pytest.raises(EmbedderError, match="returned 7-dimensional vectors, expected 48"):
            searcher.embed_query("revenue", built)
        assert searcher.embed_query("revenue", built).shape == (48,)
        # that replica answers the probes, then the query: the query is refused, not searched
        searching = Home(settings)
        searcher = Searcher(searching)
        server.script[:] = [{"vector_dim": 7}] * 4
        assert searcher.resolve_generation("deals", built.id) == built
        with pytest.raises(EmbedderError, match=f"has 7 dimensions; generation {built.id} holds"):
            searcher.embed_query("revenue", built)
        assert searcher.embed_query("revenue", built).shape == (48,)
        assert searching.unmaintained(built) is None
