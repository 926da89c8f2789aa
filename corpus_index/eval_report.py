"""What the ``retrieval_evals`` asset shows: every evaluation the registry holds.

Two kinds: ``corpus eval`` runs on BEIR-format datasets (the latest per dataset, mode and
generation), and the golden-set metrics each live generation's build recorded (dataset
``golden:<namespace>``; a retired or failed generation cannot serve, so its figures are left
out). The fingerprint changes whenever either does, so a sync refreshes the
asset only when there is something new to show.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from corpus_index.registry import LIVE, Generation, Registry

GOLDEN_METRICS = ("recall@5", "mrr@10", "ndcg@10")


@dataclass(frozen=True, slots=True)
class EvalReport:
    """The evaluations to show, one row each, and the number of ``corpus eval`` runs."""

    rows: list[dict[str, Any]]
    runs: int

    @property
    def fingerprint(self) -> str:
        """A digest of every row: it changes when an evaluation is added or a metric moves."""
        text = json.dumps(self.rows, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def golden_generations(registry: Registry, *, namespace: str | None = None) -> list[Generation]:
    """The live generations (of ``namespace``, or all) whose builds recorded golden-set
    metrics, oldest first: not a retired or failed one, which cannot serve."""
    return [
        g
        for g in registry.generations(namespace=namespace)
        if g.status in LIVE and all(m in g.eval.get("golden", {}) for m in GOLDEN_METRICS)
    ]


def eval_report(registry: Registry) -> EvalReport:
    """The latest ``corpus eval`` result per (dataset, mode, generation), then the golden-set
    metrics of every live generation (:func:`golden_generations`); empty rows when there are
    none."""
    runs = registry.dataset_evals()
    latest: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in runs:
        latest[(str(r["dataset"]), str(r["mode"]), str(r["generation"]))] = r
    rows = [
        {"dataset": ds, "mode": mode, "generation": gen, **r}
        for (ds, mode, gen), r in sorted(latest.items())
    ]
    for g in golden_generations(registry):
        golden = g.eval["golden"]
        rows.append(
            {
                "dataset": f"golden:{g.spec.namespace}",
                "mode": str(golden.get("mode", "hybrid")),
                "generation": g.id,
                "backend_spec": g.spec.backend_spec,
                **{m: float(golden[m]) for m in GOLDEN_METRICS},
            }
        )
    return EvalReport(rows=rows, runs=len(runs))
