"""Shared by the executor's tests: a registry client over a real git
repository (served in process through the client's WSGI transport), and
small definitions of every agent type and pattern."""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from registry.client import RegistryClient
from registry.executor import Executor, PythonTools, ScriptedModel, SqliteFtsRetriever, build_index
from registry.executor.executor import RunResult
from registry.executor.tools import ToolProvider
from registry.providers.chat import ChatModel
from registry.serving.app import create_app
from registry.settings import BUNDLED_LIBRARY, Settings
from registry.store.example import build_example_repository


@contextmanager
def registry_client(repo: Path, **options: Any) -> Iterator[RegistryClient]:
    """A client of a registry serving ``repo``, in process."""
    app = create_app(Settings(repo=str(repo)))
    client = RegistryClient("http://registry.test", transport=httpx.WSGITransport(app=app), timeout=30, **options)
    try:
        yield client
    finally:
        client.close()
        app.extensions["prompt_registry.service"].close()


@contextmanager
def executor_for(
    repo: Path, model: ChatModel | list[Any], *, tools: Sequence[ToolProvider] | None = None, **options: Any
) -> Iterator[Executor]:
    """An executor over ``repo``, with ``model`` (or scripted replies)."""
    chat = ScriptedModel.from_replies(model, source="the test") if isinstance(model, list) else model
    with (
        registry_client(repo) as client,
        Executor(model=chat, registry=client, tools=tools or [], **options) as executor,
    ):
        yield executor


LEAF = """\
name: {title}
model: {{name: test-model, params: {{temperature: 0.2, max_tokens: 50}}}}
prompt_templates:
  system: You are {title}.
  user: "{user}"
inputs:
  type: object
  required: [{required}]
  properties:
{properties}
"""


def leaf(title: str, user: str, **inputs: str) -> str:
    """A vanilla leaf whose user message is ``user`` over string ``inputs``."""
    properties = "\n".join(f"    {name}: {{type: {kind}}}" for name, kind in inputs.items())
    return LEAF.format(title=title, user=user, required=", ".join(inputs), properties=properties)


def json_leaf(title: str, user: str, schema: str, **inputs: str) -> str:
    """A leaf whose reply is parsed as JSON against ``schema`` (YAML flow)."""
    return leaf(title, user, **inputs) + f"output_parser: {{type: json, output_schema: {schema}}}\n"


GATE_SCHEMA = "{type: object, required: [allow], properties: {allow: {type: boolean}, reason: {type: string}}}"
LABEL_SCHEMA = "{type: object, required: [label], properties: {label: {type: string, enum: [billing, tech, other]}}}"
VERDICT_SCHEMA = (
    "{type: object, required: [pass, feedback], properties: {pass: {type: boolean}, feedback: {type: string}}}"
)


CLASSIFIER_LEAF = json_leaf("classifier", "Classify: {{ question }}", LABEL_SCHEMA, question="string")


def vote_composite(agent: str, *, n: int, concurrency: int, field: str | None = "label") -> str:
    """A parallel vote of ``n`` runs of ``agent`` (a classifier), by majority of
    its ``field`` (of its whole output, with None)."""
    compared = f", field: {field}" if field else ""
    return f"""\
name: Vote
inputs: {{type: object, required: [question], properties: {{question: {{type: string}}}}}}
pattern:
  kind: parallel
  mode: vote
  n: {n}
  max_concurrency: {concurrency}
  branch: {{agent: {agent}, inputs: {{question: "{{{{ inputs.question }}}}"}}}}
  aggregate: {{strategy: majority{compared}}}
"""


# A ReAct leaf with one tool, and a chain whose second step gates the first
# (s/draft, then s/gate: a json leaf of GATE_SCHEMA).
REACT = """\
name: ReAct helper
type: react
max_iterations: 4
output_parser: {type: react_text}
model: {name: test-model}
tools:
  - name: lookup
    description: Looks a word up.
    parameters: {type: object, required: [word], additionalProperties: false, properties: {word: {type: string}}}
prompt_templates:
  system: Use lookup. Reply with Thought/Action/Action Input or Final Answer.
  user: "{{ question }}"
inputs: {type: object, required: [question], properties: {question: {type: string}}}
"""

GATED = """\
name: Gated
inputs: {type: object, required: [question], properties: {question: {type: string}}}
pattern:
  kind: chain
  steps:
    - {id: draft, agent: s/draft, inputs: {question: "{{ inputs.question }}"}}
    - {id: gate, agent: s/gate, inputs: {reply: "{{ steps.draft.output }}"}, gate: {on_block: "Sorry."}}
"""


