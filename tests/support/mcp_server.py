"""A real MCP server for the tests, written with the SDK's ``MCPServer``.

    python tests/support/mcp_server.py --stdio
    python tests/support/mcp_server.py --http --port 8123     (streamable HTTP at /mcp)
    python tests/support/mcp_server.py --stdio --legacy       (the initialize handshake only)

Its tools: ``add`` (an int, structured), ``echo``, ``fail`` (the tool
raises: an ``isError`` result), ``slow`` (sleeps), ``big`` (a long text),
``die`` (the process exits at once with status 3, mid-call), ``image`` (a
PNG), ``files`` (resources, linked and embedded), ``point`` (structured
content and no text). ``tools/list`` answers ``PAGE_SIZE`` tools a page,
so a client has to follow the cursors.

The SDK serves both eras of the protocol: the 2026 one (``server/discover``,
one request at a time) and the ``initialize`` handshake before it. With
``--legacy`` it answers only the handshake, as most servers still do.

Self-contained (it imports nothing of ``tests``): a stdio client runs it
as a child process with the SDK's minimal environment.
"""

from __future__ import annotations

import argparse
import base64
import os
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp.server import MCPServer, ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image
from mcp.server.runner import serve_loop
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.types import (
    METHOD_NOT_FOUND,
    BlobResourceContents,
    CallToolResult,
    ContentBlock,
    EmbeddedResource,
    ResourceLink,
    TextResourceContents,
)

PAGE_SIZE = 3

# A PNG of one transparent pixel, 68 bytes.
PIXEL = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000b4944415478da636000020000050001e9fadcd80000000049454e44ae426082"
)


async def paginate_tools(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Cut ``tools/list`` into pages of ``PAGE_SIZE``; the cursor is the next page's first index."""
    result = await call_next(ctx)
    # Past the handler, the result is already in its wire form: a dict.
    if ctx.method != "tools/list" or not isinstance(result, dict):
        return result
    start = int((ctx.params or {}).get("cursor") or 0)
    end = start + PAGE_SIZE
    page = {**result, "tools": result["tools"][start:end]}
    if end < len(result["tools"]):
        page["nextCursor"] = str(end)
    return page


async def refuse_discover(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Answer ``server/discover`` as a server that predates it does."""
    if ctx.method == "server/discover":
        raise MCPError(code=METHOD_NOT_FOUND, message="Method not found", data=ctx.method)
    return await call_next(ctx)


server: MCPServer[Any] = MCPServer("registry-tests", log_level="WARNING", middleware=[paginate_tools])


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def echo(text: str) -> str:
    """Say the text back."""
    return text


@server.tool()
def fail(message: str) -> str:
    """Fail with the message."""
    raise ToolError(message)


@server.tool()
async def slow(seconds: float, record: str = "") -> str:
    """Sleep, then say so. ``record`` names a file to write how the sleep
    ended, ``finished`` or ``cancelled``: a test's proof that a call was
    given up on before its answer."""
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        if record:
            Path(record).write_text("cancelled", encoding="utf-8")
        raise
    if record:
        Path(record).write_text("finished", encoding="utf-8")
    return f"slept {seconds:g} s"


@server.tool()
def big(size: int) -> str:
    """A text of ``size`` characters."""
    return "x" * size


@server.tool()
def die() -> str:
    """Exit the whole process at once, with status 3, without answering."""
    print("dying on request", file=sys.stderr, flush=True)
    os._exit(3)


@server.tool()
def image() -> Image:
    """A one-pixel PNG."""
    return Image(data=PIXEL, format="png")


@server.tool(structured_output=False)
def files() -> list[ContentBlock]:
    """A link to a file, and two files embedded: a text and four bytes."""
    return [
        ResourceLink(type="resource_link", name="notes", uri="file:///notes.txt"),
        EmbeddedResource(type="resource", resource=TextResourceContents(uri="file:///a.txt", text="inline text")),
        EmbeddedResource(
            type="resource",
            resource=BlobResourceContents(
                uri="file:///b.bin", mime_type="application/octet-stream", blob=base64.b64encode(b"1234").decode()
            ),
        ),
    ]


@server.tool()
def point() -> CallToolResult:
    """A point, as structured content only."""
    return CallToolResult(content=[], structured_content={"x": 1, "y": 2})


async def serve_stdio_handshake_only() -> None:
    """stdio, in the SDK's handshake-only loop: ``server.run`` would let the
    client's first request (a ``server/discover``) open the 2026 era."""
    lowlevel = server._lowlevel_server  # MCPServer has no public handle on it (the SDK's Client reads it too)
    async with stdio_server() as (read_stream, write_stream), lowlevel.lifespan(lowlevel) as state:
        options = lowlevel.create_initialization_options()
        await serve_loop(lowlevel, read_stream, write_stream, lifespan_state=state, init_options=options)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--stdio", action="store_true")
    mode.add_argument("--http", action="store_true")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--legacy", action="store_true", help="answer only the initialize handshake")
    args = parser.parse_args()
    if args.legacy:
        server.middleware.append(refuse_discover)
    if args.stdio and args.legacy:
        anyio.run(serve_stdio_handshake_only)
    elif args.stdio:
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
