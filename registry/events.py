"""Release-change announcements between replicas, over Redis pub/sub.

Every worker of every replica that mirrors the same remote subscribes to one
channel. A worker whose fetch changed the releases or channels it serves
publishes the new state's ETag; every other worker that hears it fetches at
once, and until that fetch is done, answers requests for a range, ``latest``
or a channel only after it (see ``RegistryService``). A change therefore
reaches every replica within one round of pub/sub plus one fetch, instead of
one sync interval.

Subscribing fails open like every Redis call: while Redis is away the
subscriber retries with back-off, and when it is back, fetches once in case
an announcement was missed.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import redis

from registry.cache import RedisTier, ReleaseEventsChannel, connect, redis_key
from registry.metrics import Metrics

log = logging.getLogger(__name__)

_POLL_SECONDS = 0.5
_FIRST_BACKOFF_SECONDS = 0.25
_MAX_BACKOFF_SECONDS = 5.0
_HEALTH_CHECK_SECONDS = 5


@dataclass(frozen=True)
class ReleaseChange:
    """An announcement: the releases are now at ``etag`` in the sender's view.

    ``resync`` marks the subscriber's own reconnection, when announcements
    may have been missed.
    """

    etag: str | None
    origin: str
    resync: bool = False


class ReleaseEvents:
    """Publishes and hears release changes on ``<prefix>:events``."""

    def __init__(self, shared: RedisTier, *, metrics: Metrics) -> None:
        self.instance = uuid.uuid4().hex
        self._shared = shared
        self._metrics = metrics
        self._on_change: Callable[[ReleaseChange], None] = lambda change: None
        self._channel = redis_key(shared.prefix, ReleaseEventsChannel())
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.subscribed = threading.Event()
        """Set while the subscription is live (tests wait for it)."""

    def start(self, on_change: Callable[[ReleaseChange], None]) -> None:
        """Listen in a background thread, calling ``on_change`` for each announcement."""
        self._on_change = on_change
        self._thread = threading.Thread(target=self._run, name="prompt-registry-events", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=_POLL_SECONDS * 4)

    def publish(self, etag: str) -> None:
        """Announce that the releases changed (fails open: a lost announcement
        delays other replicas by one sync interval at most)."""
        message = json.dumps({"etag": etag, "origin": self.instance}).encode()
        self._shared.publish(ReleaseEventsChannel(), message)
        self._metrics.release_events.labels("sent").inc()

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
                    self._deliver(ReleaseChange(etag=None, origin="", resync=True))
                if outage_logged:
                    log.warning("release announcements from other replicas are heard again")
                connected_before, outage_logged, backoff = True, False, _FIRST_BACKOFF_SECONDS
                self._listen(pubsub)
            except (redis.RedisError, OSError, ValueError) as exc:
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
            message = pubsub.get_message(timeout=_POLL_SECONDS)
            if message is None or message.get("type") != "message":
                continue
            change = _parse(message.get("data"))
            if change is None or change.origin == self.instance:
                continue
            self._metrics.release_events.labels("received").inc()
            self._deliver(change)

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
    return ReleaseChange(etag=etag if isinstance(etag, str) else None, origin=body["origin"])


def _close_quietly(pubsub: redis.client.PubSub, client: redis.Redis) -> None:
    for resource in (pubsub, client):
        try:
            resource.close()
        except (redis.RedisError, OSError):
            pass
