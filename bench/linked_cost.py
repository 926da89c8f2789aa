"""What grouping and identities add to a sync, beyond the time spent embedding, measured in the
same run beside the same sync with them off (``grouping: false`` on the collection).

For each size N (``--sizes``, default 5,000 and 50,000), on a generated staff-chat stream
(``tests/streamgen.py``: five channels at five places, several conversations at once,
questions, replies that name the asker; written as stream files of 10,000 messages), with the
deterministic ``hash:v1-384`` embedder:

1. a full ``corpus sync`` (``DagsterRunner.sync``) of a ``messages`` collection of N messages,
   with grouping and identities on, and the same with ``grouping: false``;
2. then one message appended to a channel and synced again, ``--tries`` times (default 5),
   the two sides' syncs in turn (with, without; without, with; ...), so a machine that slows
   down during the run slows both alike: the fastest of each side is reported, with every
   try's time beyond embedding beside it, sorted (other processes share the cores; the
   fastest is the reading least disturbed by them), and the share of each pair in turn with
   its median.

Every sync is split into its ``embeddings`` steps and the rest; the figure of the target is
``added = (rest with grouping) / (rest without) - 1``: the share grouping and identities add
to the work of a sync that is not embedding. The process's CPU time of each whole sync is
printed beside it (and the same ratio of it), being steadier than wall time when other
processes share the cores. Each (size, grouping) pair runs in a process of its own
(``definitions.py`` reads the home from the environment once).

In the same run, a second reading with the project's default model (``st:all-MiniLM-L6-v2``)
at a smaller size (``--real-size``, default 1,000 messages), where embedding costs what it
really does: ``added = ((with - without) - (its embedding with - without)) / without``, the
time grouping adds beyond the embedding of the group rows, as a share of the whole sync
without grouping. Its syncs are short and Dagster's own cost per run varies by a second from
one to the next, so each side is built ``--repeats`` times (default 3, alternating with and
without), each with its one-message tries; the fastest full sync and the fastest one-message
sync of each side are compared, and the added share of every pair is printed beside.

With ``--steps``, each sync's time is also read per step (asset): the wall time of each
Dagster step, summed over the sync's runs, and the process's CPU time in the same windows
(sampled every 10 ms, every thread of the process counted), printed as one table per size:
full and one-message syncs, with grouping and without. ``(outside steps)`` is the sync's time
between steps (Dagster's own per-run cost, reading the runs back).

Each reading also carries how much the sync's ``linked_groups`` step decided again (its
materialization's metadata): conversation links decided again, questions scored and groups
described anew and as last time, group rows carried over (and how many of those before
they were made); for the one-message sync with
grouping these are printed after the shares.

    .venv/bin/python bench/linked_cost.py [--sizes 5000,50000] [--real-size 1000] [--steps]
        [--tries 5] [--repeats 3] [--json]

Other processes on the machine share the cores: figures are noisy.
"""

from __future__ import annotations

import _common

_common.configure(threads=2)

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from corpus_index.linked.messages import Message  # noqa: E402
from tests.streamgen import stream, write_jsonl  # noqa: E402

EMBEDDER = "hash:v1-384"
REAL_EMBEDDER = "st:all-MiniLM-L6-v2"  # the project's default model
COLLECTION = "chat"
ONE_MESSAGE_TRIES = 5
REPEATS = 3  # builds of each side of the default-model reading
FILE_MESSAGES = 10_000  # messages a stream file (a file counts against max_document_bytes)
SAID = "@reading "  # how a serving side's readings start (its other output is left alone)


def one_more(messages: list[Message], n: int) -> Message:
    """A new message at the end of the first channel, a minute after the newest."""
    last = messages[-1]
    return replace(
        last,
        unit_id=f"new{n}",
        channel=messages[0].channel,
        location=messages[0].location,
        text=f"Sarah: van booked in for thursday {n}",
        timestamp=last.timestamp + 60 * (n + 1),
        reply_to=None,
    )


def write_streams(messages: list[Message], folder: Path) -> None:
    """The messages as stream files of ``FILE_MESSAGES`` each, in order (one appended
    message changes the last file only); a file whose text is unchanged is not rewritten."""
    for k in range(0, len(messages), FILE_MESSAGES):
        path = folder / f"stream-{k // FILE_MESSAGES:03d}.jsonl"
        scratch = folder.parent / "scratch.jsonl"
        write_jsonl(messages[k : k + FILE_MESSAGES], scratch)
        if path.exists() and path.read_bytes() == scratch.read_bytes():
            continue
        scratch.replace(path)


