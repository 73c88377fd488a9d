"""Rendering untrusted templates: plain Jinja output, includes, the sandbox and resource bounds."""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from jinja2.sandbox import ImmutableSandboxedEnvironment

from registry.errors import RenderError
from registry.models import Message
from registry.rendering import (
    CompiledTemplate,
    RenderLimits,
    TemplateCompileError,
    TemplateEnvironment,
    analyse_partial,
    normalize_include_name,
    render_messages,
)
from tests.support.waits import LATE

REPOSITORY = Path(__file__).resolve().parents[2]
DESIGN_EXAMPLE = REPOSITORY / "library" / "ai_gateway" / "agents" / "chat" / "minimal.yml"
TOOLS = [
    {"name": "issue_reader", "description": "Reads an issue given its reference.", "example": 'issue_reader("#12")'},
    {"name": "ci_job_log", "description": "Returns the log of a CI job.", "example": ""},
]
LEAK_MARKERS = ("Traceback", "site-packages", "__builtins__", " at 0x", str(REPOSITORY), 'File "')


def _compile(source: str, *, partials: Mapping[str, str] | None = None, role: str = "user") -> CompiledTemplate:
    environment = TemplateEnvironment(dict(partials or {}).get)
    return CompiledTemplate(environment, source, name=f"test#{role}")


def _render(
    source: str,
    variables: Mapping[str, Any] | None = None,
    *,
    partials: Mapping[str, str] | None = None,
    limits: RenderLimits = RenderLimits(),
) -> str:
    (message,) = render_messages([("user", _compile(source, partials=partials))], variables or {}, limits=limits)
    return message.content


def _render_error(
    source: str,
    variables: Mapping[str, Any] | None = None,
    *,
    partials: Mapping[str, str] | None = None,
    limits: RenderLimits = RenderLimits(),
) -> RenderError:
    with pytest.raises(RenderError) as info:
        _render(source, variables, partials=partials, limits=limits)
    error = info.value
    assert error.extensions == {"role": "user"}
    assert not any(marker in str(error) for marker in LEAK_MARKERS), str(error)
    return error


def _plain_jinja(source: str, variables: Mapping[str, Any]) -> str:
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False)
    return environment.from_string(source).render(**variables)


# --- the design example and Jinja's own semantics --------------------------------------


def test_design_example_renders_exactly_as_plain_jinja_renders_it() -> None:
    templates = yaml.safe_load(DESIGN_EXAMPLE.read_text(encoding="utf-8"))["prompt_templates"]
    compiled = [(role, _compile(text, role=role)) for role, text in templates.items()]
    messages = render_messages(compiled, {"tools": TOOLS}, limits=RenderLimits())
    assert messages == tuple(
        Message(role=role, content=_plain_jinja(text, {"tools": TOOLS})) for role, text in templates.items()
    )
    assert [m.role for m in messages] == ["system", "assistant", "user"]
    assert messages[1].content == "{agent_scratchpad}\nThought:"
    assert messages[2].content == "Question: {question}"
    assert '<example>\n        issue_reader("#12")\n        </example>' in messages[0].content
    assert messages[0].content.count("<example>") == 1


def test_design_example_needs_an_example_key_in_every_tool() -> None:
    templates = yaml.safe_load(DESIGN_EXAMPLE.read_text(encoding="utf-8"))["prompt_templates"]
    tools = [{"name": "issue_reader", "description": "Reads an issue."}]
    with pytest.raises(jinja2.UndefinedError):
        _plain_jinja(templates["system"], {"tools": tools})
    with pytest.raises(RenderError) as info:
        render_messages(
            [("system", _compile(templates["system"], role="system"))], {"tools": tools}, limits=RenderLimits()
        )
    assert "example" in str(info.value)
    assert info.value.extensions == {"role": "system"}


def test_single_brace_placeholders_stay_literal() -> None:
    assert _render('Question: {question}\n{"findings": []}') == 'Question: {question}\n{"findings": []}'


def test_trailing_newline_of_a_literal_block_is_dropped() -> None:
    source = yaml.safe_load("user: |\n  Hello {{ name }}.\n")["user"]
    assert source.endswith("\n")
    assert _render(source, {"name": "Ada"}) == "Hello Ada."


def test_block_tags_keep_their_newlines_unless_stripped_with_a_dash() -> None:
    files = {"files": ["a.py", "b.py"]}
    kept = "Files to review:\n{% for f in files %}\n- {{ f }}\n{% endfor %}\nQuestion: {question}\n"
    stripped = "Files to review:\n{%- for f in files %}\n- {{ f }}\n{%- endfor %}\nQuestion: {question}\n"
    assert _render(kept, files) == "Files to review:\n\n- a.py\n\n- b.py\n\nQuestion: {question}"
    assert _render(stripped, files) == "Files to review:\n- a.py\n- b.py\nQuestion: {question}"


