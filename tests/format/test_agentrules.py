"""The agent-type rules of registry/format/agentrules.py that issue 30 adds:
``tool_choice`` (only for tool_calling, with tools, naming a declared one)
and ``output_parser.repair_attempts`` (a json parser's option, counted in a
composite's worst case)."""

from __future__ import annotations

import pytest

from registry.errors import InvalidDefinition
from registry.format.composite import leaf_facts
from registry.format.definition import CompiledAgent, compile_definition
from registry.format.safeyaml import parse_yaml
from registry.models import Issue
from registry.rendering import TemplateEnvironment

FILE = "ai_gateway/agents/chat/agent.yml"
TOOLS = """\
tools:
  - {name: search_issues, description: Searches issues., parameters: {type: object}}
  - {name: create_issue, description: Creates an issue., parameters: {type: object}}
"""


def _definition(extra: str, *, kind: str = "tool_calling", tools: str = TOOLS) -> str:
    return f"name: Agent\ntype: {kind}\nprompt_templates:\n  user: Hello.\n{tools}{extra}"


def _compile(text: str) -> CompiledAgent:
    document = parse_yaml(text.encode())
    return compile_definition(document.value, TemplateEnvironment(dict[str, str]().get), file=FILE, document=document)


def _issues(text: str) -> list[Issue]:
    with pytest.raises(InvalidDefinition) as caught:
        _compile(text)
    return caught.value.errors


@pytest.mark.parametrize("choice", ["auto", "required", "none", "create_issue"])
def test_tool_choice_is_a_keyword_or_a_declared_tool(choice: str) -> None:
    assert _compile(_definition(f"tool_choice: {choice}\n")).spec.tool_choice == choice


def test_a_tool_choice_naming_no_declared_tool_is_an_error_with_did_you_mean() -> None:
    [issue] = _issues(_definition("tool_choice: search_issue\n"))
    assert issue.message == (
        "tool_choice 'search_issue' is not auto, required, none or a declared tool (search_issues, create_issue)"
    )
    assert (issue.rule, issue.path, issue.line, issue.hint) == (
        "agent-type",
        "/tool_choice",
        8,
        "did you mean 'search_issues'?",
    )
    [misspelt] = _issues(_definition("tool_choice: requird\n"))
    assert misspelt.hint == "did you mean 'required'?"


def test_tool_choice_without_tools_is_an_error() -> None:
    [issue] = _issues(_definition("tool_choice: auto\n", kind="vanilla", tools=""))
    assert (issue.message, issue.hint) == ("tool_choice needs tools to choose from", "declare them under 'tools:'")


def test_tool_choice_on_a_react_agent_is_an_error_saying_its_tools_are_text() -> None:
    parser = "output_parser: {type: react_text}\n"
    [issue] = _issues(_definition(parser + "tool_choice: required\n", kind="react"))
    assert issue.message.startswith("tool_choice is only for type: tool_calling; a react agent names its tools")
    assert issue.hint == "remove tool_choice, or make the agent type: tool_calling"


@pytest.mark.parametrize("kind", ["vanilla", "rag"])
def test_tool_choice_on_an_agent_that_never_offers_tools_is_an_error(kind: str) -> None:
    rag = "rag: {retriever: docs}\n" if kind == "rag" else ""
    issues = _issues(_definition(rag + "tool_choice: auto\n", kind=kind))
    assert [i.message for i in issues] == [
        f"tool_choice is only for type: tool_calling; a {kind} agent never offers its tools to the model"
    ]


def test_a_composite_cannot_have_tool_choice() -> None:
    text = "name: C\npattern: {kind: chain, steps: [{id: a, agent: x/y}]}\ntool_choice: auto\n"
    [issue] = _issues(text)
    assert issue.message == "'tool_choice' is for prompt definitions; a composite (with 'pattern') cannot have it"


def test_repair_attempts_is_an_option_of_the_json_parser_only() -> None:
    json_agent = _compile(_definition("output_parser: {type: json, repair_attempts: 3}\n", kind="vanilla"))
    assert json_agent.spec.output_parser is not None and json_agent.spec.output_parser.repair_attempts == 3
    default = _compile(_definition("output_parser: {type: json}\n", kind="vanilla"))
    assert default.spec.output_parser is not None and default.spec.output_parser.repair_attempts == 1
    [issue] = _issues(_definition("output_parser: {type: text, repair_attempts: 1}\n", kind="vanilla"))
    assert issue.message == "option 'repair_attempts' does not apply to the text parser"
    [too_many] = _issues(_definition("output_parser: {type: json, repair_attempts: 6}\n", kind="vanilla"))
    assert too_many.path == "/output_parser/repair_attempts"


@pytest.mark.parametrize(
    "extra",
    ["", "output_parser: {type: json}\n", "output_parser: {type: json, repair_attempts: 3}\n"],
)
def test_a_leafs_worst_case_leaves_its_repair_rounds_out(extra: str) -> None:
    # Counting them would have turned composites valid before repair rounds
    # invalid; the executor makes a repair only while the budget has room.
    definition = parse_yaml(_definition(extra, kind="vanilla").encode()).value
    assert leaf_facts(definition, (), "sha256:x").own_calls == 1
