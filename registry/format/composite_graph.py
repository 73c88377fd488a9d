"""Composites checked against their release: what one file cannot say alone.

``CompositeGraph`` holds the composites of one release and what they
reference, from a summary of each agent (``AgentFacts``): every reference
exists and is valid, no cycles, the inputs each call maps fit the agent it
calls, gate, classifier and evaluator agents parse the JSON fields the
pattern reads, route labels fit the classifier, the nesting depth, the size
of the graph, and the worst-case number of model calls against
``limits.max_llm_calls``.

The graph is walked iteratively (Tarjan's components, so that a cycle is
reported the same way whichever agent is loaded first) and every result is
memoised for the release, so each composite is checked once per release.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from registry.format.composite import (
    CALLS_CAP,
    DEFAULT_MAX_LLM_CALLS,
    MAX_GRAPH_CALLS,
    MAX_NESTING,
    MAX_REACHED_AGENTS,
    AgentFacts,
    Call,
    Pattern,
    Problem,
)
from registry.format.graphs import components, shortest_ring
from registry.format.safeyaml import JsonPath
from registry.models import close_matches, did_you_mean, shorten

_SHOWN_AGENTS = 8


@dataclass(frozen=True)
class Checked:
    """A composite checked against its release."""

    problems: tuple[Problem, ...]
    depth: int
    calls: int
    reaches: frozenset[str]
    """Every agent it can run, nested ones included, as ``usecase/name``."""


class CompositeGraph:
    """The composites of one release and what they reference.

    ``facts`` gives an agent's ``AgentFacts`` (None when the release has no
    such agent); it is asked once per agent. Results are kept for the
    release, which never changes.
    """

    def __init__(self, facts: Callable[[str], AgentFacts | None], names: Callable[[], list[str]]) -> None:
        self._facts_of = facts
        self._names = names
        self._facts: dict[str, AgentFacts | None] = {}
        self._checked: dict[str, Checked] = {}
        self._cycles: dict[str, tuple[str, ...]] = {}
        self._lock = threading.Lock()

    def facts(self, agent: str) -> AgentFacts | None:
        if agent not in self._facts:
            self._facts[agent] = self._facts_of(agent)
        return self._facts[agent]

    def know(self, agent: str, facts: AgentFacts) -> None:
        """Record the facts of an agent just loaded, so it is not read again."""
        self._facts.setdefault(agent, facts)

    def check(self, agent: str) -> Checked:
        """The problems of the composite ``agent`` (valid on its own) that need
        the rest of the release, its nesting depth and its worst-case calls."""
        with self._lock:
            if agent not in self._checked:
                self._walk(agent)
            return self._checked[agent]

    def _edges(self, agent: str) -> list[str]:
        """The composites valid on their own that ``agent`` references."""
        facts = self.facts(agent)
        if facts is None or facts.pattern is None or facts.invalid is not None:
            return []
        found = []
        for reference in facts.pattern.references:
            target = self.facts(reference)
            if target is not None and target.pattern is not None and target.invalid is None:
                found.append(reference)
        return found

    def _walk(self, start: str) -> None:
        """Check every composite ``start`` reaches, a component at a time;
        each once all it references is (``components`` yields children first)."""
        for component in components(start, self._edges, self._checked):
            self._finish(component)

    def _finish(self, component: set[str]) -> None:
        cyclic = len(component) > 1 or any(name in self._edges(name) for name in component)
        if cyclic:
            for member in component:
                self._cycles[member] = self._shortest_cycle(member, component)
        for member in sorted(component):
            self._checked[member] = self._check_one(member, component if cyclic else set())

    def _shortest_cycle(self, start: str, component: set[str]) -> tuple[str, ...]:
        return shortest_ring(start, self._edges, component) or (start, start)

    def _check_one(self, agent: str, cycle_members: set[str]) -> Checked:
        facts = self.facts(agent)
        assert facts is not None and facts.pattern is not None
        pattern = facts.pattern
        problems: list[Problem] = []
        cycle = self._cycles.get(agent)
        if cycle is not None:
            problems.append(
                Problem(
                    f"composites reference each other in a cycle: {_shown(cycle)}",
                    self._path_to(pattern, cycle[1]),
                    "composite-cycle",
                    "break the cycle: a composite cannot run itself, directly or through others",
                )
            )
        depth, reaches = self._call_problems(pattern, cycle_members, problems)
        problems.extend(self._data_problems(pattern))
        problems.extend(self._size_problems(pattern, depth, reaches))
        calls = pattern.worst_case_calls(lambda name: self._calls_of(name, cycle_members))
        problems.extend(_budget_problems(pattern, calls))
        return Checked(tuple(problems), depth, calls, frozenset(reaches))

    def _call_problems(
        self, pattern: Pattern, cycle_members: set[str], problems: list[Problem]
    ) -> tuple[int, set[str]]:
        """What is wrong with each call of ``pattern``, added to ``problems``;
        and its nesting depth, and every agent it can run."""
        depth = 1
        reaches: set[str] = set()
        for call in pattern.calls:
            target = self.facts(call.agent)
            reaches.add(call.agent)
            if target is None:
                suggestion = did_you_mean(close_matches(call.agent, self._names()))
                problems.append(
                    Problem(
                        f"{call.label} runs {call.agent}, which does not exist in this release",
                        (*call.path, "agent"),
                        "composite-reference",
                        suggestion or "reference an agent of this release as usecase/name",
                    )
                )
                continue
            if target.invalid is not None:
                problems.append(_invalid_reference(call, shorten(target.invalid, 200)))
                continue
            if target.pattern is not None and call.agent not in cycle_members:
                nested = self._checked[call.agent]
                depth = max(depth, nested.depth + 1)
                reaches |= nested.reaches
                if nested.problems:
                    problems.append(_invalid_reference(call, shorten(nested.problems[0].message, 200)))
            problems.extend(_input_problems(call, target))
            problems.extend(_parser_problems(call, target, pattern))
        return depth, reaches

    def _size_problems(self, pattern: Pattern, depth: int, reaches: set[str]) -> Iterator[Problem]:
        if depth > MAX_NESTING:
            yield Problem(
                f"composites nest {depth} deep; the limit is {MAX_NESTING}",
                ("pattern",),
                "composite-depth",
                "flatten the pattern: run the nested composites' steps directly",
            )
        edges = len(pattern.calls)
        for name in reaches:
            reached = self.facts(name)
            if reached is not None and reached.pattern is not None:
                edges += len(reached.pattern.calls)
        if len(reaches) > MAX_REACHED_AGENTS or edges > MAX_GRAPH_CALLS:
            yield Problem(
                f"the composite can run {len(reaches)} agents through {edges} calls, nested ones included;"
                f" the limits are {MAX_REACHED_AGENTS} agents and {MAX_GRAPH_CALLS} calls",
                ("pattern",),
                "composite-size",
                "split it into composites a caller runs one after another, or share fewer wide routes",
            )

    def _calls_of(self, agent: str, cycle_members: set[str]) -> int:
        facts = self.facts(agent)
        if facts is None or facts.invalid is not None or agent in cycle_members:
            return 1
        if facts.pattern is not None:
            return self._checked[agent].calls
        return facts.own_calls

    def _data_problems(self, pattern: Pattern) -> Iterator[Problem]:
        agents = {
            str(step.get("id")): step.get("agent") for step in pattern.raw.get("steps") or [] if isinstance(step, dict)
        }
        for read in pattern.data_reads:
            agent = agents.get(read.step)
            facts = self.facts(agent) if isinstance(agent, str) else None
            if facts is not None and facts.invalid is None and facts.parser_type != "json":
                yield Problem(
                    f"reads steps.{read.step}.data, but {agent} has no output_parser of type json",
                    read.path,
                    "composite-inputs",
                    f"read steps.{read.step}.output, or give {agent} 'output_parser: {{type: json}}'",
                )

    @staticmethod
    def _path_to(pattern: Pattern, agent: str) -> JsonPath:
        for call in pattern.calls:
            if call.agent == agent:
                return (*call.path, "agent")
        return ("pattern",)


def _shown(path: tuple[str, ...]) -> str:
    if len(path) > _SHOWN_AGENTS + 1:
        path = (*path[: _SHOWN_AGENTS - 2], f"({len(path) - _SHOWN_AGENTS} more)", *path[-2:])
    return " -> ".join(path)


def _invalid_reference(call: Call, why: str) -> Problem:
    return Problem(
        f"{call.label} runs {call.agent}, which is invalid: {why}",
        (*call.path, "agent"),
        "composite-reference",
        f"fix {call.agent} first",
    )


def _budget_problems(pattern: Pattern, calls: int) -> Iterator[Problem]:
    limit = pattern.max_llm_calls
    if calls > limit:
        counted = f"more than {CALLS_CAP}" if calls >= CALLS_CAP else str(calls)
        where = " (limits.max_llm_calls)" if limit != DEFAULT_MAX_LLM_CALLS else " (the registry's default)"
        yield Problem(
            f"one run may make {counted} model calls in the worst case; the limit is {limit}{where}",
            ("pattern", "limits") if "limits" in pattern.raw else ("pattern",),
            "composite-budget",
            "lower n, max_items, max_iterations, output_parser.repair_attempts or the nested patterns' sizes,"
            " or raise limits.max_llm_calls",
        )


def _input_problems(call: Call, target: AgentFacts) -> Iterator[Problem]:
    if target.declared_inputs is not None:
        for name in call.inputs:
            if name not in target.declared_inputs:
                hint = did_you_mean(close_matches(name, sorted(target.declared_inputs)))
                yield Problem(
                    f"{call.label} maps input {name!r}, which {call.agent} does not declare",
                    (*call.path, "inputs", name),
                    "composite-inputs",
                    hint or f"{call.agent} declares: {', '.join(sorted(target.declared_inputs)) or 'nothing'}",
                )
    for name in sorted(target.required_inputs - set(call.inputs)):
        yield Problem(
            f"{call.label} does not map {call.agent}'s required input {name!r}",
            call.path,
            "composite-inputs",
            f"add '{name}: \"{{{{ ... }}}}\"' under inputs",
        )


_Wanted = tuple[tuple[str, str | None, bool], ...]
"""Fields read from the JSON an agent's parser gives: name, type (None: any), required."""


