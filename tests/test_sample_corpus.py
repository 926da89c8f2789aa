"""End to end on the bundled sample corpus with the real MiniLM model, through the CLI.

One session-scoped home is built from the shipped ``corpus.yaml`` with ``corpus sync``, then
``corpus promote`` and a second ``corpus sync``; the tests read it through the CLI and the
Python API. The commands run in this process (one import of Dagster and one load of the model
for the whole file; ``corpus sync`` as a subprocess is exercised in tests/dagster/
test_incremental.py and tests/test_homelock.py).

The deals are what the searches below judge, so they keep MiniLM. The messages profile
embeds through the hash embedder instead: nothing here reads the meaning of a message vector,
and MiniLM over the messages sample was most of the file's CPU time (the messages pipeline is
tested on its own in tests/dagster/test_linked_groups.py).
"""

from __future__ import annotations

import json
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
MESSAGES_EMBEDDER = "hash:v1-64"
pytestmark = pytest.mark.model


def sample_config(folder: Path) -> Path:
    """The shipped corpus.yaml, its paths made absolute, with the messages profile on the hash
    embedder; written to ``folder``."""
    config = yaml.safe_load((ROOT / "corpus.yaml").read_text(encoding="utf-8"))
    for spec in config["collections"].values():
        spec["path"] = str(ROOT / spec["path"])
    for spec in config["namespaces"].values():
        if "golden_set" in spec:
            spec["golden_set"] = str(ROOT / spec["golden_set"])
    messages = config["profiles"]["minilm-messages"]
    assert messages["namespace"] == "messages" and messages["embedder"].startswith("st:")
    messages["embedder"] = MESSAGES_EMBEDDER
    path = folder / "corpus.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def run_here(settings: Settings, *args: str) -> str:
    """``corpus <args>`` in this process, on the sample's config; its output."""
    base = ["--config", str(settings.config_path), "--home", str(settings.home)]
    result = CliRunner().invoke(main, [*base, *args])
    if result.exit_code != 0:
        raise AssertionError(f"corpus {' '.join(args)} exited {result.exit_code}:\n{result.output}")
    return result.stdout


@pytest.fixture(scope="session")
def sample_home(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("sample")
    settings = Settings(config_path=sample_config(root), home=root / "home")
    first = json.loads(run_here(settings, "sync", "--json"))
    run_here(settings, "promote")
    second = json.loads(run_here(settings, "sync", "--json"))
    return {"settings": settings, "first": first, "second": second}


@pytest.fixture(scope="session")
def searcher(sample_home: dict[str, Any]) -> Searcher:
    return Searcher(Home(sample_home["settings"]))


def golden() -> list[dict[str, Any]]:
    return yaml.safe_load((ROOT / "golden" / "deals.yaml").read_text())["queries"]


def test_sync_summary_counts_everything(sample_home: dict[str, Any]) -> None:
    first = sample_home["first"]
    assert set(first) >= {"embedded", "cache_hits", "documents", "quarantined", "collections"}
    # 26 deals, the messages sample's 172 + 100 records (a record is a document), 44 profile
    # source files of 13 researchers and 5 handbook documents
    assert first["documents"] == 26 + 172 + 100 + 44 + 5 and first["quarantined"] == 0
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
    assert first["collections"]["wattle-messages"]["documents"] == 172
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
    out = run_here(
        sample_home["settings"],
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
    doc = json.loads(out)
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
    doc = json.loads(run_here(sample_home["settings"], "generations", "--json"))
    # one generation per profile: the deals', the messages', the researchers', the handbook's
    by_namespace = {g["namespace"]: g for g in doc["generations"]}
    assert sorted(by_namespace) == ["deals", "handbook", "messages", "researchers"]
    assert len(doc["generations"]) == 4
    messages = by_namespace["messages"]
    assert messages["status"] == "ACTIVE" and messages["backend_spec"] == MESSAGES_EMBEDDER
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
    settings = sample_home["settings"]
    flat = settings.home / "exports" / "flat" / "minilm-researchers" / "researchers"
    folders = sorted(p / "embeddings" for p in flat.iterdir() if p.name != "collection")
    assert len(folders) == 13
    report = json.loads(run_here(settings, "export", "verify", str(folders[0]), "--json"))
    assert report["verdict"] == "verified" and report["backend_spec"] == "st:all-MiniLM-L6-v2"
    public = {
        c["source_type"]
        for f in folders
        for c in json.loads((f / "st-all-minilm-l6-v2.chunks.json").read_text())
    }
    assert public == {"expertise", "paper_summary", "paper_abstract", "soul"}
    demo = run_here(settings, "demo")
    assert "=== corpus export verify" in demo and "verified: probe cosine" in demo
    # the staff chat's conversations drawn: the Christmas thread, a lane of nine messages
    assert "=== How the staff chat was told apart" in demo
    assert any(x.strip().startswith("9 messages · grp-") for x in demo.splitlines())
