"""How people's names, e-mail addresses and phone numbers are written, and an index of them.

Normalisation makes the forms comparable (``Grace F (RN)`` -> ``grace f``, ``0412 555 301`` ->
``+61412555301``); :class:`NameIndex` answers, for one tenant's people, who has a given address,
number, name, alias, initials or given name, and who a misspelt name is closest to.

The fuzzy step scores a name by the standard library's ``difflib.SequenceMatcher`` ratio. A
tenant's registry grows with every name its streams discover, so comparing each unresolved name
with every form in Python made a stream of new names quadratic (a record naming 4,000 strangers
took 34 s). ``rapidfuzz`` compares them in C first: its ``fuzz.ratio`` is the similarity of the
longest common subsequence, never below difflib's ratio (whose matching blocks are one common
subsequence), so the forms it keeps at the cutoff hold every form difflib would, and difflib then
scores those few exactly as before.

Comparing with every form in C still grows as the square of the names a stream discovers (2,000
bare names took 0.25 s, 8,000 took 2.9 s). So the index also keeps each form under its letter
trigrams, by the form's length, and a lookup hands ``rapidfuzz`` only the forms that share enough
of its trigrams to reach the cutoff (:func:`shared_trigrams` says how many, and why no form
difflib would accept can lack them).
"""

from __future__ import annotations

import difflib
import email.utils
import functools
import math
import re
import unicodedata
from collections import defaultdict
from collections.abc import Iterable

from rapidfuzz import fuzz, process

FUZZY_CUTOFF = 0.85
FUZZY_MARGIN = 0.04  # the best fuzzy match must beat every other person's by this much
FUZZY_MIN_CHARS = 4  # "sj" ~ "sk" says nothing
_Q = 3  # the fuzzy step's forms are found by their runs of this many letters (trigrams)

_TITLES = frozenset({"dr", "mr", "mrs", "ms", "miss", "mx", "prof", "rn", "sr", "jr"})
_PAREN = re.compile(r"\([^)]*\)")
_SEPARATORS = re.compile(r"[._\-/]+")
_NOT_NAME = re.compile(r"[^\w\s]")
_SPACES = re.compile(r"\s+")
# international call prefixes where they are not the ITU's "00"
_EXIT_PREFIXES = {"61": "0011", "1": "011"}
# the national trunk prefix some write after the country code: "+61 (0)412 555 301"
_TRUNK_ZERO = re.compile(r"\(\s*0\s*\)")
# the country a national phone number is of where a people file names none
DEFAULT_COUNTRY_CODE = "61"


def normalize_name(raw: str) -> str:
    """Casefolded name without titles, bracketed notes or punctuation: ``Grace F (RN)`` ->
    ``grace f``, ``priya.r`` -> ``priya r``, ``Dr Anand Shah`` -> ``anand shah``; composed
    and decomposed accents (``Müller`` either way) and compatibility forms (full-width
    letters, ligatures) read alike."""
    text = _PAREN.sub(" ", unicodedata.normalize("NFKC", raw))
    text = _SEPARATORS.sub(" ", text)
    text = _NOT_NAME.sub("", text).casefold()
    words = [w for w in _SPACES.split(text) if w and w not in _TITLES]
    return " ".join(words)


def normalize_email(raw: str) -> str | None:
    """The lower-cased address of ``raw`` (``Name <a@b>`` or ``a@b``), or None if it has none."""
    if "@" not in raw:
        return None
    _, addr = _parseaddr(raw)
    addr = addr.strip().lower()
    if "@" not in addr or addr.startswith("@") or addr.endswith("@"):
        return None
    return addr


def normalize_phone(raw: str, *, country_code: str = DEFAULT_COUNTRY_CODE) -> str | None:
    """E.164 form of a phone number (``0412 555 301`` -> ``+61412555301``), or None.

    A national number (leading 0) takes ``country_code``; a number dialled with that
    country's international prefix (``0011`` from Australia) or the ITU's ``00`` is
    international, and a national trunk ``(0)`` after its country code is dropped
    (``+61 (0)412 555 301`` is ``0412 555 301``); fewer than 8 digits is not a phone.
    """
    text = raw.strip()
    if not re.fullmatch(r"\+?[\d\s().\-]+", text):
        return None
    digits = re.sub(r"\D", "", text)
    # the country's call prefix, or the ITU's "00" (a national number starts with one 0 at most)
    prefixes = (_EXIT_PREFIXES.get(country_code, "00"), "00")
    exit_prefix = (
        "" if text.startswith("+") else next((p for p in prefixes if digits.startswith(p)), None)
    )
    if exit_prefix is not None:  # international: a trunk "(0)" after the country code goes
        digits = re.sub(r"\D", "", _TRUNK_ZERO.sub("", text))[len(exit_prefix) :]
    if len(digits) < 8 or len(digits) > 15:
        return None
    if exit_prefix is not None:
        return "+" + digits
    if digits.startswith("0"):
        return f"+{country_code}{digits[1:]}"
    if digits.startswith(country_code) and len(digits) > 9:
        return "+" + digits
    return f"+{country_code}{digits}"


