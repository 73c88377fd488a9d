"""Anthropic adapter benchmark: what ``AnthropicChatModel`` adds to a call
of the bare ``anthropic`` SDK, whole and streamed.

Run by hand, from the repository root, with the dev environment:

    .venv/bin/python bench/providers_anthropic.py

Against the scripted Messages API server of the tests
(``tests/support/anthropic_server.py``, its own process, on loopback):

(1) Per call (wall clock, and the CPU time of the client process, which
    other load on a shared machine disturbs less):
    ``AnthropicChatModel.complete`` (translation, our retry
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.provider_rounds import adapter_first_token, per_call, print_rounds, seconds_to_first  # noqa: E402
from registry.providers.anthropic_chat import AnthropicChatModel  # noqa: E402
from registry.providers.anthropic_messages import to_messages_call  # noqa: E402
from registry.providers.chat import ChatRequest  # noqa: E402
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


@dataclass(frozen=True)
class Round:
    """Seconds, in total over the calls (wall clock and this process's CPU),
    and the median seconds to the first text delta."""

    bare: float
    ours: float
    bare_cpu: float
    our_cpu: float
    bare_first: float
    our_first: float


async def bare_call(client: anthropic.AsyncAnthropic) -> None:
    await client.messages.create(**BODY)


async def bare_first_token(client: anthropic.AsyncAnthropic) -> float:
    """Seconds to the first text delta; the stream is then read to its end."""
    started = time.perf_counter()
    stream: Any = await client.messages.create(**BODY, stream=True)
    return await seconds_to_first(started, stream, _is_text)


def _is_text(event: Any) -> bool:
    return bool(event.type == "content_block_delta" and event.delta.type == "text_delta")


async def one_round(base_url: str) -> Round:
    """``CALLS`` bare calls and ``CALLS`` of ours, then ``STREAMS`` streams
    each, alternating in batches so that the machine's load weighs on both alike."""
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
        cpu = [0.0, 0.0]
        for _ in range(CALLS // BATCH):
            for side, call in enumerate((bare, ours)):
                started, started_cpu = time.perf_counter(), time.process_time()
                for _ in range(BATCH):
                    await call()
                totals[side] += time.perf_counter() - started
                cpu[side] += time.process_time() - started_cpu
        bare_firsts, our_firsts = [], []
        for _ in range(STREAMS):
            bare_firsts.append(await bare_first_token(client))
            our_firsts.append(await adapter_first_token(model, REQUEST))
        return Round(
            totals[0], totals[1], cpu[0], cpu[1], statistics.median(bare_firsts), statistics.median(our_firsts)
        )
    finally:
        await client.close()
        await model.aclose()


def measure(base_url: str) -> list[Round]:
    return [asyncio.run(one_round(base_url)) for _ in range(ROUNDS)]


def main() -> None:
    print(f"# {platform.python_implementation()} {platform.python_version()}, anthropic {anthropic.__version__}")
    with tempfile.TemporaryDirectory() as directory:
        replies = [{"content": REPLY, "repeat": True}]
        with AnthropicServer(replies, Path(directory)) as server:
            rounds = measure(server.base_url)
    report(rounds)


def report(rounds: list[Round]) -> None:
    wall = statistics.median(r.ours / r.bare for r in rounds)
    cpu = statistics.median(r.our_cpu / r.bare_cpu for r in rounds)
    print_rounds(
        f"(1) per call, {CALLS} calls per measurement: wall clock, and the client process's CPU time",
        ("bare SDK call", "AnthropicChatModel.complete", "ratio", "CPU: bare", "CPU: ours", "CPU ratio"),
        [
            (per_call(r.bare, CALLS), per_call(r.ours, CALLS), f"{r.ours / r.bare:.2f}x")
            + (per_call(r.bare_cpu, CALLS), per_call(r.our_cpu, CALLS), f"{r.our_cpu / r.bare_cpu:.2f}x")
            for r in rounds
        ],
        ("", "", f"{wall:.2f}x", "", "", f"{cpu:.2f}x"),
    )
    difference = statistics.median(r.our_first - r.bare_first for r in rounds)
    print_rounds(
        f"(2) time to first token, median of {STREAMS} streams per round",
        ("bare SDK stream", "AnthropicChatModel.stream", "difference"),
        [(_ms(r.bare_first), _ms(r.our_first), f"{(r.our_first - r.bare_first) * 1e3:+.2f} ms") for r in rounds],
        ("", "", f"{difference * 1e3:+.2f} ms"),
    )


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


if __name__ == "__main__":
    main()
