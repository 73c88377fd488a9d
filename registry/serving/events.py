"""Release-change announcements between replicas, over Redis pub/sub.

Every worker of every replica that mirrors the same remote subscribes to one
channel. A worker whose fetch changed the releases or channels it serves
publishes the new state's ETag; every other worker that hears it fetches at
once, and until that fetch is done, answers requests for a range, ``latest``
or a channel only after it (see ``RegistryService``). A change therefore
reaches every replica within one round of pub/sub plus one fetch, instead of
one sync interval.

Subscribing fails open like every Redis call: while Redis is away the
subscriber tries again every half second at most (a refused connection costs
next to nothing). An announcement Redis did not take is sent again once it
does. And a worker that has reconnected states its own releases' ETag
(``reconnected``): a replica that serves something else fetches, and answers
with its own ETag if it still differs, so replicas that missed announcements
during an outage catch up as soon as Redis is back, and replicas that agree
do nothing.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from registry.serving.cache import RedisTier, connect, redis_error, redis_key
from registry.serving.metrics import Metrics

if TYPE_CHECKING:
    import redis

log = logging.getLogger(__name__)

_POLL_SECONDS = 0.5
# Replicas compare releases when they reconnect, so how soon a subscriber
# tries again bounds how long they disagree after an outage.
_FIRST_BACKOFF_SECONDS = 0.1
_MAX_BACKOFF_SECONDS = 0.5
_HEALTH_CHECK_SECONDS = 5


@dataclass(frozen=True)
class ReleaseEventsChannel:
    """The pub/sub channel on which replicas announce release changes."""

    def parts(self) -> tuple[str, ...]:
        return ("events",)


@dataclass(frozen=True)
class ReleaseChange:
    """An announcement: the releases are now at ``etag`` in the sender's view.

    ``reconnected`` marks a sender that has just reconnected to Redis and
    states what it serves: a replica that serves something else fetches, and
    answers with its own ETag if it still differs.
    """

    etag: str | None
    origin: str
    reconnected: bool = False


class ReleaseEvents:
    """Publishes and hears release changes on ``<prefix>:events``."""

    def __init__(self, shared: RedisTier, *, metrics: Metrics) -> None:
        self.instance = uuid.uuid4().hex
        self._shared = shared
        self._metrics = metrics
        self._on_change: Callable[[ReleaseChange], None] = lambda change: None
        self._state: Callable[[], str | None] = lambda: None
        self._channel = redis_key(shared.prefix, ReleaseEventsChannel())
        # Announcements go out on a connection of their own, not through the
        # cache tier: its back-off would skip them just after an outage, when
        # they matter most.
        self._publisher = connect(shared.url, timeout=shared.timeout)
        self._unsent_lock = threading.Lock()
        self._unsent: bytes | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.subscribed = threading.Event()
        """Set while the subscription is live (tests wait for it)."""

    def start(self, on_change: Callable[[ReleaseChange], None], *, state: Callable[[], str | None]) -> None:
        """Listen in a background thread, calling ``on_change`` for each
        announcement; ``state`` gives this replica's releases' ETag (None:
        nothing to state yet), said on reconnecting."""
        self._on_change = on_change
        self._state = state
        self._thread = threading.Thread(target=self._run, name="prompt-registry-events", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=_POLL_SECONDS * 4)
        _close_quietly(self._publisher)

    def publish(self, etag: str, *, reconnected: bool = False) -> None:
        """Announce that the releases are now at ``etag``. Fails open: an
        announcement Redis does not take is sent again once it does."""
        body: dict[str, object] = {"etag": etag, "origin": self.instance}
        if reconnected:
            body["reconnected"] = True
        self._send(json.dumps(body).encode())

    def _send(self, message: bytes) -> None:
        try:
            self._publisher.publish(self._channel, message)
        except (redis_error(), OSError) as exc:
            # The subscriber logs the outage; this only counts.
            self._metrics.redis_errors.labels("publish").inc()
            log.debug("an announcement waits for Redis: %s", exc)
            with self._unsent_lock:
                self._unsent = message
            return
        with self._unsent_lock:
            if self._unsent is message:
                self._unsent = None
        self._metrics.release_events.labels("sent").inc()

    def _resend(self) -> None:
        """Send again the latest announcement Redis did not take."""
        with self._unsent_lock:
            message = self._unsent
        if message is not None:
            self._send(message)

    def _state_releases(self) -> None:
        """Just reconnected: say what this replica serves. It supersedes any
        announcement that waits to be sent again (it is newer)."""
        with self._unsent_lock:
            self._unsent = None
        etag = self._state()
        if etag is not None:
            self.publish(etag, reconnected=True)

    def _run(self) -> None:
        backoff = _FIRST_BACKOFF_SECONDS
        connected_before = False
        outage_logged = False
        while not self._stopping.is_set():
            # A connection of its own: it blocks reading, so it cannot use the
            # request timeout; health checks find a dead peer instead.
            client = connect(
                self._shared.url, timeout=self._shared.timeout, health_check_interval=_HEALTH_CHECK_SECONDS
            )
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            try:
                pubsub.subscribe(self._channel)
                self.subscribed.set()
                if connected_before:
                    self._state_releases()
                if outage_logged:
                    log.warning("release announcements from other replicas are heard again")
                connected_before, outage_logged, backoff = True, False, _FIRST_BACKOFF_SECONDS
                self._listen(pubsub)
            except (redis_error(), OSError, ValueError) as exc:
                self.subscribed.clear()
                if not outage_logged:
                    log.warning("cannot hear release announcements from other replicas (%s); retrying", exc)
                    outage_logged = True
                self._metrics.redis_errors.labels("subscribe").inc()
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF_SECONDS)
            finally:
                self.subscribed.clear()
                _close_quietly(pubsub, client)

    def _listen(self, pubsub: redis.client.PubSub) -> None:
        while not self._stopping.is_set():
            self._resend()
            message = pubsub.get_message(timeout=_POLL_SECONDS)
            if message is None or message.get("type") != "message":
                continue
            change = _parse(message.get("data"))
            if change is None or change.origin == self.instance:
                continue
            self._deliver(change)
            # Counted once handled: whoever sees the count (a test, a dashboard
            # next to the fetches) knows the fetch it asked for is under way.
            self._metrics.release_events.labels("received").inc()

    def _deliver(self, change: ReleaseChange) -> None:
        try:
            self._on_change(change)
        except Exception:  # the listener must outlive any handler bug
            log.exception("handling a release announcement failed")


def _parse(data: object) -> ReleaseChange | None:
    """An announcement, or None for anything else on the channel."""
    try:
        body = json.loads(data) if isinstance(data, (bytes, str)) else None
    except ValueError:
        return None
    if not isinstance(body, dict) or not isinstance(body.get("origin"), str):
        return None
    etag = body.get("etag")
    return ReleaseChange(
        etag=etag if isinstance(etag, str) else None,
        origin=body["origin"],
        reconnected=body.get("reconnected") is True,
    )


def _close_quietly(*resources: redis.client.PubSub | redis.Redis) -> None:
    for resource in resources:
        try:
            resource.close()
        except (redis_error(), OSError):
            pass
