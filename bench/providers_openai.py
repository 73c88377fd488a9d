"""OpenAI adapter benchmark: what ``OpenAIChatModel`` adds to a call and to
the first token of a stream, and how soon llama.cpp's server is free again
after a call given up.

Run by hand, from the repository root, with the dev environment:

    .venv/bin/python bench/providers_openai.py [--llama URL] [--only a|b|c|d]

(a) Overhead per call: ``OpenAIChatModel.complete`` against a bare
    ``openai`` SDK call (``AsyncOpenAI.chat.completions.create``, the same
    messages and parameters), both to the scripted OpenAI-compatible server
    of the tests, 200 calls of each per measurement, alternating call by
    call (this machine's two cores are often busy with other work: load
    drifts alike for both).
(b) Time to first token: ``OpenAIChatModel.stream``'s first ``TextDelta``
    against the bare SDK stream's first content chunk, the same reply (20
    pieces) from the same server, 100 streams of each per measurement,
    alternating as in (a); the median of each measurement, and the difference.
(c) Against a real llama.cpp server (llama-cpp-python serving
    SmolLM2-135M-Instruct, docs/real-model.md; ``--llama``, default
    http://127.0.0.1:18000/v1): a call asking for a long reply (300 tokens,
    end of text banned) given up after 1 s, in five ways; then how long a
    short request (4 tokens) waits for its answer. The same short request
    on an idle server is the baseline.
(d) Against the same server, for real: tools with each tool_choice, JSON
    mode with a schema, a stream.

Rounds are interleaved (baseline, ours, baseline, ...); every round is
reported, and the median.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import openai
from openai.types.chat import ChatCompletionMessageParam

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.provider_rounds import adapter_first_token, per_call, print_rounds, seconds_to_first  # noqa: E402
from registry.errors import ModelError  # noqa: E402
from registry.providers.chat import ChatReply, ChatRequest, ResponseFormat, TextDelta  # noqa: E402
from registry.providers.openai_chat import OpenAIChatModel  # noqa: E402
from tests.support.openai_server import ScriptedModelServer  # noqa: E402

ROUNDS = 7
CALLS = 200
STREAMS = 100
MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "system", "content": "You answer questions about GitLab CI in one sentence."},
    {"role": "user", "content": "Why does my pipeline stay pending?"},
]
REQUEST = ChatRequest(
    model="bench-model", messages=tuple(dict(m) for m in MESSAGES), params={"temperature": 0, "max_tokens": 200}
)
PIECES = [f"word{n} " for n in range(20)]
LONG = {"max_tokens": 300, "logit_bias": {"2": -100}}
"""A reply that goes on: SmolLM2's end of text (token 2) is banned."""
STORY: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Write a very long story about a dragon."}]


# --- (a) overhead per call -------------------------------------------------------------


async def _bare_call(client: openai.AsyncOpenAI) -> float:
    started = time.perf_counter()
    await client.chat.completions.create(model="bench-model", messages=MESSAGES, temperature=0, max_tokens=200)
    return time.perf_counter() - started


async def _adapter_call(model: OpenAIChatModel) -> float:
    started = time.perf_counter()
    await model.complete(REQUEST)
    return time.perf_counter() - started


async def _alternating(
    bare: Callable[[], Awaitable[float]], ours: Callable[[], Awaitable[float]], count: int
) -> tuple[list[float], list[float]]:
    """``count`` timings of each, alternating call by call: a machine busy
    with other work slows both alike."""
    bare_times, our_times = [], []
    for _ in range(count):
        bare_times.append(await bare())
        our_times.append(await ours())
    return bare_times, our_times


def overhead(directory: Path) -> list[tuple[float, float]]:
    results: list[tuple[float, float]] = []
    with ScriptedModelServer([{"content": "Final Answer: 42", "repeat": True}], directory) as server:

        async def measure() -> None:
            client = openai.AsyncOpenAI(base_url=server.base_url, api_key="bench", max_retries=0)
            model = OpenAIChatModel(base_url=server.base_url, api_key="bench", max_retries=0)
            try:
                await _alternating(lambda: _bare_call(client), lambda: _adapter_call(model), 20)  # both warm
                for _ in range(ROUNDS):
                    bare, ours = await _alternating(lambda: _bare_call(client), lambda: _adapter_call(model), CALLS)
                    results.append((sum(bare), sum(ours)))
            finally:
                await client.close()
                await model.aclose()

        asyncio.run(measure())
    return results


# --- (b) time to first token -------------------------------------------------------------


