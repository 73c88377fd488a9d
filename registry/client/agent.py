"""An agent as the client holds it: definition, partials and provenance,
rendered locally with the server's own rendering code."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from registry.errors import InvalidDefinition, InvalidInputs, InvalidRequest, RenderError
from registry.format.definition import CompiledAgent, compile_definition
from registry.format.inputbudget import MAX_VALIDATED_DEPTH
from registry.format.parsers import ParseResult
from registry.models import Prompt, Resolution
from registry.rendering import RenderLimits, TemplateEnvironment

_LIMITS = RenderLimits()  # the server's defaults: client and server fail alike

Source = Literal["server", "cache", "bundle", "local"]
"""Where an answer came from: the registry just now, the client's cache
(fresh, or stale while the registry is unreachable), the bundle file, or a
library on this machine (``prompt-registry test`` runs examples on it)."""


class _Compilation:
    """The compiled templates of one agent, built on first render and shared
    by every copy of the agent (a cached copy only differs in ``source``)."""

    def __init__(self, compiled: CompiledAgent | None = None) -> None:
        self._compiled = compiled
        self._lock = threading.Lock()

    def get(self, agent: Agent) -> CompiledAgent:
        compiled = self._compiled
        if compiled is None:
            with self._lock:
                if self._compiled is None:
                    environment = TemplateEnvironment(agent.partials.get)
                    self._compiled = compile_definition(agent.definition, environment, file=agent.path)
                compiled = self._compiled
        return compiled


@dataclass(frozen=True)
class Agent:
    """One agent at one release.

    ``release`` is how the requested release was resolved (``.tag``,
    ``.commit``, ``.requested``, ``.channel``); ``digest`` names the content
    (equal digests render identically); ``source`` says where this answer
    came from.
    """

    usecase: str
    name: str
    path: str
    release: Resolution
    digest: str
    definition: dict[str, Any]
    partials: Mapping[str, str]
    source: Source
    graph: Mapping[str, Any] | None = None
    """A composite's graph (None for a leaf): every agent it can run with its
    digest, the calls between them, and the worst-case number of model calls
    (``max_llm_calls``), as ``GET /v1/agents/<usecase>/<name>`` answers it."""
    agents: Mapping[str, Agent] = field(default_factory=dict)
    """A composite's agents, every one it can run, by ``usecase/name``, at
    the same release: what an executor needs, in the one answer."""
    _compilation: _Compilation = field(default_factory=_Compilation, repr=False, compare=False)

    @property
    def is_composite(self) -> bool:
        """Whether this agent runs other agents (a ``pattern``) rather than a prompt."""
        return "pattern" in self.definition

    @property
    def title(self) -> str:
        return str(self.definition["name"])

    @property
    def tag(self) -> str:
        return self.release.release.tag

    @property
    def commit(self) -> str:
        return self.release.release.commit

    def render(self, inputs: Mapping[str, Any] | None = None, /, **variables: Any) -> Prompt:
        """Render the agent's templates, exactly as ``POST .../render`` would.

        Inputs go through the same JSON round trip as a request's (tuples
        become lists, keys become strings; NaN and values JSON cannot carry
        are refused), are checked against the agent's ``inputs`` schema, and
        are rendered by the server's own sandboxed renderer with its limits.
        Then an input fills each placeholder of its name that the Jinja
        render left (``render(question="...")`` fills ``{question}``);
        ``Prompt.placeholders`` lists those left for the agent loop
        (``{agent_scratchpad}``).
        Raises ``InvalidRequest``, ``InvalidInputs`` or ``RenderError``; the
        last two name this agent and its release in their message.
        """
        merged = {**(inputs or {}), **variables}
        # One walk says both that the round trip would change nothing and that
        # the inputs are within budget; otherwise the round trip is taken, and
        # the render measures them as the server does (and refuses them alike).
        plain = _plain_json_within(merged, _LIMITS)
        try:
            return self.compiled.render(merged if plain else as_request_json(merged), limits=_LIMITS, measured=plain)
        except (InvalidInputs, RenderError) as exc:
            exc.locate(f"{self.usecase}/{self.name}", self.tag)
            raise

    def parse(self, output: str) -> ParseResult:
        """The model's reply to this agent as a ``ToolCall``, a ``FinalAnswer``
        or a ``ParseError`` (with an observation to send back), exactly as
        ``POST .../parse`` gives it."""
        return self.compiled.parser.parse(output)

    @property
    def compiled(self) -> CompiledAgent:
        """The templates compiled (the first call compiles them). Raises
        ``InvalidDefinition``, naming this agent and its release."""
        try:
            return self._compilation.get(self)
        except InvalidDefinition as exc:
            exc.locate(f"{self.usecase}/{self.name}", self.tag)
            raise

    def with_source(self, source: Source) -> Agent:
        """The same agent, said to come from ``source``; shares the compilation."""
        return replace(self, source=source)


def as_request_json(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """``inputs`` as the server would receive them in a render request's body."""
    if type(inputs) is dict and _plain_json_within(inputs, None):
        # The round trip would give back equal values: skip its ~10 µs.
        return inputs
    try:
        text = json.dumps(inputs, ensure_ascii=False, allow_nan=False)
        text.encode("utf-8")
    except ValueError as exc:  # NaN or infinity; and UnicodeEncodeError, a lone surrogate
        raise InvalidRequest(f"inputs cannot be sent as JSON: {exc}") from exc
    except (TypeError, RecursionError) as exc:
        raise InvalidRequest(f"inputs must be JSON values (objects, arrays, strings, numbers, null): {exc}") from exc
    decoded: dict[str, Any] = json.loads(text)
    return decoded


