"""Per-tenant identity registry: who a name, e-mail address or phone number refers to.

A registry holds the people of one tenant, seeded from the people file that the collection's
config names (``people: people.yaml``) and grown by identities discovered in messages (an
unknown e-mail sender, a caller not on file). It never holds or matches another tenant's people:
a name resolved in one tenant's registry can only ever name one of that tenant's identities.

Matching goes from strong to weak evidence, and the first step that names people decides:

1. exact e-mail address, then exact phone number (normalised to E.164);
2. exact full name, then exact alias (nicknames, chat handles, initials from the people file);
3. given name with surname initial ("Jane O."), initials ("SJ"), or a given name alone
   ("Sarah"), each only when exactly one person fits;
4. fuzzy: ``difflib.SequenceMatcher`` ratio against every name and alias, kept when the best
   is at least ``FUZZY_CUTOFF`` and clearly ahead of any other person.

The fuzzy step uses the standard library's ``difflib``: a registry holds tens to a few thousand
people of one tenant, so the quadratic ratio is fast enough, and no new dependency is needed.
Where registries grow to hundreds of thousands, ``rapidfuzz`` (the same ratio, in C) is the
drop-in to reach for.

When a step names more than one person the match is ambiguous: no identity, the candidates and
the reason are returned, so a caller never silently picks one of two Sarahs. When e-mail, phone
and name agree, their confidences combine (noisy-or): independent evidence corroborates.
"""

from __future__ import annotations

import difflib
import email.utils
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml

from corpus_index.errors import ConfigError, IdentityError
from corpus_index.hashing import canonical_json, sha256_hex
from corpus_index.kinds.bounded_yaml import YamlLimitError, load
from corpus_index.limits import Limits

FUZZY_CUTOFF = 0.85
FUZZY_MARGIN = 0.04  # the best fuzzy match must beat every other person's by this much

# Confidence of one piece of evidence that a raw value names a person.
EVIDENCE_CONFIDENCE: dict[str, float] = {
    "email": 0.97,
    "phone": 0.95,
    "name": 0.9,
    "alias": 0.8,
    "name_initial": 0.75,
    "given_name": 0.65,
    "initials": 0.6,
    "discovered": 0.5,
}

_TITLES = frozenset({"dr", "mr", "mrs", "ms", "miss", "mx", "prof", "rn", "sr", "jr"})
_PAREN = re.compile(r"\([^)]*\)")
_SEPARATORS = re.compile(r"[._\-/]+")
_NOT_NAME = re.compile(r"[^\w\s]")
_SPACES = re.compile(r"\s+")


def normalize_name(raw: str) -> str:
    """Casefolded name without titles, bracketed notes or punctuation: ``Grace F (RN)`` ->
    ``grace f``, ``priya.r`` -> ``priya r``, ``Dr Anand Shah`` -> ``anand shah``."""
    text = _PAREN.sub(" ", raw)
    text = _SEPARATORS.sub(" ", text)
    text = _NOT_NAME.sub("", text).casefold()
    words = [w for w in _SPACES.split(text) if w and w not in _TITLES]
    return " ".join(words)


def normalize_email(raw: str) -> str | None:
    """The lower-cased address of ``raw`` (``Name <a@b>`` or ``a@b``), or None if it has none."""
    _, addr = email.utils.parseaddr(raw)
    addr = addr.strip().lower()
    if "@" not in addr or addr.startswith("@") or addr.endswith("@"):
        return None
    return addr


# international call prefixes where they are not the ITU's "00"
_EXIT_PREFIXES = {"61": "0011", "1": "011"}


