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
"""

from __future__ import annotations

import difflib
import email.utils
import re
import unicodedata
from collections import defaultdict
from collections.abc import Iterable

from rapidfuzz import fuzz, process

FUZZY_CUTOFF = 0.85
FUZZY_MARGIN = 0.04  # the best fuzzy match must beat every other person's by this much
FUZZY_MIN_CHARS = 4  # "sj" ~ "sk" says nothing

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


# Exact name steps, strongest first; the first that names anyone decides.
NAME_STEPS = ("name", "alias", "name_initial", "initials", "given_name")
_FUZZY = "fuzzy"  # the forms the fuzzy step compares against (names and aliases)


class NameIndex:
    """Who has which address, number, name, alias, initials and given name (one tenant)."""

    def __init__(self) -> None:
        self._exact: dict[str, dict[str, set[str]]] = {
            step: defaultdict(set) for step in ("email", "phone", *NAME_STEPS)
        }
        self._fuzzy_forms: dict[str, set[str]] = defaultdict(set)
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

    def _put(self, step: str, form: str, pid: str) -> None:
        table = self._fuzzy_forms if step == _FUZZY else self._exact[step]
        table[form].add(pid)
        self._forms_of[pid].add((step, form))

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
            self._fuzzy_forms.keys(),
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
