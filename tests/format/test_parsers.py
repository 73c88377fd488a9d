"""Output parsers: a corpus of model replies, well-formed and malformed, for
each ReAct parser, each with the exact result expected; and the json and
text parsers."""

from __future__ import annotations

from typing import Any

import pytest

from registry.format.parsers import FinalAnswer, OutputParser, ParseError, ToolCall
from registry.settings import Settings
from tests.conftest import MINIMAL, LibraryRepo, client_for, make_app, schema_says
from tests.support.parser_repos import LIBRARY, agents_of_every_type


@pytest.fixture
def agents_repo(repo: LibraryRepo) -> LibraryRepo:
    return agents_of_every_type(repo)


TOOLS = [
    {
        "name": "search",
        "description": "Search issues.",
        "parameters": {
            "type": "object",
            "required": ["query"],
            "additionalProperties": False,
            "properties": {"query": {"type": "string", "minLength": 1}, "limit": {"type": "integer", "minimum": 1}},
        },
    },
    {
        "name": "get_issue",
        "description": "One issue.",
        "parameters": {"type": "object", "required": ["id"], "properties": {"id": {"type": "integer"}}},
    },
    {"name": "now", "description": "The time.", "parameters": {"type": "object", "additionalProperties": False}},
]


def _parser(kind: str, **options: Any) -> OutputParser:
    return OutputParser.from_definition({"tools": TOOLS, "output_parser": {"type": kind, **options}})


def call(name: str, arguments: dict[str, Any], thought: str | None = None) -> ToolCall:
    return ToolCall(name, arguments, thought)


def answer(text: str, thought: str | None = None) -> FinalAnswer:
    return FinalAnswer(text, thought)


def error(reason: str) -> str:
    return reason


