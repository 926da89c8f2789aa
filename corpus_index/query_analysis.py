"""Query analysis (seed "Linked Context V2" §6.1 step 1): the time hints, people and topics of a
search query, resolved against a reference time and the asking tenant's identity registry.

Time hints come from Microsoft's recognizers-text (``recognizers_date_time``, English culture):
it resolves relative expressions ("yesterday", "last week", "over the weekend", "last 3
days"), months ("in March", "March 2025"), explicit dates and ranges ("between 3 and 5 March",
"from 1 Dec to 5 Dec") and a few holidays (Christmas, Christmas Eve, New Year). It is kept up,
offline, and returns every candidate of an ambiguous expression. On top of it:

- an expression without a year ("Christmas", "in March", "Dec 10") comes back as several
  candidate years: the latest candidate that starts on or before the reference time is taken
  (a question about "Christmas" asked in January means the Christmas just gone);
- "the weekend" alone resolves to the coming weekend; a search asks about the past, so it is
  the latest weekend that starts on or before the reference time;
- named public holidays the recognizer does not know (Boxing Day, Australia Day, Anzac Day,
  Good Friday, ...) come from the ``holidays`` package for ``country``/``subdivision``
  (default Australia, New South Wales), with a year when one follows ("Boxing Day 2024",
  "Boxing Day, 2024", "Boxing Day of 2024", any year the package knows the holiday in; none
  it does not know it in); "Easter" is Easter Sunday (the country's own: where Easter Sunday
  is no public holiday, two days after Good Friday or the day before Easter Monday);
- a holiday of a fixed date that the recognizer knows, with a year ("Christmas 2020",
  "Christmas, 2020", "New Year 2025", "New Year's Eve of 2024"), is that day of that year (the
  recognizer leaves it unresolved, or reads the year after a comma as a hint of its own);
- a holiday names one day but the talk about it is in the weeks before (the seed's
  "Christmas -> December 2025"): its range is its calendar month up to and including the day,
  and the day itself is kept as ``day``.

Ranges are inclusive dates (``start`` <= event date <= ``end``). Time hints are read from the
query's first ``MAX_TIME_CHARS`` characters only (cut at a space): the recognizer's cost grows
with the date-like words it reads, and a 2,000-character list of dates took it 36 s of one
request thread; a query cut so says where (``times_read``).

What it misses: numeric dates are read month first (``10/12/2025`` is 12 October: the
recognizer's English culture is US English; write ``2025-12-10`` or ``10 December 2025``);
holidays of other countries than the one configured; school terms, fiscal quarters, "the
Christmas break" as a span (it resolves to the day's month like "Christmas"); times of day are
dropped (a date is the finest grain); vague spans ("recently", "a while ago") are no hint.

People are matched only against the identities given (one tenant's registry: names and
aliases, whole words, case-insensitive; a given name alone only when exactly one person has
it). Topics are the remaining content words.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from corpus_index.identity_forms import normalize_name
from corpus_index.linked import topic

DEFAULT_COUNTRY = "AU"
DEFAULT_SUBDIVISION = "NSW"
# characters of a query read for time hints (module docstring): a query's time words fit in
# far fewer, and the recognizer reads these in well under a second however they are written
MAX_TIME_CHARS = 200
_WORD = re.compile(r"[\w'’]+")
# the year a named day is given: "Boxing Day 2024", "Christmas, 2020", "New Year of 2025"
_YEAR_AFTER = re.compile(r"(?:\s*,\s*|\s+of\s+|\s*)(\d{4})\b", re.IGNORECASE)
# a recognizer's expression ending in a year: "christmas 2020", "new year of 2025"
_NAMED_YEAR = re.compile(r"(\w.*?)(?:\s*,\s*|\s+of\s+|\s+)(\d{4})", re.IGNORECASE)
# the topic model's stop words and the question words a search query adds
# fmt: off
STOPWORDS = topic.STOPWORDS | frozenset({
    "about", "after", "again", "all", "also", "am", "any", "anyone", "been", "before", "being",
    "between", "could", "did", "doing", "done", "during", "each", "else", "ever", "every",
    "everything", "get", "got", "had", "has", "having", "he", "her", "here", "hers", "him", "his",
    "into", "know", "last", "let", "more", "most", "need", "next", "nor", "now", "off", "once",
    "one", "only", "other", "our", "out", "over", "own", "please", "re", "same", "she", "should",
    "some", "someone", "something", "still", "such", "than", "their", "them", "these", "they",
    "those", "through", "too", "under", "until", "up", "us", "very", "we", "were", "while",
    "whom", "why", "would", "yet",
})
# fmt: on


@dataclass(frozen=True, slots=True)
class TimeHint:
    """A time expression of the query and the dates it names (inclusive)."""

    text: str
    start: dt.date
    end: dt.date
    how: str  # "recognizer" or "holiday"
    day: dt.date | None = None  # a holiday's own day (its range is the month up to it)

    def overlaps(self, first: dt.date | None, last: dt.date | None) -> bool:
        """Whether the span ``first``..``last`` (either may be missing) meets this range."""
        lo = first if first is not None else last
        hi = last if last is not None else first
        if lo is None or hi is None:
            return False
        return lo <= self.end and hi >= self.start

    def to_json(self) -> dict[str, Any]:
        out = {"text": self.text, "start": self.start.isoformat(), "end": self.end.isoformat()}
        out["how"] = self.how
        if self.day is not None:
            out["day"] = self.day.isoformat()
        return out


@dataclass(frozen=True, slots=True)
class Person:
    """One identity of the asking tenant's registry, as query analysis matches it."""

    identity_id: str
    name: str
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PersonHint:
    """A person the query names: the words used and the identity they resolve to."""

    text: str
    identity_id: str
    name: str

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "identity_id": self.identity_id, "name": self.name}


