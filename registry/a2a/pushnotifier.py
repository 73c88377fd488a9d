"""Push notifications of tasks' changes, sent by the process that made them.

``PushNotifier`` is a ``LogListener`` (``registry.protocol.tasklog``): the
service of every process, ``agents serve``'s and ``agents worker``'s, tells
it the entries it appends to a task's log, and it sends every push
configuration of the task (``pushconfigs``) the changes a client of A2A is
told of, each as the JSON of A2A's ``StreamResponse``:

- a ``state`` entry: ``{"statusUpdate": ...}``, the status with the pending
  action (``input-required``) or the error (``failed``). Not sent: a
  ``submitted`` state (a decided task queued again; ``working`` follows), a
  state the task's previous ``state`` entry had already (a failed step
  that will be tried again logs ``running`` again, with its error), and a
  wait that was decided before this process read it (the changes after it
  follow);
- an ``artifact`` entry: ``{"artifactUpdate": ...}``, the file as its bytes
  up to ``mapping.INLINE_BYTES`` (the answer always), else as a link below
  the service's address (``/ap/v1/agent/tasks/.../artifacts/...``);
- a configuration just set (``snapshot``): ``{"task": ...}``, the task as it
  is then, with its status and files. A configuration sent with the message
  that starts a task is kept once the task is, and a worker may have moved
  the task on meanwhile: so the task as it is once the configuration is
  kept, then each change after, leave nothing out.

Each one's ``metadata.seq`` is the number of the task's log entry it tells
(a snapshot's: the last entry before the task was read, so that the state
it shows is at least that new). Notifications of one task may arrive out of
order (retries, several senders, several processes) and more than once (a
retry of one that was received but not answered 2xx): a receiver keeps, per
task, the notification of the highest ``seq``.

Why a thread of its own: ``appended`` is called on the thread of the step
(or request) that changed the task, which must never wait for a receiver,
nor for what a notification needs. It puts the entries on a bounded queue
and returns; this thread reads what they need (the task's configurations,
the task, its action or file) and hands the bodies to the ``PushSender``'s
threads, which sign, send and retry them. A full queue drops what does not
fit (logged); so does a process that stops: delivery is at least once
while the process lives, and what one had queued when it was killed is
lost (the task's next change, or ``GetTask``, tells the receiver where the
task is).
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from a2a.types import StreamResponse, TaskState
from google.protobuf.json_format import MessageToDict
from sqlalchemy import func, select

from registry.a2a import mapping
from registry.a2a.push import DEFAULT_POLICY, PushPolicy, PushSender
from registry.a2a.pushconfigs import PushConfig, PushConfigStore
from registry.a2a.pushtargets import Network
from registry.errors import RegistryError
from registry.protocol import events
from registry.protocol.records import TaskEvent
from registry.protocol.store import TaskStore
from registry.protocol.tables import task_events

logger = logging.getLogger(__name__)

QUEUE_SIZE = 10_000
"""Changes waiting for this process's notifier, at most; more are dropped (logged)."""
DRAIN_SECONDS = 5.0
"""How long closing gives the changes still queued."""
ARTIFACTS_SHOWN = 1000
_TOLD = (events.STATE, events.ARTIFACT)


@dataclass(frozen=True)
class _Snapshot:
    """A configuration just set, to be sent the task as it is."""

    config: PushConfig


_Job = tuple[TaskEvent, ...] | _Snapshot


