"""The one resource the assets use: the corpus home and its configuration."""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import dagster as dg

from assets.processes import PROCESS_TAG, run_worker
from corpus_index.config import Settings
from corpus_index.errors import RetryableError
from corpus_index.home import Home
from corpus_index.homelock import EXCLUSIVE_TAGS, across_of, holder, home_lock_of, scope_lock

# how long a run waits for the home's lock (a `corpus sync`, or another run, in flight)
# before it fails naming the holder
LOCK_WAIT_S = 1800.0
# how a step's log says it took and gave up its scope locks (runs sharing the home)
HOLDING = "holding scope locks"
RELEASING = "releasing scope locks"
# a step that failed for a transient reason (an object store throttling or not answering, an
# embedding API's 429 or 5xx, a lost lock) runs again this many times, this long after
STEP_RETRIES = 2
STEP_RETRY_WAIT_S = 30


class CorpusResource(dg.ConfigurableResource):  # type: ignore[misc]
    """Where the configuration and the home folder are.

    A run that uses it holds the home's lock (``corpus_index.homelock``) from its start to its
    end, as `corpus sync` does: a run launched from the UI or by the daemon and a sync never
    embed the same inputs at once. Sensors use it without a run and take no lock. With the
    in-process executor (``definitions.py``) it is set up once per run. With
    ``runs_share_home`` (the multiprocess executor: each step a process of its own, and runs of
    different collections side by side) each step holds the home's lock shared, so runs work
    beside each other while a sync or a promotion waits for all of them, and the step holds
    the scope locks of what it writes (``writes``); a run of a job that works on the whole
    home (tagged ``EXCLUSIVE_TAGS``: compaction, purge, retirement, re-processing) still holds
    it exclusively. With the registry in PostgreSQL, the home's lock is held there too, so
    the runs of other machines are waited for as well.
    """

    config_path: str
    home: str
    registry_url: str | None = None  # CORPUS_REGISTRY: the registry's PostgreSQL database
    # CORPUS_STORAGE (s3://bucket/prefix) or None; its endpoint and credentials stay in the
    # process environment, out of the run's recorded configuration
    storage: str | None = None
    lock_wait_s: float = LOCK_WAIT_S
    runs_share_home: bool = False

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
        if PROCESS_TAG not in run.tags and context.instance is not None:
            # launched by the daemon or the UI: the run names its run worker, so that
            # orphaned_run_sensor fails it if that process is killed (a command tags its own)
            worker = run_worker(step_processes=self.runs_share_home)
            context.instance.add_run_tags(run.run_id, {PROCESS_TAG: worker.tag})
        settings = self.settings()
        busy = holder(settings.home)  # '' when nobody holds it
        mine = busy.startswith(f"pid {os.getpid()} ")  # the CLI command that runs this run
        if busy and not mine and context.log is not None:
            context.log.info(
                f"waiting up to {self.lock_wait_s:g} s for {busy} to release {settings.home}"
            )
        with home_lock_of(
            settings,
            f"run {run.run_id[:8]} of {run.job_name}",
            wait_s=self.lock_wait_s,
            shared=self.runs_share_home and not holds_home_alone(run.tags),
        ):
            yield self

    @contextlib.contextmanager
    def holding(self, scopes: list[str], purpose: str) -> Iterator[None]:
        """Hold the scope locks ``scopes`` of this home, in the order given."""
        home = self.settings().home
        # with the registry in PostgreSQL, its advisory locks keep out runs on other machines
        across = across_of(self.registry_url)
        with contextlib.ExitStack() as stack:
            for scope in scopes:
                stack.enter_context(
                    scope_lock(home, scope, purpose, wait_s=self.lock_wait_s, across=across)
                )
            yield


def holds_home_alone(tags: Mapping[str, str]) -> bool:
    """Whether a run of these tags holds the home exclusively even where runs share it (its
    job is tagged :data:`~corpus_index.homelock.EXCLUSIVE_TAGS`)."""
    return all(tags.get(k) == v for k, v in EXCLUSIVE_TAGS.items())


F = TypeVar("F", bound=Callable[..., Any])


def _scope(kind: str, key: str | dg.MultiPartitionKey) -> str:
    if isinstance(key, dg.MultiPartitionKey):
        dimension = "profile" if kind == "generation" else "collection"
        return f"{kind}:{key.keys_by_dimension[dimension]}"
    return f"{kind}:{key}"


def writes(*kinds: str) -> Callable[[F], F]:
    """Decorate an asset's compute function with what its partition writes (``collection``:
    the collection's files and vectors; ``generation``: the profile's generation table), held
    as scope locks while it runs, so two runs sharing the home never write one thing at once.

    A :class:`~corpus_index.errors.RetryableError` the step raises (the object store failed
    a request once its client's own retries were spent, the embedding API kept throttling, a
    lock was lost) asks Dagster to run the step again, ``STEP_RETRIES`` times,
    ``STEP_RETRY_WAIT_S`` apart, with its locks given up meanwhile; a permanent error fails
    it at once."""

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(context: dg.AssetExecutionContext, *args: Any, **kwargs: Any) -> Any:
            try:
                return held(context, *args, **kwargs)
            except RetryableError as exc:
                raise dg.RetryRequested(
                    max_retries=STEP_RETRIES, seconds_to_wait=STEP_RETRY_WAIT_S
                ) from exc

        def held(context: dg.AssetExecutionContext, *args: Any, **kwargs: Any) -> Any:
            corpus = kwargs.get("corpus") or next(a for a in args if isinstance(a, CorpusResource))
            scopes = [_scope(kind, context.partition_key) for kind in kinds]
            purpose = f"run {context.run.run_id[:8]} step {context.op_def.name}"
            asked = time.monotonic()
            with corpus.holding(scopes, purpose):
                if not corpus.runs_share_home:  # the run holds the home alone: nobody waits
                    return fn(context, *args, **kwargs)
                # both lines are written while the locks are held, so the span between them
                # lies inside the hold: two runs' spans of one scope never overlap
                context.log.info(
                    f"{HOLDING} {', '.join(scopes)} (waited {time.monotonic() - asked:.1f} s)"
                )
                try:
                    return fn(context, *args, **kwargs)
                finally:
                    context.log.info(f"{RELEASING} {', '.join(scopes)}")

        return wrapper  # type: ignore[return-value]

    return decorate