OUTSIDE = "(outside steps)"


def write_chat_config(root: Path, *, embedder: str) -> Path:
    """``root/corpus.yaml`` naming one ``messages`` collection of tenant ``bench`` whose
    stream files are in ``root/source`` (created, empty)."""
    source = root / "source"
    source.mkdir()
    return _common.write_config(
        root / "corpus.yaml",
        collection=COLLECTION,
        kind="messages",
        source=source,
        embedder=embedder,
        tenant="bench",
        acl=["bench-staff"],
    )


def _timed(settings: Any, cpu_sampler: _common.CpuSampler | None = None) -> dict[str, Any]:
    """A timed sync as wall time, its embeddings steps and the rest, and the process's CPU
    time (steady under load, where wall time is not); with ``cpu_sampler`` (sampling this
    process), ``steps``: each step's wall and CPU seconds, summed over the sync's runs."""
    cpu = _common.cpu_s()
    t = _common.timed_sync(settings)
    cpu = _common.cpu_s() - cpu
    steps = t.steps_by_name()
    embed = sum(v for k, v in steps.items() if k.startswith("embeddings"))
    linked = sum(v for k, v in steps.items() if k.startswith("linked_groups"))
    if not t.report.ok:
        raise SystemExit(f"the sync failed: {t.report}")
    out = {
        "wall_s": round(t.wall_s, 2),
        "embeddings_s": round(embed, 2),
        "linked_groups_s": round(linked, 2),
        "beyond_embedding_s": round(t.wall_s - embed, 2),
        "cpu_s": round(cpu, 2),
        "embedded": t.report.embedded,
        "ok": t.report.ok,
    }
    out.update(_decided_again())
    if cpu_sampler is not None:
        out["steps"] = _per_step(t, cpu_sampler, wall_s=t.wall_s, cpu_s=cpu)
    return out


# what the last ``linked_groups`` step reports of the work it did again, by its metadata names
_DECIDED = {
    "messages_relinked": "relinked",
    "results_computed": "computed",
    "results_reused": "reused",
    "group_rows_carried": "carried",
    "groups_carried_unmade": "unmade",
}


def _decided_again() -> dict[str, int]:
    """How much the sync's ``linked_groups`` step decided again (from its materialization's
    metadata): messages whose conversation link was decided again, questions scored and groups
    described anew and as the last run did, and group rows carried over. Empty where the
    step did not run."""
    import dagster as dg

    event = dg.DagsterInstance.get().get_latest_materialization_event(dg.AssetKey("linked_groups"))
    if event is None or event.asset_materialization is None:
        return {}
    meta = event.asset_materialization.metadata
    out: dict[str, int] = {}
    for key, name in _DECIDED.items():
        value = meta[key].value if key in meta else None
        if isinstance(value, int):
            out[name] = value
    return out


def _per_step(
    t: _common.SyncTiming, sampler: _common.CpuSampler, *, wall_s: float, cpu_s: float
) -> dict[str, dict[str, float]]:
    """Each step's wall and CPU seconds (over the sync's runs, in the order the steps first
    ran), and the sync's time outside every step."""
    steps: dict[str, dict[str, float]] = {}
    for run in t.runs:
        for name, (start, end) in sorted(run.windows.items(), key=lambda kv: kv[1]):
            step = steps.setdefault(name, {"wall_s": 0.0, "cpu_s": 0.0})
            step["wall_s"] += end - start
            step["cpu_s"] += sampler.spent(start, end)
    steps[OUTSIDE] = {
        "wall_s": wall_s - sum(s["wall_s"] for s in steps.values()),
        "cpu_s": cpu_s - sum(s["cpu_s"] for s in steps.values()),
    }
    return {k: {m: round(v, 3) for m, v in s.items()} for k, s in steps.items()}


def _profiled(out: Path) -> None:
    """Profile every run of the ``linked_groups`` step in this process into ``out`` (pstats,
    the runs' profiles added up), beside the sync's own timing."""
    import cProfile

    from corpus_index import steps

    step = steps.linked_groups.run
    profile = cProfile.Profile()

    def run(*args: Any, **kwargs: Any) -> Any:
        profile.enable()
        try:
            return step(*args, **kwargs)
        finally:
            profile.disable()
            profile.dump_stats(str(out))

    steps.linked_groups.run = run  # type: ignore[assignment]


