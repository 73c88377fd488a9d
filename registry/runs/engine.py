"""DBOS in this process: the task queue, the segment workflow, and their lifecycle.

A task runs as a chain of **segments**, each a workflow with a stable id
(``task:<task id>:<segment>``): a segment runs steps of the task until the
service says to stop (an action awaits a decision, the run is over, the
task was cancelled, or a stepped task's one step is done). A decision or
the next stepped step enqueues the next segment. So a task waiting hours
for an approval holds no queue slot and no thread, and DBOS's own
``recv`` (which would hold both) is not needed.

The service enqueues a segment **in its own transaction** (``enqueue_in``),
with the change of state that calls for it: DBOS keeps its tables in the
task store's database (SQLite file or PostgreSQL schema ``dbos``), so the
two commit together and a crash between them cannot lose a segment.

DBOS is a process-wide singleton: one ``RunEngine`` launched per process.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Protocol, TypeVar

from dbos import DBOS, DBOSClient
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection

from registry.errors import ConfigurationError, StoreError

log = logging.getLogger("registry.runs")

QUEUE = "agent-tasks"
WORKFLOW = "prompt_registry.task_segment"
APPLICATION = "prompt-registry"
APPLICATION_VERSION = "task-segments-1"
"""Workers dequeue only workflows of their own version: this names the
segment workflow's structure, and changes only when that does."""
MAX_STEPS_PER_SEGMENT = 10_000
"""A bound on a segment's loop: the run's own limits end it long before."""
_RETRY_DELAYS = (1.0, 4.0, 15.0)
"""Seconds before a background step whose model call failed is tried again."""
OUTAGE_WAITS = (0.5, 1.0, 2.0, 4.0, 8.0, 15.0)
"""Seconds between tries of what a step writes while the database is away;
the last repeats until it is back, as DBOS waits for its own tables."""
_T = TypeVar("_T")


QUEUE_POLL_SECONDS = 0.1
"""How often a worker looks at the queue: the longest a queued segment waits
for an idle worker. Each look is a transaction (about 5 ms of CPU on
SQLite): measured idle, a worker spent 13% of a core looking every 50 ms,
8% every 100 ms, 2.4% every second (DBOS's default, too slow for a
stepped task's request, which waits for its step)."""

LISTENER_POLL_SECONDS = 0.05
"""DBOS's notification listener interval: an idle sleep, and the bound on a worker's stop."""


class Next(str, Enum):
    """What the service says after a step: go on, stop the segment, or try again later."""

    CONTINUE = "continue"
    STOP = "stop"
    RETRY = "retry"


class Advance(Protocol):
    """The service's side of a segment: what each step does."""

    def advance(self, task_id: str, segment: int, index: int, worker: str, attempt: int) -> Next:
        """Run step ``index`` of segment ``segment`` of the task on ``worker``;
        ``attempt`` counts the tries of a step that asked to be retried."""

    def abandon(self, task_id: str, segment: int, index: int, attempt: int, reason: str) -> None:
        """Step ``index`` raised on every try: end it as failed, so that the
        task does not stay running with no worker on it."""


@dataclass(frozen=True)
class Segment:
    task_id: str
    number: int

    @property
    def workflow_id(self) -> str:
        return f"task:{self.task_id}:{self.number}"


# The service's step and this worker's id, for the workflow DBOS calls by
# name: DBOS is one per process, and so are these.
_advance: Advance | None = None
_worker = ""
_advance_lock = threading.Lock()


class _InFlight:
    """How many steps this process is running, so that closing waits for them."""

    def __init__(self) -> None:
        self._count = 0
        self._idle = threading.Condition()

    def __enter__(self) -> None:
        with self._idle:
            self._count += 1

    def __exit__(self, *exc_info: object) -> None:
        with self._idle:
            self._count -= 1
            self._idle.notify_all()

    def wait_idle(self, seconds: float) -> bool:
        with self._idle:
            return self._idle.wait_for(lambda: self._count == 0, timeout=seconds)


