"""``Executor``: the public entry of the runtime (what a run returns is
``registry.executor.results``).

    executor = Executor(registry=RegistryClient(url, release="^1.2"), model=OpenAIChatModel(...))
    result = executor.run("support/gated_answer", {"question": "..."})
    result.outcome, result.output, result.tag, result.trace.as_text()

The release is resolved once, when the run fetches its agent: a composite's
answer carries every agent it can reach at that release, so a tag pushed
mid-run changes nothing. Before the first model call the run checks what
the operator bound: every tool any reachable agent declares, every
retriever, a model name for every leaf; what is missing fails the run at
once, naming it. After that nothing escapes a run but its ``RunResult``.

``arun`` is the same on the caller's event loop; ``run`` keeps a loop of
its own on a background thread (tool providers such as MCP sessions live on
the loop that started them), so one executor serves either style, not both.
``astream`` and ``stream`` make the same run and yield its events as they
happen (``registry.executor.events``), its ``RunResult`` last; ``astep``
and ``step`` give them to a sink as they happen, when given one.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import AsyncGenerator, Collection, Iterator, Mapping, Sequence
from typing import Any

from registry.client import Agent
from registry.errors import ConfigurationError, InvalidDefinition, InvalidRequest
from registry.executor.events import Event
from registry.executor.journal import Journal, PendingAction, StepControl
from registry.executor.otel import emit
from registry.executor.patterns import run_agent
from registry.executor.results import RunResult as RunResult
from registry.executor.results import StepResult as StepResult
from registry.executor.retrieval import Retriever
from registry.executor.runtime import (
    COMPLETED,
    FAILED,
    Budget,
    Failed,
    ModelNames,
    NotBound,
    RunContext,
    RunStopped,
    Totals,
    ValueCache,
    reference,
)
from registry.executor.scripted import ScriptedModel
from registry.executor.sources import AgentSource, AsyncAgentSource, fetch
from registry.executor.streaming import EventChannel, EventSink, EventsOnLoop, EventTarget, ObservedSpan, SinkTarget
from registry.executor.tools import DEFAULT_MAX_TOOL_OUTPUT, DEFAULT_TOOL_TIMEOUT, ToolBox, ToolProvider
from registry.executor.trace import Span, Trace
from registry.providers.chat import ChatModel

_UNLIMITED_CALLS = 10**9
_RELEASE_KEY = "/release"
"""Where a step run of an agent named by ``usecase/name`` keeps the release it is pinned to."""
log = logging.getLogger("registry.executor")


class Executor:
    """Runs agents fetched through ``registry.client`` against ``model``,
    with the tools and retrievers the operator binds."""

    def __init__(
        self,
        *,
        model: ChatModel,
        registry: AgentSource | AsyncAgentSource | None = None,
        tools: Sequence[ToolProvider] = (),
        retrievers: Mapping[str, Retriever] | None = None,
        model_name: str | None = None,
        model_map: Mapping[str, str] | None = None,
        tool_timeout: float = DEFAULT_TOOL_TIMEOUT,
        max_tool_output: int = DEFAULT_MAX_TOOL_OUTPUT,
        run_timeout: float | None = None,
        tracer_provider: Any = None,
        require_approval: Collection[str] = (),
        warn_unused_model_map: bool = False,
    ) -> None:
        """``registry``: what fetches agents named as ``usecase/name``, a
        ``RegistryClient`` or an ``AsyncRegistryClient`` (the protocols of
        ``registry.executor.sources``; not needed when every run is given an
        ``Agent``). ``model_name`` overrides every definition's model;
        ``model_map`` maps a definition's model name to another.
        ``run_timeout``: seconds any one run may take, on top of composites' own limits.
        ``tracer_provider``: where OpenTelemetry spans go (default: the global one).
        ``require_approval``: tools that are never called before a person
        approves (as are tools declared with ``x-requires-approval: true``):
        in step by step runs (``astep``) a call waits for a decision; a run
        (``arun``), with no one to ask, ends ``blocked`` instead of making it.
        ``warn_unused_model_map``: each run's result warns about entries of
        ``model_map`` that no agent of the run names. Right for an executor
        that makes one run (``prompt-registry run``); wrong for one that
        serves many agents, where an entry for another agent's model is
        not unused, so it is off by default."""
        self.model = model
        self.registry = registry
        self.toolbox = ToolBox(tools, timeout=tool_timeout, max_output=max_tool_output)
        self.retrievers = dict(retrievers or {})
        scripted = model  # a recording or a cache of a scripted model (their inner) is scripted too
        while not isinstance(scripted, ScriptedModel) and hasattr(scripted, "inner"):
            scripted = scripted.inner
        fallback = "scripted" if isinstance(scripted, ScriptedModel) else None
        self.names = ModelNames(model_name, dict(model_map or {}), fallback)
        self.run_timeout = run_timeout
        self.tracer_provider = tracer_provider
        self.require_approval = frozenset(require_approval)
        self.warn_unused_model_map = warn_unused_model_map
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started_on: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._warned: set[str] = set()

    # --- async ---------------------------------------------------------------------------

    async def arun(
        self,
        agent: str | Agent,
        inputs: Mapping[str, Any] | None = None,
        *,
        release: str | None = None,
        history: Sequence[Mapping[str, Any]] = (),
    ) -> RunResult:
        """Run ``agent`` (``usecase/name`` or a fetched ``Agent``) once.

        Fetching it may raise the client's errors (``AgentNotFound``,
        ``ReleaseNotFound``, ``RegistryUnavailable``...); binding the
        executor's tools may raise ``ConfigurationError``. Once the agent
        is in hand, every end is a ``RunResult``.
        """
        fetched = agent if isinstance(agent, Agent) else await self._fetch(agent, release)
        await self._start()
        return await self._run(fetched, dict(inputs or {}), history)

    async def astream(
        self,
        agent: str | Agent,
        inputs: Mapping[str, Any] | None = None,
        *,
        release: str | None = None,
        history: Sequence[Mapping[str, Any]] = (),
    ) -> AsyncGenerator[Event, None]:
        """Run ``agent`` as ``arun`` does, yielding its events as they happen:
        the answer's text as it streams, tool calls and results, parses,
        gates, spans, and last an ``OutcomeEvent`` with the ``RunResult``
        (what ``arun`` would have returned). Fetching the agent raises
        before the first event, as ``arun`` raises.

        Closing the iterator (``aclose``, or cancelling the task reading it)
        ends the run there, closing the model's stream: nothing more is
        yielded, not even an outcome.
        """
        fetched = agent if isinstance(agent, Agent) else await self._fetch(agent, release)
        await self._start()
        channel = EventChannel()
        root = self._root(fetched, channel)
        run = self._run(fetched, dict(inputs or {}), history, root=root, answer=channel)
        async with contextlib.aclosing(channel.follow(run, root)) as events:
            async for event in events:
                yield event

    async def aclose(self) -> None:
        """Close tool providers and the model."""
        await self.toolbox.aclose()
        await self.model.aclose()

    async def __aenter__(self) -> Executor:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _fetch(self, name: str, release: str | None) -> Agent:
        usecase, slash, agent_name = name.partition("/")
        if not slash or not usecase or not agent_name or "/" in agent_name:
            raise InvalidRequest(f"agent {name!r} is not usecase/name")
        if self.registry is None:
            raise ConfigurationError("this executor has no registry client to fetch agents with")
        return await fetch(self.registry, usecase, agent_name, release=release)

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        if self._started_on is None:
            self._started_on = loop
        elif self._started_on is not loop:
            raise ConfigurationError("an Executor serves one event loop: use run() or arun(), not both")
        # Every caller awaits the one shared start: a second caller that came
        # while the first was starting must not run before the tools are bound.
        await self.toolbox.start()

    async def _run(
        self,
        agent: Agent,
        inputs: dict[str, Any],
        history: Sequence[Mapping[str, Any]],
        *,
        root: Span | None = None,
        journal: Journal | None = None,
        control: StepControl | None = None,
        answer: EventTarget | None = None,
    ) -> RunResult:
        started = time.monotonic()
        name = reference(agent)
        root = root or self._root(agent)
        ctx = self._context(agent, journal, control)
        if answer is not None:
            ctx = dataclasses.replace(ctx, answer=answer)
        outcome, output, data, error = COMPLETED, None, None, None
        try:
            self._check_bindings(ctx)
            if self.warn_unused_model_map:
                ctx.totals.warnings.extend(self._model_map_warnings(ctx, name))
            result = await run_agent(agent, inputs, ctx, root, history=history)
            output, data = result.text, result.data
            if result.parse_error is not None and agent.compiled.spec.parser_type == "json":
                raise Failed(f"the reply of {name} does not parse: {result.parse_error}")
        except RunStopped as stop:
            outcome, output, error = stop.outcome, stop.output, stop.message
            root.fail(stop.message, reason=stop.reason)
        except Exception as exc:  # a bug of ours still ends the run with an outcome, and is logged
            log.exception("the run of %s failed on an internal error", name)
            outcome, error = FAILED, f"internal error of the executor ({type(exc).__name__}: {exc}); please report it"
            root.fail(error)
        finally:
            root.end()
        totals = ctx.totals
        trace = self._trace(root, outcome, totals)
        return RunResult(
            outcome=outcome,
            output=output,
            data=data,
            error=error,
            agent=name,
            release=agent.release,
            digest=agent.digest,
            llm_calls=totals.llm_calls,
            llm_replies=totals.llm_replies,
            usage=totals.usage(),
            seconds=time.monotonic() - started,
            trace=trace,
            warnings=tuple(totals.warnings),
        )

    def _trace(self, root: Span, outcome: str, totals: Totals) -> Trace:
        """The run's trace, its root span given what the run did; its warnings
        logged, its spans exported."""
        root.set(
            **{
                "registry.outcome": outcome,
                "registry.llm_calls": totals.llm_calls,
                "registry.llm_replies": totals.llm_replies,
            }
        )
        if totals.warnings:
            root.set(**{"registry.warnings": list(totals.warnings)})
        self._log(totals.warnings)
        trace = Trace(root)
        emit(trace, self.tracer_provider)
        return trace

    def _context(self, agent: Agent, journal: Journal | None, control: StepControl | None) -> RunContext:
        name = reference(agent)
        ctx = RunContext(
            model=self.model,
            tools=self.toolbox,
            retrievers=self.retrievers,
            names=self.names,
            agents={**agent.agents, name: agent},
            release=agent.release,
            budget=Budget(_UNLIMITED_CALLS, name),
            totals=Totals(),
            values=ValueCache(),
            journal=journal,
            control=control,
            approvals=self.require_approval,
        )
        if self.run_timeout is not None:
            ctx = ctx.narrowed(budget=ctx.budget, timeout=self.run_timeout)
        return ctx

    def _model_map_warnings(self, ctx: RunContext, name: str) -> list[str]:
        """A line on the entries of ``model_map`` that no agent of the run names."""
        mapping, override = self.names.mapping, self.names.override
        named = sorted({model for m in ctx.agents.values() if (model := m.compiled.spec.model_name)})
        unused = [f"{source}={target}" for source, target in mapping.items() if override or source not in named]
        if not unused:
            return []
        entries = f"model map {', '.join(unused)} (--model-map)"
        if override:
            return [f"{entries} is not used: the model name {override!r} (--model-name) is sent for every call"]
        return [f"{entries} matched no model the agents of {name} name ({', '.join(named) or 'none'})"]

    def _log(self, warnings: Sequence[str]) -> None:
        """Log each warning once per executor: a service runs the same agents again and again."""
        for warning in warnings:
            if warning not in self._warned:
                self._warned.add(warning)
                log.warning("%s", warning)

    def _root(self, agent: Agent, channel: EventTarget | None = None) -> Span:
        """The run's span: one whose tree reports to ``channel`` when the run streams."""
        name = reference(agent)
        attributes = {
            "registry.agent": name,
            "registry.release.tag": agent.tag,
            "registry.release.commit": agent.commit,
            "registry.release.requested": agent.release.requested,
            "registry.agent.digest": agent.digest,
            "registry.model": self.model.description,
        }
        if channel is None:
            return Span(f"run {name}", "run", attributes)
        return ObservedSpan(f"run {name}", "run", attributes, channel=channel, agent=name)

    # --- step by step ----------------------------------------------------------------------

    async def astep(
        self,
        agent: str | Agent,
        inputs: Mapping[str, Any],
        *,
        journal: Journal,
        release: str | None = None,
        history: Sequence[Mapping[str, Any]] = (),
        sink: EventSink | None = None,
    ) -> StepResult:
        """Advance the run of ``agent`` (``usecase/name`` or a fetched
        ``Agent``) with ``inputs`` by one step.

        The run replays what ``journal`` holds (model replies, tool results,
        passages, decisions) and makes the first model round it does not
        hold live, with that round's tool calls, recording each as it
        happens. The step ends there, or where a tool that needs approval
        waits for a decision (``StepResult.action``: record the decision
        under its ``key`` and step again), or where the run ends
        (``is_last``).

        An agent named by ``usecase/name`` is fetched at ``release`` by the
        first step, which records the tag in ``journal``; later steps fetch
        that tag, so that a release published between two steps never
        changes the run under its own journal.

        ``sink`` receives the step's events as they happen, as ``astream``
        yields them (the answer's text as it streams, tool calls and
        results...), but for what the step replays: an earlier step gave
        those. It gets no ``OutcomeEvent``: the ``StepResult`` says how the
        step ended. Every event has been given once this returns.
        """
        if not isinstance(agent, Agent):
            agent = await self._fetch_pinned(agent, release, journal)
        await self._start()
        control = StepControl()
        target = SinkTarget(sink) if sink is not None else None
        root = self._root(agent, target)
        run = asyncio.ensure_future(
            self._run(agent, dict(inputs), history, root=root, journal=journal, control=control, answer=target)
        )
        ended = asyncio.ensure_future(control.ended.wait())
        try:
            await asyncio.wait({run, ended}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ended.cancel()
        if run.done():
            result = run.result()
            return StepResult(
                is_last=True, output=result.output, action=None, replies=tuple(control.replies), result=result
            )
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run
        root.end()
        action = control.pending[0] if control.pending else None
        output = control.replies[-1] if control.replies else None
        return StepResult(
            is_last=False, output=output, action=action, replies=tuple(control.replies), trace=Trace(root)
        )

    async def _fetch_pinned(self, name: str, release: str | None, journal: Journal) -> Agent:
        pinned = journal.get(_RELEASE_KEY)
        if pinned is None:
            fetched = await self._fetch(name, release)
            journal.record(_RELEASE_KEY, {"kind": "release", "tag": fetched.tag, "commit": fetched.commit})
            return fetched
        return await self._fetch(name, str(pinned["tag"]))

    def check_decision(self, agent: Agent, action: PendingAction, arguments: Any) -> str | None:
        """What is wrong with edited ``arguments`` for the tool of ``action``, or None."""
        member = agent if reference(agent) == action.agent else agent.agents.get(action.agent)
        tool = member.compiled.spec.tool(action.tool) if member is not None else None
        if tool is None:
            return f"{action.agent} declares no tool {action.tool!r}"
        return self.toolbox.argument_problems(tool, arguments)

    def _check_bindings(self, ctx: RunContext) -> None:
        declared: dict[str, list[str]] = {}
        for name, member in ctx.agents.items():
            try:
                member.compiled  # noqa: B018 - compiling checks the definition once, before any call
            except InvalidDefinition as exc:
                raise NotBound(f"{name} is invalid: {exc.detail}") from exc
            if member.is_composite:
                continue
            spec = member.compiled.spec
            if spec.calls_tools:
                for tool in spec.tools:
                    declared.setdefault(tool.name, []).append(name)
            if spec.retriever is not None and spec.retriever not in ctx.retrievers:
                bound = ", ".join(sorted(ctx.retrievers)) or "none"
                raise NotBound(f"{name} retrieves from {spec.retriever!r}, which no --retriever binds (bound: {bound})")
            ctx.names.resolve(spec.model_name, name)
            problem = ctx.model.binding_problem(spec.model.provider if spec.model is not None else None)
            if problem is not None:
                raise NotBound(f"{name}: {problem}")
        try:
            ctx.tools.check_bound(declared)
        except ConfigurationError as exc:
            raise NotBound(exc.detail) from exc

    # --- sync ----------------------------------------------------------------------------

    def run(
        self,
        agent: str | Agent,
        inputs: Mapping[str, Any] | None = None,
        *,
        release: str | None = None,
        history: Sequence[Mapping[str, Any]] = (),
    ) -> RunResult:
        """``arun`` from synchronous code, on the executor's own loop."""
        future = asyncio.run_coroutine_threadsafe(
            self.arun(agent, inputs, release=release, history=history), self._own_loop()
        )
        return future.result()

    def stream(
        self,
        agent: str | Agent,
        inputs: Mapping[str, Any] | None = None,
        *,
        release: str | None = None,
        history: Sequence[Mapping[str, Any]] = (),
    ) -> Iterator[Event]:
        """``astream`` from synchronous code, on the executor's own loop.
        Closing the iterator (``close``, or leaving a ``for`` loop over it
        early) ends the run, as closing ``astream`` does, before it returns."""
        events = EventsOnLoop(self.astream(agent, inputs, release=release, history=history), self._own_loop())
        try:
            while (event := events.next()) is not None:
                yield event
        finally:
            events.close()

    def step(
        self,
        agent: str | Agent,
        inputs: Mapping[str, Any],
        *,
        journal: Journal,
        release: str | None = None,
        history: Sequence[Mapping[str, Any]] = (),
        sink: EventSink | None = None,
    ) -> StepResult:
        """``astep`` from synchronous code, on the executor's own loop
        (where ``sink`` is called)."""
        future = asyncio.run_coroutine_threadsafe(
            self.astep(agent, inputs, journal=journal, release=release, history=history, sink=sink),
            self._own_loop(),
        )
        return future.result()

    @property
    def names_every_model(self) -> bool:
        """Whether a definition that names no model still runs: the operator
        names one for every call (``model_name``), or the model needs none
        (the scripted model)."""
        return self.names.override is not None or self.names.fallback is not None

    def start(self) -> None:
        """Start the tool providers (MCP servers) now, on the loop ``run``
        and ``step`` use, rather than at the first run: their tools are then
        known to ``toolbox.bound``, so a service can refuse an agent whose
        tools nothing binds before running it. Raises ``ConfigurationError``
        when a provider cannot start; the next call (or run) tries it again.
        Calls from several threads share one start: each returns once every
        tool is bound."""
        asyncio.run_coroutine_threadsafe(self._start(), self._own_loop()).result()

    def close(self) -> None:
        """Close what ``run`` opened: providers, the model, the loop's thread."""
        loop = self._loop
        if loop is None:
            asyncio.run(self.aclose())
            return
        asyncio.run_coroutine_threadsafe(self.aclose(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join()
        loop.close()
        self._loop = None

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _own_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=loop.run_forever, name="registry-executor", daemon=True)
                self._thread.start()
                self._loop = loop
            return self._loop