async def _bare_first_token(client: openai.AsyncOpenAI) -> float:
    started = time.perf_counter()
    stream = await client.chat.completions.create(
        model="bench-model", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    return await seconds_to_first(started, stream, lambda chunk: bool(chunk.choices and chunk.choices[0].delta.content))


def first_token(directory: Path) -> list[tuple[float, float]]:
    results: list[tuple[float, float]] = []
    with ScriptedModelServer([{"chunks": PIECES, "repeat": True}], directory) as server:

        async def measure() -> None:
            client = openai.AsyncOpenAI(base_url=server.base_url, api_key="bench", max_retries=0)
            model = OpenAIChatModel(base_url=server.base_url, api_key="bench", max_retries=0)
            try:
                await _alternating(lambda: _bare_first_token(client), lambda: adapter_first_token(model, REQUEST), 20)
                for _ in range(ROUNDS):
                    bare, ours = await _alternating(
                        lambda: _bare_first_token(client), lambda: adapter_first_token(model, REQUEST), STREAMS
                    )
                    results.append((statistics.median(bare), statistics.median(ours)))
            finally:
                await client.close()
                await model.aclose()

        asyncio.run(measure())
    return results


# --- (c) llama.cpp after a call given up -------------------------------------------------


def _long(**fields: Any) -> ChatRequest:
    return ChatRequest(model="smollm2", messages=tuple(dict(m) for m in STORY), params=LONG, **fields)


async def _short(client: openai.AsyncOpenAI) -> float:
    """Seconds until a 4-token request is answered."""
    started = time.perf_counter()
    await client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "Say hi."}], max_tokens=4, timeout=600
    )
    return time.perf_counter() - started


async def _bare_not_streamed(url: str) -> None:
    async with openai.AsyncOpenAI(base_url=url, api_key="bench", max_retries=0) as client:
        try:
            await client.chat.completions.create(
                model="smollm2", messages=STORY, max_tokens=300, logit_bias={"2": -100}, timeout=1
            )
        except openai.APITimeoutError:
            return
    raise AssertionError("the long reply came within 1 s")


async def _bare_stream_closed(url: str) -> None:
    async with openai.AsyncOpenAI(base_url=url, api_key="bench", max_retries=0) as client:
        stream = await client.chat.completions.create(
            model="smollm2", messages=STORY, max_tokens=300, logit_bias={"2": -100}, stream=True
        )
        started = time.perf_counter()
        async for _ in stream:
            if time.perf_counter() - started > 1:
                break
        await stream.close()


async def _adapter_stream_cancelled(url: str) -> None:
    model = OpenAIChatModel(base_url=url, api_key="bench", server="llama.cpp", max_retries=0)

    async def read() -> None:
        async for _ in model.stream(_long()):
            pass

    task = asyncio.create_task(read())
    await asyncio.sleep(1)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await model.aclose()


async def _adapter_timed_out(url: str, server: str | None) -> None:
    model = OpenAIChatModel(base_url=url, api_key="bench", server=server, max_retries=0)
    try:
        await model.complete(_long(timeout=1))
    except ModelError as error:
        assert error.reason == "timeout", error
    finally:
        await model.aclose()


GIVING_UP: dict[str, Callable[[str], Awaitable[None]]] = {
    "bare SDK, not streamed, timeout 1 s": _bare_not_streamed,
    "bare SDK stream, closed after 1 s": _bare_stream_closed,
    "OpenAIChatModel.stream, task cancelled after 1 s": _adapter_stream_cancelled,
    "OpenAIChatModel.complete, server llama.cpp (streamed), timeout 1 s": lambda url: _adapter_timed_out(
        url, "llama.cpp"
    ),
    "OpenAIChatModel.complete, no server named (not streamed), timeout 1 s": lambda url: _adapter_timed_out(url, None),
}


def llama_free_again(url: str, rounds: int) -> dict[str, list[float]]:
    waits: dict[str, list[float]] = {"idle server (baseline)": []}
    waits.update({name: [] for name in GIVING_UP})

    async def measure() -> None:
        async with openai.AsyncOpenAI(base_url=url, api_key="bench", max_retries=0) as client:
            await _short(client)
            for _ in range(rounds):
                waits["idle server (baseline)"].append(await _short(client))
                for name, give_up in GIVING_UP.items():
                    await give_up(url)
                    waits[name].append(await _short(client))

    asyncio.run(measure())
    return waits


# --- (d) the adapter against llama.cpp, for real -------------------------------------------


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather of a city",
        "parameters": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}},
    },
}
PERSON = {
    "type": "object",
    "required": ["name", "age"],
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
}