# (reply, expected result, or the ParseError reason)
REACT_TEXT: list[tuple[str, ToolCall | FinalAnswer | str]] = [
    (
        'Thought: look it up\nAction: search\nAction Input: {"query": "crash"}',
        call("search", {"query": "crash"}, "look it up"),
    ),
    ('Action: search\nAction Input: {"query": "crash", "limit": 5}', call("search", {"query": "crash", "limit": 5})),
    (
        "Thought: find it\nAction: search\nAction Input: editor crash",
        call("search", {"query": "editor crash"}, "find it"),
    ),
    ('Action: get_issue\nAction Input: {"id": 42}', call("get_issue", {"id": 42})),
    ("Action: get_issue\nAction Input: 42", error("invalid_arguments")),  # a string where an integer is expected
    ('Action: get_issue\nAction Input: {"id": "42"}', error("invalid_arguments")),
    ("Action: now\nAction Input: {}", call("now", {})),
    ("Action: now\nAction Input:", error("invalid_arguments")),  # plain text becomes 'input', which now() refuses
    ('Thought: x\nAction: search\nAction Input: {"query": "a"', error("invalid_action_input")),  # truncated JSON
    ('Action: search\nAction Input: ["crash"]', error("invalid_action_input")),
    ('Action: search\nAction Input: ```json\n{"query": "fenced"}\n```', call("search", {"query": "fenced"})),
    ('Action: `search`\nAction Input: {"query": "ticks"}', call("search", {"query": "ticks"})),
    ('Action: **search**\nAction Input: {"query": "bold"}', call("search", {"query": "bold"})),
    ('action: search\naction input: {"query": "lower"}', call("search", {"query": "lower"})),
    ('  Action: search\n  Action Input: {"query": "indented"}', call("search", {"query": "indented"})),
    ('Thought: a\nAction: search\r\nAction Input: {"query": "crlf"}\r\n', call("search", {"query": "crlf"}, "a")),
    ('Action: serch\nAction Input: {"query": "typo"}', error("unknown_tool")),
    ("Action: search", error("missing_action_input")),
    ('Action Input: {"query": "x"}', error("missing_action")),
    (
        'Action: search\nAction Input: {"query": "a"}\nAction: get_issue\nAction Input: {"id": 1}',
        error("several_actions"),
    ),
    ('Action: search\nAction Input: {"query": "a"}\nAction Input: {"query": "b"}', error("several_actions")),
    ('Action: search\nAction Input: {"query": "a"}\nFinal Answer: done', error("action_and_final_answer")),
    ('Final Answer: done\nAction: search\nAction Input: {"query": "a"}', error("action_and_final_answer")),
    (
        'Action: search\nAction Input: {"query": "a"}\nObservation: 3 issues found\nThought: great',
        error("invented_observation"),
    ),
    ("Observation: nothing\nFinal Answer: guess", error("invented_observation")),
    ("Thought: I know\nFinal Answer: The cache is stale.", answer("The cache is stale.", "I know")),
    ("Final Answer: multi\nline answer\n\nwith a gap", answer("multi\nline answer\n\nwith a gap")),
    (
        'Final Answer: Use the "Action:" prefix when you call a tool.',
        answer('Use the "Action:" prefix when you call a tool.'),
    ),
    ("Final Answer: see `Action: search` in the docs", answer("see `Action: search` in the docs")),
    ("Final Answer: 日本語の回答です ✓", answer("日本語の回答です ✓")),
    (
        'Thought: ünïcode thought\nAction: search\nAction Input: {"query": "naïve café"}',
        call("search", {"query": "naïve café"}, "ünïcode thought"),
    ),
    ("I think the answer is simple.\nFinal Answer: 42", answer("42", "I think the answer is simple.")),
    ("Just some prose with no markers.", error("no_action_or_answer")),
    ("", error("no_action_or_answer")),
    ("Thought: only thinking", error("no_action_or_answer")),
    ("Final Answer:", answer("")),
    ('Action: search\nAction Input: {"query": ""}', error("invalid_arguments")),  # minLength
    ('Action: search\nAction Input: {"query": "a", "extra": 1}', error("invalid_arguments")),
    ('Action: search\nAction Input: {"limit": 3}', error("invalid_arguments")),  # required query missing
    ('Action: search\nAction Input: {"query": "a", "limit": 0}', error("invalid_arguments")),
    (
        'Thought: t\n\nAction: search\n\nAction Input: {"query": "blank lines"}\n',
        call("search", {"query": "blank lines"}, "t"),
    ),
    ('Action: search\nAction Input: {"query": "a"} and then some prose', error("invalid_action_input")),
    ("Action: search now please\nAction Input: x", error("unknown_tool")),
    # An input that is exactly one JSON string is that string, decoded.
    ('Action: search\nAction Input: "SF weather"', call("search", {"query": "SF weather"})),
    ('Action: search\nAction Input:   "padded"  \n', call("search", {"query": "padded"})),
    ('Action: search\nAction Input: "say \\"hi\\" \\\\ then\\tgo"', call("search", {"query": 'say "hi" \\ then\tgo'})),
    ('Action: search\nAction Input: "caf\\u00e9 \\ud83d\\ude00"', call("search", {"query": "café 😀"})),
    ('Action: search\nAction Input: ```json\n"fenced string"\n```', call("search", {"query": "fenced string"})),
    ('Action: search\nAction Input: ""', error("invalid_arguments")),  # minLength
    ('Action: get_issue\nAction Input: "42"', error("invalid_arguments")),  # a JSON string is not an integer
    # Anything else that starts with a quote is plain text, taken as written.
    ('Action: search\nAction Input: "SF weather', call("search", {"query": '"SF weather'})),
    ('Action: search\nAction Input: "Hello" in French', call("search", {"query": '"Hello" in French'})),
    ('Action: search\nAction Input: "a\\qb"', call("search", {"query": '"a\\qb"'})),  # not a JSON escape
    # JSON that decodes to a lone surrogate is no text a tool (or a JSON answer) can carry.
    ('Action: search\nAction Input: "\\ud800"', error("invalid_action_input")),
    ('Action: search\nAction Input: {"query": "x\\udfff"}', error("invalid_action_input")),
]

