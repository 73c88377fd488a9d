"""Imported partials' modules: which are kept across renders, and what
reusing one costs.

Jinja keeps the module an ``{% import %}`` (or an include without context)
builds for good. ``GuardedTemplate`` keeps it only when it holds no state a
template can change, charges its cost again to every render that reuses it,
and makes its output count again each time it is output. It reaches Jinja's
import machinery through ``registry.rendering.jinja_internals``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from jinja2.runtime import Context
from jinja2.utils import Cycler, Joiner, Namespace

from registry.rendering.jinja_internals import (
    ImportHookTemplate,
    TemplateModule,
    module_from_output,
    needs_caller_globals,
    top_level_output,
)
from registry.rendering.limits import active_budget


class _KeptOutput:
    """An imported module's output: counted when the module ran, and again
    every time it is output (an include without context, printing the module)."""

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces
        self.size = sum(map(len, pieces))

    def __iter__(self) -> Iterator[str]:
        budget = active_budget()
        for piece in self.pieces:
            yield budget.counted(piece)


@dataclass(frozen=True)
class _ModuleCost:
    """What building a module spent; charged again to every render that
    reuses it, so that a render's outcome never depends on an earlier one."""

    chars: int
    iterations: int


class GuardedTemplate(ImportHookTemplate):
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
        budget = active_budget()
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