def test_indented_block_tags_leave_their_indentation() -> None:
    source = "Answer briefly.\n  {% if urgent is defined %}\nThis is urgent.\n  {% endif %}\nThanks.\n"
    assert _render(source) == "Answer briefly.\n  \nThanks."


def test_output_is_not_autoescaped() -> None:
    assert _render("{{ x }}", {"x": "<b>&'\"</b>"}) == "<b>&'\"</b>"


def test_raw_blocks_and_expressions_print_literal_braces() -> None:
    source = "{{ '{{' }}name{{ '}}' }} and {% raw %}{{ name }}{% endraw %} stay literal"
    assert _render(source) == "{{name}} and {{ name }} stay literal"


def test_messages_come_out_in_the_order_given() -> None:
    templates = [
        ("assistant", _compile("A {{ x }}", role="assistant")),
        ("system", _compile("S {{ x }}", role="system")),
        ("user", _compile("U {{ x }}", role="user")),
    ]
    messages = render_messages(templates, {"x": 1}, limits=RenderLimits())
    assert messages == (Message("assistant", "A 1"), Message("system", "S 1"), Message("user", "U 1"))


def test_undefined_variable_is_an_error_naming_it() -> None:
    assert "'question' is undefined" in str(_render_error("{{ question }}"))


def test_missing_attribute_is_an_error_not_false() -> None:
    assert "has no attribute 'example'" in str(_render_error("{% if tool.example %}x{% endif %}", {"tool": {}}))


def test_is_defined_makes_a_variable_optional() -> None:
    assert _render("a{% if x is defined %}{{ x }}{% endif %}b") == "ab"


DICT_METHOD_NAMES = ("items", "keys", "values", "get", "pop", "update", "copy", "setdefault", "clear")


@pytest.mark.parametrize("name", DICT_METHOD_NAMES)
def test_a_key_named_like_a_dict_method_reads_the_data(name: str) -> None:
    inputs = {name: ["a", "b"], "other": 1}
    assert _render(f"{{{{ inputs.{name} | join(',') }}}}", {"inputs": inputs}) == "a,b"
    assert _render(f"{{% for x in inputs.{name} %}}{{{{ x }}}}{{% endfor %}}", {"inputs": inputs}) == "ab"
    assert _render(f"{{{{ inputs.nested.{name} }}}}", {"inputs": {"nested": {name: "deep"}}}) == "deep"


def test_dict_methods_still_work_where_no_key_has_their_name() -> None:
    assert _render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {"d": {"a": 1, "b": 2}}) == "a=1;b=2;"
    assert _render("{{ d.get('x', 'none') }}", {"d": {"a": 1}}) == "none"


def test_a_missing_key_that_is_no_method_is_still_an_error() -> None:
    assert "'example'" in str(_render_error("{{ d.example }}", {"d": {"items": 1}}))


def test_error_names_the_role_that_failed() -> None:
    templates = [("system", _compile("fine", role="system")), ("user", _compile("{{ nope }}"))]
    with pytest.raises(RenderError) as info:
        render_messages(templates, {}, limits=RenderLimits())
    assert str(info.value).startswith("user template:")
    assert info.value.extensions == {"role": "user"}


def test_runtime_type_error_in_a_template_is_a_render_error() -> None:
    error = _render_error("{{ 1 + 'a' }}")
    assert "TypeError" in str(error)


@pytest.mark.parametrize("source", ["{{ nope }}", "{{ ''.__class__ }}", "{% include 'missing' %}", "{{ 1 // 0 }}"])
def test_foreign_error_is_re_raised_from_the_original(source: str) -> None:
    error = _render_error(source)
    assert error.__cause__ is not None
    assert not isinstance(error.__cause__, RenderError)


def test_template_that_does_not_parse_reports_its_line() -> None:
    with pytest.raises(TemplateCompileError) as info:
        _compile("line one\nline two\n{% if %}\n")
    assert info.value.problem.line == 3
    assert "Expected an expression" in info.value.problem.message


def test_compiled_template_knows_its_variables_and_references() -> None:
    source = (
        "{% set local = 1 %}{% include '_partials/a.jinja' %}{% include name %}"
        "{% for item in items %}{{ item }}{{ loop.index }}{{ local }}{% endfor %}"
        "{{ range(2) | list }}{{ namespace(a=1).a }}{{ question }}"
    )
    compiled = _compile(source)
    assert compiled.variables == frozenset({"items", "name", "question"})
    assert compiled.referenced == ("_partials/a.jinja", None)


# --- includes ---------------------------------------------------------------------------------


