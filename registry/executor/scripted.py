"""A model with no LLM: replies written in advance, for tests, examples and
demonstrations (``--model scripted:FILE``).

A script is a YAML list of replies, or a mapping with a ``replies:`` list::

    - content: "Final Answer: 42"                 # a text reply
    - agent: support/classify_request             # only for calls made for this agent
      when: "(?i)refund"                          # RE2, searched in the last message's text
      content: '{"label": "billing"}'
    - tool_calls:                                 # native tool calls (content optional)
        - {name: search, arguments: {query: deploy tokens}}   # a mapping, sent as JSON text,
        - {name: search, arguments: "{not json"}              # or a string, sent as written
    - error: {status: 500, message: "overloaded"} # this call fails (ModelError, reason "status")
    - content: "..."
      repeat: true                                # used without limit; or `times: 3`
      usage: {input_tokens: 10, output_tokens: 3} # default: word counts of the request and the reply
      delay: 0.2                                  # seconds before replying
      stream_delay: 0.05                          # seconds between streamed pieces (below)

Each call takes the first reply, in order, that is not used up, whose
``agent`` (if any) is the call's and whose ``when`` (if any) matches the
last message; with none left, it fails with ``ModelError`` (reason
``no-reply``) saying what the call was, so that the author sees what the
script lacks. A ``delay`` longer than the call's timeout times out, as a
slow endpoint would.

``stream`` answers with the same reply, its content in pieces (a word and
the spaces after it, each), then the whole reply; ``stream_delay`` waits
between pieces, so that a test can act mid-stream (``complete`` waits as
long as the whole stream would). Once ``delay`` and the pieces' delays pass
the call's timeout, the stream ends there with ``ModelError`` (reason
``timeout``). ``stream_counts()`` tells how many streams were opened, ended and closed
by their reader before the reply.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any

import re2

from registry.errors import ConfigurationError, ModelError, summarize
from registry.executor.retrieval import Passage
from registry.format.safeyaml import JsonPath, YamlDocument, YamlLimits, located_issue, read_yaml_file
from registry.models import Issue, close_matches, did_you_mean, json_pointer, shorten
from registry.providers.chat import (
    ChatReply,
    ChatRequest,
    StreamItem,
    TextDelta,
    ToolCallRequest,
    Usage,
)

_REPLY_KEYS = ("content", "tool_calls", "error", "agent", "when", "repeat", "times", "usage", "delay", "stream_delay")
_CALL_KEYS = ("name", "arguments")
_ERROR_KEYS = ("status", "message")
_USAGE_KEYS = ("input_tokens", "output_tokens")
_FILE_KEYS = ("replies",)
# Scripts are the operator's own files, and replies can be long texts.
_LIMITS = YamlLimits(max_bytes=16 * 1024 * 1024)
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


@dataclass(frozen=True)
class ScriptedReply:
    """One reply of a script, as loaded; ``where`` says where it was written."""

    where: str
    content: str = ""
    tool_calls: tuple[tuple[str, str], ...] = ()
    """(name, arguments text) of each call."""
    error: tuple[int, str] | None = None
    """(status, message) of a failing call."""
    agent: str | None = None
    when: str | None = None
    uses: int | None = 1
    """How many calls it answers; None: without limit."""
    usage: Usage | None = None
    delay: float = 0.0
    stream_delay: float = 0.0
    """Seconds between the pieces of a streamed reply."""
    pattern: Any = field(default=None, repr=False, compare=False)
    """``when``, compiled by RE2."""

    def __str__(self) -> str:
        return self.where


@dataclass(frozen=True)
class StreamCounts:
    """What the streams of a scripted model did."""

    opened: int
    """Streams that began (a reply was chosen)."""
    ended: int
    """Streams over, whichever way: the reply given, an error, or closed."""
    closed_early: int
    """Streams their reader closed (``aclose``, or its task cancelled) before the reply."""


class ScriptedModel:
    """A ``ChatModel`` answering with scripted replies; build it with
    ``from_file`` or ``from_replies``."""

    def __init__(self, replies: Sequence[ScriptedReply], *, source: str) -> None:
        self.description = f"scripted {source}"
        self._replies = tuple(replies)
        self._left = [reply.uses for reply in self._replies]
        self._used = [0] * len(self._replies)
        self._calls = 0
        self._opened = self._ended = self._closed_early = 0
        # Choosing a reply and numbering its tool calls happen together, with
        # no await in between; the lock also covers callers on other threads.
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedModel:
        """The model of a YAML script. Raises ``ConfigurationError`` naming
        the file and every problem, each with its line (``errors``), the
        first in its message, when it cannot be used."""
        name = str(path)
        document = read_yaml_file(
            path, what="scripted replies file", when_empty="a script is a list of replies", limits=_LIMITS
        )
        loader = _Loader(name, document)
        value = document.value
        base: JsonPath = ()
        if isinstance(value, dict):
            loader.check_keys(value, (), _FILE_KEYS)
            if "replies" not in value:
                loader.problem("a script mapping needs a `replies:` list", ())
            value, base = value.get("replies"), ("replies",)
        return cls(loader.replies(value, base), source=name)

    @classmethod
    def from_replies(cls, replies: list[Any], *, source: str) -> ScriptedModel:
        """The model of replies given as Python values, in the YAML shape;
        ``source`` names them in messages. Raises ``ConfigurationError``."""
        return cls(_Loader(source, None).replies(replies, ()), source=source)

    async def complete(self, request: ChatRequest) -> ChatReply:
        """The first usable reply for ``request``. Raises ``ModelError``:
        reason ``no-reply`` when none is left, ``status`` for a scripted error,
        ``timeout`` when the reply's delay is longer than the request's timeout."""
        reply, first_call = self._take(request)
        # As long as the stream of the same reply takes: the pieces come no faster whole.
        gaps = max(0, len(_pieces(reply.content)) - 1)
        await _wait(request, reply.delay + reply.stream_delay * gaps, 0.0)
        return _answer(request, reply, first_call)

    def stream(self, request: ChatRequest) -> AsyncIterator[StreamItem]:
        """The reply ``complete`` gives, its content in pieces, then the whole reply."""
        return self._stream(request)

    async def _stream(self, request: ChatRequest) -> AsyncIterator[StreamItem]:
        reply, first_call = self._take(request)
        self._opened += 1
        answered = False
        try:
            spent = await _wait(request, reply.delay, 0.0)
            whole = _answer(request, reply, first_call)
            for index, piece in enumerate(_pieces(reply.content)):
                if index:
                    spent = await _wait(request, reply.stream_delay, spent)
                yield TextDelta(piece)
            answered = True
            yield whole
        except (GeneratorExit, asyncio.CancelledError):
            if not answered:
                self._closed_early += 1
            raise
        finally:
            self._ended += 1

    def stream_counts(self) -> StreamCounts:
        return StreamCounts(self._opened, self._ended, self._closed_early)

    def binding_problem(self, provider: str | None) -> str | None:
        """None: a script answers every definition, whatever provider it names."""
        return None

    async def aclose(self) -> None:
        """Nothing to release."""

    def unused(self) -> list[ScriptedReply]:
        """The replies no call has used, in order."""
        with self._lock:
            return [reply for reply, used in zip(self._replies, self._used, strict=True) if not used]

    def _take(self, request: ChatRequest) -> tuple[ScriptedReply, int]:
        """The reply for ``request``, used up by one, and the number its first tool call gets."""
        text = _last_text(request)
        with self._lock:
            index = self._choose(request.agent, text)
            if index is None:
                who = request.agent or "a call"
                raise ModelError(
                    f"{self.description} has no reply left for {who}, whose last message begins {shorten(text, 60)!r}",
                    reason="no-reply",
                )
            reply = self._replies[index]
            first_call = self._calls + 1
            self._calls += len(reply.tool_calls)
        return reply, first_call

    def _choose(self, agent: str | None, text: str) -> int | None:
        for index, reply in enumerate(self._replies):
            left = self._left[index]
            if left == 0 or (reply.agent is not None and reply.agent != agent):
                continue
            if reply.pattern is not None and reply.pattern.search(text) is None:
                continue
            if left is not None:
                self._left[index] = left - 1
            self._used[index] += 1
            return index
        return None


class _Loader:
    """Validates replies, collecting every problem with where it is."""

    def __init__(self, source: str, document: YamlDocument | None) -> None:
        self._source = source
        self._document = document
        self._issues: list[Issue] = []

    def replies(self, value: Any, base: JsonPath) -> list[ScriptedReply]:
        """The replies of ``value``, a list; raises ``ConfigurationError`` with
        the first problem found and how many more there are."""
        loaded: list[ScriptedReply] = []
        if not isinstance(value, list):
            if not self._issues:
                self.problem(f"the replies must be a list, not {_kind(value)}", base)
        else:
            for index, item in enumerate(value):
                reply = self._reply(item, base + (index,))
                if reply is not None:
                    loaded.append(reply)
        if self._issues:
            raise ConfigurationError(summarize(self._issues), errors=self._issues)
        return loaded

    def problem(self, message: str, path: JsonPath, *, key: str | None = None) -> None:
        """Record a problem at ``path``, or at its ``key`` (the line of the key
        itself; the path stays the mapping's, which the message names the key of)."""
        self._issues.append(located_issue(message, self._document, path, file=self._source, key=key))

    def check_keys(self, value: Mapping[str, Any], path: JsonPath, known: Sequence[str]) -> None:
        for key in value:
            if key not in known:
                hint = did_you_mean(close_matches(key, known))
                self.problem(f"unknown key {key!r}" + (f"; {hint}" if hint else ""), path, key=key)

    def _reply(self, value: Any, path: JsonPath) -> ScriptedReply | None:
        if not isinstance(value, dict):
            self.problem(f"a reply must be a mapping, not {_kind(value)}", path)
            return None
        errors_before = len(self._issues)
        self.check_keys(value, path, _REPLY_KEYS)
        if not any(key in value for key in ("content", "tool_calls", "error")):
            self.problem("a reply needs content, tool_calls or error", path)
        if "error" in value and ("content" in value or "tool_calls" in value):
            self.problem("an error reply cannot have content or tool_calls", path, key="error")
        if value.get("repeat") is True and "times" in value:
            self.problem("a reply has repeat or times, not both", path, key="times")
        content = self._typed(value, path, "content", str, "text", "")
        agent = self._typed(value, path, "agent", str, "text", None)
        when = self._typed(value, path, "when", str, "text", None)
        repeat = self._typed(value, path, "repeat", bool, "true or false", False)
        times = self._typed(value, path, "times", int, "an integer", 1)
        delay = self._typed(value, path, "delay", (int, float), "a number of seconds", 0)
        stream_delay = self._typed(value, path, "stream_delay", (int, float), "a number of seconds", 0)
        pattern = self._pattern(when, path + ("when",))
        if times < 1:
            self.problem(f"times must be 1 or more, not {times}", path + ("times",))
        for key, seconds in (("delay", delay), ("stream_delay", stream_delay)):
            if seconds < 0 or not math.isfinite(seconds):
                self.problem(f"{key} must be 0 seconds or more, not {seconds}", path + (key,))
        calls = self._tool_calls(value.get("tool_calls"), path + ("tool_calls",)) if "tool_calls" in value else ()
        error = self._error(value["error"], path + ("error",)) if "error" in value else None
        usage = self._usage(value["usage"], path + ("usage",)) if "usage" in value else None
        if len(self._issues) > errors_before:
            return None
        return ScriptedReply(
            where=self._where(path),
            content=content,
            tool_calls=calls,
            error=error,
            agent=agent,
            when=when,
            uses=None if repeat else times,
            usage=usage,
            delay=float(delay),
            stream_delay=float(stream_delay),
            pattern=pattern,
        )

    def _typed(self, value: Mapping[str, Any], path: JsonPath, key: str, kind: Any, words: str, default: Any) -> Any:
        """``value[key]`` if it is of ``kind`` (``words`` in messages), else ``default``."""
        if key not in value:
            return default
        found = value[key]
        # bool is an int to Python; true is never a count or a number of seconds.
        if not isinstance(found, kind) or (isinstance(found, bool) and kind is not bool):
            self.problem(f"{key} must be {words}, not {_kind(found)}", path + (key,))
            return default
        return found

    def _pattern(self, when: str | None, path: JsonPath) -> Any:
        if when is None:
            return None
        try:
            return re2.compile(when, _RE2_OPTIONS)
        except re2.error as exc:
            reason = exc.args[0] if exc.args else exc
            if isinstance(reason, bytes):
                reason = reason.decode("utf-8", "replace")
            self.problem(
                f"when {shorten(when, 60)!r} is not a regular expression RE2 can run ({reason});"
                " RE2 has no backreferences or lookaround",
                path,
            )
            return None

    def _tool_calls(self, value: Any, path: JsonPath) -> tuple[tuple[str, str], ...]:
        if not isinstance(value, list) or not value:
            self.problem(f"tool_calls must be a list of calls, not {_kind(value)}", path)
            return ()
        calls: list[tuple[str, str]] = []
        for index, call in enumerate(value):
            where = path + (index,)
            if not isinstance(call, dict):
                self.problem(f"a tool call must be a mapping with a name, not {_kind(call)}", where)
                continue
            self.check_keys(call, where, _CALL_KEYS)
            name = call.get("name")
            if not isinstance(name, str) or not name:
                self.problem("a tool call needs a name", where)
            arguments = call.get("arguments", {})
            if isinstance(arguments, dict):
                arguments = json.dumps(arguments, ensure_ascii=False)
            elif not isinstance(arguments, str):
                self.problem(f"arguments must be a mapping or text, not {_kind(arguments)}", where + ("arguments",))
            calls.append((str(name), str(arguments)))
        return tuple(calls)

    def _error(self, value: Any, path: JsonPath) -> tuple[int, str] | None:
        if not isinstance(value, dict):
            self.problem(f"error must be a mapping with a status, not {_kind(value)}", path)
            return None
        self.check_keys(value, path, _ERROR_KEYS)
        status = self._typed(value, path, "status", int, "an integer", None)
        message = self._typed(value, path, "message", str, "text", "")
        if "status" not in value:
            self.problem("error needs a status", path)
        elif status is not None and not 400 <= status <= 599:
            self.problem(f"status must be an HTTP error status (400 to 599), not {status}", path + ("status",))
        return None if status is None else (status, message)

    def _usage(self, value: Any, path: JsonPath) -> Usage | None:
        if not isinstance(value, dict):
            self.problem(f"usage must be a mapping of token counts, not {_kind(value)}", path)
            return None
        self.check_keys(value, path, _USAGE_KEYS)
        counts: dict[str, int | None] = {}
        for key in _USAGE_KEYS:
            count = counts[key] = self._typed(value, path, key, int, "an integer", None)
            if count is not None and count < 0:
                self.problem(f"{key} must be 0 or more, not {count}", path + (key,))
        return Usage(**counts)

    def _where(self, path: JsonPath) -> str:
        position = self._document.position(path) if self._document is not None else None
        if position is not None:
            return f"{self._source}:{position.line}"
        return f"{self._source}#{json_pointer(path)}"


def _kind(value: Any) -> str:
    """The JSON kind of ``value``, in words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _text(content: Any) -> str:
    """The text of a message's content: a string, or text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [part.get("text") for part in content if isinstance(part, Mapping)]
        return "\n".join(part for part in parts if isinstance(part, str))
    return ""


def _last_text(request: ChatRequest) -> str:
    return _text(request.messages[-1].get("content")) if request.messages else ""


async def _wait(request: ChatRequest, delay: float, spent: float) -> float:
    """Wait ``delay`` more seconds of a call that has taken ``spent``; past
    the request's timeout, wait until it and time out, as an endpoint would."""
    timeout = request.timeout
    if timeout is not None and spent + delay > timeout:
        await asyncio.sleep(max(0.0, timeout - spent))
        raise ModelError(f"the scripted model did not answer within {timeout:g} s", reason="timeout")
    if delay:
        await asyncio.sleep(delay)
    return spent + delay


def _answer(request: ChatRequest, reply: ScriptedReply, first_call: int) -> ChatReply:
    """The reply a scripted reply gives, or its scripted error (``ModelError``, reason ``status``)."""
    if reply.error is not None:
        status, message = reply.error
        raise ModelError(
            f"the scripted model answered {status} {HTTPStatus(status).phrase}: {message}",
            reason="status",
            http_status=status,
        )
    calls = tuple(
        ToolCallRequest(id=f"call_{number}", name=name, arguments=arguments)
        for number, (name, arguments) in enumerate(reply.tool_calls, start=first_call)
    )
    return ChatReply(
        content=reply.content,
        tool_calls=calls,
        usage=_word_counts(request, reply) if reply.usage is None else reply.usage,
        model=request.model,
        finish_reason="tool_calls" if calls else "stop",
    )


_PIECE = re.compile(r"\S+\s*|\s+")


def _pieces(text: str) -> list[str]:
    """``text`` as a stream gives it: each word with the spaces after it (leading spaces alone)."""
    return _PIECE.findall(text)


def _word_counts(request: ChatRequest, reply: ScriptedReply) -> Usage:
    """Words as tokens: the request's messages in, the reply's text and calls out."""
    words_in = sum(len(_text(message.get("content")).split()) for message in request.messages)
    words_out = len(reply.content.split()) + sum(len(f"{n} {a}".split()) for n, a in reply.tool_calls)
    return Usage(input_tokens=words_in, output_tokens=words_out)


class ScriptedTools:
    """Tools that answer with results written in advance (an example's
    ``tool_results``): each name has a list, used one per call, the last
    one again once the list runs out. Implements ``ToolProvider``."""

    def __init__(self, results: Mapping[str, Sequence[Any]], *, source: str) -> None:
        self.description = f"scripted tools {source}"
        self._results = {name: list(values) for name, values in results.items()}
        self._calls: dict[str, int] = {}

    async def start(self) -> None:
        return None

    def names(self) -> Sequence[str]:
        return list(self._results)

    async def call(self, name: str, arguments: dict[str, Any]) -> Any:
        values = self._results[name]
        index = self._calls.get(name, 0)
        self._calls[name] = index + 1
        return values[min(index, len(values) - 1)]

    async def aclose(self) -> None:
        return None


class ScriptedRetriever:
    """A retriever that returns the same passages for any query (an
    example's ``passages``), at most ``top_k`` of them."""

    def __init__(self, passages: Sequence[Mapping[str, str]], *, source: str) -> None:
        self.description = f"scripted passages {source}"
        self._passages = [
            Passage(title=p["title"], text=p["text"], source=f"{source}#{index}", score=0.0)
            for index, p in enumerate(passages)
        ]

    def search(self, query: str, *, top_k: int) -> list[Passage]:
        return self._passages[:top_k]
