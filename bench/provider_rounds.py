"""What the provider adapter benchmarks share (``bench/providers_openai.py``,
``bench/providers_anthropic.py``): timing a stream to its first text, the
same way for the bare SDK and for the adapter, and the Markdown table of
the rounds of a measurement with their median."""

from __future__ import annotations

import time
from collections.abc import AsyncIterable, Callable, Sequence
from typing import TypeVar

from registry.providers.chat import ChatModel, ChatRequest, TextDelta

_T = TypeVar("_T")


async def seconds_to_first(started: float, items: AsyncIterable[_T], is_text: Callable[[_T], bool]) -> float:
    """Seconds from ``started`` (``time.perf_counter``) to the first of
    ``items`` that ``is_text``; the rest are then read to the end, as a
    reader of the whole reply would."""
    first = None
    async for item in items:
        if first is None and is_text(item):
            first = time.perf_counter() - started
    assert first is not None
    return first


async def adapter_first_token(model: ChatModel, request: ChatRequest) -> float:
    """Seconds to the first ``TextDelta`` of ``model.stream(request)``, read to its end."""
    return await seconds_to_first(time.perf_counter(), model.stream(request), lambda item: isinstance(item, TextDelta))


def per_call(total: float, calls: int) -> str:
    """The microseconds of one call, of ``calls`` that took ``total`` seconds."""
    return f"{total / calls * 1e6:.0f} µs"


def print_rounds(title: str, headings: Sequence[str], rows: Sequence[Sequence[str]], medians: Sequence[str]) -> None:
    """``title``, then a Markdown table under ``headings``: one row a round,
    numbered from 1, then the row of ``medians`` (an empty cell where a
    column has none)."""
    print(f"\n{title}")
    print(_row(["round", *headings]))
    print("|---" * (len(headings) + 1) + "|")
    for number, cells in enumerate(rows, start=1):
        print(_row([str(number), *cells]))
    print(_row(["median", *medians]))


def _row(cells: Sequence[str]) -> str:
    return "|" + "".join(f" {cell} |" if cell else " |" for cell in cells)
