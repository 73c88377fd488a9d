"""``prompt-registry agents serve`` and ``agents worker`` as real processes,
for the durable-run tests (tests/integration/test_runs_*.py) and
bench/runs.py.

Each process runs in a process group of its own (so that ``kill -9``
reaches everything it started), writes its output to a log file, and is
stopped by its PID: SIGTERM to the group, then SIGKILL. A worker is ready
once it has logged its id (``worker <id>: tasks in ...``), which it does
after DBOS has launched and listens to the queue; a server once
``/healthz`` answers.

    with agent_processes(server("--no-worker", ...), worker(...), worker(...)) as (front, one, two):
        status, task = call(front.base, "POST", "/ap/v1/agent/tasks", {...})
        wait_for_status(front.base, task["task_id"], {"completed"})
        one.kill()

``rig`` starts what the durable-run tests share: the example repository,
the scripted OpenAI-compatible model server (one for every worker, so that
it sees each model call whichever worker makes it), a tools module that
logs each call with the PID of the worker that made it, a server that only
answers requests and two workers. Its agent is ``assistant/react_text``:
replies are keyed by the pipeline a task names (``Pipeline 7 failed.``)
and by what its tools answered (``"pipeline": 7``, ``job 88:``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from registry.protocol.records import TaskEvent
from registry.protocol.store import TaskStore
from registry.store.example import build_example_repository
from tests.support.openai_server import ScriptedModelServer
from tests.support.ports import free_port
from tests.support.servers import clean_environment
from tests.support.waits import LATE

CLI = str(Path(sys.executable).parent / "prompt-registry")
STARTUP_SECONDS = 90.0
"""Long enough for a process's imports, git and DBOS's launch on a loaded machine."""
WAIT_SECONDS = 120.0
"""How long a test waits for a task to reach a state before it fails (not a
measure: a bound, so that a task that never gets there fails the test
rather than hanging the run)."""
_WORKER_LINE = re.compile(r"worker (\S+): tasks in ")


class AgentProcess:
    """``prompt-registry agents COMMAND ARGS`` in ``cwd``, its output in ``log``."""

    def __init__(self, command: str, args: Sequence[str], *, cwd: Path, log: Path, env: dict[str, str]) -> None:
        self.command = command
        self.args = list(args)
        self.cwd = cwd
        self.log = log
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError(f"agents {self.command} is not started")
        return self.process.pid

    def start(self) -> AgentProcess:
        with self.log.open("ab") as output:
            self.process = subprocess.Popen(
                [CLI, "agents", self.command, *self.args],
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_SECONDS
        while not self.ready():
            if self.process is None or self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"agents {self.command} did not start: {self.output()[-2000:]}")
            time.sleep(0.1)

    def ready(self) -> bool:
        raise NotImplementedError

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace") if self.log.exists() else ""

    def kill(self) -> None:
        """``kill -9`` of the process and everything it started."""
        self._signal_group(signal.SIGKILL)
        if self.process is not None:
            self.process.wait()

    def terminate(self) -> None:
        """SIGTERM to the group, not waiting for it to end."""
        if self.process is not None and self.process.poll() is None:
            self._signal_group(signal.SIGTERM)

    def stop(self) -> None:
        """SIGTERM to the group, then SIGKILL if it has not ended within 30 s."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        self._signal_group(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()

    def _signal_group(self, signum: int) -> None:
        try:
            os.killpg(self.pid, signum)
        except ProcessLookupError:
            pass  # the whole group is gone already


