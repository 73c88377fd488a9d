"""``EventHub``: live subscribers of tasks' event logs, fed by one poller per process.

Any process may append to a task's log (the one that runs its step, another
replica, a worker), so subscribers follow the database, not this process's
memory. One hub per worker process, on its event loop, reads the store for
every task that has subscribers: one query per poll interval
(``events_in``, every subscriber's position at once), run in a thread of
its own so that the loop never waits for the database, then hands each
subscriber the entries it has not seen through a queue of its own.

Why an event loop and not greenlets: a subscriber is a queue and a
coroutine waiting on it, a few kilobytes, and holds no thread however long
it watches; the loop also serves the Agent Protocol's Flask routes through
a2wsgi's thread pool, so the service needs neither gevent's patching of the
standard library (which the executor's own event loop and the database
drivers would run under) nor a thread per open stream. bench/sse.py
measures it (BENCHMARKS.md).

A subscriber's queue is bounded (``buffer`` entries): a poll hands it what
fits, and the next poll goes on from there. One whose queue is still full
when more entries come (a client that stopped reading its socket: its
stream waits for the socket, and takes nothing from the queue) is dropped,
its queue emptied, rather than held in memory or allowed to slow the
others. Nothing is lost by that: the log is durable, and the client
resumes after the last entry it got (``Last-Event-ID``).

Two kinds of subscriber follow one hub: the Agent Protocol's SSE route
(``registry.protocol.asgi``) and A2A's streamed operations
(``registry.a2a.stream``), which end their streams sooner when they read
an entry that ends them (an ``input-required`` state). Either takes the
entries with ``follow`` (or ``subscribe``, ``Subscription.next`` and
``unsubscribe``), so however many streams watch a task, its log is read
once per poll interval in the process.

A subscription ends after the task's last entry: an ``outcome``, or a
``state`` entry of a finished task once a poll finds nothing after it
(state and outcome are appended together). A subscription to a task that
was already over when it began ends when it has caught up and nothing new
came for ``settle_seconds`` (a task finished just before, whose last
entries are still being written, gets them).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Collection
from typing import Protocol

import anyio

from registry.errors import RegistryError
from registry.protocol import events
from registry.protocol.records import TaskEvent
from registry.protocol.states import TASK_FINISHED

log = logging.getLogger("registry.protocol")

POLL_SECONDS = 0.05
BUFFER = 256
SETTLE_SECONDS = 2.0
_BATCH = 100
"""The most entries of one task read for one subscriber position per poll."""


class Reader(Protocol):
    """``TaskStore.events_in``: entries of several tasks at once, by window."""

    def __call__(self, windows: Collection[tuple[str, int]], *, batch: int) -> list[TaskEvent]: ...


def is_last(event: TaskEvent) -> bool:
    """Whether the entry ends a task's log: its outcome, or its final state."""
    return event.kind == events.OUTCOME or (event.kind == events.STATE and event.data.get("status") in TASK_FINISHED)


class Subscription:
    """One subscriber of one task: the entries after ``after``, in order, then None."""

    def __init__(self, task_id: str, after: int, *, buffer: int, ends_when_idle: float | None) -> None:
        self.task_id = task_id
        self.after = after
        """The last entry handed to the subscriber."""
        self.dropped = False
        """Whether it was dropped for not reading fast enough."""
        self.ends_when_idle = ends_when_idle
        """When set, the monotonic time after which a poll that finds nothing new ends it."""
        self._buffer = buffer
        # One place more than the buffer: for the None that ends it.
        self._queue: asyncio.Queue[TaskEvent | None] = asyncio.Queue(buffer + 1)

    async def next(self) -> TaskEvent | None:
        """The next entry; None when the subscription is over (the log's end, or dropped)."""
        return await self._queue.get()

    # The hub's side: what it hands over, and how it ends a subscription.

    @property
    def full(self) -> bool:
        return self._queue.qsize() >= self._buffer

    def offer(self, event: TaskEvent) -> bool:
        """Queue ``event``; False, queueing nothing, when the buffer is full."""
        if self.full:
            return False
        self._queue.put_nowait(event)
        self.after = event.seq
        return True

    def drop(self) -> None:
        self.dropped = True
        while not self._queue.empty():
            self._queue.get_nowait()
        self._queue.put_nowait(None)

    def end(self) -> None:
        self._queue.put_nowait(None)