PARTIALS = {
    "_partials/greeting.jinja": "Hello {{ name }}!\n",
    "_partials/outer.jinja": "[{% include '_partials/greeting.jinja' %}]",
    "_partials/macros.jinja": "{% macro shout(text) %}{{ text | upper }}{% endmacro %}",
    "_partials/self.jinja": "{% include '_partials/self.jinja' %}",
    # Includes itself twice per level: 2**40 includes, without a loop or a call.
    "_partials/fan.jinja": "{% if d < 40 %}{% with d = d + 1 %}{% include '_partials/fan.jinja' %}"
    "{% include '_partials/fan.jinja' %}{% endwith %}{% endif %}",
    "_partials/kilobyte.jinja": "x" * 1000,
    # Importing runs the top level, and the module keeps what it printed.
    "_partials/loud.jinja": "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}{% macro hi() %}hi{% endmacro %}",
    "_partials/blocky.jinja": "{% macro m() %}{{ self.b() }}{% endmacro %}{% block b %}{{ 'x' * 1000 }}{% endblock %}",
    "_partials/state.jinja": "{% set ns = namespace(v='(none)') %}",
    "_partials/kilobyte_module.jinja": "x" * 1000 + "{% macro hi() %}hi{% endmacro %}",
    "_partials/loud_block.jinja": "{% block b %}{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}{% endblock %}",
}
_SHARED = "{% set a = [0] %}" + "{% set a = [a, a, a, a, a, a, a, a] %}" * 10  # 8**10 leaves, 11 lists


def test_include_reads_the_partial_source_with_the_callers_variables() -> None:
    assert _render("<{% include '_partials/greeting.jinja' %}>", {"name": "Ada"}, partials=PARTIALS) == "<Hello Ada!>"


def test_partial_can_include_another_partial() -> None:
    assert _render("{% include '_partials/outer.jinja' %}", {"name": "Ada"}, partials=PARTIALS) == "[Hello Ada!]"


def test_macros_are_imported_from_partials() -> None:
    source = "{% from '_partials/macros.jinja' import shout %}{{ shout('hi') }}"
    assert _render(source, partials=PARTIALS) == "HI"
    assert _render("{% import '_partials/macros.jinja' as m %}{{ m.shout('yo') }}", partials=PARTIALS) == "YO"


def test_missing_include_is_a_render_error_naming_it() -> None:
    error = _render_error("{% include '_partials/nope.jinja' %}", partials=PARTIALS)
    assert "'_partials/nope.jinja' does not exist" in str(error)


@pytest.mark.parametrize(
    "name",
    [
        "../secret.jinja",
        "_partials/../../etc/passwd",
        "a/./b.jinja",
        "/etc/passwd",
        "_partials\\\\greeting.jinja",
        "_partials/\\x00greeting.jinja",
        ".hidden.jinja",
        "_partials/.hidden",
        "_partials//greeting.jinja",
        "_partials/..greeting.jinja",
        "x" * 600,
    ],
)
def test_include_names_that_could_escape_are_refused(name: str) -> None:
    # The partial exists under the name Jinja reads, so only the name check can refuse it.
    partials = {**PARTIALS, name.encode().decode("unicode_escape"): "LEAKED"}
    error = _render_error("{% include '" + name + "' %}", partials=partials)
    assert "is not a valid template name" in str(error)
    assert len(str(error)) < 400


def test_computed_include_name_is_checked_at_render_time() -> None:
    variables = {"which": "_partials/greeting.jinja", "name": "Ada"}
    assert _render("{% include which %}", variables, partials=PARTIALS) == "Hello Ada!"
    error = _render_error("{% include which %}", {"which": "../x"}, partials={**PARTIALS, "../x": "LEAKED"})
    assert "is not a valid template name" in str(error)


def test_include_name_that_is_not_a_string_is_a_render_error() -> None:
    _render_error("{% include which %}", {"which": 5}, partials=PARTIALS)
    _render_error("{% include which %}", {"which": [5]}, partials=PARTIALS)


def test_valid_include_name_is_returned_unchanged() -> None:
    assert normalize_include_name("_partials/tools.jinja") == "_partials/tools.jinja"
    with pytest.raises(LookupError):
        normalize_include_name("../x")


def test_partial_analysis_gives_its_variables_and_references() -> None:
    environment = TemplateEnvironment(PARTIALS.get)
    assert analyse_partial(environment, "_partials/outer.jinja") == (frozenset(), ("_partials/greeting.jinja",))
    assert analyse_partial(environment, "_partials/greeting.jinja") == (frozenset({"name"}), ())
    with pytest.raises(LookupError):
        analyse_partial(environment, "_partials/missing.jinja")


# --- the sandbox ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "{{ ''.__class__.__mro__ }}",
        "{{ ''.__class__.__base__.__subclasses__() }}",
        "{{ cycler.__init__.__globals__ }}",
        "{{ joiner.__init__.__globals__ }}",
        "{{ namespace.__init__.__globals__ }}",
        "{{ lipsum.__globals__ }}",
        "{{ self._TemplateReference__context }}",
        "{{ self.__dict__ }}",
        "{{ config }}",
        "{{ request }}",
        "{{ range(10**9) }}",
        "{{ ''|attr('__class__') }}",
        "{{ '{0.__class__}'.format('') }}",
        "{% for i in [1] %}{{ loop.__class__ }}{% endfor %}",
        "{% set items = [] %}{{ items.append(1) }}",
        "{% set d = {} %}{{ d.update(a=1) }}",
    ],
)
def test_sandbox_escape_is_a_render_error_that_leaks_nothing(source: str) -> None:
    message = str(_render_error(source))
    assert len(message) < 300
    assert not any(marker in message for marker in ("<function", "<module", "<class", "{'"))


