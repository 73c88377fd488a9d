"""Executor benchmark: what the runtime adds to a model round, and whether
parallel branches really run concurrently.

Run by hand, from the repository root, with the dev environment:

    .venv/bin/python bench/executor.py

(1) Overhead per model round: a ReAct agent (``react_text``, one tool)
    runs 8 model rounds (7 tool calls, then a final answer) against the
    scripted OpenAI-compatible HTTP server of the tests, through
    ``OpenAIChatModel``; per round that is one model call, a parse, one tool
    call and a trace. The baseline is the bare ``openai`` SDK: the same
    number of ``chat.completions.create`` calls, with the same messages, to
    the same server, on one ``AsyncOpenAI`` client. Target: at most 1.2x.
(2) A ``parallel`` vote with ``n: 5`` against a server that takes 200 ms
    per reply, with ``max_concurrency`` 5 and 1: about one reply's time, and
    about five.

Rounds are interleaved (baseline, executor, baseline, ...); every round is
reported, and the median.
"""

from __future__ import annotations

import asyncio
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import openai
from openai.types.chat import ChatCompletionMessageParam

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from registry.executor import Executor, OpenAIChatModel, PythonTools  # noqa: E402
from tests.conftest import LibraryRepo  # noqa: E402
from tests.support.executor_fixtures import LABEL_SCHEMA, json_leaf, registry_client  # noqa: E402
from tests.support.openai_server import ScriptedModelServer  # noqa: E402

ROUNDS = 7
RUNS_PER_ROUND = 20
MODEL_ROUNDS = 8
REACT = """\
name: Bench ReAct
type: react
max_iterations: 8
output_parser: {type: react_text}
model: {name: bench-model, params: {temperature: 0, max_tokens: 200}}
tools:
  - name: lookup
    description: Looks a word up.
    parameters: {type: object, required: [word], properties: {word: {type: string}}}
prompt_templates:
  system: |
    You answer with Thought / Action / Action Input lines, or a Final Answer.
    {% for tool in tools %}- {{ tool.name }}: {{ tool.description }}
    {% endfor %}
  user: "{{ question }}"
inputs: {type: object, required: [question], properties: {question: {type: string}}}
"""
VOTE = """\
name: Bench vote
inputs: {{type: object, required: [question], properties: {{question: {{type: string}}}}}}
pattern:
  kind: parallel
  mode: vote
  n: 5
  max_concurrency: {concurrency}
  branch: {{agent: bench/classify, inputs: {{question: "{{{{ inputs.question }}}}"}}}}
  aggregate: {{strategy: majority, field: label}}
"""
ACTION = 'Thought: look it up\nAction: lookup\nAction Input: {"word": "ox"}'


async def baseline(base_url: str, messages_per_round: list[list[ChatCompletionMessageParam]]) -> float:
    client = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0)
    try:
        started = time.perf_counter()
        for _ in range(RUNS_PER_ROUND):
            for messages in messages_per_round:
                await client.chat.completions.create(
                    model="bench-model",
                    messages=messages,
                    temperature=0,
                    max_tokens=200,
                )
        return time.perf_counter() - started
    finally:
        await client.close()


async def executed(executor: Executor, agent: object) -> float:
    started = time.perf_counter()
    for _ in range(RUNS_PER_ROUND):
        result = await executor.arun(agent, {"question": "What is an ox?"})  # type: ignore[arg-type]
        assert result.outcome == "completed" and result.llm_calls == MODEL_ROUNDS, result.error
    return time.perf_counter() - started


def overhead(directory: Path) -> list[tuple[float, float]]:
    repo = LibraryRepo(directory / "library")
    repo.release("v1.0.0", {"bench/react.yml": REACT})
    # The tool numbers its answers 1 to 7, and the server answers the
    # seventh observation with the final answer: eight model rounds per run.
    replies = [
        {"when": "#7$", "content": "Final Answer: an animal", "repeat": True},
        {"content": ACTION, "repeat": True},
    ]
    results: list[tuple[float, float]] = []
    counter = iter(range(10**9))
    with ScriptedModelServer(replies, directory) as server, registry_client(repo.path) as client:
        agent = client.get("bench", "react", release="v1.0.0")
        tools = PythonTools(
            {"lookup": lambda word: f"{word}: a large domesticated bovine #{next(counter) % (MODEL_ROUNDS - 1) + 1}"}
        )

        async def measure() -> None:
            model = OpenAIChatModel(base_url=server.base_url, api_key="bench", max_retries=0)
            async with Executor(model=model, tools=[tools]) as executor:
                first = await executor.arun(agent, {"question": "What is an ox?"})
                conversation = _conversation(first.trace)
                for _ in range(ROUNDS):
                    base = await baseline(server.base_url, conversation)
                    ours = await executed(executor, agent)
                    results.append((base, ours))

        asyncio.run(measure())
    return results


def _conversation(trace: object) -> list[list[ChatCompletionMessageParam]]:
    """The messages of each model call of a run, whole, as the SDK sends them."""
    messages: list[ChatCompletionMessageParam] = []
    calls = []
    for chat in trace.spans("chat"):  # type: ignore[attr-defined]
        messages = messages + chat.attributes["registry.input_messages"]
        calls.append(list(messages))
    return calls


def concurrency(directory: Path) -> list[tuple[int, float]]:
    repo = LibraryRepo(directory / "vote")
    repo.release(
        "v1.0.0",
        {
            "bench/classify.yml": json_leaf("classifier", "Classify: {{ question }}", LABEL_SCHEMA, question="string"),
            "bench/vote5.yml": VOTE.format(concurrency=5),
            "bench/vote1.yml": VOTE.format(concurrency=1),
        },
    )
    replies = [{"content": '{"label": "tech"}', "delay": 0.2, "repeat": True}]
    timings: list[tuple[int, float]] = []
    with ScriptedModelServer(replies, directory) as server, registry_client(repo.path) as client:
        model = OpenAIChatModel(base_url=server.base_url, api_key="bench", max_retries=0)
        with Executor(model=model, registry=client) as executor:
            for _ in range(3):
                for limit in (5, 1):
                    started = time.perf_counter()
                    result = executor.run(f"bench/vote{limit}", {"question": "q"}, release="v1.0.0")
                    assert result.outcome == "completed", result.error
                    timings.append((limit, time.perf_counter() - started))
    return timings


def main() -> None:
    print(f"# {platform.python_implementation()} {platform.python_version()}, openai {openai.__version__}")
    with tempfile.TemporaryDirectory() as directory:
        rounds = overhead(Path(directory))
    calls = RUNS_PER_ROUND * MODEL_ROUNDS
    print(f"\n(1) per model round, ReAct with one tool ({calls} model rounds per measurement)")
    print("| round | bare SDK call | executor round | ratio |")
    print("|---|---|---|---|")
    ratios = []
    for number, (base, ours) in enumerate(rounds, start=1):
        ratios.append(ours / base)
        print(f"| {number} | {base / calls * 1e6:.0f} µs | {ours / calls * 1e6:.0f} µs | {ours / base:.2f}x |")
    print(f"| median | | | {statistics.median(ratios):.2f}x |")
    with tempfile.TemporaryDirectory() as directory:
        timings = concurrency(Path(directory))
    print("\n(2) parallel vote, n 5, 200 ms per reply")
    print("| max_concurrency | runs (s) | median |")
    print("|---|---|---|")
    for limit in (5, 1):
        values = [t for lim, t in timings if lim == limit]
        print(f"| {limit} | {', '.join(f'{v:.3f}' for v in values)} | {statistics.median(values):.3f} s |")


if __name__ == "__main__":
    main()
