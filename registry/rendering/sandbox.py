"""Rendering untrusted Jinja templates: one policy, shared by server and client.

Templates come from prompt authors, and inputs from callers; neither is
trusted. ``TemplateEnvironment`` is a policy layer over Jinja's
``ImmutableSandboxedEnvironment``:

- ``StrictUndefined``: a variable the caller did not give is an error, never
  an empty string. ``{% if x is defined %}`` is how a template makes one
  optional.
- Jinja's default whitespace settings (``trim_blocks=False``,
  ``lstrip_blocks=False``, ``keep_trailing_newline=False``, newline ``\\n``)
  and no autoescaping, so output is exactly what Jinja documents.
- Includes, imports and extends resolve through a ``PartialSource`` (a
  function from a name relative to the agents root to its text), never the
  filesystem; names that could leave the root are refused.
- Resource bounds, per render: loop iterations and calls share one budget;
  every piece of output, including what macros and ``{% set %}`` blocks
  buffer, is counted against a character budget; operators and the few
  filters and string methods that can multiply memory (``*``, ``**``, ``%``,
  ``+``, ``center``, ``indent``, ``join``, ``replace``, ...) are checked
  before they run; and the final output is capped in bytes.

Loop and output accounting is put into the template's syntax tree before
Jinja compiles it (``_GuardTransformer``), so that the guard needs nothing
of Jinja's code generator: each ``for`` iterates through a counting filter;
each printed group of at most eight parts (text and values) is joined and
counted by one filter call before Jinja yields or buffers it, wherever it is
(the top level, a block, a macro, a ``{% set %}`` block); and what a
``{% filter %}`` block produces is counted too. So every character of output
is counted where it is made, whoever consumes it (a render, an import keeping
a module's output, ``self.block()``, ``super()``); an imported module's kept
output is counted again each time it is output again. The same filters
measure printed values (``_checked_print``, where Jinja would call
``finalize``) before they are turned into text. The guards cost a few calls
per render, not one per output node, and never a sandbox round trip. What
the guard still takes from Jinja beyond its documented API is in
``registry.rendering.jinja_internals``, each with why.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, ItemsView, Iterable, Iterator, KeysView, Mapping, Sequence, ValuesView
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import wraps
from types import CodeType, GeneratorType
from typing import Any, Literal, overload

from jinja2 import StrictUndefined, TemplateNotFound, meta, nodes, pass_context
from jinja2.environment import TemplateExpression
from jinja2.exceptions import (
    SecurityError,
    TemplateAssertionError,
    TemplateError,
    TemplateSyntaxError,
    UndefinedError,
)
from jinja2.loaders import BaseLoader
from jinja2.runtime import Context, Undefined
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Cycler, Joiner, Namespace
from jinja2.visitor import NodeTransformer
from markupsafe import Markup, escape

from registry.errors import RenderError
from registry.models import Message
from registry.rendering.jinja_internals import (
    ImportHookTemplate,
    LoopContext,
    TemplateModule,
    filter_passes,
    markup_join,
    module_from_output,
    namespace_attributes,
    needs_caller_globals,
    template_from_code,
    top_level_output,
)

# Changing anything that alters rendered bytes must change this string: it is
# folded into every digest, so equal digests keep meaning equal output.
RENDER_SEMANTICS = "prompt-registry/render/v2"  # v2: ~ keeps Markup under autoescape, as in Jinja

PartialSource = Callable[[str], "str | None"]
"""Returns the text of a partial by its name relative to the agents root, or None."""

_INCLUDE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*")
_MAX_INCLUDE_NAME = 512
_WIDE_FORMAT = re.compile(r"\d{7,}")  # a width or precision of a million or more
_NESTED_FORMAT_FIELD = re.compile(r"\{[^{}]*:[^{}]*\{")  # '{0:>{1}}': a width taken from an argument

_INTERNAL_PREFIX = "__registry"
_LOOP_FILTER = "__registry_loop"
_CONCAT_FILTER = "__registry_concat"
_LITERAL_FILTER = "__registry_literal"
_OUTPUT_FILTER = "__registry_output"
_TEXT_OUTPUT_FILTER = "__registry_text_output"
_TEMPLATE_TEXT_FILTER = "__registry_template_text"
_WRITTEN_FILTER = "__registry_written"
_PARTS_PER_OUTPUT = 8


@dataclass(frozen=True)
class RenderLimits:
    """Per-render bounds. Part of the rendering contract: client and server
    use the same defaults so that they fail alike."""

    max_output_bytes: int = 1024 * 1024
    max_iterations: int = 100_000
    max_seconds: float = 2.0
    """For validating the inputs and rendering them, together."""
    max_input_values: int = 10_000
    """Values the inputs may hold (every array, object, string, number,
    boolean and null): validating them costs time in proportion."""
    max_input_chars: int = 1024 * 1024
    """Characters of text (strings and keys) the inputs may hold: all that a
    render request of the default 1 MiB can carry."""

    @property
    def max_value_chars(self) -> int:
        """The largest string or list any single operation may produce."""
        return self.max_output_bytes

    @property
    def max_work_chars(self) -> int:
        """All output produced while rendering, buffered or not."""
        return 4 * self.max_output_bytes


Pause = Callable[[float], None]
"""Called now and then during a long render with the render's deadline (a
``time.monotonic()`` value); see ``pausing``."""

_pause: ContextVar[tuple[Pause, float] | None] = ContextVar("registry_render_pause", default=None)


@contextmanager
def pausing(pause: Pause, *, every: float) -> Iterator[None]:
    """Renders started in this context call ``pause`` once they have run
    ``every`` seconds, and again every ``every`` seconds after it.

    A server whose requests share a thread (greenlets) uses it to let other
    requests go between the slices of a long render; what ``pause`` does is
    the server's business. The check rides on the clock reads the render
    guard makes anyway, so a render that never runs long pays nothing.
    """
    token = _pause.set((pause, every))
    try:
        yield
    finally:
        _pause.reset(token)


class _Budget:
    __slots__ = (
        "limits",
        "iterations",
        "chars",
        "deadline",
        "checkpoint",
        "pause",
        "max_iterations",
        "max_chars",
        "modules",
    )

    # Output does not read the clock: without loops, calls, filters,
    # includes or large operators (which all read it) a template prints at
    # most its own text.

    def __init__(self, limits: RenderLimits, deadline: float | None = None) -> None:
        self.limits = limits
        self.iterations = 0
        self.chars = 0
        now = time.monotonic()
        self.deadline = now + limits.max_seconds if deadline is None else deadline
        self.pause = _pause.get()
        # The next time the clock matters: the deadline, or the next pause before it.
        self.checkpoint = self.deadline if self.pause is None else min(self.deadline, now + self.pause[1])
        self.max_iterations = limits.max_iterations
        self.max_chars = limits.max_work_chars
        self.modules: dict[_GuardedTemplate, TemplateModule] = {}  # imported partials, for this render only

    def spend_iteration(self) -> None:
        self.iterations += 1
        if self.iterations > self.max_iterations:
            raise SecurityError(f"rendering took more than {self.max_iterations} loop iterations and calls")
        self.check_time()

    def charge(self, chars: int, iterations: int) -> None:
        """Spend at once what building a kept module spent."""
        self.chars += chars
        self.iterations += iterations
        if self.chars > self.max_chars:
            raise SecurityError(f"rendering produced more than {self.max_chars} characters")
        if self.iterations > self.max_iterations:
            raise SecurityError(f"rendering took more than {self.max_iterations} loop iterations and calls")

    def counted(self, piece: str) -> str:
        """``piece``, once counted: generated code yields top-level output
        through this, and buffers append through it."""
        self.chars += len(piece)
        if self.chars > self.max_chars:
            raise SecurityError(f"rendering produced more than {self.max_chars} characters")
        return piece

    def check_time(self) -> None:
        # Counting bounds how much a template does, not how slowly: a loop of
        # expensive filters stays within every count. The clock bounds the rest.
        now = time.monotonic()
        if now <= self.checkpoint:
            return
        if now > self.deadline:
            raise SecurityError(f"rendering took longer than {self.limits.max_seconds} seconds")
        assert self.pause is not None  # the checkpoint is before the deadline only to pause
        pause, every = self.pause
        pause(self.deadline)
        self.checkpoint = min(self.deadline, time.monotonic() + every)


_budget: ContextVar[_Budget | None] = ContextVar("registry_render_budget", default=None)


def _active_budget() -> _Budget:
    # Outside render_messages (Jinja folding constants at compile time) each
    # guarded call gets default bounds of its own.
    return _budget.get() or _Budget(RenderLimits())


def normalize_include_name(name: object) -> str:
    """Check a name given to include/import/extends; return it unchanged.

    Names are relative to the agents root, with ``/`` separators: no absolute
    paths, no ``..`` or ``.`` segments, no backslashes, no control characters.
    """
    if not isinstance(name, str):
        raise TemplateNotFound(str(name), f"template name must be a string, not {type(name).__name__}")
    if len(name) > _MAX_INCLUDE_NAME or not _INCLUDE_NAME.fullmatch(name):
        raise TemplateNotFound(
            name[:100],
            f"{name[:100]!r} is not a valid template name: use a path relative to the agents root,"
            " such as '_partials/tools.jinja'",
        )
    if any(part in (".", "..") or part.startswith("..") for part in name.split("/")):
        raise TemplateNotFound(name, f"{name!r} is not a valid template name: '..' is not allowed")
    return name


class _PartialLoader(BaseLoader):
    """Loads includes from a ``PartialSource``; contents never change."""

    def __init__(self, source: PartialSource) -> None:
        self._source = source

    def get_source(self, environment: Any, template: str) -> tuple[str, str, Callable[[], bool]]:
        name = normalize_include_name(template)
        text = self._source(name)
        if text is None:
            raise TemplateNotFound(name, f"template {name!r} does not exist in this release")
        return text, name, _always_current


def _always_current() -> bool:
    return True


class _GuardTransformer(NodeTransformer):
    """Rewrites a template's syntax tree so that the compiled code counts."""

    def __init__(self, environment: TemplateEnvironment) -> None:
        self.environment = environment
        # Inside {% autoescape %} with a value known only at render time,
        # Jinja decides at render time whether to escape, and finalizes
        # template text too.
        self.volatile = False
        # Whether output is escaped here, as Jinja's code generator will
        # know it; None when only the render can tell.
        self.autoescape: bool | None = None if callable(environment.autoescape) else bool(environment.autoescape)

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = _guard_filter(_LOOP_FILTER, node.iter)
        return node

    def visit_List(self, node: nodes.List) -> nodes.Node:
        return self._measured(node)

    def visit_Tuple(self, node: nodes.Tuple) -> nodes.Node:
        return self._measured(node) if node.ctx == "load" else node  # not an assignment target

    def visit_Dict(self, node: nodes.Dict) -> nodes.Node:
        return self._measured(node)

    def _measured(self, node: nodes.Expr) -> nodes.Node:
        # A literal can share one large value many times over, and nest:
        # [a, a, a, a] of [b, b, b, b] ... Comparing or hashing it then takes
        # time exponential in the depth, while every value stays small.
        self.generic_visit(node)
        return _guard_filter(_LITERAL_FILTER, node)

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return _guard_filter(_CONCAT_FILTER, nodes.List(node.nodes, lineno=node.lineno))

    def visit_Output(self, node: nodes.Output) -> nodes.Node | list[nodes.Node]:
        # Jinja would yield or buffer each part uncounted. Here each group of
        # parts is printed by one filter call that counts it first; groups
        # are small, so that only a few values (each bounded) exist before
        # they are counted.
        self.generic_visit(node)
        if not node.nodes:
            return node
        outputs: list[nodes.Node] = []
        for start in range(0, len(node.nodes), _PARTS_PER_OUTPUT):
            parts = node.nodes[start : start + _PARTS_PER_OUTPUT]
            if self.autoescape is False and not self.volatile:  # the usual case: plain text
                texts = [part.data for part in parts if isinstance(part, nodes.TemplateData)]
                if len(texts) == len(parts):
                    text = nodes.TemplateData("".join(texts), lineno=node.lineno)
                    printed = _guard_filter(_TEMPLATE_TEXT_FILTER, text)
                else:
                    printed = nodes.Filter(parts[0], _TEXT_OUTPUT_FILTER, parts[1:], [], None, None, lineno=node.lineno)
            else:
                # "t": template text, which Jinja does not finalize when it
                # knows at compile time whether to escape; "v": the rest.
                kinds = "".join("t" if isinstance(p, nodes.TemplateData) and not self.volatile else "v" for p in parts)
                printed = nodes.Filter(nodes.Const(kinds), _OUTPUT_FILTER, parts, [], None, None, lineno=node.lineno)
            outputs.append(nodes.Output([printed], lineno=node.lineno))
        return outputs

    def visit_FilterBlock(self, node: nodes.FilterBlock) -> nodes.Node:
        # Jinja writes a filter block's result straight out: count it, since
        # a filter can make it far longer than its body (center, indent).
        self.generic_visit(node)
        node.filter = _guard_filter(_WRITTEN_FILTER, node.filter)
        return node

    def visit_ScopedEvalContextModifier(self, node: nodes.ScopedEvalContextModifier) -> nodes.Node:
        for option in node.options:
            self.generic_visit(option)
        outer = self.volatile, self.autoescape
        for option in node.options:
            # As Jinja's code generator decides: a value it cannot compute at
            # compile time makes the rest of the scope volatile.
            try:
                value = option.value.as_const(nodes.EvalContext(self.environment))
            except nodes.Impossible:
                self.volatile, self.autoescape = True, None
            else:
                if option.key == "autoescape" and not self.volatile:
                    self.autoescape = bool(value)
        try:
            body: list[nodes.Node] = []
            for child in node.body:
                result = self.visit(child)
                body.extend(result if isinstance(result, list) else [result])
            node.body = body
        finally:
            self.volatile, self.autoescape = outer
        return node