REACT_JSON: list[tuple[str, ToolCall | FinalAnswer | str]] = [
    (
        '{"thought": "t", "action": {"tool_name": "search", "tool_params": [{"name": "query", "value": "crash"}]}, "answer": null}',
        call("search", {"query": "crash"}, "t"),
    ),
    ('{"thought": "t", "action": null, "answer": "done"}', answer("done", "t")),
    ('{"thought": null, "action": null, "answer": "no thought"}', answer("no thought")),
    ('{"thought": "t", "action": {"tool_name": "now", "tool_params": []}, "answer": null}', call("now", {}, "t")),
    ('{"thought": "t", "action": {"tool_name": "now"}, "answer": null}', call("now", {}, "t")),
    ('{"thought": "t", "action": {"tool_name": "now", "tool_params": null}, "answer": null}', call("now", {}, "t")),
    (
        '{"thought": "t", "action": {"tool_name": "get_issue", "tool_params": [{"name": "id", "value": 7}]}, "answer": null}',
        call("get_issue", {"id": 7}, "t"),
    ),
    (
        '{"thought": "t", "action": {"tool_name": "get_issue", "tool_params": [{"name": "id", "value": "7"}]}, "answer": null}',
        error("invalid_arguments"),
    ),
    (
        '{"thought": "t", "action": {"tool_name": "search", "tool_params": [{"name": "query", "value": 12}]}, "answer": null}',
        error("invalid_arguments"),
    ),
    (
        '{"thought": "t", "action": {"tool_name": "search", "tool_params": [{"name": "query", "value": "a"}, {"name": "query", "value": "b"}]}, "answer": null}',
        error("duplicate_parameter"),
    ),
    (
        '{"thought": "t", "action": {"tool_name": "search", "tool_params": []}, "answer": null}',
        error("invalid_arguments"),
    ),
    (
        '{"thought": "t", "action": {"tool_name": "search", "tool_params": [{"name": "query"}]}, "answer": null}',
        error("invalid_action"),
    ),
    (
        '{"thought": "t", "action": {"tool_name": "search", "tool_params": [{"value": "x"}]}, "answer": null}',
        error("invalid_action"),
    ),
    (
        '{"thought": "t", "action": {"tool_name": "search", "tool_params": {"query": "x"}}, "answer": null}',
        error("invalid_action"),
    ),
    ('{"thought": "t", "action": {"tool": "search"}, "answer": null}', error("invalid_action")),
    ('{"thought": "t", "action": "search", "answer": null}', error("invalid_action")),
    ('{"thought": "t", "action": {"tool_name": "serch", "tool_params": []}, "answer": null}', error("unknown_tool")),
    (
        '{"thought": "t", "action": {"tool_name": "now", "tool_params": []}, "answer": "both"}',
        error("action_and_answer"),
    ),
    ('{"thought": "t", "action": null, "answer": null}', error("no_action_or_answer")),
    ('{"thought": "t", "action": null}', error("missing_keys")),
    ('{"action": null, "answer": "x"}', error("missing_keys")),
    ('{"thought": "t", "action": null, "answer": 42}', error("invalid_answer")),
    ('{"thought": 3, "action": null, "answer": "x"}', error("invalid_thought")),
    ('{"thought": "t", "action": null, "answer": "x"} I hope this helps!', error("invalid_json")),  # trailing prose
    ('Sure! {"thought": "t", "action": null, "answer": "x"}', error("invalid_json")),
    ('{"thought": "t", "action": null, "answer": "x"', error("invalid_json")),  # truncated
    (
        '{"thought": "t", "action": {"tool_name": "search", "tool_params": [{"name": "query", "value": "a"}',
        error("invalid_json"),
    ),
    (
        '```json\n{"thought": "t", "action": null, "answer": "fenced"}\n```',
        error("invalid_json"),
    ),  # no stripping by default
    ('["thought", "action"]', error("invalid_json")),
    ('"just a string"', error("invalid_json")),
    ("", error("invalid_json")),
    ("null", error("invalid_json")),
    (
        '{"thought": "t", "action": null, "answer": "The reply format uses \\"Action:\\" lines"}',
        answer('The reply format uses "Action:" lines', "t"),
    ),
    ('{"thought": "考える", "action": null, "answer": "答え ✓"}', answer("答え ✓", "考える")),
    (
        '{"thought": "t", "action": {"tool_name": "search", "tool_params": [{"name": "query", "value": "café ☕"}]}, "answer": null}',
        call("search", {"query": "café ☕"}, "t"),
    ),
    ('  \n{"thought": "t", "action": null, "answer": "padded"}\n  ', answer("padded", "t")),
    ('{"thought": "t", "action": null, "answer": ""}', answer("", "t")),
    (
        '{"thought": "t", "action": {"tool_name": "search", "tool_params": [{"name": "query", "value": "a"}, {"name": "limit", "value": 2.5}]}, "answer": null}',
        error("invalid_arguments"),
    ),
    (
        '{"thought": "t", "action": {"tool_name": "search", "tool_params": [{"name": "query", "value": "a"}, {"name": "limit", "value": 2}]}, "answer": null}',
        call("search", {"query": "a", "limit": 2}, "t"),
    ),
    (
        '{"thought": "t", "action": {"tool_name": "search", "tool_params": [{"name": "query", "value": "a"}, {"name": "extra", "value": 1}]}, "answer": null}',
        error("invalid_arguments"),
    ),
    (
        '{"thought": "t", "action": {"tool_name": "search", "tool_params": [{"name": "query", "value": "a"}]}, "answer": null, "extra": 1}',
        call("search", {"query": "a"}, "t"),
    ),
    ('{"thought": "t", "action": null, "answer": "x"}{"thought": "again"}', error("invalid_json")),
    ('{"thought": "t", "action": null, "answer": "\\ud83d\\ude00"}', answer("\U0001f600", "t")),  # a pair
    ('{"thought": "t", "action": null, "answer": "\\ud83d"}', error("invalid_json")),  # a lone half
    ('{"thought": "\\udc00", "action": null, "answer": "x"}', error("invalid_json")),
]


