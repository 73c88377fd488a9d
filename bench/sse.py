"""Live task events benchmark: what a subscriber costs the server, and how
long an entry takes to reach it.

Run by hand, from the repository root, with the dev environment:

    .venv/bin/python bench/sse.py

Real processes on loopback: ``prompt-registry agents serve`` (one worker:
gunicorn, uvicorn's worker, SQLite), the registry's UI relaying its streams
(``prompt-registry serve``, one gevent worker), and this process, whose
subscribers are httpx streams on one asyncio loop and which appends
entries to the service's database itself (``TaskStore.append_events``,
each entry carrying the wall-clock time it was written).

(1) 200 subscribers of one task, on one worker: the worker's threads and
    memory (USS) before the subscribers and with them, and the time from
    an entry's append to its arrival at each subscriber, against a bare
    polling loop in a process of its own that reads the table at the same
    interval (50 ms) for the same task: the floor any polling design has.
(2) 200 subscribers of 200 tasks (one each): the same, the baseline
    reading the 200 tasks with the query the hub makes (``events_in``).
(3) The same 200 subscribers of (1) through the registry's UI
    (``/ui/tasks/<id>/events``): the registry worker's threads and memory,
    greenlets against the event loop of (1), and the time to the subscriber.
(4) Time to the first token: a vanilla agent whose model (the tests'
    OpenAI-compatible server, streaming) sends its answer in pieces; from
    the step's request to the first ``text`` event a subscriber gets,
    against the bare ``openai`` SDK's time from its request to its first
    delta, from the same server and reply. The difference is what the
    service adds: starting the step (fetching the pinned agent, claiming
    the step, its first entries), the sink's write, the hub's poll, SSE.
(5) A2A's streams against the Agent Protocol's, in the same rounds: N
    clients of A2A's ``SubscribeToTask`` (JSON-RPC) and N of the Agent
    Protocol's SSE route (one of each in turn, on one client loop), all
    following one task on one worker, fed by its one hub (N = 1, then 50);
    the time from an entry's append to its arrival at each client of each
    protocol, and their ratio. What A2A adds: the entry translated to a
    ``TaskStatusUpdateEvent`` per stream, and the SDK's JSON-RPC envelope.

Rounds alternate nothing (each scenario's baseline runs at the same time as
the subscribers it is compared with); every round is reported, and the
median of all latencies with their 99th percentile.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from registry.protocol.store import TaskStore  # noqa: E402
from tests.conftest import LibraryRepo  # noqa: E402
from tests.support.executor_fixtures import leaf  # noqa: E402
from tests.support.openai_server import ScriptedModelServer  # noqa: E402
from tests.support.ports import free_port  # noqa: E402
from tests.support.servers import CLI, RegistryProcess, clean_environment, live_workers  # noqa: E402
from tests.support.triage_agent import triage_service_command  # noqa: E402

SUBSCRIBERS = 200
ROUNDS = 5
ENTRIES_PER_ROUND = 40
SPACING = 0.037
"""Seconds between two appends: not a multiple of the poll interval."""
POLL = 0.05
ANSWER = "An ox is a large domesticated bovine, kept for draught work and for its meat and milk."
FIRST_TOKEN_ROUNDS = 10
A2A_ROUNDS = ((1, SPACING), (50, 0.1))
"""Scenario (5): how many subscribers of each protocol, and the seconds
between two appends (wider with 50: 100 streams at 27 entries a second
would saturate the worker's core on this machine, and measure its queue)."""


# --- the baseline: a bare polling loop, in a process of its own ---------------------------------


def baseline_poller(database: str, tasks: list[str]) -> None:
    """Poll the table every ``POLL`` seconds for ``tasks`` until stdin
    closes; say ``ready`` once it knows where each task is, and print the
    latency of each entry that carries its append time at the end."""
    store = TaskStore(database)
    positions = {task: max((e.seq for e in store.events_after(task, 0, limit=10_000)), default=0) for task in tasks}
    latencies = []
    stop = threading.Event()

    def wait_for_the_end() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=wait_for_the_end, daemon=True).start()
    print("ready", flush=True)
    while not stop.wait(POLL):
        if len(tasks) == 1:
            found = store.events_after(tasks[0], positions[tasks[0]])
        else:
            found = store.events_in(list(positions.items()), batch=100)
        now = time.time()
        for entry in found:
            positions[entry.task_id] = max(positions[entry.task_id], entry.seq)
            if "sent" in entry.data:
                latencies.append(now - entry.data["sent"])
    store.close()
    print(json.dumps(latencies), flush=True)


