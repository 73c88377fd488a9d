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

Loop and output accounting is woven into the compiled code
(``_GuardedCodeGenerator``): each ``for`` iterates through a counting filter
(put there by transforming the syntax tree before code generation); every
buffer (macros, call and filter blocks, ``{% set %}`` blocks) is a list
that counts what is appended to it; and the top-level output is counted as
it streams out of the template's generator, each piece before it is kept.
Printed values pass through ``finalize``, which measures containers before
they are turned into text. So the guards cost a few calls per render, not
one per output node, and never a sandbox round trip.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from functools import wraps
from io import StringIO
from typing import Any

from jinja2 import StrictUndefined, TemplateNotFound, meta, nodes, pass_context
from jinja2.compiler import CodeGenerator
from jinja2.exceptions import SecurityError, TemplateError, TemplateSyntaxError, UndefinedError
from jinja2.loaders import BaseLoader
from jinja2.runtime import LoopContext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

from registry.errors import RenderError
from registry.models import Message

# Changing anything that alters rendered bytes must change this string: it is
# folded into every digest, so equal digests keep meaning equal output.
RENDER_SEMANTICS = "prompt-registry/render/v1"

PartialSource = Callable[[str], "str | None"]
"""Returns the text of a partial by its name relative to the agents root, or None."""

_INCLUDE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*")
_MAX_INCLUDE_NAME = 512
_WIDE_FORMAT = re.compile(r"\d{7,}")  # a width or precision of a million or more
_NESTED_FORMAT_FIELD = re.compile(r"\{[^{}]*:[^{}]*\{")  # '{0:>{1}}': a width taken from an argument

_LOOP_FILTER = "__registry_loop"
_CONCAT_FILTER = "__registry_concat"
_PARTS_PER_APPEND = 8
_PARTS_PLACEHOLDER = "__registry_parts"


@dataclass(frozen=True)
class RenderLimits:
    """Per-render bounds. Part of the rendering contract: client and server
    use the same defaults so that they fail alike."""

    max_output_bytes: int = 1024 * 1024
    max_iterations: int = 100_000
    max_seconds: float = 2.0

    @property
    def max_value_chars(self) -> int:
        """The largest string or list any single operation may produce."""
        return self.max_output_bytes

    @property
    def max_work_chars(self) -> int:
        """All output produced while rendering, buffered or not."""
        return 4 * self.max_output_bytes


class _Budget:
    __slots__ = ("limits", "iterations", "chars", "deadline", "max_iterations", "max_chars")

    # Output does not read the clock: without loops, calls, filters or
    # includes (which all read it) a template prints at most its own text.

    def __init__(self, limits: RenderLimits) -> None:
        self.limits = limits
        self.iterations = 0
        self.chars = 0
        self.deadline = time.monotonic() + limits.max_seconds
        self.max_iterations = limits.max_iterations
        self.max_chars = limits.max_work_chars

    def spend_iteration(self) -> None:
        self.iterations += 1
        if self.iterations > self.max_iterations:
            raise SecurityError(f"rendering took more than {self.max_iterations} loop iterations and calls")
        self.check_time()

    def spend_chars(self, count: int) -> None:
        self.chars += count
        if self.chars > self.max_chars:
            raise SecurityError(f"rendering produced more than {self.max_chars} characters")

    def check_time(self) -> None:
        # Counting bounds how much a template does, not how slowly: a loop of
        # expensive filters stays within every count. The clock bounds the rest.
        if time.monotonic() > self.deadline:
            raise SecurityError(f"rendering took longer than {self.limits.max_seconds} seconds")


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

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = _guard_filter(_LOOP_FILTER, node.iter)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return _guard_filter(_CONCAT_FILTER, nodes.List(node.nodes, lineno=node.lineno))


def _guard_filter(name: str, node: nodes.Expr) -> nodes.Filter:
    return nodes.Filter(node, name, [], [], None, None, lineno=node.lineno)


