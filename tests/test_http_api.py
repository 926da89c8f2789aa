"""``corpus serve`` over HTTP: a real server on a loopback port (one for the module), a home
built in-process with the hash embedder and two profiles (two generations of ``deals``).

The served configuration differs from the one the home was built with in two ways: profile
``alt`` names another model than its generation was built with (so that generation no longer
takes its sources' edits and is not searched, 409), and a collection in namespace ``later`` has no generation yet
(503). The last test promotes ``alt`` between two pages of a search.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from corpus_index import lifecycle, steps
from corpus_index.config import Settings
from corpus_index.home import Home
from corpus_index.http.audit import ResultAudit
from corpus_index.registry import open_registry
from corpus_index.search import Principal, Searcher
from corpus_index.traces import TraceStore
from tests.corpusgen import write_home
from tests.searchkit import build_home
from tests.support.http_server import running_server, serve_config, write_keys

ALPHA, BETA, NARROW = "ck_alpha-key", "ck_beta-key", "ck_alpha-credit-only"
GAMMA = "ck_gamma-key"
# a key that reads /metrics alone (no tenant), and one that both searches and reads them
METRICS, BOTH = "ck_prometheus", "ck_alpha-operator"
KEYS = {
    ALPHA: ("alpha", ["alpha-uw", "alpha-credit"]),
    BETA: ("beta", ["beta-team"]),
    NARROW: ("alpha", ["alpha-credit"]),
    GAMMA: ("gamma", ["beta-team"]),
    METRICS: (None, [], ["metrics"]),
    BOTH: ("alpha", ["alpha-uw"], ["search", "metrics"]),
}
PROBLEM = "urn:corpus-index:problem:"


class Served:
    def __init__(self, url: str, root: Path, build: Settings, gens: dict[str, str]) -> None:
        self.url, self.root, self.build, self.gens = url, root, build, gens
        self.client = httpx.Client(base_url=url, timeout=60)

    def post(self, path: str, body: dict[str, Any], key: str | None = ALPHA) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return self.client.post(path, json=body, headers=headers)

    def get(self, path: str, key: str | None = ALPHA, **params: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return self.client.get(path, headers=headers, params=params)

    def search(self, body: dict[str, Any], key: str | None = ALPHA) -> httpx.Response:
        return self.post("/v1/namespaces/deals/search", body, key)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("serve")
    config = write_home(
        root, extra_profiles={"alt": {"embedder": "hash:v1-32", "namespace": "deals"}}
    )
    build = Settings(config_path=root / "build.yaml", home=root / "home")
    shutil.copy(config, build.config_path)
    corpus = build_home(build, promote=False)
    steps.sidecars.run(corpus, "main", "alpha-deals")
    gens = {g.spec.profile: g.id for g in corpus.registry.generations(namespace="deals")}
    lifecycle.promote(corpus, "deals", gens["main"])
    doc = yaml.safe_load(config.read_text())
    doc["profiles"]["alt"]["embedder"] = "hash:v1-48"  # not the model its generation used
    doc["collections"]["gamma-deals"] = {
        **doc["collections"]["beta-deals"],
        "tenant": "gamma",
        "namespace": "later",
    }
    config.write_text(yaml.safe_dump(doc, sort_keys=False))
    serve_config(config, KEYS, max_k=50, max_filter_conditions=4)
    with running_server(config, build.home, log=root / "server.log") as url:
        s = Served(url, root, build, gens)
        yield s
        s.client.close()


def problem(resp: httpx.Response, status: int, slug: str) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    doc: dict[str, Any] = resp.json()
    assert doc["type"] == PROBLEM + slug and doc["status"] == status
    assert doc["detail"] and doc["request_id"] == resp.headers["x-request-id"]
    return doc


def test_health_and_readiness(served: Served) -> None:
    assert served.get("/v1/health", key=None).json() == {"status": "ok"}
    doc = problem(served.get("/v1/ready", key=None), 503, "no-active-generation")
    assert doc["namespaces"] == {"deals": served.gens["main"], "later": None}
    assert doc["retryable"] is True and "later" in doc["detail"]


def test_missing_and_wrong_keys_are_401(served: Served) -> None:
    doc = problem(served.search({"query": "roof"}, key=None), 401, "unauthorized")
    assert "no API key" in doc["detail"]
    problem(served.search({"query": "roof"}, key="ck_not-a-key"), 401, "unauthorized")
    problem(served.get("/v1/namespaces/deals/generations", key="ck_nope"), 401, "unauthorized")


def test_a_revoked_key_stops_working_at_once(served: Served) -> None:
    keys = served.root / "keys.yaml"
    temp = "ck_temporary"
    write_keys(keys, {**KEYS, temp: ("alpha", ["alpha-uw"])})
    assert served.search({"query": "roof"}, key=temp).status_code == 200
    write_keys(keys, KEYS)
    problem(served.search({"query": "roof"}, key=temp), 401, "unauthorized")
    assert served.search({"query": "roof"}).status_code == 200


def test_a_broken_keys_file_fails_closed_and_tells_the_caller_nothing_of_it(
    served: Served,
) -> None:
    keys = served.root / "keys.yaml"
    good = keys.read_text()
    keys.write_text(good + "\n  secret-line: [unclosed\n")
    try:
        doc = problem(served.search({"query": "roof"}, key="ck_anything"), 503, "keys-unavailable")
        assert str(keys) not in doc["detail"] and "secret-line" not in doc["detail"]
        assert "log" in doc["detail"]
    finally:
        keys.write_text(good)
    assert "invalid YAML" in (served.root / "server.log").read_text()
    assert served.search({"query": "roof"}).status_code == 200


def test_a_request_cannot_widen_groups_or_name_a_tenant(served: Served) -> None:
    doc = problem(served.search({"query": "roof", "groups": ["beta-team"]}), 403, "forbidden")
    assert "beta-team" in doc["detail"]
    widen = served.search({"query": "roof", "groups": ["alpha-uw"]}, key=NARROW)
    assert "alpha-uw" in problem(widen, 403, "forbidden")["detail"]
    problem(served.search({"query": "roof", "tenant": "beta"}), 403, "forbidden")
    problem(served.get("/v1/namespaces/deals/generations", tenant="beta"), 403, "forbidden")
    # narrowing is allowed; an empty list narrows to nothing, so it is refused as `?groups=` is
    empty = problem(served.search({"query": "roof", "groups": []}), 422, "validation")
    assert "groups" in empty["detail"] and "empty" in empty["detail"]
    narrowed = served.search({"query": "roof", "groups": ["alpha-credit"]}).json()["hits"]
    assert narrowed and {h["tenant_id"] for h in narrowed} == {"alpha"}


def test_hits_are_the_cli_records_and_each_tenant_sees_only_its_own(served: Served) -> None:
    body = {"query": "roofs and boilers past their useful life", "k": 8, "mode": "hybrid"}
    resp = served.search(body)
    assert resp.status_code == 200, resp.text
    doc = resp.json()
    searcher = Searcher(Home(served.build))
    local = searcher.search(
        body["query"], principal=Principal("alpha", ("alpha-uw", "alpha-credit")), k=8
    ).to_json()
    assert doc["hits"] == local["hits"]  # the records `corpus search --json` prints
    assert doc["generation"] == served.gens["main"] and doc["namespace"] == "deals"
    assert doc["trace"]["request_id"] == resp.headers["x-request-id"] == doc["request_id"]
    beta = served.search(body, key=BETA).json()["hits"]
    assert beta and {h["tenant_id"] for h in beta} == {"beta"}
    assert not {h["source_id"] for h in beta} & {h["source_id"] for h in doc["hits"]}


def test_filters_modes_and_limits(served: Served) -> None:
    filt = {"geo": {"state": "TX"}, "size_units_range": [0, 100]}
    for mode in ("dense", "lexical", "hybrid"):
        hits = served.search({"query": "sponsor experience", "mode": mode, "filters": filt}).json()
        assert hits["hits"] and {h["source_id"] for h in hits["hits"]} == {
            "alpha-deals/deal-alpha-001"
        }
    bad = problem(served.search({"query": "x", "filters": {"nosuch": 1}}), 400, "bad-filter")
    assert "nosuch" in bad["detail"]
    problem(served.search({"query": "x", "filters": {"geo": "TX"}}), 400, "bad-filter")
    huge = {"query": "x", "filters": {"units": 10**23}}
    assert "out of range" in problem(served.search(huge), 400, "bad-filter")["detail"]
    similar = "/v1/namespaces/deals/deals/DEAL-ALPHA-000/similar"
    problem(served.post(similar, {"filters": {"units": 10**23}}), 400, "bad-filter")
    many = {"units": {">=": 1, "<=": 9, "!=": 3}, "asset_class": "m", "deal_date": "2026-01-15"}
    assert (
        "limit is 4"
        in problem(served.search({"query": "x", "filters": many}), 422, "limit-exceeded")["detail"]
    )
    assert (
        "limit is 50"
        in problem(served.search({"query": "x", "k": 51}), 422, "limit-exceeded")["detail"]
    )
    problem(served.search({"query": "x" * 2001}), 422, "limit-exceeded")
    doc = problem(served.search({"query": "x", "k": 0}), 422, "validation")
    assert doc["errors"][0]["loc"] == ["body", "k"]
    problem(served.search({"query": "x", "mode": "fuzzy"}), 422, "validation")
    for loose in ("5", True, 5.0):  # a number only as a JSON integer, never coerced
        doc = problem(served.search({"query": "x", "k": loose}), 422, "validation")
        assert doc["errors"][0]["loc"] == ["body", "k"]
    problem(served.post(similar, {"k": "5"}), 422, "validation")
    problem(
        served.client.post(
            "/v1/namespaces/deals/search",
            content=b"{",
            headers={"Authorization": f"Bearer {ALPHA}"},
        ),
        422,
        "validation",
    )


def test_similar_bounds_its_deal_id_and_sections(served: Served) -> None:
    """The deal id and each section name are held to max_query_chars, and the sections to
    max_filter_conditions, like a search's query and filters, naming the field at fault."""
    similar = "/v1/namespaces/deals/deals/DEAL-ALPHA-000/similar"
    assert served.post(similar, {"sections": ["risk_assessment"] * 4}).status_code == 200
    many = {"sections": ["risk_assessment"] * 5}
    doc = problem(served.post(similar, many), 422, "limit-exceeded")
    assert doc["detail"] == "sections names 5 sections; the limit is 4"
    long = {"sections": ["risk_assessment", "s" * 2001]}
    doc = problem(served.post(similar, long), 422, "limit-exceeded")
    assert doc["detail"] == "the sections[1] is 2001 characters; the limit is 2000"
    doc = problem(
        served.post(f"/v1/namespaces/deals/deals/{'D' * 2001}/similar", {}), 422, "limit-exceeded"
    )
    assert doc["detail"] == "the deal id is 2001 characters; the limit is 2000"


