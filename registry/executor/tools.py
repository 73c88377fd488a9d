"""Tools bound by the operator, and the one place a tool is called.

A definition declares tools (name, description, JSON Schema of the
arguments); the operator binds implementations when starting the executor,
from ``ToolProvider`` s: Python callables (``PythonTools``, from
``--tools package.module:ATTR``) and MCP servers
(``registry.executor.mcp_tools``). ``ToolBox`` joins the two for one run:

- every declared tool must be bound before the first model call
  (``UnboundTools`` names the missing ones);
- arguments are checked against the declared schema before the call, and a
  violation becomes an observation for the model, not a crash;
- each call has a timeout; an exception or a timeout becomes an observation;
- the output (a string, or a JSON value serialised) is capped in size.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import json
import queue
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from registry.errors import ConfigurationError
from registry.format.inputschema import InputsSchema
from registry.format.spec import ToolSpec

DEFAULT_TOOL_TIMEOUT = 30.0
"""Seconds one tool call may take."""
DEFAULT_MAX_TOOL_OUTPUT = 64 * 1024
"""Characters of a tool's output kept for the model and the trace."""


class ToolFailure(Exception):
    """Raised by a provider when a tool reports an error of its own (an MCP
    result with ``isError``); the message becomes the observation."""


class ToolProvider(Protocol):
    """A source of tool implementations, bound by name."""

    description: str
    """For messages and traces: ``python tools_module:TOOLS``, ``mcp docs (stdio)``."""

    async def start(self) -> None:
        """Connect or load; called once before ``names``. Raises
        ``registry.errors.ConfigurationError`` when it cannot start."""
        ...

    def names(self) -> Collection[str]:
        """The names of the tools it implements."""
        ...

    async def call(self, name: str, arguments: dict[str, Any]) -> Any:
        """Run tool ``name``: a string, or a JSON-serialisable value. Any
        exception is the tool's failure (``ToolFailure`` for one it reported)."""
        ...

    async def aclose(self) -> None:
        """Disconnect; safe to call more than once, and after a failed start."""
        ...


@dataclass(frozen=True)
class ToolResult:
    """What a tool call gave: the text the model sees and how it went."""

    name: str
    arguments: dict[str, Any]
    output: str
    """The observation: the tool's output, or what went wrong, capped."""
    status: str
    """``ok``, ``error`` (it raised or reported an error), ``invalid_arguments``,
    ``timeout``, ``rejected`` (an approval said no)."""
    seconds: float
    truncated: bool = False
    provider: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolResult:
        """The result ``as_dict`` gave (a journal keeps results so)."""
        return cls(
            name=str(data["name"]),
            arguments=dict(data.get("arguments") or {}),
            output=str(data["output"]),
            status=str(data["status"]),
            seconds=float(data.get("seconds") or 0.0),
            truncated=bool(data.get("truncated")),
            provider=data.get("provider"),
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "arguments": self.arguments,
            "status": self.status,
            "output": self.output,
            "truncated": self.truncated,
            "seconds": round(self.seconds, 6),
            "provider": self.provider,
        }


class PythonTools:
    """Tools implemented by Python callables: ``--tools package.module:ATTR``,
    where ``ATTR`` maps tool names to callables that take the arguments as
    keyword arguments and return a string or a JSON-serialisable value.

    A plain function runs in a daemon thread of its own, so that one that
    hangs past its timeout is left behind without holding up the run or the
    process's exit; a coroutine function runs on the run's event loop.
    """

    def __init__(self, tools: Mapping[str, Callable[..., Any]], *, description: str = "python tools") -> None:
        self.description = description
        self._tools = dict(tools)

    @classmethod
    def from_reference(cls, reference: str) -> PythonTools:
        """Load ``package.module:ATTR``; ``ConfigurationError`` when it cannot."""
        module_name, _, attribute = reference.partition(":")
        if not module_name or not attribute:
            raise ConfigurationError(f"--tools {reference!r}: expected package.module:ATTR")
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # an ImportError, or whatever the module raises while loading
            raise ConfigurationError(f"--tools {reference!r}: cannot import {module_name}: {_describe(exc)}") from exc
        value: Any = module
        for part in attribute.split("."):
            if not hasattr(value, part):
                raise ConfigurationError(f"--tools {reference!r}: {module_name} has no attribute {attribute!r}")
            value = getattr(value, part)
        if not isinstance(value, Mapping):
            raise ConfigurationError(
                f"--tools {reference!r}: expected a mapping of tool names to callables, got {type(value).__name__}"
            )
        for name, function in value.items():
            if not isinstance(name, str) or not callable(function):
                raise ConfigurationError(f"--tools {reference!r}: {name!r} is not bound to a callable")
        return cls(value, description=f"python {reference}")

    async def start(self) -> None:
        return None

    def names(self) -> Collection[str]:
        return self._tools.keys()

    async def call(self, name: str, arguments: dict[str, Any]) -> Any:
        function = self._tools[name]
        if inspect.iscoroutinefunction(function):
            return await function(**arguments)
        return await _in_daemon_thread(function, arguments)

    async def aclose(self) -> None:
        return None


async def _in_daemon_thread(function: Callable[..., Any], arguments: dict[str, Any]) -> Any:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not future.done():
            outcome()

    def job() -> None:
        try:
            result = function(**arguments)
        except BaseException as exc:  # the tool's failure, whatever it is, is the observation
            failure = exc
            _post(loop, lambda: settle(lambda: future.set_exception(failure)))
        else:
            _post(loop, lambda: settle(lambda: future.set_result(result)))

    _DAEMONS.submit(job)
    return await future


