"""Group-first search against unit-only search (seed "Linked Context V2" §6, success criterion 5).

Two parts:

1. On the messages sample and its golden set (``golden/messages.yaml``, real MiniLM model by
   default): for each conversation, question, incident and ACL query, asked as its principal,
   whether the expected group's members all show in the top 3 records (``complete``: in the
   union of the three; ``whole``: inside one record; ``own``: inside one record that is not a
   day at the place, which holds everything written there that day), for group-first and for unit-only search
   (``search_contexts(..., units=True)``) in the same run.
2. Latency on a generated stream (``tests/streamgen.py``, one tenant, five channels): group-first
   p50/p95 against unit-only p50/p95 at the same k, queries alternated, after a warm-up.

    python bench/group_search.py [--messages 50000] [--embedder st:all-MiniLM-L6-v2]
        [--latency-embedder hash:v1-256] [--skip-golden] [--skip-latency] [--home DIR]
        [--reuse]

``--home DIR --reuse`` searches the latency home a former run built under ``DIR`` instead of
building it again (the 50,000-message build takes minutes; built there first if there is none);
its indexes are first brought up to the current code's.
"""

from __future__ import annotations

import _common

_common.configure(threads=2)

import argparse  # noqa: E402
import datetime as dt  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import yaml  # noqa: E402

from corpus_index.config import Settings  # noqa: E402
from corpus_index.group_search import search_contexts  # noqa: E402
from corpus_index.home import Home  # noqa: E402
from corpus_index.search import Principal, Searcher  # noqa: E402
from tests.searchkit import build_home, messages_config  # noqa: E402
from tests.streamgen import TOPICS, stream, write_jsonl  # noqa: E402

FILE_MESSAGES = 10_000  # messages a stream file, as bench/linked_cost.py writes them

AS_OF = dt.datetime(2026, 1, 10, tzinfo=dt.UTC)  # the day after the sample's last message
COVERS = ("conversation", "question", "incident", "acl", "decision")


def golden(root: Path, embedder: str) -> dict[str, Any]:
    root.mkdir(parents=True)
    t0 = time.perf_counter()
    config = messages_config(root, embedder=embedder)
    corpus = build_home(Settings(config_path=config, home=root / "home"))
    built = time.perf_counter() - t0
    return {"embedder": embedder, "build_s": round(built, 1), **judge(Searcher(corpus))}


def judge(searcher: Searcher) -> dict[str, Any]:
    """Top-3 completeness of each golden query's expected group, group-first and unit-only."""
    queries = yaml.safe_load((_common.REPO / "golden" / "messages.yaml").read_text())["queries"]
    rows: dict[str, dict[str, list[int]]] = {}
    misses: dict[str, list[str]] = {"groups": [], "units": [], "groups_not_own": []}
    for q in queries:
        if q["covers"] not in COVERS:
            continue
        principal = Principal(q["tenant"], tuple(q["groups"]))
        want = set(q["first"]["members"])
        for how, units in (("groups", False), ("units", True)):
            found = search_contexts(
                searcher, q["text"], principal=principal, k=3, units=units, as_of=AS_OF
            )
            top = found.records[:3]
            shown = {m.unit_id for r in top for m in r.members}
            complete = want <= shown
            whole = any(want <= {m.unit_id for m in r.members} for r in top)
            # whole inside a record of its own kind, not inside a day at the place (which
            # holds everything of that day there)
            own = any(
                want <= {m.unit_id for m in r.members} for r in top if r.type != "daily_context"
            )
            tally = rows.setdefault(
                f"{q['covers']}/{how}", {"complete": [], "whole": [], "own": []}
            )
            tally["complete"].append(int(complete))
            tally["whole"].append(int(whole))
            tally["own"].append(int(own))
            if not complete:
                misses[how].append(q["id"])
            if how == "groups" and not own:
                misses["groups_not_own"].append(q["id"])
    rates: dict[str, Any] = {
        key: {m: round(sum(v) / len(v), 3) for m, v in t.items()} | {"n": len(t["complete"])}
        for key, t in sorted(rows.items())
    }
    for how in ("groups", "units"):
        allc = [x for k, t in rows.items() if k.endswith(how) for x in t["complete"]]
        allw = [x for k, t in rows.items() if k.endswith(how) for x in t["whole"]]
        allo = [x for k, t in rows.items() if k.endswith(how) for x in t["own"]]
        rates[f"all/{how}"] = {
            "complete": round(sum(allc) / len(allc), 3),
            "whole": round(sum(allw) / len(allw), 3),
            "own": round(sum(allo) / len(allo), 3),
            "n": len(allc),
        }
    return {"rates": rates, "misses": misses}