class EventHub:
    """Every subscription of one process, and the poller that feeds them.

    ``run`` is the poller: start it once, on the event loop the
    subscriptions are made on (the ASGI application's lifespan does), and
    cancel it to stop. ``subscribe``, ``unsubscribe`` and ``follow`` are
    called on that loop: a subscription made where no poller runs gets nothing."""

    def __init__(
        self,
        read: Reader,
        *,
        poll_seconds: float = POLL_SECONDS,
        buffer: int = BUFFER,
        settle_seconds: float = SETTLE_SECONDS,
    ) -> None:
        self._read = read
        self.poll_seconds = poll_seconds
        self.buffer = buffer
        self.settle_seconds = settle_seconds
        self._tasks: dict[str, list[Subscription]] = {}
        self._wanted = asyncio.Event()
        # One read at a time, in one thread: the poller never waits for a second.
        self._reader = anyio.CapacityLimiter(1)
        self.dropped = 0
        """Subscribers dropped for not reading fast enough, since the hub was made."""
        self.polls = 0
        """Reads of the store, since the hub was made."""
        self.closing: anyio.Event | None = None
        """Set when the server shuts down (each stream's response sets it
        when it sees the server stop): every subscription then ends, and its
        response with it, cleanly. Made by ``run``."""

    @property
    def subscribers(self) -> int:
        return sum(len(subscriptions) for subscriptions in self._tasks.values())

    def subscribe(self, task_id: str, after: int, *, finished: bool = False) -> Subscription:
        """Follow the task's log after entry ``after``. ``finished``: the task
        was over when the subscriber came, so its stream ends once caught up."""
        settle = time.monotonic() + self.settle_seconds if finished else None
        subscription = Subscription(task_id, after, buffer=self.buffer, ends_when_idle=settle)
        self._tasks.setdefault(task_id, []).append(subscription)
        self._wanted.set()
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        """Stop feeding ``subscription`` (its reader is gone); nothing if it was not fed."""
        subscriptions = self._tasks.get(subscription.task_id, [])
        if subscription in subscriptions:
            subscriptions.remove(subscription)
        if not subscriptions:
            self._tasks.pop(subscription.task_id, None)

    async def follow(self, task_id: str, after: int, *, finished: bool = False) -> AsyncGenerator[TaskEvent, None]:
        """The task's entries after entry ``after``, as a subscription (``subscribe``)
        hands them, until it ends (the log's end, the subscriber dropped, the
        server stopping). Subscribed at the first entry asked for, unsubscribed
        when the iteration stops: close the iterator (``contextlib.aclosing``)
        to stop following at once rather than when it is collected."""
        subscription = self.subscribe(task_id, after, finished=finished)
        try:
            while (event := await subscription.next()) is not None:
                yield event
        finally:
            self.unsubscribe(subscription)

    async def run(self) -> None:
        """Poll the store for every task with subscribers, until cancelled;
        end every subscription when ``closing`` is set."""
        self.closing = closing = anyio.Event()
        async with anyio.create_task_group() as group:
            group.start_soon(self._end_all_when, closing)
            await self._poll()

    async def _end_all_when(self, closing: anyio.Event) -> None:
        await closing.wait()
        for subscriptions in list(self._tasks.values()):
            for subscription in subscriptions:
                subscription.end()
        self._tasks.clear()

    async def _poll(self) -> None:
        while True:
            if not self._tasks:
                self._wanted.clear()
                await self._wanted.wait()
            windows = self._windows()
            try:
                found = await anyio.to_thread.run_sync(self._read_all, windows, limiter=self._reader)
            except RegistryError as exc:
                # The database is away: subscribers wait, and get everything once it is back.
                log.warning("cannot read the task events: %s", exc)
            else:
                self._deliver(found)
            await anyio.sleep(self.poll_seconds)

    def _windows(self) -> list[tuple[str, int]]:
        """Each watched task with each distinct position of its subscribers."""
        return [(task_id, after) for task_id, subs in self._tasks.items() for after in sorted({s.after for s in subs})]

    def _read_all(self, windows: list[tuple[str, int]]) -> dict[str, list[TaskEvent]]:
        self.polls += 1
        found: dict[str, dict[int, TaskEvent]] = {}
        for event in self._read(windows, batch=_BATCH):
            found.setdefault(event.task_id, {})[event.seq] = event
        return {task_id: [by_seq[seq] for seq in sorted(by_seq)] for task_id, by_seq in found.items()}

    def _deliver(self, found: dict[str, list[TaskEvent]]) -> None:
        now = time.monotonic()
        for task_id, subscriptions in list(self._tasks.items()):
            entries = found.get(task_id, [])
            for subscription in list(subscriptions):
                if not self._feed(subscription, entries, now):
                    self.unsubscribe(subscription)

    def _feed(self, subscription: Subscription, entries: list[TaskEvent], now: float) -> bool:
        """Hand ``subscription`` what it has not seen of ``entries``, as much as
        its queue takes (the next poll reads on from where it is); whether it
        goes on. One whose queue is still full when more entries come has not
        read for a whole poll interval: it is dropped."""
        fresh = [event for event in entries if event.seq > subscription.after]
        if fresh and subscription.full:
            subscription.drop()
            self.dropped += 1
            log.info("dropped a subscriber of task %s that read too slowly", subscription.task_id)
            return False
        for event in fresh:
            if event.seq != subscription.after + 1 or not subscription.offer(event):
                break  # the next read starts where this subscriber is
            if event.kind == events.OUTCOME:
                subscription.end()
                return False
            if is_last(event):
                # The outcome comes in the same write, if there is one: ended by the next empty poll.
                subscription.ends_when_idle = now
        idle = subscription.ends_when_idle
        if not fresh and idle is not None and now >= idle:
            subscription.end()
            return False
        return True
