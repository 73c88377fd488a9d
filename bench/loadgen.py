"""Load generators for the benchmarks: wrk when installed, else one in Python.

Both keep ``connections`` HTTP/1.1 keep-alive connections busy for
``seconds`` against one URL and report requests per second and the p50 and
p99 latency. wrk (C, one thread per core) is the better instrument; the
Python generator (asyncio, one process) saturates at a few thousand requests
per second on these machines, so under it both servers look closer than they
are. Every answer must be a 200: a run with any other status is an error, not
a number.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Load:
    requests_per_second: float
    p50_ms: float
    p99_ms: float
    requests: int
    generator: str


def available_generator() -> str:
    return "wrk" if shutil.which("wrk") else "python"


def drive(url: str, *, connections: int, seconds: float, method: str = "GET", body: bytes = b"") -> Load:
    if available_generator() == "wrk":
        return _wrk(url, connections=connections, seconds=seconds, method=method, body=body)
    return asyncio.run(_python(url, connections=connections, seconds=seconds, method=method, body=body))


_WRK_SCRIPT = """\
wrk.method = "{method}"
wrk.body = {body}
wrk.headers["Content-Type"] = "application/json"
done = function(summary, latency, requests)
  io.write(string.format("BENCH p50_us=%d p99_us=%d\\n", latency:percentile(50), latency:percentile(99)))
end
"""


def _lua_string(data: bytes) -> str:
    return '"' + "".join(f"\\{byte:03d}" for byte in data) + '"'


def _wrk(url: str, *, connections: int, seconds: float, method: str, body: bytes) -> Load:
    # No Lua response() hook: it would make wrk parse every answer in Lua and
    # become the bottleneck; wrk counts answers outside 2xx/3xx by itself.
    script = _WRK_SCRIPT.format(method=method, body=_lua_string(body) if body else "nil")
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as handle:
        handle.write(script)
    try:
        # One wrk thread: on two cores the servers need the other core more.
        result = subprocess.run(
            ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "-s", handle.name, url],
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        os.unlink(handle.name)
    output = result.stdout
    if "Non-2xx or 3xx responses" in output or "Socket errors" in output:
        raise RuntimeError(f"wrk saw failed requests against {url}:\n{output}")
    rate = re.search(r"Requests/sec:\s+([\d.]+)", output)
    total = re.search(r"(\d+) requests in", output)
    percentiles = re.search(r"BENCH p50_us=(\d+) p99_us=(\d+)", output)
    assert rate and total and percentiles, f"wrk's report is not as expected:\n{output}"
    p50, p99 = int(percentiles.group(1)) / 1000, int(percentiles.group(2)) / 1000
    return Load(float(rate.group(1)), p50, p99, int(total.group(1)), "wrk")


async def _python(url: str, *, connections: int, seconds: float, method: str, body: bytes) -> Load:
    parts = urlsplit(url)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    request = (
        f"{method} {target} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def connection() -> None:
        # The server closes a keep-alive connection after a number of
        # requests (web.server.REQUESTS_PER_CONNECTION), as wrk sees too:
        # a new connection is opened, and the request that found it closed
        # is sent again, uncounted.
        while time.perf_counter() < deadline:
            reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
            try:
                await requests_on(reader, writer)
            except (asyncio.IncompleteReadError, ConnectionResetError):
                continue
            finally:
                writer.close()

    async def requests_on(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            if status != 200:
                raise RuntimeError(f"{url} answered {status}, expected 200")
            length = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
            await reader.readexactly(int(length.group(1)) if length else 0)
            latencies.append(time.perf_counter() - started)
            if re.search(rb"(?i)\r\nconnection:\s*close", head):
                return

    started = time.perf_counter()
    await asyncio.gather(*(connection() for _ in range(connections)))
    elapsed = time.perf_counter() - started
    latencies.sort()
    return Load(
        len(latencies) / elapsed,
        latencies[len(latencies) // 2] * 1000,
        latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
        len(latencies),
        "python",
    )