def _stream_config(root: Path, n: int, embedder: str) -> Path:
    """The generated stream of ``n`` messages under ``root/stream`` and its corpus.yaml."""
    folder = root / "stream"
    folder.mkdir(parents=True)
    messages = stream(n, channels=5, seed=7)
    for k in range(0, len(messages), FILE_MESSAGES):  # a file counts against max_document_bytes
        write_jsonl(
            messages[k : k + FILE_MESSAGES], folder / f"chat-{k // FILE_MESSAGES:03d}.jsonl"
        )
    config = {
        "collections": {
            "chat": {
                "kind": "messages",
                "path": str(folder),
                "tenant": "t1",
                "acl_groups": ["staff"],
                "namespace": "chat",
            }
        },
        "profiles": {"p": {"embedder": embedder, "namespace": "chat"}},
        "namespaces": {"chat": {"eval_gate": "off"}},
    }
    path = root / "corpus.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _reused(root: Path, n: int, embedder: str) -> Home:
    """The home a former run built under ``root`` (same messages and embedder, or exit), its
    indexes brought up to this code's (``refresh_indexes``: an index added since is built)."""
    config = yaml.safe_load((root / "corpus.yaml").read_text(encoding="utf-8"))
    had = sum(1 for f in (root / "stream").glob("*.jsonl") for _ in f.open(encoding="utf-8"))
    was = config["profiles"]["p"]["embedder"]
    if had != n or was != embedder:
        sys.exit(
            f"error: --reuse: {root} holds {had} messages embedded by {was}, not {n} by {embedder}"
        )
    corpus = Home(Settings(config_path=root / "corpus.yaml", home=root / "home"))
    active = corpus.registry.active("chat")
    if active is None:
        sys.exit(f"error: --reuse: {root / 'home'} has no ACTIVE generation of namespace chat")
    corpus.store.refresh_indexes(active)
    return corpus


def latency(root: Path, n: int, embedder: str, rounds: int, *, reuse: bool) -> dict[str, Any]:
    t0 = time.perf_counter()
    built: float | None = None
    if reuse and (root / "corpus.yaml").is_file():
        corpus = _reused(root, n, embedder)
    else:
        config = _stream_config(root, n, embedder)
        corpus = build_home(Settings(config_path=config, home=root / "home"))
        built = round(time.perf_counter() - t0, 1)
    searcher = Searcher(corpus)
    principal = Principal("t1", ("staff",))
    rnd = random.Random(3)
    words = [w for topic in TOPICS.values() for w in topic.split()]
    queries = [" ".join(rnd.sample(words, 3)) for _ in range(rounds)]
    # "search": the plain unit search (``corpus search --units``: hits, no records);
    # "units": unit-only search in the record shape (``search_contexts(units=True)``)
    times: dict[str, list[float]] = {"groups": [], "units": [], "search": []}
    for q in queries[:3]:  # warm-up: tables opened, indexes cached, analysis modules loaded
        search_contexts(searcher, q, principal=principal, k=5, as_of=AS_OF)
        search_contexts(searcher, q, principal=principal, k=5, units=True, as_of=AS_OF)
        searcher.search(q, principal=principal, k=5)
    groups_found = []
    for q in queries:
        for how, units in (("groups", False), ("units", True)):
            t = time.perf_counter()
            found = search_contexts(searcher, q, principal=principal, k=5, units=units, as_of=AS_OF)
            times[how].append((time.perf_counter() - t) * 1000)
            if not units:
                groups_found.append(found.trace["returned"]["groups"])
        t = time.perf_counter()
        searcher.search(q, principal=principal, k=5)
        times["search"].append((time.perf_counter() - t) * 1000)
    table = corpus.store.table(corpus.registry.active("chat"))
    out: dict[str, Any] = {
        "messages": n,
        "rows": table.count_rows(),
        "group_rows": table.count_rows("kind = 'group'"),
        "embedder": embedder,
        "build_s": built,  # None: a kept home reused (--reuse)
        "indexes": sorted(i.name for i in table.list_indices()),
        "queries": len(queries),
        "k": 5,
        "mean_groups_returned": round(statistics.mean(groups_found), 2),
    }
    for how, ms in times.items():
        ms.sort()
        out[how] = {
            "p50_ms": round(statistics.median(ms), 1),
            "p95_ms": round(ms[int(0.95 * (len(ms) - 1))], 1),
        }
    out["p50_ratio_vs_search"] = round(out["groups"]["p50_ms"] / out["search"]["p50_ms"], 2)
    out["p50_ratio_vs_units"] = round(out["groups"]["p50_ms"] / out["units"]["p50_ms"], 2)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--embedder", default="st:all-MiniLM-L6-v2", help="golden-set embedder")
    ap.add_argument("--latency-embedder", default="hash:v1-256", help="latency-home embedder")
    ap.add_argument("--messages", type=int, default=50_000, help="generated messages (latency)")
    ap.add_argument("--queries", type=int, default=40, help="latency queries")
    ap.add_argument("--skip-golden", action="store_true", help="no golden-set part")
    ap.add_argument("--skip-latency", action="store_true", help="no latency part")
    ap.add_argument("--home", type=Path, help="build here (kept) instead of a temporary folder")
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="latency: search the home a former run built under --home (same --messages and "
        "--latency-embedder) instead of building it again (built first if there is none)",
    )
    args = ap.parse_args(argv)
    if args.reuse and args.home is None:
        ap.error("--reuse needs --home (the folder a former run built in)")
    report: dict[str, Any] = {}
    with _common.bench_home(args.home, "group-search-") as home:
        if not args.skip_golden:
            report["golden"] = golden(home / "golden", args.embedder)
            print(json.dumps(report["golden"], indent=1), flush=True)
        if not args.skip_latency:
            report["latency"] = latency(
                home / "latency",
                args.messages,
                args.latency_embedder,
                args.queries,
                reuse=args.reuse,
            )
            print(json.dumps(report["latency"], indent=1), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
