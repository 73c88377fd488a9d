"""What a request to the Agent Protocol service may say, checked before anything changes.

The protocol leaves ``additional_input`` free; ours takes named members and
nothing else. A task's are ``agent``, ``release`` and ``inputs``; a step's
are ``decision``, ``reason`` and ``arguments``. Any other key is refused
(``invalid-request``, with a "did you mean"), as the registry refuses an
unknown query parameter: a misspelt ``relase`` would otherwise pin the
latest release without a word.

``input``, the protocol's free text, fills an agent's inputs only when the
agent requires exactly one text input; a problem about missing inputs says
so. A task whose agent (or any agent it can reach) declares a tool or a
retriever that the service did not bind is refused at creation, naming
them and the option that binds them. Uploads' names and paths are checked
here too.
"""

from __future__ import annotations

import mimetypes
import posixpath
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from registry.client import Agent
from registry.errors import InvalidInputs, InvalidRequest, InvalidState, RegistryError
from registry.format.definition import CompiledAgent
from registry.format.spec import AgentSpec
from registry.models import Issue, close_matches, did_you_mean, json_pointer, shorten
from registry.protocol.records import ActionRecord
from registry.rendering import RenderLimits

TASK_KEYS = ("agent", "release", "inputs", "mode")
MODES = ("stepped", "background")
STEP_KEYS = ("decision", "reason", "arguments")
DECISIONS = ("approve", "reject", "edit")
_UNSAFE_PATH = re.compile(r"[\x00-\x1f\x7f\\]")
_TEXT_INPUT = (
    "input (the free text) fills an agent's inputs only when it requires exactly one text input;"
    " give any other inputs as additional_input.inputs"
)
_BIND = (
    "bind them when starting the service: --tools MODULE:ATTR (a mapping of tool names to Python callables)"
    " or --mcp NAME=COMMAND (an MCP server's tools)"
)


def refuse_unknown_keys(extra: Mapping[str, Any], allowed: Sequence[str], *, hint: str) -> None:
    """``InvalidRequest`` for the first key of ``additional_input`` that is
    not ``allowed``: a "did you mean" when one is close, else what it takes and ``hint``."""
    for key in extra:
        if key in allowed:
            continue
        shown = shorten(key, 80)
        detail = f"additional_input has no member {shown!r}"
        # Above difflib's default (0.6), as for query parameters: no far-fetched guesses.
        suggestion = did_you_mean(close_matches(key, allowed, limit=1, cutoff=0.75))
        takes = ", ".join(allowed)
        detail += f"; {suggestion}" if suggestion else f"; it takes {takes}; {hint}"
        raise InvalidRequest(detail, path=json_pointer(("additional_input", shown)))


def check_task_keys(extra: Mapping[str, Any]) -> None:
    refuse_unknown_keys(extra, TASK_KEYS, hint="an agent's inputs go under additional_input.inputs, and " + _TEXT_INPUT)


def check_step_keys(extra: Mapping[str, Any]) -> None:
    refuse_unknown_keys(extra, STEP_KEYS, hint="a step carries only the user's decision on a pending action")


def task_inputs(agent: Agent, text: str | None, given: Any) -> dict[str, Any]:
    """The inputs a task runs with: ``given`` (``additional_input.inputs``),
    else ``text`` in the agent's one required text input; checked as the
    run will check them, before anything runs."""
    if given is None:
        inputs = _inputs_from_text(agent, text)
    elif isinstance(given, dict):
        inputs = given
    else:
        raise unprocessable("additional_input.inputs must be an object", "/additional_input/inputs")
    try:
        return _checked_inputs(agent, inputs)
    except InvalidInputs as exc:
        if given is not None:
            raise
        required = _required(agent)
        if not required:
            raise
        names = ", ".join(required)
        detail = f"{exc.detail}; {_TEXT_INPUT} ({agent.usecase}/{agent.name} requires {names})"
        raise InvalidInputs(detail, exc.errors) from exc


def _compiled(agent: Agent) -> CompiledAgent:
    """The agent compiled; a definition that does not compile here is a
    problem with the inputs, as when checking them finds it."""
    try:
        return agent.compiled
    except RegistryError as exc:
        raise unprocessable(f"the inputs of {agent.usecase}/{agent.name}: {exc}", "/additional_input/inputs") from exc


def _required(agent: Agent) -> list[str]:
    return [str(name) for name in _compiled(agent).spec.required_inputs if name != "passages"]


def _inputs_from_text(agent: Agent, text: str | None) -> dict[str, Any]:
    required = _required(agent)
    properties = _compiled(agent).spec.declared_inputs
    if text is not None and len(required) == 1 and (properties.get(required[0]) or {}).get("type") == "string":
        return {required[0]: text}
    return {}


def _checked_inputs(agent: Agent, inputs: dict[str, Any]) -> dict[str, Any]:
    compiled = _compiled(agent)
    checked = dict(inputs)
    if compiled.spec.kind == "rag" and "passages" not in checked:
        # The run retrieves them: an empty list stands in for the check.
        checked["passages"] = []
    try:
        compiled.check_inputs(checked, limits=RenderLimits())
    except InvalidInputs as exc:
        raise InvalidInputs(
            f"the inputs do not fit {agent.usecase}/{agent.name}: {exc.detail}",
            [replace(issue, path="/additional_input/inputs" + issue.path) for issue in exc.errors],
        ) from exc
    except RegistryError as exc:
        raise unprocessable(f"the inputs of {agent.usecase}/{agent.name}: {exc}", "/additional_input/inputs") from exc
    return dict(inputs)


