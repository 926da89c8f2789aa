"""What a principal may know of a person: the names, aliases, e-mail addresses and phone numbers
of an identity that its tenant's people files list, or that a unit the principal may see shows.

An identity's registry row gathers forms from every unit of its tenant: a name or address that
only a managers-only e-mail carries, or the names of an identity merged into it. Matching a
query against such a form, or showing it among the aliases, would tell a key of a unit it may
not see. A person query and the people a group search names are therefore resolved against the
:class:`Shown` person: the row's forms kept only where the directory (the people files, which
the operator keeps for the whole tenant) or the visible units' mentions of that person hold
them.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from corpus_index.errors import ConfigError
from corpus_index.identities import load_people
from corpus_index.identity_forms import (
    DEFAULT_COUNTRY_CODE,
    normalize_email,
    normalize_name,
    normalize_phone,
)
from corpus_index.limits import Limits
from corpus_index.query_analysis import Person

# a run of digits and phone punctuation long enough to be a number (normalize_phone decides)
_PHONE_LIKE = re.compile(r"\+?[\d(][\d\s().\-]{6,}\d")
# what may stand before an address's first character and still be part of it (RFC 5322 atext and
# the dot), and after its last (a domain's letters, digits and hyphens, or a dot that one follows)
_BEFORE_ADDRESS = r"(?<![\w.!#$%&'*+/=?^`{|}~\-])"
_AFTER_ADDRESS = r"(?![\w\-]|\.[\w\-])"


@dataclass(frozen=True, slots=True)
class Directory:
    """The forms a tenant's people files list (normalized), and its phones' country code."""

    names: frozenset[str] = frozenset()
    emails: frozenset[str] = frozenset()
    phones: frozenset[str] = frozenset()
    country_code: str = DEFAULT_COUNTRY_CODE


@dataclass(frozen=True, slots=True)
class Shown:
    """A person as a principal may know them: ``person`` with its name and aliases limited to
    the forms the directory or a visible unit holds (the name replaced by one of those when
    it is not), and the e-mail addresses and numbers it may be found by."""

    person: Person
    emails: frozenset[str]
    phones: frozenset[str]


def directory(people_files: Iterable[tuple[Path, Limits]], tenant: str) -> Directory:
    """The forms of ``tenant``'s people files (each with the collection's limits; a file that
    cannot be read adds nothing: the sync names it)."""
    names: set[str] = set()
    emails: set[str] = set()
    phones: set[str] = set()
    codes: list[str] = []  # the first readable file's country code reads the numbers
    for path, limits in people_files:
        listed = _listed(path, tenant, limits)
        if listed is None:
            continue
        names |= listed.names
        emails |= listed.emails
        phones |= listed.phones
        codes.append(listed.country_code)
    country_code = codes[0] if codes else DEFAULT_COUNTRY_CODE
    return Directory(frozenset(names), frozenset(emails), frozenset(phones), country_code)


def _listed(path: Path, tenant: str, limits: Limits) -> Directory | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return _read_listed(path, stat.st_mtime_ns, stat.st_size, tenant, limits)


@functools.lru_cache(maxsize=32)
def _read_listed(
    path: Path, _mtime_ns: int, _size: int, tenant: str, limits: Limits
) -> Directory | None:
    """One people file's forms, read once while its size and mtime stay as they are."""
    try:
        registry = load_people(path, tenant_id=tenant, limits=limits)
    except ConfigError:
        return None
    names = {normalize_name(f) for p in registry for f in (p.name, *p.aliases)}
    return Directory(
        frozenset(n for n in names if n),
        frozenset(e for p in registry for e in p.emails),
        frozenset(n for p in registry for n in p.phones),
        registry.country_code,
    )


def shown(
    person: Person,
    emails: Iterable[str],
    phones: Iterable[str],
    snippets: Sequence[str],
    listed: Directory,
) -> Shown:
    """``person`` (with the e-mail addresses and numbers its registry rows hold) as a principal
    knows them: each form kept where ``listed`` holds it or one of ``snippets`` shows it (the
    visible units' mentions of the person, see the module docstring)."""
    words = [f" {normalize_name(s)} " for s in snippets]
    lowered = [s.casefold() for s in snippets]
    numbers = {
        n
        for s in snippets
        for m in _PHONE_LIKE.findall(s)
        if (n := normalize_phone(m, country_code=listed.country_code)) is not None
    }

    def name_shown(form: str) -> bool:
        key = normalize_name(form)
        return bool(key) and (key in listed.names or any(f" {key} " in w for w in words))

    forms = [f for f in dict.fromkeys((person.name, *person.aliases)) if name_shown(f)]
    kept_emails = frozenset(
        e
        for e in (normalize_email(x) for x in emails)
        if e is not None and (e in listed.emails or any(_holds_address(s, e) for s in lowered))
    )
    kept_phones = frozenset(p for p in phones if p in listed.phones or p in numbers)
    if forms:
        name = person.name if person.name in forms else forms[0]
    else:  # known to the principal by an address or a number only, or by the id
        name = min(kept_emails) if kept_emails else person.identity_id
    aliases = tuple(f for f in forms if f != name)
    return Shown(Person(person.identity_id, name, aliases), kept_emails, kept_phones)


def _holds_address(text: str, address: str) -> bool:
    """Whether ``text`` shows ``address`` whole: not as the end of a longer local part
    (``ann@wattle.org`` in ``joann@wattle.org``) nor the start of a longer domain."""
    return re.search(_BEFORE_ADDRESS + re.escape(address) + _AFTER_ADDRESS, text) is not None


# an e-mail address as a header shows it
_ADDRESS = re.compile(r"[\w.+\-]+@[\w\-]+(?:\.[\w\-]+)+")


def shown_name(name: str, snippets: Sequence[str]) -> str | None:
    """``name`` where one of ``snippets`` shows it, else the first e-mail address they show,
    else None."""
    key = f" {normalize_name(name)} "
    if key.strip() and any(key in f" {normalize_name(s)} " for s in snippets):
        return name
    for s in snippets:
        found = _ADDRESS.search(s)
        if found:
            return found.group(0).lower()
    return None