def _outcome(result: ToolCall | FinalAnswer | ParseError) -> ToolCall | FinalAnswer | str:
    if isinstance(result, ParseError):
        assert result.observation and result.reason in result.as_dict().values()
        return result.reason
    return result


def test_the_corpus_is_large_enough() -> None:
    assert len(REACT_TEXT) >= 40 and len(REACT_JSON) >= 40


@pytest.mark.parametrize(("reply", "expected"), REACT_TEXT)
def test_react_text(reply: str, expected: ToolCall | FinalAnswer | str) -> None:
    assert _outcome(_parser("react_text").parse(reply)) == expected


@pytest.mark.parametrize(("reply", "expected"), REACT_JSON)
def test_react_json(reply: str, expected: ToolCall | FinalAnswer | str) -> None:
    assert _outcome(_parser("react_json").parse(reply)) == expected


def test_react_json_options() -> None:
    fenced = '```json\n{"thought": "t", "action": null, "answer": "fenced"}\n```'
    assert _parser("react_json", strip_code_fences=True).parse(fenced) == answer("fenced", "t")
    lenient = _parser("react_json", allow_missing_keys=True)
    assert lenient.parse('{"answer": "only"}') == answer("only")
    assert lenient.parse('{"action": {"tool_name": "now"}}') == call("now", {})
    # Lenient mode prefers the action when both are given.
    assert lenient.parse('{"action": {"tool_name": "now"}, "answer": "x"}') == call("now", {})


def test_observations_tell_the_model_what_to_fix() -> None:
    result = _parser("react_text").parse('Action: serch\nAction Input: {"query": "x"}')
    assert isinstance(result, ParseError)
    assert result.observation == "There is no tool named 'serch'. Available tools: search, get_issue, now."
    result = _parser("react_json").parse(
        '{"thought": "t", "action": {"tool_name": "get_issue", "tool_params": [{"name": "id", "value": "7"}]}, "answer": null}'
    )
    assert isinstance(result, ParseError)
    assert (
        result.observation
        == f"The arguments for 'get_issue' do not fit its parameters: /id: {schema_says({'type': 'integer'}, '7')}."
    )