class PushNotifier:
    """Sends push notifications of the changes this process appends to tasks' logs, until ``close``."""

    def __init__(
        self,
        store: TaskStore,
        *,
        allowed: Sequence[Network] = (),
        policy: PushPolicy = DEFAULT_POLICY,
        queue_size: int = QUEUE_SIZE,
    ) -> None:
        """``allowed``: the networks notifications may reach although they
        are not public (``Settings.push_networks``, ``--allow-push-to``)."""
        self._store = store
        self._configs = PushConfigStore(store)
        self._sender = PushSender(self._configs, allowed=allowed, policy=policy)
        self._jobs: queue.Queue[_Job | None] = queue.Queue(maxsize=queue_size)
        self._deadline: float | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._work, name="push-notifier", daemon=True)
        self._thread.start()

    def appended(self, entries: Sequence[TaskEvent]) -> None:
        """``LogListener``: queue the entries a receiver is told of, and return."""
        told = tuple(entry for entry in entries if entry.kind in _TOLD)
        if told:
            self._put(told, what=f"task {told[0].task_id} (entry {told[0].seq})")

    def snapshot(self, config: PushConfig) -> None:
        """Queue the task as it is now, for ``config`` alone (just set)."""
        self._put(_Snapshot(config), what=f"task {config.task_id} (configuration {config.config_id!r})")

    def close(self, *, drain_seconds: float = DRAIN_SECONDS) -> None:
        """``LogListener``: take no more; notify what is queued within
        ``drain_seconds``, then close the sender (which sends what is due)."""
        with self._lock:
            if self._deadline is not None:
                return
            self._deadline = time.monotonic() + drain_seconds
        try:
            # Waits for room while the thread works through a full queue.
            self._jobs.put(None, timeout=drain_seconds)
        except queue.Full:
            pass  # the thread stops at the deadline without it
        self._thread.join(drain_seconds + 1.0)
        self._sender.close()

    def _put(self, job: _Job, *, what: str) -> None:
        if self._deadline is None:
            try:
                self._jobs.put_nowait(job)
                return
            except queue.Full:
                pass
        logger.warning("push notifications of %s dropped: the notifier is closed or has too many pending", what)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            deadline = self._deadline
            if deadline is not None and time.monotonic() >= deadline:
                dropped = 1 + self._jobs.qsize()
                logger.warning("push notifications: %d changes not sent before shutdown, dropped", dropped)
                return
            try:
                if isinstance(job, _Snapshot):
                    self._send_snapshot(job.config)
                else:
                    self._send_changes(job)
            except RegistryError as exc:
                what = job.config.task_id if isinstance(job, _Snapshot) else job[0].task_id
                logger.warning("push notifications of task %s dropped: %s", what, exc)
            except Exception:
                # A bug here must not stop the thread and, with it, every later notification.
                logger.exception("push notifications: a change could not be sent")

    def _send_changes(self, entries: tuple[TaskEvent, ...]) -> None:
        configs = self._configs.list(entries[0].task_id, owner=None)
        if not configs:
            return  # most tasks: one read, nothing more
        for entry in entries:
            response = self._status(entry) if entry.kind == events.STATE else self._artifact(entry)
            if response is not None:
                body = _encoded(response)
                for config in configs:
                    self._sender.submit(config, body)

    def _status(self, entry: TaskEvent) -> StreamResponse | None:
        """The ``statusUpdate`` of a ``state`` entry; None when it tells a receiver nothing new."""
        status = str(entry.data.get("status"))
        state = mapping.STATES.get(status)
        if state is None or state == TaskState.TASK_STATE_SUBMITTED:
            return None
        before = self._state_before(entry)
        if before is not None and mapping.STATES.get(before) == state:
            return None
        task = self._store.get_task(entry.task_id, owner=None)
        if task is None:
            return None
        pending = None
        if status == "waiting_for_input":
            if task.status != status:
                return None  # decided already: its action is not pending any more
            pending = self._store.pending_action(entry.task_id)
        shown = mapping.task_status(status, updated_at=entry.created_at, pending=pending, error=task.error)
        return StreamResponse(status_update=mapping.status_update(entry.task_id, shown, seq=entry.seq))

    def _state_before(self, entry: TaskEvent) -> str | None:
        """The state the task's log told before ``entry``, if any."""
        with self._store.transaction() as db:
            data = db.execute(
                select(task_events.c.data)
                .where(
                    task_events.c.task_id == entry.task_id,
                    task_events.c.seq < entry.seq,
                    task_events.c.kind == events.STATE,
                )
                .order_by(task_events.c.seq.desc())
                .limit(1)
            ).scalar_one_or_none()
        return None if data is None else str(data.get("status"))

    def _artifact(self, entry: TaskEvent) -> StreamResponse | None:
        """The ``artifactUpdate`` of an ``artifact`` entry; None when the file is gone."""
        found = self._store.get_artifact(entry.task_id, str(entry.data.get("artifact_id")))
        if found is None:
            return None
        record, data = found
        shown = mapping.artifact(record, data if mapping.inline(record) else None, url=mapping.artifact_path(record))
        return StreamResponse(artifact_update=mapping.artifact_update(entry.task_id, shown, seq=entry.seq))

    def _send_snapshot(self, config: PushConfig) -> None:
        task_id = config.task_id
        # The position first: the task read after it is at least as new as the entry it names.
        with self._store.transaction() as db:
            position = db.execute(
                select(func.coalesce(func.max(task_events.c.seq), 0)).where(task_events.c.task_id == task_id)
            ).scalar_one()
        task = self._store.get_task(task_id, owner=None)
        if task is None:
            return
        pending = self._store.pending_action(task_id) if task.status == "waiting_for_input" else None
        status = mapping.task_status(task.status, updated_at=task.updated_at, pending=pending, error=task.error)
        records, _ = self._store.list_artifacts(task_id, offset=0, limit=ARTIFACTS_SHOWN)
        files = []
        for record in records:
            found = self._store.get_artifact(task_id, record.artifact_id) if mapping.inline(record) else None
            files.append(mapping.artifact(record, found[1] if found else None, url=mapping.artifact_path(record)))
        shown = mapping.task(task, status, files)
        shown.metadata.update({"seq": int(position), "kind": "snapshot"})
        self._sender.submit(config, _encoded(StreamResponse(task=shown)))


def _encoded(response: StreamResponse) -> bytes:
    """The notification's body: A2A's JSON of the ``StreamResponse``, as its bindings write it."""
    return json.dumps(MessageToDict(response), ensure_ascii=False, separators=(",", ":")).encode("utf-8")