class AgentServer(AgentProcess):
    """``agents serve`` on a free port."""

    def __init__(self, args: Sequence[str], *, cwd: Path, log: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        super().__init__("serve", ["--port", str(self.port), *args], cwd=cwd, log=log, env=env)
        self.base = f"http://127.0.0.1:{self.port}"

    def ready(self) -> bool:
        try:
            urllib.request.urlopen(self.base + "/healthz", timeout=1).close()
        except OSError:
            return False
        return True


class AgentWorker(AgentProcess):
    """``agents worker``; ``worker_id`` once ready: its DBOS executor id, which
    steps and the task event log name."""

    def __init__(self, args: Sequence[str], *, cwd: Path, log: Path, env: dict[str, str]) -> None:
        super().__init__("worker", args, cwd=cwd, log=log, env=env)
        self.worker_id = ""

    def ready(self) -> bool:
        found = _WORKER_LINE.search(self.output())
        if found is None:
            return False
        self.worker_id = found.group(1)
        return True


class Fleet:
    """Servers and workers over one database, started together; their logs in ``directory``."""

    def __init__(self, directory: Path, *, cwd: Path, env: dict[str, str] | None = None) -> None:
        self.directory = directory
        self.cwd = cwd
        self.env = {**clean_environment(), **(env or {})}
        self.processes: list[AgentProcess] = []

    def server(self, *args: str) -> AgentServer:
        process = AgentServer(args, cwd=self.cwd, log=self._log("serve"), env=self.env)
        self.processes.append(process)
        return process

    def worker(self, *args: str) -> AgentWorker:
        process = AgentWorker(args, cwd=self.cwd, log=self._log("worker"), env=self.env)
        self.processes.append(process)
        return process

    def start(self, *processes: AgentProcess) -> None:
        """Start them all at once, then wait for each to be ready."""
        for process in processes:
            process.start()
        for process in processes:
            process.wait_ready()

    def stop(self) -> None:
        """Stop them all: SIGTERM to each at once, then wait for each."""
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            process.stop()

    def _log(self, command: str) -> Path:
        return self.directory / f"{command}-{len(self.processes) + 1}.log"


@contextmanager
def fleet(directory: Path, *, cwd: Path, env: dict[str, str] | None = None) -> Iterator[Fleet]:
    """A ``Fleet`` whose processes are all stopped when the block ends."""
    directory.mkdir(parents=True, exist_ok=True)
    processes = Fleet(directory, cwd=cwd, env=env)
    with ExitStack() as stack:
        stack.callback(processes.stop)
        yield processes


def call(
    base: str,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    *,
    token: str | None = None,
    timeout: float = 60,
) -> tuple[int, Any]:
    """One request to the Agent Protocol service: its status and its JSON body."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def create_task(base: str, inputs: Mapping[str, Any], *, agent: str = "", token: str | None = None) -> dict[str, Any]:
    """A background task of ``agent`` (default ``AGENT``) with ``inputs``; fails unless created."""
    extra = {"agent": agent or AGENT, "mode": "background", "inputs": dict(inputs)}
    status, task = call(base, "POST", "/ap/v1/agent/tasks", {"additional_input": extra}, token=token)
    assert status == 200, task
    return dict(task)


def wait_for_status(
    base: str, task_id: str, states: Collection[str], *, token: str | None = None, timeout: float = WAIT_SECONDS
) -> dict[str, Any]:
    """The task once its status is one of ``states``; fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        status, task = call(base, "GET", f"/ap/v1/agent/tasks/{task_id}", token=token)
        assert status == 200, task
        if task["status"] in states:
            return dict(task)
        assert time.monotonic() < deadline, f"task {task_id} is still {task['status']}, not {sorted(states)}"
        time.sleep(0.05)


def steps_of(base: str, task_id: str, *, token: str | None = None) -> list[dict[str, Any]]:
    """Every step of the task, by number."""
    status, page = call(base, "GET", f"/ap/v1/agent/tasks/{task_id}/steps?page_size=100", token=token)
    assert status == 200, page
    return list(page["steps"])


def task_events(database_url: str, *task_ids: str) -> list[TaskEvent]:
    """The event logs of the tasks, one after the other, read from the
    database the processes share."""
    store = TaskStore(database_url)
    try:
        return [event for task_id in task_ids for event in store.events_after(task_id, 0, limit=10_000)]
    finally:
        store.close()


def step_workers(events: Sequence[TaskEvent]) -> list[tuple[str, str, str]]:
    """(step id, status, worker) of each ``step`` entry of an event log, in order."""
    return [(e.data["step_id"], e.data["status"], e.data["worker"]) for e in events if e.kind == "step"]


def wait_until(predicate: Any, what: str, *, timeout: float = WAIT_SECONDS) -> None:
    """Return once ``predicate()`` is true; fails after ``timeout`` seconds, saying ``what`` never happened."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} never happened"
        time.sleep(0.02)


AGENT = "assistant/react_text"
SLOW_PIPELINE = 999
"""``list_jobs`` of this pipeline takes ``LATE`` seconds: a worker killed in it is killed mid-tool-call."""
TOOLS_MODULE = f"""\
import os
import time


def _log(tool, argument):
    with open("tool_calls.log", "a") as log:
        log.write(f"{{os.getpid()}} {{tool}} {{argument}}\\n")


def list_jobs(pipeline_id):
    _log("list_jobs", pipeline_id)
    if pipeline_id == {SLOW_PIPELINE}:
        time.sleep({LATE})
    return [{{"id": 88, "status": "failed", "pipeline": pipeline_id}}]


def job_log(job_id, lines=100):
    _log("job_log", job_id)
    return f"job {{job_id}}: out of memory"


TOOLS = {{"list_jobs": list_jobs, "job_log": job_log}}
"""


def act(tool: str, **arguments: Any) -> str:
    """A ReAct reply calling ``tool``."""
    return f"Thought: I need to look.\nAction: {tool}\nAction Input: {json.dumps(arguments)}"


def answer(text: str) -> str:
    """A ReAct reply ending the run with ``text``."""
    return f"Thought: I know now.\nFinal Answer: {text}"


def pipeline_inputs(pipeline: int, question: str = "Why?") -> dict[str, Any]:
    return {"pipeline_id": pipeline, "question": question}


@dataclass(frozen=True)
class ToolCall:
    pid: int
    tool: str
    argument: int


@dataclass
class Rig:
    """A front server (``--no-worker``), workers, the model server and the
    tools, over one database; ``options`` are what every process was given."""

    directory: Path
    database_url: str
    model: ScriptedModelServer
    fleet: Fleet
    front: AgentServer
    workers: list[AgentWorker]
    options: list[str]

    def start_worker(self) -> AgentWorker:
        worker = self.fleet.worker(*self.options)
        self.fleet.start(worker)
        self.workers.append(worker)
        return worker

    def replace_dead_workers(self, count: int = 2) -> list[AgentWorker]:
        """The live workers, started anew up to ``count``."""
        self.workers = [w for w in self.workers if w.process is not None and w.process.poll() is None]
        started = [self.fleet.worker(*self.options) for _ in range(count - len(self.workers))]
        self.fleet.start(*started)
        self.workers.extend(started)
        return self.workers

    def worker_with_id(self, worker_id: str) -> AgentWorker:
        [found] = [w for w in self.workers if w.worker_id == worker_id]
        return found

    def worker_with_pid(self, pid: int) -> AgentWorker:
        [found] = [w for w in self.workers if w.pid == pid]
        return found

    def tool_calls(self) -> list[ToolCall]:
        """Every tool call the workers made, in order."""
        log = self.directory / "tool_calls.log"
        if not log.exists():
            return []
        calls = []
        for line in log.read_text(encoding="utf-8").splitlines():
            pid, tool, argument = line.split()
            calls.append(ToolCall(int(pid), tool, int(argument)))
        return calls

    def model_calls(self, pipeline: int) -> list[list[dict[str, Any]]]:
        """The messages of every model call made for the task of ``pipeline``, in order."""
        marker = re.compile(rf"^Pipeline {pipeline} failed\.")
        found = []
        for body in self.model.requests():
            messages = body["messages"]
            if any(m["role"] == "user" and marker.match(str(m["content"])) for m in messages):
                found.append(messages)
        return found


@contextmanager
def rig(
    directory: Path,
    database_url: str,
    replies: Sequence[Mapping[str, Any]],
    *,
    env: dict[str, str] | None = None,
    workers: int = 2,
    options: Sequence[str] = (),
) -> Iterator[Rig]:
    """A ``Rig`` over ``database_url`` answering ``replies``, stopped when the block ends."""
    directory.mkdir(parents=True, exist_ok=True)
    repository = build_example_repository(directory / "library")
    (directory / "counted_tools.py").write_text(TOOLS_MODULE, encoding="utf-8")
    with ScriptedModelServer(replies, directory) as model, fleet(directory / "logs", cwd=directory, env=env) as made:
        shared = ["--repo", str(repository), "--database-url", database_url, "--model", model.base_url]
        shared += ["--model-retries", "0", "--tools", "counted_tools:TOOLS", *options]
        front = made.server("--no-worker", *shared)
        started = [made.worker(*shared) for _ in range(workers)]
        made.start(front, *started)
        yield Rig(directory, database_url, model, made, front, started, shared)
