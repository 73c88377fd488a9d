"""Worker kill: throughput, second by second, before and after a worker dies under load.

Run by hand, from the repository root, with the dev environment:

    .venv/bin/python bench/worker_kill.py                # both configurations, about 1 minute
    .venv/bin/python bench/worker_kill.py --clients 16 --before 5 --after 15

The registry runs as ``gunicorn -c gunicorn.conf.py`` (REGISTRY_WORKERS=2, the
worker class from REGISTRY_WORKER_CLASS, gevent by default) on loopback.
``--clients`` threads of this process ask for one definition over kept-alive
connections, reconnecting at once when a connection is closed or lost. After
``--before`` seconds the worker holding the most connections is killed by PID
(SIGKILL); gunicorn starts a replacement. Each second reports the answers
received and, per worker, the share of the workers' CPU time it used and the
connections it held: the share says which worker is doing the work.

Two configurations, one after the other:
  kept       connections are kept for as long as the client keeps them
             (a configuration that turns off the registry's pre_request hook)
  closed     the registry's own configuration: a connection is closed after
             registry.web.server.REQUESTS_PER_CONNECTION requests

Prints Markdown tables, ready for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.make_library import small_library
from bench.serving import AGENT, REGISTRY_APP, ROOT, gunicorn, machine
from tests.support.servers import established_connections, keep_alive_load, live_workers

USECASE, NAME = AGENT
GET_PATH = f"/v1/agents/{USECASE}/{NAME}?release=v1.2.0"

KEEP_CONNECTIONS_CONF = f"""\
exec(open({str(ROOT / "gunicorn.conf.py")!r}).read())


def pre_request(worker, req):
    pass
"""


def _cpu_seconds(worker: psutil.Process) -> float:
    try:
        times = worker.cpu_times()
    except psutil.NoSuchProcess:
        return 0.0
    return float(times.user + times.system)


def run(label: str, env: dict[str, str], conf: Path, args: argparse.Namespace) -> list[tuple[int, str]]:
    """One run: per second, answers and each worker's CPU share and connections."""
    server = gunicorn(label, env, REGISTRY_APP, conf=conf).start()
    rows: list[tuple[int, str]] = []
    try:
        assert server.process is not None
        master = psutil.Process(server.process.pid)
        while len(live_workers(master)) < 2:
            time.sleep(0.1)
        with keep_alive_load(server.port, GET_PATH, clients=args.clients) as answered:
            time.sleep(1)  # connections made, workers warm
            cpu = {w.pid: _cpu_seconds(w) for w in live_workers(master)}
            count = sum(answered)
            for second in range(1, args.before + args.after + 1):
                time.sleep(1)
                workers = live_workers(master)
                used = {w.pid: _cpu_seconds(w) - cpu.get(w.pid, 0.0) for w in workers}
                total = sum(used.values()) or 1.0
                shares = ", ".join(
                    f"{w.pid}: {used[w.pid] / total:.0%} ({established_connections(w, server.port)} conn)"
                    for w in workers
                )
                rows.append((sum(answered) - count, shares))
                count = sum(answered)
                cpu = {w.pid: _cpu_seconds(w) for w in workers}
                if second == args.before:
                    busiest = max(workers, key=lambda w: established_connections(w, server.port))
                    os.kill(busiest.pid, signal.SIGKILL)
                    rows[-1] = (rows[-1][0], rows[-1][1] + f"; killed {busiest.pid}")
    finally:
        server.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--before", type=int, default=5, help="seconds of load before the kill")
    parser.add_argument("--after", type=int, default=15, help="seconds of load after the kill")
    args = parser.parse_args()

    print(f"Machine: {machine()}")
    with tempfile.TemporaryDirectory(prefix="registry-bench-") as scratch:
        work = Path(scratch)
        repo = small_library(work / "small")
        kept_conf = work / "kept.conf.py"
        kept_conf.write_text(KEEP_CONNECTIONS_CONF)
        env = {"REGISTRY_REPO": str(repo), "REGISTRY_WORKERS": "2", "REGISTRY_LOG_LEVEL": "warning"}
        env["REGISTRY_ACCESS_LOG"] = "0"
        worker_class = os.environ.get("REGISTRY_WORKER_CLASS", "gevent")
        for label, conf in (("kept", kept_conf), ("closed", ROOT / "gunicorn.conf.py")):
            rows = run(label, env, conf, args)
            before = statistics.mean(answers for answers, _ in rows[: args.before])
            after = rows[args.before :]
            print(f"\n### {label}: {args.clients} kept-alive clients, {worker_class} workers\n")
            print(
                f"Before the kill {before:,.0f} answers/s; seconds 1-5 after it "
                f"{statistics.mean(a for a, _ in after[:5]) / before:.0%} of that, "
                f"seconds 6-{args.after} {statistics.mean(a for a, _ in after[5:]) / before:.0%}.\n"
            )
            print("| second | answers | workers: share of CPU (connections held) |")
            print("|---:|---:|---|")
            for second, (answers, shares) in enumerate(rows, start=1):
                print(f"| {second - args.before:+d} | {answers:,} | {shares} |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
