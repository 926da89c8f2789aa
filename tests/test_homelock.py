"""One sync per home at a time: a lock under the home, released when its holder dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corpus_index.config import Settings
from corpus_index.errors import HomeBusyError
from corpus_index.homelock import holder, home_lock
from tests.corpusgen import write_home
from tests.support.lockholder import ROOT, hold


def corpus(settings: Settings, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(  # noqa: S603 - fixed arguments
        [
            sys.executable,
            "-m",
            "corpus_index.cli",
            "--config",
            str(settings.config_path),
            "--home",
            str(settings.home),
            *args,
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_second_holder_fails_fast_naming_the_home_and_the_pid(tmp_path: Path) -> None:
    proc = hold(tmp_path, 30)
    try:
        assert holder(tmp_path) == f"pid {proc.pid} (sync)"
        with pytest.raises(HomeBusyError) as info, home_lock(tmp_path, "promote"):
            pass
        assert str(tmp_path) in str(info.value) and f"pid {proc.pid}" in str(info.value)
    finally:
        proc.kill()
        proc.wait()


def test_a_killed_holder_never_leaves_the_home_locked(tmp_path: Path) -> None:
    proc = hold(tmp_path, 30)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with home_lock(tmp_path, "sync"):
        assert holder(tmp_path) == f"pid {os.getpid()} (sync)"


def test_waiting_takes_the_lock_once_the_holder_is_done(tmp_path: Path) -> None:
    proc = hold(tmp_path, 1.0)
    t0 = time.monotonic()
    with home_lock(tmp_path, "sync", wait_s=30):
        assert time.monotonic() - t0 < 30
    proc.wait()


def test_two_corpus_syncs_at_once_the_second_exits_busy(tmp_path: Path) -> None:
    config_path = write_home(tmp_path)
    settings = Settings(config_path=config_path, home=tmp_path / "home")
    first = corpus(settings, "sync", "--json")
    try:
        deadline = time.monotonic() + 60
        while holder(settings.home) != f"pid {first.pid} (sync)":
            assert first.poll() is None and time.monotonic() < deadline, "no lock taken"
            time.sleep(0.05)
        second = corpus(settings, "sync")
        _, err = second.communicate(timeout=120)
        assert second.returncode == 75, err
        assert f"home {settings.home} is busy" in err and f"pid {first.pid} (sync)" in err
        assert "Traceback" not in err
    finally:
        out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert holder(settings.home) == ""
