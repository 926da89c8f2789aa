"""Per-tenant identity registry: who a name, e-mail address or phone number refers to.

A registry holds the people of one tenant, seeded from the people file that the collection's
config names (``people: people.yaml``) and grown by identities discovered in messages (an
unknown e-mail sender, a caller not on file). It never holds or matches another tenant's people:
a name resolved in one tenant's registry can only ever name one of that tenant's identities.

Matching goes from strong to weak evidence (the forms are in ``identity_forms``):

1. exact e-mail address, then exact phone number (normalised to E.164);
2. exact full name, then exact alias (nicknames, chat handles, initials from the people file);
3. given name with surname initial ("Jane O."), initials ("SJ"), or a given name alone
   ("Sarah"), each only when exactly one person fits;
4. fuzzy (``difflib``'s ratio, over the names ``rapidfuzz`` finds near): the closest name or
   alias at least ``FUZZY_CUTOFF`` alike and clearly ahead of any other person's; not tried when
   an address or number was given that is on file for nobody (that says "someone else").

When a step names more than one person, or two people tie, the match is ambiguous: no identity,
the candidates and the reason are returned, so a caller never silently picks one of two Sarahs.
When e-mail, phone and name agree, their confidences combine (noisy-or): independent evidence
corroborates.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import astuple, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import yaml

from corpus_index.errors import ConfigError, IdentityError
from corpus_index.hashing import canonical_json, sha256_hex
from corpus_index.identity_forms import (
    DEFAULT_COUNTRY_CODE,
    FUZZY_MARGIN,
    NAME_STEPS,
    NameIndex,
    display_name,
    normalize_email,
    normalize_name,
    normalize_phone,
)
from corpus_index.kinds.bounded_yaml import YamlDuplicateKeyError, YamlLimitError, load
from corpus_index.limits import Limits

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
R = TypeVar("R")
FUZZY_WEIGHT = 0.8  # a fuzzy match's confidence is its ratio times this


def identity_id(tenant_id: str, key: str) -> str:
    """Content-derived id of an identity: the tenant and its key, never a position."""
    return "idn_" + sha256_hex(canonical_json(["identity", tenant_id, key]))[:20]


def discovered_key(ref: str, *, country_code: str = DEFAULT_COUNTRY_CODE) -> str:
    """``ref`` as discovery keys it when it is ``discovered:<address|phone|name>``: the detail
    normalised as a message's is (``discovered:Zed@Q.example`` -> ``discovered:zed@q.example``,
    ``discovered:0412 555 301`` -> ``discovered:+61412555301``, a name as
    :func:`~corpus_index.identity_forms.normalize_name` writes it); any other ref as it is."""
    prefix, _, detail = ref.partition(":")
    if prefix != "discovered" or not detail.strip():
        return ref
    form = (
        (normalize_email(detail) if "@" in detail else None)
        or normalize_phone(detail, country_code=country_code)
        or normalize_name(display_name(detail))
    )
    return f"discovered:{form}" if form else ref


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
    country_code: str = DEFAULT_COUNTRY_CODE
    lists: frozenset[str] = frozenset()  # shared mailboxes: addressed, never a person
    _people: dict[str, Identity] = field(default_factory=dict)
    _merged_into: dict[str, str] = field(default_factory=dict)
    # derived from _people: built on the first lookup, then kept up to date person by person
    _index: NameIndex | None = field(default=None, repr=False)
    _memo: dict[tuple[str, str | None, str | None], Match] = field(default_factory=dict, repr=False)

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

    def id_of(self, ref: str) -> str | None:
        """The id ``ref`` (an identity id, a people-file id or a discovered key) names, not
        following merges: an identity merged into another keeps its own; None when ``ref``
        names no identity of this registry, live or merged."""
        for candidate in (ref, identity_id(self.tenant_id, ref)):
            if candidate in self._people or candidate in self._merged_into:
                return candidate
        return None

    def digest(self) -> str:
        """A digest of everything a lookup reads: the people in the order they were added,
        the shared mailboxes, the country code and the merges (two registries with the same
        digest resolve every value alike)."""
        people = [astuple(p) for p in self._people.values()]
        merged = sorted(self._merged_into.items())
        state = [self.tenant_id, self.country_code, sorted(self.lists), people, merged]
        return sha256_hex(canonical_json(state))

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
        before = self._people.get(person.id)
        self._people[person.id] = person
        self._changed(before, person)
        return person

    def remove(self, identity_id_: str, *, merged_into: str | None = None) -> None:
        """Drop an identity; with ``merged_into`` its id keeps resolving to the survivor."""
        before = self._people.pop(identity_id_, None)
        if merged_into is not None:
            self._merged_into[identity_id_] = merged_into
        self._changed(before, None)

    def _changed(self, before: Identity | None, after: Identity | None) -> None:
        """Bring the name index up to date with one person's change (``after`` None: removed),
        in time linear in what changed rather than in the registry: a unit can bring thousands
        of people, and rebuilding the index for each was quadratic. Every remembered answer is
        forgotten: any change can alter any lookup (a second Sarah makes "Sarah" ambiguous)."""
        self._memo.clear()
        index = self._index
        if index is None:
            return  # built from _people by the next lookup
        if before is not None and after is not None and _only_added(before, after):
            # learning an address, corroborating, a merge's survivor: index only what is new
            index.add(
                after.id,
                name=after.name,
                aliases=after.aliases[len(before.aliases) :],
                emails=after.emails[len(before.emails) :],
                phones=after.phones[len(before.phones) :],
            )
            return
        if before is not None:
            index.discard(before.id)
        if after is not None:
            index.add(
                after.id,
                name=after.name,
                aliases=after.aliases,
                emails=after.emails,
                phones=after.phones,
            )

    def _names(self) -> NameIndex:
        if self._index is None:
            index = NameIndex()
            for p in self._people.values():
                index.add(p.id, name=p.name, aliases=p.aliases, emails=p.emails, phones=p.phones)
            self._index = index
        return self._index

    def discover(
        self, raw: str, *, address: str | None = None, phone: str | None = None
    ) -> Identity | None:
        """The identity for someone not on file, created on first sight.

        Keyed by the strongest detail seen (e-mail, then phone, then the normalised name), so the
        same unknown sender discovered twice is one identity. None when ``raw`` names nobody.
        """
        name = display_name(raw) if raw else ""
        norm = normalize_name(name)
        if address:
            key = "discovered:" + address
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
            name=name or address or phone or raw,
            emails=(address,) if address else (),
            phones=(phone,) if phone else (),
            origin="discovered",
            confidence=EVIDENCE_CONFIDENCE["discovered"],
        )
        return self.put(person)

    def learn(
        self, identity_id_: str, *, address: str | None = None, phone: str | None = None
    ) -> None:
        """Add an e-mail address or phone number seen with an identity (no-op if known).

        Raises:
            IdentityError: the identity is not in this registry.
        """
        person = self.get(identity_id_)
        if person is None:
            raise IdentityError(f"no identity {identity_id_!r} in tenant {self.tenant_id!r}")
        emails = person.emails + ((address,) if address and address not in person.emails else ())
        phones = person.phones + ((phone,) if phone and phone not in person.phones else ())
        if (emails, phones) != (person.emails, person.phones):
            self.put(replace(person, emails=emails, phones=phones))

    # ------------------------------------------------------------------ matching
    def is_list(self, raw: str) -> bool:
        """Whether ``raw`` is one of the tenant's shared mailboxes (never a person)."""
        addr = normalize_email(raw)
        return addr is not None and addr in self.lists

    def resolve(
        self, raw: str | None = None, *, address: str | None = None, phone: str | None = None
    ) -> Match:
        """Who ``raw`` (a name, handle, ``Name <address>``, address or number) refers to.

        Evidence from the address, the number and the name is weighed together: the identity
        with the highest combined confidence wins, and a conflict (the address names one person,
        the name another) is said in the reason.
        """
        raw = (raw or "").strip()
        memo_key = (raw, address, phone)
        if memo_key not in self._memo:
            self._memo[memo_key] = self._resolve(raw, address, phone)
        return self._memo[memo_key]

    def _resolve(self, raw: str, address: str | None, phone: str | None) -> Match:
        index = self._names()
        raw_phone = normalize_phone(raw, country_code=self.country_code) if raw else None
        address = address or (normalize_email(raw) if "@" in raw else None)
        phone = phone or raw_phone
        name = "" if raw_phone else display_name(raw)
        evidence: dict[str, list[tuple[str, float]]] = {}
        for how, form in (("email", address), ("phone", phone)):
            for pid in index.exact(how, form) if form else ():
                evidence.setdefault(pid, []).append((how, EVIDENCE_CONFIDENCE[how]))
        ambiguous: Match | None = None
        if name:
            # an address or number on file for nobody says "someone else": a name merely
            # close to a known one is then not taken for them
            fuzzy = not ((address or phone) and not evidence)
            by_name = self._by_name(index, name, fuzzy=fuzzy)
            if by_name.identity_id is not None:
                evidence.setdefault(by_name.identity_id, []).append(
                    (by_name.reason, by_name.confidence)
                )
            elif by_name.candidates:
                ambiguous = by_name
        if not evidence:
            return ambiguous or NO_MATCH
        scored = sorted(
            ((noisy_or(c for _, c in ev), pid, ev) for pid, ev in evidence.items()),
            key=lambda s: (-s[0], s[1]),
        )
        best_conf, best, ev = scored[0]
        tied = tuple(pid for conf, pid, _ in scored if conf == best_conf)
        if len(tied) > 1:  # e.g. a family's shared address, and no name to tell them apart
            return Match(None, 0.0, f"ambiguous {ev[0][0]} {raw or address or phone!r}", tied)
        reason = " + ".join(how for how, _ in ev)
        if len(scored) > 1:
            others = ", ".join(f"{how} -> {pid}" for _, pid, e in scored[1:] for how, _ in e)
            reason += f" (conflicting: {others})"
        return Match(best, best_conf, reason)

    @staticmethod
    def _by_name(index: NameIndex, raw: str, *, fuzzy: bool) -> Match:
        norm = normalize_name(raw)
        if not norm:
            return NO_MATCH
        for how in NAME_STEPS:
            ids = sorted(index.exact(how, norm))
            if len(ids) == 1:
                return Match(ids[0], EVIDENCE_CONFIDENCE[how], how)
            if len(ids) > 1:
                return Match(None, 0.0, f"ambiguous {how} {raw!r}", tuple(ids))
        if not fuzzy:
            return NO_MATCH
        ranked = index.fuzzy(norm)
        if not ranked:
            return NO_MATCH
        pid, ratio = ranked[0]
        close = tuple(p for p, r in ranked if ratio - r < FUZZY_MARGIN)
        if len(close) > 1:
            return Match(None, 0.0, f"ambiguous fuzzy {raw!r}", close)
        return Match(pid, round(FUZZY_WEIGHT * ratio, 4), f"fuzzy {ratio:.2f}")


