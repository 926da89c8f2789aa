"""Security properties of search, checked with Hypothesis through real LanceDB tables.

1. Hostile filter values and queries are literals: in every mode a filter on a hostile value
   returns exactly the row holding that value, never an engine error, never an extra row.
2. Over random small corpora, principals, filters and queries, no hit is ever outside the
   principal's tenant and groups (or the namespace's collections), in every mode, with and
   without filters, and with a reranker; dense search (exact, candidates >= rows) returns
   exactly the eligible rows, so the prefilter is neither too loose nor too strict.
3. Over two tenants' generated message streams (the same unit ids and staff names in both,
   some records narrowed to one group), group-first search, unit-only search and person
   queries never show a group, member, participant or snippet outside the principal's tenant
   and groups, in every mode.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from corpus_index.cli import main
from corpus_index.config import Settings
from corpus_index.errors import InvalidFilterError, InvalidQueryError
from corpus_index.filters import Condition, CorpusFilter, Geo, compile_filter, filterable_columns
from corpus_index.group_search import search_contexts, tenant_people
from corpus_index.home import Home
from corpus_index.kinds import excerpt_of
from corpus_index.person_search import person_contexts
from corpus_index.registry import Generation
from corpus_index.search import Principal, Searcher
from tests.searchkit import Doc, build_home, chunk_ref_of, scratch_home, write_generation
from tests.streamgen import STAFF, TOPICS, stream, write_jsonl

TENANTS = {"alpha": ["a1", "a2"], "beta": ["b1"], "gamma": ["g1", "g2"]}
ALL_GROUPS = sorted({g for gs in TENANTS.values() for g in gs} | {"zzz"})
MODES = ["dense", "lexical", "hybrid"]
EVERYTHING: dict[str, Any] = {"k": 1000, "candidates": 1000, "dedupe": False, "per_doc_cap": None}
VOCAB = ["roof", "boiler", "insurance", "premium", "tenant", "lease", "flood", "sponsor", "rent"]
HEALTH = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> tuple[Home, Generation]:
    corpus = scratch_home(tmp_path_factory.mktemp("scratch"), TENANTS)
    gen = corpus.registry.open_generation(corpus.spec("main"))
    return corpus, gen


class ReverseReranker:
    """A deterministic reranker that inverts the order it is given (worst first)."""

    name = "reverse"

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        return [float(i) for i in range(len(texts))]


def search_all_modes(
    searcher: Searcher, gen: Generation, query: str, principal: Principal, filters: Any
) -> dict[str, set[str]]:
    """Hit chunk_refs per mode (and hybrid with a reranker); any error propagates."""
    out: dict[str, set[str]] = {}
    for mode in MODES:
        result = searcher.search(
            query, principal=principal, mode=mode, filters=filters, generation=gen.id, **EVERYTHING
        )
        out[mode] = {h.provenance.chunk_ref for h in result.hits}
        for h in result.hits:  # the hit's own fields agree with the row it came from
            assert h.tenant_id == principal.tenant
    reranked = searcher.search(
        query,
        principal=principal,
        mode="hybrid",
        filters=filters,
        generation=gen.id,
        rerank=ReverseReranker(),
        rerank_depth=1000,
        **EVERYTHING,
    )
    out["hybrid+rerank"] = {h.provenance.chunk_ref for h in reranked.hits}
    return out


# -- 1. hostile values are literals -----------------------------------------------------------


def decoys(value: str) -> list[str]:
    """Values a sloppy quoting would confuse with ``value``."""
    return [
        value + "x",
        "x" + value,
        value.replace("'", ""),
        value.replace("\\", ""),
        value.upper() if value.upper() != value else value + " ",
        "' OR 1=1 --",
        "",
        "%",
        "') OR TRUE --",
    ]


hostile_text = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=60
)
INJECTIONS = [
    "'",
    "''",
    "\\",
    "\\'",
    "' OR 1=1 --",
    "x' OR '1'='1",
    "') OR TRUE --",
    "'; DROP TABLE gen_g0001; --",
    '" OR ""="',
    "%",
    "_",
    "Zürich 東京 🏙",
    "e\u0301 \u200b \u202e",
    "a\nb\r\tc",
    "' OR tenant_id != '",
    "x' OR array_has_any(acl_groups, ['a1']) OR '",
]


@settings(max_examples=30, deadline=None, suppress_health_check=HEALTH)
@given(value=hostile_text)
@example(value="x" * 5000)
@example(value="' OR 1=1 --" * 400)
@example(value="\\" * 2000 + "'")
@example(value="é" * 3000)
def test_hostile_filter_values_are_literals_in_every_mode(
    scratch: tuple[Home, Generation], value: str
) -> None:
    for injection in INJECTIONS:
        check_hostile_value(scratch, injection)
    check_hostile_value(scratch, value)


_checked: set[str] = set()


def check_hostile_value(scratch: tuple[Home, Generation], value: str) -> None:
    if value in _checked:  # the fixed injections are checked once per module
        return
    _checked.add(value)
    corpus, gen = scratch
    names = [value, *(d for d in dict.fromkeys(decoys(value)) if d != value)]
    docs = [
        Doc(
            collection="alpha-deals",
            tenant="alpha",
            acl=("a1",),
            doc_id=f"d{i}",
            deal_id=name,
            metro=name,
            sections=(("risk_assessment", "roof insurance tenant lease"),),
        )
        for i, name in enumerate(names)
    ]
    write_generation(corpus, gen, docs)
    target = {chunk_ref_of(docs[0], "risk_assessment")}
    others = {chunk_ref_of(d, "risk_assessment") for d in docs[1:]}
    searcher = Searcher(corpus)
    principal = Principal("alpha", ("a1",))

    def hits(query: str, filters: Any, mode: str, **kw: Any) -> set[str]:
        result = searcher.search(
            query,
            principal=principal,
            mode=mode,
            filters=filters,
            generation=gen.id,
            **EVERYTHING,
            **kw,
        )
        return {h.provenance.chunk_ref for h in result.hits}

    for mode in MODES:
        assert hits("roof insurance", CorpusFilter(geo=Geo(metro=value)), mode) == target, mode
        assert hits("roof insurance", [Condition("deal_id", "!=", value)], mode) == others, mode
    assert hits("roof", [Condition("metro", "in", (value, "nope"))], "hybrid") == target
    assert hits("roof", [Condition("metro", "not in", (value,))], "dense") == others
    assert hits("roof", {"metro": value, "deal_id": [value]}, "lexical") == target
    reranked = hits(
        "roof",
        [Condition("deal_id", "=", value)],
        "hybrid",
        rerank=ReverseReranker(),
        rerank_depth=99,
    )
    assert reranked == target
    # the same value as the query text: never an error, never another tenant's row
    if value.strip():
        assert hits(value, None, "dense") == target | others
        assert hits(value, None, "hybrid") <= target | others
        assert hits(value, None, "lexical") <= target | others
        outsider = searcher.search(
            value, principal=Principal("beta", ("a1", "b1")), generation=gen.id, **EVERYTHING
        )
        assert outsider.hits == []
    else:
        with pytest.raises(InvalidQueryError):
            searcher.search(value, principal=principal, generation=gen.id)


@pytest.mark.parametrize("value", ["a\x00b", "\x00"])
def test_a_nul_in_a_filter_value_is_a_clean_error(
    scratch: tuple[Home, Generation], value: str
) -> None:
    corpus, gen = scratch
    write_generation(
        corpus,
        gen,
        [Doc("alpha-deals", "alpha", ("a1",), "d0", (("property", "roof"),), metro="x")],
    )
    for mode in MODES:
        with pytest.raises(InvalidFilterError, match="NUL"):
            Searcher(corpus).search(
                "roof",
                principal=Principal("alpha", ("a1",)),
                mode=mode,
                generation=gen.id,
                filters=CorpusFilter(geo=Geo(metro=value)),
            )


@settings(max_examples=100, deadline=None)
@given(key=st.text(max_size=40))
@example(key="tenant_id = 'alpha' OR 1=1 --")
@example(key="acl_groups")
@example(key="vector")
@example(key="units; DROP")
@example(key="deal_date")
@example(key="event_date")
def test_a_filter_key_is_a_known_column_or_an_error(key: str) -> None:
    from corpus_index.index_store import vector_entry_schema
    from corpus_index.registry import GenerationSpec

    spec = GenerationSpec("deals", "main", "hash:v1-8", "v1", 8, True, "default-v1", "sections-v1")
    gen = Generation("g0001", spec, "gen_g0001", "READY", *([None] * 5), 0)  # type: ignore[arg-type]
    columns = filterable_columns(vector_entry_schema(gen))
    if key in columns or key in ("geo.state", "geo.metro", "date"):
        value = {"normalized": "true", "deal_date": "2024-01-31", "event_date": "2024-01-31"}
        assert compile_filter([Condition(key, "=", value.get(key, "1"))], columns)
    else:
        with pytest.raises(InvalidFilterError, match="unknown filter key"):
            compile_filter([Condition(key, "=", "x")], columns)


CLI_VALUES = ["' OR 1=1 --", "x' OR '1'='1", "\\'", "Coeur d'Alene", "') OR TRUE --"]


@pytest.mark.parametrize("value", CLI_VALUES)
def test_cli_filter_values_are_literals(scratch: tuple[Home, Generation], value: str) -> None:
    corpus, gen = scratch
    docs = [
        Doc("alpha-deals", "alpha", ("a1",), "target", (("property", "roof"),), metro=value),
        Doc("alpha-deals", "alpha", ("a1",), "other", (("property", "roof"),), metro="Dallas"),
        Doc("beta-deals", "beta", ("b1",), "beta", (("property", "roof"),), metro=value),
    ]
    write_generation(corpus, gen, docs)
    s = corpus.settings
    for mode in MODES:
        out = CliRunner().invoke(
            main,
            [
                "--config", str(s.config_path), "--home", str(s.home),
                "search", "roof", "--tenant", "alpha", "--group", "a1", "--generation", gen.id,
                "--mode", mode, "--filter", f"metro={value}", "--json", "--no-trace",
            ],
        )  # fmt: skip
        assert out.exit_code == 0, out.output
        import json

        hits = json.loads(out.stdout)["hits"]
        assert [h["source_id"] for h in hits] == ["alpha-deals/target"]


# -- 2. no hit outside the principal's scope ---------------------------------------------------


@st.composite
def corpora(draw: st.DrawFn) -> list[Doc]:
    n = draw(st.integers(1, 12))
    docs = []
    for i in range(n):
        tenant = draw(st.sampled_from(sorted(TENANTS)))
        collection = f"{tenant}-deals"
        if tenant == "alpha":  # rows of a collection in another namespace, or no longer configured
            collection = draw(
                st.sampled_from(["alpha-deals", "alpha-deals", "alpha-other", "ghost"])
            )
        # ACLs may even name another tenant's group: the tenant check must still hold
        acl = tuple(
            draw(st.lists(st.sampled_from(ALL_GROUPS), min_size=0, max_size=3, unique=True))
        )
        sections = tuple(
            (section, " ".join(draw(st.lists(st.sampled_from(VOCAB), min_size=1, max_size=6))))
            for section in draw(
                st.lists(
                    st.sampled_from(["property", "risk_assessment", "market_analysis"]),
                    min_size=1,
                    max_size=3,
                    unique=True,
                )
            )
        )
        docs.append(
            Doc(
                collection=collection,
                tenant=tenant,
                acl=acl,
                doc_id=f"doc{i}",
                sections=sections,
                deal_id=f"DEAL-{i}",
                asset_class=draw(st.sampled_from(["multifamily", "retail", "industrial"])),
                state=draw(st.sampled_from(["AZ", "TX"])),
                metro=draw(st.sampled_from(["Phoenix", "Dallas", "O'Hare"])),
                units=draw(st.integers(1, 400)),
                deal_date=draw(st.sampled_from(["2024-03-01", "2025-06-15", "2026-01-31"])),
            )
        )
    return docs


principals = st.builds(
    Principal,
    tenant=st.sampled_from([*sorted(TENANTS), "nobody", "ALPHA", "alpha "]),
    groups=st.lists(st.sampled_from(ALL_GROUPS), max_size=4, unique=True).map(tuple),
)

Keep = Callable[[Doc, str], bool]
FILTERS: list[tuple[Any, Keep]] = [
    (None, lambda d, s: True),
    (CorpusFilter(asset_class="retail"), lambda d, s: d.asset_class == "retail"),
    (
        CorpusFilter(asset_class=("retail", "industrial"), geo=Geo(state="TX")),
        lambda d, s: d.asset_class in ("retail", "industrial") and d.state == "TX",
    ),
    (CorpusFilter(geo=Geo(metro="O'Hare")), lambda d, s: d.metro == "O'Hare"),
    (CorpusFilter(size_units_range=(50, 250)), lambda d, s: 50 <= (d.units or 0) <= 250),
    (
        CorpusFilter(date_range=("2025-01-01", "2026-12-31")),
        lambda d, s: "2025-01-01" <= (d.deal_date or "") <= "2026-12-31",
    ),
    ([Condition("section", "=", "risk_assessment")], lambda d, s: s == "risk_assessment"),
    ({"deal_id": ["DEAL-0", "DEAL-3"]}, lambda d, s: d.deal_id in ("DEAL-0", "DEAL-3")),
]


def may_see(p: Principal, d: Doc) -> bool:
    return (
        d.tenant == p.tenant
        and bool(set(d.acl) & set(p.groups))
        and d.collection in {f"{t}-deals" for t in TENANTS}
    )


@settings(max_examples=40, deadline=None, suppress_health_check=HEALTH)
@given(
    docs=corpora(),
    principal=principals,
    filter_index=st.integers(0, len(FILTERS) - 1),
    words=st.lists(st.sampled_from(VOCAB), min_size=1, max_size=3),
)
def test_no_hit_is_ever_outside_the_principals_scope(
    scratch: tuple[Home, Generation],
    docs: list[Doc],
    principal: Principal,
    filter_index: int,
    words: list[str],
) -> None:
    corpus, gen = scratch
    write_generation(corpus, gen, docs)
    filters, keep = FILTERS[filter_index]
    query = " ".join(words)
    eligible = {chunk_ref_of(d, s) for d in docs for s, _ in d.sections if may_see(principal, d)}
    matching = {chunk_ref_of(d, s) for d in docs for s, _ in d.sections if keep(d, s)}
    with_words = {
        chunk_ref_of(d, s) for d in docs for s, text in d.sections if set(words) & set(text.split())
    }
    got = search_all_modes(Searcher(corpus), gen, query, principal, filters)
    expected = eligible & matching
    assert got["dense"] == expected  # exact search inside the prefilter: every eligible row
    assert got["lexical"] == expected & with_words  # BM25 matches any query word
    assert got["hybrid"] == got["dense"] | got["lexical"]
    assert got["hybrid+rerank"] == got["hybrid"]


@settings(max_examples=15, deadline=None, suppress_health_check=HEALTH)
@given(docs=corpora(), principal=principals)
def test_truncation_and_caps_never_leak(
    scratch: tuple[Home, Generation], docs: list[Doc], principal: Principal
) -> None:
    """With the default small k, dedupe and per-document cap, hits stay inside the scope too."""
    corpus, gen = scratch
    write_generation(corpus, gen, docs)
    eligible = {chunk_ref_of(d, s) for d in docs for s, _ in d.sections if may_see(principal, d)}
    for mode in MODES:
        for expand in (None, "section"):
            result = Searcher(corpus).search(
                "roof tenant", principal=principal, mode=mode, generation=gen.id, k=3, expand=expand
            )
            assert {h.provenance.chunk_ref for h in result.hits} <= eligible
            for h in result.hits:
                assert {c.chunk_ref for c in h.context} <= eligible


def test_scratch_home_paths_exist(scratch: tuple[Home, Generation]) -> None:
    corpus, _ = scratch
    assert Path(corpus.settings.config_path).is_file()


# -- 3. group-first search and person queries ---------------------------------------------------

STREAM_TENANTS = {"north": ["n1", "n2"], "south": ["s1", "s2"]}
STREAM_PRINCIPALS = st.builds(
    Principal,
    st.sampled_from(["north", "south", "nobody"]),
    st.lists(st.sampled_from(["n1", "n2", "s1", "s2", "zzz"]), max_size=3, unique=True).map(tuple),
)


@pytest.fixture(scope="module")
def streams(tmp_path_factory: pytest.TempPathFactory) -> tuple[Searcher, list[dict[str, Any]]]:
    """Two tenants' generated chat streams with the same unit ids and the same staff names,
    some records narrowed to one ACL group; built once, hash embedder. Returns the searcher
    and every row of the generation (the oracle)."""
    root = tmp_path_factory.mktemp("streams")
    collections = {}
    for i, (tenant, groups) in enumerate(STREAM_TENANTS.items()):
        folder = root / tenant
        folder.mkdir()
        write_jsonl(stream(50, channels=2, seed=i + 1), folder / "chat.jsonl")
        lines = (folder / "chat.jsonl").read_text().splitlines()
        narrowed = [
            json.dumps({**json.loads(line), "acl": [groups[n % 3 % 2]]}) if n % 3 else line
            for n, line in enumerate(lines)
        ]
        (folder / "chat.jsonl").write_text("\n".join(narrowed) + "\n")
        write_records(decided_and_topical(groups), folder / "threads.jsonl")
        collections[f"{tenant}-chat"] = {
            "kind": "messages",
            "path": str(folder),
            "tenant": tenant,
            "acl_groups": groups,
            "namespace": "chat",
        }
    config = {
        "collections": collections,
        "profiles": {"p": {"embedder": "hash:v1-64", "namespace": "chat"}},
        "namespaces": {"chat": {"eval_gate": "off"}},
    }
    (root / "corpus.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    corpus = build_home(Settings(config_path=root / "corpus.yaml", home=root / "home"))
    rows = corpus.store.table(corpus.registry.active("chat")).to_arrow().drop_columns(["vector"])
    # the property below covers every group type, decisions and topics among them, some of
    # them narrowed by a member's ACL
    kinds = {r["source_type"] for r in rows.to_pylist() if r["kind"] == "group"}
    assert {"conversation", "decision_thread", "topic_cluster"} <= kinds
    return Searcher(corpus), rows.to_pylist()


DAY_S = 86_400.0


def decided_and_topical(groups: list[str]) -> list[dict[str, Any]]:
    """A decision thread (its reply narrowed to one ACL group) and one topic over chat, SMS
    and e-mail across three days, as records of the ``messages`` kind; ids ``t<i>``."""
    start = 1.75e9 + 2 * DAY_S
    lines = [
        ("#site-1", "discord_chat", "Leanne W", "Proposal: the van service moves to Fridays", 0),
        ("#site-1", "discord_chat", "Tom H", "Fridays suit me for the van service", 600),
        ("#site-1", "discord_chat", "Leanne W", "Agreed, the van service is on Fridays now", 1200),
        ("#site-0", "discord_chat", "Jane O.", "the kitchen tap washer is leaking again", 3600),
        ("#site-0", "discord_chat", "DanK", "tap washer leaking under the kitchen sink too", 3900),
        ("plumber", "sms_message", "Jane O.", "kitchen tap washer leaking, can you come", DAY_S),
        ("plumber", "sms_message", "Bob", "will fix the kitchen tap washer tomorrow", DAY_S + 600),
        ("tap", "email_thread", "Bob", "Kitchen tap washer replaced, leaking fixed", 2 * DAY_S),
    ]
    out = []
    for i, (channel, source, author, text, at) in enumerate(lines):
        record: dict[str, Any] = {
            "id": f"t{i}",
            "source": source,
            "channel" if source == "discord_chat" else "thread": channel,
            "author": author,
            "timestamp": dt.datetime.fromtimestamp(start + at, dt.UTC).isoformat(),
            "location": "Site 0",
            "text": text,
            "recipients": [],
            "cc": [],
        }
        if i in (1, 2):
            record["reply_to"] = "t0"
        if i == 1:
            record["acl"] = [groups[0]]
        out.append(record)
    return out


def write_records(records: list[dict[str, Any]], path: Path) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def visible(rows: list[dict[str, Any]], p: Principal) -> list[dict[str, Any]]:
    return [r for r in rows if r["tenant_id"] == p.tenant and set(r["acl_groups"]) & set(p.groups)]


def check_records(
    records: list[Any], principal: Principal, rows: list[dict[str, Any]], people: set[str]
) -> None:
    """Every record, member, participant and snippet is inside the principal's scope."""
    seen = visible(rows, principal)
    sources = {r["source_id"] for r in seen}
    texts = {
        r["source_id"]: [excerpt_of(x) for x in seen if x["source_id"] == r["source_id"]]
        for r in seen
    }
    for rec in records:
        assert rec.provenance["source_id"] in sources  # the group (or unit) row itself
        for m in rec.members:
            assert m.source_id in sources
            assert m.text.split("\n") == texts[m.source_id]
        assert {p.identity_id for p in rec.participants} <= people


