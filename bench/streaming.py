"""Streaming benchmark: what a streamed run costs over the same run not
streamed, and what the executor adds to the time to the first token.

Run by hand, from the repository root, with the dev environment:

    .venv/bin/python bench/streaming.py

In process, against the scripted model (no HTTP, so that only the
executor's own work is measured; CPU time, which other processes on a
shared machine disturb less than wall time):

(1) Per run: a ReAct agent (three model rounds, two tool calls) and a
    chain whose gate holds its answer, run with ``arun`` and with
    ``astream`` (every event read), interleaved.
(2) Time to the first token of a ``vanilla`` agent: the first
    ``TextEvent`` of ``astream`` (the agent already fetched, the executor
    started), against the first ``TextDelta`` of the same model's own
    ``stream`` with the same request.
"""

from __future__ import annotations

import asyncio
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from registry.client import Agent  # noqa: E402
from registry.executor import Executor, PythonTools, ScriptedModel  # noqa: E402
from registry.executor.events import TextEvent  # noqa: E402
from registry.providers.chat import ChatRequest, TextDelta  # noqa: E402
from tests.conftest import LibraryRepo  # noqa: E402
from tests.support.executor_fixtures import REACT, leaf, registry_client  # noqa: E402
from tests.support.gated_answer import DRAFT, GATE, GATED  # noqa: E402

ROUNDS = 7
RUNS_PER_ROUND = 200
ACTION = 'Thought: look it up\nAction: lookup\nAction Input: {"word": "ox"}'
ANSWER = "An ox is a large domesticated bovine, kept for draught work and for its meat."
REPLIES: list[dict[str, Any]] = [
    {"when": "#2$", "content": "Final Answer: an animal", "repeat": True},
    {"agent": "s/react", "content": ACTION, "repeat": True},
    {"agent": "support/draft", "content": ANSWER, "repeat": True},
    {"agent": "support/gate", "content": '{"allow": true}', "repeat": True},
    {"agent": "s/answer", "content": ANSWER, "repeat": True},
]


async def per_run(executor: Executor, agent: Agent, streamed: bool) -> float:
    """CPU seconds per run of ``agent``, over ``RUNS_PER_ROUND`` runs."""
    started = time.process_time()
    for _ in range(RUNS_PER_ROUND):
        if streamed:
            events = [event async for event in executor.astream(agent, {"question": "ox?"})]
            assert events[-1].type == "outcome"
        else:
            assert (await executor.arun(agent, {"question": "ox?"})).completed
    return (time.process_time() - started) / RUNS_PER_ROUND


async def first_token(executor: Executor, model: ScriptedModel, agent: Agent) -> tuple[float, float]:
    """Seconds to the first text: through ``astream``, and from the model's own stream."""
    through_executor = None
    started = time.perf_counter()
    async for event in executor.astream(agent, {"question": "ox?"}):
        if isinstance(event, TextEvent) and through_executor is None:
            through_executor = time.perf_counter() - started
    request = ChatRequest(model="scripted", messages=({"role": "user", "content": "ox?"},), agent="s/answer")
    started = time.perf_counter()
    stream = model.stream(request)
    async for item in stream:
        if isinstance(item, TextDelta):
            bare = time.perf_counter() - started
            break
    await stream.aclose()  # type: ignore[attr-defined]
    assert through_executor is not None
    return through_executor, bare


def measure(directory: Path) -> tuple[dict[str, list[tuple[float, float]]], list[tuple[float, float]]]:
    repo = LibraryRepo(directory / "library")
    repo.release(
        "v1.0.0",
        {
            "s/react.yml": REACT,
            "s/answer.yml": leaf("the answerer", "Answer: {{ question }}", question="string"),
            "support/draft.yml": DRAFT,
            "support/gate.yml": GATE,
            "support/gated.yml": GATED,
        },
    )
    counter = iter(range(10**9))
    tools = PythonTools({"lookup": lambda word: f"{word}: a bovine #{next(counter) % 2 + 1}"})
    with registry_client(repo.path) as client:
        agents = {
            "ReAct, 3 rounds": client.get("s", "react", release="v1.0.0"),
            "gated chain": client.get("support", "gated", release="v1.0.0"),
        }
        answer = client.get("s", "answer", release="v1.0.0")

        async def run() -> tuple[dict[str, list[tuple[float, float]]], list[tuple[float, float]]]:
            model = ScriptedModel.from_replies(REPLIES, source="bench")
            async with Executor(model=model, tools=[tools]) as executor:
                costs: dict[str, list[tuple[float, float]]] = {name: [] for name in agents}
                for name, agent in agents.items():
                    await per_run(executor, agent, True)  # warm up
                    for _ in range(ROUNDS):
                        costs[name].append(
                            (await per_run(executor, agent, False), await per_run(executor, agent, True))
                        )
                tokens = [await first_token(executor, model, answer) for _ in range(ROUNDS * 20)]
                return costs, tokens

        return asyncio.run(run())


def main() -> None:
    print(f"# {platform.python_implementation()} {platform.python_version()}, scripted model, in process")
    with tempfile.TemporaryDirectory() as directory:
        costs, tokens = measure(Path(directory))
    print(f"\n(1) CPU time per run ({RUNS_PER_ROUND} runs per measurement, medians of {ROUNDS})")
    print("| agent | arun | astream | ratio |")
    print("|---|---|---|---|")
    for name, pairs in costs.items():
        plain = statistics.median(p for p, _ in pairs)
        streamed = statistics.median(s for _, s in pairs)
        print(f"| {name} | {plain * 1e6:.0f} µs | {streamed * 1e6:.0f} µs | {streamed / plain:.2f}x |")
    through = statistics.median(t for t, _ in tokens)
    bare = statistics.median(b for _, b in tokens)
    print(f"\n(2) time to the first token, median of {len(tokens)}")
    print("| through astream | the model's own stream | added by the executor |")
    print("|---|---|---|")
    print(f"| {through * 1e6:.0f} µs | {bare * 1e6:.0f} µs | {(through - bare) * 1e6:.0f} µs |")


if __name__ == "__main__":
    main()
