"""Shared helpers of the benchmark scripts in ``bench/``: environment, threads, memory sampling,
Dagster step timings and a generator of varied ``.uw.md`` deals.

Import this module BEFORE numpy, torch or anything of the project, and call
``configure(threads=...)`` first thing: BLAS and torch read their thread counts when they load.
"""

from __future__ import annotations

import bisect
import contextlib
import math
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # definitions.py, pipelines/ and assets/ live at the repo root
    sys.path.insert(0, str(REPO))

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")


def configure(*, threads: int) -> None:
    """Offline model, quiet LanceDB, and one deliberate thread count for BLAS and torch.

    Must run before numpy/torch are imported; ``set_torch_threads`` finishes the job once torch
    is loaded.
    """
    for var in THREAD_VARS:
        os.environ[var] = str(threads)
    from corpus_index.environment import configure_environment

    configure_environment()  # offline model, quiet LanceDB, allocator settings


def set_torch_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    with contextlib.suppress(RuntimeError):  # already set, or parallel work already started
        torch.set_num_interop_threads(1)


@contextlib.contextmanager
def bench_home(given: Path | None, prefix: str, *, must_be_empty: bool = False) -> Iterator[Path]:
    """The folder a benchmark builds in: ``--home`` (created if needed, kept afterwards) or a
    temporary folder removed at the end. ``must_be_empty`` refuses a ``--home`` with files in it
    (an old embedding cache there would hide the work being measured)."""
    if given is not None:
        home = given.resolve()
        if must_be_empty and home.exists() and any(home.iterdir()):
            sys.exit(f"error: --home {home} is not empty")
        home.mkdir(parents=True, exist_ok=True)
        yield home
        return
    home = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


def point_project_at(config_path: Path, home: Path) -> None:
    """``definitions.py`` builds Definitions at import time from CORPUS_CONFIG/CORPUS_HOME:
    point them at the benchmark's home so the repo's own corpus.yaml is never read."""
    os.environ["CORPUS_CONFIG"] = str(config_path)
    os.environ["CORPUS_HOME"] = str(home)


# -- memory ---------------------------------------------------------------------------------


def rss_mib() -> float:
    """Current resident set size of this process (VmRSS), MiB."""
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def maxrss_mib() -> float:
    """Peak RSS of this process since it started (getrusage ru_maxrss, KiB on Linux), MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class _Sampler:
    """Samples ``read()`` in a background thread every ``interval_s``, as (unix time, value)."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def read(self) -> float:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.time(), self.read()))
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append((time.time(), self.read()))


class RssSampler(_Sampler):
    """Samples VmRSS in a background thread; ``peak`` is the highest value seen.

    Reading /proc costs microseconds; at the default 50 ms interval it does not disturb timings.
    """

    def __init__(self, interval_s: float = 0.05) -> None:
        super().__init__(interval_s)
        self.start_rss = 0.0

    def read(self) -> float:
        return rss_mib()

    @property
    def peak(self) -> float:
        return max([self.start_rss, *(r for _, r in self.samples)])

    def __enter__(self) -> RssSampler:
        self.start_rss = rss_mib()
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def window(self, start: float, end: float) -> tuple[float, float] | None:
        """(RSS just before ``start``, highest RSS between ``start`` and ``end``), unix times."""
        before = [r for t, r in self.samples if t <= start]
        inside = [r for t, r in self.samples if start <= t <= end]
        if not before and not inside:
            return None
        first = before[-1] if before else inside[0]
        return first, max([first, *inside])


def cpu_s() -> float:
    """CPU time of this process so far (user + system, every thread), seconds."""
    t = os.times()
    return t.user + t.system


