"""Jinja's built-in filters, wrapped with the guard's checks.

Each built-in filter is wrapped (``guard_builtin_filter``) so that it reads
the clock, has its value measured before it runs (most filters print their
value), its arguments checked when they say how much memory it takes
(``center``, ``indent``, ``join``, ``format``, ...), and its result measured
after. Lazy filters (``map``, ``select``, ...) count each item they take as
a step and each item they give as work.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from functools import wraps
from types import GeneratorType
from typing import Any

from jinja2 import pass_context
from jinja2.exceptions import SecurityError

from registry.rendering.jinja_internals import filter_passes
from registry.rendering.limits import RenderLimits, active_budget, counted, current_budget
from registry.rendering.sizes import (
    Arguments,
    approx_size,
    check_chars,
    check_format,
    check_measured,
    check_result,
    estimate,
    joined,
)

_SIZED_FILTERS = frozenset({"center", "indent", "replace", "batch", "slice", "wordwrap", "tojson"})
_LAZY_FILTERS = frozenset({"map", "select", "reject", "selectattr", "rejectattr"})


def guard_builtin_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
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
        budget = current_budget.get() or active_budget()
        if time.monotonic() > budget.checkpoint:  # budget.check_time(), inlined: every filter call runs it
            budget.check_time()
        limits = budget.limits
        value = args[0] if args else None
        if sized:
            check_chars(estimate(name, value, Arguments(args[1:], kwargs), limits.max_value_chars), limits, what)
        elif special:
            args = _checked_special(name, args, kwargs, limits)
        elif value.__class__ is not str and isinstance(value, (list, tuple, dict, set, frozenset, range)):
            # Most filters print their value (upper, string, trim, ...), and a
            # nested list that shares one large part prints huge: measure first.
            check_measured(value, limits, what)
        if passes == "context":
            args = (context, *args)
        elif passes == "eval_context":
            args = (context.eval_ctx, *args)
        elif passes == "environment":
            args = (context.environment, *args)
        result = func(*args, **kwargs)
        if result.__class__ is str:  # check_result(result, ...), for the usual result
            if len(result) > limits.max_value_chars:
                check_chars(len(result), limits, what)
            return result
        if isinstance(result, GeneratorType):  # map, select, reject, ...: lazy, so measured item by item
            return _metered(result, what)
        return check_result(result, limits, what)

    return guarded


def _checked_special(
    name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any], limits: RenderLimits
) -> tuple[Any, ...]:
    """The arguments of a join, format, sum or lazy filter, checked (and, for
    join and the lazy filters, wrapped so that their work is counted)."""
    value = args[0] if args else None
    rest = Arguments(args[1:], kwargs)
    if name == "join":
        args = (joined(value, rest.get(0, "d", ""), limits, "the join filter"), *args[1:])
    elif name == "format" and isinstance(value, str):
        check_format(value, [*args[1:], *kwargs.values()], limits)
    elif name == "sum" and not isinstance(rest.get(1, "start", 0), (int, float)):
        # Adding lists or strings with sum is quadratic; join does it in linear time.
        raise SecurityError("the sum filter adds numbers only; use join for text and lists")
    elif isinstance(value, (list, tuple, dict, set, frozenset, range)):
        check_measured(value, limits, f"the {name} filter")
    if name in _LAZY_FILTERS and args:
        # They test or map item after item inside, yielding only some:
        # each item they take is a step, as a loop's would be.
        args = (counted(args[0]), *args[1:])
    return args


def _metered(items: Iterator[Any], what: str) -> Iterator[Any]:
    """A lazy filter's items, each counted as work: chains such as ``map``
    then ``list`` would otherwise build everything before any check."""
    budget = active_budget()
    limit = budget.limits.max_value_chars
    for item in items:
        budget.check_time()
        budget.chars += approx_size(item, limit)
        if budget.chars > budget.max_chars:
            raise SecurityError(f"{what} produced more than {budget.max_chars} characters")
        yield item