def _aggregate_reads(pattern: Pattern) -> _Wanted:
    """What a parallel pattern's strategy reads from each branch's JSON: a
    majority vote compares ``field`` (so every branch must give it), and
    first_valid takes the first branch whose reply has it."""
    aggregate = pattern.raw.get("aggregate")
    if not isinstance(aggregate, dict) or "field" not in aggregate:
        return ()
    field_name = str(aggregate["field"])
    if aggregate.get("strategy") == "majority":
        return ((field_name, None, True),)
    if aggregate.get("strategy") == "first_valid":
        return ((field_name, None, False),)
    return ()


# What each role reads from the JSON its agent's parser gives.
_READS: dict[str, _Wanted] = {
    "gate": (("allow", "boolean", True), ("reason", "string", False)),
    "evaluator": (("pass", "boolean", True), ("feedback", "string", True)),
}


def _wanted(call: Call, pattern: Pattern) -> _Wanted:
    """What the pattern reads from the JSON ``call``'s agent gives."""
    if call.role == "classifier":
        field_name = pattern.raw.get("classifier", {}).get("field", "label")
        return ((str(field_name), "string", True),)
    if call.role == "branch":
        return _aggregate_reads(pattern)
    return _READS.get(call.role, ())


def _parser_problems(call: Call, target: AgentFacts, pattern: Pattern) -> Iterator[Problem]:
    wanted = _wanted(call, pattern)
    if not wanted:
        return
    where = (*call.path, "agent")
    fix = "give it 'output_parser: {type: json, output_schema: ...}' with " + ", ".join(
        f"{'a required ' if needed else 'an optional '}{kind or 'value'} {name!r}" for name, kind, needed in wanted
    )
    if target.parser_type != "json":
        yield Problem(
            f"{call.label} runs {call.agent}, whose output the pattern reads as JSON,"
            " but it declares no output_parser of type json",
            where,
            "composite-parser",
            fix,
        )
        return
    schema = target.output_schema or {}
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    required = schema.get("required")
    required = set(required) if isinstance(required, list) else set()
    for name, kind, needed in wanted:
        problem = _field_problem(call, (name, kind, needed), properties.get(name), name in required, fix)
        if problem is not None:
            yield problem
    if call.role == "classifier":
        yield from _route_problems(pattern, properties.get(wanted[0][0]), call)