def test_unknown_namespace_generation_and_cross_model(served: Served) -> None:
    problem(served.post("/v1/namespaces/nowhere/search", {"query": "x"}), 404, "unknown-namespace")
    problem(served.search({"query": "x", "generation": "g9999"}), 404, "unknown-generation")
    problem(served.get("/v1/namespaces/deals/generations/g9999"), 404, "unknown-generation")
    # alt's profile builds other vectors now: its generation no longer takes its sources' edits
    stale = served.search({"query": "x", "generation": served.gens["alt"], "mode": "lexical"})
    doc = problem(stale, 409, "generation-not-maintained")
    assert "profile 'alt' now builds another generation" in doc["detail"]
    assert doc["retryable"] is False
    later = served.post("/v1/namespaces/later/search", {"query": "x"}, key=GAMMA)
    assert problem(later, 503, "no-active-generation")["retryable"] is True
    assert later.headers["retry-after"]
    # to a key of another tenant, gamma's namespace is not there at all
    problem(served.post("/v1/namespaces/later/search", {"query": "x"}), 404, "unknown-namespace")
    problem(served.get("/v1/nothing/here"), 404, "not-found")


def test_generations_are_read_only(served: Served) -> None:
    listed = served.get("/v1/namespaces/deals/generations").json()
    assert {g["id"] for g in listed} == set(served.gens.values())
    one = served.get(f"/v1/namespaces/deals/generations/{served.gens['main']}").json()
    assert one["status"] == "ACTIVE" and one["backend_spec"] == "hash:v1-64"
    assert "row_count" not in one  # counts across tenants are not a tenant's to read
    assert served.post("/v1/namespaces/deals/generations", {}).status_code == 405
    # another tenant's namespace is no namespace to this key
    problem(served.get("/v1/namespaces/later/generations"), 404, "unknown-namespace")
    problem(served.get("/v1/namespaces/later/generations/g0001"), 404, "unknown-namespace")
    assert [n["name"] for n in served.get("/v1/namespaces").json()] == ["deals"]
    assert served.get("/v1/namespaces").json()[0]["linked_groups"] is False  # no messages kind


