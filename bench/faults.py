"""Throughput through faults: warm GETs against a replica pair while Redis dies and while a sync lands.

Run by hand, from the repository root, with the dev environment:

    .venv/bin/python bench/faults.py                 # one round of each fault, about 2 minutes
    .venv/bin/python bench/faults.py --rounds 2 --baseline 10 --outage 10 --after 20

Two replicas run under the production configuration (``gunicorn -c
gunicorn.conf.py``, the registry's default workers unless ``--workers``),
each mirroring the same local bare repository (REGISTRY_REMOTE) into a data
directory of its own, both sharing one real ``redis-server`` (REDIS_URL),
with a webhook secret. The library is ``make_library.large_library``
(``--usecases`` x ``--per-usecase`` agents, annotated tags); the remote
starts with ``--tags`` of its release tags, and each round of the sync fault
pushes the next ``--tags`` of them.

Load: ``--processes`` processes of this script, ``--connections`` kept-alive
connections in all, half to each replica, closed-loop (a connection sends
its next request when the answer is in), cycling over ``--agents`` agents,
each asked by an exact old tag (one of ``--pinned`` releases), the newest
tag at start, ``^1.0`` and ``latest``: half the requests are exact, half
are ranges, so a sync changes what half of them resolve to. (More than 256
pinned releases is no longer warm: the catalogs of a worker are an LRU of
256 commits, and cycling through more misses every time.) Every answer
outside 2xx/3xx, every connection error and every answer slower than
``--timeout`` is a failure, counted and described; so are the same from the
probes below.

Each fault is one session of load: ``--warmup`` seconds (not reported),
``--baseline`` seconds, then the fault:
  redis   the redis-server is killed (SIGKILL, by PID), left down for
          ``--outage`` seconds, and started again on the same port; the run
          goes on for ``--after`` seconds; probes of ``/v1/admin/cache`` say
          when each replica hears release announcements again.
  sync    the next ``--tags`` release tags (and the branch) are pushed to the
          remote, and the webhook is called on replica A, as a load balancer
          would pass it on; replica B learns of it through Redis. Probes of
          ``?release=latest`` on each replica say when it first answered the
          newest tag and when it last answered an older one; afterwards every
          replica must answer the newest tag, exactly and by range.

Prints, per fault and round, a Markdown table of every second (requests per
second and p99: both replicas, each, exact tags and ranges; failures), a
summary line (baseline req/s and p99, the worst second's, how long until
three seconds in a row are back to baseline, failures), the seconds that
were degraded, what the probes saw, the replicas' counters from /metrics,
the slowest answers, and the servers' log lines during the session. A
replica that exits after it first answered (a worker that failed to boot
stops gunicorn) is reported at the top and started again.

``--conf`` runs both replicas under another gunicorn configuration (one that
``exec``s ``gunicorn.conf.py`` and adds diagnostic hooks, say), ``--logs DIR``
keeps their whole logs.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import http.client
import json
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.make_library import large_library
from bench.serving import REGISTRY_APP, ROOT, Server, gunicorn, machine, server_env
from tests.support.redis_server import RedisServer

WEBHOOK_SECRET = "bench-faults-webhook-secret"
ADMIN_TOKEN = "bench-faults-admin-token"
REPLICAS = ("A", "B")
KINDS = ("exact", "range")
# A second is degraded when it answers fewer than this share of a baseline
# second's requests (the median), or its p99 is above both of these bounds
# (the factor times a baseline second's p99, the median; that plus the margin).
DEGRADED_THROUGHPUT = 0.8
DEGRADED_P99_FACTOR = 2.0
DEGRADED_P99_MARGIN_MS = 5.0
RECOVERED_SECONDS = 3
FAILURE_SAMPLES = 20
LOG_LINES = 80
PROBE_SECONDS = 0.02
# After a replica first answers, how long its other workers have to boot.
SETTLE_SECONDS = 3.0
# --diagnose: the production configuration, plus a log line for each pause of
# a worker's whole process that a gevent worker cannot hide: a garbage
# collection, or a wait for a file lock (fcntl.flock blocks the process, not
# the greenlet).
DIAGNOSTIC_CONF = """\
exec(open(PRODUCTION_CONF).read())

import fcntl as _fcntl
import gc as _gc
import sys as _sys
import time as _time

_production_post_worker_init = post_worker_init


def post_worker_init(worker):
    _production_post_worker_init(worker)
    began = [0.0]

    def collecting(phase, info):
        if phase == "start":
            began[0] = _time.perf_counter()
            return
        took = (_time.perf_counter() - began[0]) * 1000
        if took >= MIN_MS:
            _sys.stderr.write(
                f"DIAGNOSE worker {worker.pid}: garbage collection of generation {info['generation']} "
                f"took {took:.0f} ms ({info['collected']} objects freed)\\n"
            )

    _gc.callbacks.append(collecting)
    flock = _fcntl.flock

    def timed_flock(fd, operation):
        started = _time.perf_counter()
        try:
            return flock(fd, operation)
        finally:
            took = (_time.perf_counter() - started) * 1000
            if took >= MIN_MS:
                _sys.stderr.write(f"DIAGNOSE worker {worker.pid}: fcntl.flock waited {took:.0f} ms\\n")

    _fcntl.flock = timed_flock