def _guard_filter(name: str, node: nodes.Node) -> nodes.Filter:
    return nodes.Filter(node, name, [], [], None, None, lineno=node.lineno)


def _refuse_guard_filters(tree: nodes.Template, name: str | None, filename: str | None) -> None:
    for used in tree.find_all(nodes.Filter):
        if used.name.startswith(_INTERNAL_PREFIX):  # the guards' own filters are not the author's
            raise TemplateAssertionError(f"No filter named {used.name!r}.", used.lineno, name, filename)


@pass_context
def _print_template_text(context: Context, text: str) -> str:
    """Template text, counted. (Every output filter takes the context so that
    Jinja never runs it at compile time.)"""
    # budget.counted(text), inlined: this runs for most pieces of output.
    budget = _budget.get() or _active_budget()
    budget.chars += len(text)
    if budget.chars > budget.max_chars:
        raise SecurityError(f"rendering produced more than {budget.max_chars} characters")
    return text


@pass_context
def _print_text(context: Context, *parts: Any) -> str:
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
    budget = _budget.get() or _active_budget()
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
def _print_parts(context: Context, kinds: str, *parts: Any) -> str:
    """As ``_print_text``, wherever Jinja may escape: under autoescape, each
    value through ``_checked_print`` then escaped, and template text as it is."""
    if context.eval_ctx.autoescape:
        text: str = Markup("").join(
            [part if kind == "t" else escape(_checked_print(part)) for kind, part in zip(kinds, parts, strict=True)]
        )
    else:
        text = "".join([part if part.__class__ is str else str(_checked_print(part)) for part in parts])
    return _active_budget().counted(text)