def one_side(
    n: int,
    grouping: bool,
    *,
    embedder: str = EMBEDDER,
    home_dir: Path | None = None,
    profile: Path | None = None,
    steps: bool = False,
    tries: int = ONE_MESSAGE_TRIES,
    serve: bool = False,
) -> dict[str, Any]:
    """A full sync of ``n`` messages, then one-message syncs (in this process); the build is
    kept in ``home_dir`` when given; ``profile``: a profile of the ``linked_groups`` step of
    the one-message syncs; ``steps``: each sync's wall and CPU seconds per step too.

    ``serve``: the one-message syncs are run as the parent asks, not ``tries`` of them at
    once: after the full sync its reading is printed (a line starting :data:`SAID`), then
    each ``one`` read from stdin runs one and prints its reading, until ``end`` (see
    :class:`_Serving`: the other side's syncs run between them)."""
    import yaml

    with (
        _common.bench_home(home_dir, "linked-cost-", must_be_empty=True) as root,
        _common.CpuSampler() if steps else contextlib.nullcontext() as sampler,
    ):
        source, home = root / "source", root / "home"
        config = write_chat_config(root, embedder=embedder)
        raw = yaml.safe_load(config.read_text(encoding="utf-8"))
        raw["collections"][COLLECTION]["grouping"] = grouping
        config.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
        _common.point_project_at(config, home)
        import great_expectations  # noqa: F401  (imported untimed, as a sync process does once)
        import lancedb  # noqa: F401

        from corpus_index.config import Settings
        from pipelines import runner  # noqa: F401

        messages = stream(n, channels=5, seed=1)
        settings = Settings(config_path=config, home=home)
        write_streams(messages, source)
        full = _timed(settings, sampler)
        if profile is not None:
            _profiled(profile)
        ones: list[dict[str, Any]] = []

        def one_more_synced() -> dict[str, Any]:
            messages.append(one_more(messages, len(ones)))
            write_streams(messages, source)
            ones.append(_timed(settings, sampler))
            return ones[-1]

        if serve:
            _say({"full": full})
            for line in sys.stdin:
                if line.strip() != "one":
                    break
                _say(one_more_synced())
        else:
            for _ in range(tries):
                one_more_synced()
        if not ones:
            return {"messages": n, "grouping": grouping, "embedder": embedder, "full": full}
        best = min(ones, key=lambda r: r["beyond_embedding_s"])
        spread = sorted(r["beyond_embedding_s"] for r in ones)
        best = {**best, "tries_beyond_embedding_s": spread}
        return {
            "messages": n,
            "grouping": grouping,
            "embedder": embedder,
            "full": full,
            "one_message": best,
        }


