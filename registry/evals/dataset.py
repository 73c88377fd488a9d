"""What an eval file holds, as typed frozen values: its header, its cases,
and the assertions a case expects, one class per kind.

An eval file is ``<evals root>/<usecase>/<name>.yml``, the evals root being
the folder ``evals`` beside the agents root (``ai_gateway/evals`` for
``ai_gateway/agents``); the path names the agent it evaluates unless the file
says ``agent:``. ``registry.evals.reading`` reads one into these values.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from registry.format.inputschema import InputsSchema
from registry.format.safeyaml import JsonPath, Position, YamlDocument
from registry.models import Issue, shorten

EVALS_FOLDER = "evals"
EVAL_SUFFIX = ".yml"
OUTCOMES = ("completed", "blocked", "exhausted", "failed")
"""How a run can end (``registry.executor.OUTCOMES``; a test keeps the two
equal, so that reading an eval file never imports the executor)."""
MAX_REPEAT = 100
"""Runs of one case a file may ask for."""


def evals_root(agents_root: str) -> str:
    """The folder of eval files beside ``agents_root``: ``ai_gateway/evals``
    for ``ai_gateway/agents``, ``evals`` for ``agents``."""
    return posixpath.join(posixpath.dirname(agents_root.strip("/")), EVALS_FOLDER)


def agent_of_path(relative: str) -> str | None:
    """The agent an eval file at ``relative`` (to the evals root) is for:
    ``support/triage`` for ``support/triage.yml``; None when the path is
    not ``<usecase>/<name>.yml``."""
    parts = relative.split("/")
    if len(parts) != 2 or not parts[1].endswith(EVAL_SUFFIX) or not all(parts):
        return None
    return f"{parts[0]}/{parts[1][: -len(EVAL_SUFFIX)]}"


def eval_path(agent: str) -> str:
    """Where the eval file of ``agent`` (``usecase/name``) is, relative to the evals root."""
    return f"{agent}{EVAL_SUFFIX}"


# --- assertions ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Contains:
    """The output contains ``text`` (case-sensitive)."""

    kind: ClassVar[str] = "contains"
    text: str

    def describe(self) -> str:
        return f"contains {shorten(self.text, 60)!r}"


@dataclass(frozen=True)
class NotContains:
    """The output does not contain ``text`` (case-sensitive)."""

    kind: ClassVar[str] = "not_contains"
    text: str

    def describe(self) -> str:
        return f"does not contain {shorten(self.text, 60)!r}"


@dataclass(frozen=True)
class JsonSchema:
    """The parsed output fits ``schema`` (JSON Schema 2020-12, patterns in RE2)."""

    kind: ClassVar[str] = "json_schema"
    schema: Mapping[str, Any]
    validator: InputsSchema = field(compare=False, repr=False)

    def describe(self) -> str:
        return "fits its JSON Schema"


@dataclass(frozen=True)
class Equals:
    """The value at ``path`` in the parsed output equals ``value`` (the whole
    output when ``path`` is empty). ``path`` is written with dots
    (``items.0.label``); a part of digits indexes a list."""

    kind: ClassVar[str] = "equals"
    path: str
    value: Any

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(self.path.split(".")) if self.path else ()

    def describe(self) -> str:
        return f"{self.path or 'output'} equals {shorten(repr(self.value), 60)}"


@dataclass(frozen=True)
class Regex:
    """The output matches ``pattern`` (RE2: searched for anywhere, in time linear in the output)."""

    kind: ClassVar[str] = "regex"
    pattern: str
    compiled: Any = field(compare=False, repr=False)
    """The pattern compiled by RE2."""

    def describe(self) -> str:
        return f"matches /{shorten(self.pattern, 60)}/"


@dataclass(frozen=True)
class ToolCalled:
    """The run called tool ``name``, at least once with arguments holding
    ``args`` (a subset: the keys given, their values compared as JSON and
    objects within them subsets again); any arguments when ``args`` is None."""

    kind: ClassVar[str] = "tool_called"
    name: str
    args: Mapping[str, Any] | None = None

    def describe(self) -> str:
        with_args = f" with {shorten(repr(dict(self.args)), 60)}" if self.args else ""
        return f"calls {self.name}{with_args}"


@dataclass(frozen=True)
class OutcomeIs:
    """The run ended with ``outcome`` (one of ``OUTCOMES``)."""

    kind: ClassVar[str] = "outcome"
    outcome: str

    def describe(self) -> str:
        return f"ends {self.outcome}"


@dataclass(frozen=True)
class MaxLlmCalls:
    """The run made at most ``calls`` model calls."""

    kind: ClassVar[str] = "max_llm_calls"
    calls: int

    def describe(self) -> str:
        return f"makes at most {self.calls} model calls"


@dataclass(frozen=True)
class Judge:
    """A judge agent of the same release scores the answer
    (``registry.evals.judge``). With ``min_score`` the score decides (at
    least ``min_score``); without, the judge's own ``pass``."""

    kind: ClassVar[str] = "judge"
    agent: str
    min_score: float | None = None
    expectation: str = ""
    """What the judge is told to expect of the answer (its ``expectation`` input)."""

    def describe(self) -> str:
        bar = f", at least {self.min_score:g}" if self.min_score is not None else ""
        return f"judged by {self.agent}{bar}"


