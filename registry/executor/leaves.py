"""The loops of a leaf agent, one per ``type``, driven by its definition.

- ``vanilla``: render, one model call (prior turns of a conversation go
  between the rendered system messages and the rest).
- ``tool_calling``: the declared tools go to the model in the Chat
  Completions function format; while it asks for tools, each is run and its
  result appended as a ``tool`` message; ``max_iterations`` (default 10)
  bounds the model calls.
- ``react``: each reply is read by the agent's ``output_parser``: a tool call
  runs the tool and the observation goes back as a user message
  (``Observation: ...`` for ``react_text``, ``{"observation": ...}`` for
  ``react_json``), or, when the template places ``{agent_scratchpad}``, into
  the scratchpad, and the messages are rendered again around it; a parse
  error sends its observation so the model can correct itself; a final
  answer ends the loop.

Placeholders the render's inputs leave are filled first
(``registry.executor.runtime_placeholders``); one nothing fills fails the
run before its first call.
- ``rag``: with ``force_retrieval``, ``top_k`` passages are retrieved for the
  query input before the first call and passed as the input ``passages``
  (a list of ``{title, text}``); otherwise the model is offered a ``retrieve``
  tool for one round, then answers.

The reply of a leaf with a ``json`` parser is parsed; the provider is asked
for JSON (``registry.executor.structured``), and a reply that does not parse
gets ``output_parser.repair_attempts`` more rounds with the parse error sent
back. One that still does not parse fails the run only where its value is
needed (a gate, a classifier...).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

from registry.client import Agent
from registry.errors import InvalidInputs, ModelError, RenderError
from registry.executor import provenance
from registry.executor.journal import PendingAction
from registry.executor.runtime import AgentOutput, Blocked, Exhausted, Failed, RunContext, reference
from registry.executor.runtime_placeholders import PlacedPrompt, history_text, scratchpad_step, unfilled
from registry.executor.streaming import stream_reply, write_text
from registry.executor.structured import repair_attempts, repair_request, response_format
from registry.executor.tools import ToolResult
from registry.executor.trace import Span
from registry.executor.turns import PASSAGES, assistant_with_calls, observation, retrieval_query
from registry.format.composite import DEFAULT_TOOL_ROUNDS
from registry.format.parsers import FinalAnswer, ParseError, ToolCall
from registry.format.spec import ToolSpec
from registry.models import shorten
from registry.providers.chat import ChatReply, ChatRequest

DEFAULT_TOP_K = 4
RETRIEVE_TOOL = "retrieve"


async def run_leaf(
    agent: Agent, inputs: Mapping[str, Any], ctx: RunContext, parent: Span, *, history: Sequence[Mapping[str, Any]] = ()
) -> AgentOutput:
    """Run one leaf agent to its output; ``RunStopped`` when it cannot finish."""
    kind = agent.compiled.spec.kind
    name = reference(agent)
    with parent.open(
        f"invoke_agent {name}",
        "invoke_agent",
        **{
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": name,
            "registry.agent.type": kind,
            "registry.agent.digest": agent.digest,
            "registry.release.tag": agent.tag,
            "registry.release.commit": agent.commit,
        },
    ) as span:
        loop = _Loop(agent, ctx, span)
        values = dict(inputs)
        if kind == "rag":
            values = await loop.with_passages(values)
        messages = loop.render(values, history)
        if kind == "tool_calling":
            output = await loop.tool_calling(messages)
        elif kind == "react":
            output = await loop.react(messages)
        elif kind == "rag" and not _forced(agent):
            output = await loop.rag_with_tool(messages)
        else:
            output = await loop.answer(await loop.chat(messages), messages)
        span.set(**{"registry.output": output.text})
        if not loop.streamed:  # streaming: a reply that could not stream as it came is the answer now, whole
            write_text(ctx.answer, output.text, agent=name, span=span, path=ctx.path)
        return output


def _forced(agent: Agent) -> bool:
    rag = agent.compiled.spec.rag
    return rag is not None and rag.force_retrieval


class _Loop:
    """One leaf's run: its messages so far and the calls it makes."""

    placed: PlacedPrompt
    """The rendered prompt and the executor's values for its placeholders (``render`` sets it)."""

    def __init__(self, agent: Agent, ctx: RunContext, span: Span) -> None:
        self.agent = agent
        self.spec = agent.compiled.spec
        self.ctx = ctx
        self.span = span
        self.name = reference(agent)
        self.sent = 0
        """How many messages earlier model calls have carried: each call's span keeps only the new ones."""
        self.round = 0
        """Model calls so far: with the context's path, the key of each event in a journal."""
        self.streamed = False
        """Whether a reply's text streamed as the answer while it came (``_live_chat``)."""
        self.called_tools = False
        """Whether the model has called a tool yet: a forced ``tool_choice`` holds until it has."""

    # --- rendering -----------------------------------------------------------------------

    def render(self, inputs: dict[str, Any], history: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The first messages: the prompt rendered, the placeholders its inputs
        leave filled from the runtime's own variables, and the prior turns of
        a conversation after its system messages (as ``{chat_history}``
        instead, when the template places them)."""
        try:
            prompt = self.agent.render(inputs)
        except (InvalidInputs, RenderError) as exc:
            raise Failed(f"cannot render {self.name}: {exc.detail}") from exc
        left = {placeholder.name for placeholder in prompt.placeholders}
        for placeholder in prompt.placeholders:
            if placeholder.name not in self.spec.runtime_placeholders:
                raise Failed(unfilled(self.name, prompt, placeholder))
        values: dict[str, str] = {}
        if "chat_history" in left:
            values["chat_history"] = history_text(history)
            history = ()
        if "agent_scratchpad" in left:
            values["agent_scratchpad"] = ""
        self.placed = PlacedPrompt(prompt, values, tuple(dict(turn) for turn in history))
        self.span.set(**{"registry.rendered_messages": len(prompt.messages)})
        if left:
            self.span.set(**{"registry.placeholders": sorted(left)})
        return self.placed.messages()

    # --- the model -----------------------------------------------------------------------

    async def chat(
        self, messages: list[dict[str, Any]], tools: Sequence[Mapping[str, Any]] = (), *, tool_choice: str | None = None
    ) -> ChatReply:
        """One model call; ``tool_choice`` overrides the definition's for this round."""
        ctx = self.ctx
        ctx.check_time()
        ctx.budget.spend()
        ctx.totals.llm_calls += 1
        request = ChatRequest(
            model=ctx.names.resolve(self.spec.model_name, self.name),
            messages=tuple(dict(m) for m in messages),
            tools=tuple(tools),
            params=self._params(),
            provider=self.spec.model.provider if self.spec.model is not None else None,
            tool_choice=self._tool_choice(tools, tool_choice),
            response_format=None if tools else response_format(self.spec, self.agent.name),
            timeout=self._timeout(),
            agent=self.name,
        )
        new = messages[self.sent :]
        self.sent = len(messages)
        with self.span.open(
            f"chat {request.model}",
            "chat",
            **{
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": request.model,
                "registry.input_messages": [dict(m) for m in new],
                "registry.input_message_count": len(messages),
                "registry.tools_offered": [t["function"]["name"] for t in tools],
                **{f"gen_ai.request.{k}": v for k, v in request.params.items()},
                **provenance.requested(request),
            },
        ) as span:
            if request.response_format is not None:
                span.set(**{"registry.response_format": request.response_format.as_dict()})
            self.round += 1
            key = f"{ctx.path}/chat:{self.round}"
            recorded = ctx.journal.get(key) if ctx.journal is not None else None
            if recorded is not None:
                reply = ChatReply.from_dict(recorded["reply"])
                span.set(**{"registry.replayed": True})
            else:
                reply = await self._live_chat(request, span)
                if ctx.journal is not None:
                    ctx.journal.record(key, {"kind": "model", "reply": reply.as_dict()})
            ctx.totals.replied(reply.usage)
            span.set(**provenance.reply_attributes(reply), **provenance.served(request, reply))
            mismatch = provenance.model_mismatch(self.name, request, reply)
            if mismatch is not None and mismatch not in ctx.totals.warnings:
                ctx.totals.warnings.append(mismatch)
        return reply

    async def _live_chat(self, request: ChatRequest, span: Span) -> ChatReply:
        ctx = self.ctx
        if ctx.control is not None:
            await ctx.control.begin_model_call()
        text = None
        try:
            if ctx.answer is not None and self._streams_as_answer(request):
                self.streamed = True
                reply = await stream_reply(ctx.model, request, ctx.answer, agent=self.name, span=span, path=ctx.path)
            else:
                reply = await ctx.model.complete(request)
            text = reply.content
        except ModelError as exc:
            span.set(**{"registry.error.reason": exc.reason, "registry.error.transient": exc.transient})
            left = ctx.remaining()
            if exc.reason == "timeout" and left is not None and left <= 0.05:
                # The call was cut short by the run's own deadline.
                raise Exhausted("the run reached its time limit while waiting for the model") from exc
            raise Failed(f"the model call for {self.name} failed: {exc.detail}") from exc
        finally:
            if ctx.control is not None:
                ctx.control.end_model_call(text)
        return reply

    def _streams_as_answer(self, request: ChatRequest) -> bool:
        """Whether the reply to ``request`` is this leaf's answer as it comes:
        a reply offered no tools, of a leaf whose only reading of it is the
        text. (A ReAct reply is read when whole, a reply offered tools may
        call one after its text, a ``json`` reply may be replaced by a repair.)"""
        return not request.tools and self.spec.kind in ("vanilla", "rag") and self.spec.parser_type != "json"

    def _tool_choice(self, tools: Sequence[Mapping[str, Any]], override: str | None) -> str | None:
        if not tools:
            return None
        choice = override or self.spec.tool_choice or "auto"
        if override is None and self.called_tools and choice not in ("auto", "none"):
            # Forced on every round, the model could never answer: once it has
            # called a tool, as `required` or a tool's name asked, it decides.
            return "auto"
        return choice

    def _params(self) -> dict[str, Any]:
        """Every key of ``model.params``: the adapter maps each to its provider's vocabulary."""
        params = dict(self.spec.model.params) if self.spec.model is not None else {}
        stop = self.spec.params.stop
        if stop:
            params["stop"] = stop
        return params

    def _timeout(self) -> float | None:
        timeout = self.spec.params.timeout
        left = self.ctx.remaining()
        if left is None:
            return timeout
        return min(timeout, left) if timeout is not None else left

    async def answer(
        self, reply: ChatReply, messages: list[dict[str, Any]], tools: Sequence[Mapping[str, Any]] = ()
    ) -> AgentOutput:
        """The output of ``reply``, which ends the loop; one its ``json`` parser
        refuses gets the agent's repair rounds, each sending the parse error back."""
        output = self.finish(reply)
        attempts = repair_attempts(self.spec)
        for attempt in range(1, attempts + 1):
            if output.parse_error is None:
                break
            if not self.ctx.budget.has_room():
                # A repair is a second chance, never a reason to exhaust the
                # run: the release check's worst case does not count repair
                # rounds (so that a valid composite stays valid), and a run
                # whose budget is spent keeps the parse error as it stands.
                self.span.set(**{"registry.repair.skipped": "the model-call budget is spent"})
                break
            outer = self.span
            with outer.open(
                f"repair {attempt}/{attempts}",
                "repair",
                **{
                    "registry.repair.attempt": attempt,
                    "registry.repair.attempts": attempts,
                    "registry.repair.reason": output.parse_reason,
                    "registry.repair.error": output.parse_error,
                },
            ) as span:
                messages.append({"role": "assistant", "content": reply.content})
                messages.append({"role": "user", "content": repair_request(output.parse_error)})
                self.span = span  # the round's model call and parse belong to it
                try:
                    # A tool agent keeps its tools in the request (its history holds
                    # their calls) but may not call them: this round fixes the reply.
                    reply = await self.chat(messages, tools, tool_choice="none" if tools else None)
                    output = self.finish(reply)
                finally:
                    self.span = outer
                fixed = output.parse_error is None
                span.set(**{"registry.decision": "parsed" if fixed else f"still {output.parse_reason}"})
        return output

    def finish(self, reply: ChatReply) -> AgentOutput:
        """The output of a reply that ends the loop, parsed when the agent says how."""
        if self.spec.parser_type != "json":
            return AgentOutput(reply.content)
        parsed = self._parse(reply.content)
        if isinstance(parsed, FinalAnswer):
            return AgentOutput(reply.content, parsed.data)
        observation = parsed.observation if isinstance(parsed, ParseError) else "not a final answer"
        reason = parsed.reason if isinstance(parsed, ParseError) else "not_final_answer"
        return AgentOutput(reply.content, None, parse_error=observation, parse_reason=reason)

    def _parse(self, text: str) -> FinalAnswer | ToolCall | ParseError:
        parsed = self.agent.parse(text)
        with self.span.open("parse", "parse", **{"registry.parse.kind": type(parsed).__name__}) as span:
            span.set(**{"registry.parse.result": parsed.as_dict()})
        return parsed

    # --- tools ---------------------------------------------------------------------------

    def declared(self) -> dict[str, ToolSpec]:
        return {tool.name: tool for tool in self.spec.tools}

    async def run_tool(
        self, tool: ToolSpec, arguments: Any, *, call_id: str | None, index: int, thought: str | None
    ) -> ToolResult:
        """Call a tool the model asked for (the ``index``-th of this round),
        or replay its recorded result; a tool that needs approval waits for
        a decision first."""
        ctx = self.ctx
        ctx.check_time()
        name = tool.name
        key = f"{ctx.path}/chat:{self.round}/tool:{index}"
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "registry.tool.arguments": arguments,
        }
        if call_id is not None:
            attributes["gen_ai.tool.call.id"] = call_id
        recorded = ctx.journal.get(key) if ctx.journal is not None else None
        if recorded is not None and "result" in recorded:
            # Marked as it opens, not after: a step's sink is then not told of
            # a call an earlier step made.
            attributes["registry.replayed"] = True
        with self.span.open(f"execute_tool {name}", "execute_tool", **attributes) as span:
            if recorded is not None and "result" in recorded:
                result = ToolResult.from_dict(recorded["result"])
            elif recorded is not None:
                # Started and never finished: the process died during the call.
                # It may have had effects, so it is not made again.
                result = ToolResult(
                    name,
                    arguments if isinstance(arguments, dict) else {},
                    f"Error: the call of {name} was interrupted (the executor stopped) and its result is"
                    " unknown; it may or may not have taken effect.",
                    "interrupted",
                    0.0,
                )
                self._record(key, {"kind": "tool", "result": result.as_dict()})
            else:
                result = await self._live_tool(tool, arguments, key, thought, span)
            span.set(
                **{
                    "registry.tool.status": result.status,
                    "registry.tool.output": result.output,
                    "registry.tool.truncated": result.truncated,
                    "registry.tool.provider": result.provider,
                }
            )
            if not result.ok:
                span.fail(shorten(result.output, 300))
        return result

    async def _live_tool(self, tool: ToolSpec, arguments: Any, key: str, thought: str | None, span: Span) -> ToolResult:
        ctx = self.ctx
        name = tool.name
        if name in ctx.approvals or tool.requires_approval:
            if ctx.control is None:
                # A run (not a step run) has no one to ask: the call is never
                # made, and the run stops as it does when a gate says no.
                span.set(**{"registry.tool.status": "needs_approval"})
                raise Blocked(
                    f"the call of tool {name!r} needs a person's approval, which this run cannot ask for:"
                    " run the agent as a task (prompt-registry agents serve) or step by step (Executor.step)"
                )
            decision = ctx.journal.get(f"{key}:decision") if ctx.journal is not None else None
            if decision is None:
                span.set(**{"registry.tool.awaiting_decision": True})
                proposed = arguments if isinstance(arguments, dict) else {}
                await ctx.control.wait_for_decision(
                    PendingAction(f"{key}:decision", self.name, name, proposed, thought)
                )
            assert decision is not None  # the step ended while it waited; a later step brings one
            span.set(**{"registry.tool.decision": decision.get("decision")})
            if decision.get("decision") == "reject":
                reason = str(decision.get("reason") or "no reason given")
                result = ToolResult(name, arguments, f"The user rejected this call: {reason}", "rejected", 0.0)
                self._record(key, {"kind": "tool", "result": result.as_dict()})
                return result
            if decision.get("decision") == "edit":
                arguments = decision.get("arguments")
                span.set(**{"registry.tool.arguments": arguments})
        self._record(key, {"kind": "tool", "status": "started", "arguments": arguments})
        if ctx.control is not None:
            ctx.control.begin_work()
        try:
            result = await ctx.tools.call(tool, arguments)
        finally:
            if ctx.control is not None:
                ctx.control.end_work()
        self._record(key, {"kind": "tool", "result": result.as_dict()})
        return result

    def _record(self, key: str, event: Mapping[str, Any]) -> None:
        if self.ctx.journal is not None:
            self.ctx.journal.record(key, event)

    async def tool_calling(self, messages: list[dict[str, Any]]) -> AgentOutput:
        declared = self.declared()
        tools = [tool.as_function() for tool in declared.values()]
        limit = _max_iterations(self.agent)
        for number in range(1, limit + 1):
            reply = await self.chat(messages, tools)
            if not reply.tool_calls:
                return await self.answer(reply, messages, tools)
            if number == limit:
                raise Exhausted(
                    f"{self.name} still asked for tools after {limit} model calls (max_iterations {limit})",
                    output=reply.content or None,
                )
            messages.append(assistant_with_calls(reply))
            self.called_tools = True
            for index, call in enumerate(reply.tool_calls):
                output = await self._native_call(declared, call, index, reply.content or None)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
        raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover

    async def _native_call(self, declared: Mapping[str, ToolSpec], call: Any, index: int, thought: str | None) -> str:
        tool = declared.get(call.name)
        if tool is None:
            names = ", ".join(declared) or "none"
            return f"Error: there is no tool named {shorten(call.name)!r}; the tools are: {names}."
        try:
            arguments = json.loads(call.arguments) if call.arguments.strip() else {}
        except ValueError as exc:
            return f"Error: the arguments of {call.name} are not valid JSON ({exc}); call it again with a JSON object."
        return (await self.run_tool(tool, arguments, call_id=call.id, index=index, thought=thought)).output

    async def react(self, messages: list[dict[str, Any]]) -> AgentOutput:
        """The ReAct loop. When the template places ``{agent_scratchpad}``,
        each round renders the messages again with the steps so far in it;
        otherwise each step is appended as an assistant and a user turn."""
        declared = self.declared()
        parser_type = self.spec.parser_type
        limit = _max_iterations(self.agent)
        scratchpad: list[str] | None = [] if "agent_scratchpad" in self.placed.values else None
        for number in range(1, limit + 1):
            reply = await self.chat(messages)
            parsed = self._parse(reply.content)
            if isinstance(parsed, FinalAnswer):
                return AgentOutput(parsed.text, parsed.data)
            if isinstance(parsed, ToolCall) and parsed.name in declared:
                result = await self.run_tool(
                    declared[parsed.name], parsed.arguments, call_id=None, index=0, thought=parsed.thought
                )
                seen = result.output
            elif isinstance(parsed, ToolCall):  # the parser knows the same tools: kept for safety
                seen = f"Error: there is no tool named {shorten(parsed.name)!r}."
            else:
                seen = parsed.observation
            if number == limit:
                raise Exhausted(
                    f"{self.name} gave no final answer in {limit} model calls (max_iterations {limit})",
                    output=reply.content or None,
                )
            if scratchpad is None:
                messages.append({"role": "assistant", "content": reply.content})
                messages.append({"role": "user", "content": observation(parser_type, seen)})
            else:
                scratchpad.append(scratchpad_step(parser_type, reply.content, observation(parser_type, seen)))
                messages = self._with_scratchpad(messages, "\n".join(scratchpad))
        raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover

    def _with_scratchpad(self, messages: list[dict[str, Any]], scratchpad: str) -> list[dict[str, Any]]:
        """The messages rendered again around ``scratchpad``; the next call's
        span carries them from the first that changed."""
        renewed = self.placed.messages(agent_scratchpad=scratchpad)
        unchanged = 0
        while unchanged < min(len(messages), len(renewed)) and messages[unchanged] == renewed[unchanged]:
            unchanged += 1
        self.sent = unchanged
        return renewed

    # --- retrieval -----------------------------------------------------------------------

    def _retriever(self) -> tuple[Any, int]:
        rag = self.spec.rag
        assert rag is not None  # compile_definition refuses a rag agent without rag settings
        retriever = self.ctx.retrievers.get(rag.retriever)
        if retriever is None:
            raise Failed(f"{self.name} retrieves from {rag.retriever!r}, which no --retriever binds")
        return retriever, rag.top_k if rag.top_k is not None else DEFAULT_TOP_K

    async def retrieve(self, query: str) -> list[dict[str, str]]:
        retriever, top_k = self._retriever()
        ctx = self.ctx
        ctx.check_time()
        key = f"{ctx.path}/chat:{self.round}/retrieve"
        with self.span.open(
            "retrieve",
            "retrieve",
            **{"registry.retriever": retriever.description, "registry.query": query, "registry.top_k": top_k},
        ) as span:
            recorded = ctx.journal.get(key) if ctx.journal is not None else None
            if recorded is not None:
                passages = [dict(p) for p in recorded["passages"]]
                span.set(**{"registry.replayed": True})
            else:
                if ctx.control is not None:
                    ctx.control.begin_work()
                try:
                    found = await asyncio.to_thread(retriever.search, query, top_k=top_k)
                except Exception as exc:  # a store's failure is the run's, with its reason
                    raise Failed(f"retrieval for {self.name} failed: {type(exc).__name__}: {exc}") from exc
                finally:
                    if ctx.control is not None:
                        ctx.control.end_work()
                passages = [p.as_dict() for p in found]
                self._record(key, {"kind": "retrieve", "passages": passages})
            span.set(**{"registry.decision": f"{len(passages)} passages", "registry.passages": passages})
        return [{"title": p["title"], "text": p["text"]} for p in passages]

    async def with_passages(self, inputs: dict[str, Any]) -> dict[str, Any]:
        self._retriever()  # an unbound retriever fails before anything else
        if _forced(self.agent):
            return {**inputs, PASSAGES: await self.retrieve(retrieval_query(self.agent, inputs))}
        if PASSAGES in self.spec.declared_inputs and PASSAGES not in inputs:
            return {**inputs, PASSAGES: []}
        return inputs

    async def rag_with_tool(self, messages: list[dict[str, Any]]) -> AgentOutput:
        tool = {
            "type": "function",
            "function": {
                "name": RETRIEVE_TOOL,
                "description": "Search the documentation for passages relevant to a query.",
                "parameters": {"type": "object", "required": ["query"], "properties": {"query": {"type": "string"}}},
            },
        }
        # The model decides whether to retrieve (force_retrieval retrieves for it).
        reply = await self.chat(messages, [tool], tool_choice="auto")
        if not reply.tool_calls:
            return await self.answer(reply, messages)
        messages.append(assistant_with_calls(reply))
        for call in reply.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": await self._retrieve_call(call)})
        return await self.answer(await self.chat(messages), messages)

    async def _retrieve_call(self, call: Any) -> str:
        if call.name != RETRIEVE_TOOL:
            return f"Error: there is no tool named {shorten(call.name)!r}; the only tool is {RETRIEVE_TOOL}."
        try:
            arguments = json.loads(call.arguments or "{}")
        except ValueError:
            arguments = None
        query = arguments.get("query") if isinstance(arguments, dict) else None
        if not isinstance(query, str):
            return 'Error: call retrieve with {"query": "<text to search for>"}.'
        passages = await self.retrieve(query)
        return json.dumps(passages, ensure_ascii=False)


def _max_iterations(agent: Agent) -> int:
    return agent.compiled.spec.max_iterations or DEFAULT_TOOL_ROUNDS
