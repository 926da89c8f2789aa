"""What one edited message costs the ``linked_groups`` step, beside one appended message, on
the same collection in the same run.

From a synced folder as ``bench/linked_cost.py --side N --home DIR`` leaves it (its
``corpus.yaml``, ``source/`` and ``home/``), two snapshots are made, each grouped once by this
tree's code so that its kept results are its own:

- **append**: one message added a minute after the newest, at the end of the last stream file;
- **edit**: the message at ``--at`` (a share of the stream, in file order; 0.5: the middle)
  given more text, in place.

Each is scanned and parsed, then the step (``linked_groups.run`` in the library, no Dagster)
runs ``--tries`` times on a fresh copy of each snapshot, the two in turn. Printed for each: the
fastest wall time and every try's, what the step decided again (links, results computed,
rows carried, questions kept unread), and, from the fastest try, the seconds of the parts an
edit grows (conversations, topic clusters, questions, the identity pass), timed by wrapping
those functions.

    .venv/bin/python bench/linked_edit.py --home DIR [--at 0.5] [--tries 2] [--json]
"""

from __future__ import annotations

import _common

_common.configure(threads=2)

import argparse  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from linked_step_pair import COLLECTION, _copy, _home, append_message  # noqa: E402

from corpus_index.linked import groups  # noqa: E402
from corpus_index.steps import linked_groups, parsed_blocks, source_manifest  # noqa: E402

# the parts an edit grows: (module, function) -> the name printed
PARTS = {
    (groups, "conversation_groups"): "conversations",
    (groups, "topic_clusters"): "topic clusters",
    (groups, "find_answers"): "questions",
    (linked_groups, "_identify"): "identity pass",
}


def _edit(source: Path, at: float) -> str:
    """The message at share ``at`` of the stream (in file order) given more text."""
    files = sorted(source.glob("stream-*.jsonl"))
    lines = [f.read_text(encoding="utf-8").splitlines() for f in files]
    k = int(sum(map(len, lines)) * at)
    for path, mine in zip(files, lines, strict=True):
        if k < len(mine):
            record = json.loads(mine[k])
            record["text"] += " (edited: the van keys are in the drawer?)"
            mine[k] = json.dumps(record)
            path.write_text("\n".join(mine) + "\n", encoding="utf-8")
            return str(record["id"])
        k -= len(mine)
    raise SystemExit("--at is past the end of the stream")


def _snapshot(home_dir: Path, dst: Path, change: Callable[[Path], str]) -> str:
    """``home_dir`` grouped by this tree, then changed by ``change``, scanned and parsed."""
    home = _home(dst, _copy(home_dir, dst))
    if not linked_groups.run(home, COLLECTION).passed:
        raise SystemExit("the first grouping failed its checks")
    changed = change(dst / "source")
    source_manifest.run(home, COLLECTION)
    parsed_blocks.run(home, COLLECTION)
    return changed


def _timed(snapshot: Path, work: Path) -> dict[str, Any]:
    """The step on a fresh copy of ``snapshot``, with the seconds of each of :data:`PARTS`."""
    parts: dict[str, float] = {}
    originals = {key: getattr(*key) for key in PARTS}

    def wrapped(name: str, f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def run(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return f(*args, **kwargs)
            finally:
                parts[name] = parts.get(name, 0.0) + time.perf_counter() - t

        return run

    home = _home(work, _copy(snapshot, work))
    for (module, function), name in PARTS.items():
        setattr(module, function, wrapped(name, originals[module, function]))
    try:
        t = time.perf_counter()
        out = linked_groups.run(home, COLLECTION)
        wall = time.perf_counter() - t
    finally:
        for (module, function), f in originals.items():
            setattr(module, function, f)
        shutil.rmtree(work)
    return {
        "wall_s": round(wall, 3),
        "passed": out.passed,
        "relinked": out.relinked,
        "computed": out.computed,
        "carried": out.carried,
        "questions_unread": out.questions_unread,
        "parts_s": {k: round(v, 3) for k, v in parts.items()},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--home", type=Path, required=True, help="a synced linked_cost.py home")
    ap.add_argument("--at", type=float, default=0.5, help="where the edited message is (0-1)")
    ap.add_argument("--tries", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    changes: dict[str, Callable[[Path], str]] = {
        "append": lambda source: append_message(source, "appended"),
        "edit": lambda source: _edit(source, args.at),
    }
    with tempfile.TemporaryDirectory(prefix="linked-edit-") as scratch:
        root = Path(scratch)
        snaps = {name: root / name for name in changes}
        changed = {
            name: _snapshot(args.home.resolve(), snaps[name], change)
            for name, change in changes.items()
        }
        tries: dict[str, list[dict[str, Any]]] = {name: [] for name in changes}
        for k in range(args.tries):
            for name in changes:
                tries[name].append(_timed(snaps[name], root / f"run-{name}-{k}"))
    report = {}
    for name, runs in tries.items():
        best = min(runs, key=lambda r: r["wall_s"])
        report[name] = {**best, "message": changed[name], "tries_s": [r["wall_s"] for r in runs]}
    if args.json:
        print(json.dumps(report))
        return 0
    for name, r in report.items():
        parts = ", ".join(f"{k} {v:.2f} s" for k, v in r["parts_s"].items())
        print(
            f"{name} ({r['message']}): {r['wall_s']:.2f} s (tries {r['tries_s']}); "
            f"{r['relinked']:,} links decided again, {r['computed']:,} results computed, "
            f"{r['carried']:,} rows carried, {r['questions_unread']:,} questions unread; "
            f"{parts}"
        )
    ratio = report["edit"]["wall_s"] / report["append"]["wall_s"]
    print(f"the edit costs {ratio:.2f}x the append")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
