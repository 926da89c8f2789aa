"""The one resource the assets use: the corpus home and its configuration."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg

from corpus_index.config import Settings
from corpus_index.home import Home
from corpus_index.homelock import holder, home_lock

# how long a run waits for the home's lock (a `corpus sync`, or another run, in flight)
# before it fails naming the holder
LOCK_WAIT_S = 1800.0


class CorpusResource(dg.ConfigurableResource):  # type: ignore[misc]
    """Where the configuration and the home folder are.

    A run that uses it holds the home's lock (``corpus_index.homelock``) from its start to its
    end, as `corpus sync` does: a run launched from the UI or by the daemon and a sync never
    embed the same inputs at once. Sensors use it without a run and take no lock. With the
    in-process executor (``definitions.py``) it is set up once per run; an executor that runs
    each step in a process of its own would hold the lock step by step.
    """

    config_path: str
    home: str
    registry_url: str | None = None  # CORPUS_REGISTRY: the registry's PostgreSQL database
    # CORPUS_STORAGE (s3://bucket/prefix) or None; its endpoint and credentials stay in the
    # process environment, out of the run's recorded configuration
    storage: str | None = None
    lock_wait_s: float = LOCK_WAIT_S

    def settings(self) -> Settings:
        return Settings(
            config_path=Path(self.config_path),
            home=Path(self.home),
            registry_url=self.registry_url,
            storage=self.storage,
        )

    def open_home(self) -> Home:
        return Home(self.settings())

    @contextlib.contextmanager
    def yield_for_execution(self, context: dg.InitResourceContext) -> Iterator[Any]:
        run = context.run
        if run is None:  # a sensor tick, or a resource built outside a run
            yield self
            return
        home = self.settings().home
        busy = holder(home)  # '' when nobody holds it
        mine = busy.startswith(f"pid {os.getpid()} ")  # the CLI command that runs this run
        if busy and not mine and context.log is not None:
            context.log.info(f"waiting up to {self.lock_wait_s:g} s for {busy} to release {home}")
        with home_lock(home, f"run {run.run_id[:8]} of {run.job_name}", wait_s=self.lock_wait_s):
            yield self
