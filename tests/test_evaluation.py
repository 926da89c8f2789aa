"""Golden sets: loading with clear errors, scoring a generation, the regression rule, and
which generations' figures are shown."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from corpus_index.errors import ConfigError
from corpus_index.eval_report import eval_report
from corpus_index.evaluation import judged_id, load_golden, regressions
from corpus_index.registry import Registry
from tests.test_config import UNREADABLE, refused_naming
from tests.test_registry import OTHER_MODEL, SPEC, ready

ROOT = Path(__file__).resolve().parents[1]


def test_the_sample_golden_set_loads() -> None:
    golden = load_golden(ROOT / "golden" / "deals.yaml")
    assert len(golden.queries) >= 20
    q = golden.queries[0]
    assert q.id == "q01" and q.tenant == "meridian" and q.groups
    assert q.relevant[judged_id("meridian-deals/deal-2026-0042", "risk_assessment")] == 2
    assert golden.sha256 == hashlib.sha256(golden.path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("queries: []\n", "the golden set has no queries"),
        ("nope: 1\n", "a golden set needs a list under 'queries'"),
        ("queries:\n  - {id: a, text: t, tenant: x}\n", "queries[0]: missing 'relevant'"),
        (
            "queries:\n  - {id: a, text: t, tenant: x, relevant: [{source_id: s}]}\n",
            "queries[0].relevant[0]: needs source_id and section",
        ),
        (
            "queries:\n  - {id: a, text: t, tenant: x, relevant: [{source_id: s, section: p, grade: 0}]}\n",
            "grade must be a positive integer",
        ),
        ("queries: [\n", "invalid YAML"),
    ],
)
def test_bad_golden_sets_name_the_file_and_the_problem(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "golden.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_golden(path)
    assert str(path) in str(info.value) and message in str(info.value)


def test_missing_golden_set(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="golden set not found"):
        load_golden(tmp_path / "nope.yaml")


@pytest.mark.parametrize(("case", "content", "problem"), UNREADABLE, ids=[c[0] for c in UNREADABLE])
def test_a_golden_set_that_cannot_be_read_is_named(
    tmp_path: Path, case: str, content: bytes | None, problem: str
) -> None:
    # read as corpus.yaml is; it was read whole with yaml.safe_load: a folder in its place
    # ended in IsADirectoryError, deep nesting in RecursionError, a file not UTF-8 in a
    # UnicodeDecodeError, and neither its size nor its aliases' expansion was bounded
    golden = problem.replace("configuration file", "golden set")
    refused_naming(load_golden, tmp_path / "golden.yaml", content, golden)


def test_regressions_beyond_tolerance_only() -> None:
    baseline = {"recall@5": 0.80, "mrr@10": 0.90, "ndcg@10": 0.85}
    assert regressions({"recall@5": 0.79, "mrr@10": 0.95, "ndcg@10": 0.85}, baseline, 0.02) == {}
    assert regressions({"recall@5": 0.70, "mrr@10": 0.90, "ndcg@10": 0.82}, baseline, 0.02) == {
        "recall@5": 0.1,
        "ndcg@10": 0.03,
    }
    assert regressions({"recall@5": 0.78}, baseline, 0.02) == {}  # exactly at the tolerance


def test_only_live_generations_figures_are_shown(tmp_path: Path) -> None:
    """The report (and the comparison chart, which picks its generations alike) shows the
    generations that can serve: a failed one's figures are left out like a retired one's."""
    reg = Registry(tmp_path / "registry.duckdb")
    served, failed = ready(reg, SPEC), ready(reg, OTHER_MODEL)
    for g in (served, failed):
        reg.record_eval(g, {"golden": {"recall@5": 1.0, "mrr@10": 1.0, "ndcg@10": 1.0}})
    reg.set_status(failed, "FAILED")
    assert [r["generation"] for r in eval_report(reg).rows] == [served]
