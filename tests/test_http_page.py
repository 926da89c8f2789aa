"""``corpus serve``'s contract as a whole: its OpenAPI document is current and valid, a
property-based fuzz run of every operation finds no 5xx, and the search page works in a real
headless Chromium. One server (hash embedder, two tenants) for the module.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable

from corpus_index.config import Settings
from corpus_index.http import create_app, problems
from tests.corpusgen import write_home
from tests.searchkit import build_home, messages_config
from tests.support.browser import browser_page, chromium
from tests.support.http_server import running_server, serve_config

if TYPE_CHECKING:
    from playwright.sync_api import Page

ROOT = Path(__file__).resolve().parents[1]
ALPHA, BETA = "ck_page-alpha", "ck_page-beta"
KEYS = {ALPHA: ("alpha", ["alpha-uw", "alpha-credit"]), BETA: ("beta", ["beta-team"])}
WATTLE, BLUEGUM = "ck_page-wattle", "ck_page-bluegum"
MESSAGE_KEYS = {
    WATTLE: ("wattle", ["wattle-staff", "wattle-managers"]),
    BLUEGUM: ("bluegum", ["bluegum-staff", "bluegum-coordinators"]),
}
# per operation: enough to reach every problem path, still fast
FUZZ_EXAMPLES = {"positive": 10, "negative": 6}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Settings]]:
    root = tmp_path_factory.mktemp("page")
    config = serve_config(write_home(root), KEYS)
    home = Settings(config_path=config, home=root / "home")
    build_home(home)
    with running_server(config, home.home, log=root / "server.log") as url:
        yield url, home


@pytest.fixture(scope="module")
def messages_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The bundled messages sample (tenants wattle and bluegum) served with the hash embedder."""
    root = tmp_path_factory.mktemp("page-messages")
    settings = Settings(config_path=messages_config(root), home=root / "home")
    build_home(settings)
    serve_config(settings.config_path, MESSAGE_KEYS)
    with running_server(settings.config_path, settings.home, log=root / "server.log") as url:
        yield url


def test_openapi_is_checked_in_current_and_valid(server: tuple[str, Settings]) -> None:
    url, home = server
    checked_in = json.loads((ROOT / "docs" / "openapi.json").read_text(encoding="utf-8"))
    assert checked_in == create_app(home).openapi(), "run `corpus openapi docs/openapi.json`"
    served = httpx.get(f"{url}/openapi.json", timeout=30).json()
    assert served == checked_in
    # every problem the README lists is declared, the body limit's 413 and 500 included
    statuses = {str(kind.status) for kind in problems.ALL}
    assert {"413", "500", "502"} <= statuses
    for path, operations in checked_in["paths"].items():
        for method, op in operations.items():
            assert statuses <= set(op["responses"]), (method, path)
    schema = schemathesis.openapi.from_dict(served)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {f"{op.method.upper()} {op.path}" for op in operations} >= {
        "POST /v1/namespaces/{namespace}/search",
        "GET /v1/ready",
        "GET /metrics",
    }