@pass_context
def _count_written(context: Context, value: Any) -> Any:
    if isinstance(value, str):
        _active_budget().counted(value)
    return value


class _KeptOutput:
    """An imported module's output: counted when the module ran, and again
    every time it is output (an include without context, printing the module)."""

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces
        self.size = sum(map(len, pieces))

    def __iter__(self) -> Iterator[str]:
        budget = _active_budget()
        for piece in self.pieces:
            yield budget.counted(piece)


@dataclass(frozen=True)
class _ModuleCost:
    """What building a module spent; charged again to every render that
    reuses it, so that a render's outcome never depends on an earlier one."""

    chars: int
    iterations: int


class _GuardedTemplate(ImportHookTemplate):
    """Jinja's Template, keeping imported modules only when they hold no state.

    Jinja keeps a template's module (what an import, or an include without
    context, runs) for good. A module that holds mutable state (a namespace,
    a cycler or a joiner, which its macros can change) would carry one
    render's, one caller's, values into the next: it is kept for one render
    only. Any other module is kept, as Jinja keeps it (rebuilding a partial of
    macros on every render cost more than the rest of a render's guards).
    """

    def make_module(
        self,
        vars: dict[str, Any] | None = None,
        shared: bool = False,
        locals: Mapping[str, Any] | None = None,
    ) -> TemplateModule:
        context = self.new_context(vars, shared, locals)
        output = _KeptOutput(list(top_level_output(self, context)))
        module = module_from_output(self, context, output)
        # Not exported to templates: a leading underscore.
        module._registry_context = context  # type: ignore[attr-defined]
        module._registry_output = output  # type: ignore[attr-defined]
        return module

    def module_for_import(self, ctx: Context | None) -> TemplateModule:
        if needs_caller_globals(self, ctx):
            return self.jinja_module_for_import(ctx)  # Jinja builds a new module, never kept
        budget = _active_budget()
        kept = self.kept_module
        if kept is not None:
            cost: _ModuleCost = kept._registry_cost  # type: ignore[attr-defined]
            budget.charge(cost.chars, cost.iterations)
            budget.check_time()
            return kept
        module = budget.modules.get(self)
        if module is None:
            chars, iterations = budget.chars, budget.iterations
            module = budget.modules[self] = self.make_module()
            context = module._registry_context  # type: ignore[attr-defined]
            if not _holds_state(context.vars.values()):
                module._registry_cost = _ModuleCost(budget.chars - chars, budget.iterations - iterations)  # type: ignore[attr-defined]
                self.kept_module = module
        return module