class CpuSampler(_Sampler):
    """Samples this process's CPU time in a background thread, so the CPU time spent between
    two instants (a Dagster step's start and end) can be read afterwards: every thread of the
    process counts (LanceDB's, the embedder's), to within one interval at each end."""

    def __init__(self, interval_s: float = 0.01) -> None:
        super().__init__(interval_s)

    def read(self) -> float:
        return cpu_s()

    def __enter__(self) -> CpuSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def at(self, when: float) -> float:
        """The process's CPU time at unix time ``when``, interpolated between samples."""
        s = self.samples
        i = bisect.bisect_left(s, (when, -math.inf))
        if i == 0:
            return s[0][1]
        if i == len(s):
            return s[-1][1]
        (t0, c0), (t1, c1) = s[i - 1], s[i]
        return c0 + (c1 - c0) * (when - t0) / max(t1 - t0, 1e-9)

    def spent(self, start: float, end: float) -> float:
        """CPU seconds the process spent from ``start`` to ``end`` (unix times)."""
        return self.at(end) - self.at(start)


def dir_mib(path: Path) -> float:
    """Bytes of every file under ``path``, MiB (0 if it does not exist)."""
    if not path.exists():
        return 0.0
    if path.is_file():
        return path.stat().st_size / 2**20
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


# -- timing a sync, run by run, step by step -------------------------------------------------


@dataclass
class RunTiming:
    """One Dagster run of a sync: wall time seen from the caller, and its steps' durations."""

    job: str
    partition: str
    run_id: str = ""
    wall_s: float = 0.0
    steps: dict[str, float] = field(default_factory=dict)
    windows: dict[str, tuple[float, float]] = field(default_factory=dict)  # unix start, end

    @property
    def steps_s(self) -> float:
        return sum(self.steps.values())

    @property
    def overhead_s(self) -> float:
        """Wall time of the run not spent inside any step: Dagster's own per-run cost."""
        return self.wall_s - self.steps_s

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "partition": self.partition,
            "run_id": self.run_id,
            "wall_s": round(self.wall_s, 3),
            "steps_s": round(self.steps_s, 3),
            "overhead_s": round(self.overhead_s, 3),
            "steps": {k: round(v, 3) for k, v in self.steps.items()},
        }


@dataclass
class SyncTiming:
    """A timed ``DagsterRunner.sync`` (``definitions.dagster_runner()``): total wall time, the report, and the runs."""

    wall_s: float
    report: Any
    runs: list[RunTiming]

    def step_total(self, step: str) -> float:
        return sum(r.steps.get(step, 0.0) for r in self.runs)

    @property
    def steps_s(self) -> float:
        return sum(r.steps_s for r in self.runs)

    @property
    def dagster_overhead_s(self) -> float:
        """Sync wall time outside every step (run setup/teardown, event log writes, reading
        the runs' materializations back)."""
        return self.wall_s - self.steps_s

    def steps_by_name(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for r in self.runs:
            for k, v in r.steps.items():
                out[k] = out.get(k, 0.0) + v
        return out

    def step_memory(self, sampler: RssSampler) -> dict[str, dict[str, float]]:
        """Per step: RSS when it started, its sampled peak, and the rise (MiB). A step that
        ran in several runs (one per shard) reports the run where it peaked highest."""
        out: dict[str, dict[str, float]] = {}
        for r in self.runs:
            for step, (start, end) in r.windows.items():
                w = sampler.window(start, end)
                if w is not None and (step not in out or w[1] > out[step]["peak_mib"]):
                    out[step] = {
                        "start_mib": round(w[0], 1),
                        "peak_mib": round(w[1], 1),
                        "rise_mib": round(w[1] - w[0], 1),
                    }
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "wall_s": round(self.wall_s, 3),
            "steps_s": round(self.steps_s, 3),
            "dagster_overhead_s": round(self.dagster_overhead_s, 3),
            "steps": {k: round(v, 3) for k, v in self.steps_by_name().items()},
            "runs": [r.to_json() for r in self.runs],
            "embedded": self.report.embedded,
            "cache_hits": self.report.cache_hits,
            "documents": self.report.documents,
            "ok": self.report.ok,
            "failed_runs": self.report.failed_runs,
        }