def test_json_parser() -> None:
    schema = {
        "type": "object",
        "required": ["labels"],
        "properties": {"labels": {"type": "array", "items": {"type": "string"}}},
    }
    parser = OutputParser.from_definition({"output_parser": {"type": "json", "output_schema": schema}})
    assert parser.parse('{"labels": ["bug"]}') == FinalAnswer('{"labels": ["bug"]}', data={"labels": ["bug"]})
    assert parser.parse('```json\n{"labels": []}\n```') == FinalAnswer('{"labels": []}', data={"labels": []})
    assert _outcome(parser.parse('{"labels": "bug"}')) == "schema_mismatch"
    assert _outcome(parser.parse("{}")) == "schema_mismatch"
    assert _outcome(parser.parse('{"labels": [')) == "invalid_json"
    assert _outcome(parser.parse("Here you go: {}")) == "invalid_json"
    bare = OutputParser.from_definition({"output_parser": {"type": "json"}})
    assert bare.parse("[1, 2]") == FinalAnswer("[1, 2]", data=[1, 2])
    assert _outcome(bare.parse('{"\\ud800": 1}')) == "invalid_json"  # a key with a lone surrogate
    assert bare.parse('"\\\\ud800"') == FinalAnswer('"\\\\ud800"', data="\\ud800")  # an escaped backslash


def test_a_decoder_message_with_a_colon_reaches_the_model_whole() -> None:
    expected = {
        "json": "Your reply is not valid JSON (Expecting ':' delimiter). Reply with JSON only.",
        "react_json": "Your reply is not one valid JSON object (Expecting ':' delimiter). Reply with exactly"
        ' {"thought": ..., "action": ..., "answer": ...} and nothing else.',
    }
    for kind, observation in expected.items():
        result = _parser(kind).parse('{"thought" "t"}')
        assert isinstance(result, ParseError) and result.observation == observation, kind
    result = _parser("react_text").parse('Action: search\nAction Input: {"query" "x"}')
    assert isinstance(result, ParseError)
    assert result.observation == (
        "The Action Input is not valid JSON (Expecting ':' delimiter). Give it as one JSON object."
    )


def test_json_nested_past_pythons_recursion_limit_is_a_parse_error() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    replies = {
        "react_text": f"Action: search\nAction Input: {deep}",
        "react_json": f'{{"thought": "t", "action": null, "answer": {deep}}}',
        "json": deep,
    }
    for kind, reply in replies.items():
        result = _parser(kind).parse(reply)
        assert isinstance(result, ParseError) and "nested too deeply" in result.observation, kind


def test_text_parser_and_the_default() -> None:
    for definition in ({"output_parser": {"type": "text"}}, {}):
        parser = OutputParser.from_definition(definition)
        assert parser.parse("Action: search\nanything at all") == FinalAnswer("Action: search\nanything at all")


def test_results_as_dicts() -> None:
    assert call("now", {}, "t").as_dict() == {"kind": "tool_call", "name": "now", "arguments": {}, "thought": "t"}
    assert answer("x").as_dict() == {"kind": "final_answer", "text": "x", "thought": None}
    assert ParseError("r", "o").as_dict() == {"kind": "parse_error", "reason": "r", "observation": "o"}


# -- the same result from the client, HTTP and the CLI ---------------------------


def test_parse_endpoint_hostile_bodies(agents_repo: LibraryRepo) -> None:
    app = make_app(Settings(repo=str(agents_repo.path)))
    http = app.test_client()
    url = "/v1/agents/assistant/react_json/parse?release=v1.0.0"
    for body in (b"", b"[]", b'{"output": 3}', b'{"output": "x", "more": 1}', b'{"output": "\\ud800"}', b"{nope"):
        response = http.post(url, data=body, content_type="application/json")
        assert response.json is not None
        assert response.status_code == 400 and response.json["type"] == "/problems/invalid-request", body
    huge = http.post(url, json={"output": "x" * (2 * 1024 * 1024)})
    assert huge.status_code == 413
    missing = http.post("/v1/agents/assistant/absent/parse?release=v1.0.0", json={"output": "x"})
    assert missing.status_code == 404
    app.extensions["prompt_registry.service"].close()


