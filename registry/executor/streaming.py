"""How a run streams: where its events go, and how the answer's text is
held back until it is sure to be the answer.

A streamed run (``Executor.astream``) gets an ``EventChannel``: its trace
is made of ``ObservedSpan`` s, which tell the channel when each opens and
ends (tool calls, parses, gates, spans: ``registry.executor.events``), and
its context carries the channel as ``RunContext.answer``, where the text
of the answer goes. A run nobody streams has neither, and pays nothing.

Each node of the run passes on, to the part of it whose text may be the
answer, where that text goes (an ``AnswerText``), and None to the others,
which then stream no text:

- a leaf whose reply is its answer whole (``vanilla`` and ``rag`` calls
  offered no tool, not parsed as ``json``) streams its model call's
  deltas as they come (``stream_reply``); any other leaf writes its output
  whole once it has it: a ReAct agent its final answer, a tool-calling
  agent its last reply, a ``json`` leaf its raw text (after any repair);
- a chain gives its answer step (the last one that is not a gate) a
  ``Held`` buffer when gates follow it, released once they all allow;
- a route gives its chosen route its own; a parallel pattern gives its
  branches none and writes its decided output whole (or gives its own to
  an aggregating agent); an evaluator-optimizer holds each candidate until
  the evaluator passes it (or the last one, with ``return_last``).

A blocked run's ``on_block`` text is written by the executor, once the run
is over: the text of a gate's chain was never released, so the stream
gives the on_block text and nothing else.

A run step by step (``Executor.astep``) may be given an ``EventSink``: its
events go there as they happen (``SinkTarget``), with the same rules for
text. A span replayed from the journal happened in an earlier step, which
gave its events then: it gives none again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from registry.errors import ModelError
from registry.executor import events
from registry.executor.events import Event, OutcomeEvent, TextEvent
from registry.executor.runtime import BLOCKED
from registry.executor.trace import Span
from registry.providers.chat import ChatModel, ChatReply, ChatRequest

if TYPE_CHECKING:
    from registry.executor.executor import RunResult


class AnswerText(Protocol):
    """Where the answer's text goes: the stream, or a buffer that holds it."""

    def write(self, event: TextEvent) -> None: ...


class EventTarget(Protocol):
    """Where a run's events go: a streamed run's channel, or a step's sink."""

    def put(self, event: Event) -> None: ...

    def write(self, event: TextEvent) -> None: ...


class EventSink(Protocol):
    """What receives a step's events as they happen (``Executor.astep(sink=...)``):
    text as it streams, tool calls and their results, parses, gates and
    spans. ``put`` is called on the executor's event loop, so it must not
    block (hand the event to a thread or a queue)."""

    def put(self, event: Event) -> None: ...


class SinkTarget:
    """A step's events, text included, handed to its ``EventSink``."""

    def __init__(self, sink: EventSink) -> None:
        self._sink = sink

    def put(self, event: Event) -> None:
        self._sink.put(event)

    def write(self, event: TextEvent) -> None:
        self._sink.put(event)


class Held:
    """Text held back until ``release`` passes it on (a gate allowed it), or
    dropped with the buffer (it never did)."""

    def __init__(self, then: AnswerText) -> None:
        self._then = then
        self._held: list[TextEvent] = []

    def write(self, event: TextEvent) -> None:
        self._held.append(event)

    def release(self) -> None:
        held, self._held = self._held, []
        for event in held:
            self._then.write(event)


def write_text(answer: AnswerText | None, text: str, *, agent: str, span: Span, path: str) -> None:
    """Write ``text`` (one piece) where the answer goes, if it goes anywhere."""
    if answer is not None and text:
        answer.write(TextEvent(text, agent, span.span_id, path))


