"""The guard: a template's syntax tree, rewritten so that its code counts.

Loop and output accounting is put into the template's syntax tree before
Jinja compiles it (``GuardTransformer``), so that the guard needs nothing of
Jinja's code generator: each ``for`` iterates through a counting filter;
each printed group of at most eight parts (text and values) is joined and
counted by one filter call before Jinja yields or buffers it, wherever it is
(the top level, a block, a macro, a ``{% set %}`` block); what a
``{% filter %}`` block produces is counted too; and list, tuple and dict
literals and ``~`` are measured. The filters the rewritten tree calls are
in ``registry.rendering.output`` and registered under the names in
``GUARD_FILTERS``, which no author's template may use
(``refuse_guard_filters``). The guards cost a few calls per render, not one
per output node, and never a sandbox round trip.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jinja2 import Environment, nodes
from jinja2.exceptions import TemplateAssertionError
from jinja2.visitor import NodeTransformer

from registry.rendering.output import (
    count_loop,
    count_written,
    guarded_concat,
    measured_literal,
    print_parts,
    print_template_text,
    print_text,
)

_INTERNAL_PREFIX = "__registry"
_LOOP_FILTER = "__registry_loop"
_CONCAT_FILTER = "__registry_concat"
_LITERAL_FILTER = "__registry_literal"
_OUTPUT_FILTER = "__registry_output"
_TEXT_OUTPUT_FILTER = "__registry_text_output"
_TEMPLATE_TEXT_FILTER = "__registry_template_text"
_WRITTEN_FILTER = "__registry_written"
_PARTS_PER_OUTPUT = 8


class GuardTransformer(NodeTransformer):
    """Rewrites a template's syntax tree so that the compiled code counts."""

    def __init__(self, environment: Environment) -> None:
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


def refuse_guard_filters(tree: nodes.Template, name: str | None, filename: str | None) -> None:
    """Refuse a template that calls one of the guard's own filters, as Jinja
    refuses a filter it does not know."""
    for used in tree.find_all(nodes.Filter):
        if used.name.startswith(_INTERNAL_PREFIX):  # the guards' own filters are not the author's
            raise TemplateAssertionError(f"No filter named {used.name!r}.", used.lineno, name, filename)


GUARD_FILTERS: dict[str, Callable[..., Any]] = {
    _LOOP_FILTER: count_loop,
    _CONCAT_FILTER: guarded_concat,
    _LITERAL_FILTER: measured_literal,
    _OUTPUT_FILTER: print_parts,
    _TEXT_OUTPUT_FILTER: print_text,
    _TEMPLATE_TEXT_FILTER: print_template_text,
    _WRITTEN_FILTER: count_written,
}
"""The filters the guarded tree calls, by the names it calls them by."""
