"""Serving benchmark: the registry against a bare Flask app, in one run.

Run by hand, from the repository root, with the dev environment:

    .venv/bin/python bench/serving.py              # every scenario, about 10 minutes
    .venv/bin/python bench/serving.py --only a,d   # some of them
    .venv/bin/python bench/serving.py --seconds 3 --rounds 1   # a quick look

Both servers run under the production configuration: gunicorn with
``gunicorn.conf.py`` (gevent workers, or gthread with
REGISTRY_WORKER_CLASS=gthread; JSON access logs written to /dev/null), the
same REGISTRY_WORKERS and REGISTRY_THREADS, on loopback; ``--conf`` names
another configuration for both.
The baseline (``bench/baseline_app.py``) answers the same URLs with bytes
captured from the registry, or renders the same templates with plain Jinja,
so the ratio is the cost of the registry's own work. A load generator (wrk
if installed, else ``bench/loadgen.py``'s Python one) drives each in turn;
rounds alternate baseline and registry, and the ratios reported are the
median of the rounds' ratios.

Scenarios (the targets are in issue 4 and BENCHMARKS.md):
  a  warm GET of a definition by exact tag      throughput and p99 vs baseline
  b  warm render                                throughput vs plain-Jinja Flask
  c  warm GET by range (^1.0)                   throughput vs baseline
  d  first request at a release never seen, in a library of 5,000 agents
     and 100 tags                               latency (target < 50 ms)
  e  worker memory after touching 100 releases  RSS growth per definition
  servers  scenario (a) under gunicorn sync, gthread and granian (if installed)

Prints Markdown tables, ready for BENCHMARKS.md, with the machine's details.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.loadgen import Load, available_generator, drive
from bench.make_library import large_library, small_library

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
REGISTRY_APP = "registry.app:create_app()"
BASELINE_APP = "bench.baseline_app:create_app()"

AGENT = ("explain_code", "snippet")
RENDER_INPUTS = {
    "inputs": {
        "code": "def add(a, b):\n    return a + b\n",
        "language": "python",
        "file_path": "src/calc.py",
        "audience": "intermediate",
    }
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Server:
    """A server process on a free port, started in its own session and stopped by PID."""

    label: str
    argv: list[str]
    env: dict[str, str]
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, ready_path: str = "/healthz") -> Server:
        env = {**os.environ, **self.env, "REGISTRY_HOST": "127.0.0.1", "REGISTRY_PORT": str(self.port)}
        argv = [part.replace("{port}", str(self.port)) for part in self.argv]
        self.process = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                assert self.process.stderr is not None
                raise RuntimeError(f"{self.label} exited: {self.process.stderr.read().decode()[-2000:]}")
            try:
                status, _, _ = request(self.port, "GET", ready_path)
                if status < 500:
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{self.label} did not start within 60 s")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def worker_pids(self) -> list[int]:
        """The server's worker processes: its children (gunicorn's and granian's workers)."""
        assert self.process is not None
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
        return [int(pid) for pid in children]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def request(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(method, path, body=body, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


@contextmanager
def running(*servers: Server) -> Iterator[tuple[Server, ...]]:
    try:
        for server in servers:
            server.start()
        yield servers
    finally:
        for server in servers:
            server.stop()


def gunicorn(label: str, env: dict[str, str], app: str, *extra: str, conf: Path = ROOT / "gunicorn.conf.py") -> Server:
    return Server(label, [PYTHON, "-m", "gunicorn", "-c", str(conf), *extra, app], env)


def granian(label: str, env: dict[str, str], app: str, workers: int, threads: int) -> Server:
    module, _, factory = app.partition(":")
    return Server(
        label,
        [
            PYTHON,
            "-m",
            "granian",
            "--interface",
            "wsgi",
            "--host",
            "127.0.0.1",
            "--port",
            "{port}",
            "--workers",
            str(workers),
            "--blocking-threads",
            str(threads),
            "--no-ws",
            "--factory",
            f"{module}:{factory.removesuffix('()')}",
        ],
        env,
    )


# -- measurements ---------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """Rounds of both servers, run back to back; ratios are per round, then the median."""

    scenario: str
    baseline_rounds: list[Load]
    registry_rounds: list[Load]

    @property
    def baseline(self) -> Load:
        return _median_load(self.baseline_rounds)

    @property
    def registry(self) -> Load:
        return _median_load(self.registry_rounds)

    @property
    def throughput_ratio(self) -> float:
        return statistics.median(
            r.requests_per_second / b.requests_per_second
            for b, r in zip(self.baseline_rounds, self.registry_rounds, strict=True)
        )

    @property
    def p99_ratio(self) -> float:
        return statistics.median(
            r.p99_ms / b.p99_ms for b, r in zip(self.baseline_rounds, self.registry_rounds, strict=True)
        )


def _median_load(loads: list[Load]) -> Load:
    return sorted(loads, key=lambda load: load.requests_per_second)[len(loads) // 2]


def compare(
    scenario: str,
    baseline: Server,
    registry: Server,
    path: str,
    args: argparse.Namespace,
    *,
    method: str = "GET",
    body: bytes = b"",
) -> Comparison:
    """Alternate the two servers, round by round, each going first in turn, so
    that drift in the machine's speed (it is a shared VM) falls on both."""

    def run(server: Server, seconds: float) -> Load:
        return drive(server.base + path, connections=args.connections, seconds=seconds, method=method, body=body)

    for server in (baseline, registry):  # warm every worker
        run(server, 2)
    rounds: dict[str, list[Load]] = {"baseline": [], "registry": []}
    for number in range(args.rounds):
        order = [("baseline", baseline), ("registry", registry)]
        for name, server in order if number % 2 == 0 else reversed(order):
            rounds[name].append(run(server, args.seconds))
    return Comparison(scenario, rounds["baseline"], rounds["registry"])


def capture(registry: Server, paths: dict[str, str], render_path: str, templates_from: tuple[str, str]) -> Path:
    """Write the baseline's configuration from the registry's own answers."""
    bodies = {}
    for release, path in paths.items():
        status, headers, body = request(registry.port, "GET", path)
        if status != 200:
            raise RuntimeError(f"registry answered {status} for {path}: {body[:300]!r}")
        bodies[release] = {"body": body.decode(), "etag": headers["ETag"].strip('"')}
    definition = json.loads(bodies[next(iter(bodies))]["body"])["definition"]
    partials_dir = ROOT / "library" / "ai_gateway" / "agents"
    partials = {
        str(path.relative_to(partials_dir)): path.read_text() for path in partials_dir.glob("_partials/*.jinja")
    }
    handle = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump({"bodies": bodies, "templates": definition["prompt_templates"], "partials": partials}, handle)
    handle.close()
    # The plain-Jinja baseline must do the same work: same messages, byte for byte.
    status, _, rendered = request(registry.port, "POST", render_path, json.dumps(RENDER_INPUTS).encode())
    if status != 200:
        raise RuntimeError(f"registry render answered {status}: {rendered[:300]!r}")
    return Path(handle.name)


def check_same_render(registry: Server, baseline: Server, path: str) -> None:
    body = json.dumps(RENDER_INPUTS).encode()
    ours = json.loads(request(registry.port, "POST", path, body)[2])["messages"]
    theirs = json.loads(request(baseline.port, "POST", path, body)[2])["messages"]
    if ours != theirs:
        raise RuntimeError(f"the baseline renders differently:\n{ours}\n{theirs}")


def server_env(args: argparse.Namespace, **extra: str) -> dict[str, str]:
    return {
        "REGISTRY_WORKERS": str(args.workers),
        "REGISTRY_THREADS": str(args.threads),
        "REGISTRY_LOG_LEVEL": "warning",
        **extra,
    }


def warm_scenarios(args: argparse.Namespace, work: Path) -> list[Comparison]:
    repo = small_library(work / "small")
    usecase, name = AGENT
    exact = f"/v1/agents/{usecase}/{name}?release=v1.2.0"
    ranged = f"/v1/agents/{usecase}/{name}?release=%5E1.0"
    render = f"/v1/agents/{usecase}/{name}/render?release=v1.2.0"
    env = server_env(args, REGISTRY_REPO=str(repo), **redis_env(args))
    results = []
    registry = gunicorn("registry", env, REGISTRY_APP, conf=args.conf).start()
    try:
        config = capture(registry, {"v1.2.0": exact, "^1.0": ranged}, render, AGENT)
        baseline_env = server_env(args, BENCH_BASELINE=str(config))
        baseline = gunicorn("baseline", baseline_env, BASELINE_APP, conf=args.conf).start()
        try:
            if "a" in args.only:
                results.append(compare("(a) GET by exact tag", baseline, registry, exact, args))
            if "b" in args.only:
                check_same_render(registry, baseline, render)
                body = json.dumps(RENDER_INPUTS).encode()
                results.append(compare("(b) render", baseline, registry, render, args, method="POST", body=body))
            if "c" in args.only:
                results.append(compare("(c) GET by range ^1.0", baseline, registry, ranged, args))
        finally:
            baseline.stop()
    finally:
        registry.stop()
    return results


def servers_scenario(args: argparse.Namespace, work: Path) -> list[tuple[str, Comparison]]:
    """Scenario (a) under each candidate server configuration."""
    repo = work / "small" if (work / "small").exists() else small_library(work / "small")
    usecase, name = AGENT
    exact = f"/v1/agents/{usecase}/{name}?release=v1.2.0"
    render = f"/v1/agents/{usecase}/{name}/render?release=v1.2.0"
    env = server_env(args, REGISTRY_REPO=str(repo))
    with running(gunicorn("registry", env, REGISTRY_APP)) as (probe,):
        config = capture(probe, {"v1.2.0": exact}, render, AGENT)
    baseline_env = {**env, "BENCH_BASELINE": str(config)}

    def gunicorn_with(*extra: str) -> Callable[[str, dict[str, str], str], Server]:
        return lambda label, e, app: gunicorn(label, e, app, *extra)

    candidates: list[tuple[str, Callable[[str, dict[str, str], str], Server]]] = [
        ("gunicorn sync, 2 workers", gunicorn_with("--worker-class", "sync", "--workers", "2")),
        ("gunicorn sync, 4 workers", gunicorn_with("--worker-class", "sync", "--workers", "4")),
        ("gunicorn gthread, 2 workers x 4 threads", gunicorn_with("--workers", "2", "--threads", "4")),
        ("gunicorn gthread, 4 workers x 4 threads", gunicorn_with("--workers", "4", "--threads", "4")),
    ]
    try:
        import granian as _  # noqa: F401  (an optional candidate: installed by hand, not a dependency)

        for workers in (2, 4):
            candidates.append(
                (
                    f"granian WSGI, {workers} workers x 4 threads",
                    lambda label, e, app, workers=workers: granian(label, e, app, workers, 4),  # type: ignore[misc]  # a lambda with a default
                )
            )
    except ImportError:
        print("granian is not installed in this environment: skipping it (pip install granian)", file=sys.stderr)
    results = []
    for description, make in candidates:
        with running(make("baseline", baseline_env, BASELINE_APP), make("registry", env, REGISTRY_APP)) as (
            baseline,
            registry,
        ):
            results.append((description, compare("(a) GET by exact tag", baseline, registry, exact, args)))
    return results


@dataclass(frozen=True)
class FirstRequest:
    registry_ms: list[float]
    registry_again_ms: list[float]
    baseline_ms: list[float]


def timed_get(port: int, path: str) -> float:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.connect()
        started = time.perf_counter()
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
        elapsed = (time.perf_counter() - started) * 1000
    finally:
        connection.close()
    if response.status != 200:
        raise RuntimeError(f"{path} answered {response.status}")
    return elapsed


def first_request_scenario(args: argparse.Namespace, work: Path, repo: Path) -> FirstRequest:
    env = server_env(args, REGISTRY_REPO=str(repo))
    tags = [f"v1.{minor}.0" for minor in range(1, 100)]
    with running(gunicorn("registry", env, REGISTRY_APP)) as (registry,):
        # Every worker answers something at v1.0.0 first: the process, the
        # repository and the release list are warm; releases 1-99 are not.
        drive(registry.base + "/v1/agents/usecase_000/agent_000?release=v1.0.0", connections=8, seconds=2)
        paths = [
            f"/v1/agents/usecase_{i % 50:03d}/agent_{(i * 7) % 100:03d}?release={tag}" for i, tag in enumerate(tags)
        ]
        first = [timed_get(registry.port, path) for path in paths]
        again = [timed_get(registry.port, path) for path in paths]
        status, headers, body = request(registry.port, "GET", paths[-1])
    config = work / "first-request.json"
    config.write_text(
        json.dumps(
            {
                "bodies": {tags[-1]: {"body": body.decode(), "etag": headers["ETag"].strip('"')}},
                "templates": {},
                "partials": {},
            }
        )
    )
    with running(gunicorn("baseline", server_env(args, BENCH_BASELINE=str(config)), BASELINE_APP)) as (baseline,):
        drive(baseline.base + paths[-1], connections=8, seconds=2)
        baseline_ms = [timed_get(baseline.port, paths[-1]) for _ in paths]
    return FirstRequest(first, again, baseline_ms)


@dataclass(frozen=True)
class Memory:
    baseline_mb: float
    steps: list[tuple[str, int, float]]  # (what was touched, definitions loaded so far, worker RSS)


def memory_scenario(args: argparse.Namespace, repo: Path, work: Path) -> Memory:
    """One worker: RSS as it loads more definitions, across 100 releases."""
    env = server_env(args, REGISTRY_REPO=str(repo), REGISTRY_WORKERS="1")
    steps: list[tuple[str, int, float]] = []
    with running(gunicorn("registry", env, REGISTRY_APP)) as (registry,):
        (worker,) = registry.worker_pids()

        def touch(agents: list[tuple[int, int]], releases: range) -> None:
            for minor in releases:
                for usecase, name in agents:
                    status, _, _ = request(
                        registry.port, "GET", f"/v1/agents/usecase_{usecase:03d}/agent_{name:03d}?release=v1.{minor}.0"
                    )
                    assert status == 200, status

        touch([(0, 0)], range(1))
        steps.append(("one agent at one release", 1, rss_mb(worker)))
        touch([(0, 0)], range(100))
        steps.append(("the same agent at all 100 releases", 100, rss_mb(worker)))
        touch([(u, 1) for u in range(10)], range(100))
        steps.append(("10 more agents at all 100 releases", 1_100, rss_mb(worker)))
        touch([(u, 2) for u in range(10, 40)], range(100))
        steps.append(("30 more agents at all 100 releases", 4_100, rss_mb(worker)))
    config = work / "memory.json"
    config.write_text(json.dumps({"bodies": {}, "templates": {}, "partials": {}}))
    with running(
        gunicorn("baseline", server_env(args, BENCH_BASELINE=str(config), REGISTRY_WORKERS="1"), BASELINE_APP)
    ) as (baseline,):
        request(baseline.port, "GET", "/healthz")
        baseline_mb = rss_mb(baseline.worker_pids()[0])
    return Memory(baseline_mb, steps)


# -- Redis (optional) -------------------------------------------------------------

_redis: object | None = None


def redis_env(args: argparse.Namespace) -> dict[str, str]:
    return {"REDIS_URL": args.redis_url} if args.redis_url else {}


def start_redis(work: Path) -> str:
    """A throwaway redis-server, from the test extra's helper."""
    global _redis
    sys.path.insert(0, str(ROOT))
    from tests.support.redis_server import RedisServer

    _redis = RedisServer(work / "redis").start()
    return _redis.url


# -- report -----------------------------------------------------------------------


def machine() -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    memory = next(
        line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal")
    )
    from importlib.metadata import version

    return (
        f"{cpu}, {os.cpu_count()} cores, {int(memory) // 1024 // 1024 + 1} GB; {platform.platform()}; "
        f"Python {platform.python_version()}, Flask {version('flask')}, Jinja {version('jinja2')}, "
        f"gunicorn {version('gunicorn')}; load generator: {available_generator()}"
    )


def print_comparisons(title: str, rows: list[tuple[str, Comparison]], args: argparse.Namespace) -> None:
    print(f"\n### {title}\n")
    print(
        f"{args.connections} connections, {args.seconds:g} s per run, {args.rounds} rounds alternating the servers; "
        "req/s and latency from the median round, ratios the median of the rounds' ratios.\n"
    )
    print(
        "| scenario | baseline req/s | registry req/s | ratio "
        "| baseline p50 / p99 ms | registry p50 / p99 ms | p99 ratio |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, c in rows:
        print(
            f"| {label} | {c.baseline.requests_per_second:,.0f} | {c.registry.requests_per_second:,.0f} | "
            f"{c.throughput_ratio:.2f}x | {c.baseline.p50_ms:.2f} / {c.baseline.p99_ms:.2f} | "
            f"{c.registry.p50_ms:.2f} / {c.registry.p99_ms:.2f} | {c.p99_ratio:.2f}x |"
        )
    print("\nEvery round: registry / baseline req/s (p99 ratio); the baseline's own spread, min-max req/s.\n")
    print("| scenario | " + " | ".join(f"round {n + 1}" for n in range(args.rounds)) + " | baseline spread |")
    print("|---|" + "---:|" * (args.rounds + 1))
    for label, c in rows:
        ratios = [
            f"{r.requests_per_second / b.requests_per_second:.2f}x ({r.p99_ms / b.p99_ms:.2f}x)"
            for b, r in zip(c.baseline_rounds, c.registry_rounds, strict=True)
        ]
        speeds = [b.requests_per_second for b in c.baseline_rounds]
        print(f"| {label} | {' | '.join(ratios)} | {min(speeds):,.0f}-{max(speeds):,.0f} |")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="a,b,c,d,e,servers", help="comma-separated scenarios (a,b,c,d,e,servers)")
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--workers", type=int, default=int(os.environ.get("REGISTRY_WORKERS", 2)))
    parser.add_argument("--threads", type=int, default=int(os.environ.get("REGISTRY_THREADS", 4)))
    parser.add_argument("--redis", action="store_true", help="run (a)-(c) with a throwaway Redis (REDIS_URL)")
    parser.add_argument(
        "--conf", type=Path, default=ROOT / "gunicorn.conf.py", help="gunicorn configuration for (a)-(c), both servers"
    )
    args = parser.parse_args()
    args.only = set(args.only.split(","))
    args.redis_url = None

    print(f"Machine: {machine()}")
    worker_class = os.environ.get("REGISTRY_WORKER_CLASS", "gevent")
    print(
        f"Server: gunicorn -c {args.conf.name}, REGISTRY_WORKER_CLASS={worker_class}, "
        f"REGISTRY_WORKERS={args.workers}, REGISTRY_THREADS={args.threads}"
    )
    with tempfile.TemporaryDirectory(prefix="registry-bench-") as scratch:
        work = Path(scratch)
        try:
            if args.redis:
                args.redis_url = start_redis(work)
                print(f"Redis: {args.redis_url}")
            if args.only & {"a", "b", "c"}:
                rows = [(c.scenario, c) for c in warm_scenarios(args, work)]
                print_comparisons("Warm requests", rows, args)
            if "servers" in args.only:
                print_comparisons("Server candidates, scenario (a)", servers_scenario(args, work), args)
            if args.only & {"d", "e"}:
                started = time.perf_counter()
                repo = large_library(work / "large")
                print(f"\nBuilt a library of 5,000 agents at 100 tags in {time.perf_counter() - started:.1f} s")
            if "d" in args.only:
                first = first_request_scenario(args, work, repo)
                print("\n### (d) First request at a release never seen (5,000 agents, 100 tags)\n")
                print("One request at a time, 99 releases; milliseconds, client-side, new connection each.\n")
                print("| | median | p90 | max |")
                print("|---|---:|---:|---:|")
                for label, values in (
                    ("registry, first request at the release", first.registry_ms),
                    ("registry, the same request again", first.registry_again_ms),
                    ("baseline, same bytes", first.baseline_ms),
                ):
                    ordered = sorted(values)
                    print(
                        f"| {label} | {statistics.median(ordered):.2f} "
                        f"| {ordered[int(len(ordered) * 0.9)]:.2f} | {ordered[-1]:.2f} |"
                    )
                print(
                    "\nRatio of medians, first request / baseline: "
                    f"{statistics.median(first.registry_ms) / statistics.median(first.baseline_ms):.1f}x"
                )
            if "e" in args.only:
                memory = memory_scenario(args, repo, work)
                print("\n### (e) Memory of one worker (5,000 agents, 100 tags)\n")
                print(f"Bare Flask worker under the same configuration: {memory.baseline_mb:.1f} MB RSS.\n")
                print("| touched | definitions loaded | worker RSS MB | vs baseline |")
                print("|---|---:|---:|---:|")
                for label, count, mb in memory.steps:
                    print(f"| {label} | {count:,} | {mb:.1f} | {mb / memory.baseline_mb:.2f}x |")
                (_, first_count, first_mb), (_, last_count, last_mb) = memory.steps[1], memory.steps[-1]
                print(
                    f"\nGrowth: {(last_mb - first_mb) * 1024 / (last_count - first_count):.1f} KB per definition loaded"
                )
        finally:
            if _redis is not None:
                _redis.stop()  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
