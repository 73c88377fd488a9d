"""Typed, frozen views of a valid agent definition: what the runtime reads.

A definition is JSON-compatible data that ``registry.format.definition``
validates. ``AgentSpec.of`` reads one that passed that check into frozen
dataclasses, so that the executor, the Agent Protocol service and the UI
read named, typed fields (``spec.kind``, ``spec.model.name``,
``spec.rag.retriever``) instead of reaching into dictionaries with
defaults of their own. What a definition passes through untouched (model
parameters, a tool's JSON Schema, an ``inputs`` or output schema, examples)
stays as written: JSON values. A composite's pattern is read by
``registry.format.composite`` (``CompiledAgent.pattern``); here it is its
kind only.

The views are built from the definition, never from a file: a compiled
agent has one (``CompiledAgent.spec``), as has a loaded one
(``LoadedAgent.spec``, without compiling its templates).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

AgentKind = Literal["vanilla", "tool_calling", "rag", "react"]
"""What the executor runs for a leaf: the definition's ``type`` (``vanilla`` when it has none)."""
ParserKind = Literal["react_text", "react_json", "json", "text"]
PatternKind = Literal["chain", "route", "parallel", "evaluator_optimizer"]
Role = Literal["system", "user", "assistant"]

DEFAULT_REPAIR_ATTEMPTS = 1
"""``output_parser.repair_attempts`` when a ``json`` parser does not say."""

TOOL_KINDS: tuple[AgentKind, ...] = ("tool_calling", "react")
"""The kinds that call the tools they declare (and take ``max_iterations``)."""

RUNTIME_PLACEHOLDERS: Mapping[str, tuple[AgentKind, ...]] = {
    "chat_history": ("vanilla", "tool_calling", "rag", "react"),
    "agent_scratchpad": ("react",),
}
"""The placeholders (``registry.rendering.placeholders``) the executor fills
itself when the inputs leave them, and in which kinds of leaf: the prior
turns of a conversation as text, and a ReAct agent's thoughts, actions and
observations so far."""

PlaceholderFiller = Literal["runtime", "input", "tools"]


@dataclass(frozen=True)
class PlaceholderFill:
    """What can fill the placeholder ``{name}`` of a leaf's prompt
    (``AgentSpec.placeholder_fill``): lint reports one nothing can fill
    (``unfilled-placeholder``), and the UI says it beside a render."""

    name: str
    by: PlaceholderFiller | None
    """``runtime``: the executor, for this kind of agent (``RUNTIME_PLACEHOLDERS``);
    ``input``: an input of that name, declared (or any, when the definition
    declares no ``inputs.properties``); ``tools``: the render, with the
    declared tools; None: nothing."""
    runtime_kinds: tuple[AgentKind, ...] = ()
    """The kinds of agent the executor fills it for, when it is one of its
    variables: with ``by`` None, a variable of other kinds than this one."""

    @property
    def fillable(self) -> bool:
        return self.by is not None


@dataclass(frozen=True)
class ModelSpec:
    """The model the prompt was written and tested for (``model``)."""

    name: str
    provider: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    """``temperature``, ``top_p``, ``top_k``, ``max_tokens``, ``stop``, as written."""


@dataclass(frozen=True)
class CallParams:
    """The executor's call parameters (``params``)."""

    timeout: float | None = None
    """Seconds to wait for the model."""
    stop: Sequence[str] | None = None
    """Stop sequences, as written; they replace the model's own ``stop``."""


@dataclass(frozen=True)
class ToolSpec:
    """One tool the model may call (an item of ``tools``)."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    """The JSON Schema of its arguments, as written."""
    requires_approval: bool = False
    """``x-requires-approval``: no call before a person approves it."""

    def as_function(self) -> dict[str, Any]:
        """The tool in the Chat Completions function format (no ``x-`` keys)."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


@dataclass(frozen=True)
class ParserSpec:
    """How a reply is read (``output_parser``)."""

    type: ParserKind
    strip_code_fences: bool = False
    allow_missing_keys: bool = False
    output_schema: Mapping[str, Any] | None = None
    repair_attempts: int = DEFAULT_REPAIR_ATTEMPTS
    """``json``: more rounds for a reply that does not parse, each sending the error back."""


@dataclass(frozen=True)
class RagSpec:
    """Retrieval settings (``rag``)."""

    retriever: str
    force_retrieval: bool = False
    top_k: int | None = None
    """Passages per query as written (None: the executor's default)."""


