"""Where an ``Executor`` fetches the agents it runs by name: a registry client.

``RegistryClient`` is an ``AgentSource``: its ``get`` blocks, so the
executor calls it in a worker thread, never on the run's loop.
``AsyncRegistryClient`` is an ``AsyncAgentSource``: its ``get`` is a
coroutine, awaited on the run's loop. Any object with either ``get`` serves.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Protocol, TypeGuard, cast

from registry.client import Agent


class AgentSource(Protocol):
    """Fetches an agent at a release, blocking (``RegistryClient``)."""

    def get(self, usecase: str, name: str, *, release: str | None = None) -> Agent:
        """The agent ``usecase/name`` at ``release`` (None: the source's own pin)."""
        ...


class AsyncAgentSource(Protocol):
    """Fetches an agent at a release, awaited (``AsyncRegistryClient``)."""

    async def get(self, usecase: str, name: str, *, release: str | None = None) -> Agent:
        """The agent ``usecase/name`` at ``release`` (None: the source's own pin)."""
        ...


def is_async(source: AgentSource | AsyncAgentSource) -> TypeGuard[AsyncAgentSource]:
    """Whether ``source`` is an ``AsyncAgentSource``: the two protocols differ
    only in whether ``get`` is a coroutine function, which is all that can
    be seen of them at run time."""
    return inspect.iscoroutinefunction(source.get)


async def fetch(source: AgentSource | AsyncAgentSource, usecase: str, name: str, *, release: str | None) -> Agent:
    """The agent ``usecase/name`` at ``release``, from either kind of source,
    without blocking the caller's loop."""
    if is_async(source):
        return await source.get(usecase, name, release=release)
    blocking = cast(AgentSource, source)  # a TypeGuard narrows only where it holds
    return await asyncio.to_thread(blocking.get, usecase, name, release=release)
