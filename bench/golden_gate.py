"""The sample corpus's golden sets under two or more hybrid retrieval settings, query by query.

Builds the bundled sample (``corpus.yaml``: every collection, every profile, the real MiniLM
model) in one home with the library's own pipeline steps, then asks every golden set's
queries against each namespace's generation once per retrieval setting, the setting swapped
into the namespace's configuration (``namespaces.<ns>.retrieval``), nothing else changed:

* ``golden/deals.yaml``, ``golden/profiles.yaml``, ``golden/documents.yaml``: as the eval gate
  asks them (``evaluation.rank_golden``: k=10, per-document cap 3, the query's principal) and
  scored as it scores them (Recall@5, MRR@10, nDCG@10); every query whose figures differ
  between the first setting and another is printed with the ranks of its judged sections.
* ``golden/messages.yaml`` (no eval gate reads it; ``bench/group_search.py`` measures it):
  group-first search (``search_contexts``, k=3), whether the expected group's members all show
  in the top 3 records (``complete``) and inside one record (``whole``), per query.

The first setting is the baseline ("old": RRF, no feedback, the hybrid before issue 22); the
second is the namespace default. More can be named with ``--variant NAME:key=value,...``
(the keys of ``namespaces.<ns>.retrieval``).

Usage (from the repository root)::

    .venv/bin/python bench/golden_gate.py --home /tmp/golden-home        # build once, reuse
    .venv/bin/python bench/golden_gate.py --home /tmp/golden-home --variant "b1:feedback_beta=1.0"
    .venv/bin/python bench/golden_gate.py --home /tmp/golden-home --json
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

_common.configure(threads=2)

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import datetime as dt  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import yaml  # noqa: E402

from corpus_index import metrics  # noqa: E402
from corpus_index.config import Settings  # noqa: E402
from corpus_index.evaluation import GATE_METRICS, load_golden, rank_golden  # noqa: E402
from corpus_index.group_search import search_contexts  # noqa: E402
from corpus_index.home import Home  # noqa: E402
from corpus_index.retrieval_settings import (  # noqa: E402
    DEFAULT_RETRIEVAL,
    RETRIEVAL_KEYS,
    RetrievalSettings,
    retrieval_settings,
)
from corpus_index.search import Principal, Searcher  # noqa: E402
from tests.searchkit import build_home  # noqa: E402

OLD = RetrievalSettings(fusion="rrf", feedback_docs=0)
AS_OF = dt.datetime(2026, 1, 10, tzinfo=dt.UTC)  # the day after the messages sample's last one
MESSAGE_COVERS = ("conversation", "question", "incident", "acl")
SHOWN = 10  # ranks printed for a query that differs


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--home", type=Path, default=None, help="home to build in or reuse")
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        help="NAME:key=value,... a further retrieval setting (keys of namespaces.<ns>.retrieval)",
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    return ap.parse_args(argv)


def variants(specs: list[str]) -> dict[str, RetrievalSettings]:
    """``old`` and ``default``, then each ``--variant`` (checked as corpus.yaml checks it)."""
    out = {"old": OLD, "default": DEFAULT_RETRIEVAL}
    for spec in specs:
        name, _, body = spec.partition(":")
        values: dict[str, Any] = {}
        for item in filter(None, body.split(",")):
            key, _, raw = item.partition("=")
            if key not in RETRIEVAL_KEYS:
                sys.exit(f"error: --variant {spec!r}: unknown key {key!r}")
            values[key] = yaml.safe_load(raw)
        if not name or name in out:
            sys.exit(f"error: --variant {spec!r}: needs a new name before ':'")
        try:
            out[name] = retrieval_settings(values)
        except ValueError as exc:
            sys.exit(f"error: --variant {spec!r}: {exc}")
    return out


def sample_config(folder: Path) -> Path:
    """The bundled corpus.yaml with its paths made absolute (collections and golden sets)."""
    config = yaml.safe_load((_common.REPO / "corpus.yaml").read_text())
    for c in config["collections"].values():
        c["path"] = str(_common.REPO / c["path"])
    for ns in config["namespaces"].values():
        if "golden_set" in ns:
            ns["golden_set"] = str(_common.REPO / ns["golden_set"])
    config.pop("serve", None)
    path = folder / "corpus.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def open_home(folder: Path, say: Any) -> Home:
    """The sample built in ``folder`` (built now when it has no ACTIVE generations yet)."""
    folder.mkdir(parents=True, exist_ok=True)
    settings = Settings(config_path=sample_config(folder), home=folder / "home")
    home = Home(settings)
    if all(home.registry.active(ns) for ns in home.config.namespaces):
        return home
    t0 = time.perf_counter()
    home = build_home(settings)
    say(f"built the sample with MiniLM in {time.perf_counter() - t0:.1f} s")
    return home


def with_retrieval(home: Home, namespace: str, settings: RetrievalSettings) -> None:
    """``settings`` as the namespace's declared retrieval (in this process only)."""
    ns = home.config.namespaces[namespace]
    home.config.namespaces[namespace] = dataclasses.replace(
        ns, retrieval=settings, retrieval_declared=True
    )


