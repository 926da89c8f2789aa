"""Questions, incidents and days on the messages sample: how many of the answered questions in
``truth.yaml`` are linked to their answer, whether every incident finds exactly its shift notes
(and how much of the other content about its person, ``related``), how many groups of each type, per tenant, without and with the tenant's people file.

Grouping reads only the records (through the ``messages`` kind); ``truth.yaml`` only scores.
Targets: at least 80% of the answered questions linked; every incident with its shift notes.

    .venv/bin/python bench/linked_contexts.py [--json] [--scale N]
"""

from __future__ import annotations

import _common

_common.configure(threads=1)

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from typing import Any  # noqa: E402

import yaml  # noqa: E402

from corpus_index.collection import CollectionConfig  # noqa: E402
from corpus_index.identities import load_people  # noqa: E402
from corpus_index.kinds import parse_document, read_documents  # noqa: E402
from corpus_index.kinds.messages import message_of  # noqa: E402
from corpus_index.linked.groups import link_units  # noqa: E402
from corpus_index.linked.messages import Message  # noqa: E402

SAMPLE = _common.REPO / "sample_corpus" / "messages"
TENANTS = ("wattle", "bluegum")


def sample(tenant: str) -> list[Message]:
    """The tenant's units, read and parsed by the ``messages`` kind."""
    collection = CollectionConfig(
        name=f"{tenant}-messages",
        kind="messages",
        path=SAMPLE / tenant,
        tenant=tenant,
        acl_groups=(f"{tenant}-staff", f"{tenant}-managers", f"{tenant}-coordinators"),
        timezone="Australia/Sydney",  # as corpus.yaml counts the sample's days
    )
    docs = read_documents(collection)
    return [message_of(b) for d in docs for b in parse_document(collection, d, "0" * 16)]


def measure(with_people: bool) -> dict[str, Any]:
    """The figures over both tenants, each grouped on its own."""
    truth = yaml.safe_load((SAMPLE / "truth.yaml").read_text(encoding="utf-8"))["tenants"]
    out: dict[str, Any] = {"answered": 0, "linked": 0, "extra_pairs": 0, "open_left_open": 0}
    out.update(incidents=0, incidents_exact=0, related=0, related_found=0, unrelated=0)
    out.update(groups={}, seconds={})
    for tenant in TENANTS:
        units = sample(tenant)
        reg = (
            load_people(SAMPLE / tenant / "people.yaml", tenant_id=tenant) if with_people else None
        )
        start = time.perf_counter()
        groups = link_units(units, registry=reg)
        out["seconds"][tenant] = round(time.perf_counter() - start, 3)
        out["groups"][tenant] = dict(Counter(g.group_type for g in groups))
        answer = {g.members[0].unit_id: g.resolved_by_unit_id for g in groups if g.group_type == "qa_pair"}  # fmt: skip
        gold = {q["question"]: q["answers"] for q in truth[tenant]["answered_questions"]}
        out["answered"] += len(gold)
        out["linked"] += sum(answer.get(q) in a for q, a in gold.items())
        out["extra_pairs"] += sum(1 for q, a in answer.items() if q not in gold and a)
        out["open_left_open"] += sum(answer.get(q) is None for q in truth[tenant]["unanswered_questions"])  # fmt: skip
        contexts = {g.members[0].unit_id: g for g in groups if g.group_type == "incident_context"}
        notes = {u.unit_id for u in units if u.source == "shift_note"}
        for inc in truth[tenant]["incidents"]:
            out["incidents"] += 1
            found = set(contexts[inc["incident"]].member_ids[1:])
            out["incidents_exact"] += found & notes == set(inc["shift_notes"])
            # the other content about the person the incident is about (truth's ``related``)
            other, related = found - notes, set(inc["related"])
            out["related"] += len(related)
            out["related_found"] += len(other & related)
            out["unrelated"] += len(other - related)
    return out


def scale(n: int) -> dict[str, float]:
    """Seconds to link ``n`` generated chat messages (five channels, a question in seven)."""
    rnd = random.Random(1)
    words = [
        "van",
        "keys",
        "pumpkin",
        "roast",
        "lunch",
        "pool",
        "hoist",
        "sling",
        "meds",
        "chart",
        "bins",
        "window",
        "roster",
    ]
    units = []
    for i in range(n):
        text = " ".join(rnd.choice(words) for _ in range(8))
        text = f"does anyone know where the {text}?" if i % 7 == 0 else text
        units.append(
            Message(
                f"u{i}",
                f"#c{i % 5}",
                f"a{rnd.randrange(20)}",
                text,
                1.7e9 + i * 300,
                source="discord_chat",
                location=f"L{i % 3}",
            )  # fmt: skip
        )
    start = time.perf_counter()
    link_units(units)
    return {"messages": n, "seconds": round(time.perf_counter() - start, 2)}


def main(argv: list[str] | None = None) -> int:
    """Print the figures (or one JSON object with ``--json``)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--scale", type=int, default=0, help="also time N generated messages")
    args = ap.parse_args(argv)
    report: dict[str, Any] = {"as_written": measure(False), "people_files": measure(True)}
    if args.scale:
        report["scale"] = scale(args.scale)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    for name in ("as_written", "people_files"):
        r = report[name]
        print(
            f"{name}: answered questions linked {r['linked']}/{r['answered']} "
            f"({r['linked'] / r['answered']:.1%}); other answered pairs {r['extra_pairs']}; "
            f"unanswered left open {r['open_left_open']}; incidents with exactly their notes "
            f"{r['incidents_exact']}/{r['incidents']}, with {r['related_found']}/{r['related']} "
            f"of the content about their person ({r['unrelated']} unrelated); "
            f"groups {r['groups']}; seconds {r['seconds']}"
        )
    if args.scale:
        print(f"scale: {report['scale']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
