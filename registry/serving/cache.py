"""The cache tiers: each worker's memory, then a Redis shared by replicas.

One rule decides what is cached and for how long: content is keyed by what
never changes, the commit and the path, and is never invalidated (a tier only
forgets it to stay within its bound). Pointers (a range, ``latest`` or a
channel to a commit; the release list) are never stored under a content key;
they are worked out from git in microseconds and cached in memory next to the
release index they came from, so a new index replaces them.

``ContentCache.get`` looks in memory, then in Redis, then loads (from git),
filling the tiers on the way back. A warm request is answered from memory
alone: one Redis round trip (about 130 microseconds) would cost more than the
rest of the request.

Redis is an accelerator, never a dependency: ``RedisTier`` answers "miss"
whenever Redis is down, slow (every call has a short timeout) or flushed, logs
once per outage rather than once per request, counts every error, and keeps
away from Redis for a growing back-off before trying again, so that an outage
costs requests nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar
from urllib.parse import quote

from cachetools import LRUCache

from registry.format.definition import content_format
from registry.serving.metrics import Metrics
from registry.settings import SENTINEL_SCHEME, parse_sentinel_url

if TYPE_CHECKING:
    # Imported by `connect`, the only way to a Redis: redis-py (with the
    # OpenTelemetry SDK it loads) is a fifth of the start of every command
    # and server that has no Redis configured.
    import redis

log = logging.getLogger(__name__)

T = TypeVar("T")

# Content never changes, so this is not an expiry but hygiene: a Redis run
# without an eviction policy still sheds records of long-gone releases.
CONTENT_TTL_SECONDS = 7 * 24 * 3600
_FIRST_BACKOFF_SECONDS = 0.5
_MAX_BACKOFF_SECONDS = 10.0


class RedisKey(Protocol):
    """A structured value that names one Redis key or channel."""

    def parts(self) -> tuple[str, ...]:
        """What tells this key from every other, in order, unescaped."""


@dataclass(frozen=True)
class AgentKey:
    """One definition file at one commit (or worktree content hash), in the
    content format of the registry that stores it."""

    commit: str
    usecase: str
    name: str

    def parts(self) -> tuple[str, ...]:
        return ("agent", content_format(), self.commit, self.usecase, self.name)


def redis_key(prefix: str, key: RedisKey) -> str:
    """The Redis key (or channel name) of ``key``: the one place keys are spelt."""
    return ":".join((prefix, *(quote(part, safe="") for part in key.parts())))


class MemoryTier:
    """A bounded, thread-safe LRU of Python objects, in one worker."""

    def __init__(self, maxsize: int) -> None:
        self._entries: LRUCache[AgentKey, Any] = LRUCache(maxsize=maxsize)
        self._lock = threading.Lock()

    def get(self, key: AgentKey) -> Any | None:
        with self._lock:
            return self._entries.get(key)

    def put(self, key: AgentKey, value: Any) -> Any:
        """Store ``value`` unless another thread stored one first; return the stored one."""
        with self._lock:
            return self._entries.setdefault(key, value)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def capacity(self) -> int:
        return int(self._entries.maxsize)


class RedisTier:
    """Bytes in Redis, failing open."""

    def __init__(self, url: str, *, prefix: str, timeout: float, metrics: Metrics) -> None:
        self.prefix = prefix
        self.url = url
        self.timeout = timeout
        self._metrics = metrics
        self.client = connect(url, timeout=timeout)
        self._errors = redis_error()
        self._lock = threading.Lock()
        self._healthy = True
        self._backoff = _FIRST_BACKOFF_SECONDS
        self._retry_at = 0.0
        metrics.redis_up.set(1)

    @property
    def available(self) -> bool:
        """False during an outage's back-off, when calls are not even tried."""
        return self._healthy or time.monotonic() >= self._retry_at

    def get(self, key: AgentKey) -> bytes | None:
        value = self._call("get", lambda: self.client.get(redis_key(self.prefix, key)))
        return value if isinstance(value, bytes) else None

    def set(self, key: AgentKey, value: bytes, *, ttl: int = CONTENT_TTL_SECONDS) -> None:
        self._call("set", lambda: self.client.set(redis_key(self.prefix, key), value, ex=ttl))

    def close(self) -> None:
        self.client.close()

    def _call(self, operation: str, call: Callable[[], Any]) -> Any:
        if not self.available:
            return None
        try:
            result = call()
        except self._errors as exc:
            self._failed(operation, exc)
            return None
        if not self._healthy:
            self._recovered()
        return result

    def _failed(self, operation: str, exc: redis.RedisError) -> None:
        self._metrics.redis_errors.labels(operation).inc()
        with self._lock:
            if self._healthy:
                log.warning(
                    "Redis is unavailable (%s: %s); answering from memory and git until it is back",
                    type(exc).__name__,
                    exc,
                )
                self._healthy = False
                self._backoff = _FIRST_BACKOFF_SECONDS
            else:
                self._backoff = min(self._backoff * 2, _MAX_BACKOFF_SECONDS)
            self._retry_at = time.monotonic() + self._backoff
            self._metrics.redis_up.set(0)

    def _recovered(self) -> None:
        with self._lock:
            if not self._healthy:
                log.warning("Redis is available again")
                self._healthy = True
                self._metrics.redis_up.set(1)


