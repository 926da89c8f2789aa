"""The eval gate of ``index_generation``: the generation on its namespace's golden set, against
the ACTIVE generation's figures; and the chart that compares them."""

from __future__ import annotations

from typing import Any

from corpus_index import gates
from corpus_index.evaluation import GATE_METRICS, evaluate_generation, load_golden, regressions
from corpus_index.home import Home
from corpus_index.plots import bar_chart, save_png
from corpus_index.registry import Generation


def run_eval_gate(home: Home, generation: Generation) -> tuple[gates.Gate, dict[str, Any]]:
    """Evaluate ``generation`` on the golden set and compare it with the ACTIVE generation."""
    ns = home.config.namespaces[generation.spec.namespace]
    if ns.golden_set is None:
        # not run is not passed: promotion then needs the namespace's explicit eval_gate: off
        gate = gates.Gate.not_run(
            gates.EVAL_GATE,
            "golden-set retrieval was not evaluated: the namespace has no golden set",
            f"namespaces.{ns.name}.golden_set is not set"
            + ("" if ns.eval_gate else f"; promotion needs namespaces.{ns.name}.eval_gate: off"),
        )
        return gate, {}
    golden = load_golden(ns.golden_set)
    metrics = evaluate_generation(home, generation, golden)
    home.registry.record_eval(generation.id, {"golden": metrics})
    active = home.registry.active(ns.name)
    baseline: dict[str, Any] = {}
    if active is not None and active.id != generation.id:
        baseline = active.eval.get("golden", {})
        stale = baseline.get("golden_sha256") != golden.sha256
        if stale and active.spec.profile in home.config.profiles:
            baseline = evaluate_generation(home, active, golden)
            home.registry.record_eval(active.id, {"golden": baseline})
    worse = regressions(metrics, baseline, ns.eval_tolerance) if baseline else {}
    detail: dict[str, Any] = {f"{m}": metrics.get(m) for m in GATE_METRICS} | {
        "baseline_generation": active.id if active is not None else "",
        "tolerance": ns.eval_tolerance,
        "regressed": ", ".join(f"{m} -{d:.3f}" for m, d in worse.items()),
        "queries": metrics.get("queries"),
    }
    for m in GATE_METRICS:
        if m in baseline:
            detail[f"active_{m}"] = baseline[m]
    if not baseline:
        what = (
            "no ACTIVE generation to compare with"
            if active is None or active.id != generation.id
            else "this is the ACTIVE generation"
        )
        detail["baseline"] = what
    return (
        gates.Gate(
            gates.EVAL_GATE,
            not worse,
            f"golden-set retrieval is not worse than the ACTIVE generation's beyond {ns.eval_tolerance}",
            detail,
        ),
        metrics,
    )


def eval_plot(home: Home, namespace: str, *, highlight: str | None = None) -> bytes | None:
    """A bar chart of the golden-set metrics of every non-retired generation of
    ``namespace``, saved as ``<home>/reports/eval-<namespace>.png``; the PNG bytes."""
    series = {
        f"{g.id} {g.spec.profile} ({g.status})": g.eval["golden"]
        for g in home.registry.generations(namespace=namespace)
        if g.status != "RETIRED" and g.eval.get("golden")
    }
    if not series:
        return None
    label = next((k for k in series if highlight and k.startswith(f"{highlight} ")), None)
    png = bar_chart(
        series,
        GATE_METRICS,
        title=f"golden-set retrieval, namespace {namespace}",
        highlight=label,
    )
    save_png(png, home.settings.reports / f"eval-{namespace}.png")
    return png
