"""Composite agents: a ``pattern`` of other agents of the same release.

A composite (``pattern:`` instead of ``prompt_templates``) runs agents it
names as ``usecase/name``. This module is the pattern's model and its checks,
pure and bounded:

- ``read_pattern`` and ``local_issues``: what one file can say alone (step
  ids unique, every expression reads only what is available where it is:
  the composite's inputs, earlier steps, ``gate``, ``chunk``, ``results``...);
- ``CompositeGraph``: what needs the rest of the release, from a summary of
  each agent (``AgentFacts``): every reference exists and is valid, no
  cycles, the inputs each call maps fit the agent it calls, gate, classifier
  and evaluator agents parse the JSON fields the pattern reads, route labels
  fit the classifier, the nesting depth, and the worst-case number of model
  calls against ``limits.max_llm_calls``.

The graph is walked iteratively (Tarjan's components, so that a cycle is
reported the same way whichever agent is loaded first) and every result is
memoised for the release, so each composite is checked once per release.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from jinja2 import TemplateError, nodes

from registry.format.graphs import components, shortest_ring
from registry.format.safeyaml import JsonPath
from registry.models import close_matches, did_you_mean, shorten
from registry.rendering import CompiledTemplate, TemplateCompileError, TemplateEnvironment

DEFAULT_MAX_LLM_CALLS = 100
"""The worst-case model calls a composite may make when its ``limits`` do not say."""
MAX_NESTING = 8
"""How deep composites may nest: a composite of leaves is 1 deep."""
MAX_REACHED_AGENTS = 100
"""How many agents one composite may be able to run, nested ones included."""
MAX_GRAPH_CALLS = 500
"""How many calls its graph may hold, its own and its nested composites':
a route's worst case counts only its largest route, so without this layers
of wide routes stay within any call budget while their graph (which a GET
answers) grows with the product of their widths."""
DEFAULT_TOOL_ROUNDS = 10
"""The model calls counted for a tool-using leaf that sets no ``max_iterations``."""
RAG_TOOL_CALLS = 2
"""The model calls of a ``rag`` leaf that lets the model decide to retrieve
(``force_retrieval`` false): one that may ask for passages, one that answers."""
_CALLS_CAP = 10**9
"""Worst cases are counted up to here, so that nested multiplications stay small numbers."""
_SHOWN_AGENTS = 8


@dataclass(frozen=True)
class Call:
    """One place a pattern runs an agent."""

    path: JsonPath
    """Of the mapping that names the agent."""
    role: str
    """step, gate, classifier, route, default, branch, aggregate, generator or evaluator."""
    agent: str
    inputs: Mapping[str, str]
    label: str
    """How messages name it: ``step 'draft'``, ``route 'billing'``, ``the classifier``."""


@dataclass(frozen=True)
class DataRead:
    """An expression reads ``steps.<step>.data``: that step's agent must parse JSON."""

    path: JsonPath
    step: str


