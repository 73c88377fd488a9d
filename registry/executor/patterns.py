"""The four patterns of a composite agent, run node by node.

``run_agent`` is the one entry: a leaf goes to ``registry.executor.leaves``,
a composite to its pattern here. Each call's inputs are its templates
rendered over what the run has so far (``registry.rendering.
CompiledValue``: one expression gives its value, anything else text), and
checked by the called agent against its own ``inputs``. A composite's
``limits`` narrow the run below it: its model calls count against its
``max_llm_calls`` and every budget above it, and it must end within its
``timeout``.

- ``chain``: steps in order; a gate whose JSON says ``allow: false`` ends the
  run ``blocked`` with its ``on_block`` text.
- ``route``: the classifier's label picks a route (or ``default``).
- ``parallel``: ``vote`` (one branch ``n`` times), ``section`` (different
  branches), ``map`` (one branch per chunk of a list), at most
  ``max_concurrency`` at a time (default 4); the first branch that stops the
  run cancels the others; ``aggregate`` makes one result. When no branch's
  reply passed its parser the run fails; when some did not, the run's
  warnings name them.
- ``evaluator_optimizer``: generator then evaluator, until a candidate passes
  or ``max_iterations`` rounds.

In a streamed run, each pattern passes where the answer's text goes to the
call whose output is its answer, held back until the pattern has decided
(``registry.executor.streaming``).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from registry.client import Agent
from registry.errors import InvalidInputs
from registry.executor.leaves import run_leaf
from registry.executor.runtime import (
    RENDER_LIMITS,
    AgentOutput,
    Blocked,
    Budget,
    Exhausted,
    Failed,
    RunContext,
    reference,
)
from registry.executor.streaming import AnswerText, Held, write_text
from registry.executor.trace import Span
from registry.models import shorten

DEFAULT_MAX_CONCURRENCY = 4


async def run_agent(
    agent: Agent,
    inputs: Mapping[str, Any],
    ctx: RunContext,
    parent: Span,
    *,
    history: Sequence[Mapping[str, Any]] = (),
) -> AgentOutput:
    """Run ``agent`` (leaf or composite) with ``inputs`` to its output."""
    if not agent.is_composite:
        return await run_leaf(agent, inputs, ctx, parent, history=history)
    return await _Composite(agent, ctx).run(inputs, parent)


class _Composite:
    def __init__(self, agent: Agent, ctx: RunContext) -> None:
        self.agent = agent
        self.name = reference(agent)
        pattern = agent.compiled.pattern
        assert pattern is not None  # a composite's compiled agent has its pattern
        self.kind = pattern.kind
        self.pattern: Mapping[str, Any] = pattern.raw
        limits = self.pattern.get("limits") or {}
        budget = Budget(pattern.max_llm_calls, self.name, ctx.budget)
        self.ctx = ctx.narrowed(budget=budget, timeout=limits.get("timeout"))

    async def run(self, inputs: Mapping[str, Any], parent: Span) -> AgentOutput:
        kind = self.kind
        with parent.open(
            f"invoke_agent {self.name}",
            "invoke_agent",
            **{
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": self.name,
                "registry.pattern": kind,
                "registry.agent.digest": self.agent.digest,
                "registry.release.tag": self.agent.tag,
                "registry.release.commit": self.agent.commit,
                "registry.limits.max_llm_calls": self.ctx.budget.limit,
            },
        ) as span:
            try:
                checked = self.agent.compiled.check_inputs(dict(inputs), limits=RENDER_LIMITS)
            except InvalidInputs as exc:
                raise Failed(f"invalid inputs for {self.name}: {exc.detail}") from exc
            run = {
                "chain": self._chain,
                "route": self._route,
                "parallel": self._parallel,
                "evaluator_optimizer": self._evaluator_optimizer,
            }[kind]
            left = self.ctx.remaining()
            try:
                output = (
                    await asyncio.wait_for(run(checked, span), left) if left is not None else await run(checked, span)
                )
            except asyncio.TimeoutError:
                raise Exhausted(f"{self.name} did not finish within its time limit (limits.timeout)") from None
            except Exhausted as stop:
                if stop.output is None:
                    raise
                # A step's unfinished reply is never the composite's answer: it
                # would pass round the gates and evaluators that come after it.
                raise Exhausted(stop.message) from stop
            span.set(**{"registry.output": output.text})
            return output

    # --- calls ---------------------------------------------------------------------------

    def _inputs(self, spec: Mapping[str, Any], variables: Mapping[str, Any], label: str) -> dict[str, Any]:
        templates = spec.get("inputs") or {}
        return {
            name: self.ctx.values.evaluate(source, variables, what=f"{self.name}: {label} input {name!r}")
            for name, source in templates.items()
        }

    async def _call(
        self,
        spec: Mapping[str, Any],
        variables: Mapping[str, Any],
        label: str,
        span: Span,
        *,
        answer: AnswerText | None = None,
    ) -> AgentOutput:
        """Run the agent ``spec`` names; ``answer``: where its text goes, when its output may be the answer."""
        callee = self.ctx.agent(str(spec["agent"]))
        ctx = self.ctx.at(label)
        if ctx.answer is not answer:
            ctx = replace(ctx, answer=answer)
        return await run_agent(callee, self._inputs(spec, variables, label), ctx, span)

    # --- chain ---------------------------------------------------------------------------

    async def _chain(self, inputs: dict[str, Any], span: Span) -> AgentOutput:
        steps: dict[str, dict[str, Any]] = {}
        result = AgentOutput("")
        answer_step, answer = self._chain_answer()
        for index, step in enumerate(self.pattern["steps"]):
            step_id = str(step["id"])
            label = f"step {step_id!r}"
            output = await self._call(
                step, {"inputs": inputs, "steps": steps}, label, span, answer=answer if index == answer_step else None
            )
            steps[step_id] = {"output": output.text, "data": output.data}
            gate = step.get("gate")
            if gate is None:
                result = output
                continue
            verdict = output.require_data(str(step["agent"]), f"the gate of {label}")
            allow = isinstance(verdict, dict) and verdict.get("allow") is True
            reason = verdict.get("reason") if isinstance(verdict, dict) else None
            reason = reason if isinstance(reason, str) else ""
            with span.open(
                f"gate {step_id}", "gate", **{"registry.decision": "allow" if allow else "block"}
            ) as gate_span:
                gate_span.set(**{"registry.gate.reason": reason})
            if not allow:
                text = self.ctx.values.evaluate(
                    str(gate["on_block"]),
                    {"inputs": inputs, "steps": steps, "gate": {"reason": reason}},
                    what=f"{self.name}: {label} on_block",
                )
                why = f": {shorten(reason, 200)}" if reason.strip() else " (it gave no reason)"
                raise Blocked(f"the gate of {label} ({step['agent']}) blocked the reply{why}", output=str(text))
        if isinstance(answer, Held):
            answer.release()
        return result

    def _chain_answer(self) -> tuple[int | None, AnswerText | None]:
        """Which step's output is the chain's answer (the last that is not a
        gate), and where its text goes: held until the gates after it allow it."""
        if self.ctx.answer is None:
            return None, None
        steps = self.pattern["steps"]
        last = max((index for index, step in enumerate(steps) if step.get("gate") is None), default=None)
        if last is None or last == len(steps) - 1:
            return last, self.ctx.answer
        return last, Held(self.ctx.answer)

    # --- route ---------------------------------------------------------------------------

    async def _route(self, inputs: dict[str, Any], span: Span) -> AgentOutput:
        classifier = self.pattern["classifier"]
        field = str(classifier.get("field", "label"))
        variables = {"inputs": inputs}
        output = await self._call(classifier, variables, "the classifier", span)
        data = output.require_data(str(classifier["agent"]), "the classifier")
        label = data.get(field) if isinstance(data, dict) else None
        if not isinstance(label, str):
            raise Failed(f"the classifier {classifier['agent']} gave no string {field!r} to route on")
        routes = self.pattern.get("routes") or {}
        spec, chosen = (
            (routes[label], f"route {label!r}") if label in routes else (self.pattern.get("default"), "default")
        )
        with span.open("route", "route", **{"registry.decision": f"{shorten(label)} → {chosen}"}):
            if spec is None:
                raise Failed(f"the classifier answered {shorten(label)!r}, which has no route, and there is no default")
        return await self._call(spec, variables, chosen, span, answer=self.ctx.answer)

    # --- parallel ------------------------------------------------------------------------

    async def _parallel(self, inputs: dict[str, Any], span: Span) -> AgentOutput:
        mode = str(self.pattern["mode"])
        runs: list[tuple[Mapping[str, Any], dict[str, Any], str]] = []
        if mode == "vote":
            branch = self.pattern["branch"]
            runs = [(branch, {"inputs": inputs}, f"vote {i + 1}") for i in range(int(self.pattern["n"]))]
        elif mode == "section":
            runs = [(b, {"inputs": inputs}, f"branch {b['id']!r}") for b in self.pattern["branches"]]
        else:
            runs = self._chunks(inputs, span)
        limit = int(self.pattern.get("max_concurrency", DEFAULT_MAX_CONCURRENCY))
        span.set(**{"registry.parallel.runs": len(runs), "registry.parallel.max_concurrency": limit})
        outputs = await _bounded(
            [partial(self._call, spec, variables, label, span) for spec, variables, label in runs], limit
        )
        self._check_valid([label for _, _, label in runs], outputs, span)
        output = await self._aggregate(inputs, outputs, span)
        if "agent" not in (self.pattern.get("aggregate") or {}):  # an aggregating agent streamed its own text
            write_text(self.ctx.answer, output.text, agent=self.name, span=span, path=self.ctx.path)
        return output

    def _check_valid(self, labels: list[str], outputs: list[AgentOutput], span: Span) -> None:
        """Fail when no branch's reply passed its parser; record the branches whose reply did not."""
        invalid = [
            (label, output) for label, output in zip(labels, outputs, strict=True) if output.parse_error is not None
        ]
        if not invalid:
            return
        if len(invalid) == len(outputs):
            raise Failed(f"{self.name}: {_none_valid(invalid)}")
        names = [label for label, _ in invalid]
        span.set(**{"registry.parallel.invalid": names})
        self.ctx.totals.warnings.append(
            f"{self.name}: {len(invalid)} of {len(outputs)} branch replies did not pass their parser"
            f" ({', '.join(names)}): {shorten(invalid[0][1].parse_error, 200)}"
        )

    def _chunks(self, inputs: dict[str, Any], span: Span) -> list[tuple[Mapping[str, Any], dict[str, Any], str]]:
        over = self.ctx.values.evaluate(str(self.pattern["over"]), {"inputs": inputs}, what=f"{self.name}: over")
        if not isinstance(over, list):
            raise Failed(f"{self.name}: over gave {type(over).__name__}, not a list")
        max_items = int(self.pattern["max_items"])
        size = int(self.pattern["chunk_size"])
        items = over[:max_items]
        if len(over) > max_items:
            span.set(**{"registry.parallel.items_dropped": len(over) - max_items})
        branch = self.pattern["branch"]
        return [
            (branch, {"inputs": inputs, "chunk": items[start : start + size], "chunk_index": index}, f"chunk {index}")
            for index, start in enumerate(range(0, len(items), size))
        ]

    async def _aggregate(self, inputs: dict[str, Any], outputs: list[AgentOutput], span: Span) -> AgentOutput:
        aggregate = self.pattern.get("aggregate") or {"strategy": "concat"}
        if "agent" in aggregate:
            return await self._call(
                aggregate,
                {"inputs": inputs, "results": [o.text for o in outputs]},
                "the aggregate",
                span,
                answer=self.ctx.answer,
            )
        strategy = str(aggregate["strategy"])
        field = aggregate.get("field")
        with span.open(f"aggregate {strategy}", "aggregate", **{"registry.aggregate.strategy": strategy}) as decision:
            if strategy == "concat":
                decision.set(**{"registry.decision": f"{len(outputs)} outputs joined"})
                return AgentOutput("\n\n".join(o.text for o in outputs))
            if strategy == "majority":
                return _majority(outputs, field, decision)
            for index, output in enumerate(outputs):
                if output.parse_error is None and (
                    field is None or (isinstance(output.data, dict) and field in output.data)
                ):
                    decision.set(
                        **{"registry.decision": f"output {index + 1} of {len(outputs)} is the first valid one"}
                    )
                    return output
            raise Failed(f"{self.name}: no branch gave a valid output (aggregate first_valid)")

    # --- evaluator-optimizer --------------------------------------------------------------

    async def _evaluator_optimizer(self, inputs: dict[str, Any], span: Span) -> AgentOutput:
        generator, evaluator = self.pattern["generator"], self.pattern["evaluator"]
        rounds = int(self.pattern["max_iterations"])
        previous: dict[str, Any] | None = None
        candidate = AgentOutput("")
        held: Held | None = None
        for number in range(1, rounds + 1):
            # A candidate's text is the answer only once the evaluator passes it.
            held = Held(self.ctx.answer) if self.ctx.answer is not None else None
            candidate = await self._call(
                generator,
                {"inputs": inputs, "previous": previous},
                f"the generator (round {number})",
                span,
                answer=held,
            )
            verdict_output = await self._call(
                evaluator, {"inputs": inputs, "candidate": candidate.text}, f"the evaluator (round {number})", span
            )
            verdict = verdict_output.require_data(str(evaluator["agent"]), "the evaluator")
            passed = isinstance(verdict, dict) and verdict.get("pass") is True
            feedback = verdict.get("feedback") if isinstance(verdict, dict) else None
            feedback = feedback if isinstance(feedback, str) else ""
            with span.open(
                f"evaluate round {number}", "evaluate", **{"registry.decision": "pass" if passed else "revise"}
            ) as judged:
                judged.set(**{"registry.evaluate.feedback": feedback, "registry.evaluate.round": number})
            if passed:
                if held is not None:
                    held.release()
                return candidate
            previous = {"output": candidate.text, "feedback": feedback}
        if self.pattern.get("on_exhausted", "return_last") == "fail":
            raise Exhausted(f"{self.name}: no candidate passed the evaluator in {rounds} rounds (on_exhausted: fail)")
        span.set(**{"registry.evaluate.exhausted": True})
        if held is not None:
            held.release()
        return candidate


