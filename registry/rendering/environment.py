"""The sandboxed environment every definition's templates compile and run in.

``TemplateEnvironment`` is a policy layer over Jinja's
``ImmutableSandboxedEnvironment``:

- ``StrictUndefined``: a variable the caller did not give is an error, never
  an empty string. ``{% if x is defined %}`` is how a template makes one
  optional.
- Jinja's default whitespace settings (``trim_blocks=False``,
  ``lstrip_blocks=False``, ``keep_trailing_newline=False``, newline ``\\n``)
  and no autoescaping, so output is exactly what Jinja documents.
- Includes, imports and extends resolve through a ``PartialSource`` (a
  function from a name relative to the agents root to its text), never the
  filesystem; names that could leave the root are refused
  (``normalize_include_name``).
- Resource bounds, per render: loop iterations and calls share one budget
  (``registry.rendering.limits``); every piece of output, including what
  macros and ``{% set %}`` blocks buffer, is counted against a character
  budget (the guard, ``registry.rendering.guard``, and
  ``registry.rendering.output``); operators and the few filters and string
  methods that can multiply memory (``*``, ``**``, ``%``, ``+``, ``center``,
  ``indent``, ``join``, ``replace``, ...) are checked before they run
  (``registry.rendering.sizes`` and ``registry.rendering.filters``); and the
  final output is capped in bytes (``registry.rendering.messages``).
- Nothing random (no ``random`` filter, no ``lipsum``): equal digests must
  render equally.

Every template is compiled here (``TemplateEnvironment.compile``), a
definition's and every partial its loader gives: the guards go into its
syntax tree first.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from types import CodeType
from typing import Any, Literal, overload

from jinja2 import StrictUndefined, TemplateNotFound, nodes
from jinja2.exceptions import TemplateSyntaxError
from jinja2.loaders import BaseLoader
from jinja2.sandbox import ImmutableSandboxedEnvironment

from registry.rendering.filters import guard_builtin_filter
from registry.rendering.guard import GUARD_FILTERS, GuardTransformer, refuse_guard_filters
from registry.rendering.jinja_internals import LoopContext
from registry.rendering.limits import active_budget, counted
from registry.rendering.modules import GuardedTemplate
from registry.rendering.sizes import (
    Arguments,
    approx_size,
    check_bits,
    check_chars,
    check_format,
    check_result,
    estimate,
    joined,
)

PartialSource = Callable[[str], "str | None"]
"""Returns the text of a partial by its name relative to the agents root, or None."""

_INCLUDE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*")
_MAX_INCLUDE_NAME = 512


# Equal digests must render equally: nothing random.
_NONDETERMINISTIC_FILTERS = frozenset({"random"})
_NONDETERMINISTIC_GLOBALS = frozenset({"lipsum"})
_SIZED_STR_METHODS = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs", "replace", "translate"})


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


class TemplateEnvironment(ImmutableSandboxedEnvironment):
    """The sandboxed Jinja environment every definition is compiled in."""

    template_class = GuardedTemplate
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
            name: guard_builtin_filter(name, f)
            for name, f in self.filters.items()
            if name not in _NONDETERMINISTIC_FILTERS
        }
        self.filters.update(GUARD_FILTERS)
        # A partial's analysis, by name: partials never change in one
        # environment, and every definition of a release that includes one
        # would otherwise parse it again.
        self.partial_analyses: dict[str, tuple[frozenset[str], tuple[str | None, ...]] | Exception] = {}
        # The placeholder names each partial analysed writes (``registry.rendering.placeholders``).
        self.partial_placeholders: dict[str, frozenset[str]] = {}

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
            refuse_guard_filters(tree, name, filename)
        except TemplateSyntaxError:
            self.handle_exception(source=source if isinstance(source, str) else None)
        GuardTransformer(self).visit(tree)
        if raw:
            return super().compile(tree, name, filename, True, defer_init)
        return super().compile(tree, name, filename, False, defer_init)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        # Each of these can copy a megabyte: a template of many of them is
        # slow without a loop, so they read the clock.
        budget = active_budget()
        budget.check_time()
        limits = budget.limits
        if operator == "*":
            count, repeated = (right, left) if isinstance(right, int) else (left, right)
            if isinstance(repeated, (str, list, tuple)) and isinstance(count, int):
                check_chars(approx_size(repeated, limits.max_value_chars) * count, limits, "the * operator")
            elif isinstance(left, int) and isinstance(right, int):
                check_bits(left.bit_length() + right.bit_length())
        elif operator == "**":
            if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
                check_bits(left.bit_length() * right)
        elif operator == "%":
            if isinstance(left, str):
                check_format(left, right if isinstance(right, tuple) else (right,), limits)
        elif operator == "+":
            if isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
                size = approx_size(left, limits.max_value_chars) + approx_size(right, limits.max_value_chars)
                check_chars(size, limits, "the + operator")
        result = super().call_binop(context, operator, left, right)
        return check_result(result, limits, f"the {operator} operator")

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
        active_budget().spend_iteration()
        return super().get_template(name, parent, globals)

    def select_template(self, names: Any, parent: str | None = None, globals: Any = None) -> Any:
        active_budget().spend_iteration()
        return super().select_template(names, parent, globals)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        budget = active_budget()
        budget.spend_iteration()
        limits = budget.limits
        # The sandbox hands out str.format wrapped; look through the wrapper.
        target = getattr(__obj, "__wrapped__", __obj)
        owner = getattr(target, "__self__", None)
        method = getattr(target, "__name__", "")
        if isinstance(__obj, LoopContext) and args:
            # loop(children) in a recursive for: its items count like any loop's.
            args = (counted(args[0]), *args[1:])
        elif isinstance(owner, str):
            if method in _SIZED_STR_METHODS:
                check_chars(
                    estimate(method, owner, Arguments(args, kwargs), limits.max_value_chars), limits, f"str.{method}"
                )
            elif method == "join":
                args = (joined(args[0] if args else (), owner, limits, "str.join"),)
            elif method in ("format", "format_map"):
                check_format(owner, [*args, *kwargs.values()], limits)
        result = super().call(__context, __obj, *args, **kwargs)
        return check_result(result, limits, f"calling {method or 'a function'}")