# --- resource bounds ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", "loop iterations"),
        ("{% for i in range(100000) %}{{ i.bit_length() }}{% endfor %}", "loop iterations"),
        ("{{ 'x' * 10**9 }}", "the * operator"),
        ("{{ [0] * 10**9 }}", "the * operator"),
        ("{{ 2 ** (10 ** 8) }}", "bits is not allowed"),
        ("{{ 9 ** 99999 }}", "bits is not allowed"),
        ("{{ 'a' | center(10**9) }}", "center filter"),
        ("{{ 'a'.center(10**9) }}", "str.center"),
        ("{{ 'a'.ljust(10**9) }}", "str.ljust"),
        ("{{ 'a'.rjust(10**9) }}", "str.rjust"),
        ("{{ 'a'.zfill(10**9) }}", "str.zfill"),
        ("{{ ('\t' * 1000).expandtabs(10**6) }}", "str.expandtabs"),
        ("{{ ('a\n' * 1000) | indent(10**6) }}", "indent filter"),
        ("{{ ('a\n' * 1000) | indent('x' * 100000) }}", "indent filter"),
        ("{{ ('a' * 100000) | replace('a', 'b' * 100000) }}", "replace filter"),
        ("{{ ('a' * 100000).replace('a', 'b' * 100000) }}", "str.replace"),
        ("{{ range(100000) | join('x' * 100000) }}", "join filter"),
        ("{{ ('x' * 100000).join(range(100000)) }}", "str.join"),
        ("{{ [1] | batch(10**9, 'x') | list }}", "batch filter"),
        ("{{ range(3) | slice(10**9) | list }}", "slice filter"),
        ("{{ '%1000000000s' | format('x') }}", "format widths"),
        ("{{ '%*s' | format(10**9, 'x') }}", "width taken from an argument"),
        ("{{ '%1000000000s' % 'x' }}", "format widths"),
        ("{{ '%*s' % (10**9, 'x') }}", "width taken from an argument"),
        ("{{ '{:>1000000000}'.format('x') }}", "format widths"),
        ("{{ '{0:>{1}}'.format('x', 10**9) }}", "taken from arguments"),
        ("{{ '{0:>{w}}'.format('x', w=10**9) }}", "taken from arguments"),
        ("{{ lipsum(10**6) }}", "lipsum"),
        (
            "{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
            "the ~ operator",
        ),
        (
            "{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
            "the + operator",
        ),
        (
            "{% set ns = namespace(s=['x']) %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
            "the + operator",
        ),
        (
            "{% set ns = namespace(v=3) %}{% for i in range(40) %}{% set ns.v = ns.v * ns.v %}{% endfor %}",
            "bits is not allowed",
        ),
        (
            "{% macro m() %}{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}{% endmacro %}{% set y = m() %}ok",
            "characters",
        ),
        (
            "{% set y %}{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}{% endset %}ok",
            "characters",
        ),
        ("{% filter upper %}{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}{% endfilter %}", "characters"),
        ("{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}", "recursion too deep"),
        ("{% include '_partials/self.jinja' %}", "recursion too deep"),
        ("{% set d = 0 %}{% include '_partials/fan.jinja' %}", "loop iterations and calls"),
        (
            "{% macro m() %}{{ caller() }}{% endmacro %}"
            "{% call m() %}{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}{% endcall %}",
            "characters",
        ),
        (
            "{% for i in [1] recursive %}{% for j in range(100000) %}{{ 'x' * 1000 }}{% endfor %}{% endfor %}",
            "characters",
        ),
        ("{% for i in range(100000) %}{% include '_partials/kilobyte.jinja' %}{% endfor %}", "characters"),
        ("{% import '_partials/loud.jinja' as m %}{{ m.hi() }}", "characters"),
        ("{% from '_partials/loud.jinja' import hi %}{{ hi() }}", "characters"),
        ("{% import '_partials/loud.jinja' as m with context %}{{ m.hi() }}", "characters"),
        (
            "{% set y = self.b() %}{% if false %}{% block b %}"
            "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}{% endblock %}{% endif %}ok",
            "characters",
        ),
        ("{% extends '_partials/loud_block.jinja' %}{% block b %}{% set y = super() %}{% endblock %}", "characters"),
        (_SHARED + "{{ a == a | list }}", "a list, tuple or dict"),  # comparing it took 10 s
        ("{% set ns = namespace(v=[0] * 1000) %}{{ [ns, ns, ns] * 1000 }}", "characters"),
        (
            "{% for i in range(100000) %}{% include '_partials/kilobyte.jinja' without context %}{% endfor %}",
            "characters",
        ),
        (
            "{% import '_partials/kilobyte_module.jinja' as m %}{% for i in range(100000) %}{{ m }}{% endfor %}",
            "characters",
        ),
        (
            "{% set b = 2 ** 32000 %}{{ [" + "b, " * 120 + "] | length }}",  # ints print long
            "a list",
        ),
        ("{{ range(100000) | map('string') | map('center', 5000) | list | length }}", "characters"),
        ("{{ range(100000) | map('string') | map('center', 5000) | join | length }}", "characters"),
        ("{{ xs | map('upper') }}", "memory address"),
        ("{% set l = [''] * 170000 %}{{ {}.fromkeys(range(1000), [l]) | length }}", "calling fromkeys"),
        (
            "{% macro m() %}{% for i in range(100000) %}{% include '_partials/kilobyte.jinja' %}{% endfor %}"
            "{% endmacro %}{% set y = m() %}ok",
            "characters",
        ),
    ],
)
def test_runaway_template_is_refused(source: str, fragment: str) -> None:
    # Each is refused by the limit it names, never by the clock: a loaded
    # machine took longer than the default 2 s before the fan's 40 levels ran
    # out of iterations.
    limits = RenderLimits(max_seconds=LATE)
    assert fragment in str(_render_error(source, partials=PARTIALS, limits=limits))