async def _real_checks(url: str) -> list[tuple[str, str]]:
    model = OpenAIChatModel(base_url=url, api_key="bench", server="llama.cpp", max_retries=0, default_timeout=300)
    ask = "What is the weather in Paris? Use the tool."
    found: list[tuple[str, str]] = []
    try:
        for choice in ("auto", "required", "get_weather", "none"):
            messages = ({"role": "user", "content": ask},)
            request = ChatRequest("smollm2", messages, tools=(WEATHER,), params={"max_tokens": 40}, tool_choice=choice)
            found.append((f"tools, tool_choice {choice}", _shown(await _outcome(model.complete(request)))))
        person = ChatRequest(
            "smollm2",
            ({"role": "user", "content": "Describe a person as JSON."},),
            params={"max_tokens": 60},
            response_format=ResponseFormat(PERSON, "person"),
        )
        found.append(("json_object with a schema", _shown(await _outcome(model.complete(person)))))
        items = [
            item async for item in model.stream(ChatRequest("smollm2", REQUEST.messages, params={"max_tokens": 20}))
        ]
        deltas = sum(isinstance(item, TextDelta) for item in items)
        found.append(("a stream", f"{deltas} deltas, then {_shown(items[-1])}"))
    finally:
        await model.aclose()
    return found


async def _outcome(call: Awaitable[ChatReply]) -> ChatReply | ModelError:
    try:
        return await call
    except ModelError as error:
        return error


def _shown(outcome: object) -> str:
    if isinstance(outcome, ModelError):
        return f"ModelError {outcome.reason}: {outcome}"
    assert isinstance(outcome, ChatReply)
    calls = ", ".join(f"{call.name}({call.arguments})" for call in outcome.tool_calls)
    said = " ".join(outcome.content.split())[:70]
    return f"finish {outcome.finish_reason}; " + (f"calls {calls}" if calls else f"text {said!r}")


# --- reports -------------------------------------------------------------------------------


def _report_overhead(rounds: list[tuple[float, float]]) -> None:
    print_rounds(
        f"(a) per call, {CALLS} calls per measurement",
        ("bare SDK call", "OpenAIChatModel.complete", "ratio"),
        [(per_call(bare, CALLS), per_call(ours, CALLS), f"{ours / bare:.3f}x") for bare, ours in rounds],
        ("", "", f"{statistics.median(ours / bare for bare, ours in rounds):.3f}x"),
    )


def _report_first_token(rounds: list[tuple[float, float]]) -> None:
    print_rounds(
        f"(b) time to first token, median of {STREAMS} streams per measurement",
        ("bare SDK stream", "OpenAIChatModel.stream", "difference"),
        [(f"{bare * 1e6:.0f} µs", f"{ours * 1e6:.0f} µs", f"{(ours - bare) * 1e6:+.0f} µs") for bare, ours in rounds],
        ("", "", f"{statistics.median(ours - bare for bare, ours in rounds) * 1e6:+.0f} µs"),
    )


def _report_llama(waits: dict[str, list[float]]) -> None:
    print("\n(c) llama.cpp: seconds until a 4-token request is answered, after a long call given up")
    print("| before it | rounds (s) | median |")
    print("|---|---|---|")
    for name, values in waits.items():
        print(f"| {name} | {', '.join(f'{v:.2f}' for v in values)} | {statistics.median(values):.2f} s |")


def _reachable(url: str) -> bool:
    try:
        urllib.request.urlopen(f"{url}/models", timeout=3).close()
        return True
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--llama", default="http://127.0.0.1:18000/v1", help="llama.cpp's /v1 base URL")
    parser.add_argument("--only", choices="abcd", help="one part only")
    parser.add_argument("--llama-rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"# {platform.python_implementation()} {platform.python_version()}, openai {openai.__version__}")
    if args.only in (None, "a"):
        with tempfile.TemporaryDirectory() as directory:
            _report_overhead(overhead(Path(directory)))
    if args.only in (None, "b"):
        with tempfile.TemporaryDirectory() as directory:
            _report_first_token(first_token(Path(directory)))
    if args.only not in (None, "c", "d"):
        return
    if not _reachable(args.llama):
        print(f"\n(c), (d): no llama.cpp server at {args.llama} (docs/real-model.md starts one)")
        return
    if args.only in (None, "c"):
        _report_llama(llama_free_again(args.llama, args.llama_rounds))
    if args.only in (None, "d"):
        print("\n(d) the adapter (server llama.cpp) against llama.cpp")
        for what, outcome in asyncio.run(_real_checks(args.llama)):
            print(f"- {what}: {outcome}")


if __name__ == "__main__":
    main()
