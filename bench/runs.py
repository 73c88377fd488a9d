"""Durable runs: background tasks per second, what a worker adds to a step,
and how long a task waits after its worker is killed.

Run by hand, from the repository root, with the dev environment (PostgreSQL's
binaries installed, as for the tests):

    .venv/bin/python bench/runs.py                      # both, 3 rounds: about 6 minutes
    .venv/bin/python bench/runs.py --rounds 1 --tasks 100 --only throughput

Every process is real: ``prompt-registry agents serve --no-worker`` answers
the requests, ``prompt-registry agents worker`` processes run the tasks
(``tests/support/agent_workers.py`` starts them), on a SQLite file or a
PostgreSQL server started for the bench (``tests/support/postgres_server.py``).

(1) Throughput. A one-call agent (``support/draft_answer`` of the example
    library) against the scripted model with no latency (``--model
    scripted:FILE``, in each worker's process), as background tasks. Per
    configuration (SQLite with one worker; PostgreSQL with one and with two
    worker processes; 8 tasks at once per worker), each round creates
    ``--tasks`` tasks over HTTP (16 clients) while the workers are stopped
    (SIGSTOP), then lets them go on (SIGCONT): tasks per second from then to
    the last task's completion (its ``updated_at``), and the workers' CPU time
    per task. The baseline, in the same round: ``Executor.step`` of the same
    agent with the same scripted model in this process, one after another,
    each with a fresh journal: what a step costs with no queue, no store and
    no worker. The ratio is a task's share of the drain's wall time (CPU time)
    over a step's. Between the two, ``StepRunner.advance`` in this process on
    each database with no DBOS worker; and, counted with SQLAlchemy's
    events, the transactions and statements of one such step.
(2) Recovery. Two workers on each database; a background task whose second
    model call never answers (the scripted OpenAI-compatible server of the
    tests, which every worker calls); the worker in that call is killed
    (SIGKILL to its process group). Recovery: from the kill to the moment
    the other worker marks the step ``running`` (its ``step`` event in the
    task's event log). The baseline, in the same round: from a task's
    creation to its first step ``running`` on an idle worker, which a
    resumed task also waits for.

Prints Markdown tables, ready for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psutil
from sqlalchemy import create_engine, event, func, select
from sqlalchemy.engine import Connection, Engine

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from registry.cli.run import registry_client  # noqa: E402
from registry.executor import Executor, ScriptedModel  # noqa: E402
from registry.executor.journal import MemoryJournal  # noqa: E402
from registry.protocol.service import ANONYMOUS, Caller, TaskService  # noqa: E402
from registry.protocol.store import TaskStore  # noqa: E402
from registry.protocol.tables import task_events, tasks  # noqa: E402
from registry.runs.engine import Next, RunEngine  # noqa: E402
from registry.settings import Settings  # noqa: E402
from registry.store.example import build_example_repository  # noqa: E402
from tests.support.agent_workers import (  # noqa: E402
    AgentWorker,
    Fleet,
    Rig,
    act,
    answer,
    call,
    create_task,
    fleet,
    pipeline_inputs,
    rig,
    wait_for_status,
    wait_until,
)
from tests.support.postgres_server import PostgresServer  # noqa: E402
from tests.support.waits import LATE  # noqa: E402

AGENT = "support/draft_answer"
RELEASE = "v1.1.0"
INPUTS = {"question": "How do I change my e-mail address?"}
REPLY = "Open Settings, then Profile, and change it there."
CLIENTS = 16
KILLED_PIPELINE_BASE = 6100
"""The recovery rounds' tasks whose worker is killed: a pipeline each."""
PICKUP_PIPELINE_BASE = 5000
"""The recovery rounds' baseline tasks, answered at once: a pipeline each."""


@dataclass(frozen=True)
class Drain:
    tasks: int
    seconds: float
    cpu_seconds: float
    create_seconds: float

    @property
    def per_second(self) -> float:
        return self.tasks / self.seconds