def judged_sets(home: Home, named: dict[str, RetrievalSettings]) -> dict[str, Any]:
    """Per namespace with a golden set: each setting's gate metrics and per-query figures."""
    out: dict[str, Any] = {}
    for ns, conf in home.config.namespaces.items():
        if conf.golden_set is None:
            continue
        gen = home.registry.active(ns)
        if gen is None:
            sys.exit(f"error: namespace {ns} has no ACTIVE generation in {home.settings.home}")
        golden = load_golden(conf.golden_set)
        qrels = {q.id: q.relevant for q in golden.queries}
        runs: dict[str, dict[str, list[str]]] = {}
        for name, settings in named.items():
            with_retrieval(home, ns, settings)
            runs[name] = rank_golden(home, gen, golden).run
        with_retrieval(home, ns, conf.retrieval)
        out[ns] = {
            "golden_set": str(conf.golden_set.relative_to(_common.REPO)),
            "generation": gen.id,
            "queries": {q.id: q.text for q in golden.queries},
            "qrels": qrels,
            "runs": runs,
            "metrics": {
                name: metrics.evaluate(run, qrels, recall_ks=(5, 10)) for name, run in runs.items()
            },
            "per_query": {name: per_query(run, qrels) for name, run in runs.items()},
        }
    return out


def per_query(run: dict[str, list[str]], qrels: dict[str, dict[str, int]]) -> dict[str, Any]:
    return {
        q: {
            "recall@5": round(metrics.recall_at(run.get(q, []), rel, 5), 4),
            "mrr@10": round(metrics.mrr_at(run.get(q, []), rel, 10), 4),
            "ndcg@10": round(metrics.ndcg_at(run.get(q, []), rel, 10), 4),
        }
        for q, rel in qrels.items()
    }


def messages_set(home: Home, named: dict[str, RetrievalSettings]) -> dict[str, Any]:
    """Group-first top-3 completeness of each messages golden query, per setting."""
    queries = yaml.safe_load((_common.REPO / "golden" / "messages.yaml").read_text())["queries"]
    queries = [q for q in queries if q["covers"] in MESSAGE_COVERS]
    searcher = Searcher(home)
    conf = home.config.namespaces["messages"]
    out: dict[str, Any] = {"queries": {q["id"]: q["text"] for q in queries}, "per_query": {}}
    for name, settings in named.items():
        with_retrieval(home, "messages", settings)
        rows: dict[str, dict[str, int]] = {}
        for q in queries:
            found = search_contexts(
                searcher,
                q["text"],
                principal=Principal(q["tenant"], tuple(q["groups"])),
                k=3,
                as_of=AS_OF,
            )
            want = set(q["first"]["members"])
            top = [{m.unit_id for m in r.members} for r in found.records[:3]]
            rows[q["id"]] = {
                "complete": int(want <= set().union(*top)),
                "whole": int(any(want <= shown for shown in top)),
            }
        out["per_query"][name] = rows
    with_retrieval(home, "messages", conf.retrieval)
    out["rates"] = {
        name: {
            m: round(sum(r[m] for r in rows.values()) / len(rows), 4) for m in ("complete", "whole")
        }
        for name, rows in out["per_query"].items()
    }
    return out


