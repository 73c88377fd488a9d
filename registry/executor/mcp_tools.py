"""Tools served by MCP servers, bound through the official ``mcp`` SDK.

``--mcp NAME=TARGET``: ``TARGET`` is a command line (split as a shell would,
run as a child process that speaks MCP on its stdin and stdout) or the
``http://`` or ``https://`` URL of a streamable-HTTP MCP server.
``McpTools`` connects when started, lists every page of the server's tools
and calls them by name.

The SDK's transports and session are anyio context managers, which one task
must enter and exit, while the executor calls tools from tasks of its own,
each under ``asyncio.wait_for``. So one task per provider owns the
connection: ``start`` launches it and waits until it has listed the tools,
``aclose`` tells it to leave (and, past a bound, cancels it). A call only
sends a request through the session: cancelling it cancels that request
(the SDK tells the server so) and leaves the session to the next call.

A stdio server's stderr goes to a pipe read as it comes: its last lines are
kept, the rest dropped, to be quoted when the server fails to start or dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import shlex
import signal
from collections import deque
from collections.abc import Collection, Iterator, Mapping
from contextlib import AsyncExitStack
from typing import Any, TextIO
from urllib.parse import urlsplit, urlunsplit

import anyio
import anyio.abc
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import (
    CONNECTION_CLOSED,
    AudioContent,
    CallToolResult,
    ContentBlock,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from registry.errors import ConfigurationError
from registry.executor.tools import ToolFailure

STDERR_LINES = 3
"""Lines of a stdio server's stderr kept (the last ones), to be quoted."""
_STDERR_LINE_CHARS = 300
_EXIT_WAIT = 2.0
"""Seconds to wait for a dead child's exit status and its last stderr lines."""
_CLOSE_GRACE = 5.0
"""Seconds ``aclose`` waits for an orderly close before cancelling the connection."""
_CLOSE_FORCE = 8.0
"""Seconds it then waits for the SDK's own bounded teardown (stdin closed,
then SIGTERM, then SIGKILL for a stdio server)."""
_MAX_PAGES = 1000
"""Pages of ``tools/list`` followed: a server whose cursors never end cannot hang a start."""


class McpServerUnavailable(Exception):
    """A call to an MCP server that is not running (it exited, its connection
    was lost, it was closed or never started). Later calls fail at once the
    same way."""