# --- (1) throughput -------------------------------------------------------------------------


def executor_steps(repository: Path, script: Path, count: int) -> tuple[float, float]:
    """``count`` ``Executor.step`` calls of the agent in this process, one
    after another: (wall seconds, CPU seconds) per step."""
    client = registry_client(argparse.Namespace(registry=None), lambda: Settings(repo=str(repository)))
    executor = Executor(model=ScriptedModel.from_file(script), registry=client)
    try:
        usecase, name = AGENT.split("/")
        agent = client.get(usecase, name, release=RELEASE)
        for _ in range(10):  # warm: templates compiled, the loop started
            executor.step(agent, INPUTS, journal=MemoryJournal())
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(count):
            result = executor.step(agent, INPUTS, journal=MemoryJournal())
            assert result.is_last and result.output == REPLY, result
        return (time.perf_counter() - wall) / count, (time.process_time() - cpu) / count
    finally:
        executor.close()
        client.close()


@dataclass
class Configuration:
    label: str
    database_url: str
    fleet: Fleet
    front_base: str
    workers: list[AgentWorker]
    engine: Engine

    def drain(self, count: int) -> Drain:
        """``count`` tasks created while the workers are stopped, then run."""
        self._stop_workers()
        try:
            started = time.perf_counter()
            with ThreadPoolExecutor(max_workers=CLIENTS) as pool:
                created = list(pool.map(lambda _: self._create(), range(count)))
            create_seconds = time.perf_counter() - started
        finally:
            cpu_before = self._cpu()
            went_on = datetime.now(timezone.utc)
            for worker in self.workers:
                os.killpg(worker.pid, signal.SIGCONT)
        ids = set(created)
        wait_until(lambda: self._completed(ids) == count, f"{count} tasks completed", timeout=600)
        with self.engine.connect() as db:
            last = db.execute(select(func.max(tasks.c.updated_at)).where(tasks.c.task_id.in_(ids))).scalar_one()
        last = last.replace(tzinfo=timezone.utc) if last.tzinfo is None else last
        return Drain(count, (last - went_on).total_seconds(), self._cpu() - cpu_before, create_seconds)

    def _create(self) -> str:
        status, task = call(self.front_base, "POST", "/ap/v1/agent/tasks", {
            "input": INPUTS["question"], "additional_input": {"agent": AGENT, "release": RELEASE, "mode": "background"}
        })  # fmt: skip
        assert status == 200, task
        return str(task["task_id"])

    def _completed(self, ids: set[str]) -> int:
        with self.engine.connect() as db:
            query = select(func.count()).where(tasks.c.task_id.in_(ids), tasks.c.status == "completed")
            return int(db.execute(query).scalar_one())

    def _cpu(self) -> float:
        total = 0.0
        for worker in self.workers:
            times = psutil.Process(worker.pid).cpu_times()
            total += times.user + times.system
        return total

    def _stop_workers(self) -> None:
        """SIGSTOP every worker, at a moment none holds SQLite's write lock
        (the front's inserts would wait for it)."""
        while True:
            for worker in self.workers:
                os.killpg(worker.pid, signal.SIGSTOP)
            if not self.database_url.startswith("sqlite") or _writable(self.database_url):
                return
            for worker in self.workers:
                os.killpg(worker.pid, signal.SIGCONT)
            time.sleep(0.05)


def _writable(database_url: str) -> bool:
    connection = sqlite3.connect(database_url.removeprefix("sqlite:///"), timeout=0.2, isolation_level=None)
    try:
        connection.execute("BEGIN IMMEDIATE")
        connection.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        connection.close()