def normalize_phone(raw: str, *, country_code: str = "61") -> str | None:
    """E.164 form of a phone number (``0412 555 301`` -> ``+61412555301``), or None.

    A national number (leading 0) takes ``country_code``; a number dialled with that
    country's international prefix (``0011`` from Australia) is international; fewer than 8
    digits is not a phone.
    """
    text = raw.strip()
    if not re.fullmatch(r"\+?[\d\s().\-]+", text):
        return None
    digits = re.sub(r"\D", "", text)
    exit_prefix = _EXIT_PREFIXES.get(country_code, "00")
    international = text.startswith("+") or digits.startswith(exit_prefix)
    if digits.startswith(exit_prefix) and not text.startswith("+"):
        digits = digits[len(exit_prefix) :]
    if len(digits) < 8 or len(digits) > 15:
        return None
    if international:
        return "+" + digits
    if digits.startswith("0"):
        return f"+{country_code}{digits[1:]}"
    if digits.startswith(country_code) and len(digits) > 9:
        return "+" + digits
    return f"+{country_code}{digits}"


def display_name(raw: str) -> str:
    """The name part of a header value: ``Leanne Walsh <l@x>`` -> ``Leanne Walsh``."""
    name, addr = email.utils.parseaddr(raw)
    if addr and "@" in addr:
        return name.strip()
    return raw.strip()


def identity_id(tenant_id: str, key: str) -> str:
    """Content-derived id of an identity: the tenant and its key, never a position."""
    return "idn_" + sha256_hex(canonical_json(["identity", tenant_id, key]))[:20]


@dataclass(frozen=True, slots=True)
class Identity:
    """One person of one tenant, as the registry knows them."""

    id: str
    tenant_id: str
    key: str  # the people file's id, or "discovered:<email|phone|name>"
    name: str
    aliases: tuple[str, ...] = ()
    emails: tuple[str, ...] = ()
    phones: tuple[str, ...] = ()
    role: str = ""  # staff, participant, family, external ... as the people file says
    origin: str = "people_file"  # or "discovered"
    confidence: float = 1.0  # that this is a real, distinct person (people file: 1.0)


@dataclass(frozen=True, slots=True)
class Match:
    """What a raw name, address or number resolved to; ``identity_id`` None when unresolved."""

    identity_id: str | None
    confidence: float
    reason: str
    candidates: tuple[str, ...] = ()


NO_MATCH = Match(None, 0.0, "no match")


def noisy_or(confidences: Iterable[float]) -> float:
    """Combined confidence of independent evidence: 1 - prod(1 - c), capped below 1."""
    miss = 1.0
    for c in confidences:
        miss *= 1.0 - c
    return round(min(1.0 - miss, 0.999), 4)