class McpTools:
    """The tools of one MCP server: ``--mcp NAME=COMMAND`` or ``--mcp NAME=URL``.

    ``env`` adds environment variables for a stdio server, over the few the
    SDK passes on (``HOME``, ``PATH``, ``USER``...).
    """

    def __init__(
        self,
        name: str,
        target: str,
        *,
        connect_timeout: float = 20.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.connect_timeout = connect_timeout
        self._url: str | None = None
        self._argv: list[str] = []
        if target.startswith(("http://", "https://")):
            self._url = target
            self._shown = _shown_url(name, target)
            self.description = f"mcp {name} ({self._shown})"
        else:
            try:
                self._argv = shlex.split(target)
            except ValueError as exc:
                raise ConfigurationError(f"--mcp {name}: cannot split the command {target!r}: {exc}") from exc
            if not self._argv:
                raise ConfigurationError(f"--mcp {name}: expected a command or an http(s) URL")
            self._shown = target
            self.description = f"mcp {name} (stdio: {target})"
        self._env = dict(env) if env is not None else None
        self._names: tuple[str, ...] = ()
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._scope: anyio.CancelScope | None = None
        self._transport_open = False
        self._closing = asyncio.Event()
        self._failure: str | None = None
        self._process: anyio.abc.Process | None = None
        self._stderr: _StderrTail | None = None
        self._start_failed = False

    async def start(self) -> None:
        """Connect, initialize and list the server's tools. Raises
        ``ConfigurationError`` (one line) when the command cannot start or
        exits, the URL refuses or fails, or the server does not answer within
        ``connect_timeout`` seconds. After such a failure it may be called
        again (the server may be up by then)."""
        if self._start_failed and self._task is not None and not self._closing.is_set():
            await _finished(self._task, _EXIT_WAIT)
            self._forget_failed_start()
        if self._task is not None:
            raise RuntimeError(f"{self.description} is started already")
        self._scope = anyio.CancelScope()
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._hold_connection(self._scope, ready), name=self.description)
        try:
            await ready
        except ConfigurationError:
            self._start_failed = True
            raise

    def _forget_failed_start(self) -> None:
        """Back to as constructed, but for the connection task that ended."""
        self._start_failed = False
        self._names = ()
        self._task = None
        self._scope = None
        self._transport_open = False
        self._failure = None
        self._process = None
        self._stderr = None

    def names(self) -> Collection[str]:
        return self._names

    async def call(self, name: str, arguments: dict[str, Any]) -> Any:
        """Call tool ``name``: its text contents joined by newlines, its
        structured content when it gave no text, other contents in words.
        Raises ``ToolFailure`` when the tool or the server reports an error,
        ``McpServerUnavailable`` when the server is gone."""
        client = self._client
        if client is None or self._failure is not None:
            raise McpServerUnavailable(self._failure or f"MCP server {self.name!r} is not started")
        try:
            result = await client.call_tool(name, arguments)
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:
                raise ToolFailure(exc.message) from exc
            raise McpServerUnavailable(await self._lost_mid_call(exc)) from exc
        return _output(result)

    async def aclose(self) -> None:
        """Disconnect and stop a stdio server; safe to call more than once and
        after a failed start, and bounded in time."""
        task, scope = self._task, self._scope
        if task is None or scope is None:
            return
        self._closing.set()
        if self._client is None and self._transport_open:
            scope.cancel()  # still connecting: nothing to close in order (see _connected_until_closed)
        if not await _finished(task, _CLOSE_GRACE):
            scope.cancel()  # the SDK's shielded teardown still runs, bounded
            if not await _finished(task, _CLOSE_FORCE):
                task.cancel()
                await _finished(task, 1.0)

    async def _hold_connection(self, scope: anyio.CancelScope, ready: asyncio.Future[None]) -> None:
        """The task that owns the connection, from connecting to closing."""
        try:
            error = await self._connected_until_closed(scope, ready)
            if not ready.done():
                reason = await self._not_ready(error)
                ready.set_exception(ConfigurationError(f"--mcp {self.name}: {reason}"))
                self._failure = f"MCP server {self.name!r} did not start: {reason}"
            elif error is not None and self._failure is None:
                self._failure = self._lost(error)
        finally:
            self._client = None
            if self._failure is None:
                self._failure = f"MCP server {self.name!r} is closed"
            if not ready.done():  # cancelled by aclose's last resort: start() must not wait forever
                ready.set_exception(ConfigurationError(f"--mcp {self.name}: closed before it was ready"))
            if self._stderr is not None:
                self._stderr.close()

    async def _connected_until_closed(self, scope: anyio.CancelScope, ready: asyncio.Future[None]) -> Exception | None:
        """Connect, list the tools, settle ``ready`` and hold the connection
        until ``aclose``; what went wrong, if anything (``None`` also when the
        connect deadline passed)."""
        try:
            with scope:
                async with AsyncExitStack() as stack:
                    # Nothing cancels the opening of the transport: a spawn cut
                    # short kills its child but cannot reap it (a process left
                    # behind). Past it, the SDK's teardown is shielded.
                    client = await self._open_transport(stack)
                    self._transport_open = True
                    scope.deadline = anyio.current_time() + self.connect_timeout
                    if self._closing.is_set():  # aclose came during the spawn
                        scope.cancel()
                    await stack.enter_async_context(client)
                    self._names = await _tool_names(client)
                    scope.deadline = math.inf
                    self._client = client
                    if not ready.done():  # a cancelled start() cancels it
                        ready.set_result(None)
                    await self._closing.wait()
        except Exception as exc:  # whatever connecting or the connection raised is put in words
            return exc
        return None

    async def _open_transport(self, stack: AsyncExitStack) -> Client:
        """Enter the transport on ``stack`` (spawn the stdio server; an HTTP
        client sends nothing yet); the client over it, not connected yet."""
        if self._url is not None:
            streams = await stack.enter_async_context(streamable_http_client(self._url))
            return Client(contextlib.nullcontext(streams), cache=None)
        self._stderr = tail = await _StderrTail.open()
        parameters = StdioServerParameters(command=self._argv[0], args=self._argv[1:], env=self._env)
        transport = stdio_client(parameters, errlog=tail.errlog)
        try:
            streams = await stack.enter_async_context(transport)
        finally:
            tail.errlog.close()  # the child holds its own copy: the pipe ends when the child does
        self._process = _spawned_process(transport)
        return Client(contextlib.nullcontext(streams), cache=None)

    async def _not_ready(self, error: Exception | None) -> str:
        """Why the connection never became ready, in words."""
        if error is None:
            if self._closing.is_set():
                return "closed before it was ready"
            return f"no answer within {self.connect_timeout:g} s ({self._shown})"
        cause = _innermost(error)
        if self._url is not None:
            if isinstance(cause, MCPError):
                return f"{self._shown} failed to initialize: {cause.message}"
            return f"cannot connect to {self._shown}: {_describe(cause)}"
        if self._process is None and isinstance(cause, OSError):
            return f"cannot run {self._argv[0]!r}: {cause.strerror or _describe(cause)}"
        if isinstance(cause, MCPError) and cause.code == CONNECTION_CLOSED:
            return f"the server {await self._how_it_ended()} before it was ready{self._stderr_lines()}"
        said = cause.message if isinstance(cause, MCPError) else _describe(cause)
        return f"the server failed to initialize: {said}{self._stderr_lines()}"

    def _lost(self, error: Exception) -> str:
        """What the connection's end, raised in the owning task, means for a caller."""
        where = f" ({self._shown})" if self._url is not None else ""
        return f"MCP server {self.name!r}{where} is not reachable: {_describe(_innermost(error))}"

    async def _lost_mid_call(self, exc: MCPError) -> str:
        """The message for a call whose connection closed under it. A stdio
        server whose pipe closed is gone for good; an HTTP response stream
        that ended is not proof that the server is: the owning task says
        when the transport itself failed, and why, as it ends."""
        if self._url is not None:
            if self._failure is None and self._task is not None:
                await _finished(self._task, _EXIT_WAIT)
            return self._failure or f"MCP server {self.name!r} ({self._shown}) lost the connection: {exc.message}"
        if self._failure is not None:
            return self._failure
        self._failure = (
            f"MCP server {self.name!r} is not running: it {await self._how_it_ended()}{self._stderr_lines()}"
        )
        return self._failure

    async def _how_it_ended(self) -> str:
        """How the stdio server ended (``exited with status 3``), once the
        child is reaped and its last stderr lines are read (each waited for a
        little, no more)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _EXIT_WAIT
        process = self._process
        while process is not None and process.returncode is None and loop.time() < deadline:
            await asyncio.sleep(0.01)
        if self._stderr is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stderr.ended.wait(), max(0.0, deadline - loop.time()))
        returncode = process.returncode if process is not None else None
        if returncode is None:
            return "closed its output" if process is not None else "closed the connection"
        if returncode < 0:
            try:
                return f"was killed by {signal.Signals(-returncode).name}"
            except ValueError:
                return f"was killed by signal {-returncode}"
        return f"exited with status {returncode}"

    def _stderr_lines(self) -> str:
        lines = list(self._stderr.lines) if self._stderr is not None else []
        return f" (stderr: {' | '.join(lines)})" if lines else ""


class _StderrTail(asyncio.Protocol):
    """The last lines a child writes to its stderr, from a pipe read as they
    come: a chatty server neither blocks on a full pipe nor floods the terminal."""

    def __init__(self, errlog: TextIO) -> None:
        self.errlog = errlog
        """The pipe's write end, for the child."""
        self.lines: deque[str] = deque(maxlen=STDERR_LINES)
        self.ended = asyncio.Event()
        self._partial = b""
        self._transport: asyncio.BaseTransport | None = None

    @classmethod
    async def open(cls) -> _StderrTail:
        read_fd, write_fd = os.pipe()
        reader = os.fdopen(read_fd, "rb", buffering=0)
        tail = cls(os.fdopen(write_fd, "w"))
        try:
            await asyncio.get_running_loop().connect_read_pipe(lambda: tail, reader)
        except BaseException:
            reader.close()
            tail.errlog.close()
            raise
        return tail

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        *complete, self._partial = (self._partial + data).split(b"\n")
        for line in complete[-STDERR_LINES:]:
            self._keep(line)
        if len(self._partial) > _STDERR_LINE_CHARS:
            self._keep(self._partial)
            self._partial = b""

    def eof_received(self) -> None:
        self._keep(self._partial)
        self._partial = b""
        self.ended.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended.set()

    def close(self) -> None:
        self.errlog.close()
        if self._transport is not None:
            self._transport.close()

    def _keep(self, line: bytes) -> None:
        text = line[:_STDERR_LINE_CHARS].decode("utf-8", "replace").strip()
        if text:
            self.lines.append(text)