def connect(url: str, *, timeout: float, **options: Any) -> redis.Redis:
    """A Redis client that gives up after ``timeout`` and never retries.

    redis-py retries failed calls with back-off by default, which turns a
    Redis outage into seconds of latency per request; here a failed call is
    a miss at once, and the tier's own back-off decides when to try again.

    ``redis+sentinel://[:password@]host:port[,host:port...]/service[/db]``
    finds the primary through Redis Sentinel, and follows it on failover.
    """
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry
    from redis.sentinel import Sentinel

    settings: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "retry": Retry(NoBackoff(), 0),
        **options,
    }
    if url.startswith(SENTINEL_SCHEME):
        sentinels, service, password, db = parse_sentinel_url(url)
        sentinel = Sentinel(
            sentinels,
            sentinel_kwargs={"socket_timeout": timeout, "socket_connect_timeout": timeout, "password": password},
        )
        primary: redis.Redis = sentinel.master_for(service, password=password, db=db, **settings)
        return primary
    return redis.Redis.from_url(url, **settings)


def redis_error() -> type[redis.RedisError]:
    """redis-py's base error, for code that holds a client made by ``connect``
    (so the import is already paid for)."""
    import redis

    return redis.RedisError


class ContentCache(Generic[T]):
    """Memory, then Redis, then the loader; never invalidated."""

    def __init__(self, memory: MemoryTier, shared: RedisTier | None, metrics: Metrics) -> None:
        self.memory = memory
        self.shared = shared
        self._metrics = metrics
        self._memory_hits = metrics.cache_lookups.labels("memory", "hit")  # counted on every warm request

    def get(
        self,
        key: AgentKey,
        load: Callable[[], T],
        *,
        encode: Callable[[T], bytes],
        decode: Callable[[bytes], T | None],
    ) -> T:
        """The value of ``key`` from the first tier that has it, or ``load()``.

        ``load`` may raise (an agent that does not exist): nothing is cached
        then, so made-up names never take room from real ones.
        """
        value: T | None = self.memory.get(key)  # the memory tier holds what loaders returned
        if value is not None:
            self._memory_hits.inc()
            return value
        self._metrics.cache_lookups.labels("memory", "miss").inc()
        if self.shared is not None and self.shared.available:
            data = self.shared.get(key)
            value = decode(data) if data is not None else None
            self._metrics.cache_lookups.labels("redis", "hit" if value is not None else "miss").inc()
            if value is not None:
                shared: T = self.memory.put(key, value)
                return shared
        loaded = load()
        stored: T = self.memory.put(key, loaded)
        if self.shared is not None and stored is loaded:
            self.shared.set(key, encode(loaded))
        return stored