def test_similar_deals_stay_inside_the_tenant(served: Served) -> None:
    path = "/v1/namespaces/deals/deals/DEAL-ALPHA-000/similar"
    doc = served.post(path, {"k": 5}).json()
    assert doc["source_id"] == "alpha-deals/deal-alpha-000"
    assert doc["deals"] and all(d["source_id"].startswith("alpha-deals/") for d in doc["deals"])
    assert doc["generation"] == served.gens["main"]
    problem(served.post(path, {"k": 5}, key=BETA), 404, "not-found")
    lacking = problem(served.post(path, {"sections": ["financials"]}), 422, "validation")
    assert "has no section financials" in lacking["detail"]


def test_sidecars_only_for_the_keys_own_documents(served: Served) -> None:
    path = "/v1/namespaces/deals/sidecars/alpha-deals/deal-alpha-000"
    resp = served.get(path)
    assert resp.status_code == 200, resp.text
    assert resp.json()["deal_id"] == "DEAL-ALPHA-000"
    problem(served.get(path, key=BETA), 404, "not-found")
    problem(
        served.get("/v1/namespaces/deals/sidecars/alpha-deals/..%2F..%2Fkeys"), 404, "not-found"
    )
    problem(
        served.get("/v1/namespaces/deals/sidecars/beta-deals/deal-beta-000", key=BETA),
        404,
        "not-found",
    )