class Baseline:
    """The baseline poller's process."""

    def __init__(self, database: str, tasks: list[str]) -> None:
        command = [sys.executable, __file__, "--baseline", database, *tasks]
        self._process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self._process.stdout is not None and self._process.stdout.readline().strip() == "ready"

    def latencies(self) -> list[float]:
        out, _ = self._process.communicate("", timeout=60)
        found: list[float] = json.loads(out)
        return found


# --- subscribers ---------------------------------------------------------------------------------


def sent_in(data: dict[str, Any]) -> float | None:
    """When an Agent Protocol event's entry was appended (its ``sent``)."""
    sent = data.get("sent")
    return float(sent) if sent is not None else None


def sent_in_a2a(data: dict[str, Any]) -> float | None:
    """When the entry of an A2A event (a JSON-RPC result) was appended: the
    text of a ``working`` update starts with it (``a2a_rounds`` writes it so)."""
    status = data.get("result", {}).get("statusUpdate", {}).get("status", {})
    text = status.get("message", {}).get("parts", [{}])[0].get("text", "")
    head = text.split(" ", 1)[0]
    return float(head[5:]) if head.startswith("sent=") else None


@dataclass(frozen=True)
class Stream:
    """One subscriber's request: a GET of ``url`` (the Agent Protocol's), or
    with ``body`` a POST of it (A2A's JSON-RPC); ``sent_of`` reads an event's append time."""

    url: str
    body: bytes | None = None
    sent_of: Callable[[dict[str, Any]], float | None] = sent_in
    protocol: str = "Agent Protocol"
    started_by_answer: bool = False
    """Whether it counts as started once answered (a stream resumed at the
    log's end, which has nothing to send yet), rather than at its first event."""


class Subscribers:
    """Streams on one asyncio loop in a thread: the latency of every entry
    that carries its append time (in all, and by protocol), and how many
    streams have started. Each is a bare socket reading lines, so that the
    client costs as little as it can: the server's side is what is measured."""

    def __init__(self, streams: Sequence[str | Stream]) -> None:
        self.latencies: list[float] = []
        self.by_protocol: dict[str, list[float]] = {}
        self.started = 0
        self._streams = [stream if isinstance(stream, Stream) else Stream(stream) for stream in streams]
        self._stop = asyncio.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._main = asyncio.run_coroutine_threadsafe(self._all(), self._loop)

    async def _all(self) -> None:
        streams = asyncio.gather(*(self._one(stream) for stream in self._streams))
        await self._stop.wait()
        streams.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await streams

    async def _one(self, stream: Stream) -> None:
        where = httpx.URL(stream.url)
        reader, writer = await asyncio.open_connection(where.host, where.port)
        arrivals = self.by_protocol.setdefault(stream.protocol, [])
        try:
            writer.write(_request(where, stream.body))
            status = await reader.readline()
            assert b" 200 " in status, status
            counted = stream.started_by_answer
            self.started += counted
            while line := await reader.readline():
                if not line.startswith(b"data:"):
                    continue  # headers, chunk sizes, ids, kinds, comments
                if not counted:
                    self.started, counted = self.started + 1, True
                sent = stream.sent_of(json.loads(line[5:]))
                if sent is not None:
                    latency = time.time() - sent
                    self.latencies.append(latency)
                    arrivals.append(latency)
        finally:
            writer.close()

    def wait_started(self) -> None:
        deadline = time.monotonic() + 120
        while self.started < len(self._streams):
            assert time.monotonic() < deadline and not self._main.done(), (self.started, self._main)
            time.sleep(0.05)

    def wait_for(self, arrivals: int, seconds: float = 60) -> None:
        """Until ``arrivals`` entries have arrived in all, for at most ``seconds``."""
        deadline = time.monotonic() + seconds
        while len(self.latencies) < arrivals and time.monotonic() < deadline:
            time.sleep(0.05)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._main.result(timeout=60)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def _request(where: httpx.URL, body: bytes | None) -> bytes:
    head = f"{where.raw_path.decode()} HTTP/1.1\r\nHost: {where.host}\r\n"
    if body is None:
        return f"GET {head}\r\n".encode()
    headers = f"Content-Type: application/json\r\nA2A-Version: 1.0\r\nContent-Length: {len(body)}\r\n"
    return f"POST {head}{headers}\r\n".encode() + body