def tenant_identities(searcher: Searcher, tenant: str) -> set[str]:
    return {p.identity_id for p in tenant_people(searcher.corpus, Principal(tenant), "chat")}


@settings(max_examples=20, deadline=None, suppress_health_check=HEALTH)
@given(
    principal=STREAM_PRINCIPALS,
    words=st.lists(
        st.sampled_from([*STAFF, *" ".join(TOPICS.values()).split()]), min_size=1, max_size=3
    ),
    mode=st.sampled_from(MODES),
    units=st.booleans(),
)
def test_no_group_member_participant_or_snippet_is_outside_the_principals_scope(
    streams: tuple[Searcher, list[dict[str, Any]]],
    principal: Principal,
    words: list[str],
    mode: str,
    units: bool,
) -> None:
    searcher, rows = streams
    people = tenant_identities(searcher, principal.tenant)
    found = search_contexts(
        searcher, " ".join(words), principal=principal, k=8, mode=mode, units=units
    )
    check_records(found.records, principal, rows, people)
    json.dumps(found.to_json())  # serialisable as it is
    if not visible(rows, principal):
        assert found.records == []
    person = person_contexts(searcher, words[0], principal=principal)
    check_records(person.records, principal, rows, people)
    assert {p["identity_id"] for p in person.partners} <= people
    if person.person is not None:
        assert person.person.identity_id in people