@dataclass(frozen=True)
class Pattern:
    """A composite's pattern, read from a definition its schema accepts."""

    kind: str
    raw: Mapping[str, Any]
    calls: tuple[Call, ...]
    data_reads: tuple[DataRead, ...] = ()
    inputs_read: frozenset[str] = frozenset()
    """The composite's inputs its expressions read by name."""
    reads_all_inputs: bool = False

    @property
    def max_llm_calls(self) -> int:
        limits = self.raw.get("limits")
        limit = limits.get("max_llm_calls") if isinstance(limits, dict) else None
        return limit if isinstance(limit, int) else DEFAULT_MAX_LLM_CALLS

    @property
    def references(self) -> list[str]:
        """Every agent it names, once each, in file order."""
        return list(dict.fromkeys(call.agent for call in self.calls))

    def worst_case_calls(self, calls_of: Callable[[str], int]) -> int:
        """The most model calls one run can make, given each agent's own worst case."""

        def sum_of(role: str) -> int:
            return sum(calls_of(call.agent) for call in self.calls if call.role == role)

        def max_of(*roles: str) -> int:
            return max((calls_of(call.agent) for call in self.calls if call.role in roles), default=0)

        raw = self.raw
        if self.kind == "chain":
            total = sum_of("step") + sum_of("gate")
        elif self.kind == "route":
            total = sum_of("classifier") + max_of("route", "default")
        elif self.kind == "evaluator_optimizer":
            total = _int(raw.get("max_iterations"), 1) * (sum_of("generator") + sum_of("evaluator"))
        else:
            mode = raw.get("mode")
            if mode == "section":
                branches = sum_of("branch")
            elif mode == "map":
                chunk = max(_int(raw.get("chunk_size"), 1), 1)
                runs = -(-_int(raw.get("max_items"), 1) // chunk)
                branches = runs * sum_of("branch")
            else:
                branches = _int(raw.get("n"), 1) * sum_of("branch")
            total = branches + sum_of("aggregate")
        return min(total, _CALLS_CAP)


def _rag_calls(definition: Mapping[str, Any]) -> int:
    rag = definition.get("rag")
    if definition.get("type") == "rag" and isinstance(rag, dict) and not rag.get("force_retrieval", False):
        return RAG_TOOL_CALLS
    return 1


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def read_pattern(definition: Mapping[str, Any]) -> Pattern | None:
    """The pattern of a definition whose schema is valid; None for a leaf."""
    raw = definition.get("pattern")
    if not isinstance(raw, dict):
        return None
    kind = str(raw.get("kind"))
    return Pattern(kind=kind, raw=raw, calls=tuple(_calls(kind, raw)))


def _calls(kind: str, raw: Mapping[str, Any]) -> Iterator[Call]:
    def call(path: JsonPath, role: str, spec: Any, label: str) -> Iterator[Call]:
        if isinstance(spec, dict) and isinstance(spec.get("agent"), str):
            inputs = spec.get("inputs")
            yield Call(("pattern", *path), role, spec["agent"], inputs if isinstance(inputs, dict) else {}, label)

    if kind == "chain":
        for index, step in enumerate(raw.get("steps") or []):
            if isinstance(step, dict):
                role = "gate" if "gate" in step else "step"
                yield from call(("steps", index), role, step, f"step {step.get('id')!r}")
    elif kind == "route":
        yield from call(("classifier",), "classifier", raw.get("classifier"), "the classifier")
        routes = raw.get("routes")
        for label, spec in routes.items() if isinstance(routes, dict) else ():
            yield from call(("routes", label), "route", spec, f"route {shorten(label)!r}")
        yield from call(("default",), "default", raw.get("default"), "the default route")
    elif kind == "parallel":
        if raw.get("mode") == "section":
            for index, branch in enumerate(raw.get("branches") or []):
                label = f"branch {branch.get('id')!r}" if isinstance(branch, dict) else "a branch"
                yield from call(("branches", index), "branch", branch, label)
        else:
            yield from call(("branch",), "branch", raw.get("branch"), "the branch")
        yield from call(("aggregate",), "aggregate", raw.get("aggregate"), "the aggregate")
    elif kind == "evaluator_optimizer":
        yield from call(("generator",), "generator", raw.get("generator"), "the generator")
        yield from call(("evaluator",), "evaluator", raw.get("evaluator"), "the evaluator")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a composite: a message at a path, with its rule id."""

    message: str
    path: JsonPath
    rule: str
    hint: str | None = None


# --- what one file can say alone ---------------------------------------------------------

_ATTRIBUTES = {"steps": ("output", "data"), "previous": ("output", "feedback"), "gate": ("reason",)}


@dataclass
class _Scope:
    names: tuple[str, ...]
    steps: tuple[str, ...] = ()


def local_issues(
    pattern: Pattern, definition: Mapping[str, Any], environment: TemplateEnvironment
) -> tuple[Pattern, list[Problem]]:
    """The pattern with what its expressions read, and what is wrong in it
    that the file alone shows."""
    problems: list[Problem] = []
    raw = pattern.raw
    inputs = definition.get("inputs")
    declared = inputs.get("properties") if isinstance(inputs, dict) else None
    declared_names = set(declared) if isinstance(declared, dict) else None
    reads = _Reads(environment, declared_names, problems)

    if pattern.kind == "chain":
        earlier: list[str] = []
        for index, step in enumerate(raw.get("steps") or []):
            if not isinstance(step, dict):
                continue
            step_id = step.get("id")
            if isinstance(step_id, str):
                if step_id in earlier:
                    problems.append(
                        Problem(
                            f"step id {step_id!r} is used twice",
                            ("pattern", "steps", index, "id"),
                            "composite-duplicate-id",
                        )
                    )
            scope = _Scope(("inputs", "steps"), tuple(earlier))
            reads.mapping(step.get("inputs"), ("pattern", "steps", index, "inputs"), scope, f"step {step_id!r}")
            gate = step.get("gate")
            if isinstance(gate, dict) and isinstance(step_id, str):
                gate_scope = _Scope(("inputs", "steps", "gate"), (*earlier, step_id))
                reads.template(
                    gate.get("on_block"), ("pattern", "steps", index, "gate", "on_block"), gate_scope, "on_block"
                )
            if isinstance(step_id, str) and step_id not in earlier:
                earlier.append(step_id)
    elif pattern.kind == "parallel":
        mode = raw.get("mode")
        if mode == "section":
            seen: set[str] = set()
            for index, branch in enumerate(raw.get("branches") or []):
                branch_id = branch.get("id") if isinstance(branch, dict) else None
                if isinstance(branch_id, str):
                    if branch_id in seen:
                        problems.append(
                            Problem(
                                f"branch id {branch_id!r} is used twice",
                                ("pattern", "branches", index, "id"),
                                "composite-duplicate-id",
                            )
                        )
                    seen.add(branch_id)
        for name, needs in (("n", "vote"), ("over", "map"), ("chunk_size", "map"), ("max_items", "map")):
            if name in raw and mode != needs:
                problems.append(Problem(f"{name} is only for mode: {needs}", ("pattern", name), "schema"))
        if mode == "section" and "branch" in raw:
            problems.append(Problem("mode: section runs branches, not branch", ("pattern", "branch"), "schema"))
        branch_names = ("inputs", "chunk", "chunk_index") if mode == "map" else ("inputs",)
        for item in pattern.calls:
            names = ("inputs", "results") if item.role == "aggregate" else branch_names
            reads.mapping(item.inputs, (*item.path, "inputs"), _Scope(names), item.label)
        over = raw.get("over")
        if isinstance(over, str):
            reads.template(over, ("pattern", "over"), _Scope(("inputs",)), "over")
            if not _is_one_expression(environment, over):
                problems.append(
                    Problem(
                        "over must be exactly one expression that gives a list",
                        ("pattern", "over"),
                        "composite-inputs",
                        "write it as '{{ inputs.items }}'",
                    )
                )
    else:
        names_by_role = {"generator": ("inputs", "previous"), "evaluator": ("inputs", "candidate")}
        for item in pattern.calls:
            names = names_by_role.get(item.role, ("inputs",))
            reads.mapping(item.inputs, (*item.path, "inputs"), _Scope(names), item.label)
    read = Pattern(
        kind=pattern.kind,
        raw=raw,
        calls=pattern.calls,
        data_reads=tuple(reads.data_reads),
        inputs_read=frozenset(reads.inputs_read),
        reads_all_inputs=reads.reads_all_inputs,
    )
    return read, problems


@dataclass
class _Reads:
    """Checks expressions against what is available where they are, and
    collects what they read."""

    environment: TemplateEnvironment
    declared: set[str] | None
    problems: list[Problem]
    data_reads: list[DataRead] = field(default_factory=list)
    inputs_read: set[str] = field(default_factory=set)
    reads_all_inputs: bool = False
    analysed: dict[str, tuple[tuple[str, tuple[str, ...]], ...] | str] = field(default_factory=dict)
    """Each expression's analysis, by its text: a file that repeats one
    string (YAML aliases) compiles it once."""

    def mapping(self, inputs: Any, path: JsonPath, scope: _Scope, label: str) -> None:
        if isinstance(inputs, dict):
            for name, source in inputs.items():
                self.template(source, (*path, name), scope, f"{label} input {name!r}")

    def template(self, source: Any, path: JsonPath, scope: _Scope, label: str) -> None:
        if not isinstance(source, str):
            return
        analysed = self.analysed.get(source)
        if analysed is None:
            analysed = self.analysed[source] = _analyse(self.environment, source)
        if isinstance(analysed, str):
            self.problems.append(Problem(f"{label}: {analysed}", path, "template-syntax"))
            return
        for name, attributes in analysed:
            self._check(name, attributes, path, scope, label)

    def _check(self, name: str, attributes: tuple[str, ...], path: JsonPath, scope: _Scope, label: str) -> None:
        def problem(message: str, hint: str | None = None) -> None:
            self.problems.append(Problem(f"{label}: {message}", path, "composite-inputs", hint))

        if name not in scope.names:
            available = ", ".join(scope.names)
            problem(f"{name!r} is not available here", f"available here: {available}")
            return
        first = attributes[0] if attributes else None
        if name == "inputs":
            if first is None:
                self.reads_all_inputs = True
            elif self.declared is None:
                problem(f"reads inputs.{first}, but the composite declares no inputs", "add 'inputs:' with properties")
            elif first not in self.declared:
                hint = did_you_mean(close_matches(first, sorted(self.declared))) or f"declare {first!r} under inputs"
                problem(f"reads inputs.{first}, which the composite's inputs do not declare", hint)
            else:
                self.inputs_read.add(first)
        elif name == "steps":
            if first is None or first not in scope.steps:
                earlier = ", ".join(scope.steps) or "none"
                shown = "steps" if first is None else f"steps.{first}"
                problem(f"reads {shown}, which is not a step that runs before this", f"earlier steps: {earlier}")
                return
            second = attributes[1] if len(attributes) > 1 else None
            if second not in _ATTRIBUTES["steps"]:
                problem(f"reads steps.{first}{'.' + second if second else ''}; a step has output and data")
            elif second == "data":
                self.data_reads.append(DataRead(path, first))
        elif name in _ATTRIBUTES and first is not None and first not in _ATTRIBUTES[name]:
            # ``previous`` or ``gate`` on its own (tested, compared with none,
            # printed whole) is ordinary Jinja; only unknown fields are errors.
            allowed = ", ".join(f"{name}.{a}" for a in _ATTRIBUTES[name])
            problem(f"reads {name}.{first}; use {allowed}")


def _analyse(environment: TemplateEnvironment, source: str) -> tuple[tuple[str, tuple[str, ...]], ...] | str:
    """Each variable an expression reads with its constant attributes
    (``steps.draft.output`` is ``("steps", ("draft", "output"))``), or why it does not compile."""
    try:
        compiled = CompiledTemplate(environment, source, name="pattern")
    except TemplateCompileError as exc:
        return exc.problem.message
    if compiled.referenced:
        return "an expression cannot include or import templates"
    try:
        tree = environment.parse(source)
    except (TemplateError, RecursionError, MemoryError):
        return "the template does not compile"
    return tuple(sorted(_variable_reads(tree, frozenset(compiled.variables))))


def _variable_reads(tree: nodes.Template, free: frozenset[str]) -> set[tuple[str, tuple[str, ...]]]:
    found: set[tuple[str, tuple[str, ...]]] = set()
    pending: list[nodes.Node] = [tree]
    while pending:
        node = pending.pop()
        attributes: list[str] = []
        base = node
        while True:
            if isinstance(base, nodes.Getattr):
                attributes.append(base.attr)
                base = base.node
            elif isinstance(base, nodes.Getitem) and isinstance(base.arg, nodes.Const):
                attributes.append(str(base.arg.value))
                base = base.node
            else:
                break
        if isinstance(base, nodes.Name) and base.ctx == "load" and base.name in free:
            found.add((base.name, tuple(reversed(attributes))[:2]))
            continue
        pending.extend(node.iter_child_nodes())
    return found


def _is_one_expression(environment: TemplateEnvironment, source: str) -> bool:
    try:
        tree = environment.parse(source)
    except (TemplateError, RecursionError, MemoryError):
        return True  # reported as a syntax error
    body = tree.body
    return (
        len(body) == 1
        and isinstance(body[0], nodes.Output)
        and len(body[0].nodes) == 1
        and not isinstance(body[0].nodes[0], nodes.TemplateData)
    )


# --- what needs the whole release ---------------------------------------------------------


@dataclass(frozen=True)
class AgentFacts:
    """What a composite needs to know of an agent it calls, loaded on its own."""

    invalid: str | None = None
    """Why the file is invalid on its own (the first problem), or None."""
    pattern: Pattern | None = None
    declared_inputs: frozenset[str] | None = None
    """The names its inputs schema declares, or None when any name is accepted."""
    required_inputs: frozenset[str] = frozenset()
    parser_type: str | None = None
    output_schema: Mapping[str, Any] | None = None
    own_calls: int = 1
    """The model calls a leaf may make: 1, or its tool rounds."""
    digest: str = ""


def _declared_inputs(definition: Mapping[str, Any]) -> tuple[frozenset[str] | None, frozenset[str]] | None:
    """The input names an ``inputs`` schema declares (None when it accepts
    any name) and those it requires; None without an ``inputs`` schema."""
    inputs = definition.get("inputs")
    if not isinstance(inputs, dict):
        return None
    properties = inputs.get("properties")
    declared = (
        frozenset(properties) if isinstance(properties, dict) and inputs.get("additionalProperties") is False else None
    )
    listed = inputs.get("required")
    required = frozenset(name for name in listed if isinstance(name, str)) if isinstance(listed, list) else frozenset()
    return declared, required


def leaf_facts(definition: Mapping[str, Any], variables: Iterable[str], digest: str) -> AgentFacts:
    """The facts of a valid leaf definition; without an ``inputs`` schema,
    every variable its templates read (but ``tools``) is required."""
    declared, required = _declared_inputs(definition) or (None, frozenset(variables) - {"tools"})
    parser = definition.get("output_parser")
    parser_type = parser.get("type") if isinstance(parser, dict) else None
    schema = parser.get("output_schema") if isinstance(parser, dict) else None
    tool_using = definition.get("type") in ("react", "tool_calling")
    return AgentFacts(
        declared_inputs=declared,
        required_inputs=required,
        parser_type=parser_type if isinstance(parser_type, str) else None,
        output_schema=schema if isinstance(schema, dict) else None,
        own_calls=_int(definition.get("max_iterations"), DEFAULT_TOOL_ROUNDS) if tool_using else _rag_calls(definition),
        digest=digest,
    )


def composite_facts(definition: Mapping[str, Any], pattern: Pattern, digest: str) -> AgentFacts:
    """The facts of a composite that is valid on its own (its graph is checked apart)."""
    declared, required = _declared_inputs(definition) or (None, frozenset())
    return AgentFacts(pattern=pattern, declared_inputs=declared, required_inputs=required, digest=digest)


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
        depth = 1
        reaches: set[str] = set()
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
                problems.append(
                    Problem(
                        f"{call.label} runs {call.agent}, which is invalid: {shorten(target.invalid, 200)}",
                        (*call.path, "agent"),
                        "composite-reference",
                        f"fix {call.agent} first",
                    )
                )
                continue
            if target.pattern is not None and call.agent not in cycle_members:
                nested = self._checked[call.agent]
                depth = max(depth, nested.depth + 1)
                reaches |= nested.reaches
                if nested.problems:
                    why = shorten(nested.problems[0].message, 200)
                    problems.append(
                        Problem(
                            f"{call.label} runs {call.agent}, which is invalid: {why}",
                            (*call.path, "agent"),
                            "composite-reference",
                            f"fix {call.agent} first",
                        )
                    )
            problems.extend(_input_problems(call, target))
            problems.extend(_parser_problems(call, target, pattern))
        problems.extend(self._data_problems(pattern))
        if depth > MAX_NESTING:
            problems.append(
                Problem(
                    f"composites nest {depth} deep; the limit is {MAX_NESTING}",
                    ("pattern",),
                    "composite-depth",
                    "flatten the pattern: run the nested composites' steps directly",
                )
            )
        edges = len(pattern.calls)
        for name in reaches:
            reached = self.facts(name)
            if reached is not None and reached.pattern is not None:
                edges += len(reached.pattern.calls)
        if len(reaches) > MAX_REACHED_AGENTS or edges > MAX_GRAPH_CALLS:
            problems.append(
                Problem(
                    f"the composite can run {len(reaches)} agents through {edges} calls, nested ones included;"
                    f" the limits are {MAX_REACHED_AGENTS} agents and {MAX_GRAPH_CALLS} calls",
                    ("pattern",),
                    "composite-size",
                    "split it into composites a caller runs one after another, or share fewer wide routes",
                )
            )
        calls = pattern.worst_case_calls(lambda name: self._calls_of(name, cycle_members))
        limit = pattern.max_llm_calls
        if calls > limit:
            counted = f"more than {_CALLS_CAP}" if calls >= _CALLS_CAP else str(calls)
            where = " (limits.max_llm_calls)" if limit != DEFAULT_MAX_LLM_CALLS else " (the registry's default)"
            problems.append(
                Problem(
                    f"one run may make {counted} model calls in the worst case; the limit is {limit}{where}",
                    ("pattern", "limits") if "limits" in pattern.raw else ("pattern",),
                    "composite-budget",
                    "lower n, max_items, max_iterations or the nested patterns' sizes, or raise limits.max_llm_calls",
                )
            )
        return Checked(tuple(problems), depth, calls, frozenset(reaches))

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


def _aggregate_reads(pattern: Pattern) -> tuple[tuple[str, str | None, bool], ...]:
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


# What each role reads from the JSON its agent's parser gives: field, type
# (None: any), required.
_READS: dict[str, tuple[tuple[str, str | None, bool], ...]] = {
    "gate": (("allow", "boolean", True), ("reason", "string", False)),
    "evaluator": (("pass", "boolean", True), ("feedback", "string", True)),
}


def _parser_problems(call: Call, target: AgentFacts, pattern: Pattern) -> Iterator[Problem]:
    if call.role == "classifier":
        field_name = pattern.raw.get("classifier", {}).get("field", "label")
        wanted: tuple[tuple[str, str | None, bool], ...] = ((str(field_name), "string", True),)
    elif call.role == "branch":
        wanted = _aggregate_reads(pattern)
    else:
        wanted = _READS.get(call.role, ())
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
        declared = properties.get(name)
        if declared is None:
            if needed or kind is None:  # a strategy's field must at least be declared
                yield Problem(
                    f"{call.label} reads {name!r} from {call.agent}, whose output_schema does not declare it",
                    where,
                    "composite-parser",
                    fix,
                )
            continue
        if kind is None:  # read as whatever it is
            if needed and name not in required:
                yield Problem(
                    f"{call.label} reads {name!r} from {call.agent}, whose output_schema does not require it",
                    where,
                    "composite-parser",
                    f"add {name!r} to output_schema.required",
                )
            continue
        if not isinstance(declared, dict) or declared.get("type") != kind:
            yield Problem(
                f"{call.label} reads {name!r} from {call.agent} as a {kind}, but its output_schema says otherwise",
                where,
                "composite-parser",
                f"declare {name!r} with 'type: {kind}'",
            )
        elif needed and name not in required:
            yield Problem(
                f"{call.label} reads {name!r} from {call.agent}, whose output_schema does not require it",
                where,
                "composite-parser",
                f"add {name!r} to output_schema.required",
            )
    if call.role == "classifier":
        yield from _route_problems(pattern, properties.get(wanted[0][0]), call)


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