def test_an_imported_module_is_not_shared_between_renders() -> None:
    # Jinja keeps a module for good: one caller's inputs reached the next.
    compiled = _compile(
        "{% import '_partials/state.jinja' as m %}{% set ns = m.ns %}previous={{ ns.v }}{% set ns.v = secret %}",
        partials=PARTIALS,
    )
    for secret in ("alice-token", "bob-token"):
        (message,) = render_messages([("user", compiled)], {"secret": secret}, limits=RenderLimits())
        assert message.content == "previous=(none)"


def test_a_kept_module_costs_every_render_what_it_cost_the_first() -> None:
    # 1,000 characters for the module, 3,000 for the set block: over 4,000.
    compiled = _compile(
        "{% from '_partials/kilobyte_module.jinja' import hi %}{% set s %}" + "{{ 'y' * 300 }}" * 10 + "{% endset %}ok",
        partials=PARTIALS,
    )
    limits = RenderLimits(max_output_bytes=1000)
    for _ in range(2):  # the second render reuses the module, and fails alike
        with pytest.raises(RenderError, match="produced more than 4000 characters"):
            render_messages([("user", compiled)], {}, limits=limits)


def test_filters_are_not_folded_into_constants_past_the_limits() -> None:
    # Folded at compile time, a filter ran with default limits and its result
    # was kept in the compiled code.
    error = _render_error(
        "{% set a = 'x' | center(1000000) %}{{ a | length }}", limits=RenderLimits(max_output_bytes=10_000)
    )
    assert "center filter" in str(error)


def test_each_item_a_lazy_filter_takes_is_a_step() -> None:
    # reject tests item after item inside and may yield none: without steps,
    # neither the iteration budget nor the clock saw it (41 s for one reject
    # of 100,000 items against a 99,000-item list).
    source = "{{ range(20000) | reject('in', [1, 2, 3]) | list | length }}"
    assert "loop iterations" in str(_render_error(source, limits=RenderLimits(max_iterations=1000)))
    assert _render(source, limits=RenderLimits(max_iterations=20_001)) == "19997"


def test_guards_own_filters_are_not_for_templates() -> None:
    with pytest.raises(TemplateCompileError, match="No filter named '__registry_loop'"):
        _compile("{{ x | __registry_loop }}")


@pytest.mark.parametrize("text", ["__registry_parts.extend((x", "{{ x }}__registry_parts.append(y", "it's __registry"])
def test_template_text_that_looks_like_generated_code_is_just_text(text: str) -> None:
    assert _render(text, {"x": 1}) == _plain_jinja(text, {"x": 1})


def test_error_messages_do_not_show_memory_addresses() -> None:
    assert "safe_range" in str(_render_error("{{ {}[range] }}"))  # the helper checks for ' at 0x'


def test_many_large_operations_without_a_loop_are_stopped_by_the_clock() -> None:
    # Each + copies 600 kB; nothing loops, calls or includes. The 3,000 of
    # them took about 20 ms on a quiet machine, which once made a 0.02 s clock
    # a coin toss: the clock here is a tenth of the work.
    source = "{% set s = 'x' * 300000 %}" + "{% set y = s + s %}" * 3000
    error = _render_error(source, limits=RenderLimits(max_seconds=0.002))
    assert "longer than 0.002 seconds" in str(error)


def test_a_render_keeps_to_a_deadline_set_before_it_started() -> None:
    # The deadline of a render whose inputs were validated first: validating
    # and rendering share one clock.
    compiled = _compile("{% for i in range(3) %}{{ i }}{% endfor %}")
    assert render_messages([("user", compiled)], {}, limits=RenderLimits()) == (Message(role="user", content="012"),)
    with pytest.raises(RenderError, match="longer than 2.0 seconds"):
        render_messages([("user", compiled)], {}, limits=RenderLimits(), deadline=time.monotonic() - 0.001)


