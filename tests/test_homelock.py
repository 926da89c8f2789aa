"""One sync per home at a time: a lock under the home, released when its holder dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from corpus_index.config import Settings
from corpus_index.errors import HomeBusyError
from corpus_index.homelock import gate_path, holder, home_lock, scope_lock, scope_path
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


def test_a_killed_holder_is_not_named_as_the_holder_of_a_home_runs_share(tmp_path: Path) -> None:
    """A killed sync leaves its line in the lock file; a run that shares the home next holds
    it, and the busy message must not send the operator after the dead sync's PID."""
    dead = hold(tmp_path, 30)
    dead.send_signal(signal.SIGKILL)
    dead.wait()
    assert holder(tmp_path) == f"pid {dead.pid} (sync)"
    run = hold(tmp_path, 30, "run a", shared=True)
    try:
        assert holder(tmp_path) == ""
        with pytest.raises(HomeBusyError) as info, home_lock(tmp_path, "sync"):
            pass
        assert f"pid {dead.pid}" not in str(info.value)
        assert "a run sharing the home" in str(info.value)
    finally:
        run.kill()
        run.wait()


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


def in_thread(fn: Callable[[], None]) -> threading.Thread:
    """Run ``fn`` in another thread (a lock held there is not reentrant for this one)."""
    thread = threading.Thread(target=fn)
    thread.start()
    return thread


def test_shared_holders_run_together_and_keep_an_exclusive_one_out(tmp_path: Path) -> None:
    held, release = threading.Event(), threading.Event()

    def run_sharing_the_home() -> None:
        with home_lock(tmp_path, "run a", shared=True):
            held.set()
            release.wait(30)

    thread = in_thread(run_sharing_the_home)
    try:
        assert held.wait(30)
        with home_lock(tmp_path, "run b", shared=True):  # a second run beside the first
            pass
        with (
            pytest.raises(HomeBusyError, match="a run sharing the home"),
            home_lock(tmp_path, "sync"),
        ):
            pass
        assert holder(tmp_path) == ""  # shared holders leave the holder line alone
    finally:
        release.set()
        thread.join(30)
    with home_lock(tmp_path, "sync"):  # all shared holders gone
        assert holder(tmp_path) == f"pid {os.getpid()} (sync)"


def test_one_waiting_to_hold_the_home_alone_keeps_new_shared_holders_out(tmp_path: Path) -> None:
    """A compaction waiting for a run's step in flight holds the gate: a step that would join
    the runs waits behind it, so runs that keep coming never keep the compaction out."""
    held, release, compacting, compacted = (threading.Event() for _ in range(4))

    def step_in_flight() -> None:
        with home_lock(tmp_path, "run a", shared=True):
            held.set()
            release.wait(30)

    def compaction() -> None:
        with home_lock(tmp_path, "compact", wait_s=30):
            compacting.set()
            compacted.wait(30)

    steps = in_thread(step_in_flight)
    assert held.wait(30)
    waiting = in_thread(compaction)
    try:
        deadline = time.monotonic() + 30
        while "(compact)" not in gate_path(tmp_path).read_text(encoding="utf-8"):
            assert time.monotonic() < deadline, "the compaction never took the gate"
            time.sleep(0.05)
        assert not compacting.is_set()  # it waits for the step in flight
        with (
            pytest.raises(HomeBusyError, match=r"pid \d+ \(compact\) holds .*corpus.lock.gate"),
            home_lock(tmp_path, "run b", shared=True, wait_s=0.5),
        ):
            pass
        release.set()
        assert compacting.wait(30)  # in once the step in flight was done
    finally:
        release.set()
        compacted.set()
        steps.join(30)
        waiting.join(30)
    with home_lock(tmp_path, "run b", shared=True, wait_s=5):  # the next step goes on after it
        assert gate_path(tmp_path).read_text(encoding="utf-8") == ""


def test_a_scope_lock_keeps_out_the_same_scope_only(tmp_path: Path) -> None:
    held, release = threading.Event(), threading.Event()

    def step_writing_alpha() -> None:
        with scope_lock(tmp_path, "collection:alpha", "run a step index_rows"):
            held.set()
            release.wait(30)

    thread = in_thread(step_writing_alpha)
    try:
        assert held.wait(30)
        with scope_lock(tmp_path, "collection:beta", "run b"):  # another collection: at once
            pass
        with (
            pytest.raises(HomeBusyError) as info,
            scope_lock(tmp_path, "collection:alpha", "run b", wait_s=0.3),
        ):
            pass
        message = str(info.value)
        assert "collection:alpha of home" in message and "after waiting 0.3 s" in message
        assert f"pid {os.getpid()} (run a step index_rows)" in message
    finally:
        release.set()
        thread.join(30)
    with scope_lock(tmp_path, "collection:alpha", "run b"):
        pass


def test_scopes_that_read_alike_get_lock_files_of_their_own(tmp_path: Path) -> None:
    paths = {
        scope_path(tmp_path, s) for s in ("collection:a/b", "collection:a_b", "collection:a:b")
    }
    assert len(paths) == 3
    assert all(p.parent == tmp_path / "locks" and "/" not in p.name for p in paths)