def _side_in_process(
    n: int,
    grouping: bool,
    embedder: str = EMBEDDER,
    *,
    steps: bool = False,
    tries: int = ONE_MESSAGE_TRIES,
) -> dict[str, Any]:
    script = Path(__file__).resolve()
    flags = ["--grouping" if grouping else "--no-grouping", *(["--steps"] if steps else [])]
    flags += ["--tries", str(tries)]
    out = subprocess.run(
        [sys.executable, str(script), "--side", str(n), *flags, "--embedder", embedder],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _say(reading: dict[str, Any]) -> None:
    print(SAID + json.dumps(reading), flush=True)


class _Serving:
    """One side of a comparison in a process of its own (``--side N --serve``): built (its
    full sync) when made; :meth:`one` has it run one one-message sync and gives its reading."""

    def __init__(self, n: int, grouping: bool, *, steps: bool) -> None:
        script = Path(__file__).resolve()
        flags = ["--grouping" if grouping else "--no-grouping", *(["--steps"] if steps else [])]
        self.proc = subprocess.Popen(  # noqa: S603 - this script, fixed flags
            [sys.executable, str(script), "--side", str(n), *flags, "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.full: dict[str, Any] = self._heard()["full"]

    def _heard(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(SAID):
                reading: dict[str, Any] = json.loads(line[len(SAID) :])
                return reading
        raise SystemExit(f"a side of the comparison ended (exit {self.proc.wait()})")

    def one(self) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write("one\n")
        self.proc.stdin.flush()
        return self._heard()

    def end(self) -> None:
        self.proc.communicate("end\n")  # what it prints on its way out read, not left to fill
        if self.proc.returncode != 0:
            raise SystemExit(f"a side of the comparison failed (exit {self.proc.returncode})")


def _added(on: dict[str, Any], off: dict[str, Any], key: str = "beyond_embedding_s") -> float:
    return round(on[key] / max(off[key], 1e-9) - 1, 3)


def compare(n: int, *, steps: bool = False, tries: int = ONE_MESSAGE_TRIES) -> dict[str, Any]:
    """Both sides of size ``n`` and what grouping adds (``steps``: per step too).

    Each side is built in a process of its own, one after the other; then their one-message
    syncs run in turn (with, without; then without, with; and so on), so a machine that
    slows down over the run slows both sides alike. The share is of each side's fastest
    one-message sync, and of each pair in turn beside it (their median too)."""
    on = _Serving(n, True, steps=steps)
    off = _Serving(n, False, steps=steps)
    ons: list[dict[str, Any]] = []
    offs: list[dict[str, Any]] = []
    for k in range(tries):
        for side in (on, off) if k % 2 == 0 else (off, on):
            (ons if side is on else offs).append(side.one())
    on.end()
    off.end()

    def fastest(ones: list[dict[str, Any]]) -> dict[str, Any]:
        best = min(ones, key=lambda r: r["beyond_embedding_s"])
        spread = sorted(r["beyond_embedding_s"] for r in ones)
        return {**best, "tries_beyond_embedding_s": spread}

    pairs = [_added(a, b) for a, b in zip(ons, offs, strict=True)]
    return {
        "messages": n,
        "with_grouping": {"full": on.full, "one_message": fastest(ons)},
        "without": {"full": off.full, "one_message": fastest(offs)},
        "added_full": _added(on.full, off.full),
        "added_one_message": _added(fastest(ons), fastest(offs)),
        "added_one_message_pairs": pairs,
        "added_one_message_median": round(statistics.median(pairs), 3),
        "added_cpu_full": _added(on.full, off.full, "cpu_s"),
        "added_cpu_one_message": _added(fastest(ons), fastest(offs), "cpu_s"),
    }


def _added_real(on: dict[str, Any], off: dict[str, Any]) -> float:
    """(extra wall time - extra embedding time) / the whole sync without grouping."""
    extra = (on["wall_s"] - off["wall_s"]) - (on["embeddings_s"] - off["embeddings_s"])
    return round(extra / max(off["wall_s"], 1e-9), 3)


def compare_real(
    n: int, *, steps: bool = False, tries: int = ONE_MESSAGE_TRIES, repeats: int = REPEATS
) -> dict[str, Any]:
    """Both sides of size ``n`` with the default model, each built ``repeats`` times
    (alternately), and what grouping adds beyond the extra embedding, as a share of the whole
    sync without grouping: from each side's fastest full and one-message syncs, and for each
    pair of builds (``steps``: per step too)."""
    ons: list[dict[str, Any]] = []
    offs: list[dict[str, Any]] = []
    for _ in range(repeats):
        ons.append(_side_in_process(n, True, REAL_EMBEDDER, steps=steps, tries=tries))
        offs.append(_side_in_process(n, False, REAL_EMBEDDER, steps=steps, tries=tries))

    def fastest(sides: list[dict[str, Any]], sync: str) -> dict[str, Any]:
        return min((s[sync] for s in sides), key=lambda r: r["wall_s"])

    on = {sync: fastest(ons, sync) for sync in ("full", "one_message")}
    off = {sync: fastest(offs, sync) for sync in ("full", "one_message")}
    return {
        "each_pair": {
            sync: [_added_real(a[sync], b[sync]) for a, b in zip(ons, offs, strict=True)]
            for sync in ("full", "one_message")
        },
        "messages": n,
        "embedder": REAL_EMBEDDER,
        "with_grouping": {"full": on["full"], "one_message": on["one_message"]},
        "without": {"full": off["full"], "one_message": off["one_message"]},
        "added_full": _added_real(on["full"], off["full"]),
        "added_one_message": _added_real(on["one_message"], off["one_message"]),
    }


# the columns of a per-step table: (side, sync) of a comparison, and their headings
_COLUMNS = [
    ("with_grouping", "full", "full, grouping"),
    ("without", "full", "full, without"),
    ("with_grouping", "one_message", "one msg, grouping"),
    ("without", "one_message", "one msg, without"),
]


def step_table(row: dict[str, Any]) -> str:
    """A comparison's steps as a text table: one line per step (in the order they ran, the
    time outside them last), wall / CPU seconds in each column."""
    readings = [row[side][sync]["steps"] for side, sync, _ in _COLUMNS]
    names = list(dict.fromkeys(k for r in readings for k in r if k != OUTSIDE))
    names.append(OUTSIDE)
    width = max(len(n) for n in names)
    cell = 19
    head = f"{'step (wall / CPU s)':<{width}}" + "".join(f"{h:>{cell}}" for *_, h in _COLUMNS)
    lines = [f"{row['messages']} messages, per step", head]
    for name in names:
        cells = [
            f"{r[name]['wall_s']:.2f} / {r[name]['cpu_s']:.2f}" if name in r else "-"
            for r in readings
        ]
        lines.append(f"{name:<{width}}" + "".join(f"{c:>{cell}}" for c in cells))
    totals = [
        f"{row[side][sync]['wall_s']:.2f} / {row[side][sync]['cpu_s']:.2f}"
        for side, sync, _ in _COLUMNS
    ]
    lines.append(f"{'sync':<{width}}" + "".join(f"{c:>{cell}}" for c in totals))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="5000,50000")
    ap.add_argument(
        "--real-size",
        type=int,
        default=1000,
        help="messages of the default-model reading (0: none)",
    )
    ap.add_argument("--embedder", default=EMBEDDER, help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--steps", action="store_true", help="each sync's wall and CPU seconds per step (asset)"
    )
    ap.add_argument("--side", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--home", type=Path, help="with --side: build in this (empty) folder, kept")
    ap.add_argument(
        "--profile", type=Path, help="with --side: a pstats profile of the one-message syncs' step"
    )
    ap.add_argument("--grouping", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument(
        "--tries", type=int, default=ONE_MESSAGE_TRIES, help="one-message syncs of each side"
    )
    ap.add_argument(
        "--repeats",
        type=int,
        default=REPEATS,
        help="builds of each side of the default-model reading",
    )
    args = ap.parse_args(argv)
    if args.side:
        side = one_side(
            args.side,
            args.grouping,
            embedder=args.embedder,
            home_dir=args.home,
            profile=args.profile,
            steps=args.steps,
            tries=args.tries,
            serve=args.serve,
        )
        print(json.dumps(side))
        return 0
    report = [
        compare(int(s), steps=args.steps, tries=args.tries) for s in args.sizes.split(",") if s
    ]
    real = (
        compare_real(args.real_size, steps=args.steps, tries=args.tries, repeats=args.repeats)
        if args.real_size
        else None
    )
    if args.json:
        print(json.dumps({"hash_embedder": report, "default_model": real}, indent=1))
        return 0
    for row in report:
        for side in ("with_grouping", "without"):
            for sync in ("full", "one_message"):
                reading = {k: v for k, v in row[side][sync].items() if k != "steps"}
                print(
                    json.dumps({"messages": row["messages"], "side": side, "sync": sync, **reading})
                )
        print(
            f"{row['messages']} messages: grouping and identities add "
            f"{row['added_full']:.0%} to a full sync and {row['added_one_message']:.0%} to a "
            "one-message sync, beyond embedding (CPU time of the whole sync: "
            f"{row['added_cpu_full']:+.0%} and {row['added_cpu_one_message']:+.0%})"
            f" [{EMBEDDER}: (with - its embedding) / (without - its embedding) - 1]"
        )
        print(
            f"{row['messages']} messages, one-message syncs in turn, each pair: "
            f"{', '.join(f'{x:+.0%}' for x in row['added_one_message_pairs'])} "
            f"(median {row['added_one_message_median']:+.0%})"
        )
        one = row["with_grouping"]["one_message"]
        if "relinked" in one:
            print(
                f"{row['messages']} messages, one message more: {one['relinked']:,} conversation "
                f"links decided again, {one['computed']:,} questions scored and groups described "
                f"anew ({one['reused']:,} as last time), {one['carried']:,} group rows carried"
                f" ({one.get('unmade', 0):,} of them before they were made)"
            )
        if args.steps:
            print(step_table(row))
    if real is not None:
        for side in ("with_grouping", "without"):
            for sync in ("full", "one_message"):
                head = {"messages": real["messages"], "side": side, "sync": sync}
                reading = {k: v for k, v in real[side][sync].items() if k != "steps"}
                print(json.dumps({**head, "embedder": REAL_EMBEDDER, **reading}))
        print(
            f"{real['messages']} messages, {REAL_EMBEDDER}: grouping and identities add "
            f"{real['added_full']:.0%} to a full sync and {real['added_one_message']:.0%} to a "
            "one-message sync [(extra time - extra embedding time) / whole sync without grouping]"
        )
        pairs = real["each_pair"]
        print(
            f"each pair of builds: full {', '.join(f'{x:+.0%}' for x in pairs['full'])}; "
            f"one message {', '.join(f'{x:+.0%}' for x in pairs['one_message'])}"
        )
        if args.steps:
            print(step_table(real))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