class _GuardedCodeGenerator(CodeGenerator):
    def visit_Template(self, node: nodes.Template, frame: Any = None) -> None:
        _GuardTransformer().visit(node)
        super().visit_Template(node, frame)

    def buffer(self, frame: Any) -> None:
        # Every buffered frame (macro, call block, filter block, set block,
        # recursive loop) starts its buffer here.
        frame.buffer = self.temporary_identifier()
        self.writeline(f"{frame.buffer} = environment.counted_buffer()")

    def visit_Output(self, node: nodes.Output, frame: Any) -> None:
        # Jinja evaluates every part of an output node before appending them
        # to a buffer together: split long nodes, so that only a few values
        # (each bounded) exist before they are counted.
        for start in range(0, len(node.nodes), _PARTS_PER_APPEND):
            part = nodes.Output(node.nodes[start : start + _PARTS_PER_APPEND], lineno=node.lineno)
            if frame.buffer is None:
                self._yield_joined(part, frame)
            else:
                super().visit_Output(part, frame)

    def _yield_joined(self, node: nodes.Output, frame: Any) -> None:
        """Yield a group of parts as one string, where Jinja yields each part.

        Each yielded piece is counted by ``_counted_join``: one piece per
        group is about half the cost of counting the parts one by one. Jinja
        writes the code for a buffered frame, into a side stream, and its
        opening line (written before any part's code, so never inside a
        template's text) becomes the yield.
        """
        stream, self.stream = self.stream, StringIO()
        frame.buffer = _PARTS_PLACEHOLDER
        try:
            super().visit_Output(node, frame)
            code = self.stream.getvalue()
        finally:
            self.stream, frame.buffer = stream, None
        code = code.replace(f"{_PARTS_PLACEHOLDER}.extend((", "yield ''.join((", 1)
        code = code.replace(f"{_PARTS_PLACEHOLDER}.append(", "yield str(", 1)  # one part, and a trailing comma
        self.stream.write(code)


class _CountedBuffer(list):  # type: ignore[type-arg]
    """A buffered frame's output, counted as it is appended: a macro's buffer
    would otherwise grow without bound before anything printed it."""

    __slots__ = ("_budget",)

    def __init__(self) -> None:
        super().__init__()
        self._budget = _active_budget()

    def append(self, piece: str) -> None:
        self._budget.spend_chars(len(piece))
        super().append(piece)

    def extend(self, pieces: Iterable[str]) -> None:
        pieces = tuple(pieces)  # Jinja passes a tuple of parts that exist already
        self._budget.spend_chars(sum(map(len, pieces)))
        super().extend(pieces)


def _counted_join(pieces: Iterable[str], budget: _Budget) -> str:
    """A template's top-level output, joined; each piece is counted before it
    is kept, so a runaway template is refused before its output exists.

    ``room`` is taken once, for speed: buffers spending during the render are
    caught by the final check, so at most twice the budget is ever held."""
    kept: list[str] = []
    keep = kept.append
    room = budget.max_chars - budget.chars
    size = 0
    for piece in pieces:
        size += len(piece)
        if size > room:
            break
        keep(piece)
    budget.spend_chars(size)
    return "".join(kept)


def _checked_print(value: Any) -> Any:
    """Jinja's ``finalize``: every printed value passes here before ``str()``.
    A container prints all its parts, and a nested list that shares one large
    part prints huge: measure it first."""
    if value.__class__ is not str and isinstance(value, (list, tuple, dict, set, frozenset)):
        limits = _active_budget().limits
        _check_chars(_approx_size(value, limits.max_value_chars), limits, "printing a value")
    return value


def _counted(iterable: Iterable[Any]) -> Iterable[Any]:
    budget = _active_budget()
    for item in iterable:
        # budget.spend_iteration(), inlined: this runs for every item of every loop.
        if budget.iterations >= budget.max_iterations or time.monotonic() > budget.deadline:
            budget.spend_iteration()  # raises, naming the bound reached
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
    _check_chars(sum(_approx_size(p, limits.max_value_chars) for p in parts), limits, "the ~ operator")
    return "".join(str(p) for p in parts)


def _approx_size(value: Any, limit: int) -> int:
    """About how many characters ``value`` prints as, counting shared parts
    every time they appear; stops counting once past ``limit``."""
    total = 0
    pending = [value]
    while pending and total <= limit:
        item = pending.pop()
        if isinstance(item, (str, bytes)):
            total += len(item) + 2
        elif isinstance(item, dict):
            total += 2 + 4 * len(item)
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            total += 2 + 2 * len(item)
            pending.extend(item)
        else:
            total += 8
    return total


def _check_chars(size: int, limits: RenderLimits, what: str) -> None:
    if size > limits.max_value_chars:
        raise SecurityError(f"{what} would produce about {size} characters; the limit is {limits.max_value_chars}")


def _check_result(value: Any, limits: RenderLimits, what: str) -> Any:
    if isinstance(value, (str, bytes, list, tuple, dict, set, frozenset)):
        _check_chars(len(value), limits, what)
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
_SIZED_STR_METHODS = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs", "replace", "translate"})


def _joined(value: Any, separator: Any, limits: RenderLimits, what: str) -> list[Any]:
    """The items of a join, materialised and measured before joining."""
    items = list(value) if value is not None else []
    size = sum(_approx_size(item, limits.max_value_chars) for item in items) + len(str(separator)) * len(items)
    _check_chars(size, limits, what)
    return items


