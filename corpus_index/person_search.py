""" "Everything about X" (seed "Linked Context V2" §9): all content about one identity of the
asking tenant, across sources, as whole contexts grouped by topic and by month, with the roles
the person plays and the people they interact with most.

The name is resolved in the principal's tenant only (its identities in the namespace: id,
people-file key, name or alias); another tenant's person of the same name is never found. The
units that mention the person are read inside the eligibility prefilter; the groups holding
them are expanded as search results are (a group with a member the principal may not see is
dropped whole); units in no shown group stand alone. Roles and partners are counted over every
context the principal may see, however few of them ``limit`` shows, and nothing the principal
may not see is counted.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pyarrow.compute as pc

from corpus_index import predicates
from corpus_index.context_records import (
    ContextRecord,
    People,
    expand_groups,
    may_see,
    read_rows,
    unit_record,
)
from corpus_index.eligibility import Principal
from corpus_index.errors import InvalidQueryError
from corpus_index.group_records import GROUP_KIND
from corpus_index.group_search import (
    tenant_directory,
    tenant_identities,
    tenant_people,
    visible_named,
    visible_of,
)
from corpus_index.identity_forms import normalize_email, normalize_name, normalize_phone
from corpus_index.query_analysis import Person, analyze
from corpus_index.search import Searcher
from corpus_index.visible_people import Shown

TOP_PARTNERS = 5


@dataclass(slots=True)
class PersonResult:
    """What the principal may see about one person (``person`` None: no such person)."""

    query: str
    person: Person | None
    records: list[ContextRecord] = field(default_factory=list)
    roles: dict[str, int] = field(default_factory=dict)
    partners: list[dict[str, Any]] = field(default_factory=list)
    candidates: list[Person] = field(default_factory=list)  # when the name fits several
    total_contexts: int = 0  # every context the principal may see, ``records`` the first ones

    def to_json(self) -> dict[str, Any]:
        by_topic: dict[str, list[str]] = {}
        by_month: dict[str, list[str]] = {}
        for r in self.records:
            for topic in r.topics or ("other",):
                by_topic.setdefault(topic, []).append(r.id)
            by_month.setdefault(r.date[:7] or "undated", []).append(r.id)
        person: dict[str, Any] | None = None
        if self.person is not None:
            person = {"identity_id": self.person.identity_id, "name": self.person.name}
            person["aliases"] = list(self.person.aliases)
        return {
            "query": self.query,
            "person": person,
            "candidates": [{"identity_id": p.identity_id, "name": p.name} for p in self.candidates],
            "roles": self.roles,
            "partners": self.partners,
            "by_topic": dict(sorted(by_topic.items())),
            "by_month": dict(sorted(by_month.items())),
            "records": [r.to_json() for r in self.records],
            "total_hits": len(self.records),
            "total_contexts": self.total_contexts,
        }


def find_person(people: list[Person], name: str) -> tuple[Person | None, list[Person]]:
    """The one person ``name`` names (an id, a full name or alias, or a name the query
    analysis resolves), else None with the candidates that share the name."""
    wanted = normalize_name(name)
    exact = [
        p
        for p in people
        if name == p.identity_id or wanted in {normalize_name(f) for f in (p.name, *p.aliases)}
    ]
    if len(exact) == 1:
        return exact[0], []
    if exact:
        return None, exact
    hints = analyze(name, people=people).people
    by_id = {p.identity_id: p for p in people}
    if len(hints) == 1:
        return by_id[hints[0].identity_id], []
    if not hints:  # a given name several people share names none: they are the candidates
        return None, [p for p in people if normalize_name(p.name).split(" ")[0] == wanted]
    return None, [by_id[h.identity_id] for h in hints]


def person_contexts(
    searcher: Searcher,
    name: str,
    *,
    principal: Principal,
    namespace: str | None = None,
    generation: str | None = None,
    limit: int = 50,
) -> PersonResult:
    """All content about the person ``name`` of the principal's tenant (module docstring).

    Args:
        limit: at most this many records shown (groups first, by date; at least 1); the
            roles and partners are counted over every context, shown or not, and
            ``total_contexts`` is how many there are.

    Raises:
        InvalidQueryError: ``limit`` is below 1.
        The errors of :meth:`Searcher.scope` (unknown namespace, no generation).
    """
    if limit < 1:
        raise InvalidQueryError(f"limit must be at least 1 (got {limit})")
    ns, gen, where_eligible = searcher.scope(principal, namespace, generation)
    corpus = searcher.corpus
    known = tenant_people(corpus, principal, ns)
    listed = tenant_directory(corpus, principal, ns)
    table = corpus.store.searched(gen)
    if table is None:
        return PersonResult(name, None)

    # only a person some unit the principal may see mentions is found (nor offered as a
    # candidate), and only by the names, addresses and numbers the principal may know of them
    # (visible_people): a registry's forms are read from units, so a name or an address alone
    # could tell of a unit the principal may not see; every person the name could mean is
    # checked before one is chosen, so one only hidden units mention never makes it ambiguous
    contact = _contact(name, listed.country_code)
    if contact:  # an e-mail address or a phone number
        person, candidates = _by_contact(corpus, principal, ns, contact, known)
        found = [person] if person is not None else candidates
        checked = visible_of(corpus, table, where_eligible, principal, ns, found)
        shown = {pid: v.shown for pid, v in checked.items()}
        person, candidates = _shown_by_contact(shown, contact)
    else:
        checked = visible_named(corpus, table, where_eligible, principal, ns, name, known)
        person, candidates = find_person([v.shown.person for v in checked.values()], name)
    seen = {pid: v.seen for pid, v in checked.items()}
    if person is None and len(candidates) == 1:
        person, candidates = candidates[0], []
    if person is None:
        return PersonResult(name, None, candidates=candidates)
    visible_units = seen[person.identity_id]
    result = PersonResult(name, person)
    people = People(corpus, principal)
    records: list[ContextRecord] = []
    for collection, visible in visible_units.items():
        records += _contexts(corpus, table, where_eligible, principal, collection, visible, people)
    records.sort(key=lambda r: (not r.is_group, r.date, r.id))
    result.records = records[:limit]
    result.total_contexts = len(records)
    for rank, r in enumerate(result.records, start=1):
        r.rank = rank
    # counted over every context the principal may see: ``limit`` caps what is shown only
    roles: Counter[str] = Counter()
    partners: Counter[tuple[str, str]] = Counter()
    for r in records:
        for p in r.participants:
            if p.identity_id == person.identity_id:
                roles.update(p.roles)
            else:
                partners[(p.identity_id, p.name)] += 1
    result.roles = dict(roles.most_common())
    result.partners = [
        {"identity_id": i, "name": n, "contexts": count}
        for (i, n), count in sorted(partners.items(), key=lambda kv: (-kv[1], kv[0][1]))[
            :TOP_PARTNERS
        ]
    ]
    return result


def _contact(text: str, country_code: str) -> str | None:
    """The normalized e-mail address or phone number ``text`` is, else None (a name)."""
    if "@" in text:
        return normalize_email(text)
    return normalize_phone(text, country_code=country_code)


def _by_contact(
    corpus: Any, principal: Principal, namespace: str, contact: str | None, known: list[Person]
) -> tuple[Person | None, list[Person]]:
    """The person of the tenant whose e-mail address or phone number ``contact`` is (see
    :func:`_contact`; a phone number in any form the people file's numbers are read in:
    ``0412 555 301`` is ``+61412555301`` where the country code is 61), else None with the
    candidates (every person it is an address or number of, when several)."""
    if contact is None:
        return None, []
    ids: set[str] = set()
    for row in tenant_identities(corpus, principal, namespace, ["identity_id", "emails", "phones"]):
        emails = {normalize_email(e) for e in row["emails"] or ()}
        if contact in emails or contact in (row["phones"] or ()):
            ids.add(row["identity_id"])
    found = [p for p in known if p.identity_id in ids]
    return (found[0], []) if len(found) == 1 else (None, found)


def _shown_by_contact(shown: dict[str, Shown], contact: str) -> tuple[Person | None, list[Person]]:
    """:func:`_by_contact` among what the principal may know of each person (``shown``)."""
    found = [v.person for v in shown.values() if contact in v.emails or contact in v.phones]
    return (found[0], []) if len(found) == 1 else (None, found)


def _contexts(
    corpus: Any,
    table: Any,
    where_eligible: str,
    principal: Principal,
    collection: str,
    visible: dict[str, list[dict[str, Any]]],
    people: People,
) -> list[ContextRecord]:
    """The groups of ``collection`` holding the visible units, expanded, and the visible units
    in none of them standing alone."""
    if not visible:
        return []
    members = corpus.warehouse.read(
        "group_members",
        (collection,),
        where=(pc.field("tenant_id") == principal.tenant)
        & pc.field("unit_id").isin(sorted(visible)),
        columns=["group_id"],
    )
    gids = sorted(set(members["group_id"].to_pylist())) if members is not None else []
    group_rows = []
    if gids:
        where = predicates.all_of(
            [
                where_eligible,
                predicates.eq("kind", GROUP_KIND),
                predicates.eq("collection", collection),
                predicates.is_in("doc_id", gids),
            ]
        )
        group_rows = [r for r in read_rows(table, where) if may_see(r, principal)]
    records, _ = expand_groups(corpus, table, where_eligible, principal, group_rows, people)
    shown = {m.unit_id for r in records for m in r.members}
    for unit, rows in sorted(visible.items()):
        if unit not in shown and all(may_see(r, principal) for r in rows):
            records.append(unit_record(rows, people))
    return records