"""
DIAGNOSTIC_MIN_MS = 20
DIAGNOSTIC_SHOWN_MS = 100
_DIAGNOSED = re.compile(r"DIAGNOSE worker (\d+): (.*?)(?:took|waited) (\d+) ms")


# -- the load -----------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One request of the load to one replica, as bytes to send."""

    replica: int
    port: int
    index: int
    """Its place in the load's paths."""
    path: str
    request: bytes


def targets(ports: list[int], paths: list[tuple[str, str]]) -> list[list[Target]]:
    """Per replica, every path as a ready request."""
    return [
        [
            Target(
                replica,
                port,
                index,
                path,
                f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: bench-faults\r\n\r\n".encode(),
            )
            for index, (path, _) in enumerate(paths)
        ]
        for replica, port in enumerate(ports)
    ]


class Records:
    """Every answer (or failure) of a session: when it completed, how long it took, where it went."""

    def __init__(self) -> None:
        self.done = array.array("d")
        self.latency = array.array("d")
        self.replica = array.array("b")
        self.path = array.array("H")
        self.status = array.array("h")  # 0: no answer (connection error or timeout)
        self.failures: Counter[str] = Counter()
        self.samples: list[str] = []

    def add(self, done: float, latency: float, target: Target, status: int, failure: str | None) -> None:
        self.done.append(done)
        self.latency.append(latency)
        self.replica.append(target.replica)
        self.path.append(target.index)
        self.status.append(status)
        if failure is not None:
            what = f"replica {REPLICAS[target.replica]}: {failure}"
            self.failures[what] += 1
            if len(self.samples) < FAILURE_SAMPLES:
                self.samples.append(f"t={done:.3f} GET {target.path} -> {failure} after {latency * 1000:.1f} ms")

    def extend(self, other: Records) -> None:
        for name in ("done", "latency", "replica", "path", "status"):
            getattr(self, name).extend(getattr(other, name))
        self.failures.update(other.failures)
        self.samples.extend(other.samples[: max(0, FAILURE_SAMPLES - len(self.samples))])

    def __len__(self) -> int:
        return len(self.done)


