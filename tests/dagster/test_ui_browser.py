"""The README's UI section, followed in a real browser (headless Chromium) against a real
`dagster dev` (webserver and daemon) over a small built home: the asset graph, the generations
view, promote and rollback from the launchpad, "Materialize all" that moves nothing, and a failed
run where the operator looks. Screenshots of each step go to the module's temporary folder."""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner

from corpus_index.alerts import alerts
from corpus_index.cli import main
from corpus_index.config import Settings
from definitions import dagster_runner
from pipelines.devserver import DevServer, dagster_dev
from tests.corpusgen import write_home
from tests.support.browser import PlaywrightTimeout, browser_page, chromium, poll, run_id

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

pytestmark = [pytest.mark.slow, pytest.mark.daemon, pytest.mark.browser]
CTX = {"embedder": "hash:v1-32", "input_format": "default-v2", "namespace": "deals"}
LIMIT_S = 180
EDITOR = "document.querySelector('.CodeMirror').CodeMirror"  # the launchpad's config editor
PLAYGROUND = "/locations/definitions.py/jobs/{job}/playground"  # a job's launchpad


def corpus(settings: Settings, *args: str) -> str:
    """The output of ``corpus <args>`` on the home (exit 0 or 1 expected)."""
    base = ["--config", str(settings.config_path), "--home", str(settings.home)]
    result = CliRunner().invoke(main, [*base, *args])
    assert result.exit_code in (0, 1), result.output
    return result.output


def statuses(settings: Settings) -> dict[str, str]:
    """Each generation's status, as ``corpus generations --json`` gives it."""
    listed = json.loads(corpus(settings, "generations", "--json"))["generations"]
    return {g["id"]: g["status"] for g in listed}


@dataclass(frozen=True)
class UI:
    settings: Settings
    server: DevServer
    page: Page
    shots: Path
    main: str  # profile main's generation: ACTIVE when the module starts
    ctx: str  # profile ctx's generation: READY, the newest

    def open(self, path: str) -> Page:
        self.page.goto(self.server.url + path)
        return self.page

    def nav(self, item: str) -> Locator:
        """An item of the UI's navigation bar."""
        return self.page.get_by_role("link").filter(has_text=re.compile(rf"^\s*{item}\s*$"))

    def shot(self, name: str) -> None:
        self.page.screenshot(path=str(self.shots / f"{name}.png"), full_page=True)

    def active(self) -> str:
        (active,) = (g for g, s in statuses(self.settings).items() if s == "ACTIVE")
        return active


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UI]:
    executable = chromium()  # skip (or fail in CI) before building anything
    root = tmp_path_factory.mktemp("ui")
    settings = Settings(
        config_path=write_home(root, deals_per_tenant=1, extra_profiles={"ctx": CTX}),
        home=root / "home",
    )
    shots = root / "screenshots"
    shots.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DAGSTER_HOME", str(settings.dagster_home))  # the runner sets it; restored
        runner = dagster_runner()
        assert runner.sync(settings).ok  # `make run`: both profiles' generations built
        main_id, ctx_id = sorted(statuses(settings))
        assert runner.promote(settings, "deals", main_id).success
        with (
            dagster_dev(settings, sensor_interval_s=10) as server,
            browser_page(executable) as page,
        ):
            yield UI(settings, server, page, shots, main_id, ctx_id)
    print(f"screenshots: {shots}")


def test_the_asset_graph_and_which_generation_serves(ui: UI) -> None:
    page = _asset_graph(ui, ("ingestion", "embeddings", "index", "serving"))
    ui.shot("1-asset-graph")
    ui.nav("Catalog").click()
    page.locator("a[href='/assets/active_generation']").first.click()
    # its `generations` metadata: every generation, its status, the serving one marked
    rows = page.locator("tr:not(:has(tr))")  # the table's own rows, not the metadata's row
    row = rows.filter(has_text=re.compile(rf"^\s*{ui.main}")).first
    row.wait_for()
    assert re.search(r"main\s+ACTIVE\s+serving", row.inner_text()), row.inner_text()
    other = rows.filter(has_text=re.compile(rf"^\s*{ui.ctx}")).first.inner_text()
    assert re.search(r"ctx\s+READY", other) and "serving" not in other, other
    ui.shot("2-generations")
    assert ui.active() == ui.main