def _spawned_process(transport: object) -> anyio.abc.Process | None:
    """The child of an entered ``stdio_client``. The SDK keeps it to itself,
    but how the server ended is what an operator needs to read; so it is
    read from the context manager's generator frame, and done without when
    a later SDK names it otherwise."""
    frame = getattr(getattr(transport, "gen", None), "ag_frame", None)
    process = frame.f_locals.get("process") if frame is not None else None
    return process if isinstance(process, anyio.abc.Process) else None


async def _tool_names(client: Client) -> tuple[str, ...]:
    names: dict[str, None] = {}
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        names.update(dict.fromkeys(tool.name for tool in page.tools))
        cursor = page.next_cursor
        if cursor is None:
            return tuple(names)
    raise RuntimeError(f"tools/list gave more than {_MAX_PAGES} pages")


def _output(result: CallToolResult) -> Any:
    """A tool's result as the model reads it; ``ToolFailure`` for an error it reports."""
    text = "\n".join(_as_text(block) for block in result.content)
    if result.is_error:
        raise ToolFailure(text or "the tool reported an error without saying what")
    has_text = any(isinstance(block, TextContent) for block in result.content)
    if not has_text and result.structured_content is not None:
        return result.structured_content
    return text


def _as_text(block: ContentBlock) -> str:
    """A content block as text: text as it is, anything else in words (``[image/png, 2,048 bytes]``)."""
    if isinstance(block, TextContent):
        return block.text
    if isinstance(block, ImageContent | AudioContent):
        return f"[{block.mime_type}, {_decoded_size(block.data):,} bytes]"
    if isinstance(block, ResourceLink):
        return f"[resource link: {block.uri}]"
    resource = block.resource
    if isinstance(resource, TextResourceContents):
        return resource.text
    return f"[resource {resource.uri}, {resource.mime_type or 'binary'}, {_decoded_size(resource.blob):,} bytes]"


def _decoded_size(data: str) -> int:
    """Bytes encoded by base64 ``data``, without decoding it."""
    return len(data.strip().rstrip("=")) * 3 // 4


def _shown_url(name: str, url: str) -> str:
    """``url`` without credentials, query or fragment: what messages and traces show."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConfigurationError(f"--mcp {name}: {url!r} is not a valid URL: {exc}") from exc
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return urlunsplit((parts.scheme, f"{host}:{port}" if port is not None else host, parts.path, "", ""))


def _innermost(error: BaseException) -> BaseException:
    """The first cause in ``error`` that is not a cancellation, looking into
    exception groups (anyio's task groups wrap what their tasks raise)."""
    return next((leaf for leaf in _leaves(error) if not isinstance(leaf, asyncio.CancelledError)), error)


def _leaves(error: BaseException) -> Iterator[BaseException]:
    inner = getattr(error, "exceptions", None)
    if isinstance(inner, tuple) and inner and all(isinstance(each, BaseException) for each in inner):
        for each in inner:
            yield from _leaves(each)
    else:
        yield error


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


async def _finished(task: asyncio.Task[None], timeout: float) -> bool:
    done, _ = await asyncio.wait({task}, timeout=timeout)
    return bool(done)