def test_nested_loops_over_a_large_input_list_are_refused() -> None:
    source = "{% for a in xs %}{% for b in xs %}{% for c in xs %}.{% endfor %}{% endfor %}{% endfor %}"
    assert "loop iterations" in str(_render_error(source, {"xs": list(range(1000))}))


def test_long_loop_over_an_input_string_is_refused() -> None:
    assert "loop iterations" in str(_render_error("{% for c in s %}{% endfor %}", {"s": "x" * 200_000}))


def test_power_is_left_associative_as_in_jinja() -> None:
    # Jinja reads 2 ** 10**8 as (2 ** 10) ** 8, which is small.
    assert _render("{{ 2 ** 10**8 }}") == str(2**80) == _plain_jinja("{{ 2 ** 10**8 }}", {})


def test_budget_is_per_render() -> None:
    compiled = _compile("{% for i in range(60000) %}{% endfor %}done")
    for _ in range(3):
        assert render_messages([("user", compiled)], {}, limits=RenderLimits()) == (Message("user", "done"),)


def test_budget_is_shared_by_every_role_of_one_render() -> None:
    loop = "{% for i in range(600) %}{% endfor %}ok"
    limits = RenderLimits(max_iterations=1000)
    assert render_messages([("user", _compile(loop))], {}, limits=limits) == (Message("user", "ok"),)
    with pytest.raises(RenderError) as info:
        render_messages([("system", _compile(loop, role="system")), ("user", _compile(loop))], {}, limits=limits)
    assert info.value.extensions == {"role": "user"}


def test_iteration_limit_is_configurable() -> None:
    source = "{% for i in xs %}{% endfor %}ok"
    xs = {"xs": list(range(50))}
    assert _render(source, xs, limits=RenderLimits(max_iterations=50)) == "ok"
    assert "more than 49 loop iterations" in str(_render_error(source, xs, limits=RenderLimits(max_iterations=49)))


def test_output_over_max_output_bytes_is_a_render_error() -> None:
    limits = RenderLimits(max_output_bytes=100)
    assert _render("x" * 100, limits=limits) == "x" * 100
    assert str(_render_error("x" * 101, limits=limits)) == "rendered output exceeds 100 bytes"


def test_output_limit_counts_utf8_bytes() -> None:
    limits = RenderLimits(max_output_bytes=100)
    assert _render("é" * 50, limits=limits) == "é" * 50
    assert "exceeds 100 bytes" in str(_render_error("{{ s }}", {"s": "é" * 51}, limits=limits))


def test_output_limit_applies_to_all_messages_together() -> None:
    limits = RenderLimits(max_output_bytes=100)
    templates = [("system", _compile("s" * 60, role="system")), ("user", _compile("u" * 60))]
    with pytest.raises(RenderError) as info:
        render_messages(templates, {}, limits=limits)
    assert info.value.extensions == {"role": "user"}


def test_a_kept_module_counts_against_the_render_that_uses_it() -> None:
    # Jinja keeps the imported module for later renders; its macro yields a
    # block through the module's context, which must not count against the
    # first render's budget forever.
    compiled = _compile("{% from '_partials/blocky.jinja' import m %}{{ m() }}", partials=PARTIALS)
    limits = RenderLimits(max_output_bytes=10_000)
    for _ in range(100):
        (message,) = render_messages([("user", compiled)], {}, limits=limits)
        assert message.content == "x" * 1000
    loud = _compile(
        "{% from '_partials/blocky.jinja' import m %}{% for i in range(100) %}{{ m() }}{% endfor %}", partials=PARTIALS
    )
    assert "characters" in str(_render_error_of(loud, limits))


def _render_error_of(compiled: CompiledTemplate, limits: RenderLimits) -> RenderError:
    with pytest.raises(RenderError) as info:
        render_messages([("user", compiled)], {}, limits=limits)
    return info.value


def test_render_after_a_refused_render_starts_with_a_fresh_budget() -> None:
    _render_error("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}")
    assert _render("{% for i in range(90000) %}{% endfor %}fine") == "fine"


def test_recursive_loop_within_the_budget_renders() -> None:
    source = (
        "{% for x in tree recursive %}{% if x is iterable %}({{ loop(x) }}){% else %}{{ x }}{% endif %}{% endfor %}"
    )
    tree = [1, [2, [3]], 4]
    assert _render(source, {"tree": tree}) == _plain_jinja(source, {"tree": tree}) == "1(2(3))4"


def test_recursive_loop_cannot_exceed_the_iteration_budget() -> None:
    source = (
        "{% set r = range(100) | list %}"
        "{% for x in [r] * 20 recursive %}{% if x is iterable %}{{ loop(x) }}{% endif %}{% endfor %}"
    )
    assert "loop iterations" in str(_render_error(source, limits=RenderLimits(max_iterations=1000)))


