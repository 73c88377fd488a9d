"""Output accounting: the filters a guarded template calls as it runs.

Every character of output is counted where it is made, whoever consumes it
(a render, an import keeping a module's output, ``self.block()``,
``super()``): the printing filters join a group of an output's parts and
count it against the render's budget before Jinja yields or buffers it.
They measure printed values (``_checked_print``, where Jinja would call
``finalize``) before they are turned into text. The guard
(``registry.rendering.guard``) decides where the syntax tree calls them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from jinja2 import pass_context
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context, Undefined
from markupsafe import Markup, escape

from registry.rendering.jinja_internals import TemplateModule, markup_join
from registry.rendering.limits import active_budget, counted, current_budget
from registry.rendering.sizes import check_chars, check_measured, check_result

MEMORY_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
"""How an object's repr shows its memory address: output that would change
from one render to the next."""


@pass_context
def print_template_text(context: Context, text: str) -> str:
    """Template text, counted. (Every output filter takes the context so that
    Jinja never runs it at compile time.)"""
    # budget.counted(text), inlined: this runs for most pieces of output.
    budget = current_budget.get() or active_budget()
    budget.chars += len(text)
    if budget.chars > budget.max_chars:
        raise SecurityError(f"rendering produced more than {budget.max_chars} characters")
    return text


@pass_context
def print_text(context: Context, *parts: Any) -> str:
    """The text of a group of an output's parts, counted; as Jinja prints
    them where nothing is escaped: each value through ``_checked_print``
    (what Jinja's ``finalize`` would be), then ``str()``."""
    for part in parts:
        if part.__class__ is not str:  # _checked_print and str() leave a str as it is
            text = "".join([_printed(part) for part in parts])
            break
    else:
        text = "".join(parts)
    # budget.counted(text), inlined: this runs for every piece of output.
    budget = current_budget.get() or active_budget()
    budget.chars += len(text)
    if budget.chars > budget.max_chars:
        raise SecurityError(f"rendering produced more than {budget.max_chars} characters")
    return text


def _printed(part: Any) -> str:
    """``str(_checked_print(part))``, without the call for what it passes as it is."""
    kind = part.__class__
    if kind is str:
        return part  # type: ignore[no-any-return]
    if kind is int or kind is float or kind is bool or part is None:
        return str(part)
    return str(_checked_print(part))


@pass_context
def print_parts(context: Context, kinds: str, *parts: Any) -> str:
    """As ``print_text``, wherever Jinja may escape: under autoescape, each
    value through ``_checked_print`` then escaped, and template text as it is."""
    if context.eval_ctx.autoescape:
        text: str = Markup("").join(
            [part if kind == "t" else escape(_checked_print(part)) for kind, part in zip(kinds, parts, strict=True)]
        )
    else:
        text = "".join([part if part.__class__ is str else str(_checked_print(part)) for part in parts])
    return active_budget().counted(text)


@pass_context
def count_written(context: Context, value: Any) -> Any:
    """What a ``{% filter %}`` block writes, counted."""
    if isinstance(value, str):
        active_budget().counted(value)
    return value


def measured_literal(value: Any) -> Any:
    """A list, tuple or dict literal, once measured."""
    limits = active_budget().limits
    check_measured(value, limits, "a list, tuple or dict")
    return value


def _checked_print(value: Any) -> Any:
    """What Jinja's ``finalize`` would be: the output filters pass every
    printed value here before ``str()``. A container prints all its parts, and
    a nested list that shares one large part prints huge: measure it first."""
    kind = value.__class__
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    limits = active_budget().limits
    if isinstance(value, str):  # Markup, from a filter such as tojson: check_measured's size, directly
        check_chars(len(value) + 2, limits, "printing a value")
        return value
    check_measured(value, limits, "printing a value")
    if not isinstance(value, (str, list, tuple, dict, set, frozenset, Undefined, TemplateModule)):
        # Generators, functions and methods print as their memory address:
        # output that changes from one render to the next.
        text = str(value)
        if MEMORY_ADDRESS.search(text):
            raise SecurityError(f"printing a {kind.__name__} shows a memory address; print what it holds instead")
        return text
    return value


@pass_context
def count_loop(context: Any, iterable: Iterable[Any]) -> Iterable[Any]:
    """A ``for`` loop's items, each counted as a step."""
    return counted(iterable)


@pass_context
def guarded_concat(context: Any, parts: Sequence[Any]) -> str:
    """The ``~`` operator, measured before and after it joins."""
    budget = active_budget()
    budget.check_time()
    limits = budget.limits
    check_measured(parts, limits, "the ~ operator")
    # As Jinja's own ~: Markup stays Markup (and the rest is escaped) under autoescape.
    joined: str = markup_join(parts) if context.eval_ctx.autoescape else "".join(map(str, parts))
    return check_result(joined, limits, "the ~ operator")  # type: ignore[no-any-return]  # joined, unchanged
