"""Conversation grouping on irc-disentanglement: ours beside the channel-wide 5-minute rule.

Groups every log of a split from the logs alone, then reads the split's gold clusters to
score, in the same run, ours, ours with the link model alone (without the replies read by how
people write, ``corpus_index/linked/responses.py``), ours then the merge pass
(``corpus_index/linked/merging.py``, not in the pipeline), the rule over every line, and the
rule over chat lines with each system line alone (a fairer form of it): 1 - scaled VI,
one-to-one overlap and conversation precision/recall/F as the data's SOURCE.md defines them.
Targets: above Elsner and Charniak 2008 (82.1 / 51.4 / 15.5); aim, the paper's linear model
(88.9 / 69.5 / 21.8).

Then the messages sample (``sample_corpus/messages``, each tenant on its own), ours and the
model alone, scored against its ``truth.yaml`` (never read to group): same-conversation pairs
(precision, recall, F) and the conversations of two or more held whole by one, over the staff
chat channels and over every conversational source (chat, SMS, e-mail, calls).

    .venv/bin/python bench/grouping.py [--data DIR] [--split dev] [--weights FILE] [--json]
    .venv/bin/python bench/grouping.py --scale 50000    # one long channel: time and peak RSS
"""

from __future__ import annotations

import _common

_common.configure(threads=1)

import argparse  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

import yaml  # noqa: E402
from linked_contexts import SAMPLE, TENANTS, sample  # noqa: E402

from corpus_index.linked.clusters import gold_named, read_clusters  # noqa: E402
from corpus_index.linked.conversations import five_minute_rule, group_conversations  # noqa: E402
from corpus_index.linked.groups import NOT_CONVERSATIONAL  # noqa: E402
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
    alone = group_conversations(messages, model=model, responses=False)
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
        "linked": score(gold, gold_named(ours, gold=gold))._asdict(),
        "linked_model_alone": score(gold, gold_named(alone, gold=gold))._asdict(),
        "linked_then_merged": score(gold, gold_named(merged, gold=gold))._asdict(),
        "five_minute_rule": score(gold, gold_named(rule, gold=gold))._asdict(),
        "five_minute_chat_only": score(gold, gold_named(rule_chat, gold=gold))._asdict(),
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
        "sample": {
            "linked": sample_scores(model, True),
            "linked_model_alone": sample_scores(model, False),
        },
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
    print("messages sample, same-conversation pairs against truth.yaml:")
    print(f"{'grouping':<22} {'units':<8} {'P':>6} {'R':>6} {'F':>6} {'whole':>8}")
    for name, by_units in out["sample"].items():
        for units, r in by_units.items():
            print(
                f"{name:<22} {units:<8} {r['precision']:6.1f} {r['recall']:6.1f} {r['f']:6.1f} "
                f"{r['whole']:>4}/{r['conversations']}"
            )
    return 0


def sample_scores(model: LinkModel, responses: bool) -> dict[str, dict[str, float]]:
    """Pair precision/recall/F and whole conversations on the messages sample, over the chat
    channels (``chat``) and over every conversational source (``all``)."""
    truth = yaml.safe_load((SAMPLE / "truth.yaml").read_text(encoding="utf-8"))["tenants"]
    counts = {units: [0, 0, 0, 0, 0] for units in ("chat", "all")}  # tp fp fn whole total
    for tenant in TENANTS:
        units = [m for m in sample(tenant) if m.source not in NOT_CONVERSATIONAL]
        source = {m.unit_id: m.source for m in units}
        auto = {}
        for k, ids in enumerate(group_conversations(units, model=model, responses=responses)):
            auto.update(dict.fromkeys(ids, k))
        gold = [c["members"] for c in truth[tenant]["conversations"]]
        label = {u: k for k, members in enumerate(gold) for u in members}
        for name, c in counts.items():
            keep = [u for u in label if name == "all" or source[u] == "discord_chat"]
            for a, b in itertools.combinations(keep, 2):
                same_gold, same_auto = label[a] == label[b], auto[a] == auto[b]
                c[0] += same_gold and same_auto
                c[1] += same_auto and not same_gold
                c[2] += same_gold and not same_auto
            for members in gold:
                kept = [u for u in members if u in keep]
                if len(kept) > 1:
                    c[3] += len({auto[u] for u in kept}) == 1
                    c[4] += 1
    out = {}
    for name, (tp, fp, fn, whole, total) in counts.items():
        p, r = 100.0 * tp / max(tp + fp, 1), 100.0 * tp / max(tp + fn, 1)
        f = 2 * p * r / (p + r) if p + r else 0.0
        out[name] = {"precision": p, "recall": r, "f": f, "whole": whole, "conversations": total}
    return out


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