@dataclass(frozen=True, slots=True)
class QueryAnalysis:
    """What a query asks about: when, whom, and which topics."""

    query: str
    as_of: dt.datetime
    times: tuple[TimeHint, ...] = ()
    people: tuple[PersonHint, ...] = ()
    topics: tuple[str, ...] = ()
    # the query was longer than MAX_TIME_CHARS: its time hints come from this many characters
    times_read: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "query": self.query,
            "as_of": self.as_of.isoformat(),
            "times": [t.to_json() for t in self.times],
            "people": [p.to_json() for p in self.people],
            "topics": list(self.topics),
        }
        if self.times_read is not None:
            out["times_read"] = self.times_read
        return out


def analyze(
    query: str,
    *,
    as_of: dt.datetime | None = None,
    people: Iterable[Person] = (),
    country: str = DEFAULT_COUNTRY,
    subdivision: str | None = DEFAULT_SUBDIVISION,
) -> QueryAnalysis:
    """The time hints (from its first ``MAX_TIME_CHARS`` characters), people and topics of
    ``query``.

    Args:
        query: the query text.
        as_of: the reference time of relative expressions (default: now, UTC).
        people: the asking tenant's identities (never another tenant's).
        country: ISO country of the named holidays (``holidays`` package).
        subdivision: its state or province (``None``: national holidays only).
    """
    ref = as_of or dt.datetime.now(dt.UTC)
    claimed: list[tuple[int, int]] = []
    timed = _time_part(query)
    times = [
        *_holiday_hints(timed, ref.date(), country, subdivision, claimed),
        *_recognized(timed, ref, claimed),
    ]
    times.sort(key=lambda t: (t.start, t.end, t.text))
    found = _people(query, list(people), claimed)
    topics = _topics(query, claimed)
    read = len(timed) if len(timed) < len(query) else None
    return QueryAnalysis(query, ref, tuple(times), tuple(found), tuple(topics), read)


def _time_part(query: str) -> str:
    """The start of ``query`` read for time hints: at most ``MAX_TIME_CHARS`` characters, cut
    before the word the bound falls in, so no date is read half ("2024-01-" as January)."""
    if len(query) <= MAX_TIME_CHARS:
        return query
    last_space = max(query.rfind(c, 0, MAX_TIME_CHARS + 1) for c in " \t\n")
    return query[: last_space if last_space > 0 else MAX_TIME_CHARS]


def _free(span: tuple[int, int], claimed: Sequence[tuple[int, int]]) -> bool:
    return all(span[1] <= a or span[0] >= b for a, b in claimed)


@functools.lru_cache(maxsize=16)
def _holiday_names(
    country: str, subdivision: str | None, first: int, last: int
) -> dict[str, list[dt.date]]:
    """Holiday name -> its days in ``first``..``last`` (kept: building it costs ~0.1 s a
    language), each name as the package gives it and in every English the country has: its
    default names may be US English ("Labor Day") where the country writes "Labour Day"."""
    import holidays

    years = range(first, last + 1)
    table = holidays.country_holidays(country, subdiv=subdivision, years=years)
    english = [lang for lang in table.supported_languages if lang.startswith("en")]
    tables = [table]
    tables += [
        holidays.country_holidays(country, subdiv=subdivision, years=years, language=lang)
        for lang in english
    ]
    names: dict[str, set[dt.date]] = {}
    for day, name in (item for t in tables for item in t.items()):
        for part in str(name).split(";"):  # two holidays on one day come joined by "; "
            key = part.strip().casefold().replace("’", "'")
            if key:
                names.setdefault(key, set()).add(day)
    # "Easter" is Easter Sunday, which not every country or state holds as a public holiday:
    # then it is two days after Good Friday, or the day before Easter Monday (the country's
    # own Easter, western or orthodox)
    if "easter" not in names:
        sunday = names.get("easter sunday") or {
            *(d + dt.timedelta(days=2) for d in names.get("good friday", ())),
            *(d - dt.timedelta(days=1) for d in names.get("easter monday", ())),
        }
        if sunday:
            names["easter"] = set(sunday)
    return {key: sorted(days) for key, days in names.items()}


