"""Incremental sync: full build of a generated collection, then one changed block, synced again.

Writes N generated ``.uw.md`` deals (four embeddable sections each, no two sections alike, so
every block is a distinct input) to a temporary folder, configures one ``uw_deals`` collection
and one profile, and runs ``DagsterRunner.sync`` (``definitions.dagster_runner()``) (what ``corpus sync`` runs) in these phases,
each in its own child process so each has its own peak RSS, as separate ``corpus sync``
invocations would:

1. ``tiny-build``, ``tiny-noop``: a one-deal home, built, then synced with nothing changed.
   The no-op sync of a one-deal home is the fixed cost of a sync (three Dagster runs: ingest,
   embed, generation, each with its run setup, event-log writes and step launches) with
   next to no data work: the "fixed per-run start overhead".
2. ``full``: the full build of the N-deal home.
3. ``noop``: the N-deal home synced again with nothing changed (fixed cost + whatever work is
   still proportional to the corpus size rather than to the change).
4. one block (``market_analysis`` of one deal) is edited, and ``incremental`` syncs it. Its
   ``embedded`` must be exactly 1.

Every child imports dagster, the project and the libraries the steps import on first use
(Great Expectations, LanceDB) before its timer starts, as a ``corpus sync`` process does once
at start: their import time does not depend on the corpus or the change, and timing it inside
each sync only adds its noise (a second or more from run to run) to both sides of the
comparison.

With ``--shards 1,8`` the phases 2-4 run once per shard count, each in a home of its own over
the same generated deals (the collection configured with ``shards: N``), in the same run, so
the counts are compared under the same load. With shards, the one-deal change runs only its
shard's partitions (an ingest and an embed run) and the generation run: three Dagster runs,
like the one-deal home's no-op sync that measures the fixed overhead.

Figures: seconds of each phase, embedded counts, Dagster's overhead outside steps and each
step's seconds (from the instance's run records), the incremental cost beyond the fixed
overhead as a % of the full build (target <= 2%), and memory: ru_maxrss of each phase's process
and a VmRSS peak sampled every 50 ms during the sync, next to the corpus and warehouse sizes.

Usage (from the repository root)::

    .venv/bin/python bench/incremental.py                   # 10,000 deals, hash:v1-384 (~7 min)
    .venv/bin/python bench/incremental.py --deals 2000      # quicker
    .venv/bin/python bench/incremental.py --model           # MiniLM, 1,000 deals by default
    .venv/bin/python bench/incremental.py --model --deals 10000   # ~40,000 inputs: 25+ min
    .venv/bin/python bench/incremental.py --json
    .venv/bin/python bench/incremental.py --deals 2000 --profile 30   # + a cProfiled extra sync
    .venv/bin/python bench/incremental.py --deals 10000 --shards 1,8  # unsharded vs 8 shards

``hash:v1-384`` makes embedding nearly free, so the figures isolate the pipeline's own cost;
``--model`` (``st:all-MiniLM-L6-v2``) shows the same with a real model, whose load time is
measured and excluded in every phase alike (each child loads and warms it before its sync).
Options: ``--deals N``, ``--shards N[,N...]`` (1), ``--model``, ``--home DIR`` (an empty folder to build in, kept
afterwards; default a temporary folder, removed), ``--threads`` (2), ``--json``.

Other processes on the machine share the cores: figures are noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402  (sets up sys.path for the project; imports nothing heavy)

TARGET_PCT = 2.0  # of the full build, for a one-document change
TARGET_PCT_AT_100K = 1.0  # from 100,000 deals on (with shards)
HASH_SPEC = "hash:v1-384"
MODEL_SPEC = "st:all-MiniLM-L6-v2"
TENANT, ACL = _common.DEALS_TENANT, _common.DEALS_ACL
COLLECTION = _common.DEALS_COLLECTION
CHANGED_DEAL = 4242  # the deal whose market_analysis block is edited (mod --deals)
MARKER = "BENCH_PHASE_RESULT "


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--deals", type=int, default=None, help="10000 (hash) / 1000 (--model)")
    ap.add_argument("--model", action="store_true", help=f"embed with {MODEL_SPEC}")
    ap.add_argument("--home", type=Path, default=None, help="empty folder to build in (kept)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="after the measured phases, edit the block again and run one more incremental "
        "sync under cProfile; print its N most expensive functions (cumulative and own time)",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=3,
        metavar="N",
        help="measure the fixed overhead and the incremental sync N times each, interleaved "
        "(each incremental sync changes the block again), and compare their medians",
    )
    ap.add_argument(
        "--shards",
        default="1",
        metavar="N[,N...]",
        help="hash shards of the collection; several counts are measured one after the other",
    )
    ap.add_argument(
        "--again",
        type=Path,
        default=None,
        metavar="RESULT.json",
        help="measure only the fixed overhead and the one-deal change again, with this code, "
        "on the home an earlier run kept (--home, the same folder), against that run's full "
        "build (RESULT.json: its --json output)",
    )
    ap.add_argument("--phase", default=None, help=argparse.SUPPRESS)  # child process mode
    ap.add_argument("--config", type=Path, default=None, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def target_pct(deals: int) -> float:
    return TARGET_PCT_AT_100K if deals >= 100_000 else TARGET_PCT


# -- child: one timed sync --------------------------------------------------------------------


def child(args: argparse.Namespace) -> int:
    _common.configure(threads=args.threads)
    _common.point_project_at(args.config, args.home)
    t0 = time.perf_counter()
    import great_expectations  # noqa: F401  (the libraries the steps import on first use)
    import lancedb  # noqa: F401
    import numpy  # noqa: F401  (loaded under the thread settings above)

    from corpus_index.config import Settings
    from pipelines import runner  # noqa: F401  (dagster and the project, imported untimed)

    import_s = time.perf_counter() - t0
    model_load_s = 0.0
    if args.model:
        _common.set_torch_threads(args.threads)
        from corpus_index.embedders import local

        t0 = time.perf_counter()
        model = local._load(local.model_path(MODEL_SPEC[3:]))
        model.encode(["warm up"], show_progress_bar=False)
        model_load_s = time.perf_counter() - t0
    settings = Settings(config_path=args.config, home=args.home)
    rss_start = _common.rss_mib()
    cpu0 = time.process_time()
    profile_text = ""
    with _common.RssSampler() as mem:
        if args.profile:
            import cProfile
            import io
            import pstats

            profiler = cProfile.Profile()
            timing = profiler.runcall(_common.timed_sync, settings)
            buf = io.StringIO()
            stats = pstats.Stats(profiler, stream=buf).strip_dirs()
            stats.sort_stats("cumulative").print_stats(args.profile)
            stats.sort_stats("tottime").print_stats(args.profile)
            profile_text = buf.getvalue()
        else:
            timing = _common.timed_sync(settings)
    out = {
        "phase": args.phase,
        "import_s": round(import_s, 3),
        "model_load_s": round(model_load_s, 3),
        "cpu_s": round(time.process_time() - cpu0, 3),
        "rss_start_mib": round(rss_start, 1),
        "rss_peak_sampled_mib": round(mem.peak, 1),
        "maxrss_mib": round(_common.maxrss_mib(), 1),
        **timing.to_json(),
        "step_memory": timing.step_memory(mem),
    }
    if profile_text:
        out["profile"] = profile_text
    print(MARKER + json.dumps(out), flush=True)
    return 0 if timing.report.ok else 1


def run_phase(args: argparse.Namespace, phase: str, home: Path, config: Path) -> dict[str, Any]:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--phase",
        phase,
        "--home",
        str(home),
        "--config",
        str(config),
        "--threads",
        str(args.threads),
    ]
    if args.model:
        cmd.append("--model")
    if phase == "profiled":
        cmd += ["--profile", str(args.profile)]
    if not args.json:
        print(f"  ... {phase}", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
    for line in proc.stdout.splitlines():
        if line.startswith(MARKER):
            result: dict[str, Any] = json.loads(line[len(MARKER) :])
            if not result["ok"]:
                sys.exit(f"error: phase {phase}: a run failed: {result['failed_runs']}")
            return result
    sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-8000:])
    sys.exit(f"error: phase {phase} exited {proc.returncode} without a result")


# -- parent: build the corpus, run the phases, report -----------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.phase:
        return child(args)
    deals = args.deals if args.deals is not None else (1000 if args.model else 10_000)
    if deals < 1:
        sys.exit("error: --deals must be at least 1")
    try:
        counts = [int(n) for n in str(args.shards).split(",")]
    except ValueError:
        sys.exit(f"error: --shards {args.shards!r}: expected counts like 1,8")
    if not counts or min(counts) < 1:
        sys.exit("error: --shards counts must be at least 1")
    _common.configure(threads=args.threads)
    if args.again is not None:
        result = again(args, json.loads(args.again.read_text(encoding="utf-8")))
        if args.json:
            print(json.dumps(result, indent=2))
        return 0 if result["pass_incremental"] else 1
    with _common.bench_home(args.home, "bench-incremental-", must_be_empty=True) as root:
        results = [run(args, root, deals, shards, k) for k, shards in enumerate(counts)]
    if len(results) > 1:
        if args.json:
            print(json.dumps({"by_shards": results}, indent=2))
        else:
            print_comparison(results)
    elif args.json:
        print(json.dumps(results[0], indent=2))
    return 0 if all(r["pass_incremental"] for r in results) else 1


def run(
    args: argparse.Namespace, root: Path, deals: int, shards: int = 1, k: int = 0
) -> dict[str, Any]:
    """The phases for one shard count; the deals are generated by the first (``k`` 0) and
    reused by the next, whose changes use variants of their own."""
    embedder = MODEL_SPEC if args.model else HASH_SPEC
    notes: list[str] = []
    if args.model:
        notes.append(
            f"MiniLM embeds roughly 25-30 short passages/s on 2 idle cores (fewer when they are "
            f"shared): {deals} deals x 4 sections = {4 * deals} inputs, ~{4 * deals / 27 / 60:.0f}+ "
            "min of embedding in the full build (the default is 1,000 deals because 10,000 "
            "would take ~25 min or more)"
        )

    tiny = root / f"tiny-{k}"
    tiny_config = _common.deals_home(tiny / "source", tiny / "corpus.yaml", 1, embedder=embedder)
    home = root / f"home-{k}"
    source = root / "source"
    t0 = time.perf_counter()
    config = _common.deals_home(
        source, home / "corpus.yaml", deals, embedder=embedder, shards=shards, write=k == 0
    )
    generate_s = time.perf_counter() - t0
    base = 100 * k  # each shard count's edits differ from the last count's

    phases: dict[str, dict[str, Any]] = {}
    phases["tiny-build"] = run_phase(args, "tiny-build", tiny / "home", tiny_config)
    phases["tiny-noop"] = run_phase(args, "tiny-noop", tiny / "home", tiny_config)
    phases["full"] = run_phase(args, "full", home, config)
    phases["noop"] = run_phase(args, "noop", home, config)

    changed = CHANGED_DEAL % deals
    path = source / f"deal-{changed:06d}.uw.md"
    path.write_text(
        _common.deal_text(changed, tenant=TENANT, acl=ACL, variant=base + 1), encoding="utf-8"
    )
    phases["incremental"] = run_phase(args, "incremental", home, config)
    # repeats interleave the two phases compared, so a noisy minute weighs on both alike
    for n in range(2, args.repeat + 1):
        phases[f"tiny-noop#{n}"] = run_phase(args, "tiny-noop", tiny / "home", tiny_config)
        path.write_text(
            _common.deal_text(changed, tenant=TENANT, acl=ACL, variant=base + n), encoding="utf-8"
        )
        phases[f"incremental#{n}"] = run_phase(args, "incremental", home, config)
    if args.profile:
        path.write_text(
            _common.deal_text(changed, tenant=TENANT, acl=ACL, variant=base + args.repeat + 1),
            encoding="utf-8",
        )
        phases["profiled"] = run_phase(args, "profiled", home, config)
    return summarize(args, deals, shards, embedder, phases, notes, generate_s, source, home)


def again(args: argparse.Namespace, earlier: dict[str, Any]) -> dict[str, Any]:
    """Measure the fixed overhead and the one-deal change again, with this checkout's code, on
    the home an earlier run (``earlier``, its ``--json`` result) built and kept under
    ``--home``; its full build and no-op sync stand in for this run's."""
    root = args.home
    if root is None or not (root / "home-0" / "corpus.yaml").is_file():
        sys.exit("error: --again needs --home DIR: the folder the earlier run built and kept")
    if "by_shards" in earlier:
        earlier = earlier["by_shards"][0]
    deals, shards = int(earlier["deals"]), int(earlier["shards"])
    tiny, home, source = root / "tiny-0", root / "home-0", root / "source"
    tiny_config, config = tiny / "corpus.yaml", home / "corpus.yaml"
    old = earlier["phases"]
    phases: dict[str, dict[str, Any]] = {
        "tiny-build": old["tiny-build"],
        "full": old["full"],
        "noop": old["noop"],
    }
    changed = CHANGED_DEAL % deals
    path = source / f"deal-{changed:06d}.uw.md"
    base = 1000 + int(time.time()) % 1000  # edits this home has not seen
    for n in range(1, args.repeat + 1):
        suffix = "" if n == 1 else f"#{n}"
        phases[f"tiny-noop{suffix}"] = run_phase(args, "tiny-noop", tiny / "home", tiny_config)
        path.write_text(
            _common.deal_text(changed, tenant=TENANT, acl=ACL, variant=base + n), encoding="utf-8"
        )
        phases[f"incremental{suffix}"] = run_phase(args, "incremental", home, config)
    notes = [
        f"--again: full build and no-op sync from the earlier run ({old['full']['wall_s']:.1f} s, "
        "its code); the fixed overhead and the one-deal changes measured now, with this code"
    ]
    result = summarize(
        args, deals, shards, earlier["embedder"], phases, notes, earlier["generate_s"], source, home
    )
    result["again_of"] = {"full_build_s": earlier["full_build_s"]}
    return result