def _majority(outputs: list[AgentOutput], field: Any, span: Span) -> AgentOutput:
    def key(output: AgentOutput) -> str | None:
        if field is None:
            return output.text.strip()
        if output.parse_error is not None or not isinstance(output.data, dict) or field not in output.data:
            return None
        return json.dumps(output.data[field], sort_keys=True, ensure_ascii=False)

    keys = [key(o) for o in outputs]
    counts = Counter(k for k in keys if k is not None)
    if not counts:
        raise Failed(f"none of the {len(outputs)} replies has the field {field!r} to vote on (aggregate majority)")
    best = max(counts.values())
    # Ties go to the value given first, so the result never depends on timing.
    winner = next(k for k in keys if k is not None and counts[k] == best)
    span.set(**{"registry.decision": f"{best} of {len(outputs)} agree", "registry.aggregate.votes": dict(counts)})
    return outputs[keys.index(winner)]


def _none_valid(invalid: list[tuple[str, AgentOutput]]) -> str:
    """What every branch's reply had wrong, in one line, with the first one's details."""
    count = len(invalid)
    not_json = sum(1 for _, output in invalid if output.parse_reason == "invalid_json")
    replies = "the reply" if count == 1 else f"none of the {count} replies"
    if not_json == count:
        what = "was not JSON" if count == 1 else "was JSON"
    elif not_json == 0:
        what = "did not fit its output_schema" if count == 1 else "fit its branch's output_schema"
    else:
        what = f"passed its parser ({not_json} not JSON, {count - not_json} not fitting the output_schema)"
    label, first = invalid[0]
    return f"{replies} {what}; {label}: {shorten(first.parse_error, 200)}"


async def _bounded(calls: Sequence[Callable[[], Awaitable[AgentOutput]]], limit: int) -> list[AgentOutput]:
    """Every call's output, in order, at most ``limit`` running at a time;
    the first that raises cancels the rest and is raised."""
    gate = asyncio.Semaphore(max(1, limit))

    async def one(call: Callable[[], Awaitable[AgentOutput]]) -> AgentOutput:
        async with gate:
            return await call()

    tasks = [asyncio.ensure_future(one(call)) for call in calls]
    try:
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            error = task.exception()
            if error is not None:
                raise error
        return [task.result() for task in tasks]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
