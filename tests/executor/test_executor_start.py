"""``Executor.start()``: callers share one start of the tool providers, and a
provider that failed to start is tried again by the next call."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Collection
from typing import Any

from registry.errors import ConfigurationError
from registry.executor import Executor, ScriptedModel


class SlowTools:
    """A provider that takes a while to start, and fails its first ``failures`` starts."""

    description = "slow tools"

    def __init__(self, *, failures: int = 0) -> None:
        self.failures = failures
        self.starts = 0
        self._names: tuple[str, ...] = ()

    async def start(self) -> None:
        self.starts += 1
        await asyncio.sleep(0.3)
        if self.starts <= self.failures:
            raise ConfigurationError(f"slow tools: not up yet (start {self.starts})")
        self._names = ("lookup",)

    def names(self) -> Collection[str]:
        return self._names

    async def call(self, name: str, arguments: dict[str, Any]) -> Any:
        return "found"

    async def aclose(self) -> None:
        return None


def start_in_threads(executor: Executor, count: int) -> list[str]:
    """``executor.start()`` from ``count`` threads at once: what each saw on return."""
    seen: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(count)

    def start() -> None:
        barrier.wait()
        try:
            executor.start()
        except ConfigurationError as exc:
            outcome = f"error: {exc.detail}"
        else:
            outcome = "bound" if executor.toolbox.bound("lookup") else "unbound"
        with lock:
            seen.append(outcome)

    threads = [threading.Thread(target=start) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return seen


def test_concurrent_first_starts_all_return_with_the_tools_bound() -> None:
    tools = SlowTools()
    with Executor(model=ScriptedModel.from_replies([], source="t"), tools=[tools]) as executor:
        seen = start_in_threads(executor, 4)
    assert seen == ["bound"] * 4
    assert tools.starts == 1


def test_a_provider_that_failed_to_start_is_started_again_by_the_next_call() -> None:
    tools = SlowTools(failures=1)
    with Executor(model=ScriptedModel.from_replies([], source="t"), tools=[tools]) as executor:
        try:
            executor.start()
        except ConfigurationError as exc:
            assert "not up yet (start 1)" in exc.detail
        else:
            raise AssertionError("the first start should fail")
        assert not executor.toolbox.bound("lookup")
        executor.start()
        assert executor.toolbox.bound("lookup")
        executor.start()
    assert tools.starts == 2


def test_a_caller_waiting_on_a_start_that_fails_tries_again_itself() -> None:
    tools = SlowTools(failures=1)
    with Executor(model=ScriptedModel.from_replies([], source="t"), tools=[tools]) as executor:
        seen = start_in_threads(executor, 2)
    assert sorted(seen) == ["bound", "error: slow tools: not up yet (start 1)"]
    assert tools.starts == 2
