"""HTTP load: ``corpus serve`` under N concurrent clients, against the in-process ``Searcher``.

    .venv/bin/python bench/http_load.py                       # sample corpus + 100,000 rows
    .venv/bin/python bench/http_load.py --rows 20000 --duration 30 --clients 16
    .venv/bin/python bench/http_load.py --json

(Named ``http_load.py``, not ``http.py``: a script's folder is first on ``sys.path``, and a
``bench/http.py`` would shadow the standard library's ``http`` package that httpx and uvicorn
import.)

Two targets, each served by a real ``corpus serve`` subprocess on a loopback port (with
``--no-trace``, as the in-process side stores no trace either):

* ``sample``: the bundled sample deals (both tenants), built in-process with ``hash:v1-256``;
* ``synthetic``: a generation of ``--rows`` rows built as ``bench/latency.py`` builds it
  (5 tenants, 4 ACL groups, FTS + ANN indexes), queried with ``hash:v1-384`` text embeddings.

For each target: first the *ratio* phase, one request at a time, HTTP and in-process
``Searcher.search`` interleaved query by query (same text, principal, k, mode), giving the
ratio of the two p50s (target <= 1.2); then the *load* phase, ``--clients`` threads each with
its own connection sending queries for ``--duration`` seconds: throughput, p50/p95/p99 and
errors (any status but 200; target 0). The machine is shared: compare within one run.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import _common

TARGET_RATIO = 1.2


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=100_000, help="rows of the synthetic generation")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of load per target")
    ap.add_argument("--queries", type=int, default=100, help="queries in the ratio phase")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--mode", default="hybrid", choices=("dense", "lexical", "hybrid"))
    ap.add_argument("--targets", default="sample,synthetic")
    ap.add_argument("--home", type=Path, default=None, help="keep the built homes here")
    ap.add_argument("--json", action="store_true")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _common.configure(threads=1)
    say = (lambda m: print(m, file=sys.stderr, flush=True)) if args.json else print
    report: dict[str, Any] = {"clients": args.clients, "duration_s": args.duration, "k": args.k}
    with _common.bench_home(args.home, "bench-http-") as root:
        for target in args.targets.split(","):
            folder = root / target
            folder.mkdir(parents=True, exist_ok=True)
            say(f"== {target}")
            report[target] = run_target(target, folder, args, say)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for target in args.targets.split(","):
            r = report[target]
            say(
                f"{target}: {r['rows']} rows; ratio HTTP p50 {r['http_p50_ms']} ms / in-process "
                f"p50 {r['inproc_p50_ms']} ms = {r['ratio']} (target <= {TARGET_RATIO}); load "
                f"{r['throughput_rps']} req/s, p50 {r['load_p50_ms']} ms, p95 {r['load_p95_ms']}"
                f" ms, p99 {r['load_p99_ms']} ms, errors {r['errors']} of {r['requests']}"
            )
    return 0


def build(target: str, folder: Path, args: argparse.Namespace) -> tuple[Path, list[Any]]:
    """The target's config and home, built; returns the config and the (query, principal) pool."""
    import numpy as np

    from corpus_index.config import Settings
    from corpus_index.eligibility import Principal
    from corpus_index.home import Home

    if target == "sample":
        from tests.searchkit import build_home, sample_config

        config = sample_config(folder)
        settings = Settings(config_path=config, home=folder / "home")
        if Home(settings).registry.active("deals") is None:
            build_home(settings)
        principals = [
            Principal("meridian", ("uw-team", "credit-committee")),
            Principal("harbor", ("harbor-analysts", "harbor-credit")),
        ]
        words = [
            "roof replacement capital plan",
            "anchor tenant lease expiry",
            "insurance premiums coastal windstorm",
            "sponsor experience",
            "rent growth jobs",
            "occupancy",
            "refinance risk",
            "deferred maintenance",
            "flood zone",
            "student housing demand",
        ]
        rng = np.random.default_rng(11)
        pool = [(words[i % len(words)], principals[int(rng.integers(2))]) for i in range(200)]
        return config, pool
    import latency

    latency.np = np
    config = latency.write_config(folder)
    corpus = Home(Settings(config_path=config, home=folder))
    if corpus.registry.active(latency.NAMESPACE) is None:
        ns = argparse.Namespace(rows=args.rows, clusters=200, seed=7)
        latency.build_generation(corpus, ns, print)
    synth = latency.Synth(1000, 200, 8)
    principals = [Principal(t, latency.GROUPS) for t in latency.TENANTS]
    pool = [
        (synth.text(int(c), 3, 1), principals[i % len(principals)])
        for i, c in enumerate(synth.rng.integers(0, 200, size=200))
    ]
    return config, pool