# --- the servers ---------------------------------------------------------------------------------


def agents_server(directory: Path, database: Path) -> RegistryProcess:
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    command = [*triage_service_command(directory, port), "--database-url", f"sqlite:///{database}"]
    environment = {**clean_environment(), "REGISTRY_ACCESS_LOG": "false"}
    return RegistryProcess(command=command, port=port, cwd=directory, env=environment)


def worker_of(process: RegistryProcess) -> psutil.Process:
    for child in psutil.Process().children():
        if str(process.port) in child.cmdline():
            [worker] = live_workers(child)
            return worker
    raise AssertionError(f"no server on port {process.port}")


def footprint(worker: psutil.Process) -> tuple[int, float]:
    """The worker's threads, and its unique memory in MiB."""
    return worker.num_threads(), worker.memory_full_info().uss / 2**20


def create_tasks(base: str, count: int) -> list[str]:
    body = {"additional_input": {"agent": "assistant/react_text", "inputs": {"pipeline_id": 7, "question": "Why?"}}}
    with httpx.Client(base_url=base, timeout=30) as client:
        return [client.post("/ap/v1/agent/tasks", json=body).json()["task_id"] for _ in range(count)]


# --- (1) to (3): fan-out -------------------------------------------------------------------------


def append_rounds(
    database: Path, tasks: list[str], subscribers: Subscribers, servers: dict[str, psutil.Process]
) -> list[tuple[list[float], list[float]]]:
    """Each round: entries appended to ``tasks`` in turn while a baseline
    poller runs; each round's baseline and subscriber latencies. Prints the
    CPU time each of ``servers`` took per 1,000 entries delivered."""
    store = TaskStore(f"sqlite:///{database}")
    rounds = []
    cpu = {name: _cpu(process) for name, process in servers.items()}
    try:
        for _ in range(ROUNDS):
            baseline = Baseline(f"sqlite:///{database}", tasks)
            before = len(subscribers.latencies)
            for number in range(ENTRIES_PER_ROUND):
                task = tasks[number % len(tasks)]
                store.append_events(task, [("text", {"delta": "x" * 64, "sent": time.time()})])
                time.sleep(SPACING)
            time.sleep(1)  # the last entries reach every subscriber
            rounds.append((baseline.latencies(), subscribers.latencies[before:]))
    finally:
        store.close()
    delivered = sum(len(subscribed) for _, subscribed in rounds)
    for name, process in servers.items():
        spent = _cpu(process) - cpu[name]
        print(f"{name}: {spent:.2f} s of CPU for {delivered} entries delivered ({spent / delivered * 1e6:.0f} µs each)")
    return rounds


