"""What one composite file can say alone, before the rest of its release is read.

``local_issues`` checks a pattern against its own definition: step and
branch ids are unique, fields only one parallel mode reads are not given to
another, ``over`` is one expression, and every expression reads only what
is available where it is (the composite's inputs, earlier steps, ``gate``,
``previous``, ``candidate``, ``chunk``, ``results``...). It also collects
what the expressions read (the inputs, and ``steps.<id>.data``), which the
checks against the release (``composite_graph``) need.

What an expression reads comes from ``registry.rendering.analysis``; this
module never sees Jinja's syntax tree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from registry.format.composite import DataRead, Pattern, Problem
from registry.format.safeyaml import JsonPath
from registry.models import close_matches, did_you_mean
from registry.rendering import (
    CompiledTemplate,
    TemplateCompileError,
    TemplateEnvironment,
    VariableRead,
    is_single_expression,
    variable_reads,
)

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
    inputs = definition.get("inputs")
    declared = inputs.get("properties") if isinstance(inputs, dict) else None
    declared_names = set(declared) if isinstance(declared, dict) else None
    reads = _Reads(environment, declared_names, problems)

    if pattern.kind == "chain":
        _chain_issues(pattern, reads)
    elif pattern.kind == "parallel":
        _parallel_issues(pattern, reads)
    else:
        names_by_role = {"generator": ("inputs", "previous"), "evaluator": ("inputs", "candidate")}
        for item in pattern.calls:
            names = names_by_role.get(item.role, ("inputs",))
            reads.mapping(item.inputs, (*item.path, "inputs"), _Scope(names), item.label)
    read = Pattern(
        kind=pattern.kind,
        raw=pattern.raw,
        calls=pattern.calls,
        data_reads=tuple(reads.data_reads),
        inputs_read=frozenset(reads.inputs_read),
        reads_all_inputs=reads.reads_all_inputs,
    )
    return read, problems


def _chain_issues(pattern: Pattern, reads: _Reads) -> None:
    """Step ids used twice; each step's inputs read the composite's inputs
    and earlier steps, and a gate's ``on_block`` the gated step too."""
    earlier: list[str] = []
    for index, step in enumerate(pattern.raw.get("steps") or []):
        if not isinstance(step, dict):
            continue
        step_id = step.get("id")
        if isinstance(step_id, str):
            if step_id in earlier:
                reads.problems.append(
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


def _parallel_issues(pattern: Pattern, reads: _Reads) -> None:
    """Branch ids used twice, fields of another mode, and what the branches,
    the aggregate and ``over`` read."""
    raw = pattern.raw
    problems = reads.problems
    mode = raw.get("mode")
    if mode == "section":
        problems.extend(_duplicate_branches(raw))
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
        # One that does not parse is reported as a syntax error.
        if is_single_expression(reads.environment, over) is False:
            problems.append(
                Problem(
                    "over must be exactly one expression that gives a list",
                    ("pattern", "over"),
                    "composite-inputs",
                    "write it as '{{ inputs.items }}'",
                )
            )


def _duplicate_branches(raw: Mapping[str, Any]) -> list[Problem]:
    problems = []
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
    return problems


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
    analysed: dict[str, tuple[VariableRead, ...] | str] = field(default_factory=dict)
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
        for read in analysed:
            self._check(read.name, read.attributes, path, scope, label)

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


def _analyse(environment: TemplateEnvironment, source: str) -> tuple[VariableRead, ...] | str:
    """Each variable an expression reads with its constant attributes, or why it does not compile."""
    try:
        compiled = CompiledTemplate(environment, source, name="pattern")
    except TemplateCompileError as exc:
        return exc.problem.message
    if compiled.referenced:
        return "an expression cannot include or import templates"
    found = variable_reads(environment, source, frozenset(compiled.variables))
    return "the template does not compile" if found is None else found
