"""Train the conversation-link weights shipped in ``corpus_index/linked/links-v2.json``.

Reads the train split of irc-disentanglement (logs and their reply annotations), computes
the link features of every log, and fits the conditional-logit weights (L-BFGS, deterministic:
same data, same weights). Only the train split is read.

Two stages, because the conversation-level features (the time since the last message of the
candidate's conversation, ...) depend on the conversations decided before each message: stage
one fits without them; its decisions on the unannotated context lines, with the gold links on
the annotated ones, are replayed to fill them in; stage two fits all the weights.

    .venv/bin/python bench/train_grouping.py [--data DIR] [--window 50] [--l2 1.0] [--out FILE]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from corpus_index.linked.conversations import decode  # noqa: E402
from corpus_index.linked.features import ChannelFeatures, channel_features  # noqa: E402
from corpus_index.linked.irc import read_folder  # noqa: E402
from corpus_index.linked.model import DEFAULT_WEIGHTS, Example, fit  # noqa: E402
from corpus_index.linked.state import ConversationState  # noqa: E402

DATA = Path("/work/shared/evaldata/irc-disentanglement")
OUT = Path(__file__).resolve().parents[1] / "corpus_index" / "linked" / DEFAULT_WEIGHTS


def read_links(path: Path) -> dict[int, list[int]]:
    """Gold parents per annotated message: ``A B -`` lines, B replies to A (A == B: starts)."""
    parents: dict[int, list[int]] = defaultdict(list)
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) >= 2:
            parents[int(parts[1])].append(int(parts[0]))
    return parents


def gold_options(n: int, parents: dict[int, list[int]], window: int) -> np.ndarray:
    """``[n, 1 + window]``: column 0 when the message starts a conversation, k when its gold
    parent is k back; unannotated messages have none (they are left out of the fit)."""
    gold = np.zeros((n, 1 + window), dtype=bool)
    for child, ps in parents.items():
        for p in ps:
            k = child - p
            if 0 <= k <= window and child < n:
                gold[child, k] = True
    return gold


def replay(features: ChannelFeatures, pair: np.ndarray, parents: list[int]) -> None:
    """Fill the conversation columns of ``pair`` as if each message had joined ``parents[i]``."""
    state = ConversationState(features)
    for i, parent in enumerate(parents):
        state.fill(i, pair[i])
        state.join(i, parent)


def main(argv: list[str] | None = None) -> int:
    """Fit and write the weights; print what was fitted on and how long it took."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--window", type=int, default=50)
    ap.add_argument("--l2", type=float, default=1.0)
    ap.add_argument("--limit", type=int, default=0, help="use only the first N train logs")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    started = time.perf_counter()
    logs = read_folder(args.data / "train")
    stems = sorted(logs)[: args.limit or None]
    examples = []
    gold_links = []
    annotated = 0
    for stem in stems:
        messages = logs[stem]
        links = read_links(args.data / "train" / f"{stem}.annotation.txt")
        for child in list(links):
            if messages[child].system:  # always a conversation of its own: nothing to learn
                del links[child]
        annotated += len(links)
        features = channel_features(messages, window=args.window)
        pair = features.pair_rows(0, len(messages))
        examples.append(Example(pair, features, gold_options(len(messages), links, args.window)))
        gold_links.append(links)
    featured = time.perf_counter()
    first = fit(examples, window=args.window, l2=args.l2)
    for stem, (pair, features, _), links in zip(stems, examples, gold_links, strict=True):
        parents = decode(logs[stem], features, first, pair=pair, responses=False)
        for child, ps in links.items():
            parents[child] = max(ps)  # the latest gold parent
        replay(features, pair, parents)
    model = fit(
        examples,
        window=args.window,
        l2=args.l2,
        trained_on=f"irc-disentanglement train, {len(stems)} logs, {annotated} messages, "
        f"l2 {args.l2}",
    )
    model.save(args.out)
    done = time.perf_counter()
    print(f"{len(stems)} logs, {annotated} annotated chat messages")
    print(f"features {featured - started:.1f} s, fit {done - featured:.1f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
