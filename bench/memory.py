"""Peak memory of a full build against corpus size: does it level off?

For each size (default 2,500, 5,000, 10,000 and 20,000 generated deals, four embeddable
sections each; ``hash:v1-384``, so embedding costs next to nothing and the figures are the
pipeline's own), writes the deals, then runs one full build (``corpus sync``: three Dagster
runs) in its own process, through ``bench/incremental.py``'s child mode, and prints its peak
RSS, each step's peak RSS and rise, and the size of the data it produced.

A pipeline that held the corpus would grow by at least the data it holds: its peak RSS would
rise, per 1,000 deals, at least by what the index data on disk rises (LanceDB: the generation
table and the embedding cache). Between the two largest sizes the peak must rise by less than
a quarter of that (``--max-share``), or the verdict is FAIL.

Usage (from the repository root)::

    .venv/bin/python bench/memory.py                          # 2,500 .. 20,000 deals, ~20 min
    .venv/bin/python bench/memory.py --deals 1000,2000,4000   # quicker, less telling
    .venv/bin/python bench/memory.py --json
    .venv/bin/python bench/memory.py --deals 2500,5000,10000 --shards 8   # the collection in 8 shards

With ``--shards N`` the collection is configured with ``shards: N``: every shard is its own
ingest and embed run, so a step holds one shard's partition.

Options: ``--deals N,N,...``, ``--shards N`` (1), ``--home DIR`` (an empty folder to build in,
kept afterwards; default a temporary folder, removed), ``--threads`` (2), ``--max-share``
(0.25), ``--json``.
Peaks move by up to ~50 MiB between runs of the same size.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402  (sets up sys.path for the project; imports nothing heavy)

HASH_SPEC = "hash:v1-384"
INCREMENTAL = Path(__file__).resolve().parent / "incremental.py"
MARKER = "BENCH_PHASE_RESULT "


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--deals", default="2500,5000,10000,20000", help="sizes, comma-separated")
    ap.add_argument("--home", type=Path, default=None, help="empty folder to build in (kept)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--shards", type=int, default=1, help="hash shards of the collection")
    ap.add_argument("--max-share", type=float, default=0.25)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    try:
        args.sizes = sorted({int(n) for n in str(args.deals).split(",")})
    except ValueError:
        ap.error(f"--deals {args.deals!r}: expected sizes like 2500,5000,10000")
    if len(args.sizes) < 2 or args.sizes[0] < 1:
        ap.error("--deals needs at least two sizes of at least 1 deal")
    if args.shards < 1:
        ap.error(f"--shards {args.shards}: must be at least 1")
    return args


def build(args: argparse.Namespace, root: Path, deals: int) -> dict[str, Any]:
    """One full build of a fresh ``deals``-deal home, in a child process; its figures."""
    source, home = root / f"source-{deals}", root / f"home-{deals}"
    t0 = time.perf_counter()
    config = _common.deals_home(
        source, home / "corpus.yaml", deals, embedder=HASH_SPEC, shards=args.shards
    )
    generate_s = time.perf_counter() - t0
    if not args.json:
        print(f"  ... {deals} deals", file=sys.stderr, flush=True)
    cmd = [sys.executable, str(INCREMENTAL), "--phase", "full", "--home", str(home)]
    cmd += ["--config", str(config), "--threads", str(args.threads)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    found = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARKER)]
    if not found:
        sys.exit(f"error: the {deals}-deal build printed no result:\n{proc.stderr[-4000:]}")
    phase: dict[str, Any] = json.loads(found[-1][len(MARKER) :])
    if not phase["ok"]:
        sys.exit(f"error: the {deals}-deal build failed:\n{proc.stderr[-4000:]}")
    return {
        "deals": deals,
        "inputs": phase["embedded"] + phase["cache_hits"],
        "generate_s": round(generate_s, 2),
        "build_s": phase["wall_s"],
        "rss_start_mib": phase["rss_start_mib"],
        "peak_mib": phase["rss_peak_sampled_mib"],
        "maxrss_mib": phase["maxrss_mib"],
        "step_rise_mib": {step: m["rise_mib"] for step, m in phase.get("step_memory", {}).items()},
        "step_peak_mib": {step: m["peak_mib"] for step, m in phase.get("step_memory", {}).items()},
        "lance_mib": round(_common.dir_mib(home / "lance"), 2),
        "warehouse_mib": round(_common.dir_mib(home / "warehouse"), 2),
        "corpus_mib": round(_common.dir_mib(source), 2),
    }


def verdict(runs: list[dict[str, Any]], max_share: float) -> dict[str, Any]:
    """Growth per 1,000 deals between consecutive sizes, and the verdict on the last interval."""
    steps = []
    for a, b in zip(runs, runs[1:], strict=False):
        per_k = 1000.0 / (b["deals"] - a["deals"])
        peak = (b["maxrss_mib"] - a["maxrss_mib"]) * per_k
        data = (b["lance_mib"] - a["lance_mib"]) * per_k
        steps.append(
            {
                "from": a["deals"],
                "to": b["deals"],
                "peak_mib_per_1000": round(peak, 2),
                "lance_mib_per_1000": round(data, 2),
                "share": round(peak / data, 3) if data > 0 else None,
            }
        )
    last = steps[-1]
    return {
        "intervals": steps,
        "max_share": max_share,
        "pass": last["share"] is not None and last["share"] < max_share,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _common.configure(threads=args.threads)
    with _common.bench_home(args.home, "bench-memory-", must_be_empty=True) as root:
        runs = [build(args, root, n) for n in args.sizes]
    result = {"embedder": HASH_SPEC, "threads": args.threads, "shards": args.shards, "runs": runs}
    result.update(verdict(runs, args.max_share))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_text(result)
    return 0 if result["pass"] else 1


def print_text(r: dict[str, Any]) -> None:
    runs = r["runs"]
    print(
        f"memory benchmark: full builds, {r['embedder']}, {r['threads']} threads, "
        f"{r['shards']} shard(s)"
    )
    print(
        f"  {'deals':>7} {'inputs':>7} {'build s':>8} {'peak RSS':>9} {'ru_maxrss':>9} "
        f"{'LanceDB':>8} {'warehouse':>9} {'corpus':>7}   (MiB)"
    )
    for run in runs:
        print(
            f"  {run['deals']:7d} {run['inputs']:7d} {run['build_s']:8.1f} {run['peak_mib']:9.0f} "
            f"{run['maxrss_mib']:9.0f} {run['lance_mib']:8.1f} {run['warehouse_mib']:9.1f} "
            f"{run['corpus_mib']:7.1f}"
        )
    print(
        "  each step's sampled peak RSS / its rise over the RSS it started from, MiB "
        "(the highest peak is the build's)"
    )
    steps = list(runs[-1]["step_rise_mib"])
    print("    " + f"{'step':<17}" + "".join(f"{run['deals']:>12d}" for run in runs))
    for step in steps:
        cells = "".join(
            f"{run.get('step_peak_mib', {}).get(step, 0.0):7.0f}/"
            f"{run['step_rise_mib'].get(step, 0.0):<4.0f}"
            for run in runs
        )
        print(f"    {step:<17}{cells}")
    print("  growth per 1,000 deals     peak RSS   LanceDB data   share")
    for iv in r["intervals"]:
        share = "n/a" if iv["share"] is None else f"{iv['share']:.2f}"
        print(
            f"    {iv['from']:>6} -> {iv['to']:<6} {iv['peak_mib_per_1000']:13.1f} "
            f"{iv['lance_mib_per_1000']:14.1f} {share:>7}"
        )
    last = r["intervals"][-1]
    print(
        f"  between the two largest sizes the peak grows by {last['share']} of the data's "
        f"growth; target < {r['max_share']}: {'PASS' if r['pass'] else 'FAIL'}"
    )


if __name__ == "__main__":
    sys.exit(main())