def timed_sync(settings: Any) -> SyncTiming:
    """Run the whole asset graph once (``DagsterRunner.sync`` (``definitions.dagster_runner()``)), timing every run.

    ``run_sync`` calls ``progress`` just before each job starts, so the gaps between calls are
    each run's wall time as the caller sees it; the step durations come from the Dagster
    instance's own run records (``get_run_step_stats``).
    """
    import dagster as dg

    from definitions import dagster_runner

    runs: list[RunTiming] = []
    marks: list[float] = []

    def progress(message: str) -> None:
        marks.append(time.perf_counter())
        job, _, partition = message.partition(" ")
        runs.append(RunTiming(job=job, partition=partition))

    start = time.perf_counter()
    report = dagster_runner().sync(settings, progress=progress)
    end = time.perf_counter()
    marks.append(end)
    for i, run in enumerate(runs):
        run.wall_s = marks[i + 1] - marks[i]
    instance = dg.DagsterInstance.get()
    for run, run_id in zip(runs, report.runs, strict=False):
        run.run_id = run_id
        for stat in instance.get_run_step_stats(run_id):
            if stat.start_time is not None and stat.end_time is not None:
                run.steps[stat.step_key] = stat.end_time - stat.start_time
                run.windows[stat.step_key] = (stat.start_time, stat.end_time)
    return SyncTiming(wall_s=end - start, report=report, runs=runs)


# -- generated deals -------------------------------------------------------------------------

_METROS = [
    ("AZ", "Phoenix"),
    ("TX", "Dallas"),
    ("GA", "Atlanta"),
    ("IL", "Chicago"),
    ("FL", "Tampa"),
    ("NC", "Charlotte"),
    ("CO", "Denver"),
    ("TN", "Nashville"),
    ("OH", "Columbus"),
    ("WA", "Seattle"),
]
_ASSETS = ["multifamily", "office", "industrial", "retail", "self_storage", "hospitality"]
_ADJ = [
    "steady",
    "softening",
    "tight",
    "oversupplied",
    "resilient",
    "volatile",
    "recovering",
    "deep",
    "thin",
    "seasonal",
    "suburban",
    "urban",
    "coastal",
    "aging",
    "renovated",
]
_NOUN = [
    "rents",
    "occupancy",
    "job growth",
    "new supply",
    "absorption",
    "concessions",
    "cap rates",
    "insurance premiums",
    "property taxes",
    "lease rollover",
    "tenant demand",
    "construction costs",
    "migration",
    "wage growth",
    "vacancy",
    "interest rates",
    "operating expenses",
    "parking demand",
]
_VERB = [
    "rose",
    "fell",
    "held flat",
    "doubled",
    "eased",
    "accelerated",
    "stalled",
    "recovered",
    "outpaced the metro",
    "lagged the region",
    "spiked",
    "normalized",
]
_RISK = [
    "Roofs and boilers are past their useful life",
    "The anchor tenant's lease expires next year",
    "Windstorm insurance premiums doubled at renewal",
    "The sponsor has never operated an asset of this size",
    "A third of the units are below market after a long hold",
    "The elevator controls are obsolete and parts are scarce",
    "The county reassessment will raise taxes sharply",
    "Two competing projects deliver within a mile",
]


def _sentence(rng: Any, n: int) -> str:
    return (
        f"In {n % 12 + 1} of the last 12 quarters {rng.choice(_ADJ)} {rng.choice(_NOUN)} "
        f"{rng.choice(_VERB)} while {rng.choice(_NOUN)} {rng.choice(_VERB)}."
    )


