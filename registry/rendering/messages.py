"""Rendering compiled templates: a definition's role templates to messages,
and a composite's step inputs to values.

A template is parsed, analysed and compiled once (``CompiledTemplate``,
``CompiledValue``) and rendered many times, each render under a budget of
its own (``registry.rendering.limits``) and its output capped in bytes.
Jinja's and Python's errors are translated here, where they leave the
sandbox: every failure is a ``RenderError`` naming the role, with no
traceback, server path or memory address in its message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jinja2 import TemplateNotFound, nodes
from jinja2.environment import TemplateExpression
from jinja2.exceptions import SecurityError, TemplateError, UndefinedError
from jinja2.runtime import Undefined

from registry.errors import RenderError
from registry.models import Message
from registry.rendering.analysis import compiling, single_expression, tree_references, undeclared_variables
from registry.rendering.environment import TemplateEnvironment
from registry.rendering.jinja_internals import template_from_code
from registry.rendering.limits import Budget, RenderLimits, current_budget
from registry.rendering.output import MEMORY_ADDRESS


class CompiledTemplate:
    """One role's template, parsed and compiled once."""

    def __init__(self, environment: TemplateEnvironment, source: str, *, name: str) -> None:
        with compiling():
            tree = environment.parse(source, name=name)
            self.referenced = tree_references(tree)
            self.variables = undeclared_variables(environment, tree)
            code = environment.compile(tree, name=name, filename=name)
        self.template = template_from_code(environment, code)


def render_messages(
    templates: Sequence[tuple[str, CompiledTemplate]],
    variables: Mapping[str, Any],
    *,
    limits: RenderLimits,
    deadline: float | None = None,
) -> tuple[Message, ...]:
    """Render each role's template with ``variables``, in order.

    ``deadline`` (a ``time.monotonic()`` value) is when the render must be
    done: ``limits.max_seconds`` from now unless given, and given when the
    clock started earlier (before the inputs were validated).
    Every failure is a ``RenderError`` naming the role; nothing foreign
    escapes, and no traceback or server path is in the message.
    """
    token = current_budget.set(Budget(limits, deadline))
    try:
        messages = []
        total = 0
        for role, compiled in templates:
            content = _render_one(role, compiled, variables)
            try:
                total += len(content) if content.isascii() else len(content.encode("utf-8"))
            except UnicodeEncodeError as exc:
                raise RenderError(
                    f"{role} template: the output contains a character that is not valid Unicode"
                    f" (an unpaired surrogate at offset {exc.start})",
                    role=role,
                ) from exc
            if total > limits.max_output_bytes:
                raise RenderError(
                    f"rendered output exceeds {limits.max_output_bytes} bytes",
                    role=role,
                )
            messages.append(Message(role=role, content=content))
        return tuple(messages)
    finally:
        current_budget.reset(token)


def _render_one(role: str, compiled: CompiledTemplate, variables: Mapping[str, Any]) -> str:
    # try/except rather than a context manager: this is every render's hot path.
    try:
        return compiled.template.render(variables)
    except Exception as exc:
        raise _translated(role, exc) from exc


def _translated(role: str, exc: Exception) -> RenderError:
    """Jinja's or Python's error while rendering, as a ``RenderError``
    naming ``role``: nothing foreign escapes."""
    if isinstance(exc, (UndefinedError, TemplateNotFound)):
        return _render_error(role, f"{exc.message}")
    if isinstance(exc, SecurityError):
        return _render_error(role, f"unsafe operation refused: {exc}")
    if isinstance(exc, TemplateError):
        return _render_error(role, f"{exc.message or type(exc).__name__}")
    if isinstance(exc, RecursionError):
        return _render_error(role, "recursion too deep")
    if isinstance(exc, MemoryError):
        return _render_error(role, "out of memory while rendering")
    return _render_error(role, f"{type(exc).__name__}: {exc}")


def _render_error(role: str, message: str) -> RenderError:
    # Jinja's messages can hold an object's repr, with its memory address.
    return RenderError(f"{role} template: {MEMORY_ADDRESS.sub('', message)}", role=role)


class CompiledValue:
    """A template string that gives a value: a composite's step input.

    A source that is exactly one expression (``{{ inputs.issues }}``) gives
    the expression's value itself, a list stays a list; anything else
    renders to text. Either way it runs under the same guards and budget as
    a message template.
    """

    def __init__(self, environment: TemplateEnvironment, source: str, *, name: str) -> None:
        self.source = source
        with compiling():
            tree = environment.parse(source, name=name)
            expression = single_expression(tree)
            if expression is not None:
                assign = nodes.Assign(nodes.Name("result", "store"), expression, lineno=1)
                code = environment.compile(nodes.Template([assign], lineno=1), name=name, filename=name)
                self._expression: TemplateExpression | None = TemplateExpression(
                    template_from_code(environment, code), undefined_to_none=False
                )
                self._text: CompiledTemplate | None = None
            else:
                self._expression = None
                self._text = CompiledTemplate(environment, source, name=name)

    def evaluate(self, variables: Mapping[str, Any], *, limits: RenderLimits, what: str) -> Any:
        """The value, or the text; a ``RenderError`` naming ``what`` when it fails."""
        token = current_budget.set(Budget(limits))
        try:
            if self._text is not None:
                return _render_one(what, self._text, variables)
            expression = self._expression
            assert expression is not None
            try:
                value = expression(**variables)
            except Exception as exc:
                raise _translated(what, exc) from exc
            if isinstance(value, Undefined):
                raise _render_error(what, "the expression gives an undefined value")
            return value
        finally:
            current_budget.reset(token)
