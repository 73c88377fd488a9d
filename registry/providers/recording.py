"""Recording a run's model exchanges to a file, and replaying them with no
model at all: what an evaluation runs on in CI when no model key is there
(``prompt-registry eval --record FILE`` / ``--replay FILE``).

``RecordingChatModel(inner, path)`` passes every call to ``inner`` and
keeps each request with its reply; ``aclose`` writes them to ``path``
(``registry.providers.exchanges`` describes the file). ``ReplayChatModel(path)``
answers each request with the reply recorded for it, matched by its key
(``request_key``: what the model receives) and by the eval case it is made
for: the ``exchange_label`` of the task making the call, which the eval
runner sets per case (None outside evals).

A request asked several times in one case (``--repeat``, a vote's
identical branches) gets the replies recorded for it in order, then the
last one again. A request the file does not hold is a ``ModelError``
(reason ``not-recorded``) naming the case, the agent and how the request
differs from the nearest one recorded for that case: never a call to a
live model.

The recorder changes one thing in the replies it passes on: each tool
call's id becomes one derived from the request and the call's place in
the reply (nine hex digits, which every provider accepts), so that a run
recorded again writes the same file, and its later requests (which quote
those ids) keep their keys.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import AsyncIterator
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from pathlib import Path

from registry.errors import ConfigurationError, ModelError
from registry.providers.atomicfile import write_atomically
from registry.providers.chat import ChatModel, ChatReply, ChatRequest, StreamItem, TextDelta, ToolCallRequest
from registry.providers.exchangefile import load_exchanges
from registry.providers.exchanges import (
    Exchange,
    RecordedError,
    RecordedReply,
    dump_exchanges,
    keyed_request,
    recorded_reply,
    request_key,
    request_of_parts,
)
from registry.providers.nearest_exchange import not_recorded

exchange_label: ContextVar[str | None] = ContextVar("exchange_label", default=None)
"""The eval case the model calls of this task are made for: the runner
sets it (``exchange_label.set(case_id)``) in the task that runs the case,
and every task the run starts inherits it. Recorded with each exchange,
and part of what a replay matches; None outside evals."""

NOT_RECORDED = "not-recorded"
"""The ``ModelError.reason`` of a request that a replay file does not hold."""


class RecordingChatModel:
    """A ``ChatModel`` that passes every call to ``inner`` and records the
    exchanges, written to ``path`` (atomically, replacing it) when it is closed."""

    def __init__(self, inner: ChatModel, path: str | Path) -> None:
        self.inner = inner
        self.path = Path(path)
        _prepare_to_write(self.path)
        self.description = f"{inner.description}, recorded to {path}"
        self._groups: dict[tuple[str | None, str], _Group] = {}
        self._lock = threading.Lock()
        self._closed = False

    async def complete(self, request: ChatRequest) -> ChatReply:
        group, index = self._reserve(request)
        try:
            reply = await self.inner.complete(request)
        except ModelError as exc:
            group.replies[index] = RecordedError(exc.reason, exc.detail, exc.http_status)
            raise
        reply = _with_stable_ids(reply, group.key)
        group.replies[index] = recorded_reply(reply)
        return reply

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamItem]:
        """``inner``'s stream, passed on as it comes; the reply is recorded
        once it ends (a stream closed before its reply records nothing)."""
        group, index = self._reserve(request)
        items = self.inner.stream(request)
        try:
            async for item in items:
                if isinstance(item, ChatReply):
                    item = _with_stable_ids(item, group.key)
                    group.replies[index] = recorded_reply(item)
                yield item
        except ModelError as exc:
            group.replies[index] = RecordedError(exc.reason, exc.detail, exc.http_status)
            raise
        finally:
            close = getattr(items, "aclose", None)
            if close is not None:
                await close()

    def binding_problem(self, provider: str | None) -> str | None:
        return self.inner.binding_problem(provider)

    def exchanges(self) -> list[Exchange]:
        """What is recorded so far: the calls answered (or failed), in the file's order."""
        with self._lock:
            groups = list(self._groups.values())
        found = []
        for group in groups:
            replies = tuple(reply for reply in list(group.replies) if reply is not None)
            if replies:
                agent = min(group.agents) if group.agents else None
                found.append(Exchange(group.case, agent, group.request, replies, group.key))
        return found

    def write(self) -> None:
        """Write the exchanges recorded so far to ``path``, replacing it in one
        rename. Raises ``ConfigurationError`` when it cannot be written, or
        would be larger than a replay reads."""
        payload = dump_exchanges(self.exchanges())
        try:
            write_atomically(self.path, payload)
        except OSError as exc:
            raise ConfigurationError(f"cannot write the recording {self.path}: {exc.strerror or exc}") from exc

    async def aclose(self) -> None:
        """Close ``inner``, then write the file (once, however often this is called)."""
        if self._closed:
            return
        self._closed = True
        try:
            await self.inner.aclose()
        finally:
            self.write()

    def _reserve(self, request: ChatRequest) -> tuple[_Group, int]:
        """The group of ``request`` in the current case, and the place of its reply there."""
        case = exchange_label.get()
        parts = keyed_request(request)
        key = request_key(request)
        with self._lock:
            group = self._groups.get((case, key))
            if group is None:
                group = self._groups[(case, key)] = _Group(case, key, request_of_parts(parts))
            if request.agent is not None:
                group.agents.add(request.agent)
            group.replies.append(None)
            return group, len(group.replies) - 1


