"""Semantic diff between two versions of a library, and the release gate.

``diff_catalogs`` compares two catalogs (two commits, or a commit and a
working tree) agent by agent: which agents were added or removed, and for a
changed one which fields changed, a unified diff of each template and of each
partial it reaches, and, when it has examples, the diff of what the model
would receive for each. The "before" side may be nothing at all (a first
release: everything is added). ``classify`` turns a diff into the SemVer bump
it requires, with a reason for each.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from registry.errors import InvalidDefinition, RegistryError
from registry.format.loading import DEFINITION_SUFFIX, LoadedAgent, ReleaseCatalog
from registry.models import Issue, Release
from registry.rendering import RenderLimits

Bump = Literal["major", "minor", "patch", "none"]
_ORDER: dict[str, int] = {"none": 0, "patch": 1, "minor": 2, "major": 3}
# Top-level keys compared as fields, in the schema's order (templates are diffed themselves).
_FIELDS = (
    "name",
    "description",
    "model",
    "params",
    "inputs",
    "metadata",
    "type",
    "tools",
    "tool_choice",
    "output_parser",
    "rag",
    "max_iterations",
    "pattern",
    "examples",
)


@dataclass
class AgentChange:
    usecase: str
    name: str
    status: Literal["added", "removed", "changed"]
    digest_from: str | None = None
    digest_to: str | None = None
    fields: list[str] = field(default_factory=list)
    templates: dict[str, str] = field(default_factory=dict)
    partials: dict[str, str] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)
    invalid: dict[str, list[str]] = field(default_factory=dict)
    """Side ("from"/"to") to the problems of a definition invalid there."""
    through: list[str] = field(default_factory=list)
    """A composite's: the agents it can run that were added, removed or
    changed, by ``usecase/name`` (its digest covers them all)."""
    definition_from: dict[str, Any] | None = field(default=None, repr=False)
    definition_to: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def agent(self) -> str:
        return f"{self.usecase}/{self.name}"

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "usecase": self.usecase,
            "name": self.name,
            "status": self.status,
            "digest_from": self.digest_from,
            "digest_to": self.digest_to,
        }
        if self.status == "changed":
            out.update(fields=self.fields, templates=self.templates, partials=self.partials, examples=self.examples)
            if self.through:
                out["through"] = self.through
        if self.invalid:
            out["invalid"] = self.invalid
        return out


@dataclass
class LibraryDiff:
    source: Release | None
    """None when there is nothing before (a first release)."""
    target: Release
    changes: list[AgentChange]
    unchanged: int
    invalid: dict[str, list[Issue]] = field(default_factory=dict)
    """Every definition of the target that is invalid, changed or not, by
    file: what the registry would refuse to serve."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "from": None if self.source is None else {"ref": self.source.tag, "commit": self.source.commit},
            "to": {"ref": self.target.tag, "commit": self.target.commit},
            "added": [c.agent for c in self.changes if c.status == "added"],
            "removed": [c.agent for c in self.changes if c.status == "removed"],
            "changed": [c.as_dict() for c in self.changes if c.status == "changed"],
            "unchanged": self.unchanged,
        }


def diff_catalogs(
    source: Release | None, before: ReleaseCatalog | None, target: Release, after: ReleaseCatalog
) -> LibraryDiff:
    """Compare ``after`` with ``before`` agent by agent; ``before`` None is an
    empty library (every agent of ``after`` is added)."""
    old = set(before.agent_names()) if before is not None else set()
    new = set(after.agent_names())
    changes: list[AgentChange] = []
    unchanged = 0
    invalid: dict[str, list[Issue]] = {}
    for usecase, name in sorted(old | new):
        a = before.load(usecase, name) if before is not None and (usecase, name) in old else None
        b = after.load(usecase, name) if (usecase, name) in new else None
        if isinstance(b, InvalidDefinition):
            invalid[after.repository_path(f"{usecase}/{name}{DEFINITION_SUFFIX}")] = b.errors
        if a is None:
            changes.append(_one_sided(usecase, name, "added", b))
        elif b is None:
            changes.append(_one_sided(usecase, name, "removed", a))
        else:
            change = _compare(usecase, name, a, b, after.repository_path(f"{usecase}/{name}{DEFINITION_SUFFIX}"))
            if change is None:
                unchanged += 1
            else:
                changes.append(change)
    return LibraryDiff(source, target, changes, unchanged, invalid)


def _one_sided(
    usecase: str, name: str, status: Literal["added", "removed"], loaded: LoadedAgent | InvalidDefinition | None
) -> AgentChange:
    change = AgentChange(usecase, name, status)
    side = "to" if status == "added" else "from"
    if isinstance(loaded, LoadedAgent):
        setattr(change, f"digest_{side}", loaded.digest)
        setattr(change, f"definition_{side}", loaded.definition)
    elif isinstance(loaded, InvalidDefinition):
        change.invalid[side] = [i.message for i in loaded.errors]
    return change