# Up to this many values, checking is cheaper than a round trip through the
# json module's C code; beyond it the round trip is taken anyway.
_CHECKED_VALUES = 256
_CHECKED_INT_BITS = 1024


def _plain_json_within(inputs: dict[str, Any], limits: RenderLimits | None) -> bool:
    """Whether ``inputs`` come back from a JSON round trip unchanged: only
    dicts with string keys, lists, finite floats, and strings UTF-8 can carry
    (no lone surrogates), few enough to check quickly and never cyclic.

    With ``limits``, also whether they are within its input budget exactly as
    ``format.inputbudget.measure`` counts it (every container's length, the
    characters of every string and key, no non-empty container nested
    ``MAX_VALIDATED_DEPTH`` levels down), so that the render need not walk
    them again.
    """
    pending: list[tuple[Any, int]] = [(inputs, 0)]
    seen = 0
    chars = 0
    deepest = 0
    while pending:
        container, depth = pending.pop()
        seen += len(container)
        if seen > _CHECKED_VALUES:
            return False
        if container and depth > deepest:
            deepest = depth
        items = container
        if type(container) is dict:
            for key in container:
                if type(key) is not str or (not key.isascii() and not _encodable(key)):
                    return False
                chars += len(key)
            items = container.values()
        members = _plain_member_chars(items, pending, depth + 1)
        if members is None:
            return False
        chars += members
    if limits is None:
        return True
    return seen <= limits.max_input_values and chars <= limits.max_input_chars and deepest < MAX_VALIDATED_DEPTH


def _plain_member_chars(items: Iterable[Any], pending: list[tuple[Any, int]], depth: int) -> int | None:
    """The characters of the strings among ``items``, or None unless every
    scalar among them comes back from a JSON round trip unchanged; the dicts
    and lists among them go onto ``pending``, at ``depth``."""
    chars = 0
    # Scalars are checked here, not pushed and popped: most values are.
    for item in items:
        kind = type(item)
        if kind is str:
            if not item.isascii() and not _encodable(item):
                return None
            chars += len(item)
        elif kind is dict or kind is list:
            pending.append((item, depth))
        elif kind is int:
            if item.bit_length() > _CHECKED_INT_BITS:  # json refuses ints past 4,300 digits by default
                return None
        elif kind is float:
            if not math.isfinite(item):
                return None
        elif kind is not bool and item is not None:  # tuples, subclasses (IntEnum, ...), anything else
            return None
    return chars


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
