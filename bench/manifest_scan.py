"""The manifest scan of a one-block sync, alone: every document trusted by its size and mtime.

Generates N deals (or reads ``--source DIR``, a folder of ``.uw.md`` deals), scans them once in
full (reading and hashing every file), then times ``--repeat`` scans against that manifest, as
the ``source_manifest`` step of a sync with nothing new does. Prints CPU and wall seconds of each
scan. It isolates the one part of the incremental sync that visits every document's file.

Usage (from the repository root)::

    .venv/bin/python bench/manifest_scan.py --deals 10000
    .venv/bin/python bench/manifest_scan.py --source /path/to/deals --repeat 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402  (sets up sys.path for the project; imports nothing heavy)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--deals", type=int, default=10_000)
    ap.add_argument("--source", type=Path, default=None, help="a folder of .uw.md deals")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    _common.configure(threads=2)
    if args.source is not None:
        if not args.source.is_dir():
            sys.exit(f"error: --source {args.source}: not a folder")
        return measure(args.source, args.repeat)
    with _common.bench_home(None, "bench-manifest-scan-") as root:
        _common.write_deals(
            root / "source", args.deals, tenant=_common.DEALS_TENANT, acl=_common.DEALS_ACL
        )
        return measure(root / "source", args.repeat)


def measure(source: Path, repeat: int) -> int:
    from corpus_index.collection import CollectionConfig
    from corpus_index.sources import scan_manifest

    collection = CollectionConfig(
        name=_common.DEALS_COLLECTION,
        kind="uw_deals",
        path=source,
        tenant=_common.DEALS_TENANT,
        acl_groups=tuple(_common.DEALS_ACL),
    )
    first = scan_manifest(collection, None).table
    time.sleep(1.1)  # past the first scan's clock tick: every file is trusted from here on
    cpu, wall = [], []
    for _ in range(repeat):
        c0, w0 = time.process_time(), time.perf_counter()
        result = scan_manifest(collection, first)
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
        if result.unchanged != result.documents:
            sys.exit(f"error: {source}: files changed during the measurement")
    print(f"manifest scan of {result.documents} unchanged documents in {source}, {repeat} scans")
    print(f"  CPU s:  {', '.join(f'{c:.3f}' for c in cpu)} (median {statistics.median(cpu):.3f})")
    print(f"  wall s: {', '.join(f'{w:.3f}' for w in wall)} (median {statistics.median(wall):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