LocalAssertion = Contains | NotContains | JsonSchema | Equals | Regex | ToolCalled | OutcomeIs | MaxLlmCalls
"""The assertions checked from a run alone (``registry.evals.assertions.check``)."""
Assertion = LocalAssertion | Judge

ASSERTION_TYPES: tuple[type[Any], ...] = (
    Contains,
    NotContains,
    JsonSchema,
    Equals,
    Regex,
    ToolCalled,
    OutcomeIs,
    MaxLlmCalls,
    Judge,
)
ASSERTION_KINDS: tuple[str, ...] = tuple(kind.kind for kind in ASSERTION_TYPES)
"""The assertion kinds, as written in a file, in the documentation's order."""


# --- cases and the file ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One prior turn of the conversation (``history``)."""

    role: str
    """``user`` or ``assistant``."""
    content: str

    def as_dict(self) -> dict[str, str]:
        """As the executor's ``history`` takes it."""
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True)
class Defaults:
    """What every case of the file has unless it says otherwise."""

    repeat: int = 1
    expect: tuple[Assertion, ...] = ()
    """Checked on every case, before the case's own."""


@dataclass(frozen=True)
class EvalCase:
    """One case, as the file says it with its defaults applied."""

    id: str
    index: int
    """Its place in ``cases`` (from 0)."""
    inputs: Mapping[str, Any]
    expect: tuple[Assertion, ...]
    """The defaults' assertions, then its own."""
    repeat: int
    """How many times to run it: its own ``repeat``, else the defaults'."""
    history: tuple[Turn, ...] = ()
    description: str | None = None
    tags: tuple[str, ...] = ()
    where: str = ""
    """``file:line:column`` of the case, for messages."""
    document: YamlDocument | None = field(default=None, compare=False, repr=False)
    """Positions of what the case holds, keyed by paths from the top of the file."""

    @property
    def path(self) -> JsonPath:
        """Its own path in the file: ``("cases", index)``."""
        return ("cases", self.index)

    def position(self, path: JsonPath = (), *, key: bool = False) -> Position | None:
        """Where ``path`` (inside the case: ``("inputs", "ticket")``) is written."""
        if self.document is None:
            return None
        return self.document.position(self.path + path, key=key)

    @property
    def judges(self) -> tuple[Judge, ...]:
        return tuple(assertion for assertion in self.expect if isinstance(assertion, Judge))


@dataclass(frozen=True)
class InvalidCase:
    """A case that cannot be run, and why."""

    index: int
    id: str | None
    """Its id when it has a readable one."""
    where: str
    issues: tuple[Issue, ...]


@dataclass(frozen=True)
class EvalHeader:
    """What an eval file says before its cases."""

    source: str
    """The file, as messages name it."""
    agent: str | None
    """The agent evaluated: ``agent:`` or, without it, the one the path names;
    None when neither does (``issues`` say so)."""
    defaults: Defaults = Defaults()
    description: str | None = None
    issues: tuple[Issue, ...] = ()
    document: YamlDocument | None = field(default=None, compare=False, repr=False)
    """Positions of the header's keys and values (None: none could be read)."""

    def position(self, path: JsonPath, *, key: bool = False) -> Position | None:
        return self.document.position(path, key=key) if self.document is not None else None
