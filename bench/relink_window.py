"""Conversation links of one appended message, decided from the channel's recent window and
the tail the last run kept of it, beside the same message decided over its whole channel
(the relinker without the tails, as before ``channel_tails``), in the same run.

For each size: the ``bench/linked_cost.py`` stream (``tests/streamgen.py``, five channels),
linked once without its last message, that run's links and tails round-tripped through their
table as the step keeps them; then the last message linked again from them, both ways, in
turn, ``--tries`` times. Prints the fastest and median seconds of ``Relinker.group`` and of
the channel's features and decoding alone, the messages each way reads to decide the new one,
and checks that both give the same links.

    .venv/bin/python bench/relink_window.py [--sizes 5000,50000] [--tries 7] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, configure  # noqa: E402

configure(threads=1)
sys.path.insert(0, str(REPO))

from corpus_index.linked import relink as relink_module  # noqa: E402
from corpus_index.linked.relink import (  # noqa: E402
    Relinker,
    links_table,
    read_links,
    read_tails,
)
from tests.streamgen import stream  # noqa: E402

CHANNELS = 5


def _features_time() -> tuple[list[float], list[int]]:
    """Wrap the relinker's ``channel_features`` and ``decode`` to time them and count the
    messages the features read; returns the lists they fill."""
    seconds: list[float] = []
    read: list[int] = []
    features, decode = relink_module.channel_features, relink_module.decode

    def timed_features(messages: Any, **kw: Any) -> Any:
        t = time.perf_counter()
        try:
            return features(messages, **kw)
        finally:
            seconds.append(time.perf_counter() - t)
            read.append(len(messages))

    def timed_decode(*a: Any, **kw: Any) -> Any:
        t = time.perf_counter()
        try:
            return decode(*a, **kw)
        finally:
            seconds.append(time.perf_counter() - t)

    relink_module.channel_features = timed_features  # type: ignore[assignment]
    relink_module.decode = timed_decode  # type: ignore[assignment]
    return seconds, read


def measure(size: int, tries: int) -> dict[str, Any]:
    messages = stream(size, channels=CHANNELS, seed=1)
    first = Relinker()
    first.group(messages[:-1])
    table = links_table(first.links, {"": first.tails})
    previous, tails = read_links(table), read_tails(table).get("", {})
    channel = sum(1 for m in messages if m.channel == messages[-1].channel)
    inner, read = _features_time()
    sides: dict[str, dict[str, list[float]]] = {
        w: {"group_s": [], "features_decode_s": []} for w in ("window", "whole")
    }
    links: dict[str, list[int]] = {}
    counted: dict[str, int] = {}
    windowed: dict[str, int] = {}
    for k in range(tries):
        for side in ("window", "whole") if k % 2 == 0 else ("whole", "window"):
            r = Relinker(previous, history=tails if side == "window" else {})
            inner.clear()
            read.clear()
            t = time.perf_counter()
            r.group(messages)
            sides[side]["group_s"].append(time.perf_counter() - t)
            sides[side]["features_decode_s"].append(sum(inner))
            assert r.relinked == 1
            windowed[side] = r.from_window
            links[side] = [x.parent for x in r.links]
            counted[side] = sum(read)
    same = links["window"] == links["whole"]
    if not same:
        raise SystemExit(f"{size}: the window's links differ from the whole channel's")
    out: dict[str, Any] = {
        "messages": size,
        "channel": channel,
        "same_links": same,
        # a channel shorter than a TF-IDF block and a window is decided whole either way
        "window_used": bool(windowed["window"]),
    }
    for side, got in sides.items():
        out[side] = {
            **{f"{k}_min": round(min(v), 4) for k, v in got.items()},
            **{f"{k}_median": round(statistics.median(v), 4) for k, v in got.items()},
            "messages_read": counted[side],
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="5000,50000")
    ap.add_argument("--tries", type=int, default=7)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = [measure(int(s), args.tries) for s in args.sizes.split(",") if s]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(
        f"{'messages':>9} {'channel':>8} {'way':>7} {'read':>7} {'group s':>16} {'features+decode s':>20}"
    )
    for row in rows:
        for side in ("whole", "window"):
            s = row[side]
            group = f"{s['group_s_min']:.4f} / {s['group_s_median']:.4f}"
            inner = f"{s['features_decode_s_min']:.4f} / {s['features_decode_s_median']:.4f}"
            print(
                f"{row['messages']:>9,} {row['channel']:>8,} {side:>7} {s['messages_read']:>7,}"
                f" {group:>16} {inner:>20}"
            )
    print("(fastest / median of the tries; the same links both ways, checked; a channel")
    print(" shorter than 2,048 + 50 messages is decided whole either way)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