_STATEFUL = (Namespace, Cycler, Joiner)


def _holds_state(values: Iterable[Any], limit: int = 10_000) -> bool:
    """Whether ``values`` hold an object a template can change; True when
    there are too many parts to tell."""
    pending = list(values)
    seen = 0
    while pending:
        seen += 1
        if seen > limit:
            return True
        item = pending.pop()
        if isinstance(item, _STATEFUL):
            return True
        if isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            pending.extend(item)
    return False


def _measured_literal(value: Any) -> Any:
    limits = _active_budget().limits
    _check_measured(value, limits, "a list, tuple or dict")
    return value


def _checked_print(value: Any) -> Any:
    """What Jinja's ``finalize`` would be: the output filters pass every
    printed value here before ``str()``. A container prints all its parts, and
    a nested list that shares one large part prints huge: measure it first."""
    kind = value.__class__
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    limits = _active_budget().limits
    if isinstance(value, str):  # Markup, from a filter such as tojson: _check_measured's size, directly
        _check_chars(len(value) + 2, limits, "printing a value")
        return value
    _check_measured(value, limits, "printing a value")
    if not isinstance(value, (str, list, tuple, dict, set, frozenset, Undefined, TemplateModule)):
        # Generators, functions and methods print as their memory address:
        # output that changes from one render to the next.
        text = str(value)
        if _ADDRESS.search(text):
            raise SecurityError(f"printing a {kind.__name__} shows a memory address; print what it holds instead")
        return text
    return value


def _counted(iterable: Iterable[Any]) -> Iterable[Any]:
    budget = _active_budget()
    for item in iterable:
        # budget.spend_iteration(), inlined: this runs for every item of every loop.
        if budget.iterations >= budget.max_iterations or time.monotonic() > budget.checkpoint:
            budget.spend_iteration()  # raises naming the bound reached, or pauses
        else:
            budget.iterations += 1
        yield item


@pass_context
def _count_loop(context: Any, iterable: Iterable[Any]) -> Iterable[Any]:
    return _counted(iterable)


@pass_context
def _guarded_concat(context: Any, parts: Sequence[Any]) -> str:
    budget = _active_budget()
    budget.check_time()
    limits = budget.limits
    _check_measured(parts, limits, "the ~ operator")
    # As Jinja's own ~: Markup stays Markup (and the rest is escaped) under autoescape.
    joined: str = markup_join(parts) if context.eval_ctx.autoescape else "".join(map(str, parts))
    return _check_result(joined, limits, "the ~ operator")  # type: ignore[no-any-return]  # joined, unchanged