def test_metrics_and_traces(served: Served) -> None:
    problem(served.get("/v1/namespaces", key="ck_not-a-key"), 401, "unauthorized")
    served.search({"query": "sponsor", "mode": "dense", "filters": {"geo": {"state": "WY"}}})
    resp = served.search({"query": "sponsor", "mode": "lexical"}, key=BETA)
    rid = resp.headers["x-request-id"]
    traces = TraceStore(open_registry(served.build))
    for _ in range(100):  # the server stores traces (and audits hits) after responding
        found = [t for t in traces.recent(50) if t["trace"].get("request_id") == rid]
        if found:
            break
        time.sleep(0.2)
    assert found and found[0]["tenant"] == "beta" and found[0]["trace"]["mode"] == "lexical"
    text = served.get("/metrics", key=METRICS).text
    labels = 'endpoint="search",mode="lexical",namespace="deals"'
    assert _value(text, f"corpus_search_latency_seconds_count{{{labels}}}") >= 1
    zero = 'corpus_zero_result_searches_total{endpoint="search",mode="dense",namespace="deals"}'
    assert _value(text, zero) >= 1
    assert _value(text, 'corpus_audited_results_total{namespace="deals"}') > 0
    assert _value(text, 'corpus_unauthorized_results_total{namespace="deals"}') == 0
    assert _value(text, 'corpus_stale_results_total{namespace="deals",reason="deleted"}') == 0
    assert _value(text, 'corpus_stale_results_total{namespace="deals",reason="superseded"}') == 0
    gen = served.gens["main"]
    ratio = f'corpus_generation_completeness_ratio{{generation="{gen}",namespace="deals"}}'
    assert _value(text, ratio) == 1.0
    assert _value(text, 'corpus_index_freshness_seconds{namespace="deals"}') == 0.0
    assert _value(text, 'corpus_http_problems_total{status="401",type="unauthorized"}') >= 1


