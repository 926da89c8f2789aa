"""What grouping costs: a new message in a long message stream, linked from the last run's
links (its channel's last TF-IDF block) beside a full re-link, measured in the same run.

Two parts, on generated staff-chat streams (``tests/streamgen.py``: five channels at five
places, several conversations at once, questions, replies that name the asker):

1. ``--sizes`` (default 5,000 and 50,000 messages), in the library: conversations of the whole
   stream linked from nothing (the baseline: what every sync did before), then one message
   appended and linked again from the first run's links; the counts of messages decided
   again; both give the same conversations (checked). With ``--groups-up-to N`` (5,000), also
   every grouping (:func:`link_units`: conversations, questions, incidents, days) for streams
   up to N messages, with and without the earlier links.
2. ``--pipeline N`` (default 5,000; 0 skips it): the real ``corpus sync`` (``DagsterRunner.sync``)
   of a ``messages`` collection of N messages with the deterministic ``hash:v1-384`` embedder
   (no model: the figures are the pipeline's own cost). A full sync, split into the
   embeddings step, the ``linked_groups`` step and the rest; then one message appended and
   synced (incremental linking); then another appended with the last links removed, so the
   step re-links everything (the baseline), in the same run.

    .venv/bin/python bench/linked_cost.py [--sizes 5000,50000] [--groups-up-to 5000]
        [--pipeline 5000] [--json]

Other processes on the machine share the cores: figures are noisy.
"""

from __future__ import annotations

import _common

_common.configure(threads=2)

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402
from typing import Any  # noqa: E402

from corpus_index.linked.conversations import group_conversations  # noqa: E402
from corpus_index.linked.groups import link_units  # noqa: E402
from corpus_index.linked.messages import Message  # noqa: E402
from corpus_index.linked.relink import Relinker  # noqa: E402
from tests.streamgen import stream, write_jsonl  # noqa: E402

EMBEDDER = "hash:v1-384"
COLLECTION = "chat"


def one_more(messages: list[Message], n: int) -> Message:
    """A new message at the end of the first channel, a minute after the newest."""
    last = messages[-1]
    return replace(
        last,
        unit_id=f"new{n}",
        channel=messages[0].channel,
        location=messages[0].location,
        text=f"Sarah: van booked in for thursday {n}",
        timestamp=last.timestamp + 60 * (n + 1),
        reply_to=None,
    )


def timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def library(n: int, *, groups: bool) -> dict[str, Any]:
    """Conversations of ``n`` messages from nothing, then one message more from the links."""
    messages = stream(n, channels=5, seed=1)
    grown = [*messages, one_more(messages, 0)]
    group_conversations(messages[:50])  # loads the weights: not part of either figure
    full, full_s = timed(group_conversations, grown)
    first = Relinker()
    timed(first.group, messages)
    again = Relinker(first.links)
    incremental, incr_s = timed(again.group, grown)
    same = sorted(map(sorted, full)) == sorted(map(sorted, incremental))
    out: dict[str, Any] = {
        "messages": n,
        "conversations_full_relink_s": round(full_s, 3),
        "conversations_one_message_s": round(incr_s, 3),
        "relinked": again.relinked,
        "reused": again.reused,
        "same_conversations": same,
    }
    if groups:
        _, all_full_s = timed(link_units, grown)
        first = Relinker()
        link_units(messages, relinker=first)
        _, all_incr_s = timed(link_units, grown, relinker=Relinker(first.links))
        out["all_groupings_full_relink_s"] = round(all_full_s, 3)
        out["all_groupings_one_message_s"] = round(all_incr_s, 3)
    return out


def pipeline(n: int) -> dict[str, Any]:
    """Full sync, one-message sync, and one-message sync with a full re-link (baseline)."""
    with _common.bench_home(None, "linked-cost-") as root:
        source, home = root / "source", root / "home"
        source.mkdir()
        config = _common.write_config(
            root / "corpus.yaml",
            collection=COLLECTION,
            kind="messages",
            source=source,
            embedder=EMBEDDER,
            tenant="bench",
            acl=["bench-staff"],
        )
        _common.point_project_at(config, home)
        import great_expectations  # noqa: F401  (imported untimed, as a sync process does once)
        import lancedb  # noqa: F401

        from corpus_index.config import Settings
        from corpus_index.steps.linked_groups import LINKS
        from corpus_index.warehouse import Warehouse
        from pipelines import runner  # noqa: F401

        messages = stream(n, channels=5, seed=1)
        settings = Settings(config_path=config, home=home)

        def sync(label: str) -> dict[str, Any]:
            write_jsonl(messages, source / "stream.jsonl")
            t = _common.timed_sync(settings)
            steps = t.steps_by_name()
            embed = sum(v for k, v in steps.items() if k.startswith("embeddings"))
            linked = sum(v for k, v in steps.items() if k.startswith("linked_groups"))
            return {
                "sync": label,
                "wall_s": round(t.wall_s, 2),
                "embeddings_step_s": round(embed, 2),
                "linked_groups_step_s": round(linked, 2),
                "rest_s": round(t.wall_s - embed - linked, 2),
                "embedded": t.report.embedded,
                "ok": t.report.ok,
            }

        rows = [sync("full")]
        messages.append(one_more(messages, 0))
        rows.append(sync("one message, from the last links"))
        messages.append(one_more(messages, 1))
        links = Warehouse(settings.warehouse).path(LINKS, COLLECTION)
        links.unlink()
        rows.append(sync("one message, full re-link (baseline)"))
        return {"messages": n, "embedder": EMBEDDER, "syncs": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="5000,50000")
    ap.add_argument("--groups-up-to", type=int, default=5000)
    ap.add_argument("--pipeline", type=int, default=5000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    report: dict[str, Any] = {
        "library": [library(n, groups=n <= args.groups_up_to) for n in sizes],
    }
    if args.pipeline:
        report["pipeline"] = pipeline(args.pipeline)
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    for row in report["library"]:
        print(json.dumps(row))
    for row in report.get("pipeline", {}).get("syncs", []):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