def run_target(target: str, folder: Path, args: argparse.Namespace, say: Any) -> dict[str, Any]:
    import httpx

    from corpus_index.config import Settings
    from corpus_index.home import Home
    from corpus_index.metrics import percentile
    from corpus_index.search import Searcher
    from tests.support.http_server import running_server, serve_config

    t0 = time.perf_counter()
    config, pool = build(target, folder, args)
    settings = Settings(config_path=config, home=folder / "home" if target == "sample" else folder)
    namespace = "deals" if target == "sample" else "bench"
    keys = {}
    key_of = {}
    for i, p in enumerate({p for _, p in pool}):
        keys[f"ck_bench-{i}"] = (p.tenant, list(p.groups))
        key_of[p] = f"ck_bench-{i}"
    serve_config(config, keys, max_concurrent_embeddings=4)
    say(f"built in {time.perf_counter() - t0:.0f} s")
    searcher = Searcher(Home(settings))
    rows = searcher.corpus.store.count(searcher.resolve_generation(namespace, None))
    path = f"/v1/namespaces/{namespace}/search"

    def body(q: str) -> dict[str, Any]:
        return {"query": q, "k": args.k, "mode": args.mode}

    with running_server(
        config, settings.home, log=folder / "server.log", args=["--no-trace"]
    ) as url:
        client = httpx.Client(base_url=url, timeout=60)
        for q, p in pool[:10]:  # warm both sides (table handles, caches)
            client.post(path, json=body(q), headers={"Authorization": f"Bearer {key_of[p]}"})
            searcher.search(q, principal=p, k=args.k, namespace=namespace, mode=args.mode)
        http_ms, local_ms = [], []
        for i, (q, p) in enumerate(pool[: args.queries]):
            sides = ("http", "local") if i % 2 == 0 else ("local", "http")
            for side in sides:
                t = time.perf_counter()
                if side == "http":
                    r = client.post(
                        path, json=body(q), headers={"Authorization": f"Bearer {key_of[p]}"}
                    )
                    r.raise_for_status()
                    http_ms.append((time.perf_counter() - t) * 1000)
                else:
                    searcher.search(q, principal=p, k=args.k, namespace=namespace, mode=args.mode)
                    local_ms.append((time.perf_counter() - t) * 1000)
        client.close()
        load = run_load(url, path, pool, key_of, body, args)
    http_p50, local_p50 = percentile(http_ms, 50), percentile(local_ms, 50)
    return {
        "rows": rows,
        "http_p50_ms": round(http_p50, 1),
        "inproc_p50_ms": round(local_p50, 1),
        "ratio": round(http_p50 / local_p50, 2),
        **load,
    }


def run_load(
    url: str, path: str, pool: list[Any], key_of: dict[Any, str], body: Any, args: Any
) -> dict[str, Any]:
    import httpx

    from corpus_index.metrics import percentile

    latencies: list[float] = []
    errors: list[int] = []
    lock = threading.Lock()
    stop = time.monotonic() + args.duration

    def client(n: int) -> None:
        with httpx.Client(base_url=url, timeout=120) as c:
            i = n
            while time.monotonic() < stop:
                q, p = pool[i % len(pool)]
                i += args.clients
                t = time.perf_counter()
                try:
                    r = c.post(path, json=body(q), headers={"Authorization": f"Bearer {key_of[p]}"})
                    status = r.status_code
                except httpx.HTTPError:
                    status = 0
                ms = (time.perf_counter() - t) * 1000
                with lock:
                    (latencies if status == 200 else errors).append(ms if status == 200 else status)

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(n,)) for n in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    return {
        "requests": len(latencies) + len(errors),
        "errors": len(errors),
        "throughput_rps": round(len(latencies) / elapsed, 1),
        "load_p50_ms": round(percentile(latencies, 50), 1),
        "load_p95_ms": round(percentile(latencies, 95), 1),
        "load_p99_ms": round(percentile(latencies, 99), 1),
    }


if __name__ == "__main__":
    sys.exit(main())
