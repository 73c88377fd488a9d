"""Push notifications: each one signed, sent from threads of its own, and
retried with backoff; never an error, nor a wait, in the run that caused it.

``PushSender.notify(task_id, body)`` queues ``body`` (the caller's JSON: A2A's
``StreamResponse`` of the task's change) for every configuration of the task
(``pushconfigs``) and returns at once; ``submit(config, body)`` queues it
for one. A few worker threads take them from one bounded schedule: a full
schedule drops the notification (logged), and ``close`` gives the pending
ones a moment to go before it drops the rest (logged too).

Each attempt checks the URL again on the addresses its name resolves to
then (``pushtargets.check_push_url``) and connects to one of them, not to
whatever the name resolves to a moment later. It is retried, up to
``PushPolicy.attempts`` in all, after a connection error, a timeout (of
any one read, or of the whole attempt: a receiver may not hold a worker
by answering a byte at a time), 429 or a 5xx answer: after the
``Retry-After`` the receiver asks for (at most ``max_retry_after``), else
after an exponential backoff with jitter. A redirect is not followed, and
ends the notification like any other answer that is no success; the last
failure is logged with the task and configuration ids and the URL without
its query string: never the secret or the token.

Every request carries (docs/a2a.md shows a receiver verifying them)::

    Content-Type: application/json
    X-A2A-Notification-Token: the configuration's token, when it has one
    X-Registry-Notification-Id: one per notification, the same on each retry
    X-Registry-Timestamp: when this attempt was signed, in Unix seconds
    X-Registry-Signature: v1=<hex HMAC-SHA256 of "{id}.{timestamp}." + body, keyed with the secret>
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
import itertools
import logging
import random
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from registry.a2a.pushconfigs import PushConfig, PushConfigStore
from registry.a2a.pushtargets import Network, PushTarget, check_push_url
from registry.client.retry_after import parse_retry_after
from registry.errors import InvalidRequest, RegistryError
from registry.models import plural

TOKEN_HEADER = "X-A2A-Notification-Token"
ID_HEADER = "X-Registry-Notification-Id"
TIMESTAMP_HEADER = "X-Registry-Timestamp"
SIGNATURE_HEADER = "X-Registry-Signature"
SIGNATURE_VERSION = "v1"

logger = logging.getLogger(__name__)


def sign(secret: str, notification_id: str, timestamp: int, body: bytes) -> str:
    """The ``X-Registry-Signature`` of one attempt: ``v1=`` and the hex
    HMAC-SHA256, keyed with the secret's UTF-8 bytes, of the notification's
    id, a dot, the timestamp, a dot and the body's exact bytes."""
    signed = f"{notification_id}.{timestamp}.".encode("ascii") + body
    digest = hmac.new(secret.encode("utf-8"), signed, hashlib.sha256).hexdigest()
    return f"{SIGNATURE_VERSION}={digest}"


