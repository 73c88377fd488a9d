"""Evaluation benchmark: ``prompt-registry eval`` on two releases against a
model that takes 200 ms a reply, and what the eval runner adds to a case.

Run by hand, from the repository root, with the dev environment:

    .venv/bin/python bench/evals.py               # both measurements, about a minute
    .venv/bin/python bench/evals.py --rounds 1    # one round of each (the smoke test's)

Both build a real git repository with two releases, ``v1.0.0`` and
``v1.1.0``, of one leaf agent (``bench/answer``, its prompt changed between
them) and its eval file of 100 cases (a ``contains`` and a
``max_llm_calls`` each), answered by the scripted OpenAI-compatible HTTP
server of the tests (``tests/support/openai_server.py``: its own process,
a thread per connection) through ``OpenAIChatModel`` and the official SDK.

(1) Wall time of ``prompt-registry eval --base v1.0.0 --head v1.1.0 --model
    URL --concurrency 20 --format json -o FILE``, the console script's
    ``main`` called in this process, every reply taking 200 ms at the
    server: 200 runs, 20 in flight, ideally 10 waves of 0.2 s = 2.0 s.
    Target: at most 1.3x that. The baseline, before each: the same 200
    calls with the bare ``openai`` SDK, 20 in flight, on a fresh
    ``AsyncOpenAI`` client: what this machine allows a client at all. Then
    the same command as its own process, as a user runs it: in all (the
    interpreter's start and the imports included), and its runner's part.
    Before each measurement in this process, a full garbage collection:
    otherwise the garbage of the rounds before sets off one in the middle
    of a round (0.2-0.3 s with the SDK loaded, a whole wave), which a
    fresh process does not have.
(2) Per case: ``EvalRunner.run`` (the eval file read from git, a task per
    run, the assertions checked, the records, the gate) against the same
    100 cases through ``Executor.arun`` alone, on the same executor, the
    same agent object and the same server answering at once. One case at a
    time: each then costs what it costs, rather than how two processes
    share two cores. Wall clock and this process's CPU time, which other
    load on a shared machine disturbs less; each round takes turns three
    times. Target: at most 1.1x. The server answering at once is the
    strictest case (the runner's own work per case against the least a run
    can cost); (2b) is the same with each reply taking 10 ms, as from a
    fast local model, for scale.

Rounds interleave the baseline and ours; every round is reported, and the median.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import io
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.provider_rounds import print_rounds  # noqa: E402
from registry.cli.main import main as cli_main  # noqa: E402
from registry.evals.plan import Planned, plan  # noqa: E402
from registry.evals.runner import EvalRunner, RunOptions  # noqa: E402
from registry.evals.sides import Side, open_side  # noqa: E402
from registry.executor import Executor, OpenAIChatModel  # noqa: E402
from registry.serving.wiring import open_service  # noqa: E402
from registry.settings import Settings  # noqa: E402
from tests.conftest import LibraryRepo  # noqa: E402
from tests.support.openai_server import ScriptedModelServer  # noqa: E402

CASES = 100
CONCURRENCY = 20
DELAY = 0.2
ROUNDS = 5
RUNS = 2 * CASES
IDEAL = math.ceil(RUNS / CONCURRENCY) * DELAY
PAIRS = 3
"""Turns each side of (2) takes in a round."""
SMALL_DELAY = 0.01
"""(2b)'s model: a fast local one."""
CLI = Path(sys.executable).parent / "prompt-registry"
AGENT = "bench/answer"
EVAL_FILE = "ai_gateway/evals/bench/answer.yml"
SYSTEM = "You answer support questions in one sentence."
DEFINITION = """\
name: Bench answer
model: {{name: bench-model, params: {{temperature: 0, max_tokens: 50}}}}
prompt_templates:
  system: {system}
  user: "{prefix}: {{{{ question }}}}"
inputs:
  type: object
  required: [question]
  properties:
    question: {{type: string}}
"""
PREFIXES = {"v1.0.0": "Question", "v1.1.0": "Please answer"}
REPLY = "Our office is open 9 to 5 on weekdays."
CASE = '  - {{id: c{n}, inputs: {{question: "{question}"}}, expect: [{{contains: "9 to 5"}}, {{max_llm_calls: 1}}]}}\n'


def question(number: int) -> str:
    return f"When is office {number} open?"


def library(directory: Path) -> LibraryRepo:
    """The two releases of the module's docstring, in ``directory``/library."""
    repo = LibraryRepo(directory / "library")
    cases = "".join(CASE.format(n=n, question=question(n)) for n in range(CASES))
    repo.write(EVAL_FILE, "cases:\n" + cases, under_agents=False)
    for tag, prefix in PREFIXES.items():
        repo.release(tag, {f"{AGENT}.yml": DEFINITION.format(system=SYSTEM, prefix=prefix)})
    return repo


@contextlib.contextmanager
def workspace() -> Iterator[tuple[Path, LibraryRepo]]:
    """A temporary directory holding the library."""
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        yield directory, library(directory)


