"""Group-first search over a messages namespace (seed "Linked Context V2" §6.1, §6.2; DESIGN §10b).

1. The query is analysed (:mod:`corpus_index.query_analysis`): time hints against ``as_of``,
   people in the asking tenant's registry only, topics.
2. The group rows of the generation (``kind: group``) are searched with the same search as
   units (:meth:`Searcher.search`: the eligibility prefilter with the user's filters, a deal's
   date read on the rows' own days, a group's span from ``event_date`` to ``event_date_end``
   (:func:`~corpus_index.filters.compile_filter`),
   dense and lexical fused) and then boosted: a group whose dates overlap a time hint, which
   anchors a person the query names, or whose topic tags hold a query word, moves up. Dates
   boost and never filter: the talk about Christmas happens in the weeks before it, and a
   misread date must not hide the conversation asked for.
3. The group rows and their members' rows are read in one go, by ``doc_id`` (which has a
   scalar index: :func:`corpus_index.context_records.read_groups`), and each group is expanded
   (:func:`corpus_index.context_records.expand_groups`): members in order with their text,
   participants with their roles, place, dates, source refs; a group with a member the
   principal may not see is dropped whole.
4. With fewer than ``min_groups`` groups, units are searched directly and appended below the
   groups as contexts of their own (units already shown inside a group are not repeated).
5. Records in the seed's rich shape, and the §6.2 response grouped by category with
   ``total_hits``. ``units=True`` is unit-only search in the same shape.

The functions take a principal and a query and return JSON-serialisable records: what a CLI,
the Python API or an HTTP layer shows as it is.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import pyarrow.compute as pc

from corpus_index import predicates, retrieval
from corpus_index.context_records import (
    ContextRecord,
    People,
    expand_groups,
    grouped_json,
    may_see,
    metadata_of,
    read_groups,
    read_rows,
    unit_of,
    unit_record,
    unit_rows,
)
from corpus_index.eligibility import Principal
from corpus_index.errors import InvalidQueryError
from corpus_index.filters import Condition, FilterSpec, as_filter
from corpus_index.group_records import GROUP_KIND
from corpus_index.hits import Hit
from corpus_index.home import Home
from corpus_index.identity_store import IDENTITIES, MENTIONS
from corpus_index.kinds import kind_of
from corpus_index.query_analysis import Person, QueryAnalysis, analyze, named_candidates
from corpus_index.search import Searcher, Stopwatch
from corpus_index.visible_people import Directory, Shown, directory, shown

MIN_GROUPS = 3  # fewer groups than this: units are searched too (seed §6.1 step 4)
DATE_BOOST = 0.15  # a group's dates overlap a time hint of the query
PERSON_BOOST = 0.15  # a group anchors a person the query names
TOPIC_BOOST = 0.1  # a group's topic tags hold a word of the query
DAY = "daily_context"
TOPIC = "topic_cluster"
DECISION = "decision_thread"
CONVERSATION = "conversation"
# a day at a place holds everything of that day, a topic cluster every thread on its topic: a
# conversation, question or incident that matches as well is the more precise context, so
# days and topics rank below it
DAY_PENALTY = 0.1
BROAD = frozenset({DAY, TOPIC})
# a query that asks what was decided ("what did we decide", "was it approved", "is he allowed")
# wants the decision thread, otherwise the conversation it is part of
DECISION_BOOST = 0.15
_ASKS_DECISION = re.compile(
    r"\b(?:(?:un)?decid\w*|decision\w*|agree\w*|approv\w*|allowed|cho(?:se|sen|ose)"
    r"|settled|go\s+ahead|sign(?:ed)?\s+off)\b",
    re.IGNORECASE,
)


@dataclass(slots=True)
class ContextResult:
    """Records in rank order (groups first), the query's analysis and the trace."""

    query: str
    analysis: QueryAnalysis
    records: list[ContextRecord]
    trace: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        """The §6.2 unified response: results by category, each record with its rank."""
        return {
            "query": self.query,
            "analysis": self.analysis.to_json(),
            "results": grouped_json(self.records),
            "total_hits": len(self.records),
            "trace": self.trace,
        }


def tenant_collections(home: Home, principal: Principal, namespace: str) -> list[str]:
    """The names of ``namespace``'s collections of the principal's tenant."""
    return [c.name for c in home.config.collections_in(namespace) if c.tenant == principal.tenant]