def _peak_allocation(source: str, limits: RenderLimits) -> int:
    """Bytes allocated at the peak of a render that must be refused."""
    compiled = _compile(source, partials=PARTIALS)
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        with pytest.raises(RenderError):
            render_messages([("user", compiled)], {}, limits=limits)
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        if not was_tracing:
            tracemalloc.stop()


_BIG = "{% set big = 'x' * 10000 %}"
_SOME = "{% set some = 'x' * 3000 %}"  # within the 10,000-character value limit


def _bypass(source: str, name: str) -> Any:
    return pytest.param(
        source,
        id=name,
    )


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("{{ 'x' * 10**9 }}", id="multiply"),
        pytest.param("{{ 'a' | center(10**9) }}", id="center"),
        pytest.param("{{ ('a\n' * 1000) | indent(10**6) }}", id="indent"),
        pytest.param("{{ ('a' * 1000) | replace('a', 'b' * 10000) }}", id="replace"),
        pytest.param("{{ range(1000) | join('x' * 10000) }}", id="join-separator"),
        pytest.param("{{ 'a'.ljust(10**9) }}", id="ljust"),
        pytest.param("{{ '%1000000000s' % 'x' }}", id="percent-width"),
        pytest.param("{{ '{:>{}}'.format('a', 10**9) }}", id="format-width-argument"),
        pytest.param(
            "{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
            id="doubling",
        ),
        pytest.param(
            "{% macro m() %}{% for i in range(1000) %}{{ 'x' * 1000 }}{% endfor %}{% endmacro %}{% set y = m() %}",
            id="macro-buffer",
        ),
        _bypass(_BIG + "{{ ([big] * 1000) | join }}", "join filter of a repeated string"),
        _bypass(_BIG + "{{ ''.join([big] * 1000) }}", "str.join of a repeated string"),
        _bypass(_BIG + "{{ [big] * 1000 }}", "printing a list of a repeated string"),
        _bypass(_BIG + "{{ ('%s' * 1000) % ((big,) * 1000) }}", "%-formatting a repeated string"),
        _bypass("{{ '{x:>{w}}'.format_map({'x': 'a', 'w': 10**7}) }}", "format_map width from the mapping"),
        _bypass("{{ '{:>{}}'.format('a', '9999999') }}", "format width given as a string"),
        _bypass("{{ '{:>{}{}}'.format('a', 999, 9999) }}", "format width built from two arguments"),
        _bypass("{{ ('a ' * 1000) | wordwrap(1, wrapstring='x' * 10000) }}", "wordwrap wrapstring"),
        _bypass("{{ range(1000) | list | tojson(indent=10000) }}", "tojson indent"),
        _bypass("{{ ('a' * 1000).translate({97: 'b' * 10000}) }}", "str.translate"),
        _bypass("{{ lipsum(1, False, 50000, 50001) }}", "lipsum min and max words"),
        _bypass(_SOME + "{{ some }}" * 2000, "one output node printing a value many times"),
        _bypass(_SOME + "{{ some ~ 'y' }}" * 2000, "one output node computing many large values"),
        _bypass(_SOME + "{% set y %}" + "{{ some ~ 'y' }}" * 2000 + "{% endset %}", "the same in a set block"),
        _bypass(
            "{% macro m() %}{% for i in range(100000) %}{% include '_partials/kilobyte.jinja' %}{% endfor %}"
            "{% endmacro %}{% set y = m() %}",
            "a partial included many times in a macro",
        ),
        _bypass(
            "{% for i in range(100000) %}{% include '_partials/kilobyte.jinja' %}{% endfor %}", "the same at top level"
        ),
        _bypass("{% from '_partials/loud.jinja' import hi %}{{ hi() }}", "importing a partial that prints a lot"),
        _bypass(
            "{% extends '_partials/loud_block.jinja' %}{% block b %}{% set y = super() %}{% endblock %}",
            "super() of a block that prints a lot",
        ),
        _bypass(_SHARED, "a literal sharing one list many times"),
        _bypass(
            "{% for i in range(100000) %}{% include '_partials/kilobyte.jinja' without context %}{% endfor %}",
            "a partial included without context many times",
        ),
        _bypass("{{ range(100000) | map('string') | map('center', 5000) | list | length }}", "a lazy filter chain"),
    ],
)
def test_refused_operation_never_allocates_far_beyond_the_limit(source: str) -> None:
    limits = RenderLimits(max_output_bytes=10_000)
    assert _peak_allocation(source, limits) < 50 * limits.max_output_bytes


# --- guards never change output --------------------------------------------------------------