def _fresh(directory: Path) -> Path:
    """``directory``, made: where a server keeps its script and request log."""
    directory.mkdir()
    return directory


# --- (1) the command, 200 ms a reply ------------------------------------------------------------------


@dataclass(frozen=True)
class CommandRound:
    """Seconds: the bare SDK's 200 calls; the command in this process and
    its runner's part (``EvalRun.seconds``); the command as a process of
    its own and its runner's part."""

    bare: float
    command: float
    runner: float
    process: float
    process_runner: float


def command_rounds(directory: Path, repo: LibraryRepo, rounds: int) -> tuple[float, list[CommandRound]]:
    """The first command's seconds in this process (its imports included), then ``rounds`` rounds."""
    replies = [{"content": REPLY, "delay": DELAY, "repeat": True}]
    with ScriptedModelServer(replies, _fresh(directory / "slow")) as server:
        report = directory / "eval.json"
        argv = [
            "eval", "--repo", str(repo.path), "--base", "v1.0.0", "--head", "v1.1.0", "--model", server.base_url,
            "--api-key", "bench", "--concurrency", str(CONCURRENCY), "--format", "json", "-o", str(report),
        ]  # fmt: skip
        first, _ = _command(argv, report)
        measured = []
        for _ in range(rounds):
            gc.collect()
            bare = asyncio.run(bare_sdk(server.base_url))
            gc.collect()
            command, runner = _command(argv, report)
            process, process_runner = _process(argv, report)
            measured.append(CommandRound(bare, command, runner, process, process_runner))
        requests = len(server.requests())
    assert requests == RUNS * (1 + 3 * rounds), requests  # the first command, then three a round
    return first, measured


def _command(argv: Sequence[str], report: Path) -> tuple[float, float]:
    """Seconds of ``prompt-registry`` with ``argv`` in this process, and of its runner."""
    with contextlib.redirect_stdout(io.StringIO()):
        started = time.perf_counter()
        status = cli_main(argv)
        seconds = time.perf_counter() - started
    return seconds, _runner_seconds(status, report)


def _process(argv: Sequence[str], report: Path) -> tuple[float, float]:
    """Seconds of ``prompt-registry`` with ``argv`` as a process of its own, and of its runner."""
    started = time.perf_counter()
    done = subprocess.run([str(CLI), *argv], capture_output=True, text=True)
    seconds = time.perf_counter() - started
    assert done.returncode == 0, done.stderr
    return seconds, _runner_seconds(done.returncode, report)


def _runner_seconds(status: int, report: Path) -> float:
    """The runner's seconds, from the JSON report of a command that exited with ``status``; every case passed."""
    written = json.loads(report.read_text(encoding="utf-8"))
    assert status == 0, written["gate"]
    (dataset,) = written["datasets"]
    assert dataset["summary"]["base"]["runs_passed"] == dataset["summary"]["head"]["runs_passed"] == CASES
    return float(written["seconds"])


async def bare_sdk(base_url: str) -> float:
    """Seconds of the command's 200 model calls, with the bare SDK, 20 in flight."""
    client = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0)
    slots = asyncio.Semaphore(CONCURRENCY)

    async def call(prefix: str, number: int) -> None:
        async with slots:
            await client.chat.completions.create(
                model="bench-model",
                messages=[
                    {"role": "system", "content": SYSTEM},
                    {"role": "user", "content": f"{prefix}: {question(number)}"},
                ],
                temperature=0,
                max_tokens=50,
            )

    try:
        started = time.perf_counter()
        await asyncio.gather(*(call(prefix, n) for prefix in PREFIXES.values() for n in range(CASES)))
        return time.perf_counter() - started
    finally:
        await client.close()


def startup_seconds() -> float:
    """The interpreter's start and the parser's imports: ``prompt-registry --version``."""
    started = time.perf_counter()
    subprocess.run([str(CLI), "--version"], check=True, capture_output=True)
    return time.perf_counter() - started


# --- (2) per case: the runner against Executor.arun ------------------------------------------------------


@dataclass(frozen=True)
class CaseRound:
    """Seconds for ``PAIRS`` times the 100 cases, wall clock and this process's CPU, of each side."""

    bare: float
    runner: float
    bare_cpu: float
    runner_cpu: float


def case_rounds(directory: Path, repo: LibraryRepo, rounds: int, *, delay: float = 0.0) -> list[CaseRound]:
    """(``Executor.arun`` alone, the runner) for the 100 cases of head, per
    round, each reply taking ``delay`` seconds at the server."""
    replies = [{"content": REPLY, "delay": delay, "repeat": True}]
    settings = Settings(repo=str(repo.path))
    with ScriptedModelServer(replies, _fresh(directory / f"fast{delay}")) as server, open_service(settings) as service:
        head = open_side("head", "v1.1.0", service, directory=None)
        planned = plan(head, None, agents=[AGENT], changed=False)

        async def measure() -> list[CaseRound]:
            model = OpenAIChatModel(base_url=server.base_url, api_key="bench", max_retries=0)
            async with Executor(model=model) as executor:
                await _bare(executor, head, range(5))  # warm: the connection, the compiled templates
                measured = []
                for _ in range(rounds):
                    totals = [0.0] * 4
                    for _ in range(PAIRS):
                        bare = await _timed(_bare(executor, head, range(CASES)))
                        runner = await _timed(_runner(executor, head, planned))
                        totals = [a + b for a, b in zip(totals, (*bare, *runner), strict=True)]
                    measured.append(CaseRound(totals[0], totals[2], totals[1], totals[3]))
                return measured

        return asyncio.run(measure())