@contextmanager
def configuration(
    label: str, directory: Path, database_url: str, repository: Path, workers: int
) -> Iterator[Configuration]:
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "replies.yml"
    script.write_text(f"- content: '{REPLY}'\n  repeat: true\n", encoding="utf-8")
    options = ["--repo", str(repository), "--database-url", database_url, "--model", f"scripted:{script}"]
    with fleet(directory / "logs", cwd=directory) as made:
        front = made.server("--no-worker", *options)
        started = [made.worker(*options, "--concurrency", "8") for _ in range(workers)]
        made.start(front, *started)
        engine = create_engine(database_url)
        try:
            yield Configuration(label, database_url, made, front.base, started, engine)
        finally:
            for worker in started:  # a stopped process takes no SIGTERM
                os.killpg(worker.pid, signal.SIGCONT)
            engine.dispose()


def throughput(args: argparse.Namespace, postgres: PostgresServer, directory: Path) -> None:
    repository = build_example_repository(directory / "library")
    script = directory / "baseline.yml"
    script.write_text(f"- content: '{REPLY}'\n  repeat: true\n", encoding="utf-8")
    with ExitStack() as stack:
        configurations = [
            stack.enter_context(configuration(label, directory / key, url, repository, workers))
            for label, key, url, workers in [
                ("SQLite, 1 worker", "sqlite", f"sqlite:///{directory / 'sqlite' / 'tasks.db'}", 1),
                ("PostgreSQL, 1 worker", "pg1", postgres.create_database(), 1),
                ("PostgreSQL, 2 workers", "pg2", postgres.create_database(), 2),
            ]
        ]
        for made in configurations:  # warm: each process's first tasks import and compile
            made.drain(20)
        in_process: dict[str, Callable[[int], str]] = {
            "StepRunner.advance, in process, SQLite": lambda n: f"sqlite:///{directory / f'steps-{n}.db'}",
            "StepRunner.advance, in process, PostgreSQL": lambda n: postgres.create_database(),
        }
        rows: list[list[str]] = []
        works: dict[str, StoreWork] = {}
        ratios: dict[str, list[tuple[float, float]]] = {label: [] for label in in_process}
        ratios.update({made.label: [] for made in configurations})
        for number in range(1, args.rounds + 1):
            step_wall, step_cpu = executor_steps(repository, script, args.tasks)
            rows.append([str(number), "Executor.step, in process", f"{1 / step_wall:.0f}/s",
                         f"{step_wall * 1e3:.2f} ms", f"{step_cpu * 1e3:.2f} ms", "1.00x", "1.00x", ""])  # fmt: skip
            measured = []
            for label, url in in_process.items():
                wall, cpu, works[label] = service_steps(repository, script, url(number), args.tasks)
                measured.append((label, wall, cpu, ""))
            for made in configurations:
                drained = made.drain(args.tasks)
                measured.append((made.label, drained.seconds / drained.tasks, drained.cpu_seconds / drained.tasks,
                                 f"{drained.tasks / drained.create_seconds:.0f}/s"))  # fmt: skip
            for label, wall, cpu, created in measured:
                ratios[label].append((wall / step_wall, cpu / step_cpu))
                rows.append([str(number), label, f"{1 / wall:.1f}/s", f"{wall * 1e3:.1f} ms", f"{cpu * 1e3:.1f} ms",
                             f"{wall / step_wall:.1f}x", f"{cpu / step_cpu:.1f}x", created])  # fmt: skip
    _print_throughput(args, rows, ratios)
    print("\nthe task store's work in one step of a one-call task (StepRunner.advance)")
    print("| runs on | transactions | statements | of which event log inserts |")
    print("|---|---|---|---|")
    for label, work in works.items():
        print(f"| {label} | {work.transactions} | {work.statements} | {work.log_inserts} |")