def _approx_size(value: Any, limit: int) -> int:
    """About how many characters ``value`` prints as, counting shared parts
    every time they appear; stops counting once past ``limit``."""
    total = 0
    pending = [value]
    pop, extend = pending.pop, pending.extend
    while pending and total <= limit:
        item = pop()
        # The classes JSON inputs are made of first, by identity (a filter's
        # guard measures its value on every call); anything else, subclasses
        # included, takes the general branches below, which give the same sizes.
        kind = item.__class__
        if kind is str:
            total += len(item) + 2
        elif kind is dict:
            total += 2 + 4 * len(item)
            extend(item.keys())
            extend(item.values())
        elif kind is list or kind is tuple:
            total += 2 + 2 * len(item)
            extend(item)
        elif kind is int or kind is bool:
            total += item.bit_length() // 3 + 1
        elif kind is float or item is None:
            total += 8
        else:
            total += _approx_size_of_other(item, pending)
    return total


def _approx_size_of_other(item: Any, pending: list[Any]) -> int:
    """``_approx_size``'s share for one value of any other class; what it holds
    goes on ``pending``."""
    if isinstance(item, (str, bytes)):
        return len(item) + 2
    if isinstance(item, dict):
        pending.extend(item.keys())
        pending.extend(item.values())
        return 2 + 4 * len(item)
    if isinstance(item, (list, tuple, set, frozenset, KeysView, ValuesView, ItemsView)):
        pending.extend(item)
        return 2 + 2 * len(item)
    if isinstance(item, Namespace):  # prints its attributes like a dict
        pending.append(namespace_attributes(item))
        return 0
    if isinstance(item, int):
        return item.bit_length() // 3 + 1  # ints may have 65,536 bits: about 20,000 digits
    if isinstance(item, range):
        return 2 + 10 * len(item)
    if isinstance(item, TemplateModule) and hasattr(item, "_registry_output"):
        return int(item._registry_output.size)
    return 8


def _check_chars(size: int, limits: RenderLimits, what: str) -> None:
    if size > limits.max_value_chars:
        raise SecurityError(f"{what} would produce about {size} characters; the limit is {limits.max_value_chars}")


def _check_measured(value: Any, limits: RenderLimits, what: str) -> None:
    """Refuse ``value`` when it would print longer than one value may."""
    _check_chars(_approx_size(value, limits.max_value_chars), limits, what)


def _check_result(value: Any, limits: RenderLimits, what: str) -> Any:
    if isinstance(value, (str, bytes)):
        _check_chars(len(value), limits, what)
    elif isinstance(value, (list, tuple, dict, set, frozenset)):
        # Measured through: dict.fromkeys(keys, shared) is small by length only.
        _check_measured(value, limits, what)
    elif isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64 * 1024:
        raise SecurityError(f"{what} produced an integer of {value.bit_length()} bits")
    return value