def _idle_cpu(process: psutil.Process, seconds: float = 10) -> float:
    """The share of a core ``process`` takes over ``seconds`` while nothing is appended."""
    before = _cpu(process)
    time.sleep(seconds)
    return (_cpu(process) - before) / seconds


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def report_latencies(name: str, rounds: list[tuple[list[float], list[float]]]) -> None:
    print(f"\n{name}: latency from append to arrival, ms (p50 / p99)")
    print("| round | baseline poller | subscribers | entries seen (baseline / subscribers) |")
    print("|---|---:|---:|---|")
    for number, (base, subs) in enumerate(rounds, 1):
        print(f"| {number} | {_pct(base)} | {_pct(subs)} | {len(base)} / {len(subs)} |")
    base = [x for b, _ in rounds for x in b]
    subs = [x for _, s in rounds for x in s]
    ratio = statistics.median(subs) / statistics.median(base)
    print(f"| all | {_pct(base)} | {_pct(subs)} | median ratio {ratio:.2f}x |")


def _pct(values: list[float]) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"{statistics.median(ordered) * 1000:.1f} / {p99 * 1000:.1f}"


def fan_out(directory: Path) -> None:
    database = directory / "tasks.db"
    with agents_server(directory / "agents", database) as agents:
        worker = worker_of(agents)
        [task] = create_tasks(agents.base, 1)
        idle = footprint(worker)
        print(f"\n(0) no subscriber: the agents worker takes {_idle_cpu(worker):.0%} of a core")
        one_task = Subscribers([f"{agents.base}/ap/v1/agent/tasks/{task}/events"] * SUBSCRIBERS)
        one_task.wait_started()
        busy = footprint(worker)
        print(f"\n(1) {SUBSCRIBERS} subscribers of one task, one agents worker (event loop)")
        print(f"worker threads {idle[0]} -> {busy[0]}; USS {idle[1]:.1f} -> {busy[1]:.1f} MiB", end="")
        print(f" ({(busy[1] - idle[1]) * 1024 / SUBSCRIBERS:.1f} KiB a subscriber)")
        print(f"watching, nothing new: {_idle_cpu(worker):.0%} of a core")
        report_latencies("(1)", append_rounds(database, [task], one_task, {"agents worker": worker}))
        one_task.close()

        tasks = create_tasks(agents.base, SUBSCRIBERS)
        time.sleep(1)
        idle = footprint(worker)
        many = Subscribers([f"{agents.base}/ap/v1/agent/tasks/{t}/events" for t in tasks])
        many.wait_started()
        busy = footprint(worker)
        print(f"\n(2) {SUBSCRIBERS} subscribers of {SUBSCRIBERS} tasks, one agents worker")
        print(f"worker threads {idle[0]} -> {busy[0]}; USS {idle[1]:.1f} -> {busy[1]:.1f} MiB")
        print(f"watching, nothing new: {_idle_cpu(worker):.0%} of a core")
        report_latencies("(2)", append_rounds(database, tasks, many, {"agents worker": worker}))
        many.close()

        environment = {**clean_environment(), "REGISTRY_AGENTS_URL": agents.base, "REGISTRY_ACCESS_LOG": "false"}
        with RegistryProcess("--example", env=environment) as registry:
            relay = worker_of(registry)
            time.sleep(1)
            idle = footprint(relay)
            through_ui = Subscribers([f"{registry.base}/ui/tasks/{task}/events"] * SUBSCRIBERS)
            through_ui.wait_started()
            busy = footprint(relay)
            print(f"\n(3) {SUBSCRIBERS} subscribers of one task through the registry's UI (one gevent worker)")
            print(f"registry worker threads {idle[0]} -> {busy[0]}; USS {idle[1]:.1f} -> {busy[1]:.1f} MiB", end="")
            print(f" ({(busy[1] - idle[1]) * 1024 / SUBSCRIBERS:.1f} KiB a subscriber)")
            print(f"agents worker threads with the relay's {SUBSCRIBERS} streams: {footprint(worker)[0]}")
            servers = {"agents worker": worker, "registry worker": relay}
            report_latencies("(3)", append_rounds(database, [task], through_ui, servers))
            through_ui.close()


