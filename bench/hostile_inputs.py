"""What a hostile render body costs the registry, against an ordinary render in the same run.

Run by hand, from the repository root, with the dev environment:

    .venv/bin/python bench/hostile_inputs.py             # in process, about a minute
    .venv/bin/python bench/hostile_inputs.py --load 10   # and under load, about two more

Each body is a whole ``POST /v1/agents/<usecase>/<name>/render`` request of
at most 1 MiB (the default ``REGISTRY_MAX_REQUEST_BYTES``), sent to the
registry's Flask app in this process (Werkzeug's test client, no socket), so
the time is what one worker thread spends on it: reading and parsing the
body, the render ``ETag``, validating the inputs, rendering, and the answer.

- **ordinary**: ``explain_code/snippet`` with realistic inputs (the baseline);
- **wide**: ``assistant/docs_rag`` with as many small passages as fit in
  1 MiB (33,823), the last one invalid, so that every one is validated;
- **huge string**: ``code_review/security_review`` with one diff of 1 MiB;
- **deep**: ``chat/tool_calling`` with ``tools`` nested 900 arrays deep
  (about as deep as Python's JSON parser reads);
- **wide and deep**: ``chat/tool_calling`` with 1 MiB of ``tools`` arrays
  nested 40 deep.

Rounds are interleaved (ordinary, wide, huge, ...); each round's figure is
the median of its requests, every round is printed, and the ratio is the
median of the rounds' ratios to the ordinary render.

With ``--load SECONDS``, also under load: a real server (``prompt-registry
serve``: gunicorn, 2 gevent workers) on loopback, one client timing ``GET``
by exact tag one after another on new connections, alone and then while 16
hostile connections send one kind of body as fast as they are answered. The
hostile connections are ``wrk``'s (kept alive, one C thread), so that the
machine's two cores go to the server rather than to the clients; without
``wrk`` (or with ``--generator python``) 16 Python client processes send
them instead, which then take most of the CPU themselves. Each row is
compared with GETs alone and with GETs under 16 connections of *ordinary*
renders: the issue's target, 16 hostile clients slow ordinary ``GET``s by at
most 2x at p99, read as against the same number of ordinary clients (GETs
alone on an idle machine cannot stay within 2x of anything that takes both
cores).
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.make_library import small_library  # noqa: E402
from registry.serving.app import create_app  # noqa: E402
from registry.settings import Settings  # noqa: E402
from tests.support.servers import RegistryProcess, clean_environment  # noqa: E402

MAX_BODY = 1024 * 1024
RELEASE = "v1.2.0"


def _fill(prefix: str, item: str, last: str, suffix: str) -> bytes:
    """``prefix`` + as many ``item`` as fit in 1 MiB, the last one ``last`` + ``suffix``."""
    room = MAX_BODY - len(prefix) - len(suffix) - len(last)
    count = room // (len(item) + 1)
    return (prefix + (item + ",") * count + last + suffix).encode()


def bodies() -> dict[str, tuple[str, bytes]]:
    """Label -> (agent, request body)."""
    ordinary = {
        "inputs": {
            "code": "def add(a, b):\n    return a + b\n" * 20,
            "language": "python",
            "file_path": "src/calc.py",
            "audience": "intermediate",
        }
    }
    passage = json.dumps({"title": "t", "text": "abcdefg"}, separators=(",", ":"))
    wrong = json.dumps({"title": "t", "text": 1234567}, separators=(",", ":"))
    deep = "[" * 900 + "]" * 900
    deep40 = "[" * 40 + "]" * 40
    huge_prefix = '{"inputs":{"diff":"'
    huge_suffix = '"}}'
    return {
        "ordinary": ("explain_code/snippet", json.dumps(ordinary).encode()),
        "wide": ("assistant/docs_rag", _fill('{"inputs":{"question":"q","passages":[', passage, wrong, "]}}")),
        "huge string": (
            "code_review/security_review",
            (huge_prefix + "x" * (MAX_BODY - len(huge_prefix) - len(huge_suffix)) + huge_suffix).encode(),
        ),
        "deep": ("chat/tool_calling", ('{"inputs":{"question":"q","tools":' + deep + "}}").encode()),
        "wide and deep": ("chat/tool_calling", _fill('{"inputs":{"question":"q","tools":[', deep40, deep40, "]}}")),
    }


def per_request_ms(call: Callable[[], Any], *, count: int) -> float:
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1e3)
    return statistics.median(samples)


def _send_repeatedly(port: int, url: str, body: bytes, ready: Any, stop: Any, counts: Any) -> None:
    """One hostile client: ``body`` again and again, each sent once the last is answered."""
    ready.put(True)
    sent = 0
    while not stop.is_set():
        _request(port, "POST", url, body)
        sent += 1
    counts.put(sent)


def _request(port: int, method: str, url: str, body: bytes | None = None) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request(method, url, body=body, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def _get_latencies_ms(port: int, path: str, seconds: float) -> list[float]:
    samples = []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        started = time.perf_counter()
        status = _request(port, "GET", path)
        samples.append((time.perf_counter() - started) * 1e3)
        assert status == 200, status
    return samples


def _p(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def _load_with_wrk(
    port: int, url: str, body: bytes, clients: int, seconds: float, scratch: Path, *, new_connections: bool = False
) -> Any:
    """Start wrk sending ``body`` on ``clients`` connections for ``seconds``:
    kept alive, or a new connection for every request."""
    (scratch / "body.json").write_bytes(body)
    script = scratch / "post.lua"
    script.write_text(
        f'local f = assert(io.open("{scratch / "body.json"}", "rb"))\n'
        'wrk.method = "POST"\nwrk.body = f:read("*a")\nf:close()\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
        + ('wrk.headers["Connection"] = "close"\n' if new_connections else "")
    )
    command = ["wrk", "-t1", f"-c{clients}", f"-d{seconds:g}s", "-s", str(script), f"http://127.0.0.1:{port}{url}"]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True)


def _wrk_requests(output: str) -> int:
    match = re.search(r"(\d+) requests in", output)
    return int(match.group(1)) if match else 0


def under_load(
    repo: Path, cases: dict[str, tuple[str, bytes]], seconds: float, clients: int, generator: str, new_connections: bool
) -> None:
    get_path = f"/v1/agents/explain_code/snippet?release={RELEASE}"
    # No access log: RegistryProcess keeps the server's output in a pipe it
    # reads only at the end, which a log line per request would fill.
    env = {**clean_environment(), "REGISTRY_ACCESS_LOG": "false"}
    with (
        tempfile.TemporaryDirectory() as scratch,
        RegistryProcess("--repo", str(repo), "--workers", "2", env=env) as server,
    ):
        _get_latencies_ms(server.port, get_path, 1.0)  # warm both workers' caches
        rows = [("nothing (GETs alone)", _get_latencies_ms(server.port, get_path, seconds), 0)]
        context = multiprocessing.get_context("spawn")
        for label, (agent, body) in cases.items():
            url = f"/v1/agents/{agent}/render?release={RELEASE}"
            if generator == "wrk":
                wrk = _load_with_wrk(
                    server.port, url, body, clients, seconds + 2, Path(scratch), new_connections=new_connections
                )
                time.sleep(1)  # every connection has a request in flight
                samples = _get_latencies_ms(server.port, get_path, seconds)
                sent = _wrk_requests(wrk.communicate()[0])
            else:
                ready, counts, stop = context.Queue(), context.Queue(), context.Event()
                senders = [
                    context.Process(target=_send_repeatedly, args=(server.port, url, body, ready, stop, counts))
                    for _ in range(clients)
                ]
                for sender in senders:
                    sender.start()
                for _ in senders:
                    ready.get(timeout=120)
                time.sleep(1)  # every sender has a request in flight
                samples = _get_latencies_ms(server.port, get_path, seconds)
                stop.set()
                sent = sum(counts.get(timeout=120) for _ in senders)
                for sender in senders:
                    sender.join()
            rows.append(
                (f"{clients} {'connections' if generator == 'wrk' else 'clients'} sending '{label}'", samples, sent)
            )
    idle_p99 = _p(rows[0][1], 0.99)
    ordinary_p99 = _p(rows[1][1], 0.99)
    print(f"\n`GET` by exact tag, one client, {seconds:g} s per row, while {generator} sends renders.\n")
    print("| load | GETs | GET p50 ms | GET p99 ms | p99 x alone | p99 x ordinary load | renders answered |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, samples, sent in rows:
        print(
            f"| {label} | {len(samples):,} | {statistics.median(samples):.2f} | {_p(samples, 0.99):.2f} "
            f"| {_p(samples, 0.99) / idle_p99:.1f}x | {_p(samples, 0.99) / ordinary_p99:.2f}x | {sent:,} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--load", type=float, default=0, metavar="SECONDS", help="also measure GETs under load")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument(
        "--generator",
        choices=["wrk", "python"],
        default="wrk" if shutil.which("wrk") else "python",
        help="what sends the hostile bodies under --load (default: wrk when installed)",
    )
    parser.add_argument(
        "--new-connections", action="store_true", help="wrk opens a new connection for every hostile request"
    )
    args = parser.parse_args()
    print(f"Python {platform.python_version()}, {platform.machine()}, {platform.platform()}\n")
    with tempfile.TemporaryDirectory() as scratch:
        repo = small_library(Path(scratch) / "library")
        app = create_app(Settings(repo=str(repo), access_log=False))
        client = app.test_client()
        cases = bodies()
        outcomes: dict[str, str] = {}
        calls: dict[str, Callable[[], Any]] = {}
        for label, (agent, body) in cases.items():
            assert len(body) <= MAX_BODY, (label, len(body))
            url = f"/v1/agents/{agent}/render?release={RELEASE}"

            def call(url: str = url, body: bytes = body) -> Any:
                return client.post(url, data=body, content_type="application/json")

            response = call()
            answer = response.get_json()
            outcomes[label] = f"{response.status_code} {answer.get('type', 'rendered')}" + (
                f": {answer['detail'][:90]}" if "detail" in answer else ""
            )
            calls[label] = call
        rounds: dict[str, list[float]] = {label: [] for label in cases}
        for _ in range(args.rounds):
            for label, timed in calls.items():
                rounds[label].append(per_request_ms(timed, count=200 if label == "ordinary" else 5))
        print("Milliseconds per request; each round is the median of its requests.\n")
        header = " | ".join(f"round {i + 1}" for i in range(args.rounds))
        print(f"| body | bytes | {header} | median | x ordinary | answer |")
        print("|---|---:|" + "---:|" * args.rounds + "---:|---:|---|")
        for label, values in rounds.items():
            ratio = statistics.median(v / o for v, o in zip(values, rounds["ordinary"], strict=True))
            cells = " | ".join(f"{v:.2f}" for v in values)
            print(
                f"| {label} | {len(cases[label][1]):,} | {cells} | {statistics.median(values):.2f} "
                f"| {ratio:.0f}x | {outcomes[label]} |"
            )
        if args.load:
            under_load(repo, cases, args.load, args.clients, args.generator, args.new_connections)


if __name__ == "__main__":
    main()