def deal_text(i: int, *, tenant: str, acl: list[str], variant: int = 0) -> str:
    """One valid ``.uw.md`` deal whose four embeddable sections all differ from every other
    deal's (no input hash is shared, so a full build embeds every block).

    ``variant`` changes only the ``market_analysis`` block: bumping it changes exactly one
    input of this deal.
    """
    import random

    import yaml

    rng = random.Random(i)
    deal_id = f"DEAL-{i:06d}"
    state, metro = _METROS[i % len(_METROS)]
    asset = _ASSETS[(i // 7) % len(_ASSETS)]
    units = 20 + (i * 37) % 480
    front = {
        "uw_version": "1.1",
        "deal_id": deal_id,
        "title": f"{deal_id} {metro} {asset.replace('_', ' ')}",
        "asset_class": asset,
        "geo": {"state": state, "metro": metro},
        "units": units,
        "date": f"{2020 + i % 6}-{1 + i % 12:02d}-{1 + i % 28:02d}",
        "tenant": tenant,
        "acl": acl,
    }
    market = " ".join(_sentence(rng, i + k) for k in range(3))
    if variant:
        other = random.Random(f"{i}/{variant}")  # own stream: the other sections stay as they were
        market += (
            f" Revised in update {variant}: the latest survey shows "
            f"{other.choice(_NOUN)} {other.choice(_VERB)}."
        )
    sections = {
        "property": {
            "name": f"{deal_id} {metro} {asset.replace('_', ' ')}",
            "description": f"A {units}-unit {asset.replace('_', ' ')} asset in {metro}, {state}, "
            f"built in {1950 + i % 70}. " + _sentence(rng, i),
        },
        "market_analysis": {"submarket": f"{metro} sector {i % 17}, tract {i}", "summary": market},
        "risk_assessment": {
            "flags": [
                {
                    "id": f"risk-{i % 8}",
                    "severity": ["low", "medium", "high"][i % 3],
                    "description": f"{_RISK[i % len(_RISK)]} at {deal_id}; "
                    + _sentence(rng, i + 5),
                }
            ]
        },
        "borrower_sponsor": {
            "sponsor": f"{tenant.title()} Partners {i} LLC",
            "experience": f"{3 + i % 25} years and {2 + i % 40} assets in {metro}. "
            + _sentence(rng, i + 9),
        },
        "debt_terms": {"loan_amount": 1_000_000 + 1000 * units, "ltv_pct": 65.0},
    }
    body = "\n".join(
        f"## {name}\n```yaml\n{yaml.safe_dump(content, sort_keys=False, width=10_000).strip()}\n```\n"
        for name, content in sections.items()
    )
    return f"---\n{yaml.safe_dump(front, sort_keys=False).strip()}\n---\n\n# {deal_id}\n\n{body}"


def write_deals(folder: Path, count: int, *, tenant: str, acl: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (folder / f"deal-{i:06d}.uw.md").write_text(
            deal_text(i, tenant=tenant, acl=acl), encoding="utf-8"
        )


DEALS_TENANT, DEALS_ACL, DEALS_COLLECTION = "bench", ["bench-uw"], "deals"


def deals_home(
    source: Path, config: Path, count: int, *, embedder: str, shards: int = 1, write: bool = True
) -> Path:
    """``count`` generated deals under ``source`` (tenant ``bench``) and, at ``config``, a
    corpus.yaml with them as its one collection (``deals``, in ``shards`` hash shards) and one
    profile; returns ``config``. ``write=False`` reuses the deals already under ``source``."""
    if write:
        write_deals(source, count, tenant=DEALS_TENANT, acl=DEALS_ACL)
    return write_config(
        config,
        collection=DEALS_COLLECTION,
        kind="uw_deals",
        source=source,
        embedder=embedder,
        tenant=DEALS_TENANT,
        acl=DEALS_ACL,
        shards=shards,
    )


def write_config(
    path: Path,
    *,
    collection: str,
    kind: str,
    source: Path,
    embedder: str,
    tenant: str,
    acl: list[str],
    batch_size: int = 64,
    shards: int = 1,
) -> Path:
    """A one-collection, one-profile corpus.yaml (no golden set: the eval gate is skipped)."""
    import yaml

    config = {
        "collections": {
            collection: {
                "kind": kind,
                "path": str(source),
                "tenant": tenant,
                "acl_groups": acl,
                "tier": "restricted",
                "namespace": "bench",
                **({"shards": shards} if shards > 1 else {}),
            }
        },
        "profiles": {
            "main": {"embedder": embedder, "namespace": "bench", "batch_size": batch_size}
        },
        "namespaces": {"bench": {"eval_gate": "off"}},  # no golden set: the qrels score it
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path
