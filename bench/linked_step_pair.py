"""The ``linked_groups`` step of a one-message append with this tree's code, beside the same
step with another commit's code, run at the same time, one on each core.

A shared host's speed drifts (by a quarter within an hour, some days), so two readings taken
minutes apart do not tell two versions of the step apart; two runs at the same time meet the
same drift. For each side (``--base REV`` and this tree): a copy of ``--home`` (a synced
folder as ``bench/linked_cost.py --side N --home DIR`` leaves it: ``corpus.yaml``,
``source/``, ``home/``), grouped once by that side's code so that its kept results are its
own, then one message appended to the last stream file, scanned and parsed. Each pair then
runs the step (``linked_groups.run`` in the library, no Dagster) on a fresh copy of each
side's snapshot, both at once, one on each core. Prints each pair's wall and CPU seconds, the
groups carried and results computed, and the sums.

A side whose step uses the second core itself (since ``fb645c0`` the step reads and writes
its partitions on a worker thread beside its Python) would be measured short of that core
when both run at once: ``--in-turn`` runs each pair's two steps one after the other instead,
the side that goes first changing from pair to pair, on an otherwise idle machine.

``--settled``: each side's snapshot is made as a run of syncs leaves it, not straight from a
full run: grouped, one message appended and grouped, grouped again with nothing changed, then
the message the pairs time appended (a run resumes from what the runs before it kept, which a
full run and a one-message run keep differently).

    .venv/bin/python bench/linked_step_pair.py --home DIR --base REV [--pairs 6] [--in-turn]
        [--settled] [--json]
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
COLLECTION = "chat"


def _copy(src: Path, dst: Path) -> Path:
    """``src`` copied to ``dst`` (replaced), its config pointed at the copy's sources."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, symlinks=True)
    config = dst / "corpus.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace(str(src), str(dst)))
    return config


def base_tree(rev: str, folder: Path) -> Path:
    """The files of commit ``rev`` of this repository, written to ``folder`` (created)."""
    folder.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev], check=True, capture_output=True
    )
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


def _home(folder: Path, config: Path) -> Any:
    from corpus_index.config import Settings
    from corpus_index.home import Home

    return Home(Settings(config_path=config, home=folder / "home"))


def append_message(source: Path, suffix: str) -> str:
    """One message a minute after the newest, at the end of the last stream file of
    ``source``, its id the newest's with ``-suffix``; returns that id."""
    last = sorted(source.glob("stream-*.jsonl"))[-1]
    record = json.loads(last.read_text(encoding="utf-8").splitlines()[-1])
    when = dt.datetime.fromisoformat(record["timestamp"]) + dt.timedelta(minutes=1)
    record.update(id=f"{record['id']}-{suffix}", text="yes, the keys are in the office drawer")
    record["timestamp"] = when.isoformat()
    record.pop("reply_to", None)
    with last.open("a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")
    return str(record["id"])


def _prepare(src: Path, dst: Path, *, settled: bool = False) -> dict[str, Any]:
    """A side's snapshot: grouped by this process's code, then one message appended, scanned
    and parsed; ``settled``: before that one, another appended, scanned, parsed and grouped,
    and grouped again with nothing changed."""
    from corpus_index.steps import linked_groups, parsed_blocks, source_manifest

    home = _home(dst, _copy(src, dst))
    grouped = linked_groups.run(home, COLLECTION)
    if settled:
        append_message(dst / "source", "before")
        source_manifest.run(home, COLLECTION)
        parsed_blocks.run(home, COLLECTION)
        linked_groups.run(home, COLLECTION)
        grouped = linked_groups.run(home, COLLECTION)
    append_message(dst / "source", "pair")
    source_manifest.run(home, COLLECTION)
    parsed_blocks.run(home, COLLECTION)
    import corpus_index

    return {"passed": grouped.passed, "code": str(Path(corpus_index.__file__).parent.parent)}


def _time(snapshot: Path, work: Path) -> dict[str, Any]:
    """The step on a fresh copy of ``snapshot``: wall and CPU seconds, what it carried."""
    from corpus_index.steps import linked_groups

    home = _home(work, _copy(snapshot, work))
    os.sync()  # the copy's writes land before the clock starts, not during the step
    time.sleep(1)
    cpu, wall = time.process_time(), time.perf_counter()
    out = linked_groups.run(home, COLLECTION)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    shutil.rmtree(work)
    return {
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "passed": out.passed,
        "carried": out.carried,
        "computed": out.computed,
    }


