"""Identities discovered from many bare names: the fuzzy step as it runs (``rapidfuzz``
finds the names near each one in C, difflib scores those) beside a scan of every name on
file with difflib alone, in the same run, on the same names.

A record naming N strangers by name only (no address, no number) makes the registry look
each one up fuzzily against every name discovered before it, so the scan grows as N². The
two ways must discover the same identities (checked here).

    .venv/bin/python bench/identity_fuzzy.py [--names 1000,4000] [--json]
"""

from __future__ import annotations

import _common

_common.configure(threads=2)

import argparse  # noqa: E402
import difflib  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import string  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402

from corpus_index.identities import IdentityRegistry  # noqa: E402
from corpus_index.identity_forms import (  # noqa: E402
    FUZZY_CUTOFF,
    FUZZY_MIN_CHARS,
    NameIndex,
)
from corpus_index.identity_mentions import discover  # noqa: E402


def names(n: int) -> list[str]:
    rnd = random.Random(3)
    return [
        " ".join("".join(rnd.choices(string.ascii_lowercase, k=6)).title() for _ in range(2))
        for _ in range(n)
    ]


def scanned(self: NameIndex, norm: str) -> list[tuple[str, float]]:
    """The fuzzy step with difflib alone: every form on file compared in Python."""
    best: dict[str, float] = {}
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(norm)
    for form, pids in self._fuzzy_forms.items():
        if len(form) < FUZZY_MIN_CHARS:
            continue
        matcher.set_seq1(form)
        if matcher.real_quick_ratio() < FUZZY_CUTOFF or matcher.quick_ratio() < FUZZY_CUTOFF:
            continue
        ratio = matcher.ratio()
        if ratio >= FUZZY_CUTOFF:
            for pid in pids:
                best[pid] = max(best.get(pid, 0.0), ratio)
    return sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))


@contextmanager
def scanning() -> Iterator[None]:
    kept = NameIndex.fuzzy
    NameIndex.fuzzy = scanned  # type: ignore[method-assign]
    try:
        yield
    finally:
        NameIndex.fuzzy = kept  # type: ignore[method-assign]


def timed(raw: list[str]) -> tuple[float, list[str]]:
    reg = IdentityRegistry("bench")
    t = time.perf_counter()
    discover(reg, raw)
    return time.perf_counter() - t, sorted(p.id for p in reg)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--names", default="1000,4000")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    for n in (int(x) for x in args.names.split(",")):
        raw = names(n)
        fast, found = timed(raw)
        with scanning():
            slow, scanned_found = timed(raw)
        assert found == scanned_found, "the two ways discovered different identities"
        rows.append({"names": n, "prefiltered_s": round(fast, 3), "scan_s": round(slow, 3)})
    if args.json:
        print(json.dumps(rows))
        return
    print(f"{'bare names':>10}  {'rapidfuzz + difflib':>19}  {'difflib scan':>12}  speed-up")
    for r in rows:
        ratio = r["scan_s"] / r["prefiltered_s"] if r["prefiltered_s"] else float("inf")
        print(
            f"{r['names']:>10,}  {r['prefiltered_s']:>17.2f} s  {r['scan_s']:>10.2f} s  {ratio:.0f}x"
        )


if __name__ == "__main__":
    main()