def tenant_identities(
    home: Home, principal: Principal, namespace: str, columns: Sequence[str]
) -> Iterator[dict[str, Any]]:
    """The ``columns`` of each identity row of the principal's tenant in ``namespace``'s
    collections (a person seen in two collections has a row in each)."""
    for name in tenant_collections(home, principal, namespace):
        table = home.warehouse.read_cached(
            IDENTITIES,
            (name,),
            where=pc.field("tenant_id") == principal.tenant,
            columns=["tenant_id", *columns],
        )
        yield from table.to_pylist() if table is not None else []


def tenant_people(home: Home, principal: Principal, namespace: str) -> list[Person]:
    """The identities of the principal's tenant in ``namespace``'s collections (names and
    aliases): the only people its queries can name."""
    found: dict[str, Person] = {}
    for row in tenant_identities(home, principal, namespace, ["identity_id", "name", "aliases"]):
        seen = found.get(row["identity_id"])
        aliases = tuple(dict.fromkeys([*(seen.aliases if seen else ()), *row["aliases"]]))
        found[row["identity_id"]] = Person(row["identity_id"], row["name"], aliases)
    return list(found.values())


def seen_units(
    corpus: Any,
    table: Any,
    where_eligible: str,
    principal: Principal,
    namespace: str,
    person: Person,
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Collection -> the visible rows of each unit mentioning ``person`` (a unit the
    principal may not see has none), over the tenant's collections of ``namespace``."""
    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for name in tenant_collections(corpus, principal, namespace):
        mentions = corpus.warehouse.read(
            MENTIONS,
            (name,),
            where=(pc.field("tenant_id") == principal.tenant)
            & (pc.field("identity_id") == person.identity_id),
            columns=["unit_id"],
        )
        units = set(mentions["unit_id"].to_pylist()) if mentions is not None else set()
        out[name] = unit_rows(table, where_eligible, name, units)
    return out


def visible_analysis(
    corpus: Home,
    table: Any,
    where_eligible: str,
    principal: Principal,
    namespace: str,
    query: str,
    as_of: dt.datetime | None,
) -> QueryAnalysis:
    """The analysis of ``query`` among only the people some unit the principal may see
    mentions, each by only the forms it may know (:func:`visible_named`): a registry's names
    are read from units, so naming (or leaving out of the topics) a person only hidden units
    mention, finding one by a name only hidden units use, or finding none because a hidden
    person shares the name, would tell of them."""
    people = visible_named(corpus, table, where_eligible, principal, namespace, query)
    return analyze(query, as_of=as_of, people=[v.shown.person for v in people.values()])


class Visible(NamedTuple):
    """A person as the principal may know them, and the units it sees mention them."""

    shown: Shown
    seen: dict[str, dict[str, list[dict[str, Any]]]]  # :func:`seen_units`


def visible_named(
    corpus: Home,
    table: Any,
    where_eligible: str,
    principal: Principal,
    namespace: str,
    text: str,
    known: Sequence[Person] | None = None,
) -> dict[str, Visible]:
    """Identity id -> what the principal may know of each person of its tenant that ``text``
    could name (:func:`~corpus_index.query_analysis.named_candidates` among ``known``, by
    default :func:`tenant_people`) and that some unit the principal may see mentions
    (:func:`shown_contacts`), with those units. Every candidate is checked before any is
    chosen, so a person only hidden units mention never makes a name ambiguous."""
    if known is None:
        known = tenant_people(corpus, principal, namespace)
    people = named_candidates(text, known)
    return visible_of(corpus, table, where_eligible, principal, namespace, people)


def visible_of(
    corpus: Home,
    table: Any,
    where_eligible: str,
    principal: Principal,
    namespace: str,
    people: Sequence[Person],
) -> dict[str, Visible]:
    """Identity id -> each of ``people`` that some unit the principal may see mentions, as
    the principal may know them (:func:`shown_contacts`), with those units."""
    listed = tenant_directory(corpus, principal, namespace)
    out: dict[str, Visible] = {}
    for person in people:
        seen = (
            seen_units(corpus, table, where_eligible, principal, namespace, person)
            if table is not None
            else {}
        )
        if any(seen.values()):
            shown = shown_contacts(corpus, principal, namespace, person, seen, listed)
            out[person.identity_id] = Visible(shown, seen)
    return out


def tenant_directory(home: Home, principal: Principal, namespace: str) -> Directory:
    """The forms the people files of the principal's tenant list (its collections of
    ``namespace`` that name one)."""
    files = [
        (c.people, c.limits)
        for c in home.config.collections_in(namespace)
        if c.tenant == principal.tenant and c.people is not None
    ]
    return directory(files, principal.tenant)


def shown_contacts(
    corpus: Home,
    principal: Principal,
    namespace: str,
    person: Person,
    seen: dict[str, dict[str, list[dict[str, Any]]]],
    listed: Directory,
) -> Shown:
    """``person`` as the principal may know them: the forms of its registry rows that the
    tenant's people files list or its mentions in the units the principal sees show (``seen``:
    :func:`seen_units` of the person)."""
    emails: list[str] = []
    phones: list[str] = []
    for row in tenant_identities(corpus, principal, namespace, ["identity_id", "emails", "phones"]):
        if row["identity_id"] == person.identity_id:
            emails += row["emails"] or ()
            phones += row["phones"] or ()
    snippets: list[str] = []
    for name, units in seen.items():
        if not units:
            continue
        mentions = corpus.warehouse.read(
            MENTIONS,
            (name,),
            where=(pc.field("tenant_id") == principal.tenant)
            & (pc.field("identity_id") == person.identity_id)
            & pc.field("unit_id").isin(sorted(units)),
            columns=["context_snippet"],
        )
        if mentions is not None:
            snippets += [str(s) for s in mentions["context_snippet"].to_pylist() if s]
    return shown(person, emails, phones, snippets, listed)


def grouped_namespace(home: Home, namespace: str) -> bool:
    """Whether ``namespace`` holds a collection whose units are grouped (``messages``)."""
    return any(kind_of(c).grouped for c in home.config.collections_in(namespace))


def search_contexts(
    searcher: Searcher,
    query: str,
    *,
    principal: Principal,
    k: int = 5,
    namespace: str | None = None,
    generation: str | None = None,
    as_of: dt.datetime | None = None,
    mode: str = "hybrid",
    filters: FilterSpec = None,
    units: bool = False,
    min_groups: int = MIN_GROUPS,
) -> ContextResult:
    """Whole contexts for ``query``: groups first, expanded, then units (module docstring).

    Args:
        searcher: the searcher of the home.
        query: the query text.
        principal: who asks; nothing outside their tenant and ACL groups is read or shown.
        k: how many records (1 to ``retrieval.MAX_K``).
        namespace: the namespace (default: the principal's tenant's).
        generation: a generation id instead of the namespace's ACTIVE one.
        as_of: the reference time of the query's time hints (default now).
        mode: ``dense``, ``lexical`` or ``hybrid``.
        filters: the user's filters, as for :meth:`Searcher.search`.
        units: unit-only search (no groups), in the same record shape.
        min_groups: fewer groups than this and units are appended below them.

    Raises:
        InvalidQueryError: an empty query, or ``k`` out of range.
        The errors of :meth:`Searcher.search` (bad options, unknown namespace, no generation).
    """
    clock = Stopwatch()
    if not isinstance(query, str) or not query.strip():
        raise InvalidQueryError("the query is empty: give some text")
    retrieval.check_query_text(query)
    if not 1 <= k <= retrieval.MAX_K:
        raise InvalidQueryError(f"k must be between 1 and {retrieval.MAX_K:,} (got {k})")
    ns, gen, where_eligible = searcher.scope(principal, namespace, generation)
    filters = as_filter(filters)  # a malformed filter fails before any work
    corpus = searcher.corpus
    table = corpus.store.searched(gen)
    analysis = visible_analysis(corpus, table, where_eligible, principal, ns, query, as_of)
    people = People(corpus, principal)
    trace: dict[str, Any] = {"namespace": ns, "generation": gen.id, "mode": mode, "k": k}
    trace["units_only"] = units
    clock.lap("analysis")
    options: dict[str, Any] = {
        "principal": principal,
        "namespace": ns,
        "generation": gen.id,
        "mode": mode,
        # the query is embedded once, for both searches (groups, then units)
        "vector": searcher.query_vector(query, None, gen, mode),
    }
    clock.lap("embedding")
    records: list[ContextRecord] = []
    if not units and table is not None:
        group_filter = as_filter(filters).with_conditions(Condition("kind", "=", GROUP_KIND))
        depth = min(max(2 * k, 10), retrieval.MAX_K)
        found = searcher.search(query, k=depth, filters=group_filter, per_doc_cap=None, **options)
        clock.lap("groups")
        # the group rows (with their §3.1 metadata) and their members' rows, in one read
        wanted = [(h.collection, h.doc_id) for h in found.hits]
        reads = read_groups(corpus, table, where_eligible, principal, wanted)
        rows = [reads.groups[w] for w in dict.fromkeys(wanted) if w in reads.groups]
        decision = asks_decision(query)
        ranked = _boosted(rows, found.hits, analysis, decision=decision)
        expanded, dropped = expand_groups(
            corpus, table, where_eligible, principal, [r for r, _ in ranked], people, reads=reads
        )
        why = {str(r["doc_id"]): w for r, w in ranked}
        for rec in expanded:
            rec.why = why[rec.id]
            rec.relevance = float(rec.why["relevance"])
        records = collapse(expanded, decisions=decision)[:k]
        trace["groups"] = {"candidates": len(found.hits), "dropped_not_visible": len(dropped)}
        clock.lap("expand")
    if table is not None and (units or len(records) < min_groups):
        records += _units(
            searcher, query, table, where_eligible, records, k, filters, options, people
        )
        clock.lap("units")
    for rank, rec in enumerate(records, start=1):
        rec.rank = rank
    trace["returned"] = {
        "groups": sum(r.is_group for r in records),
        "units": sum(not r.is_group for r in records),
    }
    trace.update(clock.times())
    return ContextResult(query, analysis, records, trace)


def asks_decision(query: str) -> bool:
    """Whether ``query`` asks what was decided (its words: decide, agreed, approved, allowed,
    chose, go ahead, ...)."""
    return bool(_ASKS_DECISION.search(query))


def collapse(records: list[ContextRecord], *, decisions: bool = False) -> list[ContextRecord]:
    """Whole contexts, not fragments: a group whose members all show in a group ranked above
    it is left out, and a group holding all of a higher group's members takes that group's
    place (a question with its answer inside the conversation it belongs to); of two groups
    of the very same members, the conversation is kept wherever either ranks (the list does
    not change with what else a filter lets through). A day at a
    place and a topic cluster hold whole threads, so they neither hide nor replace anything;
    a topic cluster more than half of whose members already show above it is left out (it
    would repeat them).

    A decision thread is the part of a conversation up to its decision, and is collapsed like
    any part unless the query asks what was decided (``decisions``): then it neither hides nor
    is replaced by a conversation or question, and takes the place of one of the very same
    members (it says what was decided)."""
    out: list[ContextRecord] = []

    def members(r: ContextRecord) -> set[str]:
        return {m.unit_id for m in r.members}

    for rec in records:
        mine = members(rec)
        if rec.type == TOPIC:
            shown = set().union(*(members(r) for r in out))
            if 2 * len(mine & shown) <= len(mine):
                out.append(rec)
            continue
        if rec.type in BROAD:
            out.append(rec)
            continue
        if decisions:
            same = [i for i, r in enumerate(out) if r.type not in BROAD and members(r) == mine]
            if same:
                if rec.type == DECISION and out[same[0]].type != DECISION:
                    out[same[0]] = rec
                continue
            if rec.type == DECISION:
                out.append(rec)
                continue
        apart = BROAD | ({DECISION} if decisions else set())
        peers = [i for i, r in enumerate(out) if r.type not in apart]
        if any(mine <= members(out[i]) for i in peers):
            same = [i for i in peers if members(out[i]) == mine]
            if rec.type == CONVERSATION and same and out[same[0]].type != CONVERSATION:
                out[same[0]] = rec
            continue
        inside = [i for i in peers if members(out[i]) < mine]
        if inside:
            out[inside[0]] = rec
            out = [r for i, r in enumerate(out) if i not in inside[1:]]
        else:
            out.append(rec)
    return out


def _boosted(
    rows: list[dict[str, Any]], hits: list[Hit], analysis: QueryAnalysis, *, decision: bool
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Group rows re-ranked by their search score (scaled to the best) plus the boosts of the
    query's time hints, people and topic words (and, for a query asking what was decided
    (``decision``), of decision threads); each with the reasons."""
    score = {h.source_id: h.score for h in hits}
    top = max((score[r["source_id"]] for r in rows), default=0.0) or 1.0
    words = set(analysis.topics) | {w.casefold() for t in analysis.times for w in t.text.split()}
    wanted_people = {p.identity_id for p in analysis.people}
    out = []
    for row in rows:
        meta = metadata_of(row)
        first = _date(meta.get("event_date") or row.get("event_date"))
        last = _date(meta.get("event_date_end")) or first
        why: dict[str, Any] = {"search": round(score[row["source_id"]] / top, 6)}
        if any(t.overlaps(first, last) for t in analysis.times):
            why["date"] = DATE_BOOST
        if wanted_people & set(meta.get("identity_anchors") or ()):
            why["person"] = PERSON_BOOST
        tags = {w for tag in meta.get("topic_tags") or () for w in str(tag).split("_")}
        if words & tags:
            why["topic"] = TOPIC_BOOST
        if meta.get("group_type") == DAY:
            why["day"] = -DAY_PENALTY
        elif meta.get("group_type") == TOPIC:
            why["cluster"] = -DAY_PENALTY
        elif decision and meta.get("group_type") == DECISION:
            why["decision"] = DECISION_BOOST
        why["relevance"] = round(sum(v for v in why.values()), 6)
        out.append((row, why))
    out.sort(key=lambda rw: -float(rw[1]["relevance"]))  # stable: ties keep the search order
    return out


def _date(value: Any) -> dt.date | None:
    try:
        return dt.date.fromisoformat(str(value)[:10]) if value else None
    except ValueError:
        return None


def _units(
    searcher: Searcher,
    query: str,
    table: Any,
    where_eligible: str,
    shown: list[ContextRecord],
    k: int,
    filters: FilterSpec,
    options: dict[str, Any],
    people: People,
) -> list[ContextRecord]:
    """Units found directly, as records of their own, below the groups (none already shown)."""
    seen = {m.source_id for r in shown for m in r.members}
    need = k - len(shown)
    if need < 1:
        return []
    unit_filter = as_filter(filters).with_conditions(Condition("kind", "!=", GROUP_KIND))
    depth = min(need + len(seen), retrieval.MAX_K)
    found = searcher.search(query, k=depth, filters=unit_filter, **options)
    sources = [h.source_id for h in found.hits if h.source_id not in seen]
    sources = list(dict.fromkeys(sources))[:need]
    if not sources:
        return []
    wanted = set(sources)
    picked = [h for h in found.hits if h.source_id in wanted]
    # read by ``doc_id`` (it has a scalar index), then kept by source
    where = predicates.all_of(
        [
            where_eligible,
            predicates.compare("kind", "!=", GROUP_KIND),
            predicates.is_in("collection", sorted({h.collection for h in picked})),
            predicates.is_in("doc_id", sorted({h.doc_id for h in picked})),
        ]
    )
    rows: dict[str, list[dict[str, Any]]] = {}
    for row in read_rows(table, where):
        if row["source_id"] not in wanted:
            continue
        if may_see(row, options["principal"]):  # the rule checked again on what was read
            rows.setdefault(row["source_id"], []).append(row)
    score: dict[str, float] = {}
    for h in found.hits:
        score.setdefault(h.source_id, h.score)
    top = max(score.values(), default=0.0) or 1.0
    said: dict[tuple[str, str], list[dict[str, Any]]] = {}
    by_collection: dict[str, set[str]] = {}
    for found_rows in rows.values():
        by_collection.setdefault(found_rows[0]["collection"], set()).add(unit_of(found_rows[0]))
    for collection, unit_ids in by_collection.items():
        for m in people.mentions(collection, unit_ids):
            said.setdefault((collection, m["unit_id"]), []).append(m)
    out = []
    for source in sources:
        if source not in rows:
            continue
        first = rows[source][0]
        mine = said.get((first["collection"], unit_of(first)), [])
        rec = unit_record(sorted(rows[source], key=lambda r: str(r["block_key"])), people, mine)
        rec.relevance = round(score[source] / top, 6)
        rec.why = {"search": rec.relevance, "relevance": rec.relevance}
        out.append(rec)
    return out