def _worker(args: list[str]) -> None:
    """One side's work, in a process whose ``corpus_index`` is that side's (PYTHONPATH)."""
    os.environ.setdefault("LANCE_LOG", "error")
    mode, a, b = args
    if mode.startswith("prepare"):
        result = _prepare(Path(a), Path(b), settled=mode == "prepare-settled")
    else:
        result = _time(Path(a), Path(b))
    print(json.dumps(result))


def _start(tree: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(tree), "LANCE_LOG": "error"}
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", *args]
    # run from the scratch folder: the repo's own folder first on sys.path would shadow
    # the base side's code
    return subprocess.Popen(command, env=env, cwd=tree.parent, stdout=subprocess.PIPE, text=True)


def _result(process: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = process.communicate()
    if process.returncode:
        raise SystemExit(f"a side failed (exit {process.returncode})")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--home", type=Path, required=True, help="a synced linked_cost.py home")
    ap.add_argument("--base", required=True, help="the commit to measure this tree beside")
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument(
        "--in-turn",
        action="store_true",
        help="run each pair's two steps one after the other (the first alternating), not at once",
    )
    ap.add_argument(
        "--settled",
        action="store_true",
        help="snapshots as a run of syncs leaves them (see the module's docstring)",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="step-pair-") as scratch:
        root = Path(scratch)
        base = base_tree(args.base, root / "base" / "tree")
        sides = {"base": base, "this": REPO}
        snaps = {name: root / name / "snapshot" for name in sides}
        for name, tree in sides.items():  # one after the other: each side grouped on its own
            mode = "prepare-settled" if args.settled else "prepare"
            made = _result(_start(tree, mode, str(args.home.resolve()), str(snaps[name])))
            if Path(made["code"]).resolve() != tree.resolve():
                raise SystemExit(f"the {name} side ran the code in {made['code']}, not {tree}")
        pairs = []
        for k in range(args.pairs):
            order = list(sides) if k % 2 == 0 else list(reversed(sides))
            if args.in_turn:
                pair = {
                    name: _result(
                        _start(sides[name], "time", str(snaps[name]), str(root / name / f"run-{k}"))
                    )
                    for name in order
                }
            else:
                running = {
                    name: _start(
                        sides[name], "time", str(snaps[name]), str(root / name / f"run-{k}")
                    )
                    for name in order
                }
                pair = {name: _result(p) for name, p in running.items()}
            pairs.append(pair)
            if not args.json:
                print(
                    f"pair {k + 1}: {args.base} {pair['base']['wall_s']:.2f} / "
                    f"{pair['base']['cpu_s']:.2f} s, this tree {pair['this']['wall_s']:.2f} / "
                    f"{pair['this']['cpu_s']:.2f} s (wall / CPU; carried "
                    f"{pair['base']['carried']:,} / {pair['this']['carried']:,}, computed "
                    f"{pair['base']['computed']:,} / {pair['this']['computed']:,})",
                    flush=True,
                )
    sums = {
        name: {k: round(sum(p[name][k] for p in pairs), 2) for k in ("wall_s", "cpu_s")}
        for name in ("base", "this")
    }
    change = {k: round(sums["this"][k] / sums["base"][k] - 1, 3) for k in ("wall_s", "cpu_s")}
    faster = sum(p["this"]["wall_s"] < p["base"]["wall_s"] for p in pairs)
    if args.json:
        print(json.dumps({"base": args.base, "pairs": pairs, "sums": sums, "change": change}))
        return 0
    print(
        f"sums: {args.base} {sums['base']['wall_s']} / {sums['base']['cpu_s']} s, this tree "
        f"{sums['this']['wall_s']} / {sums['this']['cpu_s']} s: {change['wall_s']:+.1%} wall, "
        f"{change['cpu_s']:+.1%} CPU; this tree faster in {faster} of {len(pairs)} pairs"
    )
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        _worker(sys.argv[2:])
    else:
        sys.exit(main(sys.argv[1:]))
