"""What the render guard takes from Jinja beyond its documented API.

Each name in ``registry.rendering.jinja_internals`` is checked here against
the installed Jinja, so that a release that changes one fails these tests
loudly instead of silently switching a bound off; and no other module of the
registry may use a private Jinja name.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jinja2 import DictLoader, Environment, pass_context, pass_environment, pass_eval_context
from jinja2.environment import Template
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment
from markupsafe import Markup

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

REGISTRY = Path(__file__).resolve().parents[2] / "registry"
INTERNALS = REGISTRY / "rendering" / "jinja_internals.py"
PARTIALS = {"m": "{% macro hi() %}hi{% endmacro %}top{{ 1 }}"}

# Names of Jinja's internals that the registry has used, or could be tempted to
# (generic ones, such as _parse, would only find the registry's own).
PRIVATE_JINJA_ATTRIBUTES = frozenset(
    {
        "_get_default_module",
        "_get_default_module_async",
        "_module",
        "_body_stream",
        "_Namespace__attrs",
        "_PassArg",
        "_from_namespace",
        "root_render_func",
        "globals_keys",
        "jinja_pass_arg",
        "code_generator_class",
    }
)


def _environment(template_class: type[Template] = ImportHookTemplate) -> Environment:
    environment = Environment(loader=DictLoader(PARTIALS))
    environment.template_class = template_class
    return environment


# --- no private name elsewhere --------------------------------------------------------------


def _registry_modules() -> list[Path]:
    return sorted(path for path in REGISTRY.rglob("*.py") if path != INTERNALS)


@pytest.mark.parametrize("path", _registry_modules(), ids=lambda path: str(path.relative_to(REGISTRY)))
def test_no_other_module_uses_a_private_jinja_name(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jinja2"):
            assert node.module != "jinja2.compiler", f"{path}:{node.lineno} imports Jinja's code generator"
            private = [alias.name for alias in node.names if alias.name.startswith("_")]
            assert not private, f"{path}:{node.lineno} imports {private} from {node.module}"
        elif isinstance(node, ast.Import):
            assert not any(alias.name == "jinja2.compiler" for alias in node.names), f"{path}:{node.lineno}"
        elif isinstance(node, ast.Attribute):
            assert node.attr not in PRIVATE_JINJA_ATTRIBUTES, f"{path}:{node.lineno} uses .{node.attr}"
        elif isinstance(node, ast.FunctionDef):
            assert node.name not in PRIVATE_JINJA_ATTRIBUTES, f"{path}:{node.lineno} overrides {node.name}"


# --- jinja_pass_arg -------------------------------------------------------------------------


def test_filter_passes_reads_what_each_public_decorator_marks() -> None:
    @pass_context
    def with_context(context: Any, value: Any) -> Any:
        return value

    @pass_eval_context
    def with_eval_context(eval_context: Any, value: Any) -> Any:
        return value

    @pass_environment
    def with_environment(environment: Any, value: Any) -> Any:
        return value

    def plain(value: Any) -> Any:
        return value

    assert filter_passes(with_context) == "context"
    assert filter_passes(with_eval_context) == "eval_context"
    assert filter_passes(with_environment) == "environment"
    assert filter_passes(plain) is None


def test_every_marked_builtin_filter_is_recognised() -> None:
    filters = Environment().filters
    # A filter marked in a way the guard does not know would be called without what it asks for.
    unknown = [name for name, f in filters.items() if hasattr(f, "jinja_pass_arg") and filter_passes(f) is None]
    assert unknown == []
    assert filter_passes(filters["map"]) == "context"
    assert filter_passes(filters["xmlattr"]) == "eval_context"
    assert filter_passes(filters["truncate"]) == "environment"
    assert filter_passes(filters["upper"]) is None


# --- _get_default_module and _module --------------------------------------------------------


class _RecordingTemplate(ImportHookTemplate):
    asked: list[Context | None] = []

    def module_for_import(self, ctx: Context | None) -> TemplateModule:
        _RecordingTemplate.asked.append(ctx)
        return super().module_for_import(ctx)


def test_jinja_asks_the_hook_for_every_import_and_include_without_context() -> None:
    environment = _environment(_RecordingTemplate)
    _RecordingTemplate.asked = []
    source = "{% import 'm' as a %}{% from 'm' import hi %}{% include 'm' without context %}|{{ a.hi() }}{{ hi() }}"
    assert environment.from_string(source).render() == "top1|hihi"
    assert len(_RecordingTemplate.asked) == 3


def test_kept_module_is_the_module_jinja_keeps() -> None:
    template = _environment().get_template("m")
    assert isinstance(template, ImportHookTemplate)
    assert template.kept_module is None
    first = template.module  # Jinja makes and keeps it
    assert template.kept_module is first
    assert template.module is first
    template.kept_module = None
    assert template.module is not first  # so Jinja makes another


def test_needs_caller_globals_says_when_jinja_makes_a_module_it_does_not_keep() -> None:
    environment = _environment()
    imported = environment.get_template("m")
    importer = environment.from_string("x", globals={"extra": 1})
    assert needs_caller_globals(imported, importer.new_context())
    assert not needs_caller_globals(imported, imported.new_context())
    assert not needs_caller_globals(imported, None)
    assert isinstance(imported, ImportHookTemplate)
    fresh = imported.jinja_module_for_import(importer.new_context())
    assert fresh is not imported.jinja_module_for_import(importer.new_context())
    assert imported.kept_module is None
    kept = imported.jinja_module_for_import(None)
    assert imported.kept_module is kept is imported.jinja_module_for_import(None)


# --- root_render_func and TemplateModule(template, context, body_stream) --------------------


def test_top_level_output_is_what_the_template_prints() -> None:
    template = _environment().from_string("a{{ x }}b{% for i in range(2) %}{{ i }}{% endfor %}")
    context = template.new_context({"x": 1})
    assert "".join(top_level_output(template, context)) == "a1b01" == template.render(x=1)


class _CountedIterations:
    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces
        self.iterations = 0

    def __iter__(self) -> Iterator[str]:
        self.iterations += 1
        return iter(self.pieces)


def test_a_module_iterates_its_output_every_time_it_is_output() -> None:
    output = _CountedIterations(["kept", "!"])

    class _Template(ImportHookTemplate):
        def module_for_import(self, ctx: Context | None) -> TemplateModule:
            return module_from_output(self, self.new_context(), output)

    environment = _environment(_Template)
    source = "{% include 'm' without context %}{% include 'm' without context %}{% import 'm' as a %}{{ a }}"
    assert environment.from_string(source).render() == "kept!kept!kept!"
    assert output.iterations == 3


# --- Namespace, LoopContext, markup_join, from_code -----------------------------------------


def test_namespace_attributes_are_what_it_holds() -> None:
    make_namespace = Environment().globals["namespace"]
    assert callable(make_namespace)
    namespace = make_namespace(a=1)
    assert namespace_attributes(namespace) == {"a": 1}
    template = Environment().from_string("{% set ns.b = 2 %}")
    template.render(ns=namespace)
    assert namespace_attributes(namespace) == {"a": 1, "b": 2}


def test_a_recursive_loop_calls_a_loop_context() -> None:
    called: list[object] = []

    class _Recording(ImmutableSandboxedEnvironment):
        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
            called.append(__obj)
            return super().call(__context, __obj, *args, **kwargs)

    source = (
        "{% for x in tree recursive %}{% if x is iterable %}({{ loop(x) }}){% else %}{{ x }}{% endif %}{% endfor %}"
    )
    assert _Recording().from_string(source).render(tree=[1, [2]]) == "1(2)"
    assert any(isinstance(obj, LoopContext) for obj in called)


def test_markup_join_is_jinjas_tilde() -> None:
    assert markup_join(["a", 1]) == "a1"
    assert not isinstance(markup_join(["a", 1]), Markup)
    joined = markup_join(["<a>", Markup("<b>")])
    assert isinstance(joined, Markup)
    source = "{% autoescape true %}{{ x ~ y }}{% endautoescape %}"
    assert joined == Environment().from_string(source).render(x="<a>", y=Markup("<b>"))


def test_template_from_code_makes_a_template_of_the_environments_class() -> None:
    environment = _environment()
    template = template_from_code(environment, environment.compile("{{ 1 }}x{{ y }}"))
    assert isinstance(template, ImportHookTemplate)
    assert template.render(y=2) == "1x2"