# --- (4) the first token -------------------------------------------------------------------------


def first_token(directory: Path) -> None:
    (directory / "model").mkdir()
    repo = LibraryRepo(directory / "library")
    repo.release("v1.0.0", {"s/answer.yml": leaf("answer", "Answer: {{ question }}", question="string")})
    reply = {"content": ANSWER, "repeat": True, "chunk_chars": 8, "delay_between": 0.02}
    with ScriptedModelServer([reply], directory / "model") as model:
        port = free_port()
        command = [CLI, "agents", "serve", "--repo", str(repo.path), "--model", model.base_url, "--port", str(port)]
        command += ["--data-dir", str(directory / "first-token")]
        environment = {**clean_environment(), "REGISTRY_ACCESS_LOG": "false"}
        with RegistryProcess(command=command, port=port, env=environment) as agents:
            rows = [
                (_sdk_first_delta(model.base_url), _service_first_text(agents.base)) for _ in range(FIRST_TOKEN_ROUNDS)
            ]
    print("\n(4) time to the first token, ms: the bare SDK's first delta, the subscriber's first text event")
    print("| round | SDK | service | added |")
    print("|---|---:|---:|---:|")
    for number, (sdk, service) in enumerate(rows, 1):
        print(f"| {number} | {sdk * 1000:.1f} | {service * 1000:.1f} | {(service - sdk) * 1000:.1f} |")
    sdk, service = (statistics.median(r[0] for r in rows) * 1000, statistics.median(r[1] for r in rows) * 1000)
    print(f"| median | {sdk:.1f} | {service:.1f} | {service - sdk:.1f} |")


def _sdk_first_delta(base_url: str) -> float:
    client = openai.OpenAI(base_url=base_url, api_key="bench", max_retries=0)
    started = time.monotonic()
    stream = client.chat.completions.create(
        model="test-model", messages=[{"role": "user", "content": "Answer: ox?"}], stream=True
    )
    try:
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                return time.monotonic() - started
    finally:
        stream.close()
        client.close()
    raise AssertionError("the stream brought no text")


def _service_first_text(base: str) -> float:
    with httpx.Client(base_url=base, timeout=60) as client:
        body = {"additional_input": {"agent": "s/answer", "inputs": {"question": "ox?"}}}
        task = client.post("/ap/v1/agent/tasks", json=body).json()["task_id"]
        first_text: list[float] = []
        with client.stream("GET", f"/ap/v1/agent/tasks/{task}/events") as events:
            lines = events.iter_lines()
            next(line for line in lines if line.startswith("data:"))  # its first entry: the stream is open
            started = time.monotonic()
            stepping = threading.Thread(target=client.post, args=(f"/ap/v1/agent/tasks/{task}/steps",))
            stepping.start()
            for line in lines:
                if line == "event: text":
                    first_text.append(time.monotonic() - started)
                    break
        stepping.join()
    return first_text[0]


# --- (5) A2A's streams against the Agent Protocol's --------------------------------------------


def a2a_against_agent_protocol(directory: Path) -> None:
    database = directory / "a2a" / "tasks.db"
    with agents_server(directory / "a2a" / "agents", database) as agents:
        worker = worker_of(agents)
        [task] = create_tasks(agents.base, 1)  # created: A2A's submitted, which a stream may follow
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task}}).encode()
        a2a = Stream(f"{agents.base}/a2a/jsonrpc", body, sent_in_a2a, "A2A")
        for count, spacing in A2A_ROUNDS:
            # The Agent Protocol's from the log's end, as A2A's start: neither replays the rounds before.
            after = _last_entry(database, task)
            protocol = Stream(f"{agents.base}/ap/v1/agent/tasks/{task}/events?after={after}", started_by_answer=True)
            # One of each in turn, on one client loop: neither protocol is served or read first.
            streams = Subscribers([protocol, a2a] * count)
            streams.wait_started()
            print(f"\n(5) {count} A2A and {count} Agent Protocol subscribers of one task, one agents worker,")
            print(f"{ENTRIES_PER_ROUND} entries a round, {spacing * 1000:.0f} ms apart")
            report_protocols(a2a_rounds(database, task, streams, worker, spacing=spacing))
            streams.close()