def _print_throughput(
    args: argparse.Namespace, rows: list[list[str]], ratios: dict[str, list[tuple[float, float]]]
) -> None:
    print(f"\n(1) background tasks of {AGENT}, {args.tasks} a round, scripted model with no latency")
    print("| round | runs on | tasks per second | wall per task | CPU per task | wall ratio | CPU ratio |"
          " created per second |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    for label, measured in ratios.items():
        walls, cpus = [r[0] for r in measured], [r[1] for r in measured]
        print(f"| median | {label} | | | | **{statistics.median(walls):.1f}x** | {statistics.median(cpus):.1f}x | |")


@dataclass(frozen=True)
class StoreWork:
    """What one step asks of the task store's database, counted with SQLAlchemy's events."""

    transactions: int
    statements: int
    """BEGIN (and COMMIT) apart."""
    log_inserts: int
    """Of those, the inserts into the task's event log."""


@contextmanager
def counting() -> Iterator[list[str]]:
    """Every statement the engines of this process run meanwhile, from any
    thread (the step's, the executor's, the event log's), each transaction
    as a ``BEGIN`` of its own."""
    seen: list[str] = []

    def begun(_connection: Connection) -> None:
        seen.append("BEGIN")

    def executed(_connection: Connection, _cursor: Any, statement: str, *_args: Any) -> None:
        if not statement.startswith("BEGIN"):  # SQLite's BEGIN IMMEDIATE, already counted
            seen.append(statement)

    event.listen(Engine, "begin", begun)
    event.listen(Engine, "before_cursor_execute", executed)
    try:
        yield seen
    finally:
        event.remove(Engine, "begin", begun)
        event.remove(Engine, "before_cursor_execute", executed)


def service_steps(repository: Path, script: Path, database_url: str, count: int) -> tuple[float, float, StoreWork]:
    """``StepRunner.advance`` of ``count`` queued background tasks in this
    process, one after another, with no DBOS worker: what the service's own
    step (the task store, the journal, the event log, the answer's artifact)
    costs around ``Executor.step``. (wall seconds, CPU seconds) per step,
    and the database work of one of them."""
    client = registry_client(argparse.Namespace(registry=None), lambda: Settings(repo=str(repository)))
    executor = Executor(model=ScriptedModel.from_file(script), registry=client)
    store = TaskStore(database_url)
    service = TaskService(store, executor, client, RunEngine(database_url, worker=False))
    service.start()
    try:
        body = {"input": INPUTS["question"], "additional_input": {"agent": AGENT, "release": RELEASE,
                "mode": "background"}}  # fmt: skip
        task_ids = [service.create_task(Caller(ANONYMOUS), body).task_id for _ in range(count + 11)]
        for task_id in task_ids[:10]:  # warm
            service.runner.advance(task_id, 1, 0, "bench", 0)
        with counting() as seen:
            service.runner.advance(task_ids[10], 1, 0, "bench", 0)
        work = StoreWork(seen.count("BEGIN"), len(seen) - seen.count("BEGIN"),
                         sum(1 for s in seen if s.startswith("INSERT INTO task_events")))  # fmt: skip
        wall, cpu = time.perf_counter(), time.process_time()
        for task_id in task_ids[11:]:
            assert service.runner.advance(task_id, 1, 0, "bench", 0) is Next.STOP
        return (time.perf_counter() - wall) / count, (time.process_time() - cpu) / count, work
    finally:
        service.close()
        store.close()
        executor.close()
        client.close()


# --- (2) recovery ---------------------------------------------------------------------------


def _recovery_replies(rounds: int) -> list[dict[str, Any]]:
    """Per round, a task of its own pipeline whose second call never answers
    until it is made again; and tasks of pipelines 5000... answered at once."""
    replies: list[dict[str, Any]] = []
    for number in range(rounds):
        pipeline = KILLED_PIPELINE_BASE + number
        replies += [
            {"when": f"^Pipeline {pipeline} failed", "content": act("list_jobs", pipeline_id=pipeline)},
            {"when": f'"pipeline": {pipeline}\\b', "content": answer("too late"), "delay": LATE},
            {"when": f'"pipeline": {pipeline}\\b', "content": answer("recovered")},
        ]
    return [*replies, {"when": "^Pipeline 5\\d{3} failed", "content": answer("at once"), "repeat": True}]


def recovery_rounds(directory: Path, database_url: str, rounds: int) -> list[tuple[float, float]]:
    """(pickup seconds, recovery seconds) per round; a worker started anew after each kill."""
    measured = []
    with rig(directory, database_url, _recovery_replies(rounds)) as made:
        engine = create_engine(database_url)
        try:
            for number in range(rounds):
                made.replace_dead_workers(2)
                pickup = _pickup(made.front.base, engine, PICKUP_PIPELINE_BASE + number)
                pipeline = KILLED_PIPELINE_BASE + number
                task_id = create_task(made.front.base, pipeline_inputs(pipeline))["task_id"]
                _wait_for_calls(made, pipeline, 2)
                step_id, worker, _ = _step_events(engine, task_id)[-1]
                killed = made.worker_with_id(worker)
                killed_at = datetime.now(timezone.utc)
                killed.kill()
                wait_for_status(made.front.base, task_id, {"completed"})
                resumed = next(at for step, by, at in _step_events(engine, task_id)
                               if step == step_id and by != killed.worker_id)  # fmt: skip
                measured.append((pickup, (resumed - killed_at).total_seconds()))
        finally:
            engine.dispose()
    return measured


def _wait_for_calls(made: Rig, pipeline: int, count: int) -> None:
    wait_until(lambda: len(made.model_calls(pipeline)) >= count, f"model call {count} of pipeline {pipeline}")


def _pickup(base: str, engine: Engine, pipeline: int) -> float:
    """Seconds from a task's creation (its POST answered) to its first step running."""
    created_at = datetime.now(timezone.utc)
    task_id = create_task(base, pipeline_inputs(pipeline))["task_id"]
    wait_for_status(base, task_id, {"completed"})
    first = _step_events(engine, task_id)[0][2]
    return (first - created_at).total_seconds()


def _step_events(engine: Engine, task_id: str) -> list[tuple[str, str, datetime]]:
    """(step id, worker, when) of each ``step running`` entry of the task's event log."""
    with engine.connect() as db:
        rows = db.execute(
            select(task_events.c.data, task_events.c.created_at)
            .where(task_events.c.task_id == task_id, task_events.c.kind == "step")
            .order_by(task_events.c.seq)
        ).all()
    return [
        (row.data["step_id"], row.data["worker"], _utc(row.created_at))
        for row in rows
        if row.data["status"] == "running"
    ]


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value


def recovery(args: argparse.Namespace, postgres: PostgresServer, directory: Path) -> None:
    print("\n(2) recovery after kill -9 of the worker in a model call, two workers")
    print("| round | database | pickup of a new task (baseline) | kill → running elsewhere | ratio |")
    print("|---|---|---|---|---|")
    for label, url in [
        ("SQLite", f"sqlite:///{directory / 'recovery-sqlite.db'}"),
        ("PostgreSQL", postgres.create_database()),
    ]:
        measured = recovery_rounds(directory / label, url, args.rounds)
        for number, (pickup, recovered) in enumerate(measured, 1):
            print(f"| {number} | {label} | {pickup * 1e3:.0f} ms | {recovered * 1e3:.0f} ms | "
                  f"{recovered / pickup:.1f}x |")  # fmt: skip
        print(f"| median | {label} | {statistics.median(p for p, _ in measured) * 1e3:.0f} ms | "
              f"**{statistics.median(r for _, r in measured) * 1e3:.0f} ms** | |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=200, help="tasks per throughput measurement")
    parser.add_argument("--only", choices=("throughput", "recovery"))
    args = parser.parse_args()
    print(f"# {platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} cores,"
          f" load average {os.getloadavg()[0]:.2f}")  # fmt: skip
    measurements: dict[str, Callable[[argparse.Namespace, PostgresServer, Path], None]] = {
        "throughput": throughput,
        "recovery": recovery,
    }
    postgres = PostgresServer().start()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-runs-") as directory:
            for name, measure in measurements.items():
                if args.only in (None, name):
                    measure(args, postgres, Path(directory))
    finally:
        postgres.stop()
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
