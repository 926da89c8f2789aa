"""The ``source_manifest`` and ``parsed_blocks`` steps of a one-message append, this tree's
code beside another commit's, in turn.

For each side (``--base REV`` and this tree), each try: a fresh copy of ``--home`` (a synced
folder as ``bench/linked_cost.py --side N --home DIR`` leaves it: ``corpus.yaml``,
``source/``, ``home/``), scanned and parsed twice by that side's code untimed (a copied file
has a new path, inode and change time, so a scan that lists files from the last one must see
the copy first), one message appended to the last stream file, then the two steps timed
(``source_manifest.run`` and ``parsed_blocks.run`` in the library, no Dagster). The sides
take turns, the one going first changing from try to try. Prints each try's wall seconds per
step and the medians; both sides must scan and parse the same counts.

    .venv/bin/python bench/ingest_steps.py --home DIR --base REV [--tries 5] [--json]
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from linked_step_pair import (  # noqa: E402
    COLLECTION,
    REPO,
    _copy,
    _home,
    append_message,
    base_tree,
)


def _time(home_dir: Path, work: Path, suffix: str) -> dict[str, Any]:
    """The two steps of a one-message append on a fresh copy of ``home_dir``."""
    import corpus_index
    from corpus_index.steps import parsed_blocks, source_manifest

    home = _home(work, _copy(home_dir, work))
    # untimed: the copy's files seen as a synced home's are, under their paths here (the
    # first scan finds every record in a file other than the one the home's manifest names)
    for _ in range(2):
        source_manifest.run(home, COLLECTION)
        parsed_blocks.run(home, COLLECTION)
    append_message(work / "source", suffix)
    os.sync()
    time.sleep(1.1)  # the copy's files older than the timed scan's clock tick, as a home's are
    t0 = time.perf_counter()
    scan = source_manifest.run(home, COLLECTION).manifest
    t1 = time.perf_counter()
    parse = parsed_blocks.run(home, COLLECTION)
    t2 = time.perf_counter()
    shutil.rmtree(work)
    return {
        "code": str(Path(corpus_index.__file__).parent.parent),
        "source_manifest_s": round(t1 - t0, 3),
        "parsed_blocks_s": round(t2 - t1, 3),
        "counts": [scan.added, scan.unchanged, parse.parsed_documents, parse.carried_documents],
    }


def _start(tree: Path, *args: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree), "LANCE_LOG": "error"}
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", *args]
    # from the scratch folder: the repository's folder first on sys.path would shadow the base
    done = subprocess.run(command, env=env, cwd=tree.parent, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"a side failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if Path(result["code"]).resolve() != tree.resolve():
        raise SystemExit(f"a side ran the code in {result['code']}, not {tree}")
    return result


def main(argv: list[str]) -> int:
    import argparse

    if argv[:1] == ["--worker"]:
        print(json.dumps(_time(Path(argv[1]), Path(argv[2]), argv[3])))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--home", type=Path, required=True, help="a synced linked_cost.py home")
    ap.add_argument("--base", required=True, help="the commit to measure this tree beside")
    ap.add_argument("--tries", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    steps = ("source_manifest_s", "parsed_blocks_s")
    with tempfile.TemporaryDirectory(prefix="ingest-steps-") as scratch:
        root = Path(scratch)
        base = base_tree(args.base, root / "base" / "tree")
        sides = {"base": base, "this": REPO}
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
        for k in range(args.tries):
            for name in list(sides) if k % 2 == 0 else list(reversed(sides)):
                work = root / name / f"run-{k}"
                runs[name].append(_start(sides[name], str(args.home.resolve()), str(work), "b"))
            if runs["base"][-1]["counts"] != runs["this"][-1]["counts"]:
                raise SystemExit(f"the sides' counts differ: {runs}")
            if not args.json:
                print(
                    f"try {k + 1}: "
                    + "; ".join(
                        f"{name} " + ", ".join(f"{s[:-2]} {runs[name][-1][s]:.3f} s" for s in steps)
                        for name in sides
                    )
                )
    medians = {
        name: {s: statistics.median(r[s] for r in runs[name]) for s in steps} for name in sides
    }
    if args.json:
        print(json.dumps({"base": args.base, "medians": medians, "runs": runs}))
    else:
        print(f"medians ({args.tries} tries a side, wall seconds):")
        for name in sides:
            label = args.base if name == "base" else "this tree"
            print(f"  {label}: " + ", ".join(f"{s[:-2]} {medians[name][s]:.3f}" for s in steps))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
