"""Tools served by MCP servers (registry/executor/mcp_tools.py), against the
real server of tests/support/mcp_server.py: as a child process over stdio, and as
its own process over streamable HTTP on a free port. Nothing is mocked."""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from mcp import Client, StdioServerParameters
from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS

from registry.errors import ConfigurationError
from registry.executor.mcp_tools import McpServerUnavailable, McpTools
from registry.executor.tools import ToolFailure
from tests.support.mcp_commands import SERVER, STDIO, down_the_first_time
from tests.support.mcp_server import PAGE_SIZE
from tests.support.ports import free_port
from tests.support.waits import LATE

TOOLS = {"add", "echo", "fail", "slow", "big", "die", "image", "files", "point"}


class McpHttpServer:
    """``tests/support/mcp_server.py --http`` on a free port, stopped by its PID."""

    def __init__(self, log: Path, *options: str) -> None:
        self.options = options
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.base}/mcp"
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> McpHttpServer:
        command = [sys.executable, str(SERVER), "--http", "--port", str(self.port), *self.options]
        with self.log.open("wb") as log:  # the child keeps its own copy
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise AssertionError(f"the MCP server did not start: {self.log.read_text()}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
        process.wait()


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[McpHttpServer]:
    server = McpHttpServer(tmp_path / "mcp-http.log").start()
    yield server
    server.stop()


@pytest.fixture(params=["stdio", "stdio-legacy", "http", "http-legacy"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Where the test server is: a command line, or a URL; speaking the
    protocol of 2026, or only the initialize handshake (``-legacy``)."""
    transport, _, legacy = request.param.partition("-")
    options = ["--legacy"] if legacy else []
    if transport == "stdio":
        yield " ".join([STDIO, *options])
        return
    server = McpHttpServer(tmp_path / "mcp-http.log", *options).start()
    yield server.url
    server.stop()


def start_fails(tools: McpTools) -> str:
    """Start ``tools``, which must fail with a ConfigurationError, and close
    them; its message. Give them a ``connect_timeout`` of ``LATE`` unless the
    timeout is what fails them: a start that waited it out instead of seeing
    the failure says "no answer within 60 s"."""

    async def scenario() -> str:
        try:
            with pytest.raises(ConfigurationError) as failure:
                await tools.start()
        finally:
            await tools.aclose()
        return str(failure.value)

    message = asyncio.run(scenario())
    assert "\n" not in message
    return message


async def written(path: Path) -> str:
    """What the test server wrote to ``path``, once it has (a deadline, not a measurement)."""
    deadline = asyncio.get_running_loop().time() + 30
    while not (path.exists() and (text := path.read_text(encoding="utf-8"))):
        assert asyncio.get_running_loop().time() < deadline, f"the test server never wrote {path.name}"
        await asyncio.sleep(0.02)
    return text


def children_running(fragment: str) -> list[psutil.Process]:
    """This process's children whose command line contains ``fragment``."""
    found = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):  # one that ended while looked at is not running
            if fragment in " ".join(child.cmdline()):
                found.append(child)
    return found


def test_tools_are_listed_across_every_page_and_called(target: str) -> None:
    async def scenario() -> None:
        tools = McpTools("docs", target)
        try:
            await tools.start()
            assert set(tools.names()) == TOOLS
            assert await tools.call("add", {"a": 2, "b": 3}) == "5"
            assert await tools.call("echo", {"text": "héllo"}) == "héllo"
            assert await tools.call("big", {"size": 200_000}) == "x" * 200_000
        finally:
            await tools.aclose()

    asyncio.run(scenario())


@pytest.mark.parametrize("legacy", [False, True], ids=["2026", "handshake"])
@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_the_test_server_pages_its_tools_in_the_era_asked_for(transport: str, legacy: bool, tmp_path: Path) -> None:
    # What makes the tests above prove that every page is read, in both eras of the protocol.
    options = ["--legacy"] if legacy else []
    http_server = McpHttpServer(tmp_path / "mcp-http.log", *options).start() if transport == "http" else None
    server: str | StdioServerParameters = (
        http_server.url
        if http_server
        else StdioServerParameters(command=sys.executable, args=[str(SERVER), "--stdio", *options])
    )

    async def scenario() -> None:
        async with Client(server, cache=None) as client:
            first = await client.list_tools()
            assert (client.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS) == legacy
        assert len(first.tools) == PAGE_SIZE < len(TOOLS)
        assert first.next_cursor is not None

    try:
        asyncio.run(scenario())
    finally:
        if http_server:
            http_server.stop()


def test_contents_other_than_text_are_structured_or_described_in_words(target: str) -> None:
    async def scenario() -> None:
        tools = McpTools("docs", target)
        try:
            await tools.start()
            assert await tools.call("point", {}) == {"x": 1, "y": 2}
            assert await tools.call("image", {}) == "[image/png, 68 bytes]"
            assert await tools.call("files", {}) == (
                "[resource link: file:///notes.txt]\n"
                "inline text\n"
                "[resource file:///b.bin, application/octet-stream, 4 bytes]"
            )
        finally:
            await tools.aclose()

    asyncio.run(scenario())


def test_a_tool_that_fails_raises_tool_failure_with_its_message(target: str) -> None:
    async def scenario() -> None:
        tools = McpTools("docs", target)
        try:
            await tools.start()
            with pytest.raises(ToolFailure, match="the disk is full"):
                await tools.call("fail", {"message": "the disk is full"})
            with pytest.raises(ToolFailure, match="nope"):
                await tools.call("nope", {})
            assert await tools.call("add", {"a": 1, "b": 1}) == "2"
        finally:
            await tools.aclose()

    asyncio.run(scenario())


def test_a_call_cancelled_by_wait_for_leaves_the_next_call_working(target: str, tmp_path: Path) -> None:
    async def scenario() -> None:
        tools = McpTools("docs", target)
        try:
            await tools.start()
            for attempt in range(3):
                record = tmp_path / f"slow-{attempt}"
                # A call that waited for the answer would get it, and wait_for would return it.
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(tools.call("slow", {"seconds": LATE, "record": str(record)}), 0.2)
                assert await tools.call("add", {"a": 2, "b": 3}) == "5"
                # The server was told: its sleep was cancelled, not finished.
                assert await written(record) == "cancelled"
            assert await tools.call("slow", {"seconds": 0.01}) == "slept 0.01 s"
        finally:
            await tools.aclose()

    asyncio.run(scenario())


def test_a_stdio_server_that_dies_mid_call_fails_it_at_once_with_its_status_and_stderr() -> None:
    async def scenario() -> None:
        tools = McpTools("docs", STDIO)
        try:
            await tools.start()
            # The status and the last words prove the child was seen to end and reaped.
            with pytest.raises(McpServerUnavailable) as died:
                await tools.call("die", {})
            assert (
                str(died.value)
                == "MCP server 'docs' is not running: it exited with status 3 (stderr: dying on request)"
            )
            # Later calls fail from what was recorded: the same words, and no new child started.
            for _ in range(3):
                with pytest.raises(McpServerUnavailable) as again:
                    await tools.call("add", {"a": 1, "b": 1})
                assert str(again.value) == str(died.value)
            assert not children_running(f"{SERVER} --stdio")
        finally:
            await tools.aclose()

    asyncio.run(scenario())


def test_an_http_server_that_dies_mid_call_fails_it_quickly_and_every_later_call_at_once(
    http_server: McpHttpServer,
) -> None:
    async def scenario() -> None:
        tools = McpTools("docs", http_server.url)
        try:
            await tools.start()
            # "Not reachable" is the connection's own end, seen by the task that
            # owns it; a call that gave up waiting for that would say "lost the connection".
            with pytest.raises(McpServerUnavailable) as died:
                await tools.call("die", {})
            assert str(died.value).startswith(f"MCP server 'docs' ({http_server.url}) is not reachable: ")
            # Later calls fail from what was recorded, in the same words.
            for _ in range(3):
                with pytest.raises(McpServerUnavailable) as again:
                    await tools.call("add", {"a": 1, "b": 1})
                assert str(again.value) == str(died.value)
        finally:
            await tools.aclose()

    asyncio.run(scenario())
    assert http_server.process is not None and http_server.process.wait(timeout=5) == 3


def test_a_command_that_does_not_exist_cannot_start() -> None:
    message = start_fails(McpTools("docs", "no-such-mcp-server --stdio", connect_timeout=LATE))
    assert message == "--mcp docs: cannot run 'no-such-mcp-server': No such file or directory"


def test_a_command_that_exits_at_once_is_reported_with_its_status_and_stderr() -> None:
    command = f"{shlex.quote(sys.executable)} -c \"import sys; sys.exit('no API key given')\""
    message = start_fails(McpTools("docs", command, connect_timeout=LATE))
    assert message == "--mcp docs: the server exited with status 1 before it was ready (stderr: no API key given)"


def test_a_command_that_exits_with_a_status_of_its_own() -> None:
    command = f'{shlex.quote(sys.executable)} -c "import sys; sys.exit(2)"'
    message = start_fails(McpTools("docs", command, connect_timeout=LATE))
    assert message == "--mcp docs: the server exited with status 2 before it was ready"


def test_a_flood_on_stderr_is_drained_and_only_its_last_lines_are_kept() -> None:
    flood = "import sys; [print('line', i, file=sys.stderr) for i in range(100_000)]; sys.exit('y' * 5_000)"
    # Undrained, the child would block on a full pipe and never exit.
    message = start_fails(
        McpTools("docs", f"{shlex.quote(sys.executable)} -c {shlex.quote(flood)}", connect_timeout=LATE)
    )
    expected = f"(stderr: line 99998 | line 99999 | {'y' * 300})"
    assert message == f"--mcp docs: the server exited with status 1 before it was ready {expected}"


def test_env_reaches_a_stdio_server() -> None:
    command = f"{shlex.quote(sys.executable)} -c \"import os, sys; sys.exit(os.environ['MCP_TEST_WORD'])\""
    message = start_fails(McpTools("docs", command, env={"MCP_TEST_WORD": "hello from env"}, connect_timeout=LATE))
    assert message.endswith("(stderr: hello from env)")


def test_a_server_that_never_answers_times_out_and_is_stopped() -> None:
    # A start that waited for the child instead would see it exit, with status 0.
    command = f'{shlex.quote(sys.executable)} -c "import time; time.sleep({LATE:g})"'
    message = start_fails(McpTools("docs", command, connect_timeout=1))
    assert message == f"--mcp docs: no answer within 1 s ({command})"
    assert not children_running(f"time.sleep({LATE:g})")


def test_a_url_where_nothing_listens_is_refused() -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    message = start_fails(McpTools("docs", url, connect_timeout=LATE))
    assert message.startswith(f"--mcp docs: cannot connect to {url}: ConnectError: ")


def test_a_url_that_answers_404_fails_to_initialize(http_server: McpHttpServer) -> None:
    url = f"{http_server.base}/not-mcp"
    message = start_fails(McpTools("docs", url, connect_timeout=LATE))
    assert message == f"--mcp docs: {url} failed to initialize: Not Found"


def test_aclose_stops_the_stdio_server_and_later_calls_fail_at_once() -> None:
    async def scenario() -> None:
        tools = McpTools("docs", STDIO)
        await tools.start()
        (child,) = children_running(f"{SERVER} --stdio")
        await tools.aclose()
        await tools.aclose()
        assert not psutil.pid_exists(child.pid)
        with pytest.raises(McpServerUnavailable, match="MCP server 'docs' is closed"):
            await tools.call("add", {"a": 1, "b": 1})

    asyncio.run(scenario())


def test_aclose_is_fine_before_start_and_twice_after_a_failed_start() -> None:
    async def scenario() -> None:
        tools = McpTools("docs", "no-such-mcp-server")
        await tools.aclose()
        with pytest.raises(ConfigurationError):
            await tools.start()
        await tools.aclose()
        await tools.aclose()
        assert list(tools.names()) == []
        with pytest.raises(McpServerUnavailable, match="did not start: cannot run 'no-such-mcp-server'"):
            await tools.call("add", {})

    asyncio.run(scenario())


def test_aclose_during_start_ends_the_start_and_stops_the_child() -> None:
    # Neither the child nor the connect timeout ends the start within the test: aclose must.
    command = f'{shlex.quote(sys.executable)} -c "import time; time.sleep({LATE:g})"'

    async def scenario() -> None:
        tools = McpTools("docs", command, connect_timeout=LATE)
        starting = asyncio.create_task(tools.start())
        await asyncio.sleep(0.5)  # the child is spawned by then, or aclose comes during the spawn: both end it
        await tools.aclose()
        with pytest.raises(ConfigurationError, match="^--mcp docs: closed before it was ready$"):
            await starting

    asyncio.run(scenario())
    assert not children_running(f"time.sleep({LATE:g})")


def test_a_start_cancelled_by_its_caller_is_closed_by_aclose() -> None:
    async def scenario() -> None:
        tools = McpTools("docs", STDIO)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(tools.start(), 0.001)
        await tools.aclose()
        with pytest.raises(McpServerUnavailable):
            await tools.call("add", {"a": 1, "b": 1})

    asyncio.run(scenario())
    assert not children_running(f"{SERVER} --stdio")


def test_a_call_before_start_fails() -> None:
    async def scenario() -> None:
        with pytest.raises(McpServerUnavailable, match="MCP server 'docs' is not started"):
            await McpTools("docs", STDIO).call("add", {"a": 1, "b": 1})

    asyncio.run(scenario())


def test_the_description_names_the_server_and_hides_credentials() -> None:
    assert McpTools("docs", "python server.py").description == "mcp docs (stdio: python server.py)"
    shown = McpTools("docs", "https://user:secret@example.com:8443/mcp?token=t").description
    assert shown == "mcp docs (https://example.com:8443/mcp)"


@pytest.mark.parametrize("target", ["", "   ", "python 'unbalanced"])
def test_a_target_that_is_no_command_is_a_configuration_error(target: str) -> None:
    with pytest.raises(ConfigurationError, match="^--mcp docs: "):
        McpTools("docs", target)


def test_a_server_that_failed_to_start_starts_when_started_again(tmp_path: Path) -> None:
    async def scenario() -> None:
        tools = McpTools("docs", down_the_first_time(tmp_path / "tried"))
        try:
            with pytest.raises(ConfigurationError, match="exited with status 3 before it was ready"):
                await tools.start()
            await tools.start()
            assert set(tools.names()) == TOOLS
            assert await tools.call("echo", {"text": "again"}) == "again"
            with pytest.raises(RuntimeError, match="started already"):
                await tools.start()
        finally:
            await tools.aclose()

    asyncio.run(scenario())