def test_metrics_are_read_only_with_a_key_granted_them(served: Served) -> None:
    """``/metrics`` names the namespaces, generations and what the server refused: an
    operator's figures, read with a key whose entry grants ``metrics`` (a Prometheus bearer
    token), never by anyone who reaches the port, nor by a key that may only search."""
    problem(served.get("/metrics", key=None), 401, "unauthorized")
    problem(served.get("/metrics", key="ck_not-a-key"), 401, "unauthorized")
    doc = problem(served.get("/metrics", key=ALPHA), 403, "forbidden")
    assert "metrics" in doc["detail"]
    # a key for /metrics alone acts for no tenant: it searches nothing
    doc = problem(served.search({"query": "sponsor"}, key=METRICS), 403, "forbidden")
    assert "search" in doc["detail"]
    problem(served.get("/v1/namespaces", key=METRICS), 403, "forbidden")
    assert served.search({"query": "sponsor"}, key=BOTH).status_code == 200
    for key in (METRICS, BOTH):
        resp = served.get("/metrics", key=key)
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    # what the figures name: namespaces and generations, never a tenant, group or query
    text = served.get("/metrics", key=METRICS).text
    assert "corpus_searches_total" in text
    for secret in ("sponsor", "alpha", "beta", "gamma", "-uw", "-team", "prometheus"):
        assert secret not in text, secret


def test_the_audit_counts_hits_the_principal_may_not_see(served: Served) -> None:
    corpus = Home(served.build)
    searcher = Searcher(corpus)
    alpha = Principal("alpha", ("alpha-uw", "alpha-credit"))
    hits = searcher.search("sponsor", principal=alpha, k=5, namespace="deals").hits
    gen = corpus.registry.require(served.gens["main"])
    audit = ResultAudit(corpus)
    assert audit.check(hits, alpha, gen).unauthorized == 0
    assert audit.check(hits, Principal("beta", ("beta-team",)), gen).unauthorized == len(hits)
    assert audit.check(hits, Principal("alpha", ("beta-team",)), gen).unauthorized == len(hits)


def _value(text: str, series: str) -> float:
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{series} not in /metrics")


def test_paging_is_pinned_to_the_generation_across_a_promotion(served: Served) -> None:
    body = {"query": "rents grew on job growth", "k": 3, "mode": "hybrid"}
    first = served.search(body).json()
    assert first["generation"] == served.gens["main"] and first["next_cursor"]
    whole = served.search({**body, "k": 9}).json()["hits"]
    lifecycle.promote(Home(served.build), "deals", served.gens["alt"])
    second = served.search({**body, "cursor": first["next_cursor"]}).json()
    third = served.search({**body, "cursor": second["next_cursor"]}).json()
    assert second["generation"] == third["generation"] == served.gens["main"]
    pages = [h["provenance"]["chunk_ref"] for p in (first, second, third) for h in p["hits"]]
    assert pages == [h["provenance"]["chunk_ref"] for h in whole]  # no repeat, no gap
    assert {h["provenance"]["generation"] for p in (second, third) for h in p["hits"]} == {
        served.gens["main"]
    }
    # a cursor is for its own request and key only
    problem(served.search({**body, "k": 4, "cursor": first["next_cursor"]}), 400, "bad-cursor")
    problem(served.search({**body, "cursor": first["next_cursor"]}, key=NARROW), 400, "bad-cursor")
    problem(
        served.search({**body, "cursor": first["next_cursor"][:-4] + "AAAA"}), 400, "bad-cursor"
    )
    # a new search goes to the new ACTIVE generation, which this server's profile no longer
    # writes (it names another model): refused until a generation it writes is promoted
    refused = problem(served.search(body), 503, "no-active-generation")
    assert "promote a generation" in refused["detail"]
    unready = problem(served.get("/v1/ready", key=None), 503, "no-active-generation")
    assert "namespace deals: profile 'alt' now builds another generation" in unready["detail"]
