"""The HTTP API at its edges, in-process (the app ``corpus serve`` runs, over one home built
with the hash embedder): another tenant's namespace is unknown to a key, a generation retired
while the server runs is refused as retired, and a keys file that cannot be decoded, a body
over its limit, or a registry another process holds each get their documented problem, with
nothing of the server's own state in its detail."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import yaml
from fastapi.testclient import TestClient

from corpus_index import lifecycle
from corpus_index.config import Settings
from corpus_index.home import Home
from corpus_index.http import create_app
from corpus_index.http.service import REGISTRY_WAIT_S
from tests.corpusgen import write_home
from tests.searchkit import build_home
from tests.support.http_server import serve_config

ALPHA = "ck_alpha"
HEADERS = {"Authorization": f"Bearer {ALPHA}"}
PROBLEM = "urn:corpus-index:problem:"
MAX_BODY = 16_384


class Built:
    def __init__(self, settings: Settings, gens: dict[str, str]) -> None:
        self.settings, self.gens = settings, gens


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    root = tmp_path_factory.mktemp("edges")
    config = write_home(
        root, extra_profiles={"alt": {"embedder": "hash:v1-64", "namespace": "deals"}}
    )
    doc = yaml.safe_load(config.read_text())
    doc["namespaces"]["deals"]["retire_after_hours"] = 0
    # a namespace of another tenant alone
    doc["collections"]["gamma-deals"] = {
        **doc["collections"]["beta-deals"],
        "tenant": "gamma",
        "namespace": "later",
    }
    doc["namespaces"]["later"] = {"eval_gate": "off"}
    config.write_text(yaml.safe_dump(doc, sort_keys=False))
    settings = Settings(config_path=config, home=root / "home")
    corpus = build_home(settings, promote=False)
    gens = {g.spec.profile: g.id for g in corpus.registry.generations(namespace="deals")}
    lifecycle.promote(corpus, "deals", gens["main"])
    serve_config(config, {ALPHA: ("alpha", ["alpha-uw", "alpha-credit"])}, max_body_bytes=MAX_BODY)
    return Built(settings, gens)


@pytest.fixture
def client(built: Built) -> Iterator[TestClient]:
    app = create_app(built.settings, record_traces=False)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def problem(resp: object, status: int, slug: str) -> dict[str, object]:
    assert getattr(resp, "status_code", None) == status, getattr(resp, "text", resp)
    doc: dict[str, object] = resp.json()  # type: ignore[attr-defined]
    assert doc["type"] == PROBLEM + slug
    return doc


def test_another_tenants_namespace_is_unknown_to_the_key(client: TestClient) -> None:
    """``later`` holds tenant gamma's collection alone: to alpha's key it is not configured,
    on every route that names a namespace, as the generations routes already answered."""
    for method, path, body in [
        ("post", "/v1/namespaces/later/search", {"query": "roof"}),
        ("post", "/v1/namespaces/later/deals/DEAL-BETA-000/similar", {}),
        ("post", "/v1/namespaces/later/groups/search", {"query": "roof"}),
        ("get", "/v1/namespaces/later/people/Sarah", None),
        ("get", "/v1/namespaces/later/sidecars/gamma-deals/deal-beta-000", None),
        ("get", "/v1/namespaces/later/exports/gamma-deals/x/index.json", None),
        ("get", "/v1/namespaces/later/generations", None),
    ]:
        resp = client.request(method, path, json=body, headers=HEADERS)
        assert resp.status_code == 404, (path, resp.text)
        assert resp.json()["type"] == PROBLEM + "unknown-namespace", path
    assert client.post("/v1/namespaces/deals/search", json={"query": "roof"}, headers=HEADERS)


def test_a_generation_retired_while_the_server_runs_is_refused_as_retired(
    client: TestClient, built: Built
) -> None:
    body = {"query": "roof", "generation": built.gens["alt"], "mode": "lexical"}
    assert client.post("/v1/namespaces/deals/search", json=body, headers=HEADERS).status_code == 200
    lifecycle.retire(Home(built.settings), built.gens["alt"])
    after = client.post("/v1/namespaces/deals/search", json=body, headers=HEADERS)
    problem(after, 409, "generation-not-maintained")


def test_a_keys_file_that_is_not_utf8_fails_closed(client: TestClient, built: Built) -> None:
    keys = built.settings.config_path.parent / "keys.yaml"
    good = keys.read_bytes()
    keys.write_bytes(good + b"\n# \xff\n")
    try:
        resp = client.post("/v1/namespaces/deals/search", json={"query": "roof"}, headers=HEADERS)
        doc = problem(resp, 503, "keys-unavailable")
        assert str(keys) not in str(doc["detail"])
    finally:
        keys.write_bytes(good)
    assert client.post("/v1/namespaces/deals/search", json={"query": "x"}, headers=HEADERS)


def test_a_body_over_the_limit_is_refused_before_it_is_read(client: TestClient) -> None:
    body = {"query": "roof", "groups": ["alpha-uw"] * (MAX_BODY // 8)}
    given = {**HEADERS, "X-Request-ID": "caller-req-0001"}
    resp = client.post("/v1/namespaces/deals/search", json=body, headers=given)
    doc = problem(resp, 413, "body-too-large")
    assert f"serve.max_body_bytes = {MAX_BODY} bytes" in str(doc["detail"])
    assert resp.headers["x-request-id"] == doc["request_id"] == "caller-req-0001"
    deep = "[" * 5000 + "]" * 5000  # past the JSON parser's depth: a validation problem
    resp = client.post(
        "/v1/namespaces/deals/search",
        content=f'{{"query": "roof", "filters": {deep}}}',
        headers={**HEADERS, "content-type": "application/json"},
    )
    assert resp.status_code in (400, 422) and resp.json()["type"] == PROBLEM + "validation"


def test_a_chunked_body_over_the_limit_is_refused_as_too_large(client: TestClient) -> None:
    """A body sent in chunks, with no Content-Length, is cut off once the limit has come: the
    same 413 as a declared one, not a body the server says it could not parse."""

    def chunks() -> Iterator[bytes]:
        yield b'{"query": "roof", "groups": ['
        for _ in range(MAX_BODY // 8):
            yield b'"alpha-uw",'
        yield b'"alpha-uw"]}'

    resp = client.post(
        "/v1/namespaces/deals/search",
        content=chunks(),
        headers={**HEADERS, "content-type": "application/json"},
    )
    assert "content-length" not in resp.request.headers
    doc = problem(resp, 413, "body-too-large")
    assert f"serve.max_body_bytes = {MAX_BODY} bytes" in str(doc["detail"])


def test_a_registry_held_by_another_process_is_busy_and_told_without_its_path(
    client: TestClient, built: Built
) -> None:
    registry = built.settings.home / "registry.duckdb"
    hold = (
        "import duckdb, sys, time; con = duckdb.connect(sys.argv[1]); "
        "print('held', flush=True); time.sleep(30)"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", hold, str(registry)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        start = time.monotonic()
        resp = client.post("/v1/namespaces/deals/search", json={"query": "roof"}, headers=HEADERS)
        waited = time.monotonic() - start
        doc = problem(resp, 503, "busy")
        assert str(registry) not in str(doc["detail"]) and "PID" not in str(doc["detail"])
        assert waited < REGISTRY_WAIT_S + 10  # the request's worker is not held for 30 s
    finally:
        holder.kill()
        holder.wait()


def test_a_method_not_allowed_names_the_allowed_ones(client: TestClient) -> None:
    """RFC 9110 15.5.6: a 405 carries ``Allow``; the problem document keeps the framework's
    headers beside its own."""
    resp = client.delete("/v1/namespaces/deals/generations", headers=HEADERS)
    doc = problem(resp, 405, "http-405")
    assert resp.headers.get("allow") == "GET"
    assert resp.headers["x-request-id"] == doc["request_id"]
    resp = client.get("/v1/namespaces/deals/search", headers=HEADERS)
    problem(resp, 405, "http-405")
    assert resp.headers.get("allow") == "POST"


def test_an_empty_group_name_is_refused_as_invalid(client: TestClient) -> None:
    """``?groups=`` (or a list holding an empty name) is a validation problem naming the
    parameter on every route that narrows, not a 403 that the key 'does not grant group(s) '."""
    for method, path, params, body in [
        ("get", "/v1/namespaces/deals/exports/alpha-deals/x/index.json", {"groups": ""}, None),
        (
            "get",
            "/v1/namespaces/deals/exports/alpha-deals/x/index.json",
            {"groups": ["alpha-uw", ""]},
            None,
        ),
        ("post", "/v1/namespaces/deals/search", None, {"query": "roof", "groups": [""]}),
        ("post", "/v1/namespaces/deals/deals/DEAL-ALPHA-000/similar", None, {"groups": [""]}),
    ]:
        resp = client.request(method, path, params=params, json=body, headers=HEADERS)
        doc = problem(resp, 422, "validation")
        assert str(doc["detail"]).startswith("groups: a group name is empty"), path
    body = {"query": "roof", "groups": ["alpha-uw"]}
    assert client.post("/v1/namespaces/deals/search", json=body, headers=HEADERS).status_code == 200


def test_an_empty_group_list_is_refused_as_invalid(client: TestClient) -> None:
    """``"groups": []`` in a body would narrow to no group and answer an empty 200, where
    ``?groups=`` is refused: both are a validation problem naming the field."""
    for path, body in [
        ("/v1/namespaces/deals/search", {"query": "roof", "groups": []}),
        ("/v1/namespaces/deals/deals/DEAL-ALPHA-000/similar", {"groups": []}),
    ]:
        doc = problem(client.post(path, json=body, headers=HEADERS), 422, "validation")
        assert str(doc["detail"]).startswith("groups: the list is empty"), path


def test_metrics_answer_without_a_key_only_where_the_configuration_opens_them(
    built: Built,
) -> None:
    """By default ``/metrics`` asks for a key granted them; ``serve.open_metrics: true`` (a
    port only the scraper's network reaches) lets it answer without one."""
    with TestClient(create_app(built.settings, record_traces=False)) as closed:
        problem(closed.get("/metrics"), 401, "unauthorized")
        problem(closed.get("/metrics", headers=HEADERS), 403, "forbidden")
    doc = yaml.safe_load(built.settings.config_path.read_text())
    doc["serve"]["open_metrics"] = True
    opened = built.settings.config_path.with_name("open-metrics.yaml")  # its paths hold
    opened.write_text(yaml.safe_dump(doc, sort_keys=False))
    settings = Settings(config_path=opened, home=built.settings.home)
    with TestClient(create_app(settings, record_traces=False)) as client:
        resp = client.get("/metrics")
        assert resp.status_code == 200 and "corpus_searches_total" in resp.text
        problem(
            client.post("/v1/namespaces/deals/search", json={"query": "x"}), 401, "unauthorized"
        )
