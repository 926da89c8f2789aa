"""What the HTTP app holds for its lifetime: the home, a searcher whose query embedding is
bounded by a semaphore, the key store, the cursor codec, the result audit, the metrics, and a
background writer for query traces (one writer, off the request path)."""

from __future__ import annotations

import logging
import os
import queue
import secrets
import threading
from typing import Any

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
from corpus_index.registry import Generation
from corpus_index.search import Searcher
from corpus_index.traces import TraceStore

log = logging.getLogger("corpus_index.http")
TRACE_QUEUE = 1000


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


class TraceWriter:
    """Stores query traces in the registry from one background thread, in arrival order."""

    def __init__(self, store: TraceStore) -> None:
        self.store = store
        self.dropped = 0
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(maxsize=TRACE_QUEUE)
        self._thread = threading.Thread(target=self._run, name="trace-writer", daemon=True)
        self._thread.start()

    def put(self, **record: Any) -> None:
        try:
            self._queue.put_nowait(record)
        except queue.Full:
            self.dropped += 1  # a slow registry must not slow the searches

    def close(self, timeout_s: float = 10.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while (record := self._queue.get()) is not None:
            try:
                self.store.record(**record)
            except RetryableError as exc:
                log.warning("query trace not stored: %s", exc)


class Service:
    """Everything the routes share."""

    def __init__(self, settings: Settings, *, record_traces: bool = True) -> None:
        self.settings = settings
        self.corpus = Home(settings)
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
        self.traces = TraceWriter(TraceStore(settings.registry_path)) if record_traces else None

    def close(self) -> None:
        if self.traces is not None:
            self.traces.close()