def summarize(
    args: argparse.Namespace,
    deals: int,
    shards: int,
    embedder: str,
    phases: dict[str, dict[str, Any]],
    notes: list[str],
    generate_s: float,
    source: Path,
    home: Path,
) -> dict[str, Any]:
    """The result of one shard count's phases, printed unless ``--json``."""
    changed = CHANGED_DEAL % deals
    target = target_pct(deals)
    profiled = phases.pop("profiled", None)
    full, incr, noop = phases["full"], phases["incremental"], phases["noop"]
    fixed_runs = [ph for name, ph in phases.items() if name.split("#")[0] == "tiny-noop"]
    incr_runs = [ph for name, ph in phases.items() if name.split("#")[0] == "incremental"]
    fixed_s = statistics.median(ph["wall_s"] for ph in fixed_runs)
    incr_s = statistics.median(ph["wall_s"] for ph in incr_runs)
    beyond_s = incr_s - fixed_s
    beyond_pct = 100.0 * beyond_s / full["wall_s"]
    # the same in process CPU seconds: less sensitive to other processes on the cores
    beyond_cpu_pct = (
        100.0
        * (
            statistics.median(ph["cpu_s"] for ph in incr_runs)
            - statistics.median(ph["cpu_s"] for ph in fixed_runs)
        )
        / full["cpu_s"]
    )
    embedded_ok = all(ph["embedded"] == 1 for ph in incr_runs)
    sizes = {
        "corpus_mib": round(_common.dir_mib(source), 2),
        "warehouse_mib": round(_common.dir_mib(home / "warehouse"), 2),
        "lance_mib": round(_common.dir_mib(home / "lance"), 2),
        "exports_mib": round(_common.dir_mib(home / "exports"), 2),
        "dagster_mib": round(_common.dir_mib(home / "dagster"), 2),
        "registry_mib": round(_common.dir_mib(home / "registry.duckdb"), 2),
    }
    result = {
        "deals": deals,
        "shards": shards,
        "incremental_runs": [f"{r['job']} {r['partition']}" for r in incr.get("runs", [])],
        "inputs": full["embedded"] + full["cache_hits"],
        "embedder": embedder,
        "threads": args.threads,
        "generate_s": round(generate_s, 2),
        "changed_document": f"{COLLECTION}/deal-{changed:06d} (market_analysis)",
        "full_build_s": full["wall_s"],
        "full_embedded": full["embedded"],
        "noop_s": noop["wall_s"],
        "noop_embedded": noop["embedded"],
        "repeat": args.repeat,
        "incremental_s": incr_s,
        "incremental_s_runs": [ph["wall_s"] for ph in incr_runs],
        "fixed_overhead_s_runs": [ph["wall_s"] for ph in fixed_runs],
        "incremental_embedded": incr["embedded"],
        "incremental_embedded_is_1": embedded_ok,
        "fixed_overhead_s": fixed_s,
        "fixed_overhead_what": "wall time of a no-op sync of a one-deal home (3 Dagster runs)",
        "incremental_dagster_outside_steps_s": incr["dagster_overhead_s"],
        "incremental_beyond_fixed_s": round(beyond_s, 3),
        "incremental_beyond_fixed_pct_of_full": round(beyond_pct, 3),
        "incremental_beyond_fixed_pct_of_full_by_cpu": round(beyond_cpu_pct, 3),
        "target_pct": target,
        "pass_incremental": beyond_pct <= target and embedded_ok,
        "sizes": sizes,
        "notes": notes,
        "phases": phases,
    }
    if profiled is not None:
        result["profiled_incremental"] = profiled
    if not args.json:
        print_text(result)
        if profiled is not None:
            pr = profiled
            print(
                f"\n  cProfile of one more incremental sync (embedded {pr['embedded']}, "
                f"{pr['wall_s']:.2f} s under the profiler):"
            )
            print(pr["profile"])
    return result


