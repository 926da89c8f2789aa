"""End to end on the bundled sample corpus with the real MiniLM model, through the CLI.

One session-scoped home is built with `corpus sync` (a subprocess, as a user would run it),
then `corpus promote` and a second `corpus sync` run in this process (the same commands, without
loading Dagster and the model in two more processes); the tests then read it through the CLI
and the Python API.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from corpus_index.cli import main
from corpus_index.config import Settings
from corpus_index.home import Home
from corpus_index.search import Principal, Searcher

ROOT = Path(__file__).resolve().parents[1]
CORPUS = [sys.executable, "-m", "corpus_index.cli"]
pytestmark = pytest.mark.model


def run_cli(
    home: Path, *args: str, config: Path = ROOT / "corpus.yaml", check: bool = True
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CORPUS_CONFIG": str(config), "CORPUS_HOME": str(home)}
    out = subprocess.run(
        [*CORPUS, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600
    )
    if check and out.returncode != 0:
        raise AssertionError(
            f"corpus {' '.join(args)} exited {out.returncode}:\n{out.stderr[-3000:]}"
        )
    return out


def run_here(home: Path, *args: str) -> str:
    """``corpus <args>`` in this process, on the real corpus.yaml; its output."""
    base = ["--config", str(ROOT / "corpus.yaml"), "--home", str(home)]
    result = CliRunner().invoke(main, [*base, *args])
    if result.exit_code != 0:
        raise AssertionError(f"corpus {' '.join(args)} exited {result.exit_code}:\n{result.output}")
    return result.stdout


@pytest.fixture(scope="session")
def sample_home(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    home = tmp_path_factory.mktemp("sample") / "home"
    first = json.loads(run_cli(home, "sync", "--json").stdout)
    run_here(home, "promote")
    second = json.loads(run_here(home, "sync", "--json"))
    return {"home": home, "first": first, "second": second}


@pytest.fixture(scope="session")
def searcher(sample_home: dict[str, Any]) -> Searcher:
    return Searcher(Home(Settings(config_path=ROOT / "corpus.yaml", home=sample_home["home"])))


def golden() -> list[dict[str, Any]]:
    return yaml.safe_load((ROOT / "golden" / "deals.yaml").read_text())["queries"]


def test_sync_summary_counts_everything(sample_home: dict[str, Any]) -> None:
    first = sample_home["first"]
    assert set(first) >= {"embedded", "cache_hits", "documents", "quarantined", "collections"}
    # 26 deals, the messages sample's 168 + 95 records (a record is a document), 44 profile
    # source files of 13 researchers and 5 handbook documents
    assert first["documents"] == 26 + 168 + 95 + 44 + 5 and first["quarantined"] == 0
    assert first["embedded"] > 0
    assert set(first["collections"]) == {
        "meridian-deals",
        "harbor-deals",
        "wattle-messages",
        "bluegum-messages",
        "researchers",
        "handbook",
    }
    assert first["collections"]["meridian-deals"]["documents"] == 14
    assert first["collections"]["wattle-messages"]["documents"] == 168
    total_inputs = first["embedded"] + first["cache_hits"]
    assert total_inputs == sum(
        p["embedded"] + p["cache_hits"]
        for c in first["collections"].values()
        for p in c["profiles"].values()
    )


def test_second_sync_embeds_nothing(sample_home: dict[str, Any]) -> None:
    second = sample_home["second"]
    assert second["embedded"] == 0
    assert (
        second["cache_hits"]
        == sample_home["first"]["embedded"] + sample_home["first"]["cache_hits"]
    )


def test_search_json_shape_and_provenance(sample_home: dict[str, Any]) -> None:
    out = run_cli(
        sample_home["home"],
        "search",
        "roofs and plumbing past their useful life",
        "--tenant",
        "meridian",
        "--group",
        "uw-team",
        "--k",
        "3",
        "--json",
    )
    doc = json.loads(out.stdout)
    assert set(doc) == {"hits", "trace"}
    assert len(doc["hits"]) == 3
    for hit in doc["hits"]:
        assert set(hit) == {  # exactly these; each stage's scores and ranks are in trace.hits
            "score",
            "source_id",
            "collection",
            "tenant_id",
            "section",
            "excerpt",
            "provenance",
        }
        assert set(hit["provenance"]) == {
            "chunk_ref",
            "source_version",
            "content_hash",
            "input_format",
            "backend_spec",
            "generation",
            "run_id",
        }
        assert hit["tenant_id"] == "meridian"
        assert hit["provenance"]["chunk_ref"].startswith(f"chunk://{hit['collection']}/")
        assert hit["provenance"]["backend_spec"] == "st:all-MiniLM-L6-v2"
    assert doc["trace"]["generation"] == doc["hits"][0]["provenance"]["generation"]


def test_unknown_tenant_or_group_matches_nothing(searcher: Searcher) -> None:
    for principal in [
        Principal("nobody", ("uw-team",)),
        Principal("meridian", ("no-such-group",)),
        Principal("meridian", ()),
    ]:
        result = searcher.search("insurance premiums", principal=principal, k=10, namespace="deals")
        assert result.hits == []


@pytest.mark.parametrize("query", golden(), ids=lambda q: q["id"])
def test_no_search_returns_another_tenants_rows(searcher: Searcher, query: dict[str, Any]) -> None:
    principal = Principal(query["tenant"], tuple(query["groups"]))
    result = searcher.search(query["text"], principal=principal, k=50)
    assert result.hits, "every golden query should find something for its own tenant"
    corpus = searcher.corpus
    for hit in result.hits:
        assert hit.tenant_id == principal.tenant
        assert corpus.config.collections[hit.collection].tenant == principal.tenant
    # and the other tenant, with all its groups, never sees this tenant's rows
    other = "harbor" if principal.tenant == "meridian" else "meridian"
    other_groups = corpus.config.collections[f"{other}-deals"].acl_groups
    for hit in searcher.search(query["text"], principal=Principal(other, other_groups), k=50).hits:
        assert hit.tenant_id == other


def test_restricted_deals_need_their_group(searcher: Searcher) -> None:
    """Deals whose ACL narrows to one group are invisible to principals without it."""
    corpus = searcher.corpus
    gen = corpus.registry.active("deals")
    assert gen is not None
    rows = corpus.store.table(gen).to_arrow().to_pylist()
    narrowed = {
        r["source_id"]
        for r in rows
        if r["tenant_id"] == "meridian" and r["acl_groups"] == ["credit-committee"]
    }
    assert narrowed, "the sample corpus has deals restricted to credit-committee"
    hits = searcher.search(
        "grocery anchored retail and hotel deals",
        principal=Principal("meridian", ("uw-team",)),
        k=100,
    ).hits
    assert not {h.source_id for h in hits} & narrowed


def test_shared_risk_pattern_is_found_across_different_wordings(searcher: Searcher) -> None:
    result = searcher.search(
        "aging building systems that need immediate capital repairs",
        principal=Principal("meridian", ("uw-team", "credit-committee")),
        k=6,
    )
    risk_deals = {h.source_id for h in result.hits if h.section == "risk_assessment"}
    assert len(risk_deals) >= 3


def test_generations_json_lists_the_active_generation(sample_home: dict[str, Any]) -> None:
    doc = json.loads(run_cli(sample_home["home"], "generations", "--json").stdout)
    # one generation per profile: the deals', the messages', the researchers', the handbook's
    by_namespace = {g["namespace"]: g for g in doc["generations"]}
    assert sorted(by_namespace) == ["deals", "handbook", "messages", "researchers"]
    assert len(doc["generations"]) == 4
    assert by_namespace["messages"]["status"] == "ACTIVE"
    gen = by_namespace["deals"]
    assert (
        gen["status"] == "ACTIVE"
        and gen["backend_spec"] == "st:all-MiniLM-L6-v2"
        and gen["dim"] == 384
    )
    rows = sum(
        p["rows"]
        for name, c in sample_home["first"]["collections"].items()
        if name.endswith("-deals")
        for p in c["profiles"].values()
    )
    assert gen["row_count"] == rows > 0
    assert all(c["passed"] for c in gen["checks"].values())


def test_sample_profiles_export_verifies_and_keeps_restricted_files_out(
    sample_home: dict[str, Any],
) -> None:
    flat = sample_home["home"] / "exports" / "flat" / "minilm-researchers" / "researchers"
    folders = sorted(p / "embeddings" for p in flat.iterdir() if p.name != "collection")
    assert len(folders) == 13
    report = json.loads(
        run_here(sample_home["home"], "export", "verify", str(folders[0]), "--json")
    )
    assert report["verdict"] == "verified" and report["backend_spec"] == "st:all-MiniLM-L6-v2"
    public = {
        c["source_type"]
        for f in folders
        for c in json.loads((f / "st-all-minilm-l6-v2.chunks.json").read_text())
    }
    assert public == {"expertise", "paper_summary", "paper_abstract", "soul"}
    demo = run_here(sample_home["home"], "demo")
    assert "=== corpus export verify" in demo and "verified: probe cosine" in demo
