"""Expensive requests take turns, so that cheap ones never queue behind them.

A gevent worker runs one greenlet at a time and switches only when one waits:
a request that computes for 10 ms holds every other connection of its worker
for 10 ms. Most requests cost well under a millisecond; a few cost much more
(a body of a megabyte to parse, a template that loops until its clock). Left
alone, sixteen clients sending those keep every greenlet's turn long, and a
gateway's ``GET`` waits behind all of them.

``SlowLane`` gives each worker one lane for such work. A request enters it
before its application code runs when its body is larger than
``HEAVY_BODY_BYTES``, and a render enters it once it has run
``SLICE_SECONDS``: the application hands in the hook its long work calls
between slices (the registry's: ``registry.rendering.pausing``). In
the lane a request waits for its turn, one at a time, and a long render
yields after each slice, so that every cheap request ready in the meantime
goes first. A request in the lane holds its turn until it is answered;
waiting for a turn counts against its render deadline like any other time.

Under gthread workers the same lane keeps the expensive requests to one
thread of each worker's pool, leaving the others to cheap requests.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any, Protocol

# A render request of a few kilobytes parses in microseconds; one of 64 KiB
# or more costs milliseconds (a 1 MiB body of small objects: 8 ms to parse).
HEAVY_BODY_BYTES = 64 * 1024
# How long a render runs before it joins the lane, and how long each of its
# turns lasts after that: about twenty cheap requests.
SLICE_SECONDS = 0.005
BODY_BYTES_KEY = "registry.body_bytes"
"""The WSGI environ key under which ``registry.web.bodydeadline`` leaves the
size of the body it read."""

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class Pausing(Protocol):
    """A context in which long work calls ``pause`` (with its deadline, a
    ``time.monotonic()`` value) every ``every`` seconds it runs."""

    def __call__(self, pause: Callable[[float], None], *, every: float) -> AbstractContextManager[None]: ...


class SlowLane:
    """WSGI middleware: one lane per worker for requests that cost much CPU."""

    def __init__(self, app: WSGIApp, *, pausing: Pausing) -> None:
        self._app = app
        self._pausing = pausing
        # Created after gevent patched the standard library (registry.web.geventpatch),
        # this is gevent's semaphore under gevent workers: waiting yields.
        self._turn = threading.BoundedSemaphore(1)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        ticket = _Ticket(self._turn)
        if environ.get(BODY_BYTES_KEY, 0) > HEAVY_BODY_BYTES:
            ticket.wait(deadline=None)
        try:
            with self._pausing(ticket.pause, every=SLICE_SECONDS):
                # Flask builds the whole answer here (no view streams), so the
                # work is done when this returns.
                return self._app(environ, start_response)
        finally:
            ticket.leave()


class _Ticket:
    """One request's place in the lane."""

    __slots__ = ("_turn", "_holding")

    def __init__(self, turn: threading.BoundedSemaphore) -> None:
        self._turn = turn
        self._holding = False

    def wait(self, deadline: float | None) -> None:
        """Wait for the lane, at most until ``deadline`` (a ``time.monotonic()``
        value), then let every request that is ready go first: a turn passed
        on from one expensive request to the next would otherwise run before
        the worker looks for new input."""
        if deadline is None:
            self._holding = self._turn.acquire()
        else:
            self._holding = self._turn.acquire(timeout=max(0.0, deadline - time.monotonic()))
        if self._holding:
            _let_ready_requests_run()

    def pause(self, deadline: float) -> None:
        """A render ran a slice: enter the lane (once), or let every request
        that is ready go first. A render whose deadline passes while it
        waits fails at its next clock check, as any slow render does."""
        if self._holding:
            _let_ready_requests_run()
        else:
            self.wait(deadline)

    def leave(self) -> None:
        if self._holding:
            self._holding = False
            self._turn.release()


def _let_ready_requests_run() -> None:
    """Under gevent, go round the event loop once: poll for input and run
    every request that is ready. ``sleep(0)`` would not do: it may resume
    this greenlet before the loop polls (gevent's documentation of
    ``gevent.sleep``); any positive time waits for the next turn of the loop.
    Under threads, a sleep this short gives up the interpreter lock."""
    time.sleep(1e-6)  # gevent.sleep once gevent patched time