@dataclass(frozen=True)
class PushPolicy:
    """How notifications are sent: ``attempts`` counts the first; backoff
    grows from ``backoff`` seconds, doubling, up to ``max_backoff``, each
    delay drawn between its half and its whole (jitter); a ``Retry-After``
    is waited out up to ``max_retry_after``. ``timeout`` bounds each
    attempt's every phase (connect, write, each read), and
    ``attempt_seconds`` the whole attempt; ``workers`` threads send,
    from a schedule of at most ``queue_size`` notifications; ``close``
    waits ``drain_seconds`` at most for them."""

    attempts: int = 5
    backoff: float = 1.0
    max_backoff: float = 60.0
    max_retry_after: float = 120.0
    timeout: float = 10.0
    attempt_seconds: float = 30.0
    workers: int = 4
    queue_size: int = 1000
    drain_seconds: float = 5.0

    def delay(self, attempt: int, retry_after: float | None, *, draw: Callable[[], float] = random.random) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1 for the first)."""
        if retry_after is not None:
            return min(retry_after, self.max_retry_after)
        ceiling = min(self.max_backoff, self.backoff * 2.0 ** (attempt - 1))
        return ceiling * (0.5 + draw() / 2)


DEFAULT_POLICY = PushPolicy()


@dataclass(frozen=True)
class _Delivery:
    """One notification to one configuration, and how many attempts it had."""

    config: PushConfig
    body: bytes
    notification_id: str
    attempts: int = 0


@dataclass(frozen=True)
class _Fanout:
    """One notification to every configuration of a task, not read yet."""

    task_id: str
    body: bytes
    notification_id: str


@dataclass(frozen=True)
class _Result:
    """How one attempt ended: ``delivered``, or why not, and whether to try again."""

    delivered: bool
    reason: str = ""
    retry: bool = False
    retry_after: float | None = None


class PushSender:
    """Sends push notifications from its own threads, until ``close``."""

    def __init__(
        self,
        configs: PushConfigStore,
        *,
        allowed: Sequence[Network] = (),
        policy: PushPolicy = DEFAULT_POLICY,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        """``allowed``: the networks notifications may reach although they
        are not public (``Settings.push_networks``); ``verify``: how TLS
        certificates are checked (httpx's ``verify``: a context trusting a
        private CA, say)."""
        self._configs = configs
        self._allowed = tuple(allowed)
        self._policy = policy
        self._verify = verify
        self._schedule: list[tuple[float, int, _Delivery | _Fanout]] = []
        self._order = itertools.count()
        self._condition = threading.Condition()
        self._deadline: float | None = None
        self._threads = [
            threading.Thread(target=self._work, name=f"push-notifications-{n}", daemon=True)
            for n in range(policy.workers)
        ]
        for thread in self._threads:
            thread.start()

    def notify(self, task_id: str, body: bytes) -> bool:
        """Queue ``body`` for every push configuration of the task; False
        (logged) when the sender is closed or its schedule is full."""
        return self._queue(_Fanout(task_id, body, uuid.uuid4().hex), what=f"task {task_id}")

    def submit(self, config: PushConfig, body: bytes) -> bool:
        """Queue ``body`` for one configuration; False (logged) when the
        sender is closed or its schedule is full."""
        return self._queue(_Delivery(config, body, uuid.uuid4().hex), what=f"task {config.task_id}")

    def close(self, *, drain_seconds: float | None = None) -> None:
        """Take no more notifications; send those due within ``drain_seconds``
        (default: the policy's), then stop, logging how many were dropped."""
        wait = self._policy.drain_seconds if drain_seconds is None else drain_seconds
        with self._condition:
            if self._deadline is None:
                self._deadline = time.monotonic() + wait
            self._condition.notify_all()
        for thread in self._threads:
            # An attempt begun before the deadline may run its course (its URL's resolution too).
            thread.join(wait + self._policy.attempt_seconds + self._policy.timeout)
        with self._condition:
            dropped, self._schedule = len(self._schedule), []
        if dropped:
            logger.warning("push notifications: %d not sent before shutdown, dropped", dropped)

    def __enter__(self) -> PushSender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _queue(self, job: _Delivery | _Fanout, *, what: str) -> bool:
        with self._condition:
            if self._deadline is None and len(self._schedule) < self._policy.queue_size:
                heapq.heappush(self._schedule, (time.monotonic(), next(self._order), job))
                self._condition.notify()
                return True
        logger.warning("push notification for %s dropped: the sender is closed or has too many pending", what)
        return False

    def _next(self) -> _Delivery | _Fanout | None:
        """The next job due, waiting for it; None once the sender is closed
        and nothing is due before its deadline."""
        with self._condition:
            while True:
                now = time.monotonic()
                # Closed, and the next job falls due at the deadline or after:
                # nothing more can be sent, so the close need not wait it out.
                if self._deadline is not None and (
                    not self._schedule or max(now, self._schedule[0][0]) >= self._deadline
                ):
                    return None
                if self._schedule and self._schedule[0][0] <= now:
                    return heapq.heappop(self._schedule)[2]
                waits = [self._schedule[0][0] - now] if self._schedule else []
                if self._deadline is not None:
                    waits.append(self._deadline - now)
                self._condition.wait(min(waits) if waits else None)

    def _later(self, job: _Delivery, delay: float) -> bool:
        """Schedule a delivery ``delay`` seconds from now; False when the
        sender closes before it is due."""
        due = time.monotonic() + delay
        with self._condition:
            if self._deadline is not None and due >= self._deadline:
                return False
            heapq.heappush(self._schedule, (due, next(self._order), job))
            self._condition.notify()
        return True

    def _work(self) -> None:
        # A client per thread, keeping no connection: each attempt connects
        # to the address it has just checked, never to one opened for another.
        limits = httpx.Limits(max_keepalive_connections=0)
        with httpx.Client(
            timeout=self._policy.timeout, follow_redirects=False, trust_env=False, verify=self._verify, limits=limits
        ) as client:
            while (job := self._next()) is not None:
                try:
                    if isinstance(job, _Fanout):
                        self._fan_out(job)
                    else:
                        self._deliver(client, job)
                except Exception:
                    # A bug here must not stop the thread and, with it, every later notification.
                    logger.exception("push notifications: a delivery failed unexpectedly")

    def _fan_out(self, job: _Fanout) -> None:
        try:
            configs = self._configs.list(job.task_id, owner=None)
        except RegistryError as exc:
            logger.warning("push notification for task %s dropped: its configurations: %s", job.task_id, exc)
            return
        unsent = [c for c in configs if not self._later(_Delivery(c, job.body, job.notification_id), 0.0)]
        if unsent:
            logger.warning("push notification for task %s dropped: the sender closed", job.task_id)

    def _deliver(self, client: httpx.Client, job: _Delivery) -> None:
        attempt = job.attempts + 1
        result = self._attempt(client, job)
        # Named by its task and configuration ids and its URL without the query: never its token or key.
        where = f"configuration {job.config.config_id!r} ({_shown(job.config.url)})"
        if result.delivered:
            logger.debug("push notification %s delivered to %s", job.notification_id, where)
            return
        reason = result.reason
        if result.retry and attempt < self._policy.attempts:
            delay = self._policy.delay(attempt, result.retry_after)
            if self._later(_Delivery(job.config, job.body, job.notification_id, attempt), delay):
                asked = " (Retry-After)" if result.retry_after is not None else ""
                logger.info(
                    "push notification %s for task %s to %s: %s; attempt %d in %.1f s%s",
                    job.notification_id,
                    job.config.task_id,
                    where,
                    reason,
                    attempt + 1,
                    delay,
                    asked,
                )
                return
            reason += "; the sender closed before the next attempt"
        logger.warning(
            "push notification %s for task %s to %s given up after %s: %s",
            job.notification_id,
            job.config.task_id,
            where,
            plural(attempt, "attempt"),
            reason,
        )

    def _attempt(self, client: httpx.Client, job: _Delivery) -> _Result:
        try:
            target = check_push_url(job.config.url, allowed=self._allowed)
        except InvalidRequest as exc:
            return _Result(False, str(exc))
        headers = _headers(job, int(time.time()))
        failure: httpx.TransportError | None = None
        for address in target.addresses:
            try:
                return _post(client, target, address, headers, job.body, self._policy.attempt_seconds)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                failure = exc  # nothing was sent: the name's next address may answer
            except httpx.TransportError as exc:
                return _Result(False, _describe(exc), retry=True)
        return _Result(False, _describe(failure), retry=True)


def _headers(job: _Delivery, timestamp: int) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        ID_HEADER: job.notification_id,
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: sign(job.config.secret, job.notification_id, timestamp, job.body),
    }
    if job.config.token:
        headers[TOKEN_HEADER] = job.config.token
    return headers