@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_fuzzing_every_operation_finds_no_server_error(
    server: tuple[str, Settings], mode: str
) -> None:
    url, _ = server
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    generation = schemathesis.GenerationMode(mode)
    auth = {"Authorization": f"Bearer {ALPHA}"}
    failures: list[str] = []
    for result in schema.get_all_operations():
        op = result.ok()
        params = {"namespace": "deals"} if "{namespace}" in op.path else None
        strategy = op.as_strategy(generation_mode=generation, path_parameters=params)

        @given(case=strategy)
        @settings(
            max_examples=FUZZ_EXAMPLES[mode],
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def call(case: schemathesis.Case) -> None:
            resp = case.call(base_url=url, headers=auth, timeout=60)
            if resp.status_code >= 500:
                failures.append(f"{case.method} {case.path} -> {resp.status_code}: {resp.text}")

        try:
            call()
        except Unsatisfiable:
            assert mode == "negative"  # an operation with no input has no invalid one
    assert failures == []


def search(page: Page, url: str, key: str, query: str, *, namespace: str = "", k: int = 0) -> None:
    """Open the page at ``url`` and search ``query`` with ``key`` (in ``namespace``, for ``k``
    results, where given)."""
    page.goto(url)
    page.fill("#api-key", key)
    if namespace:
        page.fill("#namespace", namespace)
    if k:
        page.fill("#k", str(k))
    page.fill("#query", query)
    page.click("button[type=submit]")


@pytest.mark.browser
def test_search_page_in_a_browser(server: tuple[str, Settings]) -> None:
    url, _ = server
    with browser_page(chromium()) as page:
        page.goto(url)
        page.fill("#api-key", ALPHA)
        page.fill("#query", "roofs and boilers past their useful life")
        page.click("button[type=submit]")
        page.wait_for_selector(".hit")
        alpha = page.locator(".hit strong").all_inner_texts()
        assert alpha and all(t.startswith("alpha-deals/") for t in alpha)
        status = page.inner_text("#status")
        assert "from generation g0001" in status
        assert (
            page.locator("section[data-type=risk_assessment] .prov")
            .first.inner_text()
            .startswith("chunk://alpha-deals/")
        )
        # another tenant's key, the same query: none of the first tenant's results
        page.fill("#api-key", BETA)
        page.click("button[type=submit]")
        page.wait_for_function("document.querySelector('#status').textContent.includes('hit')")
        page.wait_for_selector(".hit strong >> text=/^beta-deals/")
        beta = page.locator(".hit strong").all_inner_texts()
        assert beta and not any(t.startswith("alpha-deals/") for t in beta)
        # a bad filter: a readable message, not a stack trace
        page.fill("#f-json", '{"nosuch": 1}')
        page.click("button[type=submit]")
        page.wait_for_selector("#problem:not([hidden])")
        message = page.inner_text("#problem")
        assert "The filter is invalid (400)" in message and "nosuch" in message
        page.fill("#f-json", "{not json")
        page.click("button[type=submit]")
        page.wait_for_function(
            "document.querySelector('#problem').textContent.includes('not valid JSON')"
        )


@pytest.mark.browser
def test_a_failed_search_leaves_no_earlier_results_on_the_page(
    server: tuple[str, Settings],
) -> None:
    """A search refused (here a key that expired between two searches) shows its problem
    alone: the results of the search before it, and their "More results", are gone."""
    url, _ = server
    with browser_page(chromium()) as page:
        search(page, url, ALPHA, "roofs and boilers past their useful life", k=2)
        page.wait_for_selector(".hit")
        assert page.locator(".hit").count() == 2 and page.locator("#more").is_visible()
        page.fill("#api-key", "ck_page-expired")
        page.fill("#query", "tenant concentration")
        page.click("button[type=submit]")
        page.wait_for_selector("#problem:not([hidden])")
        assert "(401)" in page.inner_text("#problem")
        assert page.locator(".hit").count() == 0 and page.locator("#more").is_hidden()
        assert page.inner_text("#status") == ""
        assert page.get_attribute("#status", "data-generation") is None


@pytest.mark.browser
def test_an_answer_that_is_not_json_is_shown_with_its_status(
    server: tuple[str, Settings],
) -> None:
    """A proxy before the server answers the search with its own HTML page (a 502 while the
    server restarts): the page says so, with the status, instead of "Searching…" forever."""
    url, _ = server
    with browser_page(chromium()) as page:
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.route(
            "**/v1/namespaces/*/search",
            lambda route: route.fulfill(
                status=502,
                content_type="text/html",
                body="<html><body><h1>502 Bad Gateway</h1><hr>nginx</body></html>",
            ),
        )
        page.goto(url)
        page.fill("#api-key", ALPHA)
        page.fill("#query", "roofs and boilers past their useful life")
        page.click("button[type=submit]")
        page.wait_for_selector("#problem:not([hidden])", timeout=20_000)
        problem = page.inner_text("#problem")
        assert problem.startswith("The server's answer (502"), problem
        assert "text/html" in problem and "not a search result" in problem, problem
        assert page.inner_text("#status") == "" and page.locator(".hit").count() == 0
        assert errors == [], errors


@pytest.mark.browser
def test_a_messages_namespace_is_searched_group_first_with_a_view_of_each_person(
    messages_server: str,
) -> None:
    """On a messages namespace the page shows whole contexts (a conversation with its members in
    order, their roles and own provenance, its participants, dates and place), and a
    participant's name opens everything about that person; another tenant's key sees none."""
    url = messages_server
    with browser_page(chromium()) as page:
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        search(page, url, WATTLE, "What happened with pumpkin at Christmas?", namespace="messages")
        page.wait_for_selector(".card")
        assert "group-first" in page.inner_text("#status") and page.locator(".hit").count() == 0
        title = page.get_by_role(
            "heading", name="Christmas lunch planning at Picton SIL", exact=True
        )
        meal = page.locator("#results .card").filter(has=title)
        assert meal.count() == 1
        meta = meal.locator(".meta").inner_text()
        assert meta == "conversation · 2025-12-10 · Picton SIL", meta
        names = meal.locator(".people button.person").all_inner_texts()
        assert {"Sarah Jones", "Jane Okafor", "Mike Brennan"} <= set(names)
        members = meal.locator(".member")
        assert members.count() == 9 and not members.first.is_visible()  # folded until asked
        meal.locator("summary").click()
        assert members.first.is_visible()
        assert [m.get_attribute("data-order") for m in members.all()] == [
            str(n) for n in range(1, 10)
        ]
        assert members.first.locator(".role").inner_text() == "initiator"
        pumpkin = meal.locator(".member", has_text="yes pumpkin please")
        assert pumpkin.count() == 1
        assert pumpkin.locator(".prov").inner_text().startswith("discord_chat · wattle-messages/")
        assert "chunk://wattle-messages/" in pumpkin.locator(".prov").inner_text()
        # a participant's name: everything about her this key may see
        jane = meal.locator("button.person[data-name='Jane Okafor']")
        identity = jane.get_attribute("data-identity")
        assert identity and identity.startswith("idn_")
        with page.expect_request(f"**/people/{identity}"):  # her identity, not a name to resolve
            jane.click()
        page.wait_for_selector("#person:not([hidden]) .card")
        assert page.inner_text("#person-name") == "Jane Okafor"
        assert page.locator("#results").is_hidden()
        roles = page.locator("#person-roles li").all_inner_texts()
        assert any(r.startswith("author: ") for r in roles), roles
        assert page.locator("#person-partners button.person[data-name='Sarah Jones']").count()
        contexts = page.locator("#person .card")
        assert contexts.count() > 1
        shown = contexts.count()
        assert f"Jane Okafor: {shown} contexts (request " in page.inner_text("#status")
        title = page.get_by_role(
            "heading", name="Christmas lunch planning at Picton SIL", exact=True
        )
        planning = page.locator("#person .card").filter(has=title)
        assert planning.count() == 1
        assert planning.locator(".member", has_text="yes pumpkin please").count() == 1
        provs = page.locator("#person .member .prov").all_text_contents()  # folded: no inner text
        assert provs and all("wattle-messages/" in t for t in provs)
        page.click("#back")
        assert page.locator("#person").is_hidden() and meal.is_visible()
        # the server's answer cut to one context: the page says there are more
        page.route("**/people/*", lambda route: route.continue_(url=f"{route.request.url}?limit=1"))
        jane.click()
        page.wait_for_function("document.querySelector('#status').textContent.includes('showing')")
        assert f"Jane Okafor: showing 1 of {shown} contexts" in page.inner_text("#status")
        assert page.locator("#person .card").count() == 1
        page.unroute("**/people/*")
        page.click("#back")
        # the other tenant's key: her name is unknown to it, and its search shows none of it
        page.fill("#api-key", BLUEGUM)
        meal.locator("button.person[data-name='Jane Okafor']").click()
        page.wait_for_selector("#problem:not([hidden])")
        assert "(404)" in page.inner_text("#problem") and page.locator("#person").is_hidden()
        page.click("button[type=submit]")
        page.wait_for_function(
            "document.querySelector('#status').textContent.includes('from generation')"
        )
        assert page.locator("#results .card").count() > 0
        assert page.locator(".card", has_text="yes pumpkin please").count() == 0
        provs = page.locator(".member .prov").all_text_contents()
        assert provs and all("bluegum-messages/" in t for t in provs), provs
        assert "Jane Okafor" not in page.inner_text("#results")
        assert errors == [], errors