def _compare(
    usecase: str, name: str, a: LoadedAgent | InvalidDefinition, b: LoadedAgent | InvalidDefinition, path: str
) -> AgentChange | None:
    change = AgentChange(usecase, name, "changed")
    for side, loaded in (("from", a), ("to", b)):
        if isinstance(loaded, InvalidDefinition):
            change.invalid[side] = [i.message for i in loaded.errors]
    if isinstance(a, InvalidDefinition) or isinstance(b, InvalidDefinition):
        if (
            isinstance(a, InvalidDefinition)
            and isinstance(b, InvalidDefinition)
            and change.invalid["from"] == change.invalid["to"]
        ):
            return None
        change.digest_from = a.digest if isinstance(a, LoadedAgent) else None
        change.digest_to = b.digest if isinstance(b, LoadedAgent) else None
        return change
    if a.digest == b.digest:
        return None
    change.digest_from, change.digest_to = a.digest, b.digest
    change.definition_from, change.definition_to = a.definition, b.definition
    change.fields = [key for key in _FIELDS if a.definition.get(key) != b.definition.get(key)]
    before_templates = a.definition.get("prompt_templates", {})
    after_templates = b.definition.get("prompt_templates", {})
    for role in dict.fromkeys([*before_templates, *after_templates]):
        text = _unified(before_templates.get(role, ""), after_templates.get(role, ""), f"{path}#{role}")
        if text:
            change.templates[role] = text
    for partial in sorted(set(a.partials) | set(b.partials)):
        text = _unified(a.partials.get(partial, ""), b.partials.get(partial, ""), partial)
        if text:
            change.partials[partial] = text
    if a.graph is not None and b.graph is not None:
        change.through = _changed_through(a.graph, b.graph)
    else:
        change.examples = _example_diffs(a, b)
    return change


def _changed_through(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """The agents of a composite's graph (itself left out) that were added,
    removed or changed between two versions of it."""
    old = {node["agent"]: node["digest"] for node in before["nodes"][1:]}
    new = {node["agent"]: node["digest"] for node in after["nodes"][1:]}
    return sorted(agent for agent in old.keys() | new.keys() if old.get(agent) != new.get(agent))


def _example_diffs(a: LoadedAgent, b: LoadedAgent) -> dict[str, str]:
    """For each example of either version (by name), what the model would
    receive before and after. Each side renders with its own version's
    inputs for the example, so a renamed input shows as what the model sees;
    a side without that example renders with the other side's inputs."""
    old_inputs, new_inputs = _example_inputs(a), _example_inputs(b)
    diffs = {}
    for label in dict.fromkeys([*new_inputs, *old_inputs]):
        before_inputs = old_inputs.get(label, new_inputs.get(label))
        after_inputs = new_inputs.get(label, old_inputs.get(label))
        text = _unified(_rendered(a, before_inputs), _rendered(b, after_inputs), f"example {label}")
        if text:
            diffs[label] = text
    return diffs


def _example_inputs(agent: LoadedAgent) -> dict[str, Any]:
    """Each example's inputs by name (the first of a duplicated name: `test` reports the rest)."""
    inputs: dict[str, Any] = {}
    for example in agent.definition.get("examples") or []:
        inputs.setdefault(str(example.get("name")), example.get("inputs"))
    return inputs


def _rendered(agent: LoadedAgent, inputs: Any) -> str:
    try:
        return agent.compiled.render(inputs, limits=RenderLimits()).as_text()
    except RegistryError as exc:
        return f"(does not render: {exc})\n"


def _unified(before: str, after: str, label: str) -> str:
    if before == after:
        return ""
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True), fromfile=f"a/{label}", tofile=f"b/{label}"
    )
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


# -- the release gate ----------------------------------------------------------------


@dataclass(frozen=True)
class Reason:
    bump: Bump
    agent: str
    why: str


def classify(diff: LibraryDiff) -> tuple[Bump, list[Reason]]:
    """The bump the changes require, and why: removing an agent, making it
    invalid (a composite too, when an agent it runs was removed), removing or
    renaming an input, adding a required input, narrowing an input's type or
    changing an output parser's type or schema (the contract of a reply, a
    gate's included) is major; adding an agent or an optional input, or
    making an invalid agent valid, is minor; any other change of a digest
    (a composite's through an agent it runs) is patch."""
    reasons: list[Reason] = []
    for change in diff.changes:
        reasons.extend(_change_reasons(change))
    bump: Bump = "none"
    for reason in reasons:
        if _ORDER[reason.bump] > _ORDER[bump]:
            bump = reason.bump
    return bump, sorted(reasons, key=lambda r: (-_ORDER[r.bump], r.agent, r.why))


