"""Everything the render guard takes from Jinja beyond its documented API.

The guard stays on Jinja's documented extension points wherever it can:
subclassing ``Environment`` (``compile``, the sandbox's ``call``,
``call_binop`` and ``intercepted_binops``, ``template_class``, ``filters``),
transforming the template's syntax tree (``jinja2.nodes``,
``NodeTransformer``) and filters made with ``pass_context``. What is left
could not be done through them, and is here, each with why. Nothing else in
the registry names a private Jinja name; ``tests/rendering/test_jinja_internals.py``
checks each of these against the installed Jinja, so that a release that
changes one fails the tests loudly instead of switching a bound off.

Private names (a leading underscore):

- ``Template._get_default_module`` and ``Template._module``: every
  ``{% import %}``, ``{% from ... import %}`` and include without context
  calls the first, which builds the template's module once and keeps it in
  the second for good. The guard must decide per render whether a module may
  be kept (one holding a namespace, cycler or joiner would carry one
  caller's values into the next render) and charge a kept module's cost to
  every render that reuses it. No documented hook sees an import, so
  ``ImportHookTemplate`` routes the private method to ``module_for_import``.
- ``Namespace._Namespace__attrs``: what a ``namespace()`` holds. A value is
  measured before it is printed (it prints its attributes like a dict), and
  ``Namespace`` offers no public way to list them.

Public names that Jinja does not document, with the behaviour relied on:

- ``Context.globals_keys``: Jinja builds a fresh module, never kept, when the
  importing context has globals the imported template lacks
  (``needs_caller_globals``); the guard keeps that rule.
- ``Template.root_render_func`` and ``TemplateModule(template, context,
  body_stream)``: a module is built from output the guard holds, and Jinja
  iterates ``body_stream`` again each time the module is printed or included
  without context, so that output is counted every time.
- The ``jinja_pass_arg`` attribute set by ``pass_context``,
  ``pass_eval_context`` and ``pass_environment``: every built-in filter is
  wrapped so that it takes the context (Jinja never folds such a filter into
  a constant at compile time, where no render's limits apply), and the
  wrapper must then pass the filter what it asked for.
- ``jinja2.runtime.LoopContext``: ``loop(children)`` in a recursive loop is a
  call of this object; its items count like any loop's.
- ``jinja2.runtime.markup_join``: Jinja's own ``~``, which keeps ``Markup``
  under autoescape; the guarded ``~`` joins exactly as it does.
- ``Template.from_code`` and ``Environment.make_globals``: how Jinja's own
  loaders make a template of compiled code; a definition's templates are
  compiled from a syntax tree the registry has already analysed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from types import CodeType
from typing import Any, Literal

from jinja2 import Environment, pass_context, pass_environment, pass_eval_context
from jinja2.environment import Template, TemplateModule
from jinja2.runtime import Context, LoopContext, markup_join
from jinja2.utils import Namespace

__all__ = [
    "ImportHookTemplate",
    "LoopContext",
    "PassArg",
    "TemplateModule",
    "filter_passes",
    "markup_join",
    "module_from_output",
    "namespace_attributes",
    "needs_caller_globals",
    "template_from_code",
    "top_level_output",
]

PassArg = Literal["context", "eval_context", "environment"]


def _marker(decorator: Callable[[Callable[..., Any]], Callable[..., Any]]) -> object:
    def probe() -> None:
        """Marked by the decorator, to learn how it marks."""

    return getattr(decorator(probe), "jinja_pass_arg", None)


_PASS_ARGS: dict[object, PassArg] = {
    _marker(pass_context): "context",
    _marker(pass_eval_context): "eval_context",
    _marker(pass_environment): "environment",
}


def filter_passes(func: Callable[..., Any]) -> PassArg | None:
    """What Jinja passes ``func`` before its value (None: nothing)."""
    return _PASS_ARGS.get(getattr(func, "jinja_pass_arg", None))


class ImportHookTemplate(Template):
    """Jinja's ``Template``, with the module Jinja makes for an import asked
    of ``module_for_import``, which a subclass overrides."""

    def _get_default_module(self, ctx: Context | None = None) -> TemplateModule:
        return self.module_for_import(ctx)

    def module_for_import(self, ctx: Context | None) -> TemplateModule:
        """The module an import of this template gets; by default Jinja's."""
        return self.jinja_module_for_import(ctx)

    def jinja_module_for_import(self, ctx: Context | None) -> TemplateModule:
        """What Jinja itself does: a new module when ``ctx`` has globals of
        its own, else the kept one, made and kept on first use."""
        return Template._get_default_module(self, ctx)

    @property
    def kept_module(self) -> TemplateModule | None:
        """The module Jinja keeps for this template, if any yet."""
        return self._module

    @kept_module.setter
    def kept_module(self, module: TemplateModule | None) -> None:
        self._module = module


def needs_caller_globals(template: Template, ctx: Context | None) -> bool:
    """Whether Jinja would build a fresh, unkept module for an import of
    ``template`` from ``ctx``: the importing context has globals of its own."""
    return ctx is not None and bool(ctx.globals_keys - template.globals.keys())


def top_level_output(template: Template, context: Context) -> Iterator[str]:
    """Run ``template``'s top level in ``context``, piece by piece."""
    return template.root_render_func(context)


def module_from_output(template: Template, context: Context, output: Iterable[str]) -> TemplateModule:
    """A module of ``template`` whose output is ``output``, iterated again
    every time the module is printed or included without context."""
    return TemplateModule(template, context, output)


def namespace_attributes(namespace: Namespace) -> dict[str, Any]:
    """What a ``namespace()`` holds, by name."""
    return namespace._Namespace__attrs  # type: ignore[no-any-return]  # Namespace answers any attribute as Any


def template_from_code(environment: Environment, code: CodeType) -> Template:
    """A template of ``environment``'s template class from compiled code, as
    Jinja's loaders make one."""
    return environment.template_class.from_code(environment, code, environment.make_globals(None), None)
