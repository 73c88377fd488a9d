"""Prometheus metrics: what ``GET /metrics`` reports.

Each application has its own ``Metrics`` (so that two applications in one
test process count separately). Under gunicorn ``prompt-registry serve``
runs prometheus_client's multiprocess mode, so that any worker's
``/metrics`` adds up every worker's values (``registry.web.metrics``).

Values that are facts about the registry rather than counts of events (the
last sync, whether Redis answers) are read at scrape time by a collector, so
every worker reports the same.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from registry.store.mirror import READINESS_STATES
from registry.web.metrics import exposition

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_GIT_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class Metrics:
    """The registry's counters, histograms and gauges."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "prompt_registry_http_requests",
            "HTTP requests answered, by route, method and status",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.request_seconds = Histogram(
            "prompt_registry_http_request_duration_seconds",
            "Time to answer an HTTP request, by route",
            ["route"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.cache_lookups = Counter(
            "prompt_registry_cache_lookups",
            "Definition lookups by cache tier (memory, redis) and result (hit, miss)",
            ["tier", "result"],
            registry=self.registry,
        )
        self.redis_errors = Counter(
            "prompt_registry_redis_errors",
            "Redis calls that failed (timeouts, refused connections, errors), by operation",
            ["operation"],
            registry=self.registry,
        )
        self.redis_up = Gauge(
            "prompt_registry_redis_up",
            "1 while this worker's Redis calls succeed, 0 during an outage",
            registry=self.registry,
            multiprocess_mode="livemin",
        )
        self.git_read_seconds = Histogram(
            "prompt_registry_git_read_duration_seconds",
            "Time to read one object (a file or a tree) from git",
            buckets=_GIT_BUCKETS,
            registry=self.registry,
        )
        self.definition_loads = Counter(
            "prompt_registry_definition_loads",
            "Definitions read, validated and compiled from git, by outcome (valid, invalid)",
            ["outcome"],
            registry=self.registry,
        )
        self.release_events = Counter(
            "prompt_registry_release_events",
            "Release-change announcements between replicas, by direction (sent, received)",
            ["direction"],
            registry=self.registry,
        )

        # Children by label values, kept here: prometheus_client's labels()
        # validates and locks on every call, a cost on every request.
        self._request_children: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    def request_answered(self, route: str, method: str, status: int, seconds: float | None) -> None:
        """Count one answered request and, when it was timed, its duration."""
        key = (route, method, status)
        children = self._request_children.get(key)
        if children is None:
            children = (self.requests.labels(route, method, str(status)), self.request_seconds.labels(route))
            self._request_children[key] = children
        children[0].inc()
        if seconds is not None:
            children[1].observe(seconds)

    def exposition(self, *facts: Collector) -> bytes:
        """The text format of every metric, across all workers when there are several."""
        return exposition(self.registry, facts)


class SyncFacts(Collector):
    """The mirror's sync status, read when scraped."""

    def __init__(self, status: Callable[[], Any]) -> None:
        self._status = status

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        status = self._status()
        now = time.time()
        success = GaugeMetricFamily(
            "prompt_registry_sync_last_success_timestamp_seconds",
            "When the last successful fetch from the remote finished (0: never)",
        )
        success.add_metric([], status.last_success or 0.0)
        age = GaugeMetricFamily(
            "prompt_registry_sync_age_seconds", "Seconds since the last successful fetch (-1: never)"
        )
        age.add_metric([], now - status.last_success if status.last_success else -1.0)
        failing = GaugeMetricFamily("prompt_registry_sync_failing", "1 when the latest fetch attempt failed")
        failing.add_metric([], 1.0 if status.last_error else 0.0)
        failing_for = GaugeMetricFamily(
            "prompt_registry_sync_failing_seconds",
            "Seconds the fetches have been failing without a success since (0: they are not)",
        )
        failing_for.add_metric([], status.failing_for(now))
        readiness = GaugeMetricFamily(
            "prompt_registry_readiness",
            "1 for the state /readyz reports: ready, not-synced (no successful fetch yet) or"
            " sync-failing (fetches failing for longer than REGISTRY_SYNC_FAILING_LIMIT)",
            labels=["state"],
        )
        current = status.state(now)
        for state in READINESS_STATES:  # each reported, so that a query sees 0 too
            readiness.add_metric([state], 1.0 if state == current else 0.0)
        cleared = CounterMetricFamily(
            "prompt_registry_sync_stale_locks_cleared",
            "Lock files that a killed git left in the mirror, cleared before a fetch",
        )
        cleared.add_metric([], status.stale_locks_cleared)
        yield success
        yield age
        yield failing
        yield failing_for
        yield readiness
        yield cleared
