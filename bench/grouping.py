"""Conversation grouping on irc-disentanglement: ours beside the channel-wide 5-minute rule.

Groups every log of a split from the logs alone, then reads the split's gold clusters to
score, in the same run, ours, ours then the merge pass (``corpus_index/linked/merging.py``, not
in the pipeline), the rule over every line, and the rule over chat lines with each system line
alone (a fairer form of it): 1 - scaled VI, one-to-one overlap and conversation
precision/recall/F as the data's SOURCE.md defines them. Targets: above Elsner and Charniak 2008
(82.1 / 51.4 / 15.5); aim, the paper's linear model (88.9 / 69.5 / 21.8).

    .venv/bin/python bench/grouping.py [--data DIR] [--split dev] [--weights FILE] [--json]
    .venv/bin/python bench/grouping.py --scale 50000    # one long channel: time and peak RSS
"""

from __future__ import annotations

import _common

_common.configure(threads=1)

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

from corpus_index.linked.clusters import read_clusters  # noqa: E402
from corpus_index.linked.conversations import five_minute_rule, group_conversations  # noqa: E402
from corpus_index.linked.irc import read_folder  # noqa: E402
from corpus_index.linked.merging import merge_conversations  # noqa: E402
from corpus_index.linked.messages import Message  # noqa: E402
from corpus_index.linked.model import LinkModel  # noqa: E402
from corpus_index.linked.scoring import score  # noqa: E402
from corpus_index.linked.similarity import Similarity  # noqa: E402

DATA = Path("/work/shared/evaldata/irc-disentanglement")
TARGETS = {"elsner_charniak_2008": (82.1, 51.4, 15.5), "linear_model": (88.9, 69.5, 21.8)}


def main(argv: list[str] | None = None) -> int:
    """Print both groupings' scores (or one JSON object with ``--json``)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--split", default="dev")
    ap.add_argument("--weights", type=Path, default=None, help="default: the shipped weights")
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--scale",
        type=int,
        default=0,
        help="instead, group N messages as one channel (the split's logs repeated) and report "
        "the time and the process's peak RSS",
    )
    args = ap.parse_args(argv)
    if args.scale:
        return scale(args.data / args.split, args.scale, LinkModel.load(args.weights))
    model = LinkModel.load(args.weights)
    logs = read_folder(args.data / args.split)
    messages = [m for stem in sorted(logs) for m in logs[stem]]
    started = time.perf_counter()
    ours = group_conversations(messages, model=model)
    took = time.perf_counter() - started
    chat = [m for m in messages if not m.system]
    started = time.perf_counter()
    merged = merge_conversations(
        ours, {m.unit_id: m for m in messages}, similarity=Similarity(chat)
    )
    took_merge = time.perf_counter() - started
    rule = five_minute_rule(messages)
    rule_chat = five_minute_rule(messages, system_alone=True)
    gold = read_clusters(args.data / f"gold.{args.split}.clusters.txt")  # scoring only
    results = {
        "linked": score(gold, ours)._asdict(),
        "linked_then_merged": score(gold, merged)._asdict(),
        "five_minute_rule": score(gold, rule)._asdict(),
        "five_minute_chat_only": score(gold, rule_chat)._asdict(),
    }
    out = {
        "split": args.split,
        "logs": len(logs),
        "messages_grouped": len(messages),
        "grouping_seconds": round(took, 2),
        "merge_seconds": round(took_merge, 2),
        "weights": model.trained_on,
        "results": results,
        "targets": TARGETS,
    }
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(
        f"{args.split}: {len(logs)} logs, {len(messages)} lines grouped in {took:.1f} s "
        f"(+ {took_merge:.1f} s to merge); "
        f"scored on {results['linked']['messages']} annotated messages"
    )
    print(f"{'grouping':<22} {'VI':>6} {'1-1':>6} {'P':>6} {'R':>6} {'F':>6} {'convs':>6}")
    for name, r in results.items():
        print(
            f"{name:<22} {r['vi']:6.1f} {r['one_to_one']:6.1f} {r['precision']:6.1f} "
            f"{r['recall']:6.1f} {r['f']:6.1f} {r['auto_conversations']:6d}"
        )
    for name, (vi, one, f) in TARGETS.items():
        print(f"{name:<22} {vi:6.1f} {one:6.1f} {'':>6} {'':>6} {f:6.1f}   (published, test split)")
    return 0


def scale(folder: Path, n: int, model: LinkModel) -> int:
    """Group ``n`` messages of one channel (the logs of ``folder`` repeated, in time order)."""
    logs = read_folder(folder)
    messages: list[Message] = []
    while len(messages) < n:
        rep = len(messages)
        for stem in sorted(logs):
            messages.extend(
                replace(m, unit_id=f"{rep}/{m.unit_id}", channel="one") for m in logs[stem]
            )
    messages = messages[:n]
    started = time.perf_counter()
    conversations = group_conversations(messages, model=model)
    took = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{n} messages in one channel: {len(conversations)} conversations in {took:.1f} s; "
        f"peak RSS {peak:.0f} MiB"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