def _only_added(before: Identity, after: Identity) -> bool:
    """Whether ``after`` is ``before`` with aliases, e-mails or phones appended (and nothing
    else the index reads changed), so indexing the appended ones brings the index up to date."""
    return before.name == after.name and all(
        new[: len(old)] == old
        for old, new in (
            (before.aliases, after.aliases),
            (before.emails, after.emails),
            (before.phones, after.phones),
        )
    )


# ---------------------------------------------------------------------- the people file
def load_people(path: Path, *, tenant_id: str, limits: Limits | None = None) -> IdentityRegistry:
    """The registry of ``tenant_id`` seeded from a people file (YAML).

    The file holds ``people:`` (each with ``id`` and ``name``, optional ``aliases``, ``emails``,
    ``phones``, ``role``), optional ``lists:`` (shared mailboxes), ``country_code`` (for
    national phone numbers, default 61) and ``tenant`` (which must be ``tenant_id`` if given).
    Phone numbers are strings: an unquoted one YAML may read as another number.

    Raises:
        ConfigError: the file is missing, invalid (a key given twice in one mapping too), of
            another tenant, or an entry is malformed (an unquoted phone number too); the
            message names the file and the entry (or line).
    """
    limits = limits or Limits()
    data = yaml_of(path, read_small_file(path, limits, "people file"), limits, unique_keys=True)
    if not isinstance(data, dict) or not isinstance(data.get("people"), list):
        raise ConfigError(f"{path}: a people file needs a list under 'people'")
    file_tenant = data.get("tenant")
    if file_tenant is not None and str(file_tenant) != tenant_id:
        raise ConfigError(
            f"{path}: people file is for tenant {file_tenant!r}, not {tenant_id!r}; "
            "each collection names its own tenant's people file"
        )
    country = data.get("country_code", DEFAULT_COUNTRY_CODE)
    if isinstance(country, bool) or not re.fullmatch(r"\+?\d{1,4}", str(country)):
        raise ConfigError(f"{path}: country_code must be a calling code such as 61 ({country!r})")
    country = str(country).lstrip("+")
    mailboxes = data.get("lists") or []
    if not isinstance(mailboxes, list) or not all(isinstance(x, str) for x in mailboxes):
        raise ConfigError(f"{path}: lists must be a list of e-mail addresses (shared mailboxes)")
    lists = frozenset(a for a in map(normalize_email, mailboxes) if a)
    registry = IdentityRegistry(tenant_id, country_code=country, lists=lists)
    for i, entry in enumerate(data["people"]):
        person = _person(entry, tenant_id, country, f"{path}: people[{i}]")
        if registry.get(person.id) is not None:
            raise ConfigError(f"{path}: people[{i}]: duplicate id {person.key!r}")
        registry.put(person)
    return registry