def _asset_graph(ui: UI, groups: tuple[str, ...], *, tries: int = 3) -> Page:
    """Lineage, the asset graph, showing each of ``groups``. On a loaded machine the graph's
    layout can stall behind the first-visit dialog, so the page is loaded again until it shows
    them (the last try's timeout is raised)."""
    for _ in range(tries - 1):
        with contextlib.suppress(PlaywrightTimeout):
            return _graph_shown(ui, groups)
    return _graph_shown(ui, groups)


def _graph_shown(ui: UI, groups: tuple[str, ...], wait_ms: int = 60_000) -> Page:
    """One try of :func:`_asset_graph`."""
    page = ui.open("/")
    ui.nav("Lineage").click()
    for group in groups:
        page.get_by_text(group, exact=True).first.wait_for(timeout=wait_ms)
    return page


def _launchpad(ui: UI, job: str) -> Page:
    """Jobs → ``job`` → its launchpad, partition ``deals`` picked."""
    page = ui.open(PLAYGROUND.format(job=job))
    before = _pick_partition(page, "deals")
    # the partition's config replaces the schema's defaults in the editor (a tab that kept the
    # config launched last may show it already)
    with contextlib.suppress(PlaywrightTimeout):
        page.wait_for_function(f"v => {EDITOR}.getValue() !== v", arg=before, timeout=20_000)
    return page


def _pick_partition(page: Page, name: str, *, tries: int = 4, wait_ms: int = 20_000) -> str:
    """Pick partition ``name`` in the launchpad's partition box; the editor's config before.

    The box's menu lists the partitions once the page has loaded them; opened earlier (a loaded
    machine) it can stay empty, so it is typed into, and the page loaded again, until ``name``
    is offered (the last try's timeout is raised)."""
    for _ in range(tries - 1):
        try:
            return _offered(page, name, wait_ms)
        except PlaywrightTimeout:
            page.reload()
    return _offered(page, name, wait_ms)


def _offered(page: Page, name: str, wait_ms: int) -> str:
    """One try of :func:`_pick_partition`."""
    page.locator(".CodeMirror").wait_for()
    before = _config(page)
    box = page.get_by_placeholder("Partition")
    box.click()
    box.fill(name)
    item = page.get_by_role("menuitem", name=name, exact=True)
    item.wait_for(timeout=wait_ms)
    item.click()
    return before


def _config(page: Page) -> str:
    return str(page.evaluate(f"{EDITOR}.getValue()"))


def _edit(page: Page, field: str, value: str) -> None:
    """Set ``field`` of active_generation's config in the editor to ``value``."""
    config, n = re.subn(rf"(?m)^(\s+){field}: .*$", rf"\g<1>{field}: {value}", _config(page))
    assert n == 1, _config(page)
    page.evaluate(f"v => {EDITOR}.setValue(v)", config)


def _launch(page: Page, outcome: str) -> str:
    """Launch Run, then wait on the run's page for ``outcome`` (Success, Failure); the run id."""
    page.get_by_role("button", name="Launch Run").click()
    rid = run_id(page)
    page.get_by_text(outcome, exact=True).first.wait_for(timeout=LIMIT_S * 1000)
    return rid


def test_promote_then_roll_back_from_the_launchpad(ui: UI) -> None:
    # promote_generation_job moves the pointer when `generation` is set
    page = _launchpad(ui, "promote_generation_job")
    assert re.search(r"(?m)^\s+generation: ''$", _config(page)), _config(page)  # none named
    _edit(page, "generation", ui.ctx)
    ui.shot("3-promote-launchpad")
    _launch(page, "Success")
    ui.shot("4-promote-run")
    assert ui.active() == ui.ctx
    # rollback_generation_job comes with `action: rollback` for the partition picked
    page = _launchpad(ui, "rollback_generation_job")
    config = _config(page)
    assert re.search(r"action: '?rollback'?\n", config), config
    ui.shot("5-rollback-launchpad")
    _launch(page, "Success")  # launched as it comes
    ui.shot("6-rollback-run")
    assert ui.active() == ui.main


