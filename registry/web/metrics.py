"""prometheus_client's multiprocess mode: metrics added up across gunicorn's workers.

Under gunicorn every worker is a process of its own, and Prometheus scrapes
whichever worker the connection lands on; so a server runs
prometheus_client's multiprocess mode: ``PROMETHEUS_MULTIPROC_DIR`` is set
before prometheus_client is first imported (``registry.web.metricsdir``),
each worker writes its values to files there, and any worker's
``/metrics`` adds them all up (``exposition``). A worker that exits is
marked gone (``worker_exited``, gunicorn's ``child_exit``), so that its live
gauges no longer count.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest, multiprocess
from prometheus_client.registry import Collector

from registry.web.metricsdir import MULTIPROCESS_VARIABLE

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def multiprocess_mode() -> bool:
    """Whether values are shared through files between worker processes."""
    return bool(os.environ.get(MULTIPROCESS_VARIABLE))


def exposition(registry: CollectorRegistry, facts: tuple[Collector, ...]) -> bytes:
    """The text format of ``registry``'s metrics (of every worker's, when
    there are several) and of ``facts``, collectors read at scrape time."""
    if multiprocess_mode():
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    return generate_latest(_ScrapeRegistry(registry, facts))


class _ScrapeRegistry:
    """A registry's metrics plus scrape-time facts, without registering the
    facts permanently (collectors can be registered only once)."""

    def __init__(self, registry: CollectorRegistry, facts: tuple[Collector, ...]) -> None:
        self._registry = registry
        self._facts = facts

    def collect(self) -> Iterator[Any]:
        yield from self._registry.collect()
        for fact in self._facts:
            yield from fact.collect()


def worker_exited(pid: int) -> None:
    """Tell multiprocess mode a worker is gone (gunicorn's ``child_exit``)."""
    if multiprocess_mode():
        multiprocess.mark_process_dead(pid)
