"""A BEIR-format folder (SciFact) loads as a collection and goes through the whole graph."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from corpus_index.config import Settings
from corpus_index.home import Home
from tests.dagster.harness import Graph, check_outcomes, metadata

SCIFACT = Path(__file__).resolve().parents[3] / "shared" / "evaldata" / "scifact"


@pytest.mark.skipif(
    not (SCIFACT / "corpus.jsonl").is_file(), reason="shared/evaldata is not beside the checkout"
)
def test_scifact_as_a_beir_collection(tmp_path: Path) -> None:
    config = tmp_path / "corpus.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "collections": {
                    "scifact": {
                        "kind": "beir",
                        "path": str(SCIFACT),
                        "tenant": "eval",
                        "acl_groups": ["eval"],
                        "tier": "public",
                        "namespace": "eval-scifact",
                    }
                },
                "profiles": {"hash": {"embedder": "hash:v1-64", "namespace": "eval-scifact"}},
            }
        )
    )
    g = Graph(Settings(config_path=config, home=tmp_path / "home"))
    r = g.ingest("scifact")
    assert r.success
    assert metadata(r, "source_manifest")["documents"] == 5183
    assert metadata(r, "embedding_inputs")["inputs"] == 5183
    r = g.embed("hash", "scifact")
    assert r.success and all(check_outcomes(r).values())
    r = g.generation("hash")
    assert r.success and metadata(r, "index_generation")["rows"] == 5183
    corpus = Home(g.settings)
    gen = corpus.registry.live_generation("hash")
    assert gen is not None
    row = corpus.store.table(gen).search().where("doc_id = '4983'").limit(1).to_list()[0]
    assert row["text"].startswith(
        "Microstructural development of human newborn cerebral white matter"
    )
    assert row["chunk_ref"].startswith("chunk://scifact/4983/v")