def _guard_builtin_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a filter with a size check on its result, and a pre-check for the
    filters whose arguments say how much memory they take."""
    # Filters marked pass_context/pass_environment get that first.
    offset = 1 if getattr(func, "jinja_pass_arg", None) is not None else 0

    @wraps(func)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        budget = _active_budget()
        budget.check_time()
        limits = budget.limits
        value = args[offset] if len(args) > offset else None
        rest = _Arguments(args[offset + 1 :], kwargs)
        if name in _SIZED_FILTERS:
            _check_chars(_estimate(name, value, rest, limits.max_value_chars), limits, f"the {name} filter")
        elif name == "join":
            items = _joined(value, rest.get(0, "d", ""), limits, "the join filter")
            args = (*args[:offset], items, *args[offset + 1 :])
        elif name == "format" and isinstance(value, str):
            _check_format(value, [*args[offset + 1 :], *kwargs.values()], limits)
        elif name == "sum" and not isinstance(rest.get(1, "start", 0), (int, float)):
            # Adding lists or strings with sum is quadratic; join does it in linear time.
            raise SecurityError("the sum filter adds numbers only; use join for text and lists")
        elif isinstance(value, (list, tuple, dict, set, frozenset)):
            # Most filters print their value (upper, string, trim, ...), and a
            # nested list that shares one large part prints huge: measure first.
            _check_chars(_approx_size(value, limits.max_value_chars), limits, f"the {name} filter")
        return _check_result(func(*args, **kwargs), limits, f"the {name} filter")

    return guarded


class TemplateEnvironment(ImmutableSandboxedEnvironment):
    """The sandboxed Jinja environment every definition is compiled in."""

    code_generator_class = _GuardedCodeGenerator
    intercepted_binops = frozenset({"*", "**", "%", "+"})

    def __init__(self, partials: PartialSource) -> None:
        super().__init__(
            loader=_PartialLoader(partials),
            undefined=StrictUndefined,
            autoescape=False,
            auto_reload=False,
            finalize=_checked_print,
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
        self.counted_buffer = _CountedBuffer
        # A partial's analysis, by name: partials never change in one
        # environment, and every definition of a release that includes one
        # would otherwise parse it again.
        self.partial_analyses: dict[str, tuple[frozenset[str], tuple[str | None, ...]] | Exception] = {}

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

    def get_template(self, name: Any, parent: str | None = None, globals: Any = None) -> Any:  # noqa: A002
        # Include, import and extends all load through here (or select_template):
        # each counts as a step, so templates that include one another on
        # every branch fan out no further than a loop could.
        _active_budget().spend_iteration()
        return super().get_template(name, parent, globals)

    def select_template(self, names: Any, parent: str | None = None, globals: Any = None) -> Any:  # noqa: A002
        _active_budget().spend_iteration()
        return super().select_template(names, parent, globals)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
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
    size = len(template) + references * sum(_approx_size(a, limits.max_value_chars) for a in arguments)
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
        try:
            tree = environment.parse(source, name=name)
            self.referenced = _referenced_templates(tree)
            self.variables = _undeclared_variables(environment, tree)
            code = environment.compile(tree, name=name, filename=name)
        except TemplateSyntaxError as exc:
            raise TemplateCompileError(TemplateProblem(exc.message or str(exc), exc.lineno)) from exc
        except TemplateError as exc:
            raise TemplateCompileError(TemplateProblem(str(exc), None)) from exc
        except (RecursionError, SyntaxError, MemoryError) as exc:
            raise TemplateCompileError(_too_complex(exc)) from exc
        self.template = environment.template_class.from_code(environment, code, environment.make_globals(None), None)


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
) -> tuple[Message, ...]:
    """Render each role's template with ``variables``, in order.

    Every failure is a ``RenderError`` naming the role; nothing foreign
    escapes, and no traceback or server path is in the message.
    """
    budget = _Budget(limits)
    token = _budget.set(budget)
    try:
        messages = []
        total = 0
        for role, compiled in templates:
            content = _render_one(role, compiled, variables, budget)
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


def _render_one(role: str, compiled: CompiledTemplate, variables: Mapping[str, Any], budget: _Budget) -> str:
    template = compiled.template
    try:
        # Template.render, with the output counted as it streams.
        return _counted_join(template.root_render_func(template.new_context(variables)), budget)
    except UndefinedError as exc:
        raise RenderError(f"{role} template: {exc.message}", role=role) from exc
    except SecurityError as exc:
        raise RenderError(f"{role} template: unsafe operation refused: {exc}", role=role) from exc
    except TemplateNotFound as exc:
        raise RenderError(f"{role} template: {exc.message}", role=role) from exc
    except TemplateError as exc:
        raise RenderError(f"{role} template: {exc.message or type(exc).__name__}", role=role) from exc
    except RecursionError as exc:
        raise RenderError(f"{role} template: recursion too deep", role=role) from exc
    except MemoryError as exc:
        raise RenderError(f"{role} template: out of memory while rendering", role=role) from exc
    except Exception as exc:  # noqa: BLE001 - anything a template's code raises is the author's error
        raise RenderError(f"{role} template: {type(exc).__name__}: {exc}", role=role) from exc