def display_name(raw: str) -> str:
    """The name part of a header value: ``Leanne Walsh <l@x>`` -> ``Leanne Walsh``."""
    if "@" not in raw:
        return raw.strip()
    name, addr = _parseaddr(raw)
    if addr and "@" in addr:
        return name.strip()
    return raw.strip()


# a header's comments nest no deeper than this in anything people write; the standard
# library's parser reads each level by recursion, so a value of a few thousand "(" would
# exhaust the stack
MAX_COMMENT_DEPTH = 16


def _parseaddr(raw: str) -> tuple[str, str]:
    """``email.utils.parseaddr(raw)``; ``("", "")`` (no address) for a value whose comments
    (parentheses) nest deeper than :data:`MAX_COMMENT_DEPTH`."""
    depth = deepest = 0
    for ch in raw:
        if ch == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif ch == ")" and depth:
            depth -= 1
    if deepest > MAX_COMMENT_DEPTH:
        return "", ""
    return email.utils.parseaddr(raw)


def trigrams(form: str) -> list[tuple[str, int]]:
    """Each run of three letters in ``form``, in order, with how many times it came before:
    ``"anana"`` -> ``[("ana", 0), ("nan", 0), ("ana", 1)]`` (two forms share as many of these
    as they have trigrams in common, counted with repeats)."""
    grams = [form[i : i + _Q] for i in range(len(form) - _Q + 1)]
    if len(set(grams)) == len(grams):  # most names repeat none
        return [(gram, 0) for gram in grams]
    seen: dict[str, int] = defaultdict(int)
    out = []
    for gram in grams:
        out.append((gram, seen[gram]))
        seen[gram] += 1
    return out


@functools.lru_cache(maxsize=1024)
def shared_trigrams(m: int) -> tuple[tuple[int, int], ...]:
    """For a name of ``m`` letters, each length ``n`` a form FUZZY_CUTOFF like it may have,
    with how many trigrams (:func:`trigrams`) the two share at least (0 or less: the trigrams
    rule none out).

    A ratio of ``2 * M / (m + n)`` counts ``M`` letters the two have in the same order (a
    common subsequence), so ``M >= L``, the least whole number with ``2 * L / (m + n)`` at
    the cutoff, and ``M <= min(m, n)``. Lining the two up along those ``M`` letters, each of
    the name's ``m - M`` letters left out breaks at most 3 of its ``m - 2`` trigrams, and each
    of the form's ``n - M`` letters left out, falling between two the name keeps, at most 2
    (those spanning that gap); every trigram left whole is one of the form's, so they share
    at least ``(m - 2) - 3 * (m - M) - 2 * (n - M)``, which only grows with ``M``.
    """
    out = []
    # a longer form than m * (2 / cutoff - 1) has too few letters in common with the name
    for n in range(FUZZY_MIN_CHARS, math.floor(m * (2 / FUZZY_CUTOFF - 1)) + 2):
        # the cutoff a hair lower, so float rounding can only lower the bound, never raise it
        least = math.ceil(FUZZY_CUTOFF * (m + n) / 2 - 1e-9)
        if least <= min(m, n):
            out.append((n, (m - _Q + 1) - _Q * (m - least) - (_Q - 1) * (n - least)))
    return tuple(out)


# Exact name steps, strongest first; the first that names anyone decides.
NAME_STEPS = ("name", "alias", "name_initial", "initials", "given_name")
_FUZZY = "fuzzy"  # the forms the fuzzy step compares against (names and aliases)
_NONE: frozenset[str] = frozenset()