def _change_reasons(change: AgentChange) -> list[Reason]:
    agent = change.agent
    if change.status == "removed":
        if "from" in change.invalid:
            # Callers got invalid-definition before and agent-not-found now: nothing they used broke.
            return [Reason("patch", agent, "the agent was removed (it was invalid)")]
        return [Reason("major", agent, "the agent was removed")]
    if change.status == "added":
        return [Reason("minor", agent, "the agent was added" + (" (invalid)" if "to" in change.invalid else ""))]
    if "to" in change.invalid:
        if "from" in change.invalid:
            return [Reason("patch", agent, "it is still invalid, with other problems")]
        return [Reason("major", agent, "it became invalid, so the registry will not serve it")]
    if "from" in change.invalid:
        return [Reason("minor", agent, "it became valid")]
    reasons = _input_reasons(change) + _output_reasons(change)
    if reasons:
        return reasons
    what = [*change.fields, *(f"{role} template" for role in change.templates)]
    what += [f"partial {partial}" for partial in change.partials]
    if change.through:
        what.append(f"through {', '.join(change.through)}")
    if not what:
        # Same definition and partials, other bytes: the digest covers the file as written.
        return [Reason("patch", agent, "its file changed (comments or formatting only)")]
    return [Reason("patch", agent, f"its content changed ({', '.join(what)})")]


def _input_reasons(change: AgentChange) -> list[Reason]:
    before, after = _inputs(change.definition_from), _inputs(change.definition_to)
    if before is None and after is None:
        return []
    old_props, new_props = before[0] if before else None, after[0] if after else None
    old_required, new_required = (before[1] if before else set()), (after[1] if after else set())
    reasons = []
    agent = change.agent
    if old_props is not None and new_props is not None:
        for name in sorted(set(old_props) - set(new_props)):
            reasons.append(Reason("major", agent, f"input {name!r} was removed or renamed"))
        for name in sorted(set(old_props) & set(new_props)):
            narrowed = _narrowed(old_props[name], new_props[name])
            if narrowed:
                reasons.append(Reason("major", agent, f"input {name!r} was narrowed ({narrowed})"))
        for name in sorted(set(new_props) - set(old_props)):
            if name in new_required:
                reasons.append(Reason("major", agent, f"required input {name!r} was added"))
            else:
                reasons.append(Reason("minor", agent, f"optional input {name!r} was added"))
    elif old_props is None and new_props is not None:
        # Inputs now declared where none were: every required one is new to callers' contract.
        for name in sorted(new_required):
            reasons.append(Reason("major", agent, f"required input {name!r} was added"))
    for name in sorted((new_required - old_required) & set(old_props or {})):
        reasons.append(Reason("major", agent, f"input {name!r} became required"))
    return reasons


def _output_reasons(change: AgentChange) -> list[Reason]:
    """Whoever reads an agent's reply (a gateway, a composite's gate,
    classifier or evaluator) relies on its output parser's type and schema:
    changing either is major."""
    before = (change.definition_from or {}).get("output_parser") or {}
    after = (change.definition_to or {}).get("output_parser") or {}
    changed = [key for key in ("type", "output_schema") if before.get(key) != after.get(key)]
    if not changed:
        return []
    return [Reason("major", change.agent, f"its output contract changed (output_parser {' and '.join(changed)})")]


def _inputs(definition: dict[str, Any] | None) -> tuple[dict[str, Any], set[str]] | None:
    inputs = (definition or {}).get("inputs")
    if not isinstance(inputs, dict):
        return None
    properties = inputs.get("properties")
    required = inputs.get("required")
    if not isinstance(properties, dict):
        properties = {}
    if not isinstance(required, list):
        required = []
    return dict(properties), {str(r) for r in required}


def _narrowed(old: Any, new: Any) -> str | None:
    """How ``new`` accepts less than ``old``, if it visibly does."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return None
    old_types, new_types = _types(old), _types(new)
    if old_types is not None and (new_types is None or not new_types >= old_types):
        if new_types is not None:
            return f"type {sorted(old_types)} became {sorted(new_types)}"
    if old_types is None and new_types is not None:
        return f"any type became {sorted(new_types)}"
    old_enum, new_enum = old.get("enum"), new.get("enum")
    if isinstance(new_enum, list) and (not isinstance(old_enum, list) or not all(v in new_enum for v in old_enum)):
        return "its allowed values were reduced"
    return None


def _types(schema: dict[str, Any]) -> set[str] | None:
    kind = schema.get("type")
    if isinstance(kind, str):
        types = {kind}
    elif isinstance(kind, list):
        types = {str(k) for k in kind}
    else:
        return None
    if "number" in types:
        types.add("integer")  # an integer is a number: number -> integer narrows, integer -> number widens
    return types