async def stream_reply(
    model: ChatModel, request: ChatRequest, answer: AnswerText, *, agent: str, span: Span, path: str
) -> ChatReply:
    """The reply to ``request``, its text written to ``answer`` as it streams.
    The model's stream is closed however this ends (a cancelled run, an
    error), so that its connection closes and the server stops generating."""
    items = model.stream(request)
    try:
        async for item in items:
            if isinstance(item, ChatReply):
                return item
            write_text(answer, item.text, agent=agent, span=span, path=path)
    finally:
        # Typed as an iterator, made as an async generator: its aclose ends
        # the request, even when it stands at its last item.
        close = getattr(items, "aclose", None)
        if close is not None:
            await close()
    raise ModelError("the model's stream ended without its reply", reason="malformed")


_END = object()


class EventChannel:
    """A streamed run's events, from the run's task to its reader, in order."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[Any] = asyncio.Queue()

    def put(self, event: Event) -> None:
        self._queue.put_nowait(event)

    def write(self, event: TextEvent) -> None:
        """The answer's text goes out at once (``AnswerText``)."""
        self._queue.put_nowait(event)

    async def follow(self, run: Coroutine[Any, Any, RunResult], root: Span) -> AsyncGenerator[Event, None]:
        """Run ``run`` (a run that reports here, whose root span is ``root``)
        and yield its events as they come, then its outcome. Closed early, it
        cancels the run and waits until the run has ended."""
        task = asyncio.ensure_future(run)
        task.add_done_callback(self._close)
        try:
            while (item := await self._queue.get()) is not _END:
                yield item
        finally:
            if not task.done():
                task.cancel()
                await asyncio.wait({task})
        result = task.result()
        if result.outcome == BLOCKED and result.output:
            # The gate's on_block text: the text it blocked was never released.
            yield TextEvent(result.output, result.agent, root.span_id, "")
        yield OutcomeEvent(result)

    def _close(self, _: object) -> None:
        self._queue.put_nowait(_END)


@dataclass
class ObservedSpan(Span):
    """A span that puts its events in a channel as it and its children open and end."""

    channel: EventTarget | None = field(default=None, repr=False, compare=False)
    agent: str = ""
    """The agent it belongs to: its own name for an ``invoke_agent`` span, else its parent's."""
    parent_id: int | None = None

    @property
    def replayed(self) -> bool:
        """Whether it was replayed from the journal: its events were given by an earlier step."""
        return bool(self.attributes.get("registry.replayed"))

    def child(self, name: str, operation: str, **attributes: Any) -> Span:
        agent = str(attributes.get("gen_ai.agent.name", self.agent)) if operation == "invoke_agent" else self.agent
        span = ObservedSpan(
            name, operation, dict(attributes), channel=self.channel, agent=agent, parent_id=self.span_id
        )
        self.children.append(span)
        if self.channel is not None and not span.replayed:
            for event in events.started(span, agent):
                self.channel.put(event)
        return span

    def end(self) -> None:
        if self.ended is not None:
            return
        super().end()
        if self.channel is not None and not self.replayed:
            for event in events.ended(self, self.agent, self.parent_id):
                self.channel.put(event)


class EventsOnLoop:
    """A streamed run's events read from another thread, one at a time, on
    the event loop the run is on (``Executor.stream``)."""

    def __init__(self, events: AsyncGenerator[Event, None], loop: asyncio.AbstractEventLoop) -> None:
        self._events = events
        self._loop = loop
        self._reading: asyncio.Task[Any] | None = None
        """The read in progress on the loop, if one is."""

    def next(self) -> Event | None:
        """The next event; None after the last."""
        return asyncio.run_coroutine_threadsafe(self._next(), self._loop).result()

    def close(self) -> None:
        """End the run, if it is not over, and wait until it has ended: also
        while another thread waits for an event (interrupted by a signal)."""
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result()

    async def _next(self) -> Event | None:
        self._reading = asyncio.current_task()
        try:
            return await anext(self._events, None)
        finally:
            self._reading = None

    async def _close(self) -> None:
        # A generator cannot be closed while a read runs in it: the read is
        # cancelled first, which ends the run as cancelling its reader does.
        reading = self._reading
        if reading is not None:
            reading.cancel()
            await asyncio.wait({reading})
        await self._events.aclose()