def _holiday_hints(
    query: str,
    today: dt.date,
    country: str,
    subdivision: str | None,
    claimed: list[tuple[int, int]],
) -> list[TimeHint]:
    folded = query.casefold().replace("’", "'")
    names = _holiday_names(country, subdivision, today.year - 10, today.year + 1)
    out: list[TimeHint] = []
    # longest names first, so "Christmas Day" is taken before a shorter name inside it
    for name in sorted(names, key=len, reverse=True):
        for m in re.finditer(rf"\b{re.escape(name)}\b", folded):
            span = (m.start(), m.end())
            if not _free(span, claimed):
                continue
            year = _YEAR_AFTER.match(folded, m.end())
            days = names[name]
            if year:
                # that year's own table: the one around today holds only eleven years, and
                # a year outside it must not become one of them
                wanted = int(year.group(1))
                days = _holiday_names(country, subdivision, wanted, wanted).get(name, [])
                if not days:
                    continue  # not held that year (or before the package's records)
                span = (m.start(), year.end())
            else:
                days = [d for d in days if d <= today] or days[:1]
            day = days[-1]
            claimed.append(span)
            text = query[span[0] : span[1]]
            out.append(TimeHint(text, day.replace(day=1), day, "holiday", day))
    return out


def _recognized(query: str, ref: dt.datetime, claimed: list[tuple[int, int]]) -> list[TimeHint]:
    from recognizers_date_time import Culture, recognize_datetime

    naive = ref.replace(tzinfo=None)
    out: list[TimeHint] = []
    for result in recognize_datetime(query, Culture.English, reference=naive):
        span = (int(result.start), int(result.end) + 1)
        if not _free(span, claimed):
            continue
        values = (result.resolution or {}).get("values") or []
        text = query[span[0] : span[1]]
        hint = _pick(text, values, naive.date()) or _named_day_of(text, naive)
        year = _YEAR_AFTER.match(query, span[1]) if hint and hint.day else None
        if hint and year and not any(ch.isdigit() for ch in text):
            # a named day the recognizer read apart from its year ("Christmas, 2020": it
            # gives the Christmas just gone, and the year 2020 as a hint of its own)
            dated = _named_day_of(query[span[0] : year.end()], naive)
            if dated is not None:
                hint, span = dated, (span[0], year.end())
        if hint is not None:
            claimed.append(span)
            out.append(hint)
    return out


def _named_day_of(text: str, ref: dt.datetime) -> TimeHint | None:
    """A named day of a fixed date with its year ("Christmas 2020", "New Year of 2025"), which
    the recognizer leaves unresolved (``XXXX-XX-2020``) though it knows the day alone: that
    day of that year, or None."""
    from recognizers_date_time import Culture, recognize_datetime

    named = _NAMED_YEAR.fullmatch(text)
    if named is None:
        return None
    name, year = named.group(1), int(named.group(2))
    for result in recognize_datetime(name, Culture.English, reference=ref):
        if (int(result.start), int(result.end) + 1) != (0, len(name)):
            continue
        for value in (result.resolution or {}).get("values") or []:
            timex = str(value.get("timex") or "")
            if value.get("type") == "date" and re.fullmatch(r"XXXX-\d\d-\d\d", timex):
                try:
                    day = dt.date(year, int(timex[5:7]), int(timex[8:]))
                except ValueError:  # year 0, or 29 February of a year without it
                    return None
                return TimeHint(text, day.replace(day=1), day, "recognizer", day)
    return None


def _pick(text: str, values: Sequence[dict[str, Any]], today: dt.date) -> TimeHint | None:
    """The candidate an ambiguous expression means: the latest one starting on or before
    ``today`` (the earliest if all are later)."""
    ranges = [r for r in (_range(v, today) for v in values) if r is not None]
    if not ranges:
        return None
    past = [r for r in ranges if r[0] <= today]
    start, end, holiday = max(past) if past else min(ranges)
    weekend = " weekend" in f" {text.casefold()}" and not re.search(r"\b(next|this)\b", text, re.I)
    if weekend and start > today:  # "the weekend" of a question is the one just gone
        start, end = start - dt.timedelta(days=7), end - dt.timedelta(days=7)
    if holiday and not any(ch.isdigit() for ch in text):  # a named day: Christmas, New Year
        return TimeHint(text, start.replace(day=1), start, "recognizer", start)
    return TimeHint(text, start, end, "recognizer")