@dataclass
class IdentityRegistry:
    """The identities of one tenant, with lookups by e-mail, phone, name and alias."""

    tenant_id: str
    country_code: str = "61"
    lists: frozenset[str] = frozenset()  # shared mailboxes: addressed, never a person
    _people: dict[str, Identity] = field(default_factory=dict)
    _merged_into: dict[str, str] = field(default_factory=dict)

    # ------------------------------------------------------------------ contents
    def __iter__(self) -> Iterator[Identity]:
        return iter(sorted(self._people.values(), key=lambda p: p.id))

    def __len__(self) -> int:
        return len(self._people)

    def get(self, identity_id_: str) -> Identity | None:
        """The identity with this id (following merges), or None."""
        return self._people.get(self.canonical(identity_id_))

    def by_key(self, key: str) -> Identity | None:
        """The identity whose people-file id (or discovered key) is ``key``, or None."""
        return self.get(identity_id(self.tenant_id, key))

    def canonical(self, identity_id_: str) -> str:
        """The surviving id of an identity merged into another (itself otherwise)."""
        seen: set[str] = set()
        while identity_id_ in self._merged_into and identity_id_ not in seen:
            seen.add(identity_id_)
            identity_id_ = self._merged_into[identity_id_]
        return identity_id_

    def put(self, person: Identity) -> Identity:
        """Add or replace ``person``; refuses one of another tenant.

        Raises:
            IdentityError: ``person`` belongs to another tenant.
        """
        if person.tenant_id != self.tenant_id:
            raise IdentityError(
                f"identity {person.id} belongs to tenant {person.tenant_id!r}, "
                f"not {self.tenant_id!r}: registries never mix tenants"
            )
        self._people[person.id] = person
        return person

    def remove(self, identity_id_: str, *, merged_into: str | None = None) -> None:
        """Drop an identity; with ``merged_into`` its id keeps resolving to the survivor."""
        self._people.pop(identity_id_, None)
        if merged_into is not None:
            self._merged_into[identity_id_] = merged_into

    def discover(
        self, raw: str, *, email_: str | None = None, phone: str | None = None
    ) -> Identity | None:
        """The identity for someone not on file, created on first sight.

        Keyed by the strongest detail seen (e-mail, then phone, then the normalised name), so the
        same unknown sender discovered twice is one identity. None when ``raw`` names nobody.
        """
        name = display_name(raw) if raw else ""
        norm = normalize_name(name)
        if email_:
            key = "discovered:" + email_
        elif phone:
            key = "discovered:" + phone
        elif norm and not norm.isdigit():
            key = "discovered:" + norm
        else:
            return None
        existing = self.by_key(key)
        if existing is not None:
            return existing
        person = Identity(
            id=identity_id(self.tenant_id, key),
            tenant_id=self.tenant_id,
            key=key,
            name=name or email_ or phone or raw,
            emails=(email_,) if email_ else (),
            phones=(phone,) if phone else (),
            origin="discovered",
            confidence=EVIDENCE_CONFIDENCE["discovered"],
        )
        return self.put(person)

    def learn(
        self, identity_id_: str, *, email_: str | None = None, phone: str | None = None
    ) -> None:
        """Add an e-mail address or phone number seen with an identity (no-op if known).

        Raises:
            IdentityError: the identity is not in this registry.
        """
        person = self.get(identity_id_)
        if person is None:
            raise IdentityError(f"no identity {identity_id_!r} in tenant {self.tenant_id!r}")
        emails = person.emails + ((email_,) if email_ and email_ not in person.emails else ())
        phones = person.phones + ((phone,) if phone and phone not in person.phones else ())
        if (emails, phones) != (person.emails, person.phones):
            self.put(replace(person, emails=emails, phones=phones))

    # ------------------------------------------------------------------ matching
    def is_list(self, raw: str) -> bool:
        """Whether ``raw`` is one of the tenant's shared mailboxes (never a person)."""
        addr = normalize_email(raw)
        return addr is not None and addr in self.lists

    def resolve(
        self, raw: str | None = None, *, email_: str | None = None, phone: str | None = None
    ) -> Match:
        """Who ``raw`` (a name, handle, ``Name <address>``, address or number) refers to.

        Evidence from the address, the number and the name is weighed together: the identity
        with the highest combined confidence wins, and a conflict (the address names one person,
        the name another) is said in the reason.
        """
        raw = (raw or "").strip()
        raw_phone = normalize_phone(raw, country_code=self.country_code) if raw else None
        email_ = email_ or (normalize_email(raw) if "@" in raw else None)
        phone = phone or raw_phone
        name = "" if raw_phone else display_name(raw)
        evidence: dict[str, list[tuple[str, float]]] = {}
        ambiguous: Match | None = None
        for how, found in (
            ("email", self._by_email(email_)),
            ("phone", self._by_phone(phone)),
        ):
            for pid in found:
                evidence.setdefault(pid, []).append((how, EVIDENCE_CONFIDENCE[how]))
        if name:
            # an address or number on file for nobody says "someone else": a name merely
            # close to a known one is then not taken for them
            fuzzy = not ((email_ or phone) and not evidence)
            by_name = self._by_name(name, fuzzy=fuzzy)
            if by_name.candidates and by_name.identity_id is None:
                ambiguous = by_name
            elif by_name.identity_id is not None:
                evidence.setdefault(by_name.identity_id, []).append(
                    (by_name.reason, by_name.confidence)
                )
        if not evidence:
            return ambiguous or NO_MATCH
        scored = sorted(
            ((noisy_or(c for _, c in ev), pid, ev) for pid, ev in evidence.items()),
            key=lambda s: (-s[0], s[1]),
        )
        best_conf, best, ev = scored[0]
        reason = " + ".join(how for how, _ in ev)
        if len(scored) > 1:
            others = ", ".join(f"{how} -> {pid}" for _, pid, e in scored[1:] for how, _ in e)
            reason += f" (conflicting: {others})"
        return Match(best, best_conf, reason)

    def _by_email(self, addr: str | None) -> list[str]:
        if not addr:
            return []
        return [p.id for p in self._people.values() if addr in p.emails]

    def _by_phone(self, phone: str | None) -> list[str]:
        if not phone:
            return []
        return [p.id for p in self._people.values() if phone in p.phones]

    def _by_name(self, raw: str, *, fuzzy: bool = True) -> Match:
        norm = normalize_name(raw)
        if not norm:
            return NO_MATCH
        steps: list[tuple[str, list[str]]] = [
            ("name", [p.id for p in self._people.values() if normalize_name(p.name) == norm]),
            ("alias", [p.id for p in self._people.values() if norm in _aliases(p)]),
            ("name_initial", [p.id for p in self._people.values() if _initial_form(p, norm)]),
            ("initials", [p.id for p in self._people.values() if _initials(p) == norm]),
            ("given_name", [p.id for p in self._people.values() if _given(p) == norm]),
        ]
        for how, found in steps:
            ids = sorted(set(found))
            if len(ids) == 1:
                return Match(ids[0], EVIDENCE_CONFIDENCE[how], how)
            if len(ids) > 1:
                return Match(None, 0.0, f"ambiguous {how} {raw!r}", tuple(ids))
        return self._fuzzy(norm, raw) if fuzzy else NO_MATCH

    def _fuzzy(self, norm: str, raw: str) -> Match:
        best: dict[str, float] = {}
        matcher = difflib.SequenceMatcher(autojunk=False)
        matcher.set_seq2(norm)
        for p in self._people.values():
            for form in {normalize_name(p.name), *_aliases(p)}:
                if len(form) < 4:  # "sj" ~ "sk" says nothing
                    continue
                matcher.set_seq1(form)
                if matcher.real_quick_ratio() < FUZZY_CUTOFF:
                    continue
                ratio = matcher.ratio()
                if ratio > best.get(p.id, 0.0):
                    best[p.id] = ratio
        ranked = sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))
        if not ranked or ranked[0][1] < FUZZY_CUTOFF:
            return NO_MATCH
        if len(ranked) > 1 and ranked[0][1] - ranked[1][1] < FUZZY_MARGIN:
            return Match(None, 0.0, f"ambiguous fuzzy {raw!r}", tuple(pid for pid, _ in ranked))
        pid, ratio = ranked[0]
        return Match(pid, round(0.8 * ratio, 4), f"fuzzy {ratio:.2f}")


