"""The client's in-process cache of agents.

An agent fetched by exact tag is immutable: its entry never expires. One
fetched by range, ``latest`` or channel is a pointer that may move: after its
TTL the entry is stale, and the client still answers with it at once while
one background refresh per key revalidates it (stale-while-revalidate).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

from cachetools import LRUCache

from registry.client.agent import Agent, Source

CacheKey = tuple[str, str, str]
"""``(usecase, name, release selector)``."""


@dataclass(frozen=True)
class Entry:
    agent: Agent
    """The agent as served from the cache (``source="cache"``)."""
    fresh_until: float
    """``time.monotonic()`` after which the entry is stale; infinity for an exact tag."""

    def is_fresh(self, now: float) -> bool:
        return now < self.fresh_until

    @property
    def immutable(self) -> bool:
        return math.isinf(self.fresh_until)


class AgentCache:
    """A bounded, thread-safe map of entries, with single-flight refreshes."""

    def __init__(self, *, ttl: float, maxsize: int = 1024) -> None:
        self.ttl = ttl
        self._entries: LRUCache[CacheKey, Entry] = LRUCache(maxsize=maxsize)
        self._refreshing: set[CacheKey] = set()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def get(self, key: CacheKey) -> Entry | None:
        with self._lock:
            return self._entries.get(key)

    def put(self, key: CacheKey, agent: Agent, *, immutable: bool, source: Source = "cache") -> Entry:
        """Keep ``agent``; later answers from the entry say they come from ``source``."""
        fresh_until = math.inf if immutable else time.monotonic() + self.ttl
        entry = Entry(agent.with_source(source), fresh_until)
        with self._lock:
            self._entries[key] = entry
        return entry

    def renew(self, key: CacheKey, entry: Entry, *, seconds: float | None = None) -> None:
        """Keep ``entry`` fresh for another TTL (or ``seconds``), unless it was replaced meanwhile."""
        renewed = Entry(entry.agent, time.monotonic() + (self.ttl if seconds is None else seconds))
        with self._lock:
            if self._entries.get(key) is entry:
                self._entries[key] = renewed

    def discard(self, key: CacheKey) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def expire_pointers(self) -> list[CacheKey]:
        """Mark every entry that is not for an exact tag stale; their keys."""
        with self._lock:
            keys = [key for key, entry in self._entries.items() if not entry.immutable]
            for key in keys:
                self._entries[key] = Entry(self._entries[key].agent, 0.0)
        return keys

    def begin_refresh(self, key: CacheKey) -> bool:
        """Claim the refresh of ``key``: False when one is already running."""
        with self._lock:
            if key in self._refreshing:
                return False
            self._refreshing.add(key)
            return True

    def end_refresh(self, key: CacheKey) -> None:
        with self._lock:
            self._refreshing.discard(key)
