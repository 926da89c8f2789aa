"""The service's Prometheus metrics (seed "vector DB": the numbers an operator watches).

Counters and histograms are updated by the request handlers; index freshness and generation
completeness are gauges computed when ``/metrics`` is scraped, from the registry and the source
folders. Each app has its own collector registry, so two apps in one process never share counts.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from corpus_index import gates
from corpus_index.home import Home

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_ROWS_CHECK = gates.check_key("index_generation", "row_counts_reconcile")
# the source folders are walked for freshness at most this often, however often (and by whom,
# where serve.open_metrics lets /metrics answer without a key) the endpoint is scraped; a
# scrape in between reads the last walk
FRESHNESS_REFRESH_S = 30.0


class ServiceMetrics:
    """Every metric the service exports, in one registry."""

    def __init__(self, corpus: Home) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.latency = Histogram(
            "corpus_search_latency_seconds",
            "Time to answer a search request, by endpoint, mode and namespace.",
            ["endpoint", "mode", "namespace"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.searches = Counter(
            "corpus_searches",
            "Search requests answered, by endpoint, mode and namespace.",
            ["endpoint", "mode", "namespace"],
            registry=r,
        )
        self.zero_results = Counter(
            "corpus_zero_result_searches",
            "Searches that returned no hit (zero-result rate = this / corpus_searches_total).",
            ["endpoint", "mode", "namespace"],
            registry=r,
        )
        self.embedding_failures = Counter(
            "corpus_embedding_failures",
            "Query embeddings that failed (the model errored or refused the query).",
            ["namespace"],
            registry=r,
        )
        self.unauthorized = Counter(
            "corpus_unauthorized_results",
            "Returned hits the principal may not see, found by re-checking every hit (target 0).",
            ["namespace"],
            registry=r,
        )
        self.stale = Counter(
            "corpus_stale_results",
            "Returned hits of a deleted source or a superseded source version (target 0).",
            ["namespace", "reason"],
            registry=r,
        )
        self.audited = Counter(
            "corpus_audited_results",
            "Returned hits re-checked against their principal (after the response).",
            ["namespace"],
            registry=r,
        )
        self.dropped = Counter(
            "corpus_background_dropped",
            "Audits or traces dropped because the background queue was full.",
            ["work"],
            registry=r,
        )
        self.problems = Counter(
            "corpus_http_problems",
            "Requests answered with a problem document, by type.",
            ["type", "status"],
            registry=r,
        )
        for ns in corpus.config.namespaces:  # exported at 0 from the start: these should stay 0
            self.unauthorized.labels(ns)
            self.embedding_failures.labels(ns)
            for reason in ("deleted", "superseded"):
                self.stale.labels(ns, reason)
        r.register(IndexCollector(corpus))


class IndexCollector(Collector):
    """Index freshness and generation completeness, per namespace, read at scrape time."""

    def __init__(self, corpus: Home, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.corpus = corpus
        self._clock = clock
        self._walked: dict[tuple[str, float], tuple[float, float]] = {}  # -> (when, seconds)
        self._walking = threading.Lock()

    def _freshness(self, namespace: str, served_at: float) -> float:
        """:func:`freshness_seconds` of ``namespace``'s folders since ``served_at``, walked
        again only when the last walk for the same served time is FRESHNESS_REFRESH_S old
        (one walk at a time: scrapes arriving together wait for it, then read it)."""
        with self._walking:
            now = self._clock()
            key = (namespace, served_at)
            last = self._walked.get(key)
            if last is not None and now - last[0] < FRESHNESS_REFRESH_S:
                return last[1] + (now - last[0]) if last[1] > 0 else 0.0
            folders = [c.path for c in self.corpus.config.collections_in(namespace)]
            seconds = freshness_seconds(folders, served_at)
            self._walked = {k: v for k, v in self._walked.items() if k[0] != namespace}
            self._walked[key] = (now, seconds)
            return seconds

    def collect(self) -> Iterator[GaugeMetricFamily]:
        fresh = GaugeMetricFamily(
            "corpus_index_freshness_seconds",
            "How long the oldest source change not yet in the ACTIVE generation has waited "
            "(0: every change on disk is served).",
            labels=["namespace"],
        )
        complete = GaugeMetricFamily(
            "corpus_generation_completeness_ratio",
            "Rows of the ACTIVE generation over the embeddable inputs it should hold.",
            labels=["namespace", "generation"],
        )
        active = GaugeMetricFamily(
            "corpus_active_generation",
            "1 when the namespace has an ACTIVE generation, else 0.",
            labels=["namespace"],
        )
        for ns in self.corpus.config.namespaces:
            gen = self.corpus.registry.active(ns, cached=True)
            active.add_metric([ns], 1.0 if gen else 0.0)
            if gen is None:
                continue
            served_at = gen.updated_at.replace(tzinfo=gen.updated_at.tzinfo or dt.UTC)
            fresh.add_metric([ns], self._freshness(ns, served_at.timestamp()))
            rows = gen.checks.get(_ROWS_CHECK, {})
            expected, actual = rows.get("expected_rows"), rows.get("actual_rows")
            if isinstance(expected, int) and isinstance(actual, int):
                complete.add_metric([ns, gen.id], actual / expected if expected else 1.0)
        yield active
        yield fresh
        yield complete


def freshness_seconds(folders: list[Path], served_at: float, *, now: float | None = None) -> float:
    """Seconds since the oldest file under ``folders`` changed after ``served_at`` (0 if none)."""
    oldest: float | None = None
    for folder in folders:
        for root, _, files in os.walk(folder):
            for name in files:
                try:
                    mtime = os.stat(os.path.join(root, name)).st_mtime
                except OSError:
                    continue
                if mtime > served_at and (oldest is None or mtime < oldest):
                    oldest = mtime
    if oldest is None:
        return 0.0
    return max(0.0, (now if now is not None else time.time()) - oldest)
