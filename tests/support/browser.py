"""A headless Chromium driven by Playwright, for tests that operate the Dagster UI as a person does.

Playwright's own browser download is not used: the tests run the system's ``chromium`` (Debian's
package; ``make browser`` installs it where apt-get can). Where it is missing the browser tests are
skipped with the reason, except in CI (``CI`` set), where a skipped UI test would pass unseen:
there they fail, saying what to install.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Page

try:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
except ImportError:  # chromium() skips (or fails in CI) before any page is driven

    class PlaywrightTimeout(Exception):  # type: ignore[no-redef]
        """Stands in for Playwright's TimeoutError where Playwright is not installed."""


CANDIDATES = ("chromium", "chromium-browser", "google-chrome")
TIMEOUT_MS = 90_000  # the UI answers slowly on a loaded 2-core machine
RUN_ID = re.compile(r"/runs/([0-9a-f-]{36})")


def chromium() -> str:
    """The browser to drive: ``$CHROMIUM``, else the first of ``CANDIDATES`` on the PATH.

    Skips the calling test where there is none (or Playwright is not installed), or fails it
    with what to install when ``CI`` is set.
    """
    path = os.environ.get("CHROMIUM") or next(filter(None, map(shutil.which, CANDIDATES)), None)
    missing = []
    if not path:
        missing.append("no chromium on the PATH (install it: `make browser`, or set CHROMIUM)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("playwright is not installed (pip install -e '.[dev]')")
    if missing:
        reason = "; ".join(missing)
        if os.environ.get("CI"):
            pytest.fail(f"browser tests cannot run in CI: {reason}", pytrace=False)
        pytest.skip(reason)
    return str(path)


@contextmanager
def browser_page(executable: str) -> Iterator[Page]:
    """One headless page (a wide viewport, generous timeouts) in a fresh browser profile."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        # /dev/shm is small in containers
        browser = p.chromium.launch(
            executable_path=executable, headless=True, args=["--disable-dev-shm-usage"]
        )
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.set_default_timeout(TIMEOUT_MS)
            # the UI greets a new browser profile with a newsletter dialog over the page
            welcome = page.get_by_role("button", name="Skip")
            page.add_locator_handler(welcome, lambda button: button.click())
            yield page
        finally:
            browser.close()


def poll(page: Page, ready: Callable[[], bool], *, what: str, timeout_s: float = 180) -> None:
    """Wait until ``ready()``, reloading ``page`` every 30 s (a page fills in seconds after it
    loads, slowly on a loaded machine); fail naming ``what`` was awaited."""
    start = reloaded = time.monotonic()
    while not ready():
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"{what}: not seen within {timeout_s:.0f} s at {page.url}")
        page.wait_for_timeout(2000)
        if time.monotonic() - reloaded > 30:
            page.reload()
            reloaded = time.monotonic()


def run_id(page: Page) -> str:
    """The id of the run whose page ``page`` shows."""
    page.wait_for_url(RUN_ID)
    m = RUN_ID.search(page.url)
    assert m is not None
    return m.group(1)
