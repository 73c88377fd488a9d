"""Composite agents: a ``pattern`` of other agents of the same release.

A composite (``pattern:`` instead of ``prompt_templates``) runs agents it
names as ``usecase/name``. This module is the pattern's model: ``read_pattern``
reads it (every call it makes), ``Pattern.worst_case_calls`` counts the
model calls one run may make, ``AgentFacts`` summarises what a composite
needs to know of an agent it calls, and the limits every composite is held
to. Its checks, pure and bounded, are beside it:

- ``composite_local``: what one file can say alone (step ids unique, every
  expression reads only what is available where it is: the composite's
  inputs, earlier steps, ``gate``, ``chunk``, ``results``...);
- ``composite_graph``: what needs the rest of the release, from the facts
  of each agent: every reference exists and is valid, no cycles, the inputs
  each call maps fit the agent it calls, gate, classifier and evaluator
  agents parse the JSON fields the pattern reads, route labels fit the
  classifier, the nesting depth, and the worst-case number of model calls
  against ``limits.max_llm_calls``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from registry.format.safeyaml import JsonPath
from registry.format.spec import DEFAULT_REPAIR_ATTEMPTS
from registry.models import shorten

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
CALLS_CAP = 10**9
"""Worst cases are counted up to here, so that nested multiplications stay small numbers."""


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
        return min(total, CALLS_CAP)


def _rag_calls(definition: Mapping[str, Any]) -> int:
    rag = definition.get("rag")
    if definition.get("type") == "rag" and isinstance(rag, dict) and not rag.get("force_retrieval", False):
        return RAG_TOOL_CALLS
    return 1


def _repair_calls(parser: Any) -> int:
    """The repair rounds a ``json`` parser may add to a leaf's last reply."""
    if not isinstance(parser, dict) or parser.get("type") != "json":
        return 0
    return _int(parser.get("repair_attempts"), DEFAULT_REPAIR_ATTEMPTS)


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
    """The model calls a leaf may make: 1, or its tool rounds, and a ``json`` parser's repair rounds."""
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
    answering = _int(definition.get("max_iterations"), DEFAULT_TOOL_ROUNDS) if tool_using else _rag_calls(definition)
    return AgentFacts(
        declared_inputs=declared,
        required_inputs=required,
        parser_type=parser_type if isinstance(parser_type, str) else None,
        output_schema=schema if isinstance(schema, dict) else None,
        own_calls=answering + _repair_calls(parser),
        digest=digest,
    )


def composite_facts(definition: Mapping[str, Any], pattern: Pattern, digest: str) -> AgentFacts:
    """The facts of a composite that is valid on its own (its graph is checked apart)."""
    declared, required = _declared_inputs(definition) or (None, frozenset())
    return AgentFacts(pattern=pattern, declared_inputs=declared, required_inputs=required, digest=digest)