@dataclass(frozen=True)
class AgentSpec:
    """A valid definition, read: every field the runtime and the UI use."""

    title: str
    """``name``: the agent's human title."""
    description: str | None
    kind: AgentKind
    pattern_kind: PatternKind | None
    """A composite's ``pattern.kind``; None for a prompt definition."""
    templates: tuple[tuple[Role, str], ...]
    """``prompt_templates``: (role, source) in file order."""
    model: ModelSpec | None
    params: CallParams
    tools: tuple[ToolSpec, ...]
    tool_choice: str | None
    """``tool_choice`` as written: ``auto``, ``required``, ``none`` or a tool's name."""
    output_parser: ParserSpec | None
    """None when the definition declares none (its replies are read as ``text``)."""
    rag: RagSpec | None
    max_iterations: int | None
    inputs: Mapping[str, Any] | None
    """The ``inputs`` JSON Schema, as written."""
    examples: tuple[Mapping[str, Any], ...]
    """``examples``, as written."""

    @classmethod
    def of(cls, definition: Mapping[str, Any]) -> AgentSpec:
        """The views of ``definition``, which ``compile_definition`` accepted."""
        pattern = definition.get("pattern")
        inputs = definition.get("inputs")
        return cls(
            title=str(definition["name"]),
            description=definition.get("description"),
            kind=cast(AgentKind, definition.get("type", "vanilla")),
            pattern_kind=pattern["kind"] if pattern is not None else None,
            templates=tuple((role, source) for role, source in (definition.get("prompt_templates") or {}).items()),
            model=_model(definition.get("model")),
            params=_params(definition.get("params")),
            tools=tuple(_tool(tool) for tool in definition.get("tools") or ()),
            tool_choice=definition.get("tool_choice"),
            output_parser=_parser(definition.get("output_parser")),
            rag=_rag(definition.get("rag")),
            max_iterations=definition.get("max_iterations"),
            inputs=inputs,
            examples=tuple(definition.get("examples") or ()),
        )

    @property
    def is_composite(self) -> bool:
        return self.pattern_kind is not None

    @property
    def model_name(self) -> str | None:
        """``model.name``; None when the definition names no model."""
        return self.model.name if self.model is not None else None

    @property
    def parser_type(self) -> ParserKind | None:
        """The declared parser's type; None when none is declared."""
        return self.output_parser.type if self.output_parser is not None else None

    @property
    def calls_tools(self) -> bool:
        """Whether the agent calls the tools it declares (``tool_calling``, ``react``)."""
        return self.kind in TOOL_KINDS

    @property
    def retriever(self) -> str | None:
        """The retriever a ``rag`` agent queries; None for any other."""
        return self.rag.retriever if self.kind == "rag" and self.rag is not None else None

    @property
    def declared_inputs(self) -> Mapping[str, Any]:
        """``inputs.properties``: each declared input's schema (empty without one)."""
        properties = self.inputs.get("properties") if self.inputs is not None else None
        return properties if isinstance(properties, Mapping) else {}

    @property
    def required_inputs(self) -> Sequence[str]:
        """``inputs.required``, in order (empty without one)."""
        return (self.inputs.get("required") if self.inputs is not None else None) or ()

    @property
    def runtime_placeholders(self) -> frozenset[str]:
        """The placeholders the executor fills for an agent of this kind (``RUNTIME_PLACEHOLDERS``)."""
        return frozenset(name for name, kinds in RUNTIME_PLACEHOLDERS.items() if self.kind in kinds)

    def placeholder_fill(self, name: str) -> PlaceholderFill:
        """What can fill the placeholder ``{name}``: the executor first (a
        placeholder a render leaves is one its inputs did not name), then an
        input, then the declared tools (the render lists them as ``tools``)."""
        kinds = RUNTIME_PLACEHOLDERS.get(name, ())
        declared = self.inputs.get("properties") if self.inputs is not None else None
        by: PlaceholderFiller | None = None
        if self.kind in kinds:
            by = "runtime"
        elif not isinstance(declared, Mapping) or name in declared:
            by = "input"
        elif name == "tools" and self.tools:
            by = "tools"
        return PlaceholderFill(name, by, kinds)

    def tool(self, name: str) -> ToolSpec | None:
        """The declared tool named ``name``."""
        return next((tool for tool in self.tools if tool.name == name), None)


def _model(model: Mapping[str, Any] | None) -> ModelSpec | None:
    if model is None:
        return None
    return ModelSpec(name=str(model["name"]), provider=model.get("provider"), params=model.get("params") or {})


def _params(params: Mapping[str, Any] | None) -> CallParams:
    if params is None:
        return CallParams()
    timeout = params.get("timeout")
    return CallParams(timeout=float(timeout) if timeout is not None else None, stop=params.get("stop"))


def _tool(tool: Mapping[str, Any]) -> ToolSpec:
    return ToolSpec(
        name=str(tool["name"]),
        description=str(tool["description"]),
        parameters=tool["parameters"],
        requires_approval=tool.get("x-requires-approval") is True,
    )


def _parser(parser: Mapping[str, Any] | None) -> ParserSpec | None:
    if parser is None:
        return None
    return ParserSpec(
        type=parser["type"],
        strip_code_fences=bool(parser.get("strip_code_fences", False)),
        allow_missing_keys=bool(parser.get("allow_missing_keys", False)),
        output_schema=parser.get("output_schema"),
        repair_attempts=int(parser.get("repair_attempts", DEFAULT_REPAIR_ATTEMPTS)),
    )


def _rag(rag: Mapping[str, Any] | None) -> RagSpec | None:
    if rag is None:
        return None
    return RagSpec(
        retriever=str(rag["retriever"]), force_retrieval=bool(rag.get("force_retrieval", False)), top_k=rag.get("top_k")
    )
