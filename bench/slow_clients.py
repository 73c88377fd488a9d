"""Slow clients: one normal client's latency while slow connections hold the server.

Run by hand, from the repository root, with the dev environment:

    .venv/bin/python bench/slow_clients.py                 # 2 rounds, about 4 minutes
    .venv/bin/python bench/slow_clients.py --rounds 1 --counts 8,50

Both servers are ``gunicorn -c gunicorn.conf.py`` serving the registry
(REGISTRY_WORKERS=2) on loopback: the old one with REGISTRY_WORKER_CLASS=gthread
(4 threads per worker), the new one with gevent workers. For each kind of slow
client and each count, the slow connections are opened, given a second to
settle, and kept going while a normal client asks for a definition, one
request at a time on a new connection with a 5 s timeout, for ``--seconds``.
A slow connection the server closes (or answers) is opened again at once.

Kinds of slow client:
  byte         one byte of a request line, then nothing
  header drip  a request line, then a header byte every 2 s
  body drip    complete headers of a render, then a body byte every 2 s

Prints a Markdown table, ready for BENCHMARKS.md: p50 / p99 of the normal
client's answers in ms, how many it got, and how many failed (timeouts).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.make_library import small_library
from bench.serving import AGENT, REGISTRY_APP, gunicorn, machine

USECASE, NAME = AGENT
GET_PATH = f"/v1/agents/{USECASE}/{NAME}?release=v1.2.0"
RENDER_PATH = f"/v1/agents/{USECASE}/{NAME}/render?release=v1.2.0"
DRIP_SECONDS = 2.0

KINDS: dict[str, tuple[bytes, bytes]] = {
    "byte": (b"G", b""),
    "header drip": (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: ", b"a" * 4000),
    "body drip": (
        (
            f"POST {RENDER_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Content-Length: 100000\r\n\r\n"
        ).encode(),
        b"{" + b" " * 99999,
    ),
}


async def _slow_connection(port: int, kind: str, stop_at: float) -> None:
    start, drip = KINDS[kind]
    while time.monotonic() < stop_at:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
        except (OSError, asyncio.TimeoutError):
            await asyncio.sleep(0.5)
            continue
        try:
            writer.write(start)
            await writer.drain()
            sent = 0
            while time.monotonic() < stop_at:
                try:
                    # Anything from the server (an answer, or the close) ends this connection.
                    await asyncio.wait_for(reader.read(200), DRIP_SECONDS)
                    break
                except asyncio.TimeoutError:
                    pass
                if sent < len(drip):
                    writer.write(drip[sent : sent + 1])
                    await writer.drain()
                    sent += 1
        except OSError:
            pass
        finally:
            writer.close()
        await asyncio.sleep(0.05)


def _slow_clients(port: int, kind: str, count: int, stop_at: float) -> threading.Thread:
    async def all_of_them() -> None:
        await asyncio.gather(*(_slow_connection(port, kind, stop_at) for _ in range(count)))

    thread = threading.Thread(target=asyncio.run, args=(all_of_them(),))
    thread.start()
    return thread


def _normal_client(port: int, seconds: float) -> tuple[list[float], int]:
    """Latencies (ms) of the answers, and how many requests failed."""
    latencies, failed = [], 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.perf_counter()
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            connection.request("GET", GET_PATH)
            response = connection.getresponse()
            response.read()
            if response.status == 200:
                latencies.append((time.perf_counter() - started) * 1000)
            else:
                failed += 1
        except (OSError, http.client.HTTPException):
            failed += 1
        finally:
            connection.close()
    return latencies, failed


def measure(port: int, kind: str, count: int, seconds: float) -> str:
    settle = 1.0
    stop_at = time.monotonic() + settle + seconds
    slow = _slow_clients(port, kind, count, stop_at)
    time.sleep(settle)
    latencies, failed = _normal_client(port, seconds)
    slow.join(timeout=30)
    if not latencies:
        return f"none ({failed} failed)"
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"{statistics.median(ordered):.1f} / {p99:.1f} ({len(ordered)} ok, {failed} failed)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=4)
    parser.add_argument("--counts", default="8,50,500", help="comma-separated numbers of slow connections")
    parser.add_argument("--classes", default="gthread,gevent", help="worker classes to compare")
    args = parser.parse_args()
    counts = [int(count) for count in args.counts.split(",")]
    classes = args.classes.split(",")

    print(f"Machine: {machine()}")
    with tempfile.TemporaryDirectory(prefix="registry-bench-") as scratch:
        repo = small_library(Path(scratch) / "small")
        rows: dict[tuple[str, int, str], list[str]] = {}
        for number in range(args.rounds):
            for worker_class in classes if number % 2 == 0 else reversed(classes):
                env = {
                    "REGISTRY_REPO": str(repo),
                    "REGISTRY_WORKERS": "2",
                    "REGISTRY_THREADS": "4",
                    "REGISTRY_WORKER_CLASS": worker_class,
                    "REGISTRY_LOG_LEVEL": "warning",
                    "REGISTRY_ACCESS_LOG": "0",
                }
                server = gunicorn(worker_class, env, REGISTRY_APP).start()
                try:
                    for kind in KINDS:
                        for count in counts:
                            rows.setdefault((kind, count, worker_class), []).append(
                                measure(server.port, kind, count, args.seconds)
                            )
                finally:
                    server.stop()
    print(f"\n### Normal client under slow connections ({args.seconds:g} s per cell, {args.rounds} rounds)\n")
    print("Normal client's p50 / p99 ms, answers and failures (5 s timeout), per round.\n")
    print("| slow clients | count | server | " + " | ".join(f"round {n + 1}" for n in range(args.rounds)) + " |")
    print("|---|---:|---|" + "---|" * args.rounds)
    for (kind, count, worker_class), cells in rows.items():
        print(f"| {kind} | {count} | {worker_class} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