class _Answer(Exception):
    """An HTTP answer that is not one (unparseable, or cut short)."""


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> tuple[int, bool, bytes]:
    """Send one request and read its whole answer: the status, whether the server closes, the body."""
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise _Answer(f"malformed status line {lines[0]!r}")
    status = int(parts[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    closes = headers.get("connection", "").lower() == "close" or parts[0] == "HTTP/1.0"
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        chunks = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            chunks.append(await reader.readexactly(size + 2))
            if size == 0:
                break
        body = b"".join(chunks)
    else:
        body = await reader.read()
        closes = True
    return status, closes, body


async def _connection(plan: list[Target], offset: int, deadline: float, timeout: float, records: Records) -> None:
    """One closed-loop client: a request, its answer, the next request."""
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None
    number = offset
    while time.monotonic() < deadline:
        target = plan[number % len(plan)]
        number += 1
        started = time.monotonic()
        failure = None
        status = 0
        try:
            if writer is None:
                reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", target.port), timeout)
            assert reader is not None and writer is not None
            status, closes, body = await asyncio.wait_for(_exchange(reader, writer, target.request), timeout)
            if not 200 <= status < 400:
                failure = f"{status} {body[:300].decode(errors='replace')}"
        except asyncio.TimeoutError:
            failure, closes = f"no answer within {timeout:g} s", True
        except asyncio.IncompleteReadError as exc:
            failure, closes = f"connection closed after {len(exc.partial)} bytes of the answer", True
        except (OSError, _Answer, ValueError) as exc:
            failure, closes = f"{type(exc).__name__}: {exc}", True
        done = time.monotonic()
        records.add(done, done - started, target, status, failure)
        if closes and writer is not None:
            writer.close()
            writer = reader = None
        if failure is not None and status == 0:
            await asyncio.sleep(0.01)  # a refused connection must not spin
    if writer is not None:
        writer.close()


def load_process(
    ports: list[int],
    paths: list[tuple[str, str]],
    connections: list[int],
    timeout: float,
    ready: Any,
    go: Any,
    window: Any,
    results: Any,
) -> None:
    """A load process: ``connections`` (their numbers; even to replica A, odd to B) until the window closes."""
    plans = targets(ports, paths)
    records = Records()

    async def run() -> None:
        deadline = window[1]
        await asyncio.gather(
            *(
                _connection(plans[number % len(ports)], number * 7919, deadline, timeout, records)
                for number in connections
            )
        )

    ready.put(os.getpid())
    go.wait()
    asyncio.run(run())
    results.put(
        {
            "arrays": {
                name: getattr(records, name).tobytes() for name in ("done", "latency", "replica", "path", "status")
            },
            "failures": dict(records.failures),
            "samples": records.samples,
        }
    )


def _received(message: dict[str, Any]) -> Records:
    records = Records()
    for name, data in message["arrays"].items():
        getattr(records, name).frombytes(data)
    records.failures.update(message["failures"])
    records.samples.extend(message["samples"])
    return records


def run_load(
    args: argparse.Namespace,
    ports: list[int],
    paths: list[tuple[str, str]],
    seconds: float,
    choreography: Callable[[float], None],
) -> tuple[Records, float, tuple[float, float]]:
    """Load both replicas for ``seconds`` while ``choreography(start)`` runs here: every answer, the start,
    and the cores busy meanwhile with this benchmark (servers included) and with anything else."""
    context = multiprocessing.get_context("spawn")  # this process has threads: no fork
    ready, results = context.Queue(), context.Queue()
    go = context.Event()
    window = context.Array("d", 2)
    share = -(-args.connections // args.processes)  # consecutive numbers: each process drives both replicas
    processes = [
        context.Process(
            target=load_process,
            args=(
                ports,
                paths,
                list(range(args.connections))[n * share : (n + 1) * share],
                args.timeout,
                ready,
                go,
                window,
                results,
            ),
            daemon=True,
        )
        for n in range(args.processes)
    ]
    records = Records()
    try:
        for process in processes:
            process.start()
        for _ in processes:
            ready.get(timeout=60)
        start = time.monotonic() + 0.05
        window[0], window[1] = start, start + seconds
        cpu_before = cpu_seconds()
        go.set()
        choreography(start)
        for _ in processes:
            records.extend(_received(results.get(timeout=seconds + 120)))
        for process in processes:
            process.join(timeout=10)
        cpu_after = cpu_seconds()
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join()
    elapsed = time.monotonic() - start
    cores = tuple((after - before) / elapsed for before, after in zip(cpu_before, cpu_after, strict=True))
    return records, start, (cores[0], cores[1] - cores[0])


def cpu_seconds() -> tuple[float, float]:
    """CPU time used so far by this process and everything it started (waited-for
    children included), and by the whole machine."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue  # gone meanwhile
        parents[int(entry)] = int(fields[1])
        times[int(entry)] = sum(int(value) for value in fields[11:15]) / tick
    ours = {os.getpid()}
    while added := {pid for pid, parent in parents.items() if parent in ours and pid not in ours}:
        ours |= added
    machine_ticks = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in machine_ticks[:8])
    return sum(times[pid] for pid in ours if pid in times), (user + nice + system + irq + softirq + steal) / tick


# -- what was measured --------------------------------------------------------------


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000 if ordered else float("nan")


@dataclass
class Second:
    """One second of a session: the latencies of the answers completed in it, by replica and kind."""

    latencies: dict[tuple[int, str], list[float]] = field(
        default_factory=lambda: {(replica, kind): [] for replica in range(len(REPLICAS)) for kind in KINDS}
    )
    failed: int = 0

    def rate(self, *, replica: int | None = None, kind: str | None = None) -> int:
        return sum(len(values) for values in self._of(replica, kind))

    def p99(self, *, replica: int | None = None, kind: str | None = None) -> float:
        return p99([value for values in self._of(replica, kind) for value in values])

    def _of(self, replica: int | None, kind: str | None) -> list[list[float]]:
        return [
            values
            for (r, k), values in self.latencies.items()
            if (replica is None or r == replica) and (kind is None or k == kind)
        ]


@dataclass
class Fault:
    """One fault, measured: the seconds around it, what happened when, and what the probes saw."""

    title: str
    records: Records
    paths: list[tuple[str, str]]
    fault_at: float
    baseline_seconds: int
    window_seconds: int
    recovery_from: tuple[float, str]
    events: list[tuple[float, str]]
    notes: list[str] = field(default_factory=list)
    log_lines: list[str] = field(default_factory=list)
    probe_failures: list[str] = field(default_factory=list)

    @cached_property
    def seconds(self) -> dict[int, Second]:
        """Every second from the baseline's first to the window's last, by its number from the fault."""
        by_second = {s: Second() for s in range(-self.baseline_seconds, self.window_seconds)}
        records = self.records
        for done, latency, replica, path, status in zip(
            records.done, records.latency, records.replica, records.path, records.status, strict=True
        ):
            second = by_second.get(int((done - self.fault_at) // 1))
            if second is None:
                continue
            if 200 <= status < 400:
                second.latencies[replica, self.paths[path][1]].append(latency)
            else:
                second.failed += 1
        return by_second

    @cached_property
    def baseline(self) -> tuple[float, float]:
        """Requests per second and p99 (ms) over the baseline seconds."""
        seconds = [s for n, s in self.seconds.items() if n < 0]
        return (
            sum(s.rate() for s in seconds) / len(seconds),
            p99([v for s in seconds for values in s.latencies.values() for v in values]),
        )

    def slowest(self, count: int) -> list[str]:
        """The slowest answers of the fault's window, described."""
        records = self.records
        inside = [
            n
            for n, done in enumerate(records.done)
            if 0 <= done - self.fault_at < self.window_seconds and 200 <= records.status[n] < 400
        ]
        inside.sort(key=lambda n: records.latency[n], reverse=True)
        return [
            f"{records.latency[n] * 1000:.0f} ms: replica {REPLICAS[records.replica[n]]} "
            f"GET {self.paths[records.path[n]][0]}, answered at {records.done[n] - self.fault_at:+.2f} s"
            for n in inside[:count]
        ]

    def failed(self) -> int:
        return sum(1 for status in self.records.status if not 200 <= status < 400)


def print_fault(fault: Fault) -> None:
    seconds = fault.seconds
    base_rate, base_p99 = fault.baseline
    events: dict[int, list[str]] = {}
    for at, what in fault.events:
        events.setdefault(int((at - fault.fault_at) // 1), []).append(f"{what} (+{at - fault.fault_at:.2f} s)")
    print(f"\n### {fault.title}\n")
    print(
        "| s | event | req/s | p99 ms | A req/s | A p99 | B req/s | B p99 | exact p99 | range p99 | failed |\n"
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    for number, second in seconds.items():
        replicas = " | ".join(f"{second.rate(replica=r):,} | {second.p99(replica=r):.1f}" for r in range(2))
        kinds = " | ".join(f"{second.p99(kind=kind):.1f}" for kind in KINDS)
        print(
            f"| {number:+d} | {'; '.join(events.get(number, []))} | {second.rate():,} | {second.p99():.1f} "
            f"| {replicas} | {kinds} | {second.failed} |"
        )
    during = [(n, s) for n, s in seconds.items() if n >= 0]
    worst_rate = min(during, key=lambda item: item[1].rate())
    worst_p99 = max(during, key=lambda item: item[1].p99())
    usual = [s for n, s in seconds.items() if n < 0]
    usual_rate = statistics.median(s.rate() for s in usual)
    usual_p99 = statistics.median(s.p99() for s in usual)
    bound = max(usual_p99 * DEGRADED_P99_FACTOR, usual_p99 + DEGRADED_P99_MARGIN_MS)
    degraded = {n for n, s in during if s.rate() < usual_rate * DEGRADED_THROUGHPUT or s.p99() > bound or s.failed}
    since, event = fault.recovery_from
    offset = since - fault.fault_at
    back = next(
        (n for n, _ in during if n >= int(offset) and not degraded & set(range(n, n + RECOVERED_SECONDS))),
        None,
    )
    if back is not None and back + RECOVERED_SECONDS > during[-1][0] + 1:
        back = None
    recovery = (
        f"back to baseline {max(0.0, back - offset):.1f} s after {event}"
        if back is not None
        else f"NOT back to baseline by the end ({(during[-1][0] + 1 - offset):.0f} s after {event})"
    )
    print(
        f"\n**{fault.title}**: baseline {base_rate:,.0f} req/s, p99 {base_p99:.1f} ms; "
        f"worst second {worst_rate[1].rate():,} req/s ({worst_rate[0]:+d} s), "
        f"worst p99 {worst_p99[1].p99():.1f} ms ({worst_p99[0]:+d} s); {recovery}; "
        f"failures {fault.failed()} of {len(fault.records):,} requests"
        + (f", probe failures {len(fault.probe_failures)}" if fault.probe_failures else "")
        + "."
    )
    print(
        f"- degraded seconds (below {DEGRADED_THROUGHPUT:.0%} of the baseline's median {usual_rate:,.0f} req/s, "
        f"p99 above {bound:.1f} ms, or a failure): "
        + (", ".join(f"{n:+d}" for n in sorted(degraded)) or "none")
        + f"; back to baseline means the first {RECOVERED_SECONDS} seconds in a row with none"
    )
    for note in fault.notes:
        print(f"- {note}")
    print(f"- slowest answers: {'; '.join(fault.slowest(5))}")
    if fault.records.failures:
        print("\nFailed requests:\n")
        for what, count in fault.records.failures.most_common():
            print(f"- {count} x {what[:300]}")
        print(f"\nFirst failures (t is the monotonic clock; the fault began at t={fault.fault_at:.3f}):\n")
        for sample in fault.records.samples:
            print(f"    {sample[:400]}")
    for failure in fault.probe_failures[:FAILURE_SAMPLES]:
        print(f"- probe: {failure}")
    if fault.log_lines:
        print("\nServer log lines during the session (time relative to the fault):\n")
        for line in fault.log_lines[:LOG_LINES]:
            print(f"    {line[:400]}")
        if len(fault.log_lines) > LOG_LINES:
            print(f"    ... and {len(fault.log_lines) - LOG_LINES} more")
    sys.stdout.flush()


# -- the replicas ---------------------------------------------------------------------


@dataclass
class Replica:
    """A registry server mirroring the remote, its log kept with the time of each line."""

    name: str
    server: Server
    log: list[tuple[float, str]] = field(default_factory=list)
    failed_starts: list[str] = field(default_factory=list)

    def start(self) -> None:
        """Start the server and wait until it answers ``/readyz``; a start that
        fails (the server exits) is noted in ``failed_starts`` and tried once more."""
        for attempt in range(2):
            try:
                self.server.start(ready_path="/readyz")
                break
            except RuntimeError as exc:
                tail = "\n".join(str(exc).splitlines()[-8:])
                self.failed_starts.append(f"exited before it was ready; the end of its output:\n{tail}")
                if attempt:
                    raise
        assert self.server.process is not None and self.server.process.stderr is not None
        # Drained as it comes: a server whose stderr pipe is full blocks on its next log line.
        threading.Thread(target=self._drain, args=(self.server.process.stderr,), daemon=True).start()

    def settled(self) -> bool:
        """Still running once every worker has had time to boot; else noted and started again.

        One worker answering ``/readyz`` does not mean the other booted: a
        worker that fails to boot makes gunicorn stop the whole server.
        """
        assert self.server.process is not None
        if self.server.process.poll() is None:
            return True
        time.sleep(0.2)  # the last lines, drained
        lines = "\n".join(text for _, text in self.log[-12:])
        self.failed_starts.append(f"exited {SETTLE_SECONDS:g} s after it was ready:\n{lines}")
        self.log.clear()
        self.start()
        return False

    def _drain(self, stream: object) -> None:
        for line in iter(stream.readline, b""):  # type: ignore[attr-defined]
            self.log.append((time.monotonic(), line.decode(errors="replace").rstrip()))

    def lines_between(self, start: float, end: float, origin: float) -> list[str]:
        return [f"{at - origin:+7.2f} s {self.name}: {text}" for at, text in self.log if start <= at < end]


# What /metrics says of a session, added up over a replica's workers: counters only.
COUNTERS = (
    "prompt_registry_release_events_total",
    "prompt_registry_redis_errors_total",
    "prompt_registry_definition_loads_total",
    "prompt_registry_cache_lookups_total",
    "prompt_registry_http_requests_total",
)


def busy(cores: tuple[float, float]) -> str:
    return (
        f"cores busy on average during the session: {cores[0]:.2f} with this benchmark (replicas, Redis, load), "
        f"{cores[1]:.2f} with other processes, of {os.cpu_count()}"
    )


def counters(replica: Replica) -> dict[str, float]:
    """The replica's counters now (every sample of the ``COUNTERS``)."""
    status, _, body = get(replica.server.port, "/metrics")
    found: dict[str, float] = {}
    if status != 200:
        return found
    for line in body.decode().splitlines():
        name, _, value = line.rpartition(" ")
        if name.startswith(COUNTERS):
            found[name] = found.get(name, 0.0) + float(value)
    return found


def counter_changes(replicas: list[Replica], before: list[dict[str, float]]) -> list[str]:
    """What changed in each replica's counters since ``before``, as notes (requests by status outside 2xx)."""
    notes = []
    for replica, earlier in zip(replicas, before, strict=True):
        now = counters(replica)
        changed = {
            name.removeprefix("prompt_registry_").replace("_total", ""): now[name] - earlier.get(name, 0.0)
            for name in sorted(now)
            if now[name] != earlier.get(name, 0.0) and (not name.startswith(COUNTERS[-1]) or 'status="2' not in name)
        }
        notes.append(
            f"replica {replica.name} /metrics during the session: "
            + (", ".join(f"`{name}` +{value:,.0f}" for name, value in changed.items()) or "no change")
        )
    return notes


def get(
    port: int, path: str, *, method: str = "GET", headers: dict[str, str] | None = None, body: bytes = b""
) -> tuple[int, dict[str, str], bytes]:
    """One request on a new connection (so that either worker may take it)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(method, path, body=body or None, headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def git(repo: Path, *args: str) -> str:
    """What ``git -C repo *args`` prints."""
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def push(source: Path, remote: Path, first: int, last: int) -> None:
    """Push release tags v1.<first>.0 ... v1.<last>.0 and the branch at the last of them."""
    refspecs = [f"refs/tags/v1.{n}.0:refs/tags/v1.{n}.0" for n in range(first, last + 1)]
    git(source, "push", "--quiet", "--atomic", str(remote), f"v1.{last}.0^{{commit}}:refs/heads/main", *refspecs)


# -- the faults ------------------------------------------------------------------------


class Probe(threading.Thread):
    """Asks each replica the same thing again and again on new connections, noting what it answers."""

    def __init__(self, replicas: list[Replica], path: str, check: Callable[[dict[str, str], bytes], bool]) -> None:
        super().__init__(daemon=True)
        self.replicas = replicas
        self.path = path
        self.check = check
        self.answers: list[list[tuple[float, bool]]] = [[] for _ in replicas]
        """Per replica, when each answer came and whether it passed the check."""
        self.failures: list[str] = []
        self._stopping = threading.Event()

    def run(self) -> None:
        while not self._stopping.is_set():
            for number, replica in enumerate(self.replicas):
                try:
                    status, headers, body = get(
                        replica.server.port, self.path, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
                    )
                except (OSError, http.client.HTTPException) as exc:
                    self.failures.append(f"t={time.monotonic():.3f} replica {replica.name} GET {self.path}: {exc!r}")
                    continue
                now = time.monotonic()
                if not 200 <= status < 400:
                    self.failures.append(f"t={now:.3f} replica {replica.name} GET {self.path}: {status} {body[:300]!r}")
                    continue
                self.answers[number].append((now, self.check(headers, body)))
            self._stopping.wait(PROBE_SECONDS)

    def stop(self) -> None:
        self._stopping.set()
        if self.ident is not None:
            self.join(timeout=15)


def session(
    args: argparse.Namespace,
    replicas: list[Replica],
    paths: list[tuple[str, str]],
    title: str,
    after_fault: float,
    choreography: Callable[[float], None],
    probe: Probe,
    marks: dict[str, float],
    events: list[tuple[float, str]],
    recovery: tuple[str, str],
) -> tuple[Fault, Callable[[], None]]:
    """One session of load with ``choreography`` playing the fault: the fault
    as measured, and what adds the notes every fault ends with (the counters'
    changes, the cores busy, the servers' log lines), to call after its own."""
    seconds = args.warmup + args.baseline + after_fault
    before = [counters(replica) for replica in replicas]
    try:
        records, start, cores = run_load(args, ports(replicas), paths, seconds, choreography)
    finally:
        probe.stop()
    mark, label = recovery
    fault = Fault(
        title,
        records,
        paths,
        marks["fault"],
        int(args.baseline),
        int(after_fault),
        (marks[mark], label),
        events,
        probe_failures=probe.failures,
    )

    def conclude() -> None:
        fault.notes.extend(counter_changes(replicas, before))
        fault.notes.append(busy(cores))
        fault.log_lines, pauses = logs(replicas, start, start + seconds + 1, fault.fault_at)
        fault.notes.extend(pauses)

    return fault, conclude


def redis_fault(
    args: argparse.Namespace, replicas: list[Replica], redis: RedisServer, paths: list[tuple[str, str]], round_: int
) -> Fault:
    events: list[tuple[float, str]] = []
    marks: dict[str, float] = {}
    probe = Probe(replicas, "/v1/admin/cache", lambda headers, body: json.loads(body)["redis"]["announcements"] is True)

    def choreography(start: float) -> None:
        marks["fault"] = fault_at = start + args.warmup + args.baseline
        time.sleep(max(0.0, fault_at - time.monotonic()))
        assert redis.process is not None
        pid = redis.process.pid
        redis.kill()
        events.append((time.monotonic(), f"Redis killed (pid {pid})"))
        probe.start()
        time.sleep(max(0.0, fault_at + args.outage - time.monotonic()))
        began = time.monotonic()
        redis.start()
        marks["restarted"] = time.monotonic()
        events.append(
            (marks["restarted"], f"Redis restarted on :{redis.port} in {(marks['restarted'] - began) * 1000:.0f} ms")
        )

    fault, conclude = session(
        args,
        replicas,
        paths,
        f"Redis killed for {args.outage:g} s and restarted, round {round_ + 1}",
        args.outage + args.after,
        choreography,
        probe,
        marks,
        events,
        ("restarted", "the restart"),
    )
    restarted = marks["restarted"]
    for number, replica in enumerate(replicas):
        answers = [(at - restarted, subscribed) for at, subscribed in probe.answers[number]]
        during = sum(1 for at, subscribed in answers if at < 0 and subscribed)
        heard = next((at for at, subscribed in answers if at > 0 and subscribed), None)
        deaf = [at for at, subscribed in answers if at > 0 and not subscribed]
        fault.notes.append(
            f"replica {replica.name}, probes of /v1/admin/cache from the kill on ({len(answers)}, either worker): "
            f"{during} said announcements were subscribed while Redis was down; "
            + (
                f"the first subscribed answer came {heard:.2f} s after the restart"
                if heard is not None
                else "NONE after"
            )
            + (f", the last unsubscribed one {deaf[-1]:.2f} s after it" if deaf else "")
        )
    conclude()
    return fault


def sync_fault(
    args: argparse.Namespace,
    replicas: list[Replica],
    source: Path,
    remote: Path,
    paths: list[tuple[str, str]],
    round_: int,
) -> Fault:
    first, last = args.tags * (round_ + 1), args.tags * (round_ + 2) - 1
    newest = f"v1.{last}.0"
    events: list[tuple[float, str]] = []
    marks: dict[str, float] = {}
    probe_agent = paths[0][0].split("?")[0]
    probe = Probe(
        replicas,
        f"{probe_agent}?release=latest",
        lambda headers, body: headers.get("x-registry-release") == newest,
    )

    def choreography(start: float) -> None:
        marks["fault"] = fault_at = start + args.warmup + args.baseline
        time.sleep(max(0.0, fault_at - time.monotonic()))
        probe.start()
        push(source, remote, first, last)
        marks["pushed"] = time.monotonic()
        events.append((marks["pushed"], f"{last - first + 1} tags pushed, up to {newest}"))
        status, _, body = get(
            replicas[0].server.port,
            "/v1/hooks/git",
            method="POST",
            headers={"X-Gitlab-Token": WEBHOOK_SECRET, "Content-Type": "application/json"},
            body=json.dumps({"object_kind": "tag_push", "ref": f"refs/tags/{newest}"}).encode(),
        )
        marks["hooked"] = time.monotonic()
        events.append((marks["hooked"], f"webhook to A: {status}"))
        if status != 202:
            probe.failures.append(f"the webhook answered {status}: {body[:300]!r}")

    fault, conclude = session(
        args,
        replicas,
        paths,
        f"Sync of {last - first + 1} new tags (to {newest}) by webhook, round {round_ + 1}",
        args.after,
        choreography,
        probe,
        marks,
        events,
        ("hooked", "the webhook"),
    )
    pushed = marks["pushed"]
    fault.notes.append(
        f"the push took {(pushed - marks['fault']) * 1000:.0f} ms; "
        f"the webhook was answered {(marks['hooked'] - pushed) * 1000:.0f} ms after it"
    )
    for number, replica in enumerate(replicas):
        answers = probe.answers[number]
        seen = next((at for at, newer in answers if newer), None)
        stale = [at for at, newer in answers if not newer and at > pushed]
        flips = [at for at in stale if seen is not None and at > seen]
        fault.notes.append(
            f"replica {replica.name}: `latest` first answered {newest} "
            + (f"{seen - pushed:.2f} s after the push" if seen is not None else "NEVER during the session")
            + (f", an older release last {stale[-1] - pushed:.2f} s after it" if stale else "")
            + (f", {len(flips)} older answers AFTER the first {newest}" if flips else "")
            + f" ({len(answers)} probes)"
        )
    fault.notes.extend(verify_newest(replicas, paths, newest))
    conclude()
    return fault


def verify_newest(replicas: list[Replica], paths: list[tuple[str, str]], newest: str) -> list[str]:
    """After the sync every replica answers the newest tag, exactly and by range, from either worker."""
    notes = []
    agents = sorted({path.split("?")[0] for path, _ in paths})[:8]
    for replica in replicas:
        wrong = []
        for agent in agents:
            for release in (newest, "%5E1.0", "latest"):
                status, headers, body = get(replica.server.port, f"{agent}?release={release}")
                if status != 200 or headers.get("x-registry-release") != newest:
                    wrong.append(
                        f"{agent}?release={release} -> {status} {headers.get('x-registry-release')} {body[:200]!r}"
                    )
        notes.append(
            f"replica {replica.name} after the session: {len(agents) * 3 - len(wrong)} of {len(agents) * 3} "
            f"answers (exact {newest}, ^1.0, latest; new connections) name {newest}"
            + ("" if not wrong else "; WRONG: " + " | ".join(wrong[:5]))
        )
    return notes


def ports(replicas: list[Replica]) -> list[int]:
    return [replica.server.port for replica in replicas]


def logs(replicas: list[Replica], start: float, end: float, origin: float) -> tuple[list[str], list[str]]:
    """The replicas' log lines from ``start`` to ``end``, in order, and (--diagnose) a summary of the pauses
    logged; collections shorter than the DIAGNOSTIC_SHOWN_MS are left out of the lines."""
    lines = sorted(
        (line for replica in replicas for line in replica.lines_between(start, end, origin)),
        key=lambda line: float(line.split(" s ", 1)[0]),
    )
    pauses = [(line, _DIAGNOSED.search(line)) for line in lines]
    summary = []
    for name in REPLICAS:
        for kind, label in (("garbage collection", "garbage collections"), ("fcntl.flock", "flock waits")):
            took = [
                int(match.group(3))
                for line, match in pauses
                if match and match.group(2).startswith(kind) and f" s {name}: " in line
            ]
            if took:
                summary.append(
                    f"replica {name}: {len(took)} {label} of {DIAGNOSTIC_MIN_MS} ms or more, "
                    f"{sum(took):,} ms in all, the longest {max(took)} ms"
                )
    shown = [
        line
        for line, match in pauses
        if not (match and match.group(2).startswith("garbage") and int(match.group(3)) < DIAGNOSTIC_SHOWN_MS)
    ]
    return shown, summary


def load_paths(args: argparse.Namespace) -> list[tuple[str, str]]:
    """Per agent of the load: an old exact tag (one of ``--pinned``), the newest tag at start, ^1.0 and latest."""
    total = args.usecases * args.per_usecase
    step = max(1, total // args.agents)
    paths = []
    for number in range(min(args.agents, total)):
        usecase, name = divmod(number * step, args.per_usecase)
        agent = f"/v1/agents/usecase_{usecase:03d}/agent_{name:03d}"
        paths += [
            (f"{agent}?release=v1.{(number % args.pinned) * (args.tags // args.pinned)}.0", "exact"),
            (f"{agent}?release=v1.{args.tags - 1}.0", "exact"),
            (f"{agent}?release=%5E1.0", "range"),
            (f"{agent}?release=latest", "range"),
        ]
    return paths


def warm(replicas: list[Replica], paths: list[tuple[str, str]]) -> None:
    """Every path once on each replica, so that even a cold worker has Redis to load from."""
    for replica in replicas:
        for path, _ in paths:
            status, _, body = get(replica.server.port, path)
            if status != 200:
                raise RuntimeError(f"replica {replica.name} answered {status} for {path}: {body[:300]!r}")


def code_state() -> str:
    """The commit measured, and the files of the registry changed since it (the numbers are theirs too)."""
    commit = git(ROOT, "rev-parse", "--short", "HEAD").strip()
    changed = git(ROOT, "status", "--porcelain", "--", "registry", "gunicorn.conf.py").splitlines()
    return commit + (f" with uncommitted changes to {', '.join(line[3:] for line in changed)}" if changed else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="redis,sync", help="comma-separated faults (redis,sync)")
    parser.add_argument("--rounds", type=int, default=1, help="each fault this many times")
    parser.add_argument("--warmup", type=float, default=3, help="seconds of load before the baseline, not reported")
    parser.add_argument("--baseline", type=int, default=10, help="seconds of load before each fault")
    parser.add_argument("--outage", type=int, default=10, help="seconds Redis stays down")
    parser.add_argument("--after", type=int, default=20, help="seconds of load after the fault's last action")
    parser.add_argument("--connections", type=int, default=32, help="kept-alive connections, half to each replica")
    parser.add_argument("--processes", type=int, default=2, help="load generator processes")
    parser.add_argument("--timeout", type=float, default=10, help="an answer slower than this is a failure")
    parser.add_argument("--usecases", type=int, default=20)
    parser.add_argument("--per-usecase", type=int, default=25)
    parser.add_argument("--tags", type=int, default=100, help="release tags at start, and pushed per sync round")
    parser.add_argument("--changed-per-tag", type=int, default=25, help="agents each release edits")
    parser.add_argument("--agents", type=int, default=100, help="agents in the load (4 requests each)")
    parser.add_argument(
        "--pinned", type=int, default=8, help="distinct old releases the exact requests pin (besides the newest)"
    )
    parser.add_argument("--sync-interval", type=float, default=60, help="REGISTRY_SYNC_INTERVAL of both replicas")
    parser.add_argument("--workers", type=int, default=int(os.environ.get("REGISTRY_WORKERS", 2)))
    parser.add_argument("--threads", type=int, default=int(os.environ.get("REGISTRY_THREADS", 4)))
    parser.add_argument("--conf", type=Path, default=ROOT / "gunicorn.conf.py", help="gunicorn configuration")
    parser.add_argument(
        "--diagnose",
        action="store_true",
        help=f"log garbage collections and flock waits of {DIAGNOSTIC_MIN_MS} ms or more (wraps --conf)",
    )
    parser.add_argument("--logs", type=Path, help="also write each replica's log (stderr) to DIR/replica-<name>.log")
    args = parser.parse_args()
    only = set(args.only.split(","))

    load = os.getloadavg()
    print(f"Machine: {machine().rsplit('; load generator', 1)[0]}")
    print(f"Code: {code_state()}")
    print(f"Load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(
        "Replicas: 2 x gunicorn -c gunicorn.conf.py, "
        f"REGISTRY_WORKER_CLASS={os.environ.get('REGISTRY_WORKER_CLASS', 'gevent')}, "
        f"REGISTRY_WORKERS={args.workers}, REGISTRY_SYNC_INTERVAL={args.sync_interval:g}, one redis-server; "
        f"load: {args.processes} Python processes, {args.connections} kept-alive connections (half per replica), "
        f"{args.agents} agents x (an exact old tag, one of {args.pinned}; the newest tag; ^1.0; latest)"
    )
    with tempfile.TemporaryDirectory(prefix="registry-faults-") as scratch:
        work = Path(scratch)
        started = time.monotonic()
        source = large_library(
            work / "source",
            usecases=args.usecases,
            per_usecase=args.per_usecase,
            tags=args.tags * (args.rounds + 1),
            changed_per_tag=args.changed_per_tag,
        )
        remote = work / "remote.git"
        subprocess.run(["git", "init", "--quiet", "--bare", "-b", "main", str(remote)], check=True)
        push(source, remote, 0, args.tags - 1)
        print(
            f"Library: {args.usecases * args.per_usecase:,} agents, {args.tags} annotated tags at start "
            f"({args.tags * (args.rounds + 1)} built), {args.changed_per_tag} agents edited per tag; "
            f"built and pushed in {time.monotonic() - started:.1f} s"
        )
        if args.diagnose:
            conf = work / "diagnose.conf.py"
            conf.write_text(
                DIAGNOSTIC_CONF.replace("PRODUCTION_CONF", repr(str(args.conf))).replace(
                    "MIN_MS", str(DIAGNOSTIC_MIN_MS)
                )
            )
            args.conf = conf
        redis = RedisServer(work / "redis")
        replicas: list[Replica] = []
        try:
            redis.start()
            for name in REPLICAS:
                env = server_env(
                    args,
                    REGISTRY_REMOTE=str(remote),
                    REGISTRY_DATA_DIR=str(work / f"replica-{name}"),
                    REGISTRY_SYNC_INTERVAL=f"{args.sync_interval:g}",
                    REGISTRY_WEBHOOK_SECRET=WEBHOOK_SECRET,
                    REGISTRY_ADMIN_TOKENS=ADMIN_TOKEN,
                    REDIS_URL=redis.url,
                )
                replicas.append(Replica(name, gunicorn(f"replica {name}", env, REGISTRY_APP, conf=args.conf)))
                replicas[-1].start()
            for _ in range(3):
                time.sleep(SETTLE_SECONDS)
                if all([replica.settled() for replica in replicas]):
                    break
            paths = load_paths(args)
            warm(replicas, paths)
            for replica in replicas:
                for failure in replica.failed_starts:
                    print(f"\n**Replica {replica.name} FAILED TO START** (started again): it", end=" ")
                    print("\n    ".join(failure.rstrip().splitlines()))
            print(f"\nReplicas ready and warm {time.monotonic() - started:.1f} s after the start")
            sys.stdout.flush()
            for round_ in range(args.rounds):
                if "redis" in only:
                    print_fault(redis_fault(args, replicas, redis, paths, round_))
                if "sync" in only:
                    print_fault(sync_fault(args, replicas, source, remote, paths, round_))
        finally:
            for replica in replicas:
                replica.server.stop()
            redis.stop()
            if args.logs:
                args.logs.mkdir(parents=True, exist_ok=True)
                for replica in replicas:
                    (args.logs / f"replica-{replica.name}.log").write_text(
                        "".join(f"{at:.3f} {text}\n" for at, text in replica.log)
                    )
    load = os.getloadavg()
    print(f"\nLoad average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
