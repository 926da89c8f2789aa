"""What one change to a long message stream costs the ``linked_groups`` step, beside a message
appended to the end, measured in the same run on the same home.

On a generated staff-chat stream of N messages (``--size``, default 50,000; the stream of
``bench/linked_cost.py``: five channels, files of 10,000 messages), grouped once and then run
again with nothing changed, these changes are made one after the other, each followed by
``source_manifest`` and ``parsed_blocks`` (which carry out a removal) and the timed
``linked_groups`` step, called in-process (no Dagster, no embedding):

1. ``append``: one message at the end of a channel (the baseline);
2. ``remove near the end``: the tenth message from the end removed;
3. ``append again``: the baseline once more, as the machine is now;
4. ``edit in the middle``: the text of the message a third of the way in changed;
5. ``remove in the middle``: the message half way in removed;
6. ``late in the middle``: a message written half way in, arriving now.

For each: the step's seconds, and from its outcome the conversation links decided again, the
results (questions scored, groups described, rows) computed anew and kept from the last run,
the group rows carried over, and the units the identity pass read. Figures are noisy when
other processes share the cores.

    .venv/bin/python bench/linked_changes.py [--size 50000] [--home DIR] [--json]
"""

from __future__ import annotations

import _common

_common.configure(threads=2)

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from linked_cost import COLLECTION, one_more, write_chat_config, write_streams  # noqa: E402

from corpus_index.config import Settings  # noqa: E402
from corpus_index.home import Home  # noqa: E402
from corpus_index.linked.messages import Message  # noqa: E402
from corpus_index.steps import linked_groups, parsed_blocks, source_manifest  # noqa: E402
from tests.streamgen import stream  # noqa: E402

EMBEDDER = "hash:v1-384"  # never called: the steps timed here embed nothing


def _appended(messages: list[Message], n: int) -> list[Message]:
    return [*messages, one_more(messages, n)]


def _without(messages: list[Message], at: int) -> list[Message]:
    return messages[:at] + messages[at + 1 :]


def _edited(messages: list[Message], at: int) -> list[Message]:
    changed = replace(messages[at], text="roster swap sunday night, who can cover?")
    return [*messages[:at], changed, *messages[at + 1 :]]


def _late(messages: list[Message], at: int) -> list[Message]:
    """A message written just after the ``at``-th, at the end of the list (its file is the
    last, as a message that arrives late is appended to the stream it arrives in)."""
    then = messages[at]
    late = replace(then, unit_id="late", text="mikeb: chemist has the webster pack", reply_to=None)
    return [*messages, replace(late, timestamp=then.timestamp + 1)]


# (name, change): applied in this order, each to the stream the one before left
CHANGES: list[tuple[str, Callable[[list[Message]], list[Message]]]] = [
    ("append", lambda ms: _appended(ms, 0)),
    ("remove near the end", lambda ms: _without(ms, len(ms) - 10)),
    ("append again", lambda ms: _appended(ms, 1)),
    ("edit in the middle", lambda ms: _edited(ms, len(ms) // 3)),
    ("remove in the middle", lambda ms: _without(ms, len(ms) // 2)),
    ("late in the middle", lambda ms: _late(ms, len(ms) // 2)),
]


def _step(home: Home) -> dict[str, Any]:
    """``source_manifest`` and ``parsed_blocks`` (their seconds together), then the timed
    ``linked_groups`` step and what it decided again."""
    start = time.perf_counter()
    source_manifest.run(home, COLLECTION)
    parsed_blocks.run(home, COLLECTION)
    read = time.perf_counter()
    out = linked_groups.run(home, COLLECTION)
    done = time.perf_counter()
    assert out.passed, [g for g in out.gates if not g.passed]
    return {
        "manifest_and_blocks_s": round(read - start, 2),
        "step_s": round(done - read, 2),
        "relinked": out.relinked,
        "computed": out.computed,
        "reused": out.reused,
        "carried": out.carried,
        "groups": out.groups,
        "identity_read": out.identity_read,
    }


def run(size: int, home_dir: Path | None) -> dict[str, Any]:
    with _common.bench_home(home_dir, "linked-changes-", must_be_empty=True) as root:
        config = write_chat_config(root, embedder=EMBEDDER)
        source = root / "source"
        home = Home(Settings(config_path=config, home=root / "home"))
        messages = stream(size, channels=5, seed=1)
        write_streams(messages, source)
        first = _step(home)
        again = _step(home)  # nothing changed: what a step costs that finds everything kept
        rows = []
        for name, change in CHANGES:
            messages = change(messages)
            write_streams(messages, source)
            rows.append({"change": name, **_step(home)})
        return {"messages": size, "first": first, "unchanged": again, "changes": rows}


def table(report: dict[str, Any]) -> str:
    head = (
        "| change | `linked_groups` step | links decided again | results computed / kept "
        "| group rows carried | units the identity pass read |"
    )
    lines = [head, "|---|---:|---:|---:|---:|---:|"]
    rows = [
        {"change": "first run", **report["first"]},
        {"change": "nothing changed", **report["unchanged"]},
        *report["changes"],
    ]
    for r in rows:
        lines.append(
            f"| {r['change']} | {r['step_s']:.2f} s | {r['relinked']:,} "
            f"| {r['computed']:,} / {r['reused']:,} | {r['carried']:,} | {r['identity_read']:,} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=50_000)
    ap.add_argument("--home", type=Path, help="build in this (empty) folder, kept")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    report = run(args.size, args.home)
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"{report['messages']:,} messages")
    print(table(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