def _aliases(p: Identity) -> set[str]:
    return {normalize_name(a) for a in p.aliases} - {""}


def _name_words(p: Identity) -> list[str]:
    return normalize_name(p.name).split()


def _given(p: Identity) -> str:
    words = _name_words(p)
    return words[0] if len(words) > 1 else ""


def _initials(p: Identity) -> str:
    words = _name_words(p)
    return "".join(w[0] for w in words) if len(words) > 1 else ""


def _initial_form(p: Identity, norm: str) -> bool:
    """``jane o`` or ``jane o k`` for Jane Okafor: the given name, then surname initials."""
    words = _name_words(p)
    parts = norm.split()
    if len(words) < 2 or len(parts) < 2 or parts[0] != words[0]:
        return False
    rest = "".join(parts[1:])
    return len(rest) <= 2 and all(len(x) == 1 for x in parts[1:]) and words[-1].startswith(rest)


# ---------------------------------------------------------------------- the people file
def load_people(path: Path, *, tenant_id: str, limits: Limits | None = None) -> IdentityRegistry:
    """The registry of ``tenant_id`` seeded from a people file (YAML).

    The file holds ``people:`` (each with ``id`` and ``name``, optional ``aliases``, ``emails``,
    ``phones``, ``role``), optional ``lists:`` (shared mailboxes), ``country_code`` (for
    national phone numbers, default 61) and ``tenant`` (which must be ``tenant_id`` if given).

    Raises:
        ConfigError: the file is missing, invalid, of another tenant, or an entry is malformed;
            the message names the file and the entry.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError):
        raise ConfigError(f"{path}: people file not found") from None
    try:
        data = load(text, limits or Limits())
    except YamlLimitError as exc:
        raise ConfigError(f"{path}:{exc.line + 1}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{where}: invalid YAML: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("people"), list):
        raise ConfigError(f"{path}: a people file needs a list under 'people'")
    file_tenant = data.get("tenant")
    if file_tenant is not None and str(file_tenant) != tenant_id:
        raise ConfigError(
            f"{path}: people file is for tenant {file_tenant!r}, not {tenant_id!r}; "
            "each collection names its own tenant's people file"
        )
    country = str(data.get("country_code", "61"))
    lists = frozenset(a for a in (normalize_email(str(x)) for x in data.get("lists") or ()) if a)
    registry = IdentityRegistry(tenant_id, country_code=country, lists=lists)
    for i, entry in enumerate(data["people"]):
        person = _person(entry, tenant_id, country, f"{path}: people[{i}]")
        if registry.get(person.id) is not None:
            raise ConfigError(f"{path}: people[{i}]: duplicate id {person.key!r}")
        registry.put(person)
    return registry


def _person(entry: Any, tenant_id: str, country: str, where: str) -> Identity:
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{where}: must be a mapping")
    for key in ("id", "name"):
        if not isinstance(entry.get(key), str) or not entry[key].strip():
            raise ConfigError(f"{where}: needs a non-empty {key!r}")
    lists: dict[str, tuple[str, ...]] = {}
    for key in ("aliases", "emails", "phones"):
        value = entry.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, str | int) for v in value):
            raise ConfigError(f"{where}.{key}: must be a list of strings")
        lists[key] = tuple(str(v) for v in value)
    emails = []
    for raw in lists["emails"]:
        addr = normalize_email(raw)
        if addr is None:
            raise ConfigError(f"{where}.emails: {raw!r} is not an e-mail address")
        emails.append(addr)
    phones = []
    for raw in lists["phones"]:
        number = normalize_phone(raw, country_code=country)
        if number is None:
            raise ConfigError(f"{where}.phones: {raw!r} is not a phone number")
        phones.append(number)
    key = entry["id"].strip()
    return Identity(
        id=identity_id(tenant_id, key),
        tenant_id=tenant_id,
        key=key,
        name=entry["name"].strip(),
        aliases=lists["aliases"],
        emails=tuple(emails),
        phones=tuple(phones),
        role=str(entry.get("role") or ""),
    )


# ---------------------------------------------------------------------- stored form
IDENTITY_SCHEMA = pa.schema(
    [
        ("identity_id", pa.string()),
        ("tenant_id", pa.string()),
        ("key", pa.string()),
        ("name", pa.string()),
        ("aliases", pa.list_(pa.string())),
        ("emails", pa.list_(pa.string())),
        ("phones", pa.list_(pa.string())),
        ("role", pa.string()),
        ("origin", pa.string()),
        ("confidence", pa.float64()),
    ]
)


def identities_table(registry: IdentityRegistry) -> pa.Table:
    """The registry's identities as a table (one row each, in id order)."""
    people = list(registry)
    return pa.table(
        {
            "identity_id": [p.id for p in people],
            "tenant_id": [p.tenant_id for p in people],
            "key": [p.key for p in people],
            "name": [p.name for p in people],
            "aliases": [list(p.aliases) for p in people],
            "emails": [list(p.emails) for p in people],
            "phones": [list(p.phones) for p in people],
            "role": [p.role for p in people],
            "origin": [p.origin for p in people],
            "confidence": [p.confidence for p in people],
        },
        schema=IDENTITY_SCHEMA,
    )
