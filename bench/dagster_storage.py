"""``corpus sync`` on the embedded instance's pooled SQLite storage beside Dagster's default
SQLite storage, same run.

After an untimed sync of a one-deal home (the first sync of a process imports what the others
use), two copies of one home of generated deals (hash embedder), each with its own Dagster folder:
one as the project writes it (``storage:`` names ``pipelines.sqlite_storage``), one with a
hand-written ``dagster.yaml`` that has no ``storage:`` block, so Dagster keeps the same
files through its own storages. Both are synced once (the build, then promoted), then
``--repeat`` times in turn: a sync that changes nothing, and a sync after one deal changed.
Prints each kind of sync's median wall seconds for both sides and their ratio; the searches
of both homes must match.

    .venv/bin/python bench/dagster_storage.py [--deals 20] [--repeat 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common  # noqa: E402  (sets up sys.path for the project; imports nothing heavy)

EMBEDDER = "hash:v1-64"


def _default_storage_yaml() -> str:
    """The embedded ``dagster.yaml`` without its marker line and ``storage:`` block: written
    by hand as far as ``prepare`` can tell, so it is left alone and Dagster's own SQLite
    storages keep the folder."""
    from corpus_index.dagster_home import DAGSTER_YAML, run_monitoring_yaml

    body = DAGSTER_YAML.split("\n", 1)[1]
    assert "storage:" not in body
    return body + run_monitoring_yaml()


def _sync(settings: Any) -> float:
    from definitions import dagster_runner

    t0 = time.perf_counter()
    report = dagster_runner().sync(settings)
    if not report.ok:
        raise SystemExit(f"a sync of {settings.home} failed")
    return time.perf_counter() - t0


def _promote(settings: Any) -> None:
    from definitions import dagster_runner

    if not dagster_runner().promote(settings, "bench", "").success:
        raise SystemExit(f"the build of {settings.home} could not be promoted")


def _change(source: Path, k: int) -> None:
    """One deal's text changed (a sentence appended to its first file), a new one each time."""
    first = sorted(source.rglob("*.uw.md"))[0]
    first.write_text(
        first.read_text(encoding="utf-8") + f"\nA note added on visit {k}.\n", encoding="utf-8"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--deals", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    _common.configure(threads=1)
    from corpus_index.config import Settings
    from corpus_index.dagster_home import prepare

    with tempfile.TemporaryDirectory(prefix="dagster-storage-") as scratch:
        root = Path(scratch)
        sides: dict[str, Any] = {}
        for name in ("pooled", "default"):
            config = _common.deals_home(
                root / name / "source", root / name / "corpus.yaml", args.deals, embedder=EMBEDDER
            )
            settings = Settings(config_path=config, home=root / name / "home")
            if name == "default":
                settings.dagster_home.mkdir(parents=True)
                (settings.dagster_home / "dagster.yaml").write_text(
                    _default_storage_yaml(), encoding="utf-8"
                )
            prepare(settings.dagster_home)
            sides[name] = settings
        text = {n: (s.dagster_home / "dagster.yaml").read_text() for n, s in sides.items()}
        if "pipelines.sqlite_storage" not in text["pooled"] or "storage:" in text["default"]:
            raise SystemExit("the two sides' dagster.yaml are not the two storages")
        times: dict[str, dict[str, list[float]]] = {
            n: {"build": [], "nothing changed": [], "one deal changed": []} for n in sides
        }
        # the first sync of a process imports and loads what every later one uses: untimed
        warm = root / "warm-up"
        _sync(
            Settings(
                config_path=_common.deals_home(
                    warm / "source", warm / "corpus.yaml", 1, embedder=EMBEDDER
                ),
                home=warm / "home",
            )
        )
        for name, settings in sides.items():
            times[name]["build"].append(_sync(settings))
            _promote(settings)
        for k in range(args.repeat):
            order = list(sides) if k % 2 == 0 else list(reversed(sides))
            for name in order:
                times[name]["nothing changed"].append(_sync(sides[name]))
            for name in order:
                _change(sides[name].config_path.parent / "source", k)
                times[name]["one deal changed"].append(_sync(sides[name]))
        hits = {n: _hits(s) for n, s in sides.items()}
        if hits["pooled"] != hits["default"]:
            raise SystemExit("the two homes answer differently")
    result = {
        "deals": args.deals,
        "repeat": args.repeat,
        "median_s": {
            n: {kind: round(statistics.median(v), 3) for kind, v in t.items()}
            for n, t in times.items()
        },
        "all_s": {
            n: {kind: [round(x, 3) for x in v] for kind, v in t.items()} for n, t in times.items()
        },
    }
    result["pooled_over_default"] = {
        kind: round(result["median_s"]["pooled"][kind] / result["median_s"]["default"][kind], 3)
        for kind in times["pooled"]
    }
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{args.deals} deals, hash embedder; median of {args.repeat} (the build: once)")
    print(f"{'sync':<18} {'Dagster default':>16} {'pooled':>8} {'ratio':>7}")
    for kind in times["pooled"]:
        d, p = result["median_s"]["default"][kind], result["median_s"]["pooled"][kind]
        print(f"{kind:<18} {d:>15.2f}s {p:>7.2f}s {p / d:>7.3f}")
    return 0


def _hits(settings: Any) -> list[tuple[str, str]]:
    """The source and section of each hit of one query."""
    from corpus_index.home import Home
    from corpus_index.search import Principal, Searcher

    found = Searcher(Home(settings)).search(
        "roof insurance tenant lease",
        principal=Principal(_common.DEALS_TENANT, tuple(_common.DEALS_ACL)),
        k=10,
    )
    return [(h.source_id, h.section) for h in found.hits]


if __name__ == "__main__":
    sys.exit(main())