# -- definitions: type rules and supplied tools -----------------------------------------


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("type: react\n", "a react agent needs tools"),
        ("type: tool_calling\n", "a tool_calling agent needs tools"),
        ("type: rag\n", "a rag agent needs rag settings"),
        ("rag: {retriever: docs}\n", "rag settings are only for type: rag"),
        ("max_iterations: 3\n", "max_iterations is only for type: react or tool_calling"),
        (
            "type: react\ntools: [{name: a, description: A., parameters: {type: object}}]\noutput_parser: {type: json}\n",
            "a react agent needs an output_parser of type react_text or react_json",
        ),
        (
            "output_parser: {type: text, strip_code_fences: true}\n",
            "option 'strip_code_fences' does not apply to the text parser",
        ),
        ("output_parser: {type: json, output_schema: {type: objekt}}\n", "output_schema is not a valid JSON Schema"),
        (
            "tools: [{name: a, description: A., parameters: {type: object}}, {name: a, description: B., parameters: {type: object}}]\n",
            "tool 'a' is listed twice",
        ),
        (
            "tools: [{name: a, description: A., parameters: {type: object, properties: {x: {type: strng}}}}]\n",
            "tool parameters is not a valid JSON Schema",
        ),
        (
            "tools: [{name: 'bad name', description: A., parameters: {type: object}}]\n",
            schema_says({"pattern": "^[A-Za-z_][A-Za-z0-9_]{0,63}$"}, "bad name"),
        ),
        ("max_iterations: 51\ntype: react\n", schema_says({"maximum": 50}, 51)),
    ],
)
def test_type_rules_are_checked_at_load(repo: LibraryRepo, extra: str, message: str) -> None:
    repo.release("v1.0.0", {"chat/agent.yml": MINIMAL + extra})
    response = client_for(repo).get("/v1/agents/chat/agent?release=v1.0.0")
    assert response.status_code == 422
    assert response.json is not None
    assert any(message in e["message"] for e in response.json["errors"]), response.json["errors"]


def test_declared_tools_are_supplied_to_templates(repo: LibraryRepo) -> None:
    definition = (
        "name: x\ntype: tool_calling\n"
        "tools: [{name: a, description: Does A., parameters: {type: object}}]\n"
        'prompt_templates:\n  system: "{% for tool in tools %}{{ tool.name }}: {{ tool.description }}{% endfor %}"\n'
        "inputs: {type: object, properties: {tools: {type: array}}}\n"
    )
    repo.release("v1.0.0", {"chat/tools.yml": definition})
    http = client_for(repo)
    default = http.post("/v1/agents/chat/tools/render?release=v1.0.0", json={"inputs": {}})
    assert default.json is not None
    assert default.json["messages"][0]["content"] == "a: Does A."
    own = http.post(
        "/v1/agents/chat/tools/render?release=v1.0.0",
        json={"inputs": {"tools": [{"name": "b", "description": "Does B."}]}},
    )
    assert own.json is not None
    assert own.json["messages"][0]["content"] == "b: Does B."


@pytest.mark.slow  # lints and runs the examples of the whole bundled library
def test_the_bundled_library_has_every_type_and_its_examples_pass() -> None:
    from registry.authoring.examples import run_examples
    from registry.authoring.lint import lint

    root = LIBRARY.parent.parent
    # What authors copy: no errors, and no warnings either (a Claude definition's temperature once was one).
    findings = lint(root).findings
    assert findings == [], [f"{f.file}:{f.line}: {f.rule} {f.message}" for f in findings]
    report = run_examples(root)
    assert report.failed == [] and len(report.results) >= 4
    types = set()
    for path in LIBRARY.glob("*/*.yml"):
        text = path.read_text()
        types.add(
            next((line.split(":")[1].strip() for line in text.splitlines() if line.startswith("type:")), "vanilla")
        )
    assert types == {"vanilla", "tool_calling", "rag", "react"}