def print_comparison(results: list[dict[str, Any]]) -> None:
    """One line per shard count, measured in the same run."""
    print(f"\nshards compared ({results[0]['deals']} deals, same run):")
    print(
        f"  {'shards':>6} {'full s':>8} {'no-op s':>8} {'incr s':>8} {'fixed s':>8} "
        f"{'beyond s':>9} {'% of full':>9} {'% by CPU':>9} {'embedded':>8}"
    )
    for r in results:
        print(
            f"  {r['shards']:>6} {r['full_build_s']:8.2f} {r['noop_s']:8.2f} "
            f"{r['incremental_s']:8.2f} {r['fixed_overhead_s']:8.2f} "
            f"{r['incremental_beyond_fixed_s']:9.2f} "
            f"{r['incremental_beyond_fixed_pct_of_full']:9.3f} "
            f"{r['incremental_beyond_fixed_pct_of_full_by_cpu']:9.3f} "
            f"{r['incremental_embedded']:>8}"
        )


def print_text(r: dict[str, Any]) -> None:
    p = r["phases"]
    full, noop, incr = p["full"], p["noop"], p["incremental"]
    tiny_b, tiny_n = p["tiny-build"], p["tiny-noop"]
    print(
        f"incremental benchmark: {r['deals']} deals, {r['inputs']} inputs, {r['embedder']}, "
        f"{r['threads']} threads, {r['shards']} shard(s)"
    )
    for note in r["notes"]:
        print(f"  note: {note}")
    print(f"  corpus generated in {r['generate_s']:.1f} s; changed: {r['changed_document']}")
    if r["embedder"].startswith("st:"):
        print(
            f"  model load + warm-up per process {full['model_load_s']:.1f} s (excluded everywhere)"
        )
    print(
        f"  {'phase':<12} {'wall s':>9} {'CPU s':>8} {'embedded':>9} {'cache hits':>10} "
        f"{'Dagster-outside-steps s':>24}"
    )
    for name, ph in p.items():
        print(
            f"  {name:<12} {ph['wall_s']:9.2f} {ph['cpu_s']:8.1f} {ph['embedded']:9d} "
            f"{ph['cache_hits']:10d} {ph['dagster_overhead_s']:24.2f}"
        )
    print(f"  full build          {r['full_build_s']:9.2f} s, embedded {r['full_embedded']}")
    print(
        f"  incremental sync    {r['incremental_s']:9.2f} s, embedded {r['incremental_embedded']} "
        f"({'exactly 1: OK' if r['incremental_embedded_is_1'] else 'NOT 1: FAIL'})"
    )
    print(f"  no-op sync          {r['noop_s']:9.2f} s (same home, nothing changed)")
    if r["repeat"] > 1:
        runs = ", ".join(f"{s:.2f}" for s in r["incremental_s_runs"])
        fixed = ", ".join(f"{s:.2f}" for s in r["fixed_overhead_s_runs"])
        print(f"  medians of {r['repeat']} runs: incremental {runs}; fixed overhead {fixed}")
    print(
        f"  fixed overhead      {r['fixed_overhead_s']:9.2f} s = {r['fixed_overhead_what']}; "
        f"of which Dagster outside steps {tiny_n['dagster_overhead_s']:.2f} s "
        f"(1-deal build: {tiny_b['wall_s']:.2f} s)"
    )
    print(
        f"  incremental beyond fixed overhead {r['incremental_beyond_fixed_s']:.2f} s = "
        f"{r['incremental_beyond_fixed_pct_of_full']:.2f}% of the full build   "
        f"target <= {r['target_pct']}%  {'PASS' if r['pass_incremental'] else 'FAIL'}"
    )
    print(
        f"    (the same in process CPU seconds: "
        f"{r['incremental_beyond_fixed_pct_of_full_by_cpu']:.2f}% of the full build's CPU)"
    )
    print("  step seconds         full   no-op  incremental")
    names = list(full["steps"])
    for step in names:
        print(
            f"    {step:<17} {full['steps'][step]:7.2f} {noop['steps'].get(step, 0):7.2f} "
            f"{incr['steps'].get(step, 0):12.2f}"
        )
    s = r["sizes"]
    print(
        f"  on disk: corpus {s['corpus_mib']:.1f} MiB, warehouse {s['warehouse_mib']:.1f} MiB, "
        f"lance {s['lance_mib']:.1f} MiB, exports {s['exports_mib']:.1f} MiB, "
        f"dagster {s['dagster_mib']:.1f} MiB, registry {s['registry_mib']:.1f} MiB"
    )
    print("  memory (MiB)      RSS at start  sampled peak  ru_maxrss  peak-start")
    for name in ("tiny-noop", "full", "noop", "incremental"):
        ph = p[name]
        print(
            f"    {name:<14} {ph['rss_start_mib']:12.0f} {ph['rss_peak_sampled_mib']:13.0f} "
            f"{ph['maxrss_mib']:10.0f} {ph['rss_peak_sampled_mib'] - ph['rss_start_mib']:11.0f}"
        )
    print("  RSS rise during each step, MiB (sampled peak inside the step - RSS when it started;")
    print("  the first step to import a library, e.g. lancedb or GX, also carries that import)")
    print("    step                full   no-op  incremental")
    for step in names:
        cells = [
            p[ph].get("step_memory", {}).get(step, {}).get("rise_mib", 0.0)
            for ph in ("full", "noop", "incremental")
        ]
        print(f"    {step:<17} {cells[0]:7.0f} {cells[1]:7.0f} {cells[2]:12.0f}")


if __name__ == "__main__":
    sys.exit(main())