def test_materialize_all_moves_nothing(ui: UI) -> None:
    assert ui.active() == ui.main  # not the newest READY generation (ctx)
    page = ui.open("/locations/definitions.py/asset-groups/serving")
    page.locator("button", has_text="Materialize").first.click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("button", name="All", exact=True).click()
    ui.shot("7-materialize-all")
    dialog.locator("button", has_text=re.compile(r"^Launch")).click()
    page.get_by_text("View", exact=True).click()  # the toast: "Launched run <id>  View"
    run_id(page)
    page.get_by_text("Success", exact=True).first.wait_for(timeout=LIMIT_S * 1000)
    page = ui.open("/assets/active_generation")

    def metadata(key: str) -> str:
        row = page.locator("tr:not(:has(tr))").filter(has_text=re.compile(rf"^\s*{key}"))
        return row.first.inner_text() if row.count() else ""

    # its latest materialization is this run's: it recorded the state and moved nothing
    poll(page, lambda: "record" in metadata("action"), what="active_generation, action record")
    assert "false" in metadata("moved"), metadata("moved")
    ui.shot("8-after-materialize-all")
    assert ui.active() == ui.main


def _await_alert_sensor(log: Path) -> None:
    """The failure sensor's first tick only sets its cursor: wait for it before failing a run."""
    t0 = time.monotonic()
    tick = "Checking for new runs for sensor: run_failure_alert_sensor"
    while tick not in log.read_text(errors="replace"):
        if time.monotonic() - t0 > LIMIT_S:
            raise AssertionError(f"run_failure_alert_sensor never ticked; see {log}")
        time.sleep(2)


def test_a_failed_run_shows_in_the_runs_list_and_in_corpus_alerts(ui: UI) -> None:
    _await_alert_sensor(ui.server.log)
    # the launchpad's tab keeps the config launched last (generation: <ctx>): replace it
    page = _launchpad(ui, "promote_generation_job")
    _edit(page, "generation", "g9999")
    rid = _launch(page, "Failure")
    ui.shot("9-failed-run")
    page = ui.open("/runs")
    # the run's row: the smallest block around its id that shows a status
    row = page.get_by_text(rid[:8], exact=True).first
    row = row.locator("xpath=ancestor::*[contains(., 'Failure') or contains(., 'Success')][1]")
    assert "Failure" in row.inner_text() and "Success" not in row.inner_text(), row.inner_text()
    ui.shot("10-runs-list")
    assert ui.active() == ui.main
    # the daemon's run_failure_alert_sensor records it; `corpus alerts` lists it
    t0 = time.monotonic()
    while not any(a.run_id == rid for a in alerts(ui.settings.home)):
        if time.monotonic() - t0 > LIMIT_S:
            raise AssertionError(f"no alert for run {rid} within {LIMIT_S} s; see {ui.server.log}")
        time.sleep(2)
    listed = corpus(ui.settings, "alerts")
    assert rid[:8] in listed and "g9999" in listed, listed


def test_a_partition_never_offered_is_tried_again_then_reported(ui: UI) -> None:
    # the retry that covers a menu opened before its partitions loaded: the page is loaded
    # again between tries, and a partition that never shows fails with the timeout
    page = ui.open(PLAYGROUND.format(job="promote_generation_job"))
    loads: list[str] = []

    def loaded(p: Page) -> None:
        loads.append(p.url)

    page.on("load", loaded)
    try:
        with pytest.raises(PlaywrightTimeout):
            _pick_partition(page, "no-such-collection", tries=2, wait_ms=3_000)
    finally:
        page.remove_listener("load", loaded)
    assert len(loads) == 1, loads  # one reload, between the two tries
