"""End to end with the real Dagster daemon and webserver: an added file becomes searchable and
a deleted one disappears, with no command run by hand (source_update_sensor + automation)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from corpus_index.config import Settings
from corpus_index.home import Home
from corpus_index.search import Principal, Searcher
from definitions import dagster_runner
from pipelines.devserver import dagster_dev
from tests.corpusgen import deal_text, write_home

# `make test-daemon` runs this test alone. On a quiet 2-core machine: searchable after ~40 s,
# gone after ~17 s.
pytestmark = [pytest.mark.slow, pytest.mark.daemon]
LIMIT_S = 240  # a failure detector: a loaded CI machine (three workers on two cores) is slow
PHRASE = "A funicular railway climbs to the property from the harbor ferry landing."
NEW = "alpha-deals/deal-alpha-new"


def found(settings: Settings) -> bool:
    hits = (
        Searcher(Home(settings))
        .search(
            "funicular railway harbor ferry landing",
            principal=Principal("alpha", ("alpha-uw",)),
            k=5,
        )
        .hits
    )
    return any(h.source_id == NEW for h in hits)


def wait_for(settings: Settings, present: bool, log: Path) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < LIMIT_S:
        if found(settings) == present:
            return time.monotonic() - t0
        time.sleep(2.0)
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
    raise AssertionError(f"not {'found' if present else 'gone'} within {LIMIT_S} s\n{tail}")


def wait_for_tombstone(settings: Settings, log: Path) -> dict:
    t0 = time.monotonic()
    while time.monotonic() - t0 < LIMIT_S:
        tomb = Home(settings).registry.tombstone(NEW)
        if tomb is not None:
            return tomb
        time.sleep(1.0)
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
    raise AssertionError(f"no tombstone for {NEW} within {LIMIT_S} s\n{tail}")


def test_daemon_picks_up_an_added_and_a_deleted_file(tmp_path: Path) -> None:
    config_path = write_home(tmp_path)
    settings = Settings(config_path=config_path, home=tmp_path / "home")
    assert dagster_runner().sync(settings).ok
    assert dagster_runner().promote(settings, "deals", "").success
    path = tmp_path / "sources" / "alpha" / "deal-alpha-new.uw.md"
    with dagster_dev(settings, sensor_interval_s=10) as server:
        time.sleep(5)  # let the first sensor tick record the cursor
        path.write_text(
            deal_text("DEAL-ALPHA-NEW", tenant="alpha", acl=["alpha-uw"], market=PHRASE),
            encoding="utf-8",
        )
        added_s = wait_for(settings, True, server.log)
        path.unlink()
        deleted_s = wait_for(settings, False, server.log)
        # rows leave every generation first; the tombstone and receipt are the run's last step
        tomb = wait_for_tombstone(settings, server.log)
    print(f"searchable after {added_s:.1f} s, gone after {deleted_s:.1f} s")
    assert Path(tomb["receipt"]).is_file()