def read_small_file(path: Path, limits: Limits, what: str, *, follow_links: bool = False) -> str:
    """The text of a configuration file a collection names (a people or merges file), bounded
    by ``limits.max_document_bytes`` as a source file is.

    Args:
        follow_links: read a symbolic link's target (``corpus.yaml`` itself, which no
            collection's path bounds), instead of refusing the link.

    Raises:
        ConfigError: it is missing, not a regular file (a folder, a pipe, a symbolic link
            unless ``follow_links``: a link could lead out of the collection's path),
            unreadable, larger than the bound, or not UTF-8 text; the message names the file.
    """
    try:
        if path.is_symlink() and not follow_links:
            raise ConfigError(f"{path}: {what} is a symbolic link; name the file itself")
        size = path.stat().st_size
        if not path.is_file():
            raise ConfigError(f"{path}: {what} is not a regular file")
        if size > limits.max_document_bytes:
            raise ConfigError(
                f"{path}: {what} is {size:,} bytes; the limit is "
                f"limits.max_document_bytes = {limits.max_document_bytes:,}"
            )
        return path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: {what} not found") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: {what} is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: {what} cannot be read: {exc.strerror or exc}") from None


def yaml_of(path: Path | str, text: str, limits: Limits, *, unique_keys: bool = False) -> Any:
    """The value of the YAML ``text`` of the file ``path`` (or of what ``path`` names, such as
    an environment variable), read within ``limits`` (its YAML aliases, nodes and nesting
    depth, as a source file is).

    Args:
        unique_keys: refuse a mapping that gives one key twice, where YAML keeps the last
            without a word (a second ``people:`` list would drop the first list's people).

    Raises:
        ConfigError: the text is over a limit, not YAML, or (``unique_keys``) gives a key
            twice; the message names ``path`` and line.
    """
    try:
        return load(text, limits, unique_keys=unique_keys)
    except (YamlLimitError, YamlDuplicateKeyError) as exc:
        raise ConfigError(f"{path}:{exc.line + 1}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{where}: invalid YAML: {exc}") from None


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
        if any(isinstance(v, bool) for v in value):
            # YAML reads an unquoted yes, no, on or off as a boolean: str() would make the
            # alias "True", a name nobody writes
            word = next(v for v in value if isinstance(v, bool))
            raise ConfigError(
                f"{where} ({entry['id']}).{key}: {word!r} is not a string; quote it "
                '(aliases: ["On"]): unquoted, YAML reads yes, no, on and off as true or false'
            )
        if key == "phones" and not all(isinstance(v, str) for v in value):
            # YAML reads an unquoted 0412555301 as the octal 69917377, a number nobody has
            number = next(v for v in value if not isinstance(v, str))
            raise ConfigError(
                f"{where} ({entry['id']}).phones: {number!r} is not a string; quote phone "
                'numbers (phones: ["0412 555 301"]): unquoted, YAML may read them as '
                "another number"
            )
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
    key = unicodedata.normalize("NFC", entry["id"].strip())  # one key however it is composed
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


def records_table(rows: Iterable[Any], schema: pa.Schema, **renamed: str) -> pa.Table:
    """Frozen records as a table of ``schema``: each column is the records' attribute of the
    same name, or the attribute ``renamed`` names for it."""
    names = [(col, renamed.get(col, col)) for col in schema.names]
    return pa.Table.from_pylist(
        [{col: getattr(r, attr) for col, attr in names} for r in rows], schema=schema
    )


def table_records(table: pa.Table, record: type[R]) -> list[R]:
    """The inverse of :func:`records_table` for a dataclass ``record`` whose fields are the
    table's columns: one record per row, built from whole columns (several times faster than
    a row at a time)."""
    names = [f.name for f in fields(record)]  # type: ignore[arg-type]
    columns = [table[name].to_pylist() for name in names]
    return [record(*row) for row in zip(*columns, strict=True)]


def identities_table(registry: IdentityRegistry) -> pa.Table:
    """The registry's identities as a table (one row each, in id order)."""
    return records_table(registry, IDENTITY_SCHEMA, identity_id="id")