PROPERTY_TEMPLATES = (
    "{{ x }}",
    "Hello {{ x | upper }}!\n{{ x | trim }}\n",
    "{% for item in xs %}- {{ item }}\n{% endfor %}",
    "{%- for item in xs %}\n{{ loop.index }}. {{ item | trim }}\n{%- endfor %}\nend\n",
    "{% if x %}yes: {{ x }}{% else %}no{% endif %}|{% if xs %}{{ xs | join(', ') }}{% else %}none{% endif %}",
    "{{ xs | join }}/{{ xs | join(x) }}",
    "{{ x ~ '|' ~ xs | join('|') | upper }}",
    "{% for a in xs %}{% for b in xs %}{{ a }}{{ b | upper }};{% endfor %}{% endfor %}",
    "a{{ x }}b{{ x }}c{{ x }}d{{ x }}e{{ x }}f{{ x }}g{{ x }}h{{ x }}i{{ x }}j{{ xs }}",  # more than 8 parts
    # {% autoescape %} escapes values, not the template's text, and leaves |safe alone
    "{% autoescape true %}<b>{{ x }}</b>{{ x | safe }}{{ x | e }}{% endautoescape %}",
    "{% autoescape true %}{{ '<b>' | safe ~ x ~ '</b>' }}{% endautoescape %}",
    "{% autoescape x == '' %}<{{ x }}>{% endautoescape %}",
    "{% autoescape true %}{% filter upper %}<b>{{ x }}</b>{% endfilter %}{% set y %}<i>{{ x }}{% endset %}{{ y }}"
    "{% endautoescape %}",
    "{% autoescape true %}{% macro m() %}<b>{{ caller() }}</b>{% endmacro %}{% call m() %}<i>{{ x }}{% endcall %}"
    "{% endautoescape %}",
)


@cache
def _guarded(source: str) -> CompiledTemplate:
    return _compile(source)


@cache
def _sandboxed(source: str) -> jinja2.Template:
    return ImmutableSandboxedEnvironment(undefined=jinja2.StrictUndefined).from_string(source)


@pytest.mark.slow  # 300 generated templates, each rendered twice
@settings(max_examples=300, deadline=None)
@given(
    source=st.sampled_from(PROPERTY_TEMPLATES),
    x=st.text(),
    xs=st.lists(st.text(), max_size=8),
)
def test_guarded_render_equals_plain_sandboxed_render(source: str, x: str, xs: list[str]) -> None:
    variables = {"x": x, "xs": xs}
    (message,) = render_messages([("user", _guarded(source))], variables, limits=RenderLimits())
    assert message.content == _sandboxed(source).render(variables)


# --- the guard in the syntax tree (issue 17) -------------------------------------------------


def test_a_filter_block_at_the_top_level_counts_what_it_writes() -> None:
    # Jinja writes a filter block's result straight out; uncounted at the top
    # level, a loop of them allocated 20 MB under a 10 kB limit.
    source = "{% for i in range(1000) %}{% filter center(10000) %}x{% endfilter %}{% endfor %}"
    limits = RenderLimits(max_output_bytes=10_000)
    assert "produced more than 40000 characters" in str(_render_error(source, limits=limits))
    assert _peak_allocation(source, limits) < 50 * limits.max_output_bytes


def test_output_is_counted_once_where_it_is_made() -> None:
    # 100 bytes of output allow 400 characters of work: four set blocks of 99
    # characters and the 2 printed are 398; three characters more are over.
    limits = RenderLimits(max_output_bytes=100)
    blocks = ("{% set y %}" + "x" * 99 + "{% endset %}") * 4
    assert _render(blocks + "ok", limits=limits) == "ok"
    error = _render_error(blocks + "{% set z %}xxx{% endset %}ok", limits=limits)
    assert "produced more than 400 characters" in str(error)


def test_a_partial_is_guarded_as_a_definitions_template_is() -> None:
    # Partials are compiled by Jinja's loader: through TemplateEnvironment.compile too.
    partials = {"_partials/sneaky.jinja": "{{ x | __registry_loop }}"}
    with pytest.raises(TemplateCompileError, match="No filter named '__registry_loop'"):
        analyse_partial(TemplateEnvironment(partials.get), "_partials/sneaky.jinja")
    error = _render_error("{% include '_partials/sneaky.jinja' %}", {"x": [1]}, partials=partials)
    assert "No filter named '__registry_loop'" in str(error)


@pytest.mark.parametrize(
    ("scope", "refused"),
    [("{% autoescape true %}", False), ("{% autoescape x == '' %}", True), ("{% autoescape false %}", False)],
)
def test_template_text_is_finalized_under_autoescape_as_jinja_finalizes_it(scope: str, refused: bool) -> None:
    # Jinja finalizes template text only where it decides at render time
    # whether to escape: there, text longer than one value may be is refused.
    source = scope + "{% set y %}" + "<i>" * 4_000 + "{{ x }}{% endset %}{% endautoescape %}ok"
    limits = RenderLimits(max_output_bytes=10_000)
    if refused:
        assert "printing a value" in str(_render_error(source, {"x": ""}, limits=limits))
    else:
        assert _render(source, {"x": ""}, limits=limits) == "ok" == _sandboxed(source).render({"x": ""})