class _DaemonPool:
    """Daemon threads that run tool calls, started as calls need them and
    kept for the next ones: a thread per call costs a tenth of a
    millisecond. Daemons, unlike ``ThreadPoolExecutor``'s workers, are not
    waited for at exit, so a tool that hangs past its timeout holds up
    neither the run nor the process; it keeps its thread until it returns."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            if self._idle == 0:
                threading.Thread(target=self._work, name="registry-tool", daemon=True).start()
            else:
                self._idle -= 1
        self._jobs.put(job)

    def _work(self) -> None:
        while True:
            self._jobs.get()()
            with self._lock:
                self._idle += 1


_DAEMONS = _DaemonPool()


def _post(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    with contextlib.suppress(RuntimeError):  # the loop closed while the tool ran: nobody waits for it
        loop.call_soon_threadsafe(callback)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


class UnboundTools(ConfigurationError):
    """Declared tools that no provider implements."""

    def __init__(self, missing: Mapping[str, Sequence[str]], providers: Sequence[str]) -> None:
        names = ", ".join(sorted(missing))
        agents = sorted({agent for owners in missing.values() for agent in owners})
        bound = "; bound: " + ", ".join(providers) if providers else "; no tools are bound (--tools, --mcp)"
        super().__init__(f"no implementation bound for tool {names} (declared by {', '.join(agents)}){bound}")
        self.missing = dict(missing)


class ToolBox:
    """The tools of one executor: who implements each name, and how a call
    is made safe (schema, timeout, exceptions, output size)."""

    def __init__(
        self,
        providers: Sequence[ToolProvider] = (),
        *,
        timeout: float = DEFAULT_TOOL_TIMEOUT,
        max_output: int = DEFAULT_MAX_TOOL_OUTPUT,
    ) -> None:
        self.providers = tuple(providers)
        self.timeout = timeout
        self.max_output = max_output
        self._by_name: dict[str, ToolProvider] = {}
        self._up = 0
        """How many providers, in order, have started."""
        self._starting: asyncio.Lock | None = None
        self._schemas: dict[tuple[str, str], InputsSchema] = {}

    async def start(self) -> None:
        """Start every provider, in order; the first to claim a name keeps it.

        Callers share one start: one that comes while another is starting
        waits for it, so no caller returns before every tool is bound. A
        provider that fails to start (``ConfigurationError``) leaves the
        ones before it started, and the next call tries it again."""
        if self._up == len(self.providers):
            return
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            while self._up < len(self.providers):
                provider = self.providers[self._up]
                await provider.start()
                for name in provider.names():
                    self._by_name.setdefault(name, provider)
                self._up += 1

    async def aclose(self) -> None:
        for provider in self.providers:
            with contextlib.suppress(Exception):
                await provider.aclose()

    def bound(self, name: str) -> bool:
        return name in self._by_name

    def check_bound(self, declared: Mapping[str, Sequence[str]]) -> None:
        """``declared``: tool name → the agents declaring it. Raises
        ``UnboundTools`` naming every one without an implementation."""
        missing = {name: owners for name, owners in declared.items() if name not in self._by_name}
        if missing:
            raise UnboundTools(missing, [p.description for p in self.providers])

    async def call(self, tool: ToolSpec, arguments: Any) -> ToolResult:
        """Call the declared tool; every failure is a result, never an exception
        (cancellation excepted)."""
        name = tool.name
        started = time.monotonic()
        provider = self._by_name.get(name)

        def result(output: str, status: str, *, truncated: bool = False) -> ToolResult:
            return ToolResult(
                name=name,
                arguments=arguments if isinstance(arguments, dict) else {},
                output=output,
                status=status,
                seconds=time.monotonic() - started,
                truncated=truncated,
                provider=provider.description if provider is not None else None,
            )

        if provider is None:
            return result(f"Error: no implementation is bound for the tool {name!r}.", "error")
        problems = self.argument_problems(tool, arguments)
        if problems:
            message = f"Error: invalid arguments for {name}: {problems}. Call it again with valid arguments."
            return result(message, "invalid_arguments")
        try:
            value = await asyncio.wait_for(provider.call(name, dict(arguments)), self.timeout)
        except asyncio.TimeoutError:
            return result(f"Error: the tool {name} did not finish within {self.timeout:g} s.", "timeout")
        except ToolFailure as exc:
            output, truncated = self._capped(f"Error: {exc}")
            return result(output, "error", truncated=truncated)
        except Exception as exc:  # the tool's own failure becomes the model's observation
            output, truncated = self._capped(f"Error: the tool {name} failed: {_describe(exc)}")
            return result(output, "error", truncated=truncated)
        try:
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        except (TypeError, ValueError, RecursionError) as exc:
            return result(f"Error: the tool {name} returned a value that is not JSON: {_describe(exc)}", "error")
        output, truncated = self._capped(text)
        return result(output, "ok", truncated=truncated)

    def _capped(self, text: str) -> tuple[str, bool]:
        if len(text) <= self.max_output:
            return text, False
        dropped = len(text) - self.max_output
        return text[: self.max_output] + f"\n[output truncated: {dropped:,} more characters]", True

    def argument_problems(self, tool: ToolSpec, arguments: Any) -> str | None:
        """What is wrong with ``arguments`` for the declared tool, or None."""
        if not isinstance(arguments, dict):
            return "the arguments must be a JSON object"
        parameters = tool.parameters
        if not isinstance(parameters, dict):
            return None
        key = (tool.name, json.dumps(parameters, sort_keys=True))
        schema = self._schemas.get(key)
        if schema is None:
            schema = self._schemas[key] = InputsSchema(parameters)
        issues = schema.issues(arguments)
        if not issues:
            return None
        shown = "; ".join(f"{issue.path or '/'}: {issue.message}" for issue in issues[:5])
        return shown + (f" (and {len(issues) - 5} more)" if len(issues) > 5 else "")
