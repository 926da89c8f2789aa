"""What decision threads and topic clusters add to linking a collection, measured in the same
run beside the rest of :func:`corpus_index.linked.groups.link_units`.

For each size N (``--sizes``, default 5,000 and 20,000) a generated staff-chat stream
(``tests/streamgen.py``: five channels at five places) is linked once in full (``link_units``,
no memo: every group described) and, from the same run's conversations and question links,
:func:`~corpus_index.linked.decisions.decision_threads` and
:func:`~corpus_index.linked.topics.topic_clusters` are timed on their own (the fastest of
``--repeat`` tries each). The figure is their share of the whole ``link_units`` (which
includes them).

    .venv/bin/python bench/linked_types.py [--sizes 5000,20000] [--repeat 3] [--json]

Other processes on the machine share the cores: figures are noisy.
"""

from __future__ import annotations

import _common

_common.configure(threads=2)

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

from corpus_index.linked.decisions import decision_threads  # noqa: E402
from corpus_index.linked.groups import _units, conversation_groups, link_units  # noqa: E402
from corpus_index.linked.questions import find_answers  # noqa: E402
from corpus_index.linked.similarity import Similarity  # noqa: E402
from corpus_index.linked.topics import topic_clusters  # noqa: E402
from tests.streamgen import stream  # noqa: E402


def fastest(repeat: int, work: Callable[[], Any]) -> tuple[float, Any]:
    """The shortest wall time of ``repeat`` runs of ``work``, and its last result."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = work()
        best = min(best, time.perf_counter() - t0)
    return best, out


def measure(n: int, repeat: int) -> dict[str, Any]:
    messages = stream(n, channels=5, seed=11)
    whole_s, groups = fastest(repeat, lambda: link_units(messages))
    units = _units(messages)
    similarity = Similarity(units)
    threads = [g.member_ids for g in conversation_groups(units)]
    links = find_answers(units, similarity=similarity)
    answered = {link.question: link.answer for link in links if link.answer}
    decisions_s, decided = fastest(
        repeat,
        lambda: decision_threads(
            units, conversations=threads, answers=answered, similarity=similarity
        ),
    )
    topics_s, clusters = fastest(
        repeat, lambda: topic_clusters(units, conversations=threads, similarity=similarity)
    )
    return {
        "messages": n,
        "link_units_s": round(whole_s, 3),
        "decision_threads_s": round(decisions_s, 4),
        "topic_clusters_s": round(topics_s, 4),
        "share": round((decisions_s + topics_s) / whole_s, 4),
        "groups": len(groups),
        "decision_threads": len(decided),
        "topic_clusters": len(clusters),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="5000,20000", help="stream sizes, comma-separated")
    ap.add_argument("--repeat", type=int, default=3, help="tries of each timing (fastest kept)")
    ap.add_argument("--json", action="store_true", help="print JSON")
    args = ap.parse_args()
    rows = [measure(int(n), args.repeat) for n in args.sizes.split(",")]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    for r in rows:
        print(
            f"{r['messages']:>7} messages: link_units {r['link_units_s']:.3f} s, of which "
            f"decision threads {r['decision_threads_s']:.4f} s and topic clusters "
            f"{r['topic_clusters_s']:.4f} s ({100 * r['share']:.2f}%); {r['groups']} groups, "
            f"{r['decision_threads']} decision threads, {r['topic_clusters']} topic clusters"
        )


if __name__ == "__main__":
    main()
