"""Identities discovered from many bare names: the fuzzy step as it runs (the forms sharing
enough trigrams with a name, then ``rapidfuzz`` in C, then difflib) beside ``rapidfuzz`` over
every name on file (the step before trigrams) and, with ``--scan``, difflib alone over every
name, in the same run, on the same names.

A record naming N strangers by name only (no address, no number) makes the registry look
each one up fuzzily against every name discovered before it, so a pass over every name
grows as N². Two populations: random letters (``random``: "Qwerty Asdfgh"), and
``people``, given names and surnames written as streams write them (initials, surname first,
accents composed or not, e-mail local parts, typos), where many names are near many others.
Every way must discover the same identities (checked here).

    .venv/bin/python bench/identity_fuzzy.py [--names 1000,4000] [--population random,people]
        [--scan] [--json]
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
import unicodedata  # noqa: E402
from collections.abc import Callable, Iterable, Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402

from corpus_index.identities import IdentityRegistry  # noqa: E402
from corpus_index.identity_forms import (  # noqa: E402
    FUZZY_CUTOFF,
    FUZZY_MIN_CHARS,
    NameIndex,
)
from corpus_index.identity_mentions import discover  # noqa: E402

GIVEN = (
    "sarah", "sara", "john", "jon", "jonathan", "kate", "katie", "katherine", "mike",
    "michael", "mick", "anand", "priya", "grace", "leanne", "tom", "thomas", "zoë", "josé",
    "björn", "siobhan", "aoife", "wei", "li", "mohammed", "muhammad", "ahmed", "fatima",
    "olga", "sergei", "emma", "emily", "amelia", "olivia", "liam", "noah", "jack", "oliver",
    "william", "james", "lucas", "henry", "ava", "mia",
)  # fmt: skip
SURNAMES = (
    "jones", "jonas", "smith", "smyth", "morrison", "brennan", "walsh", "shah", "patel",
    "nguyen", "tran", "chen", "wang", "o'brien", "obrien", "mcdonald", "macdonald", "müller",
    "mueller", "garcía", "garcia", "rodríguez", "fernandes", "fernandez", "kowalski", "novak",
    "johansson", "andersson", "williams", "brown", "taylor", "wilson", "anderson", "thompson",
    "white", "martin", "harris", "clark", "lewis", "robinson", "walker", "young", "allen",
    "king", "wright", "scott", "green", "baker",
)  # fmt: skip


def random_names(n: int) -> list[str]:
    rnd = random.Random(3)
    return [
        " ".join("".join(rnd.choices(string.ascii_lowercase, k=6)).title() for _ in range(2))
        for _ in range(n)
    ]


def people_names(n: int) -> list[str]:
    rnd = random.Random(5)
    out: dict[str, None] = {}
    while len(out) < n:
        given, surname = rnd.choice(GIVEN), rnd.choice(SURNAMES)
        roll = rnd.random()
        if roll < 0.25:
            raw = f"{given.title()} {surname.title()}"
        elif roll < 0.35:
            raw = f"{surname.title()}, {given.title()}"
        elif roll < 0.45:
            raw = f"{given[0].upper()}. {surname.title()}"
        elif roll < 0.55:
            raw = f"{given}.{surname}{rnd.randint(1, 99)}"
        elif roll < 0.65:
            raw = unicodedata.normalize("NFD", f"{given} {rnd.choice(GIVEN)} {surname}")
        else:  # a typo: a letter dropped, changed or two swapped
            raw = f"{given} {surname}"
            i = rnd.randrange(len(raw) - 1)
            op = rnd.randrange(3)
            if op == 0:
                raw = raw[:i] + raw[i + 1 :]
            elif op == 1:
                raw = raw[:i] + rnd.choice(string.ascii_lowercase) + raw[i + 1 :]
            else:
                raw = raw[:i] + raw[i + 1] + raw[i] + raw[i + 2 :]
        out[raw] = None
    return list(out)


POPULATIONS: dict[str, Callable[[int], list[str]]] = {
    "random": random_names,
    "people": people_names,
}


def every_form(self: NameIndex, norm: str) -> Iterable[str]:
    """The step before trigrams: every fuzzy form on file goes to ``rapidfuzz``."""
    return self._fuzzy_forms.keys()


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
def replaced(name: str, way: Callable[..., object] | None) -> Iterator[None]:
    kept = getattr(NameIndex, name)
    if way is not None:
        setattr(NameIndex, name, way)
    try:
        yield
    finally:
        setattr(NameIndex, name, kept)


def timed(raw: list[str]) -> tuple[float, list[tuple[str, str]]]:
    reg = IdentityRegistry("bench")
    t = time.perf_counter()
    discover(reg, raw)
    return time.perf_counter() - t, sorted((p.id, p.name) for p in reg)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--names", default="1000,4000")
    parser.add_argument("--population", default="random,people")
    parser.add_argument("--scan", action="store_true", help="also difflib over every name")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    ways: list[tuple[str, str, Callable[..., object] | None]] = [
        ("trigrams_s", "_near", None),
        ("every_name_s", "_near", every_form),
    ]
    if args.scan:
        ways.append(("scan_s", "fuzzy", scanned))
    rows = []
    for population in args.population.split(","):
        for n in (int(x) for x in args.names.split(",")):
            raw = POPULATIONS[population](n)
            row: dict[str, object] = {"population": population, "names": n}
            found = []
            for key, name, way in ways:
                with replaced(name, way):
                    seconds, identities = timed(raw)
                row[key] = round(seconds, 3)
                found.append(identities)
            assert all(f == found[0] for f in found), "the ways discovered different identities"
            row["identities"] = len(found[0])
            rows.append(row)
    if args.json:
        print(json.dumps(rows))
        return
    scan = "  difflib scan" if args.scan else ""
    print(f"{'population':>10}  {'names':>6}  {'trigrams':>8}  {'every name':>10}{scan}  speed-up")
    for r in rows:
        fast, slow = float(r["trigrams_s"]), float(r["every_name_s"])  # type: ignore[arg-type]
        cells = f"{r['population']:>10}  {r['names']:>6,}  {fast:>6.2f} s  {slow:>8.2f} s"
        if args.scan:
            cells += f"  {float(r['scan_s']):>10.2f} s"  # type: ignore[arg-type]
        print(f"{cells}  {slow / fast if fast else float('inf'):.1f}x")


if __name__ == "__main__":
    main()
