"""The manifest scan of a one-block sync, alone: every document trusted by its size and mtime.

Generates N deals (or reads ``--source DIR``, a folder of ``.uw.md`` deals), scans them once in
full (reading and hashing every file), then times ``--repeat`` scans against that manifest, as
the ``source_manifest`` step of a sync with nothing new does. Prints CPU and wall seconds of each
scan. It isolates the one part of the incremental sync that visits every document's file.

``--messages N``: N generated chat messages (the ``linked_cost.py`` stream, in stream files of
10,000) and one more at the end, as that bench's one-message sync adds it; each scan
against the manifest from before the message is timed twice in turn, listing the unchanged
stream files from that manifest (``sources.STREAM_FILES_KEY``) and reading every file (the
same manifest without that note), and the two manifests are compared.

Usage (from the repository root)::

    .venv/bin/python bench/manifest_scan.py --deals 10000
    .venv/bin/python bench/manifest_scan.py --source /path/to/deals --repeat 5
    .venv/bin/python bench/manifest_scan.py --messages 50000 --repeat 5
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
    ap.add_argument("--messages", type=int, default=0, help="N generated chat messages instead")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    _common.configure(threads=2)
    if args.messages:
        with _common.bench_home(None, "bench-stream-scan-") as root:
            return measure_streams(root, args.messages, args.repeat)
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


def measure_streams(root: Path, n: int, repeat: int) -> int:
    from linked_cost import COLLECTION, one_more, write_streams

    from corpus_index.collection import CollectionConfig
    from corpus_index.sources import STREAM_FILES_KEY, scan_manifest
    from tests.streamgen import stream

    source = root / "source"
    source.mkdir()
    messages = stream(n, channels=5)
    write_streams(messages, source)
    collection = CollectionConfig(
        name=COLLECTION, kind="messages", path=source, tenant="bench", acl_groups=("bench-staff",)
    )
    time.sleep(1.1)  # files written a clock tick before the scan that notes them are trusted
    first = scan_manifest(collection, None).table
    write_streams([*messages, one_more(messages, 0)], source)  # the last file alone rewritten
    meta = dict(first.schema.metadata or {})
    meta.pop(STREAM_FILES_KEY, None)
    unnoted = first.replace_schema_metadata(meta)
    times: dict[str, list[tuple[float, float]]] = {"listed": [], "read": []}
    tables = {}
    for _ in range(repeat):
        for side, previous in (("listed", first), ("read", unnoted)):
            c0, w0 = time.process_time(), time.perf_counter()
            result = scan_manifest(collection, previous)
            times[side].append((time.process_time() - c0, time.perf_counter() - w0))
            if (result.added, result.unchanged) != (1, n):
                sys.exit(f"error: {side}: {result.added} added, {result.unchanged} unchanged")
            tables[side] = result.table.replace_schema_metadata({})
    if not tables["listed"].equals(tables["read"]):
        sys.exit("error: the two scans' manifests differ")
    print(f"manifest scan of {n:,} messages and one more at the end, {repeat} scans a side")
    for side, label in (("listed", "unchanged files listed"), ("read", "every file read")):
        cpu = [c for c, _ in times[side]]
        wall = [w for _, w in times[side]]
        print(
            f"  {label}: CPU s median {statistics.median(cpu):.3f} ({', '.join(f'{c:.3f}' for c in cpu)}); wall s median {statistics.median(wall):.3f}"
        )
    print("  the two manifests are the same")
    return 0


if __name__ == "__main__":
    sys.exit(main())
