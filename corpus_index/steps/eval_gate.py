"""The eval gate of ``index_generation``: the generation on its namespace's golden set, against
the ACTIVE generation's figures; and the chart that compares them."""

from __future__ import annotations

from typing import Any

from corpus_index import gates
from corpus_index.eval_report import golden_generations
from corpus_index.evaluation import GATE_METRICS, evaluate_generation, load_golden, regressions
from corpus_index.home import Home
from corpus_index.lifecycle import eval_not_current
from corpus_index.plots import bar_chart, save_png
from corpus_index.registry import Generation

NOT_COMPARED = "not_compared"


def is_candidate(generation: Generation) -> bool:
    """Whether a build of ``generation`` is compared with the ACTIVE one: it does not serve
    and never served (a migration's new generation). One that served and was replaced (the
    old profile's after a migration, a rollback target) is compared only when an operator asks
    to promote it (:func:`compare_for_promotion`)."""
    return generation.status != "ACTIVE" and generation.activated_at is None


def run_eval_gate(
    home: Home, generation: Generation, *, candidate: bool | None = None
) -> tuple[gates.Gate, dict[str, Any]]:
    """Evaluate ``generation`` on the golden set and, if it is a candidate for promotion
    (default: :func:`is_candidate`), compare it with the ACTIVE generation."""
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
    if candidate is None:
        candidate = is_candidate(generation)
    if not candidate and active is not None and active.id != generation.id:
        # a generation that served before is no candidate until someone asks to promote it:
        # comparing it with the new ACTIVE one on every source change would fail its runs
        gate = gates.Gate(
            gates.EVAL_GATE,
            False,
            "golden-set retrieval was evaluated, not compared: the generation served before "
            "and is not being promoted",
            {
                "not_run": f"compared with the ACTIVE generation {active.id} only when promoted",
                NOT_COMPARED: True,
                **{m: metrics.get(m) for m in GATE_METRICS},
            },
            ran=False,
        )
        return gate, metrics
    baseline: dict[str, Any] = {}
    if active is not None and active.id != generation.id:
        baseline = active.eval.get("golden", {})
        # measured on another golden set, or before a sync changed the ACTIVE rows (a
        # deletion reaches both generations: comparing with the old figures fails a
        # candidate for what the corpus lost)
        stale = baseline.get("golden_sha256") != golden.sha256 or baseline.get(
            "table_version"
        ) != home.store.version(active)
        if stale and home.unmaintained(active) is None:
            baseline = evaluate_generation(home, active, golden)
            home.registry.record_eval(active.id, {"golden": baseline})
    worse = regressions(metrics, baseline, ns.eval_tolerance) if baseline else {}
    detail: dict[str, Any] = {f"{m}": metrics.get(m) for m in GATE_METRICS} | {
        "baseline_generation": active.id if active is not None else "",
        "tolerance": ns.eval_tolerance,
        "golden_sha256": golden.sha256,
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
    """A bar chart of the golden-set metrics of every live generation of ``namespace`` (not a
    retired or failed one, see :func:`~corpus_index.eval_report.golden_generations`), saved as
    ``<home>/reports/eval-<namespace>.png``; the PNG bytes (None when none has metrics)."""
    series = {
        f"{g.id} {g.spec.profile} ({g.status})": g.eval["golden"]
        for g in golden_generations(home.registry, namespace=namespace)
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


def compare_for_promotion(home: Home, generation: Generation) -> gates.Gate | None:
    """Compare ``generation`` with the ACTIVE one now that it is asked to be promoted, if its
    builds did not (see :func:`is_candidate`), or compared it with another generation than
    the one ACTIVE now, over its rows as they were before a sync wrote them, or under another
    tolerance or golden set (:func:`~corpus_index.lifecycle.eval_not_current`); the outcome
    is recorded on the generation.

    Returns:
        The eval gate, or None when the recorded one stands (compared with what serves now,
        or there is no golden set).
    """
    key = gates.check_key("index_generation", gates.EVAL_GATE)
    if not generation.checks.get(key, {}).get(NOT_COMPARED) and (
        eval_not_current(home, generation) is None
    ):
        return None
    gate, _ = run_eval_gate(home, generation, candidate=True)
    home.registry.record_checks(generation.id, {key: gate.to_json()})
    return gate