def _field_problem(
    call: Call, wanted: tuple[str, str | None, bool], declared: Any, is_required: bool, fix: str
) -> Problem | None:
    """What is wrong with how the output_schema of ``call``'s agent declares
    one field the pattern reads (``declared``: None when it does not)."""
    name, kind, needed = wanted
    where = (*call.path, "agent")
    if declared is None:
        if needed or kind is None:  # a strategy's field must at least be declared
            return Problem(
                f"{call.label} reads {name!r} from {call.agent}, whose output_schema does not declare it",
                where,
                "composite-parser",
                fix,
            )
        return None
    if kind is not None and (not isinstance(declared, dict) or declared.get("type") != kind):
        return Problem(
            f"{call.label} reads {name!r} from {call.agent} as a {kind}, but its output_schema says otherwise",
            where,
            "composite-parser",
            f"declare {name!r} with 'type: {kind}'",
        )
    # Read as whatever it is (no kind), or declared with the type read.
    if needed and not is_required:
        return Problem(
            f"{call.label} reads {name!r} from {call.agent}, whose output_schema does not require it",
            where,
            "composite-parser",
            f"add {name!r} to output_schema.required",
        )
    return None


def _route_problems(pattern: Pattern, declared: Any, classifier: Call) -> Iterator[Problem]:
    routes = pattern.raw.get("routes")
    labels = list(routes) if isinstance(routes, dict) else []
    has_default = "default" in pattern.raw
    enum = declared.get("enum") if isinstance(declared, dict) else None
    if not isinstance(enum, list):
        if not has_default:
            yield Problem(
                f"{classifier.agent} may give any label, and there is no default route",
                ("pattern", "routes"),
                "composite-route",
                "add 'default: {agent: ...}', or an enum of the labels to the classifier's output_schema",
            )
        return
    values = [str(value) for value in enum]
    for label in labels:
        if label not in values:
            yield Problem(
                f"route {shorten(label)!r} can never be chosen: {classifier.agent} gives one of {', '.join(values)}",
                ("pattern", "routes", label),
                "composite-route",
                did_you_mean(close_matches(label, values)) or "make the labels equal the classifier's enum",
            )
    unrouted = [value for value in values if value not in labels]
    if unrouted and not has_default:
        yield Problem(
            f"no route for {', '.join(map(repr, unrouted))}, and there is no default route",
            ("pattern", "routes"),
            "composite-route",
            "add a route for each label of the classifier's enum, or a default",
        )