async def _timed(work: Any) -> tuple[float, float]:
    """Wall-clock and CPU seconds of awaiting ``work``, after a full garbage collection."""
    gc.collect()
    started, started_cpu = time.perf_counter(), time.process_time()
    await work
    return time.perf_counter() - started, time.process_time() - started_cpu


async def _bare(executor: Executor, head: Side, numbers: range) -> None:
    agent = head.agent(AGENT)
    assert not isinstance(agent, str), agent
    for number in numbers:
        # As the runner calls it: the case's inputs and its (empty) history.
        result = await executor.arun(agent, {"question": question(number)}, history=[])
        assert result.outcome == "completed" and result.output == REPLY, result.error


async def _runner(executor: Executor, head: Side, planned: list[Planned]) -> None:
    result = await EvalRunner(executor, RunOptions(concurrency=1)).run(head, None, planned)
    (dataset,) = result.datasets
    assert len(dataset.cases) == CASES and result.gate.passed, result.gate


# --- the report -----------------------------------------------------------------------------------------


def machine() -> str:
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    return (
        f"# {platform.python_implementation()} {platform.python_version()}, openai {openai.__version__},"
        f" {os.cpu_count()} cores, load average {load}"
    )


def report_command(first: float, startup: float, rounds: list[CommandRound]) -> None:
    columns: list[tuple[str, Callable[[CommandRound], float], Callable[[float], str]]] = [
        ("bare SDK, 200 calls", lambda r: r.bare, _s),
        ("eval", lambda r: r.command, _s),
        ("of which the runner", lambda r: r.runner, _s),
        ("eval / ideal", lambda r: r.command / IDEAL, _x),
        ("eval / bare SDK", lambda r: r.command / r.bare, _x),
        ("as a process: in all", lambda r: r.process, _s),
        ("its runner", lambda r: r.process_runner, _s),
        ("its runner / ideal", lambda r: r.process_runner / IDEAL, _x),
    ]
    print_rounds(
        f"(1) prompt-registry eval, {CASES} cases x 2 releases, --concurrency {CONCURRENCY},"
        f" {DELAY * 1000:.0f} ms a reply: ideal {IDEAL:.1f} s",
        [heading for heading, _, _ in columns],
        [[shown(value(r)) for _, value, shown in columns] for r in rounds],
        [shown(statistics.median(value(r) for r in rounds)) for _, value, shown in columns],
    )
    print(f"\nthe first command in this process, its imports included: {_s(first)}")
    print(f"the interpreter's start and the parser's imports (prompt-registry --version): {_s(startup)}")


def report_cases(title: str, rounds: list[CaseRound]) -> None:
    print_rounds(
        title,
        ("Executor.arun", "EvalRunner", "ratio", "CPU: Executor.arun", "CPU: EvalRunner", "CPU ratio"),
        [
            (_per_case(r.bare), _per_case(r.runner), _x(r.runner / r.bare))
            + (_per_case(r.bare_cpu), _per_case(r.runner_cpu), _x(r.runner_cpu / r.bare_cpu))
            for r in rounds
        ],
        (
            "",
            "",
            f"**{_x(statistics.median(r.runner / r.bare for r in rounds))}**",
            "",
            "",
            f"**{_x(statistics.median(r.runner_cpu / r.bare_cpu for r in rounds))}**",
        ),
    )


def _s(seconds: float) -> str:
    return f"{seconds:.3f} s"


def _x(ratio: float) -> str:
    return f"{ratio:.2f}x"


def _per_case(seconds: float) -> str:
    return f"{seconds / (CASES * PAIRS) * 1e6:.0f} µs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds of each measurement ({ROUNDS})")
    args = parser.parse_args()
    print(machine())
    with workspace() as (directory, repo):
        first, commands = command_rounds(directory, repo, args.rounds)
        startup = startup_seconds()
        cases = case_rounds(directory, repo, args.rounds)
        slower = case_rounds(directory, repo, args.rounds, delay=SMALL_DELAY)
    report_command(first, startup, commands)
    report_cases(f"(2) per case, {CASES} cases one at a time, the model answering at once", cases)
    report_cases(f"(2b) the same, each reply taking {SMALL_DELAY * 1000:.0f} ms", slower)
    print(f"\n{machine()} (at the end)")


if __name__ == "__main__":
    main()