# The documents the library's rag agent (assistant/docs_rag, retriever product-docs) retrieves from.
DOCS = {
    "tokens.md": "# Deploy tokens\n\n## Rotating a token\n\nCreate a new token, update pipelines, revoke the old one.\n",
    "expiry.md": "# Token expiry\n\nTokens expire after 365 days unless an expiry date is set.\n",
}


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled example library as a tagged repository (v1.0.0, v1.1.0)."""
    return build_example_repository(tmp_path_factory.mktemp("example") / "repo")


@pytest.fixture(scope="module")
def docs_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqliteFtsRetriever]:
    """An index of ``DOCS``, as `prompt-registry index` builds one."""
    directory = tmp_path_factory.mktemp("docs")
    for name, text in DOCS.items():
        (directory / name).write_text(text, encoding="utf-8")
    build_index(directory, directory / "docs.sqlite")
    retriever = SqliteFtsRetriever(directory / "docs.sqlite")
    yield retriever
    retriever.close()


# --- the bundled library, with inputs and tools for each of its agents ---------------------------

LIBRARY_AGENTS_DIR = Path(BUNDLED_LIBRARY) / "ai_gateway" / "agents"
LIBRARY_AGENTS = sorted(
    f"{path.parent.name}/{path.stem}"
    for path in LIBRARY_AGENTS_DIR.glob("*/*.yml")
    if not path.parent.name.startswith("_")
)

# The inputs of the agents that declare no inputs schema, for their templates.
NO_SCHEMA_INPUTS: dict[str, dict[str, Any]] = {
    "commit_message/one_line": {"diff": "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n"},
}


@functools.cache
def _library_definition(path: Path) -> dict[str, Any]:
    # Parsed once per process: PyYAML's pure-Python loader took seconds of
    # every library test when each call read the whole library again.
    definition: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return definition


def example_inputs(agent: str) -> dict[str, Any]:
    usecase, name = agent.split("/")
    definition = copy.deepcopy(_library_definition(LIBRARY_AGENTS_DIR / usecase / f"{name}.yml"))
    examples = definition.get("examples") or []
    if examples:
        inputs: dict[str, Any] = examples[0]["inputs"]
        return inputs
    if "inputs" not in definition:
        return NO_SCHEMA_INPUTS[agent]
    schema = definition["inputs"]
    properties = schema.get("properties") or {}
    return {name: _sample(properties[name]) for name in schema.get("required") or []}


def _sample(schema: dict[str, Any]) -> Any:
    """A value of ``schema`` for the agents without an example: their required inputs."""
    kind = schema.get("type")
    if "enum" in schema:
        return schema["enum"][0]
    if kind == "integer" or kind == "number":
        return schema.get("minimum", 1)
    if kind == "array":
        return [_sample(schema.get("items") or {})] * schema.get("minItems", 0)
    if kind == "object":
        properties = schema.get("properties") or {}
        return {name: _sample(properties[name]) for name in schema.get("required") or []}
    if kind == "boolean":
        return True
    return "Why does the build fail?"


def library_tools() -> PythonTools:
    """Every tool the library declares, answering with its arguments."""
    names = {
        tool["name"]
        for path in sorted(LIBRARY_AGENTS_DIR.glob("*/*.yml"))
        for tool in _library_definition(path).get("tools") or []
    }
    return PythonTools({name: (lambda name=name, **arguments: {"tool": name, "result": arguments}) for name in names})


# Replies that satisfy each agent's parser; any other agent replies in text.
REPLIES: dict[str, list[dict[str, Any]]] = {
    "compliance/response_gate": [{"content": '{"allow": true}', "repeat": True}],
    "support/classify_request": [{"content": '{"label": "billing"}', "repeat": True}],
    "evals/helpfulness": [{"content": '{"score": 0.9, "pass": true, "reason": "answers it"}', "repeat": True}],
    "qa/short_answer": [{"content": '{"reasoning": "counted", "answer": "42"}', "repeat": True}],
    "triage/issue_chunk": [{"content": "[]", "repeat": True}],
    "code_writing/review_function": [
        {"content": '{"pass": false, "feedback": "name the function better"}'},
        {"content": '{"pass": true, "feedback": ""}', "repeat": True},
    ],
    "assistant/react_text": [
        {"content": 'Thought: list them\nAction: list_jobs\nAction Input: {"pipeline_id": 7}'},
        {"content": "Thought: found it\nFinal Answer: the test job timed out", "repeat": True},
    ],
    "chat/minimal": [
        {"content": 'Thought: read it\nAction: issue_reader\nAction Input: {"reference": "#12"}'},
        {"content": "Thought: enough\nFinal Answer: a queue of merge requests", "repeat": True},
    ],
    "assistant/react_json": [
        {
            "content": '{"thought": "look", "action": {"tool_name": "list_directory", "tool_params": [{"name": "path", "value": "."}]}, "answer": null}'
        },
        {"content": '{"thought": "done", "action": null, "answer": "it is a Python project"}', "repeat": True},
    ],
    "assistant/tools_triage": [
        {"tool_calls": [{"name": "search_issues", "arguments": {"query": "crash on start"}}]},
        {"content": "Duplicate of #12.", "repeat": True},
    ],
}


def run_scripted(example: Path, docs_index: SqliteFtsRetriever, agent: str) -> RunResult:
    """``agent`` of the example run with the scripted model, the library's tools and the docs index."""
    with executor_for(
        example, scripted_replies(), tools=[library_tools()], retrievers={"product-docs": docs_index}
    ) as executor:
        return executor.run(agent, example_inputs(agent))


def scripted_replies() -> list[dict[str, Any]]:
    replies = [{**reply, "agent": agent} for agent, listed in REPLIES.items() for reply in listed]
    return replies + [{"content": "A plain answer.", "repeat": True}]