def _post(
    client: httpx.Client, target: PushTarget, address: str, headers: dict[str, str], body: bytes, seconds: float
) -> _Result:
    """One POST to ``address``, with the URL's name as its Host and as the
    name TLS verifies, ended after ``seconds``; the answer's body is never read."""
    request = client.build_request(
        "POST",
        target.url_for(address),
        content=body,
        headers={**headers, "Host": target.host_header},
        extensions={"sni_hostname": target.server_name},
    )
    with _AttemptDeadline(seconds) as deadline:
        request.extensions["trace"] = deadline.trace
        try:
            response = client.send(request, stream=True)
        except httpx.TransportError as exc:
            if deadline.expired:
                raise httpx.ReadTimeout(f"no answer within {seconds:g} s in all", request=request) from exc
            raise
        response.close()
    return _answered(response)


def _answered(response: httpx.Response) -> _Result:
    status = response.status_code
    if 200 <= status < 300:
        return _Result(True)
    reason = f"answered {status}"
    if 300 <= status < 400:
        return _Result(False, f"{reason}, a redirect, which is not followed")
    if status == 429 or 500 <= status < 600:
        return _Result(False, reason, retry=True, retry_after=parse_retry_after(response.headers.get("Retry-After")))
    return _Result(False, reason)


class _AttemptDeadline:
    """Ends an attempt that outlasts ``seconds`` in all. The timeout bounds
    each read, so a receiver trickling its answer a byte at a time would
    otherwise hold a worker thread for as long as it liked. The socket
    comes from httpx's ``trace`` extension as the connection is made; a
    shutdown wakes the read blocked on it."""

    def __init__(self, seconds: float) -> None:
        self.expired = False
        self._socket: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def trace(self, event: str, info: dict[str, Any]) -> None:
        """httpx's ``trace`` callback: keeps the socket of the connection (the TLS one once TLS starts)."""
        if event in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
            with self._lock:
                self._socket = info["return_value"].get_extra_info("socket")
                if self.expired:
                    self._shut()

    def __enter__(self) -> _AttemptDeadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            self._shut()

    def _shut(self) -> None:
        if self._socket is not None:
            try:
                self._socket.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # closed already: the attempt ended meanwhile


def _describe(error: httpx.TransportError | None) -> str:
    if error is None:
        return "no address to connect to"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def _shown(url: str) -> str:
    """The URL for a log line: without its query (which may carry a key) or fragment."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return "<an invalid URL>"
    return str(parsed.copy_with(query=None, fragment=None))