_in_flight = _InFlight()
CLOSE_WAIT_SECONDS = 10.0
"""How long closing waits for the steps under way (the rest go to other workers)."""


def _service() -> Advance:
    service = _advance
    if service is None:  # a workflow recovered in a process that serves no tasks
        raise RuntimeError("this process runs no task steps")
    return service


# A step that raises (the database away for a moment, a lock held too long)
# is tried again: what it recorded, it does not do twice.
@DBOS.step(name="prompt_registry.task_step", retries_allowed=True, max_attempts=4, interval_seconds=0.5)
def _step(task_id: str, segment: int, index: int, worker: str, attempt: int) -> str:
    service = _service()
    with _in_flight:
        # A step failing on the database would use up its tries in moments:
        # it waits for the database to be back, then takes itself over as
        # another worker would.
        return while_the_database_is_away(
            lambda: service.advance(task_id, segment, index, worker, attempt).value,
            f"step {index} of task {task_id}",
        )


@DBOS.step(name="prompt_registry.abandon_step", retries_allowed=True, max_attempts=10, interval_seconds=1.0)
def _abandon(task_id: str, segment: int, index: int, attempt: int, reason: str) -> None:
    with _in_flight:
        _service().abandon(task_id, segment, index, attempt, reason)


@DBOS.workflow(name=WORKFLOW)
def _segment(task_id: str, segment: int, max_steps: int) -> str:
    """Steps of the task, each recorded by DBOS once it ends, until the
    service says stop (or ``max_steps``)."""
    attempt = 0
    index = 0
    while index < max_steps:
        try:
            verdict = Next(_step(task_id, segment, index, _worker, attempt))
        except Exception as exc:  # every try raised: the step ends failed, the task goes on or fails
            _abandon(task_id, segment, index, attempt, f"the step could not run: {exc}")
            return "abandoned"
        if verdict is Next.STOP:
            return "stopped"
        if verdict is Next.RETRY:
            DBOS.sleep(_RETRY_DELAYS[min(attempt, len(_RETRY_DELAYS) - 1)])
            attempt += 1
            continue
        attempt = 0
        index += 1
    return "max-steps"


def database_away(exc: BaseException) -> bool:
    """Whether ``exc`` says the database the store and DBOS share is away
    for now (a restart, a failover, a write lock held too long), rather
    than that a statement is wrong."""
    return isinstance(exc, StoreError) and isinstance(exc.__cause__, (sa_exc.OperationalError, sa_exc.TimeoutError))


def while_the_database_is_away(call: Callable[[], _T], what: str) -> _T:
    """``call()``, tried again (after ``OUTAGE_WAITS``) for as long as it
    fails because the database is away; ``what`` names it in the log."""
    tries = 0
    while True:
        try:
            return call()
        except StoreError as exc:
            if not database_away(exc):
                raise
            wait = OUTAGE_WAITS[min(tries, len(OUTAGE_WAITS) - 1)]
            tries += 1
            log.warning("%s waits %.1f s for the database: %s", what, wait, exc)
            time.sleep(wait)


def new_worker_id() -> str:
    """A worker's id, unique for its life: host, process and a random part
    (a process id is reused; a worker's id never is)."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def dbos_url(database_url: str) -> str:
    """The DBOS system database: the task store's own."""
    return database_url