def print_judged(ns: str, d: dict[str, Any], names: list[str]) -> None:
    base = names[0]
    print(
        f"\n== {ns}: {d['golden_set']}, {len(d['queries'])} queries, generation {d['generation']}"
    )
    print(f"  {'setting':<12}" + "".join(f"{m:>10}" for m in GATE_METRICS))
    for name in names:
        m = d["metrics"][name]
        delta = "".join(
            f" {m[g] - d['metrics'][base][g]:+.4f}" if name != base else "" for g in GATE_METRICS
        )
        print(
            f"  {name:<12}"
            + "".join(f"{m[g]:10.4f}" for g in GATE_METRICS)
            + (f"   vs {base}:{delta}" if delta else "")
        )
    for q, text in d["queries"].items():
        figures = {n: d["per_query"][n][q] for n in names}
        if all(figures[n] == figures[base] for n in names):
            continue
        print(f"  {q} {text!r}")
        for n in names:
            f = figures[n]
            ranks = _ranks(d["runs"][n][q], d["qrels"][q])
            print(
                f"    {n:<10} R@5 {f['recall@5']:.3f} MRR {f['mrr@10']:.3f} nDCG {f['ndcg@10']:.3f}"
                f"  top-{SHOWN} grades {ranks}"
            )


def _ranks(ranking: list[str], relevant: dict[str, int]) -> str:
    """The top ranks as grades (``2``, ``1``, ``.`` for unjudged), then relevant ones missed."""
    top = metrics.dedupe(ranking)[:SHOWN]
    shown = "".join(str(relevant.get(d, 0) or ".") for d in top)
    missed = sum(1 for d in relevant if d not in top)
    return shown + (f" (+{missed} relevant not in top {SHOWN})" if missed else "")


def print_messages(d: dict[str, Any], names: list[str]) -> None:
    base = names[0]
    print(f"\n== messages: golden/messages.yaml, {len(d['queries'])} queries, group-first, top 3")
    for name in names:
        r = d["rates"][name]
        print(f"  {name:<12} complete {r['complete']:.4f}  whole {r['whole']:.4f}")
    for q, text in d["queries"].items():
        rows = {n: d["per_query"][n][q] for n in names}
        if all(rows[n] == rows[base] for n in names):
            continue
        figures = "  ".join(
            f"{n} complete {r['complete']} whole {r['whole']}" for n, r in rows.items()
        )
        print(f"  {q} {text!r}: {figures}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    named = variants(args.variant)
    say = (
        (lambda m: print(m, file=sys.stderr, flush=True))
        if args.json
        else (lambda m: print(m, flush=True))
    )
    with _common.bench_home(args.home, "bench-golden-") as folder:
        home = open_home(folder, say)
        t0 = time.perf_counter()
        judged = judged_sets(home, named)
        messages = messages_set(home, named)
        say(
            f"asked every golden query under {len(named)} settings in {time.perf_counter() - t0:.1f} s"
        )
    names = list(named)
    if args.json:
        out = {
            "settings": {n: s.to_json() for n, s in named.items()},
            "judged": {
                ns: {k: v for k, v in d.items() if k not in ("qrels",)} for ns, d in judged.items()
            },
            "messages": messages,
        }
        print(json.dumps(out, indent=2))
        return 0
    for name, s in named.items():
        print(f"{name}: {json.dumps(s.to_json())}")
    for ns, d in judged.items():
        print_judged(ns, d, names)
    print_messages(messages, names)
    return 0


if __name__ == "__main__":
    sys.exit(main())
