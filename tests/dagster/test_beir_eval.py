"""`corpus eval` end to end on a tiny BEIR-format folder: own namespace, metrics, cache reuse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from corpus_index.beir_eval import load_dataset
from corpus_index.cli import main
from corpus_index.errors import ConfigError
from corpus_index.registry import Registry
from tests.corpusgen import write_home

pytestmark = pytest.mark.slow

DOCS = {
    "d1": ("Wing flutter", "Flutter of swept wings at transonic speed and its suppression."),
    "d2": ("Boundary layers", "Laminar boundary layer transition on a flat plate with suction."),
    "d3": ("Heat transfer", "Heat transfer to a blunt body in hypersonic flow."),
    "d4": ("Shock waves", "Shock wave interaction with a turbulent boundary layer."),
    "d5": ("Propellers", "Noise of counter-rotating propellers in forward flight."),
}
QUERIES = {
    "q1": "wing flutter suppression",
    "q2": "boundary layer transition suction",
    "q3": "hypersonic heat transfer blunt body",
}
QRELS = [("q1", "d1", 1), ("q2", "d2", 1), ("q2", "d4", 1), ("q3", "d3", 1)]


def beir_folder(root: Path) -> Path:
    folder = root / "tiny"
    folder.mkdir()
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": k, "title": t, "text": x}) + "\n" for k, (t, x) in DOCS.items())
    )
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": k, "text": t}) + "\n" for k, t in QUERIES.items())
    )
    (folder / "qrels.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, d, s in QRELS)
    )
    return folder


def test_eval_all_modes_and_a_second_eval_embeds_nothing(tmp_path: Path) -> None:
    config = write_home(tmp_path, embedder="hash:v1-256")
    folder = beir_folder(tmp_path)
    args = ["--config", str(config), "--home", str(tmp_path / "home")]
    out = CliRunner().invoke(main, [*args, "eval", str(folder), "--mode", "all", "--json"])
    assert out.exit_code == 0, out.output
    results = json.loads(out.output)
    assert [r["mode"] for r in results] == ["dense", "lexical", "hybrid"]
    keys = {
        "dataset", "mode", "generation", "ndcg@10", "mrr@10", "recall@1", "recall@5",
        "recall@10", "recall@100", "p@10", "latency_p50_ms", "latency_p95_ms",
    }  # fmt: skip
    for r in results:
        assert keys <= set(r) and r["dataset"] == "tiny" and r["queries"] == 3
        assert r["embedded"] == 5
        assert 0 < r["ndcg@10"] <= 1 and r["recall@100"] == 1.0  # 5 docs: all retrieved
    lexical = results[1]
    # every query's words are in its relevant document's title and text: BM25 ranks them first
    assert lexical["mrr@10"] == 1.0 and lexical["recall@1"] == pytest.approx((1 + 0.5 + 1) / 3)
    # the dataset lives in its own home and namespace; the user's namespace has no generation
    assert (tmp_path / "home" / "evals" / "tiny" / "registry.duckdb").is_file()
    assert Registry(tmp_path / "home" / "registry.duckdb").active("deals") is None
    assert len(Registry(tmp_path / "home" / "registry.duckdb").dataset_evals("tiny")) == 3

    again = CliRunner().invoke(main, [*args, "eval", str(folder), "--mode", "dense", "--json"])
    assert again.exit_code == 0, again.output
    second = json.loads(again.output)
    assert second["embedded"] == 0 and second["ndcg@10"] == results[0]["ndcg@10"]


def test_bad_folders_are_named(tmp_path: Path) -> None:
    folder = beir_folder(tmp_path)
    (folder / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\thigh\n")
    with pytest.raises(ConfigError, match=r"qrels.tsv:2: score 'high' is not an integer"):
        load_dataset(folder)
    (folder / "queries.jsonl").write_text('{"_id": "q1"}\n')
    with pytest.raises(ConfigError, match=r"queries.jsonl:1: not a query object"):
        load_dataset(folder)
    with pytest.raises(ConfigError, match="not a BEIR folder"):
        load_dataset(tmp_path)