class NameIndex:
    """Who has which address, number, name, alias, initials and given name (one tenant)."""

    def __init__(self) -> None:
        self._exact: dict[str, dict[str, set[str]]] = {
            step: defaultdict(set) for step in ("email", "phone", *NAME_STEPS)
        }
        self._fuzzy_forms: dict[str, set[str]] = defaultdict(set)
        # the fuzzy forms of FUZZY_MIN_CHARS letters or more by length, and by length and trigram
        self._by_length: dict[int, set[str]] = defaultdict(set)
        self._by_trigram: dict[int, dict[tuple[str, int], set[str]]] = defaultdict(
            lambda: defaultdict(set)
        )
        self._trigram_forms: dict[tuple[str, int], int] = defaultdict(int)  # of any length
        # what each person was indexed under, so a changed or removed person comes out exactly
        self._forms_of: dict[str, set[tuple[str, str]]] = defaultdict(set)

    def add(
        self,
        pid: str,
        *,
        name: str,
        aliases: Iterable[str] = (),
        emails: Iterable[str] = (),
        phones: Iterable[str] = (),
    ) -> None:
        """Index one person's forms (addresses and numbers already normalised); adding to a
        person already indexed adds these forms to theirs."""
        words = normalize_name(name).split()
        full = " ".join(words)
        self._put("name", full, pid)
        self._put(_FUZZY, full, pid)
        for alias in aliases:
            form = normalize_name(alias)
            if form:
                self._put("alias", form, pid)
                self._put(_FUZZY, form, pid)
        if len(words) > 1:
            given, surname = words[0], words[-1]
            self._put("given_name", given, pid)
            self._put("initials", "".join(w[0] for w in words), pid)
            # "jane o" or "jane o k": the given name, then the surname's first letter(s)
            self._put("name_initial", f"{given} {surname[0]}", pid)
            self._put("name_initial", f"{given} {' '.join(surname[:2])}", pid)
        for addr in emails:
            self._put("email", addr, pid)
        for number in phones:
            self._put("phone", number, pid)

    def discard(self, pid: str) -> None:
        """Forget every form of one person (no-op if not indexed): the index is then as if
        they had never been added."""
        for step, form in self._forms_of.pop(pid, ()):
            table = self._fuzzy_forms if step == _FUZZY else self._exact[step]
            owners = table[form]
            owners.discard(pid)
            if not owners:
                del table[form]
                if step == _FUZZY:
                    self._unindex_trigrams(form)

    def _put(self, step: str, form: str, pid: str) -> None:
        table = self._fuzzy_forms if step == _FUZZY else self._exact[step]
        if step == _FUZZY and form not in table:
            self._index_trigrams(form)
        table[form].add(pid)
        self._forms_of[pid].add((step, form))

    def _index_trigrams(self, form: str) -> None:
        if len(form) < FUZZY_MIN_CHARS:
            return
        self._by_length[len(form)].add(form)
        postings = self._by_trigram[len(form)]
        for key in trigrams(form):
            postings[key].add(form)
            self._trigram_forms[key] += 1

    def _unindex_trigrams(self, form: str) -> None:
        n = len(form)
        if n < FUZZY_MIN_CHARS:
            return
        self._by_length[n].discard(form)
        postings = self._by_trigram[n]
        for key in trigrams(form):
            postings[key].discard(form)
            if not postings[key]:
                del postings[key]
            self._trigram_forms[key] -= 1
            if not self._trigram_forms[key]:
                del self._trigram_forms[key]
        if not self._by_length[n]:
            del self._by_length[n], self._by_trigram[n]

    def _near(self, norm: str) -> set[str]:
        """The fuzzy forms that may be ``FUZZY_CUTOFF`` like ``norm``: of each length, those
        sharing enough of its trigrams (:func:`shared_trigrams`), or all where that rules
        none out. A form sharing ``need`` of the name's ``k`` trigrams misses at most ``k -
        need`` of their lists, so it is on one of any ``k - need + 1``: the rarest are read.
        """
        grams = sorted(trigrams(norm), key=lambda key: self._trigram_forms.get(key, 0))
        near: set[str] = set()
        for n, need in shared_trigrams(len(norm)):
            if n not in self._by_length:
                continue
            if need <= 0:
                near |= self._by_length[n]
                continue
            postings = self._by_trigram[n]
            near.update(*(postings.get(key, _NONE) for key in grams[: len(grams) - need + 1]))
        return near

    def exact(self, step: str, form: str) -> set[str]:
        """The people whose ``step`` form (``email``, ``phone`` or a name step) is ``form``."""
        return set(self._exact[step].get(form, ()))

    def fuzzy(self, norm: str) -> list[tuple[str, float]]:
        """People whose name or alias is at least ``FUZZY_CUTOFF`` like ``norm``, best first."""
        best: dict[str, float] = {}
        matcher = difflib.SequenceMatcher(autojunk=False)
        matcher.set_seq2(norm)
        # a superset of the forms at the cutoff, found in C; the margin keeps float rounding out
        near = process.extract_iter(
            norm,
            self._near(norm),
            scorer=fuzz.ratio,
            score_cutoff=FUZZY_CUTOFF * 100 - 1e-6,
        )
        for form, _score, _key in near:
            if len(form) < FUZZY_MIN_CHARS:
                continue
            pids = self._fuzzy_forms[form]
            matcher.set_seq1(form)
            ratio = matcher.ratio()
            if ratio < FUZZY_CUTOFF:
                continue
            for pid in pids:
                best[pid] = max(best.get(pid, 0.0), ratio)
        return sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))
