"""Anthropic adapter benchmark: what ``AnthropicChatModel`` adds to a call
of the bare ``anthropic`` SDK, whole and streamed.

Run by hand, from the repository root, with the dev environment:

    .venv/bin/python bench/providers_anthropic.py

Against the scripted Messages API server of the tests
(``tests/support/anthropic_server.py``, its own process, on loopback):

(1) Per call: ``AnthropicChatModel.complete`` (translation, our retry
    loop, the size-capped transport, the reply read from the raw JSON)
    against the bare SDK's ``messages.create`` with the same body, on one
    ``AsyncAnthropic`` client each. Target: at most 1.05x.
(2) Time to first token: the first ``TextDelta`` of
    ``AnthropicChatModel.stream`` against the first ``text_delta`` event of
    the bare SDK's ``messages.create(stream=True)``, each stream then read
    to its end. Target: within 1 ms.

Each round is a fresh pair of clients, each warmed by one call, taking
turns: 20 bare calls, 20 of ours, and so on, then one bare stream, one of
ours, and so on, so that other load on the machine weighs on both alike;
every round is reported, and the median.
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

import anthropic

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from registry.providers.anthropic_chat import AnthropicChatModel  # noqa: E402
from registry.providers.anthropic_messages import to_messages_call  # noqa: E402
from registry.providers.chat import ChatRequest, TextDelta  # noqa: E402
from tests.support.anthropic_server import AnthropicServer  # noqa: E402

ROUNDS = 7
CALLS = 400
BATCH = 20
STREAMS = 100
KEY = "sk-ant-bench"
REQUEST = ChatRequest(
    model="claude-bench",
    messages=(
        {"role": "system", "content": "You answer in one sentence."},
        {"role": "user", "content": "What is a merge train?"},
    ),
    params={"max_tokens": 200},
)
BODY = to_messages_call(REQUEST, kind="anthropic", default_max_tokens=4096).body()
REPLY = "A merge train queues merge requests and tests each against the ones ahead of it."


async def bare_call(client: anthropic.AsyncAnthropic) -> None:
    await client.messages.create(**BODY)


async def bare_first_token(client: anthropic.AsyncAnthropic) -> float:
    """Seconds to the first text delta; the stream is then read to its end."""
    started = time.perf_counter()
    first = None
    stream: Any = await client.messages.create(**BODY, stream=True)
    async for event in stream:
        if first is None and event.type == "content_block_delta" and event.delta.type == "text_delta":
            first = time.perf_counter() - started
    assert first is not None
    return first


async def our_first_token(model: AnthropicChatModel) -> float:
    started = time.perf_counter()
    first = None
    async for item in model.stream(REQUEST):
        if first is None and isinstance(item, TextDelta):
            first = time.perf_counter() - started
    assert first is not None
    return first


async def one_round(base_url: str) -> tuple[float, float, float, float]:
    """Total seconds of ``CALLS`` bare and ``CALLS`` of our calls, then the
    median first-token time of ``STREAMS`` streams each, alternating in
    batches so that the machine's load weighs on both alike."""
    client = anthropic.AsyncAnthropic(api_key=KEY, base_url=base_url, max_retries=0)
    model = AnthropicChatModel(api_key=KEY, base_url=base_url, max_retries=0)
    try:
        await bare_call(client)
        await model.complete(REQUEST)
        async def ours() -> None:
            await model.complete(REQUEST)

        async def bare() -> None:
            await bare_call(client)

        totals = [0.0, 0.0]
        for _ in range(CALLS // BATCH):
            for side, call in enumerate((bare, ours)):
                started = time.perf_counter()
                for _ in range(BATCH):
                    await call()
                totals[side] += time.perf_counter() - started
        bare_firsts, our_firsts = [], []
        for _ in range(STREAMS):
            bare_firsts.append(await bare_first_token(client))
            our_firsts.append(await our_first_token(model))
        return totals[0], totals[1], statistics.median(bare_firsts), statistics.median(our_firsts)
    finally:
        await client.close()
        await model.aclose()


def measure(base_url: str) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    calls: list[tuple[float, float]] = []
    firsts: list[tuple[float, float]] = []
    for _ in range(ROUNDS):
        bare, ours, bare_first, our_first = asyncio.run(one_round(base_url))
        calls.append((bare, ours))
        firsts.append((bare_first, our_first))
    return calls, firsts


def main() -> None:
    print(f"# {platform.python_implementation()} {platform.python_version()}, anthropic {anthropic.__version__}")
    with tempfile.TemporaryDirectory() as directory:
        replies = [{"content": REPLY, "repeat": True}]
        with AnthropicServer(replies, Path(directory)) as server:
            calls, firsts = measure(server.base_url)
    print(f"\n(1) per call, {CALLS} calls per measurement")
    print("| round | bare SDK call | AnthropicChatModel.complete | ratio |")
    print("|---|---|---|---|")
    ratios = []
    for number, (base, ours) in enumerate(calls, start=1):
        ratios.append(ours / base)
        print(f"| {number} | {base / CALLS * 1e6:.0f} µs | {ours / CALLS * 1e6:.0f} µs | {ours / base:.2f}x |")
    print(f"| median | | | {statistics.median(ratios):.2f}x |")
    print(f"\n(2) time to first token, median of {STREAMS} streams per round")
    print("| round | bare SDK stream | AnthropicChatModel.stream | difference |")
    print("|---|---|---|---|")
    differences = []
    for number, (base, ours) in enumerate(firsts, start=1):
        differences.append(ours - base)
        print(f"| {number} | {base * 1e3:.2f} ms | {ours * 1e3:.2f} ms | {(ours - base) * 1e3:+.2f} ms |")
    print(f"| median | | | {statistics.median(differences) * 1e3:+.2f} ms |")


if __name__ == "__main__":
    main()
