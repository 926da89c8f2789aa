"""``/metrics``' index freshness: the source folders walked at most once per refresh period,
however often (and by whom: the endpoint asks for no key) it is scraped."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from corpus_index.config import Settings
from corpus_index.home import Home
from corpus_index.http import metrics
from corpus_index.http.metrics import IndexCollector


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_freshness_walks_the_folders_once_per_refresh_period(
    home: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = Home(home)
    clock = Clock()
    collector = IndexCollector(corpus, clock=clock)
    walks: list[list[Path]] = []
    real = metrics.freshness_seconds

    def counted(folders: list[Path], served_at: float) -> float:
        walks.append(folders)
        return real(folders, served_at)

    monkeypatch.setattr(metrics, "freshness_seconds", counted)
    served_at = time.time() - 100
    files = sorted((home.config_path.parent / "sources").rglob("*.uw.md"))
    for path in files:  # every file older than the served generation
        os.utime(path, (served_at - 10, served_at - 10))
    assert collector._freshness("deals", served_at) == 0.0
    deal = files[0]
    later = served_at + 5
    os.utime(deal, (later, later))  # changed after it was served
    for _ in range(50):  # scraped again and again within the period: no walk
        clock.now += 0.5
        assert collector._freshness("deals", served_at) == 0.0
    assert len(walks) == 1
    clock.now += metrics.FRESHNESS_REFRESH_S  # the period over: walked, the change seen
    first = collector._freshness("deals", served_at)
    assert len(walks) == 2 and first > 0
    clock.now += 3  # between walks the wait goes on counting
    assert collector._freshness("deals", served_at) == first + 3
    assert len(walks) == 2
    # a new generation served (another served time) is walked at once
    assert collector._freshness("deals", later + 1) == 0.0
    assert len(walks) == 3
