"""Group-first search and person queries over HTTP: a real ``corpus serve`` on loopback over the
bundled messages sample (two tenants, built in-process with the hash embedder). The records are
the library's own; every one stays inside the key's tenant and groups."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from corpus_index.config import Settings
from corpus_index.group_search import search_contexts
from corpus_index.home import Home
from corpus_index.http.audit import AuditResult, ResultAudit
from corpus_index.search import Principal, Searcher
from tests.searchkit import ROOT, build_home, messages_config
from tests.support.http_server import running_server, serve_config

WATTLE, STAFF, BLUEGUM = "ck_wattle", "ck_wattle-staff", "ck_bluegum"
SCRAPER = {"Authorization": "Bearer ck_prometheus"}  # a key that reads /metrics
KEYS = {
    "ck_prometheus": (None, [], ["metrics"]),
    WATTLE: ("wattle", ["wattle-staff", "wattle-managers"]),
    STAFF: ("wattle", ["wattle-staff"]),
    BLUEGUM: ("bluegum", ["bluegum-staff", "bluegum-coordinators"]),
}
QUERY = "What happened with pumpkin at Christmas?"
AS_OF = dt.datetime(2026, 1, 10, tzinfo=dt.UTC)
PROBLEM = "urn:corpus-index:problem:"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, Home]]:
    root = tmp_path_factory.mktemp("contexts")
    settings = Settings(config_path=messages_config(root), home=root / "home")
    corpus = build_home(settings)
    serve_config(settings.config_path, KEYS)
    log = root / "server.log"
    with running_server(settings.config_path, settings.home, log=log) as url:
        client = httpx.Client(base_url=url, timeout=60)
        yield client, corpus
        client.close()


def ask(client: httpx.Client, key: str | None, body: dict[str, Any]) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return client.post("/v1/namespaces/messages/groups/search", json=body, headers=headers)


def units_of(doc: dict[str, Any]) -> list[str]:
    """The source ids of every member of every record of a unified response."""
    return [
        m["source_id"] for records in doc["results"].values() for r in records for m in r["members"]
    ]


def test_group_search_returns_the_librarys_records_for_the_keys_principal(
    served: tuple[httpx.Client, Home],
) -> None:
    client, corpus = served
    body = {"query": QUERY, "k": 3, "as_of": AS_OF.isoformat()}
    response = ask(client, WATTLE, body)
    assert response.status_code == 200, response.text
    doc = response.json()
    here = search_contexts(
        Searcher(corpus),
        QUERY,
        principal=Principal("wattle", ("wattle-staff", "wattle-managers")),
        k=3,
        namespace="messages",
        as_of=AS_OF,
    ).to_json()
    assert doc["results"] == here["results"] and doc["total_hits"] == here["total_hits"] > 0
    assert doc["analysis"] == here["analysis"] and doc["request_id"]
    assert units_of(doc) and all(s.startswith("wattle-messages/") for s in units_of(doc))
    # the other tenant's key asks the same and sees only its own
    other = ask(client, BLUEGUM, body).json()
    assert all(s.startswith("bluegum-messages/") for s in units_of(other))


def test_a_request_narrows_its_groups_and_never_widens_them_or_names_a_tenant(
    served: tuple[httpx.Client, Home],
) -> None:
    client, _ = served
    assert ask(client, WATTLE, {"query": QUERY, "groups": ["wattle-staff"]}).status_code == 200
    widened = ask(client, STAFF, {"query": QUERY, "groups": ["wattle-managers"]})
    assert widened.status_code == 403 and widened.json()["type"] == f"{PROBLEM}forbidden"
    named = ask(client, STAFF, {"query": QUERY, "tenant": "bluegum"})
    assert named.status_code == 403
    assert ask(client, None, {"query": QUERY}).status_code == 401
    big = ask(client, WATTLE, {"query": QUERY, "k": 100_000})
    assert big.status_code == 422 and big.json()["type"] == f"{PROBLEM}limit-exceeded"
    for loose in ({"k": "5"}, {"units": "yes"}, {"units": 1}):  # JSON types, never coerced
        refused = ask(client, WATTLE, {"query": QUERY, **loose})
        assert refused.status_code == 422 and refused.json()["type"] == f"{PROBLEM}validation"


def test_as_of_on_a_unit_search_is_refused_as_the_cli_refuses_it(
    served: tuple[httpx.Client, Home],
) -> None:
    """A unit search reads no time hints, so a reference time for them would change nothing:
    ``corpus search --units --as-of`` exits 2, and the API answers 422 naming both fields."""
    client, _ = served
    body = {"query": QUERY, "as_of": AS_OF.isoformat()}
    assert ask(client, WATTLE, body).status_code == 200
    refused = ask(client, WATTLE, {**body, "units": True})
    assert refused.status_code == 422, refused.text
    problem = refused.json()
    assert problem["type"] == f"{PROBLEM}validation"
    assert "as_of" in problem["detail"] and "units" in problem["detail"]
    assert ask(client, WATTLE, {"query": QUERY, "units": True}).status_code == 200


def test_a_plain_search_reads_a_date_range_as_the_messages_own_dates(
    served: tuple[httpx.Client, Home],
) -> None:
    """A message has no deal_date, the column a date_range filters on a deals namespace: the
    plain search (the browser page's date fields use it) reads the range as each message's or
    group's own days (event_date to event_date_end, matched where they overlap it), as
    group-first search does, rather than matching nothing without a word."""
    client, corpus = served
    window = ("2025-12-20", "2025-12-31")

    def search(filters: dict[str, Any]) -> list[dict[str, Any]]:
        response = client.post(
            "/v1/namespaces/messages/search",
            json={"query": QUERY, "k": 20, "filters": filters},
            headers={"Authorization": f"Bearer {WATTLE}"},
        )
        assert response.status_code == 200, response.text
        hits: list[dict[str, Any]] = response.json()["hits"]
        return hits

    same = search({"event_date": {"<=": window[1]}, "event_date_end": {">=": window[0]}})
    gen = corpus.registry.active("messages")
    assert gen is not None
    rows = corpus.store.table(gen).to_arrow().select(["chunk_ref", "event_date", "event_date_end"])
    days = {r["chunk_ref"]: (r["event_date"], r["event_date_end"]) for r in rows.to_pylist()}
    spans = [days[h["provenance"]["chunk_ref"]] for h in same]
    assert same and all(first <= window[1] and window[0] <= last for first, last in spans)
    for spelling in (
        {"date_range": list(window)},
        {"date": {">=": window[0], "<=": window[1]}},
        {"deal_date": {">=": window[0], "<=": window[1]}},
    ):
        assert search(spelling) == same, spelling
    assert search({"date_range": ["2024-01-01", "2024-01-31"]}) == []  # before any message


def test_everything_about_a_person_stays_in_the_keys_tenant(
    served: tuple[httpx.Client, Home],
) -> None:
    client, _ = served

    def person(name: str, key: str, **params: Any) -> httpx.Response:
        return client.get(
            f"/v1/namespaces/messages/people/{name}",
            headers={"Authorization": f"Bearer {key}"},
            params=params,
        )

    listed = client.get("/v1/namespaces", headers={"Authorization": f"Bearer {WATTLE}"})
    assert listed.json() == [
        {"name": "messages", "active_generation": "g0001", "linked_groups": True}
    ]
    found = person("Jane Okafor", WATTLE)
    assert found.status_code == 200, found.text
    doc = found.json()
    assert doc["person"]["name"] == "Jane Okafor" and doc["total_hits"] > 0
    assert doc["total_contexts"] == doc["total_hits"] > 1
    # a limit cuts what is shown, not the count of what there is
    cut = person("Jane Okafor", WATTLE, limit=1).json()
    assert cut["total_hits"] == len(cut["records"]) == 1
    assert cut["total_contexts"] == doc["total_contexts"]
    assert all(
        m["source_id"].startswith("wattle-messages/") for r in doc["records"] for m in r["members"]
    )
    # another tenant's key does not know her; a tenant in the query is refused
    missing = person("Jane Okafor", BLUEGUM)
    assert missing.status_code == 404 and missing.json()["type"] == f"{PROBLEM}not-found"
    assert person("Jane Okafor", STAFF, tenant="wattle").status_code == 403
    assert person("Jane Okafor", STAFF, groups=["wattle-managers"]).status_code == 403
    unknown = client.post(
        "/v1/namespaces/nowhere/groups/search",
        json={"query": QUERY},
        headers={"Authorization": f"Bearer {WATTLE}"},
    )
    assert unknown.status_code == 404


def test_every_row_a_context_answer_shows_is_audited_after_the_response(
    served: tuple[httpx.Client, Home],
) -> None:
    client, _ = served

    def audited() -> float:
        text = client.get("/metrics", headers=SCRAPER).text
        series = 'corpus_audited_results_total{namespace="messages"}'
        return next(
            (
                float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith(series)
            ),
            0.0,
        )

    # the earlier tests' answers are audited after their responses too: wait until those
    # audits have landed, or under load they land after this reading and count as this test's
    before = audited()
    for _ in range(100):
        time.sleep(0.5)
        if audited() == before:
            break
        before = audited()
    doc = ask(client, WATTLE, {"query": "roast pumpkin for christmas lunch", "k": 3}).json()
    shown = sum(
        1 + sum(len(m["chunk_refs"]) for m in r["members"])
        for records in doc["results"].values()
        for r in records
    )
    assert shown > 3
    headers = {"Authorization": f"Bearer {WATTLE}"}
    person = client.get("/v1/namespaces/messages/people/Jane Okafor", headers=headers).json()
    shown += sum(1 + sum(len(m["chunk_refs"]) for m in r["members"]) for r in person["records"])
    for _ in range(100):  # the server audits after responding
        if audited() >= before + shown:
            break
        time.sleep(0.2)
    assert audited() == before + shown
    text = client.get("/metrics", headers=SCRAPER).text
    assert 'corpus_unauthorized_results_total{namespace="messages"} 0.0' in text
    assert 'corpus_stale_results_total{namespace="messages",reason="deleted"} 0.0' in text


def test_the_audit_counts_each_row_the_principal_may_not_see(
    served: tuple[httpx.Client, Home],
) -> None:
    _, corpus = served
    gen = corpus.registry.active("messages")
    assert gen is not None
    rows = corpus.store.table(gen).to_arrow().select(["chunk_ref", "source_id", "acl_groups"])
    staff = Principal("wattle", ("wattle-staff",))
    seen = [
        (r["chunk_ref"], r["source_id"])
        for r in rows.to_pylist()
        if r["source_id"].startswith("wattle-") and "wattle-staff" in r["acl_groups"]
    ]
    hidden = [
        (r["chunk_ref"], r["source_id"])
        for r in rows.to_pylist()
        if r["source_id"].startswith("wattle-") and "wattle-staff" not in r["acl_groups"]
    ]
    assert seen and hidden
    audit = ResultAudit(corpus)
    assert audit.check_rows(seen[:5], staff, gen) == AuditResult()
    assert audit.check_rows(seen[:5] + hidden[:2], staff, gen).unauthorized == 2
    other = Principal("bluegum", ("bluegum-staff",))
    assert audit.check_rows(seen[:5], other, gen).unauthorized == 5


PROVENANCE = ("source_version", "content_hash", "input_format", "backend_spec", "generation")


def cli(corpus: Home, *args: str) -> str:
    """``corpus ARGS`` as a user runs it, in a process of its own: what it prints."""
    paths = ["--config", str(corpus.settings.config_path), "--home", str(corpus.settings.home)]
    done = subprocess.run(  # noqa: S603 - fixed arguments
        [sys.executable, "-m", "corpus_index.cli", *paths, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def cli_search(corpus: Home, query: str, tenant: str, *groups: str) -> dict[str, Any]:
    """``corpus search --json`` as a user runs it."""
    who = [x for g in groups for x in ("--group", g)]
    as_of = AS_OF.date().isoformat()
    out = cli(corpus, "search", query, "--tenant", tenant, *who, "--as-of", as_of, "--json")
    doc: dict[str, Any] = json.loads(out)
    return doc


def test_every_member_shown_carries_its_rows_provenance_the_same_over_http_and_the_cli(
    served: tuple[httpx.Client, Home],
) -> None:
    """Each member of a group (and a unit standing alone) carries, per chunk, the provenance a
    unit search's hit carries, read from the generation row it was shown from; the CLI prints
    the same records; no member row is one the key may not see."""
    client, corpus = served
    gen = corpus.registry.active("messages")
    assert gen is not None
    rows = {r["chunk_ref"]: r for r in corpus.store.table(gen).to_arrow().to_pylist()}
    body = {"query": QUERY, "k": 5, "as_of": AS_OF.isoformat()}
    for key, tenant, groups in (
        (WATTLE, "wattle", ("wattle-staff", "wattle-managers")),
        (STAFF, "wattle", ("wattle-staff",)),
    ):
        response = ask(client, key, body)
        assert response.status_code == 200, response.text
        doc = response.json()
        person = client.get(
            "/v1/namespaces/messages/people/Jane Okafor",
            headers={"Authorization": f"Bearer {key}"},
        ).json()
        records = [r for rs in doc["results"].values() for r in rs] + person["records"]
        members = [m for r in records for m in r["members"]]
        assert any(r["provenance"].get("group_id") for r in records) and members
        for m in members:
            assert [p["chunk_ref"] for p in m["provenance"]] == m["chunk_refs"], m
            for p in m["provenance"]:
                row = rows[p["chunk_ref"]]
                assert {k: p[k] for k in PROVENANCE} == {k: row[k] for k in PROVENANCE}, p
                assert p["run_id"] == row["run_id"] and p["generation"] == gen.id
                assert row["source_id"] == m["source_id"] and row["tenant_id"] == tenant
                assert set(row["acl_groups"]) & set(groups), (key, p["chunk_ref"])
        printed = cli_search(corpus, QUERY, tenant, *groups)
        assert printed["results"] == doc["results"]


def test_the_clis_records_show_each_members_provenance_as_its_hits_show_theirs(
    served: tuple[httpx.Client, Home],
) -> None:
    """``corpus search`` and ``corpus person`` without ``--json`` print, under each member,
    one line per chunk: its chunk_ref, content hash, backend and run, as a unit hit's line."""
    client, corpus = served
    doc = ask(client, STAFF, {"query": QUERY, "k": 3, "as_of": AS_OF.isoformat()}).json()
    who = ["--tenant", "wattle", "--group", "wattle-staff"]
    printed = cli(corpus, "search", QUERY, *who, "--as-of", AS_OF.date().isoformat())
    person = cli(corpus, "person", "Jane Okafor", *who)
    headers = {"Authorization": f"Bearer {STAFF}"}
    about = client.get("/v1/namespaces/messages/people/Jane Okafor", headers=headers).json()
    for records, text in (
        ([r for rs in doc["results"].values() for r in rs], printed),
        (about["records"], person),
    ):
        lines = text.splitlines()
        shown = [p for r in records for m in r["members"] for p in m["provenance"]]
        assert shown
        for p in shown:
            line = (
                f"        {p['chunk_ref']}  {p['content_hash'][:19]}…  {p['backend_spec']}  "
                f"run {p['run_id'][:8]}"
            )
            assert line in lines, (line, text)
        for r in records:
            assert any(r["provenance"]["chunk_ref"] in x and "generation" in x for x in lines)