def _date(value: Any, default: dt.date) -> dt.date:
    return dt.date.fromisoformat(str(value)[:10]) if value else default


def _range(value: dict[str, Any], today: dt.date) -> tuple[dt.date, dt.date, bool] | None:
    """``(start, end inclusive, a day of any year)`` of one recognizer value, or None (a
    season such as "fall" comes back unresolved)."""
    kind = value.get("type")
    timex = str(value.get("timex") or "")
    try:
        if kind in ("date", "datetime"):
            day = dt.date.fromisoformat(str(value["value"])[:10])
            # a fixed day of any year (XXXX-12-25)
            named = timex.startswith("XXXX-") and len(timex) == 10 and "W" not in timex
            return day, day, named
        if kind in ("daterange", "datetimerange") and (value.get("start") or value.get("end")):
            # an open end ("since Monday", "from today") runs to the reference day, an open
            # start ("before March") from the earliest date
            start = _date(value.get("start"), dt.date.min)
            end = _date(value.get("end"), today + dt.timedelta(days=1))
            # spans it computes (weeks, months) end the day after; spans the query states
            # ("between 3 and 5 March") end on the day named
            if not timex.startswith("(") and end > start:
                end -= dt.timedelta(days=1)
            return start, end, False
    except (KeyError, ValueError):
        return None  # "not resolved" and the like: no hint
    return None


def named_candidates(text: str, people: Iterable[Person]) -> list[Person]:
    """The people ``text`` could name: by id, or by a full name, alias or given name equal to
    the whole text or to a span of one to four of its words. Who :func:`analyze` (or an exact
    lookup) finds among a list depends only on these: the others' forms match nothing in the
    text, so a list cut to them gives the same people, and whether one is named rather than
    ambiguous is decided among them alone."""
    words = [re.sub(r"['’]s$", "", m.group(0)) for m in _WORD.finditer(text)]
    spans = {normalize_name(text)}
    for size in (1, 2, 3, 4):
        for i in range(len(words) - size + 1):
            spans.add(normalize_name(" ".join(words[i : i + size])))
    spans.discard("")
    out = []
    for p in people:
        forms = {normalize_name(f) for f in (p.name, *p.aliases)}
        forms.add(normalize_name(p.name).split(" ")[0])
        if p.identity_id == text or forms & spans:
            out.append(p)
    return out


def _people(query: str, people: list[Person], claimed: list[tuple[int, int]]) -> list[PersonHint]:
    """Identities named in ``query`` by full name, alias, or an unambiguous given name."""
    forms: dict[str, set[str]] = {}
    given: dict[str, set[str]] = {}
    by_id = {p.identity_id: p for p in people}
    for p in people:
        for form in (p.name, *p.aliases):
            norm = normalize_name(form)
            if len(norm) >= 2:
                forms.setdefault(norm, set()).add(p.identity_id)
        first = normalize_name(p.name).split(" ")[0]
        if len(first) >= 2:
            given.setdefault(first, set()).add(p.identity_id)
    for first, ids in given.items():
        if len(ids) == 1 and first not in forms:
            forms[first] = ids
    words = [(re.sub(r"['’]s$", "", m.group(0)), m.start(), m.end()) for m in _WORD.finditer(query)]
    out: dict[str, PersonHint] = {}
    # longest spans first: "Sarah Jones" before "Sarah"
    for size in (4, 3, 2, 1):
        for i in range(len(words) - size + 1):
            span = (words[i][1], words[i + size - 1][2])
            named = forms.get(normalize_name(" ".join(w for w, _, _ in words[i : i + size])))
            if not named or len(named) != 1 or not _free(span, claimed):
                continue
            claimed.append(span)
            pid = next(iter(named))
            out.setdefault(pid, PersonHint(query[span[0] : span[1]], pid, by_id[pid].name))
    return list(out.values())


def _topics(query: str, claimed: Sequence[tuple[int, int]]) -> list[str]:
    """The content words of ``query`` outside its time and people spans, in order, once."""
    out: list[str] = []
    for m in _WORD.finditer(query):
        if not _free((m.start(), m.end()), claimed):
            continue
        word = re.sub(r"['’]s$", "", m.group(0).casefold())
        if len(word) < 2 or word in STOPWORDS or word.isdigit() or word in out:
            continue
        out.append(word)
    return out
