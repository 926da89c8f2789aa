"""A promotion's eval gate compares the generation with the one serving now, over its rows
now, under the namespace's golden set and tolerance now: a pass recorded against another
generation (none, itself while it served), or before a sync wrote its rows, does not stand. Namespace ``deals`` has a golden set and dense-only
retrieval; profile ``main`` (hash:v1-64) finds every judged section, ``alt`` (hash:v1-2) does
far worse."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from corpus_index import lifecycle, steps
from corpus_index.cli import main
from corpus_index.config import Settings, load_config
from corpus_index.errors import ConfigError, PromotionRefusedError
from corpus_index.evaluation import regressions
from corpus_index.home import Home
from tests.corpusgen import RISKS, deal_text, write_home
from tests.searchkit import build_home

EVAL = "index_generation:retrieval_not_worse_than_active"


def _home(root: Path) -> Home:
    config = write_home(
        root,
        eval_gate=None,
        extra_profiles={"alt": {"embedder": "hash:v1-2", "namespace": "deals"}},
    )
    doc = yaml.safe_load(config.read_text())
    doc["namespaces"]["deals"]["golden_set"] = "golden.yaml"
    doc["namespaces"]["deals"]["retrieval"] = {
        "fusion": "weighted",
        "lexical_weight": 0.0,
        "dense_weight": 1.0,
        "feedback_docs": 0,
    }
    config.write_text(yaml.safe_dump(doc, sort_keys=False))
    queries = [
        {
            "id": f"q{i}",
            "tenant": "alpha",
            "groups": ["alpha-uw"],
            "text": RISKS[i % len(RISKS)].lower(),
            "relevant": [
                {
                    "source_id": f"alpha-deals/deal-alpha-{i:03d}",
                    "section": "risk_assessment",
                    "grade": 2,
                }
            ],
        }
        for i in range(3)
    ]
    (root / "golden.yaml").write_text(yaml.safe_dump({"queries": queries}))
    return build_home(Settings(config_path=config, home=root / "home"), promote=False)


def _promote_cli(home: Home, generation: str) -> Any:
    base = ["--config", str(home.settings.config_path), "--home", str(home.settings.home)]
    return CliRunner().invoke(main, [*base, "promote", generation])


def _gens(home: Home) -> dict[str, str]:
    return {g.spec.profile: g.id for g in home.registry.generations(namespace="deals")}


def test_a_pass_recorded_with_nothing_serving_does_not_stand_once_another_serves(
    tmp_path: Path,
) -> None:
    home = _home(tmp_path)
    gens = _gens(home)
    weak = home.registry.require(gens["alt"])
    assert weak.checks[EVAL]["passed"] and weak.checks[EVAL]["baseline_generation"] == ""
    lifecycle.promote(home, "deals", gens["main"])
    with pytest.raises(PromotionRefusedError, match="compared with no ACTIVE generation"):
        lifecycle.promote(home, "deals", gens["alt"])
    # asked through the CLI, it is compared with what serves now, and fails
    refused = _promote_cli(home, gens["alt"])
    assert refused.exit_code != 0
    assert home.registry.active("deals").id == gens["main"]
    again = home.registry.require(gens["alt"]).checks[EVAL]
    assert not again["passed"] and again["baseline_generation"] == gens["main"]
    assert again["regressed"]


def test_a_better_generation_compared_anew_is_promoted(tmp_path: Path) -> None:
    home = _home(tmp_path)
    gens = _gens(home)
    lifecycle.promote(home, "deals", gens["alt"])  # the weak one serves first
    promoted = _promote_cli(home, gens["main"])
    assert promoted.exit_code == 0, promoted.output
    assert home.registry.active("deals").id == gens["main"]
    assert home.registry.require(gens["main"]).checks[EVAL]["baseline_generation"] == gens["alt"]


def test_a_pass_against_itself_while_it_served_does_not_stand(tmp_path: Path) -> None:
    home = _home(tmp_path)
    gens = _gens(home)
    lifecycle.promote(home, "deals", gens["alt"])
    steps.index_generation.run(home, "alt")  # while ACTIVE: compared with itself
    steps.index_generation.run(home, "main")  # a candidate: compared with alt, passes
    assert home.registry.require(gens["alt"]).checks[EVAL]["baseline"] == (
        "this is the ACTIVE generation"
    )
    lifecycle.promote(home, "deals", gens["main"])
    with pytest.raises(PromotionRefusedError, match="compared with itself"):
        lifecycle.promote(home, "deals", gens["alt"])
    assert _promote_cli(home, gens["alt"]).exit_code != 0
    assert home.registry.active("deals").id == gens["main"]


def test_a_pass_over_rows_written_since_does_not_stand(tmp_path: Path) -> None:
    """A sync wrote the candidate's rows (a new deal) after its eval gate ran, and its
    index_generation has not run since: the recorded pass measured other rows."""
    home = _home(tmp_path)
    gens = _gens(home)
    lifecycle.promote(home, "deals", gens["alt"])
    steps.index_generation.run(home, "main")  # compared with alt: passes
    candidate = home.registry.require(gens["main"])
    assert candidate.checks[EVAL]["passed"]
    assert lifecycle.eval_not_current(home, candidate) is None
    (tmp_path / "sources" / "alpha" / "deal-alpha-new.uw.md").write_text(
        deal_text("DEAL-ALPHA-NEW", tenant="alpha", acl=["alpha-uw"], risk=RISKS[3]),
        encoding="utf-8",
    )
    for step in (steps.source_manifest, steps.parsed_blocks, steps.embedding_inputs):
        step.run(home, "alpha-deals")
    for profile in ("main", "alt"):
        steps.embeddings.run(home, profile, "alpha-deals")
        steps.index_rows.run(home, profile, "alpha-deals", run_id="later")
    steps.index_generation.run(home, "alt", run_id="later")
    reason = lifecycle.eval_not_current(home, home.registry.require(gens["main"]))
    assert reason is not None and "table version" in reason
    with pytest.raises(PromotionRefusedError, match="table version"):
        lifecycle.promote(home, "deals", gens["main"])
    assert home.registry.active("deals").id == gens["alt"]
    # asked through the CLI, it is compared again over its rows now
    promoted = _promote_cli(home, gens["main"])
    assert promoted.exit_code == 0, promoted.output
    promoted_gen = home.registry.active("deals")
    assert promoted_gen.id == gens["main"]
    assert promoted_gen.eval["golden"]["table_version"] == home.store.version(promoted_gen)


def test_a_tolerance_changed_since_the_gate_ran_calls_for_it_again(tmp_path: Path) -> None:
    home = _home(tmp_path)
    gens = _gens(home)
    lifecycle.promote(home, "deals", gens["alt"])
    steps.index_generation.run(home, "main")  # compared with alt: passes
    doc = yaml.safe_load(home.settings.config_path.read_text())
    doc["namespaces"]["deals"]["eval_tolerance"] = 0.5
    home.settings.config_path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(PromotionRefusedError, match="eval_tolerance 0.02, not 0.5"):
        lifecycle.promote(Home(home.settings), "deals", gens["main"])


@pytest.mark.parametrize("tolerance", [".nan", ".inf", "2"])
def test_a_tolerance_no_comparison_can_hold_to_is_refused(tmp_path: Path, tolerance: str) -> None:
    config = write_home(tmp_path)
    text = config.read_text()
    doc = yaml.safe_load(text)
    doc["namespaces"]["deals"]["eval_tolerance"] = "TOLERANCE"
    config.write_text(yaml.safe_dump(doc).replace("TOLERANCE", tolerance))
    with pytest.raises(ConfigError, match="eval_tolerance"):
        load_config(config)


def test_a_figure_that_is_no_number_is_a_regression() -> None:
    base = {"ndcg@10": 0.9, "recall@5": 0.8}
    assert regressions({"ndcg@10": math.nan, "recall@5": 0.8}, base, 0.02) == {"ndcg@10": math.inf}
    assert set(regressions({"ndcg@10": 0.9, "recall@5": 0.8}, base, math.nan)) == set(base)
    assert regressions({"ndcg@10": 0.89, "recall@5": 0.8}, base, 0.02) == {}