def check_bound(
    agent: Agent, bound: Callable[[str], bool], retrievers: Collection[str], *, names_every_model: bool
) -> None:
    """``InvalidInputs`` naming every tool (that ``bound`` denies) and retriever
    (not in ``retrievers``) that ``agent``, or an agent it can reach,
    declares and nothing implements, with the option that binds it; and,
    unless the service names the model of every call (``names_every_model``),
    every model-calling agent whose definition names no model."""
    tools: dict[str, list[str]] = {}
    missing_retrievers: dict[str, list[str]] = {}
    unnamed: list[str] = []
    for name, member in {**agent.agents, f"{agent.usecase}/{agent.name}": agent}.items():
        # Read from the definition as served, not compiled: a member whose
        # templates fail to compile is still checked here, and its run then
        # fails at once, naming it and what is wrong.
        spec = AgentSpec.of(member.definition)
        if not spec.is_composite and not names_every_model and spec.model_name is None:
            unnamed.append(name)
        if spec.calls_tools:
            for tool in spec.tools:
                if not bound(tool.name):
                    tools.setdefault(tool.name, []).append(name)
        if spec.retriever is not None and spec.retriever not in retrievers:
            missing_retrievers.setdefault(spec.retriever, []).append(name)
    problems: list[str] = []
    if tools:
        problems.append(f"no implementation is bound for {_owned('tool', tools)}; {_BIND}")
    if missing_retrievers:
        problems.append(
            f"no index is bound for {_owned('retriever', missing_retrievers)};"
            " bind it when starting the service: --retriever NAME=FILE"
        )
    if unnamed:
        problems.append(
            f"{', '.join(sorted(unnamed))} name{'s' if len(unnamed) == 1 else ''} no model (model.name)"
            " and the service names none: start it with --model-name NAME"
        )
    if problems:
        message = f"{agent.usecase}/{agent.name} cannot run here: " + "; ".join(problems)
        raise InvalidInputs(message, [Issue(message=p, path="/additional_input/agent") for p in problems])


def _owned(kind: str, missing: Mapping[str, Sequence[str]]) -> str:
    names = ", ".join(repr(name) for name in sorted(missing))
    owners = ", ".join(sorted({owner for owners in missing.values() for owner in owners}))
    return f"{kind}{'' if len(missing) == 1 else 's'} {names} (declared by {owners})"


def decision(extra: Mapping[str, Any], pending: ActionRecord | None) -> dict[str, Any] | None:
    """The decision a step request carries, checked against what is pending."""
    if "decision" not in extra:
        if pending is not None:
            raise InvalidState(
                f"an action is pending ({pending.tool}): the next step must carry additional_input.decision"
                " (approve, reject or edit)",
                entity="action",
                state="pending",
                allowed=list(DECISIONS),
            )
        return None
    if pending is None:
        raise InvalidState(
            "no action is pending: a decision has nothing to decide", entity="action", state="none", allowed=[]
        )
    choice = extra["decision"]
    if choice not in DECISIONS:
        raise unprocessable("additional_input.decision must be approve, reject or edit", "/additional_input/decision")
    reason = extra.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise unprocessable("additional_input.reason must be text", "/additional_input/reason")
    arguments = extra.get("arguments")
    if choice == "edit" and not isinstance(arguments, dict):
        raise unprocessable("an edit needs additional_input.arguments, an object", "/additional_input/arguments")
    return {"decision": choice, "reason": reason, "arguments": arguments}


def check_step_input(extra: Mapping[str, Any]) -> None:
    """A step's additional_input is ours to read: its members have their types
    whether or not an action is pending, since the step echoes them."""
    check_step_keys(extra)
    if "decision" in extra and extra["decision"] not in DECISIONS:
        raise InvalidRequest("additional_input.decision must be approve, reject or edit")
    if extra.get("reason") is not None and not isinstance(extra["reason"], str):
        raise InvalidRequest("additional_input.reason must be text")
    if extra.get("arguments") is not None and not isinstance(extra["arguments"], dict):
        raise InvalidRequest("additional_input.arguments must be an object")


def unprocessable(message: str, path: str) -> InvalidInputs:
    return InvalidInputs(message, [Issue(message=message, path=path)])


def optional_text(body: Mapping[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise InvalidRequest(f"{name} must be text or null")
    return value


def object_member(body: Mapping[str, Any], name: str) -> dict[str, Any]:
    if name not in body:
        return {}
    value = body[name]
    if not isinstance(value, dict):
        raise InvalidRequest(f"{name} must be an object")
    return value


# --- uploads -----------------------------------------------------------------------------


def file_name(name: str) -> str:
    base = posixpath.basename(name.replace("\\", "/")).strip()
    if not base or base in (".", "..") or _UNSAFE_PATH.search(base) or len(base) > 255:
        raise InvalidRequest("the file needs a name: 1 to 255 characters, no control characters")
    return base


def relative_path(path: str | None) -> str | None:
    """A relative path inside the task's space, normalised; refused when it
    would leave it (``..``), is absolute, or holds control characters."""
    if path is None or path.strip() == "":
        return None
    if _UNSAFE_PATH.search(path) or len(path) > 1024:
        raise InvalidRequest("relative_path may not hold control characters or backslashes, nor be longer than 1024")
    if path.startswith("/") or re.match(r"^[A-Za-z]:", path):
        raise InvalidRequest("relative_path must be relative, not absolute")
    if ".." in path.split("/"):
        raise InvalidRequest("relative_path may not hold '..': a file stays among the task's files")
    normalised = posixpath.normpath(path)
    return "" if normalised == "." else normalised


def content_type(given: str | None, name: str) -> str:
    if given and "/" in given and len(given) <= 200 and not _UNSAFE_PATH.search(given):
        return given
    guessed, _ = mimetypes.guess_type(name)
    return guessed or "application/octet-stream"
