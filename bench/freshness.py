"""Freshness: seconds from writing a new deal to `corpus search` returning it, and from deleting
it to its disappearance, with the real Dagster daemon and webserver doing the work.

    .venv/bin/python bench/freshness.py [--model minilm|hash] [--interval 10] [--json]

A temporary home gets the bundled sample corpus (copied), one `corpus sync` and a promotion;
then `dagster dev` starts over it with the sensors ticking every ``--interval`` seconds. The
script writes a new deal, polls the search path (a fresh process state each time: a new Home
and Searcher) every second until the deal is a hit, deletes the file, and polls until it is
gone. Target: under 60 s each.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from corpus_index.config import Settings  # noqa: E402
from corpus_index.environment import configure_environment  # noqa: E402
from corpus_index.home import Home  # noqa: E402
from corpus_index.search import Principal, Searcher  # noqa: E402
from definitions import dagster_runner  # noqa: E402
from pipelines.devserver import dagster_dev  # noqa: E402

configure_environment()

TARGET_S = 60.0
NEW_DEAL = """---
uw_version: "1.1"
deal_id: DEAL-2026-0999
title: Funicular Landing Lofts
asset_class: multifamily
geo: {state: WA, metro: Seattle}
units: 88
date: "2026-11-01"
---

# Funicular Landing Lofts

## property
```yaml
name: Funicular Landing Lofts
description: Eighty-eight loft units reached by a restored funicular railway from the ferry landing.
```

## risk_assessment
```yaml
flags:
  - id: funicular
    description: The funicular railway is the only step-free access; its cable needs replacing within two years.
    severity: high
```
"""


def home(workdir: Path, model: str) -> Settings:
    shutil.copytree(ROOT / "sample_corpus", workdir / "sample_corpus")
    shutil.copytree(ROOT / "golden", workdir / "golden")
    config = yaml.safe_load((ROOT / "corpus.yaml").read_text())
    if model == "hash":
        config["profiles"] = {"minilm": {"embedder": "hash:v1-384", "namespace": "deals"}}
    (workdir / "corpus.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return Settings(config_path=workdir / "corpus.yaml", home=workdir / ".corpus")


def visible(settings: Settings) -> bool:
    hits = (
        Searcher(Home(settings))
        .search(
            "funicular railway cable replacement",
            principal=Principal("meridian", ("uw-team",)),
            k=5,
        )
        .hits
    )
    return any(h.source_id == "meridian-deals/deal-2026-0999" for h in hits)


def poll(settings: Settings, present: bool, limit_s: float) -> float | None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        if visible(settings) == present:
            return time.monotonic() - t0
        time.sleep(1.0)
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=["minilm", "hash"], default="minilm")
    parser.add_argument("--interval", type=int, default=10, help="sensor interval, seconds")
    parser.add_argument("--limit", type=float, default=300.0, help="give up after, seconds")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="corpus-freshness-") as tmp:
        settings = home(Path(tmp), args.model)
        t0 = time.monotonic()
        if (
            not dagster_runner().sync(settings).ok
            or not dagster_runner().promote(settings, "deals", "").success
        ):
            print("initial sync failed", file=sys.stderr)
            return 1
        setup_s = time.monotonic() - t0
        deal = Path(tmp) / "sample_corpus" / "meridian" / "deal-2026-0999.uw.md"
        with dagster_dev(settings, sensor_interval_s=args.interval) as server:
            time.sleep(args.interval + 2)  # the sensor's first tick records the cursor
            deal.write_text(NEW_DEAL, encoding="utf-8")
            add_s = poll(settings, True, args.limit)
            deal.unlink()
            delete_s = poll(settings, False, args.limit) if add_s is not None else None
            log = server.log.read_text(errors="replace")[-2000:]
    result = {
        "model": args.model,
        "sensor_interval_s": args.interval,
        "initial_sync_s": round(setup_s, 1),
        "add_to_searchable_s": None if add_s is None else round(add_s, 1),
        "delete_to_gone_s": None if delete_s is None else round(delete_s, 1),
        "target_s": TARGET_S,
    }
    ok = all(v is not None and v < TARGET_S for v in (add_s, delete_s))
    result["pass"] = ok
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"model {args.model}, sensor interval {args.interval} s (initial sync {setup_s:.0f} s)"
        )
        for label, value in (
            ("new deal searchable after", add_s),
            ("deleted deal gone after", delete_s),
        ):
            shown = "timed out" if value is None else f"{value:6.1f} s"
            print(f"  {label:<28}{shown}   target < {TARGET_S:.0f} s")
        print("PASS" if ok else "FAIL")
        if not ok:
            print(log)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
