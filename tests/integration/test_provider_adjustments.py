"""What an adapter sent otherwise than a definition asked, in the trace:
against the scripted server playing llama.cpp (its own process, through the
official SDK), a ``json`` leaf's schema goes as JSON mode and a required
tool by name, and each chat span, the JSON trace and the text tree the
command line prints say so; a call sent as asked says nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from registry.executor import COMPLETED, OpenAIChatModel, PythonTools
from tests.conftest import LibraryRepo
from tests.support.executor_fixtures import LABEL_SCHEMA, executor_for, json_leaf
from tests.support.models_library import environment, prompt_registry, trace_spans
from tests.support.openai_server import ScriptedModelServer

CLASSIFY = json_leaf("the classifier", "Classify: {{ question }}", LABEL_SCHEMA, question="string")
LOOKUP = """\
name: Looker-up
type: tool_calling
max_iterations: 3
model: {name: test-model}
tools:
  - {name: lookup, description: Looks a word up., parameters: {type: object, properties: {word: {type: string}}}}
tool_choice: required
prompt_templates:
  user: "{{ question }}"
inputs: {type: object, required: [question], properties: {question: {type: string}}}
"""
JSON_MODE = "response_format was sent as json_object with the schema, which llama.cpp takes"


def _run(library: Path, models: Path, *options: str) -> Any:
    result = prompt_registry(
        "run", "s/classify", "--repo", str(library), "--models", str(models), "--model-retries", "0",
        "--input", "question=Why was I charged twice?", *options,
        cwd=library.parent, env=environment(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result


def test_the_cli_trace_says_a_schema_was_sent_to_llama_cpp_as_json_mode(repo: LibraryRepo, tmp_path: Path) -> None:
    repo.release("v1.0.0", {"s/classify.yml": CLASSIFY})
    replies = [{"content": '{"label": "billing"}', "repeat": True}]
    with ScriptedModelServer(replies, tmp_path, flavor="llama.cpp") as server:
        models = tmp_path / "models.yml"
        models.write_text(
            "providers:\n"
            f"  local: {{kind: openai_compatible, base_url: '{server.base_url}', server: llama.cpp}}\n"
            "default: local\n",
            encoding="utf-8",
        )
        trace_file = tmp_path / "trace.json"
        as_json = _run(repo.path, models, "--format", "json", "--trace-file", str(trace_file))
        as_text = _run(repo.path, models)
        sent = server.requests()
    schema = yaml.safe_load(LABEL_SCHEMA)
    assert [body["response_format"] for body in sent] == [{"type": "json_object", "schema": schema}] * 2
    answer = json.loads(as_json.stdout)
    assert (answer["outcome"], answer["output"]) == (COMPLETED, '{"label": "billing"}')
    for trace in (answer["trace"], json.loads(trace_file.read_text(encoding="utf-8"))):
        [chat] = trace_spans(trace, "chat")
        assert chat["attributes"]["registry.provider.adjusted"] == ["response_format"]
        assert chat["attributes"]["registry.provider.adjustments"] == [JSON_MODE]
        assert chat["attributes"]["registry.reply"]["adjustments"] == [
            {"subject": "response_format", "detail": JSON_MODE}
        ]
    [line] = [line for line in as_text.stdout.splitlines() if "chat test-model" in line]
    assert line.endswith("(sent adjusted: response_format)")


def test_a_required_tool_sent_by_name_is_in_its_rounds_span_and_not_in_the_next(
    repo: LibraryRepo, tmp_path: Path
) -> None:
    repo.release("v1.0.0", {"s/lookup.yml": LOOKUP})
    replies: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "lookup", "arguments": {"word": "ox"}}]},
        {"content": "An ox is a bovine."},
    ]
    tools = [PythonTools({"lookup": lambda word: "a bovine"})]
    with ScriptedModelServer(replies, tmp_path, flavor="llama.cpp") as server:
        model = OpenAIChatModel(base_url=server.base_url, api_key="test-key", server="llama.cpp", max_retries=0)
        with executor_for(repo.path, model, tools=tools) as executor:
            result = executor.run("s/lookup", {"question": "What is an ox?"})
        sent = server.requests()
    assert (result.outcome, result.output) == (COMPLETED, "An ox is a bovine.")
    assert [body["tool_choice"] for body in sent] == [{"type": "function", "function": {"name": "lookup"}}, "auto"]
    first, second = result.trace.spans("chat")
    assert first.attributes["registry.provider.adjustments"] == [
        "tool_choice required was sent as the one tool offered, lookup: llama.cpp refuses required"
    ]
    assert first.attributes["registry.provider.adjusted"] == ["tool_choice"]
    # The second round asks for auto, which llama.cpp takes as it is.
    assert "registry.provider.adjusted" not in second.attributes
    assert "adjustments" not in second.attributes["registry.reply"]