def _int_arg(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class _Arguments:
    """Positional-or-keyword access to the arguments of a filter or method."""

    def __init__(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        self.args, self.kwargs = args, kwargs

    def get(self, index: int, name: str, default: Any) -> Any:
        return self.args[index] if len(self.args) > index else self.kwargs.get(name, default)


def _estimate(kind: str, value: Any, arguments: _Arguments, limit: int) -> int:
    """About how many characters a memory-multiplying filter or str method
    would produce, computed before it runs."""
    text = value if isinstance(value, str) else ""
    size = len(text) if isinstance(value, str) else _approx_size(value, limit)
    if kind in ("center", "ljust", "rjust", "zfill"):
        return max(_int_arg(arguments.get(0, "width", 80)), size)
    if kind == "indent":
        width = arguments.get(0, "width", 4)
        prefix = len(width) if isinstance(width, str) else _int_arg(width)
        return size + prefix * (text.count("\n") + 1)
    if kind == "expandtabs":
        return size + text.count("\t") * _int_arg(arguments.get(0, "tabsize", 8))
    if kind == "replace":
        old, new = str(arguments.get(0, "old", "")), str(arguments.get(1, "new", ""))
        return size + (text.count(old) if old else size + 1) * len(new)
    if kind == "wordwrap":
        width = max(_int_arg(arguments.get(0, "width", 79)), 1)
        wrap = arguments.get(2, "wrapstring", None)
        return size + len(str(wrap) if wrap is not None else "\n") * (size // width + 1)
    if kind == "tojson":
        return size * (_int_arg(arguments.get(0, "indent", 0)) + 1)
    if kind == "translate":
        table = arguments.get(0, "table", {})
        longest = (
            max((len(v) for v in table.values() if isinstance(v, str)), default=1) if isinstance(table, dict) else 1
        )
        return size * max(longest, 1)
    if kind in ("batch", "slice"):
        return size + _int_arg(arguments.get(0, "linecount", 0))
    return size


# Equal digests must render equally: nothing random.
_NONDETERMINISTIC_FILTERS = frozenset({"random"})
_NONDETERMINISTIC_GLOBALS = frozenset({"lipsum"})
_SIZED_FILTERS = frozenset({"center", "indent", "replace", "batch", "slice", "wordwrap", "tojson"})
_LAZY_FILTERS = frozenset({"map", "select", "reject", "selectattr", "rejectattr"})
_SIZED_STR_METHODS = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs", "replace", "translate"})


def _joined(value: Any, separator: Any, limits: RenderLimits, what: str) -> list[Any]:
    """The items of a join, materialised and measured before joining."""
    items = list(value) if value is not None else []
    size = len(str(separator)) * len(items)
    _check_chars(size, limits, what)
    _check_chars(size + _approx_size(items, limits.max_value_chars - size), limits, what)
    return items


def _guard_builtin_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a filter with a size check on its result, and a pre-check for the
    filters whose arguments say how much memory they take.

    The wrapper takes the context, whatever the filter takes: Jinja folds a
    filter without one into a constant at compile time, with no render's
    limits and its result kept in the compiled code."""
    passes = filter_passes(func)
    sized = name in _SIZED_FILTERS
    # Filters whose arguments need a look of their own before they run; the
    # others only have their value measured (when it is a container).
    special = name in ("join", "format", "sum") or name in _LAZY_FILTERS
    what = f"the {name} filter"

    @pass_context
    @wraps(func)
    def guarded(context: Any, *args: Any, **kwargs: Any) -> Any:
        budget = _budget.get() or _active_budget()
        if time.monotonic() > budget.checkpoint:  # budget.check_time(), inlined: every filter call runs it
            budget.check_time()
        limits = budget.limits
        value = args[0] if args else None
        if sized:
            _check_chars(_estimate(name, value, _Arguments(args[1:], kwargs), limits.max_value_chars), limits, what)
        elif special:
            args = _checked_special(name, args, kwargs, limits)
        elif value.__class__ is not str and isinstance(value, (list, tuple, dict, set, frozenset, range)):
            # Most filters print their value (upper, string, trim, ...), and a
            # nested list that shares one large part prints huge: measure first.
            _check_measured(value, limits, what)
        if passes == "context":
            args = (context, *args)
        elif passes == "eval_context":
            args = (context.eval_ctx, *args)
        elif passes == "environment":
            args = (context.environment, *args)
        result = func(*args, **kwargs)
        if result.__class__ is str:  # _check_result(result, ...), for the usual result
            if len(result) > limits.max_value_chars:
                _check_chars(len(result), limits, what)
            return result
        if isinstance(result, GeneratorType):  # map, select, reject, ...: lazy, so measured item by item
            return _metered(result, what)
        return _check_result(result, limits, what)

    return guarded


def _checked_special(
    name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any], limits: RenderLimits
) -> tuple[Any, ...]:
    """The arguments of a join, format, sum or lazy filter, checked (and, for
    join and the lazy filters, wrapped so that their work is counted)."""
    value = args[0] if args else None
    rest = _Arguments(args[1:], kwargs)
    if name == "join":
        args = (_joined(value, rest.get(0, "d", ""), limits, "the join filter"), *args[1:])
    elif name == "format" and isinstance(value, str):
        _check_format(value, [*args[1:], *kwargs.values()], limits)
    elif name == "sum" and not isinstance(rest.get(1, "start", 0), (int, float)):
        # Adding lists or strings with sum is quadratic; join does it in linear time.
        raise SecurityError("the sum filter adds numbers only; use join for text and lists")
    elif isinstance(value, (list, tuple, dict, set, frozenset, range)):
        _check_measured(value, limits, f"the {name} filter")
    if name in _LAZY_FILTERS and args:
        # They test or map item after item inside, yielding only some:
        # each item they take is a step, as a loop's would be.
        args = (_counted(args[0]), *args[1:])
    return args


def _metered(items: Iterator[Any], what: str) -> Iterator[Any]:
    """A lazy filter's items, each counted as work: chains such as ``map``
    then ``list`` would otherwise build everything before any check."""
    budget = _active_budget()
    limit = budget.limits.max_value_chars
    for item in items:
        budget.check_time()
        budget.chars += _approx_size(item, limit)
        if budget.chars > budget.max_chars:
            raise SecurityError(f"{what} produced more than {budget.max_chars} characters")
        yield item


class TemplateEnvironment(ImmutableSandboxedEnvironment):
    """The sandboxed Jinja environment every definition is compiled in."""

    template_class = _GuardedTemplate
    intercepted_binops = frozenset({"*", "**", "%", "+"})

    def __init__(self, partials: PartialSource) -> None:
        super().__init__(
            loader=_PartialLoader(partials),
            undefined=StrictUndefined,
            autoescape=False,
            auto_reload=False,
        )
        for name in _NONDETERMINISTIC_GLOBALS:
            del self.globals[name]
        self.filters = {
            name: _guard_builtin_filter(name, f)
            for name, f in self.filters.items()
            if name not in _NONDETERMINISTIC_FILTERS
        }
        self.filters[_LOOP_FILTER] = _count_loop
        self.filters[_CONCAT_FILTER] = _guarded_concat
        self.filters[_LITERAL_FILTER] = _measured_literal
        self.filters[_OUTPUT_FILTER] = _print_parts
        self.filters[_TEXT_OUTPUT_FILTER] = _print_text
        self.filters[_TEMPLATE_TEXT_FILTER] = _print_template_text
        self.filters[_WRITTEN_FILTER] = _count_written
        # A partial's analysis, by name: partials never change in one
        # environment, and every definition of a release that includes one
        # would otherwise parse it again.
        self.partial_analyses: dict[str, tuple[frozenset[str], tuple[str | None, ...]] | Exception] = {}

    @overload
    def compile(
        self,
        source: str | nodes.Template,
        name: str | None = None,
        filename: str | None = None,
        raw: Literal[False] = False,
        defer_init: bool = False,
    ) -> CodeType: ...

    @overload
    def compile(
        self,
        source: str | nodes.Template,
        name: str | None = None,
        filename: str | None = None,
        raw: Literal[True] = ...,
        defer_init: bool = False,
    ) -> str: ...

    def compile(
        self,
        source: str | nodes.Template,
        name: str | None = None,
        filename: str | None = None,
        raw: bool = False,
        defer_init: bool = False,
    ) -> str | CodeType:
        # Every template is compiled here, a definition's and every partial
        # its loader gives: the guards go into the syntax tree first.
        tree = self.parse(source, name, filename) if isinstance(source, str) else source
        try:
            _refuse_guard_filters(tree, name, filename)
        except TemplateSyntaxError:
            self.handle_exception(source=source if isinstance(source, str) else None)
        _GuardTransformer(self).visit(tree)
        if raw:
            return super().compile(tree, name, filename, True, defer_init)
        return super().compile(tree, name, filename, False, defer_init)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        # Each of these can copy a megabyte: a template of many of them is
        # slow without a loop, so they read the clock.
        budget = _active_budget()
        budget.check_time()
        limits = budget.limits
        if operator == "*":
            count, repeated = (right, left) if isinstance(right, int) else (left, right)
            if isinstance(repeated, (str, list, tuple)) and isinstance(count, int):
                _check_chars(_approx_size(repeated, limits.max_value_chars) * count, limits, "the * operator")
            elif isinstance(left, int) and isinstance(right, int):
                _check_bits(left.bit_length() + right.bit_length())
        elif operator == "**":
            if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
                _check_bits(left.bit_length() * right)
        elif operator == "%":
            if isinstance(left, str):
                _check_format(left, right if isinstance(right, tuple) else (right,), limits)
        elif operator == "+":
            if isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
                size = _approx_size(left, limits.max_value_chars) + _approx_size(right, limits.max_value_chars)
                _check_chars(size, limits, "the + operator")
        result = super().call_binop(context, operator, left, right)
        return _check_result(result, limits, f"the {operator} operator")

    def getattr(self, obj: Any, attribute: str) -> Any:
        # ``inputs.items`` reads the input named items, not dict.items: a
        # definition's data is what its author means, whatever a key is
        # called (``items``, ``keys``, ``values``, ``get``, ``update``...).
        # Methods stay reachable on dicts without such a key.
        if isinstance(obj, dict):
            try:
                return obj[attribute]
            except (KeyError, TypeError):
                pass
        return super().getattr(obj, attribute)

    def get_template(self, name: Any, parent: str | None = None, globals: Any = None) -> Any:
        # Include, import and extends all load through here (or select_template):
        # each counts as a step, so templates that include one another on
        # every branch fan out no further than a loop could.
        _active_budget().spend_iteration()
        return super().get_template(name, parent, globals)

    def select_template(self, names: Any, parent: str | None = None, globals: Any = None) -> Any:
        _active_budget().spend_iteration()
        return super().select_template(names, parent, globals)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        budget = _active_budget()
        budget.spend_iteration()
        limits = budget.limits
        # The sandbox hands out str.format wrapped; look through the wrapper.
        target = getattr(__obj, "__wrapped__", __obj)
        owner = getattr(target, "__self__", None)
        method = getattr(target, "__name__", "")
        if isinstance(__obj, LoopContext) and args:
            # loop(children) in a recursive for: its items count like any loop's.
            args = (_counted(args[0]), *args[1:])
        elif isinstance(owner, str):
            if method in _SIZED_STR_METHODS:
                _check_chars(
                    _estimate(method, owner, _Arguments(args, kwargs), limits.max_value_chars), limits, f"str.{method}"
                )
            elif method == "join":
                args = (_joined(args[0] if args else (), owner, limits, "str.join"),)
            elif method in ("format", "format_map"):
                _check_format(owner, [*args, *kwargs.values()], limits)
        result = super().call(__context, __obj, *args, **kwargs)
        return _check_result(result, limits, f"calling {method or 'a function'}")


def _check_format(template: str, arguments: Sequence[Any], limits: RenderLimits) -> None:
    """Refuse %-style and str.format templates that would need huge memory:
    wide literal widths, widths taken from arguments, and many references to
    large arguments."""
    if _WIDE_FORMAT.search(template):
        raise SecurityError("format widths of a million or more are not allowed")
    if _NESTED_FORMAT_FIELD.search(template):
        raise SecurityError("format specifications taken from arguments are not allowed")
    if "*" in template and any(abs(_int_arg(v)) > limits.max_value_chars for v in arguments):
        raise SecurityError("a format width taken from an argument must stay under the render limit")
    references = template.count("{") + template.count("%") + 1
    size = len(template) + references * _approx_size(list(arguments), limits.max_value_chars // references)
    _check_chars(size, limits, "formatting")


def _check_bits(bits: int) -> None:
    if bits > 64 * 1024:
        raise SecurityError(f"an integer of about {bits} bits is not allowed")


@dataclass(frozen=True)
class TemplateProblem:
    """A template that does not compile, with its 1-based line within the template."""

    message: str
    line: int | None


class CompiledTemplate:
    """One role's template, parsed and compiled once."""

    def __init__(self, environment: TemplateEnvironment, source: str, *, name: str) -> None:
        with _compiling():
            tree = environment.parse(source, name=name)
            self.referenced = _referenced_templates(tree)
            self.variables = _undeclared_variables(environment, tree)
            code = environment.compile(tree, name=name, filename=name)
        self.template = template_from_code(environment, code)


@contextmanager
def _compiling() -> Iterator[None]:
    """Jinja's and Python's errors while parsing and compiling a template, as
    the ``TemplateCompileError`` every caller reports."""
    try:
        yield
    except TemplateSyntaxError as exc:
        raise TemplateCompileError(TemplateProblem(exc.message or str(exc), exc.lineno)) from exc
    except TemplateError as exc:
        raise TemplateCompileError(TemplateProblem(str(exc), None)) from exc
    except (RecursionError, SyntaxError, MemoryError) as exc:
        raise TemplateCompileError(_too_complex(exc)) from exc


def _too_complex(exc: BaseException) -> TemplateProblem:
    """Python's own limits, reached by compiling a template (deep nesting)."""
    reason = "nested too deeply" if isinstance(exc, (RecursionError, SyntaxError)) else "too large"
    return TemplateProblem(f"template is {reason} to compile", None)


class TemplateCompileError(Exception):
    """A template does not compile; ``problem`` says where."""

    def __init__(self, problem: TemplateProblem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def _referenced_templates(tree: nodes.Template) -> tuple[str | None, ...]:
    """Names of templates this one includes, imports or extends; None for a
    name computed at render time."""
    return tuple(meta.find_referenced_templates(tree))


def _undeclared_variables(environment: TemplateEnvironment, tree: nodes.Template) -> frozenset[str]:
    return frozenset(meta.find_undeclared_variables(tree)) - set(environment.globals)


def analyse_partial(environment: TemplateEnvironment, name: str) -> tuple[frozenset[str], tuple[str | None, ...]]:
    """Variables a partial needs and the templates it references; the partial
    is compiled too (and kept in the environment's cache for rendering).

    Raises ``TemplateNotFound`` when it does not exist and
    ``TemplateCompileError`` when it does not compile.
    """
    known = environment.partial_analyses.get(name)
    if known is None:
        try:
            known = _analyse_partial(environment, name)
        except (TemplateNotFound, TemplateCompileError) as exc:
            known = exc
        environment.partial_analyses[name] = known
    if isinstance(known, Exception):
        raise known.with_traceback(None)  # raised again and again: keep its traceback from growing
    return known


def _analyse_partial(environment: TemplateEnvironment, name: str) -> tuple[frozenset[str], tuple[str | None, ...]]:
    source, _, _ = environment.loader.get_source(environment, name)  # type: ignore[union-attr]
    try:
        tree = environment.parse(source, name=name)
        found = _undeclared_variables(environment, tree), _referenced_templates(tree)
        environment.get_template(name)
    except TemplateSyntaxError as exc:
        raise TemplateCompileError(TemplateProblem(exc.message or str(exc), exc.lineno)) from exc
    except TemplateNotFound:
        raise
    except TemplateError as exc:
        raise TemplateCompileError(TemplateProblem(str(exc), None)) from exc
    except (RecursionError, SyntaxError, MemoryError) as exc:
        raise TemplateCompileError(_too_complex(exc)) from exc
    return found


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
    token = _budget.set(_Budget(limits, deadline))
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
        _budget.reset(token)


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


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _render_error(role: str, message: str) -> RenderError:
    # Jinja's messages can hold an object's repr, with its memory address.
    return RenderError(f"{role} template: {_ADDRESS.sub('', message)}", role=role)


class CompiledValue:
    """A template string that gives a value: a composite's step input.

    A source that is exactly one expression (``{{ inputs.issues }}``) gives
    the expression's value itself, a list stays a list; anything else
    renders to text. Either way it runs under the same guards and budget as
    a message template.
    """

    def __init__(self, environment: TemplateEnvironment, source: str, *, name: str) -> None:
        self.source = source
        with _compiling():
            tree = environment.parse(source, name=name)
            body = tree.body
            if (
                len(body) == 1
                and isinstance(body[0], nodes.Output)
                and len(body[0].nodes) == 1
                and not isinstance(body[0].nodes[0], nodes.TemplateData)
            ):
                assign = nodes.Assign(nodes.Name("result", "store"), body[0].nodes[0], lineno=1)
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
        token = _budget.set(_Budget(limits))
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
            _budget.reset(token)