def _last_entry(database: Path, task: str) -> int:
    store = TaskStore(f"sqlite:///{database}")
    try:
        return max((entry.seq for entry in store.events_after(task, 0, limit=100_000)), default=0)
    finally:
        store.close()


def a2a_rounds(
    database: Path, task: str, streams: Subscribers, worker: psutil.Process, *, spacing: float
) -> list[tuple[list[float], list[float]]]:
    """Each round: entries appended to ``task``, each text starting with its
    append time; each round's latencies at the Agent Protocol's streams and A2A's."""
    store = TaskStore(f"sqlite:///{database}")
    protocol, a2a = streams.by_protocol["Agent Protocol"], streams.by_protocol["A2A"]
    rounds = []
    cpu = _cpu(worker)
    try:
        for _ in range(ROUNDS):
            before, arrived = (len(protocol), len(a2a)), len(streams.latencies)
            for _number in range(ENTRIES_PER_ROUND):
                sent = time.time()
                store.append_events(task, [("text", {"delta": f"sent={sent:.6f} " + "x" * 48, "sent": sent})])
                time.sleep(spacing)
            # Every entry reaches every subscriber before the next round starts.
            streams.wait_for(arrived + ENTRIES_PER_ROUND * streams.started)
            rounds.append((protocol[before[0] :], a2a[before[1] :]))
    finally:
        store.close()
    delivered = sum(len(p) + len(a) for p, a in rounds)
    spent = _cpu(worker) - cpu
    each = spent / delivered * 1e6
    print(f"agents worker: {spent:.2f} s of CPU for {delivered} entries delivered ({each:.0f} µs each)")
    return rounds


def report_protocols(rounds: list[tuple[list[float], list[float]]]) -> None:
    print("latency from append to arrival, ms (p50 / p99)")
    print("| round | Agent Protocol SSE | A2A SubscribeToTask | p50 ratio | arrivals (AP / A2A) |")
    print("|---|---:|---:|---:|---|")
    for number, (protocol, a2a) in enumerate(rounds, 1):
        ratio = statistics.median(a2a) / statistics.median(protocol) if protocol and a2a else float("nan")
        print(f"| {number} | {_pct(protocol)} | {_pct(a2a)} | {ratio:.2f}x | {len(protocol)} / {len(a2a)} |")
    protocol = [x for p, _ in rounds for x in p]
    a2a = [x for _, a in rounds for x in a]
    ratio = statistics.median(a2a) / statistics.median(protocol)
    print(f"| all | {_pct(protocol)} | {_pct(a2a)} | **{ratio:.2f}x** | {len(protocol)} / {len(a2a)} |")


def main() -> None:
    arguments = argparse.ArgumentParser()
    arguments.add_argument("--baseline", nargs="+", help=argparse.SUPPRESS)
    arguments.add_argument("--only", default="fan-out,first-token,a2a")
    parsed = arguments.parse_args()
    if parsed.baseline:
        database, *tasks = parsed.baseline
        baseline_poller(database, tasks)
        return
    print(f"# {platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as directory:
        if "fan-out" in parsed.only:
            fan_out(Path(directory))
        if "first-token" in parsed.only:
            first_token(Path(directory))
        if "a2a" in parsed.only:
            a2a_against_agent_protocol(Path(directory))


if __name__ == "__main__":
    main()
