"""A cache of model replies on disk, shared by runs and processes
(``prompt-registry eval --cache DIR``): a request asked before gets the
reply it got then, with no model call.

An entry is keyed by the request's key (``request_key``: what the model
receives) and by how many times the same request was asked before in the
same case (``exchange_label``) by this model: the n-th time a case asks
the same request, it gets the n-th reply stored for it. So ``--repeat``
and a vote's identical branches get as many replies as they would from
the model, and a run served from the cache gives what the run that filled
it got. A reply that comes from the cache says so: ``ChatReply.origin`` is
``cache`` (a trace keeps it with the reply). Failed calls are not stored:
the next run asks again.

Each entry is one JSON file, ``DIR/<2 hex digits>/<key>-<n>.json``,
written to a temporary file beside it and renamed over it, so that two
processes filling the same directory at once never leave, nor read, half
an entry (the last to write one wins, whole). The cache fails open: an
entry that cannot be read or used (cut short, edited, of another version)
is logged on the ``registry.providers.chatcache`` logger and taken as a
miss, and its replacement written; a failure to write is logged, and the
reply is still answered.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from registry.errors import ConfigurationError
from registry.providers.atomicfile import write_atomically
from registry.providers.chat import ChatModel, ChatReply, ChatRequest, StreamItem, TextDelta
from registry.providers.exchanges import keyed_request, recorded_reply, reply_data, request_key
from registry.providers.recording import exchange_label

log = logging.getLogger(__name__)

ENTRY_VERSION = 1
_MAX_ENTRY_BYTES = 64 * 1024 * 1024
"""An entry holds a request and its reply (at most ``MAX_REPLY_BYTES``);
past this, it is not read at all."""


class CachingChatModel:
    """A ``ChatModel`` answering from the cache in ``directory`` what it
    holds, and passing the rest to ``inner``, whose replies it stores."""

    def __init__(self, inner: ChatModel, directory: str | Path) -> None:
        """Raises ``ConfigurationError`` when ``directory`` cannot be made."""
        self.inner = inner
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigurationError(f"cannot use the cache directory {directory}: {exc.strerror or exc}") from exc
        self.description = f"{inner.description}, cached in {directory}"
        self._asked: dict[tuple[str | None, str], int] = {}
        self._lock = threading.Lock()

    async def complete(self, request: ChatRequest) -> ChatReply:
        entry = self._entry(request)
        cached = await asyncio.to_thread(_read, entry.path, entry.key)
        if cached is not None:
            return cached
        reply = await self.inner.complete(request)
        await asyncio.to_thread(_write, entry, request, reply)
        return reply

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamItem]:
        """A cached reply's text a line a delta, then the reply; else ``inner``'s
        stream, its reply stored once it ends (not when it is closed before)."""
        entry = self._entry(request)
        cached = await asyncio.to_thread(_read, entry.path, entry.key)
        if cached is not None:
            for line in cached.content.splitlines(keepends=True):
                yield TextDelta(line)
            yield cached
            return
        items = self.inner.stream(request)
        try:
            async for item in items:
                if isinstance(item, ChatReply):
                    await asyncio.to_thread(_write, entry, request, item)
                yield item
        finally:
            close = getattr(items, "aclose", None)
            if close is not None:
                await close()

    def binding_problem(self, provider: str | None) -> str | None:
        return self.inner.binding_problem(provider)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def _entry(self, request: ChatRequest) -> _Entry:
        """The entry for this asking of ``request``: the next of its key in the current case."""
        key = request_key(request)
        asked = (exchange_label.get(), key)
        with self._lock:
            occurrence = self._asked.get(asked, 0)
            self._asked[asked] = occurrence + 1
        return _Entry(key, occurrence, self.directory / key[:2] / f"{key}-{occurrence}.json")


@dataclass(frozen=True)
class _Entry:
    """Where one asking of a request is stored."""

    key: str
    occurrence: int
    path: Path


def _read(path: Path, key: str) -> ChatReply | None:
    """The reply stored at ``path`` for ``key``; None when there is none,
    or none usable (logged)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(_MAX_ENTRY_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("cache entry %s cannot be read (%s); asking the model", path, exc.strerror or exc)
        return None
    try:
        return replace(ChatReply.from_dict(_stored_reply(data, key)), origin="cache")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("cache entry %s cannot be used (%s); asking the model", path, exc)
        return None


def _stored_reply(data: bytes, key: str) -> dict[str, Any]:
    """The reply of an entry's bytes. Raises ``ValueError`` (or ``KeyError``,
    ``TypeError``) for an entry that is not one for ``key``."""
    if len(data) > _MAX_ENTRY_BYTES:
        raise ValueError(f"it is larger than {_MAX_ENTRY_BYTES} bytes")
    entry = json.loads(data)
    if not isinstance(entry, dict) or entry.get("version") != ENTRY_VERSION:
        raise ValueError(f"it is not an entry of version {ENTRY_VERSION}")
    if entry.get("key") != key:
        raise ValueError("it is the entry of another request")
    reply = entry["reply"]
    if not isinstance(reply, dict) or not isinstance(reply.get("content"), str):
        raise ValueError("its reply has no content")
    return reply


def _write(entry: _Entry, request: ChatRequest, reply: ChatReply) -> None:
    """Store ``reply`` at ``entry``; a failure is logged, not raised (the reply stands)."""
    stored = {
        "version": ENTRY_VERSION,
        "key": entry.key,
        "occurrence": entry.occurrence,
        # For whoever opens the file to see what it answers; the key decides.
        "request": keyed_request(request),
        "reply": reply_data(recorded_reply(reply)),
    }
    try:
        entry.path.parent.mkdir(exist_ok=True)
        write_atomically(entry.path, json.dumps(stored, ensure_ascii=False).encode("utf-8"))
    except OSError as exc:
        log.warning("cache entry %s cannot be written (%s)", entry.path, exc.strerror or exc)
