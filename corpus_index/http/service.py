"""What the HTTP app holds for its lifetime: the home, a searcher whose query embedding is
bounded by a semaphore, the key store, the cursor codec, the result audit, the metrics, and one
background thread that stores query traces and audits returned hits off the request path."""

from __future__ import annotations

import logging
import os
import queue
import secrets
import threading
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from corpus_index.config import Settings
from corpus_index.errors import IncompatibleEmbedderError, RetryableError
from corpus_index.home import Home
from corpus_index.http.audit import ResultAudit
from corpus_index.http.cursor import CursorCodec
from corpus_index.http.keys import KeyStore
from corpus_index.http.metrics import ServiceMetrics
from corpus_index.http.problems import BUSY, Problem
from corpus_index.registry import Generation, open_registry
from corpus_index.search import Searcher
from corpus_index.traces import TraceStore

log = logging.getLogger("corpus_index.http")
QUEUE = 1000


class BoundedSearcher(Searcher):
    """A ``Searcher`` whose query embeddings run at most ``limit`` at a time, so a small machine's
    model is not oversubscribed; a request that waits past ``wait_s`` is told to retry."""

    def __init__(self, corpus: Home, *, limit: int, wait_s: float, metrics: ServiceMetrics):
        super().__init__(corpus)
        self._slots = threading.BoundedSemaphore(limit)
        self._wait_s = wait_s
        self._metrics = metrics

    def embed_query(self, query: str, generation: Generation) -> npt.NDArray[np.float32]:
        if not self._slots.acquire(timeout=self._wait_s):
            raise Problem(BUSY, f"every embedding slot stayed busy for {self._wait_s:g} s")
        try:
            return super().embed_query(query, generation)
        except IncompatibleEmbedderError:
            raise
        except Exception:
            self._metrics.embedding_failures.labels(generation.spec.namespace).inc()
            raise
        finally:
            self._slots.release()


class Background:
    """Work done after the response, in arrival order, by one thread: storing query traces
    (one registry writer) and auditing returned hits. A full queue drops work and counts it,
    so neither a slow registry nor the audit ever slows a search."""

    def __init__(self, metrics: ServiceMetrics) -> None:
        self._metrics = metrics
        self._queue: queue.Queue[Callable[[], None] | None] = queue.Queue(maxsize=QUEUE)
        self._thread = threading.Thread(target=self._run, name="corpus-background", daemon=True)
        self._thread.start()

    def submit(self, work: Callable[[], None], *, what: str) -> None:
        try:
            self._queue.put_nowait(work)
        except queue.Full:
            self._metrics.dropped.labels(what).inc()

    def close(self, timeout_s: float = 10.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while (work := self._queue.get()) is not None:
            try:
                work()
            except RetryableError as exc:
                log.warning("background work skipped: %s", exc)
            except Exception:
                log.exception("background work failed")


REGISTRY_WAIT_S = 5.0


class Service:
    """Everything the routes share."""

    def __init__(self, settings: Settings, *, record_traces: bool = True) -> None:
        self.settings = settings
        self.corpus = Home(settings)
        # a request waits this long at most for a registry another process holds (a sync's
        # write): then it is answered 503 busy, its worker free again
        self.corpus.registry = open_registry(settings, lock_timeout_s=REGISTRY_WAIT_S)
        self.serve = self.corpus.config.serve
        self.metrics = ServiceMetrics(self.corpus)
        self.searcher = BoundedSearcher(
            self.corpus,
            limit=self.serve.max_concurrent_embeddings,
            wait_s=self.serve.embedding_wait_s,
            metrics=self.metrics,
        )
        self.keys = KeyStore(self.serve)
        secret = os.environ.get(self.serve.cursor_secret_env or "", "")
        self.cursors = CursorCodec(secret.encode() if secret else secrets.token_bytes(32))
        self.audit = ResultAudit(self.corpus)
        self.traces = (
            TraceStore(open_registry(settings, lock_timeout_s=REGISTRY_WAIT_S))
            if record_traces
            else None
        )
        self.background = Background(self.metrics)

    def close(self) -> None:
        self.background.close()