@dataclass
class _Group:
    """The calls of one case with one request, in the order they were made."""

    case: str | None
    key: str
    request: ChatRequest
    agents: set[str] = field(default_factory=set)
    replies: list[RecordedReply | None] = field(default_factory=list)
    """None: asked, and not answered (yet, or ever: a stream closed early)."""


class ReplayChatModel:
    """A ``ChatModel`` answering from a file ``RecordingChatModel`` wrote,
    with no model. Raises ``ConfigurationError`` (every problem with its
    file, line and column) when the file cannot be used."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self.exchanges = load_exchanges(path)
        self.description = f"replay of {path}"
        self._by_key = {(exchange.case, exchange.key): exchange for exchange in self.exchanges}
        self._asked: dict[tuple[str | None, str], int] = {}
        self._lock = threading.Lock()

    async def complete(self, request: ChatRequest) -> ChatReply:
        """The reply recorded for ``request`` in the current case. Raises
        ``ModelError``: reason ``not-recorded`` when there is none, or the
        recorded error's reason when the recorded call failed."""
        return self._answer(request)

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamItem]:
        """The recorded reply's text, a line a delta, then the reply."""
        reply = self._answer(request)
        for line in reply.content.splitlines(keepends=True):
            yield TextDelta(line)
        yield reply

    def binding_problem(self, provider: str | None) -> str | None:
        """None: a replay serves every provider it recorded, and says so at the call for any other."""
        return None

    async def aclose(self) -> None:
        """Nothing to release."""

    def _answer(self, request: ChatRequest) -> ChatReply:
        case = exchange_label.get()
        key = request_key(request)
        with self._lock:
            exchange = self._by_key.get((case, key))
            if exchange is None:
                message = not_recorded(self.path, case, request.agent, keyed_request(request), key, self.exchanges)
                raise ModelError(message, reason=NOT_RECORDED)
            asked = self._asked.get((case, key), 0)
            self._asked[(case, key)] = asked + 1
        reply = exchange.replies[min(asked, len(exchange.replies) - 1)]
        if isinstance(reply, RecordedError):
            raise ModelError(
                f"{reply.message} (a failure recorded at {exchange.where})",
                reason=reply.reason,
                http_status=reply.http_status,
            )
        return replace(reply, origin="replay")


def _with_stable_ids(reply: ChatReply, key: str) -> ChatReply:
    """``reply`` with its tool calls' ids derived from the request's ``key``
    and each call's place: the same in every recording of the same run."""
    if not reply.tool_calls:
        return reply
    calls = tuple(
        ToolCallRequest(hashlib.sha256(f"{key}:{index}".encode()).hexdigest()[:9], call.name, call.arguments)
        for index, call in enumerate(reply.tool_calls)
    )
    return replace(reply, tool_calls=calls)


def _prepare_to_write(path: Path) -> None:
    """Make the recording's folder and check it can be written to, before
    any model is asked: the file is written once the run is over, when a
    missing folder would cost every call made."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        raise ConfigurationError(f"cannot write the recording {path}: a file is in the way of its folder") from exc
    except OSError as exc:
        raise ConfigurationError(f"cannot write the recording {path}: {exc.strerror or exc}") from exc
    if path.is_dir():
        raise ConfigurationError(f"cannot write the recording {path}: it is a directory")
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise ConfigurationError(f"cannot write the recording {path}: permission denied")
