"""A definition's render, second phase: the placeholders its templates write
are filled from the inputs that name them, and those left are listed."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from registry.errors import RenderError
from registry.format.definition import CompiledAgent, compile_definition
from registry.format.safeyaml import parse_yaml
from registry.models import Placeholder
from registry.rendering import RenderLimits, TemplateEnvironment

SEED = """\
name: Seed format
prompt_templates:
  system: |
    Tools: {% for tool in tools %}{{ tool.name }} ({{ tool.description }}) {% endfor %}
    Reply as {"thought": "...", "action": "{tool}"}
  assistant: |
    {agent_scratchpad}
    Thought:
  user: |
    Question: {question}
    {%- if code is defined %}
    ```
    {{ code }}
    ```
    {%- endif %}
"""

TOOLS = [{"name": "search", "description": "Finds {question} in the docs"}]


def _compile(text: str, partials: Mapping[str, str] | None = None) -> CompiledAgent:
    document = parse_yaml(text.encode())
    environment = TemplateEnvironment(dict(partials or {}).get)
    return compile_definition(document.value, environment, file="chat/seed.yml", document=document)


def _contents(agent: CompiledAgent, inputs: dict[str, object]) -> list[str]:
    return [m.content for m in agent.render(inputs, limits=RenderLimits()).messages]


def test_the_placeholders_each_role_writes_are_known_when_it_compiles() -> None:
    agent = _compile(SEED)
    # The JSON example of the system template writes none.
    assert agent.placeholders == {"assistant": {"agent_scratchpad"}, "user": {"question"}}


def test_an_input_fills_its_placeholder_and_the_others_are_listed() -> None:
    prompt = _compile(SEED).render({"tools": TOOLS, "question": "Why?"}, limits=RenderLimits())
    assert prompt.messages[2].content == "Question: Why?"
    assert prompt.messages[1].content == "{agent_scratchpad}\nThought:"
    assert prompt.placeholders == (Placeholder(1, "agent_scratchpad", 0, 18),)


def test_without_the_input_the_placeholder_stays_as_jinja_left_it() -> None:
    prompt = _compile(SEED).render({"tools": TOOLS}, limits=RenderLimits())
    assert prompt.messages[2].content == "Question: {question}"
    assert [p.name for p in prompt.placeholders] == ["agent_scratchpad", "question"]


def test_what_an_expression_prints_holds_only_the_placeholders_the_template_writes() -> None:
    code = 'print(f"{name} {prefix}")\nreturn {x}'
    contents = _compile(SEED).render({"tools": TOOLS, "question": "Q", "code": code}, limits=RenderLimits())
    # The tool's description (system) and the code (user) keep their braces.
    assert "Finds {question} in the docs" in contents.messages[0].content
    assert 'Reply as {"thought": "...", "action": "{tool}"}' in contents.messages[0].content
    assert contents.messages[2].content == f"Question: Q\n```\n{code}\n```"
    assert [p.name for p in contents.placeholders] == ["agent_scratchpad"]


def test_a_value_printed_by_jinja_is_searched_for_the_names_the_template_writes() -> None:
    # The documented limit of the rule: text printed with {{ }} that holds
    # one of the template's own placeholders is read as one. A value filled
    # into a placeholder never is.
    printed = _compile(SEED).render({"tools": TOOLS, "code": "{question}"}, limits=RenderLimits())
    assert [p.name for p in printed.placeholders] == ["agent_scratchpad", "question", "question"]
    filled = _compile(SEED).render({"tools": TOOLS, "question": "{question}"}, limits=RenderLimits())
    assert filled.messages[2].content == "Question: {question}"
    assert [p.name for p in filled.placeholders] == ["agent_scratchpad"]


def test_a_value_is_written_as_given_and_never_searched() -> None:
    assert _contents(_compile(SEED), {"tools": TOOLS, "question": "{agent_scratchpad} {{x}}"})[2] == (
        "Question: {agent_scratchpad} {{x}}"
    )


def test_a_value_that_is_not_a_string_is_written_as_json() -> None:
    assert _contents(_compile(SEED), {"tools": TOOLS, "question": {"ids": [1, 2], "é": None}})[2] == (
        'Question: {"ids":[1,2],"é":null}'
    )


def test_placeholders_written_in_a_partial_are_placeholders() -> None:
    partials = {"_partials/react.jinja": "Question: {question}\n{agent_scratchpad}"}
    agent = _compile("name: P\nprompt_templates:\n  user: \"{% include '_partials/react.jinja' %}\"\n", partials)
    assert agent.placeholders == {"user": {"question", "agent_scratchpad"}}
    prompt = agent.render({"question": "Q"}, limits=RenderLimits())
    assert prompt.messages[0].content == "Question: Q\n{agent_scratchpad}"
    assert prompt.placeholders == (Placeholder(0, "agent_scratchpad", 12, 30),)


def test_a_definition_that_writes_none_renders_as_before() -> None:
    agent = _compile("name: J\nprompt_templates:\n  user: 'Q: {{ question }} {\"a\": 1}'\n")
    assert agent.placeholders == {}
    prompt = agent.render({"question": "{question}"}, limits=RenderLimits())
    assert prompt.messages[0].content == 'Q: {question} {"a": 1}'
    assert prompt.placeholders == ()


def test_a_fill_past_the_output_limit_is_a_render_error() -> None:
    agent = _compile("name: M\nprompt_templates:\n  user: '" + "{q}" * 100 + "'\n")
    with pytest.raises(RenderError, match="exceeds 1000 bytes once its placeholders are filled"):
        agent.render({"q": "x" * 20}, limits=RenderLimits(max_output_bytes=1000))


def test_reading_placeholders_keeps_the_render_clock() -> None:
    agent = _compile("name: C\nprompt_templates:\n  user: '{q} {{ braces }}'\n")
    with pytest.raises(RenderError, match="user template: rendering took longer than 0.0 seconds"):
        agent.render({"braces": "{ " * 20_000}, limits=RenderLimits(max_seconds=0.0))


REACT = "type: react\noutput_parser: {type: react_text}"
TOOL = "tools: [{name: t, description: T., parameters: {type: object}}]"
NO_INPUTS = "inputs: {type: object, properties: {}}"
EVERY_KIND = ("vanilla", "tool_calling", "rag", "react")


@pytest.mark.parametrize(
    ("extra", "name", "by", "kinds"),
    [
        (f"{REACT}\n{TOOL}\n{NO_INPUTS}", "agent_scratchpad", "runtime", ("react",)),
        (NO_INPUTS, "agent_scratchpad", None, ("react",)),  # the scratchpad is a react agent's only
        (NO_INPUTS, "chat_history", "runtime", EVERY_KIND),
        ("inputs: {type: object, properties: {note: {}}}", "note", "input", ()),
        ("inputs: {type: object, properties: {note: {}}}", "other", None, ()),
        ("inputs: {type: object}", "other", "input", ()),  # no names declared: any input may fill it
        ("", "other", "input", ()),
        ("inputs: {type: object, properties: {chat_history: {}}}", "chat_history", "runtime", EVERY_KIND),
        (f"{TOOL}\n{NO_INPUTS}", "tools", "tools", ()),
        (NO_INPUTS, "tools", None, ()),
    ],
)
def test_what_can_fill_a_placeholder_is_the_executor_then_an_input_then_the_tools(
    extra: str, name: str, by: str | None, kinds: tuple[str, ...]
) -> None:
    spec = _compile(f"name: S\nprompt_templates: {{user: hi}}\n{extra}\n").spec
    fill = spec.placeholder_fill(name)
    assert (fill.name, fill.by, fill.fillable) == (name, by, by is not None)
    assert fill.runtime_kinds == kinds