class RunEngine:
    """DBOS for this process: a client that enqueues and cancels segments
    (every process), and, in a worker, the launched runtime that runs them
    with at most ``concurrency`` at once."""

    def __init__(
        self,
        database_url: str,
        *,
        worker: bool,
        concurrency: int = 8,
        poll_seconds: float = QUEUE_POLL_SECONDS,
    ) -> None:
        if concurrency < 1:
            raise ConfigurationError(f"a worker runs at least one task at once, not {concurrency}")
        self.database_url = dbos_url(database_url)
        self.worker = worker
        self.concurrency = concurrency
        self.poll_seconds = poll_seconds
        self.worker_id = new_worker_id()
        self._client: DBOSClient | None = None
        self._launched = False

    def start(self, advance: Advance | None) -> None:
        """Open the client; in a worker, launch DBOS and listen to the queue."""
        global _advance, _worker
        # DBOS's client never creates DBOS's tables; a worker's launch does.
        # A server that starts on a database no worker has launched on yet
        # would refuse every task until one does (and a worker registers its
        # queue with the client, before the launch).
        DBOS.migrate(self.database_url)
        self._client = DBOSClient(system_database_url=self.database_url, application_name=APPLICATION)
        if not self.worker:
            return
        if advance is None:
            raise ConfigurationError("a worker needs the service's step to run")
        with _advance_lock:
            if _advance is not None:
                raise ConfigurationError("DBOS runs one engine per process, and this process has one")
            _advance = advance
            _worker = self.worker_id
        DBOS(
            config={
                "name": APPLICATION,
                "system_database_url": self.database_url,
                "executor_id": self.worker_id,
                "application_version": APPLICATION_VERSION,
                "log_level": "WARNING",
                # Its listener sleeps this long between looks at waiters we
                # never have (no recv, no events), and DBOS.destroy joins it:
                # at the default 1 s every worker took a second to stop.
                "notification_listener_polling_interval_sec": LISTENER_POLL_SECONDS,
            }
        )
        # Registered before the launch: DBOS's queue manager starts a queue's
        # dequeuing thread when it first finds its row, at launch and then
        # once a second, so a queue registered after it waited up to a second
        # before its first task.
        self._client.register_queue(
            QUEUE,
            worker_concurrency=self.concurrency,
            polling_interval_sec=self.poll_seconds,
            on_conflict="always_update",
            application_name=APPLICATION,
        )
        DBOS.launch()
        self._launched = True

    def enqueue_in(self, connection: Connection, segment: Segment, *, max_steps: int = MAX_STEPS_PER_SEGMENT) -> None:
        """Put ``segment`` on the queue as part of ``connection``'s transaction."""
        self._require_client().enqueue_in_transaction(
            connection,
            {
                "queue_name": QUEUE,
                "workflow_name": WORKFLOW,
                "workflow_id": segment.workflow_id,
                "app_version": APPLICATION_VERSION,
            },
            segment.task_id,
            segment.number,
            max_steps,
        )

    def cancel(self, segment: Segment) -> None:
        """Stop the segment at its next step (the service has marked the task cancelled)."""
        try:
            self._require_client().cancel_workflow(segment.workflow_id)
        except Exception as exc:  # the task's state already stops it at its next step
            log.info("cancelling %s: %s", segment.workflow_id, exc)

    def pending(self) -> list[tuple[str, str | None]]:
        """(workflow id, worker) of every segment a worker has taken and not finished."""
        found = self._require_client().list_workflows(
            status="PENDING", queue_name=QUEUE, load_input=False, load_output=False
        )
        return [(status.workflow_id, status.executor_id) for status in found]

    def requeue(self, workflow_id: str) -> None:
        """Put a dead worker's unfinished segment back on the queue: another
        worker resumes it, replaying the steps DBOS recorded."""
        self._require_client().resume_workflow(workflow_id, queue_name=QUEUE)

    def close(self) -> None:
        global _advance, _worker
        if self._launched:
            if not _in_flight.wait_idle(CLOSE_WAIT_SECONDS):
                log.warning("closing with steps under way: other workers take them over")
            DBOS.destroy(destroy_registry=False)
            self._launched = False
            with _advance_lock:
                _advance = None
                _worker = ""
        if self._client is not None:
            self._client.destroy()
            self._client = None

    def _require_client(self) -> DBOSClient:
        if self._client is None:
            raise ConfigurationError("the run engine is not started")
        return self._client
