"""Every agent of the bundled library runs end to end with the scripted model
(through a real OpenAI-compatible server: tests/integration/test_executor_library_openai.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from registry.executor import COMPLETED, SqliteFtsRetriever
from tests.support.executor_fixtures import LIBRARY_AGENTS, run_scripted


@pytest.mark.slow  # runs every agent of the bundled library, one by one
@pytest.mark.parametrize("agent", LIBRARY_AGENTS)
def test_every_library_agent_completes_with_the_scripted_model(
    example: Path, docs_index: SqliteFtsRetriever, agent: str
) -> None:
    result = run_scripted(example, docs_index, agent)
    assert result.outcome == COMPLETED, result.trace.as_text()
    assert result.release.release.tag == "v1.1.0"
    assert result.output
    assert result.llm_calls >= 1


def test_the_rag_agent_passes_retrieved_passages_to_its_prompt(example: Path, docs_index: SqliteFtsRetriever) -> None:
    result = run_scripted(example, docs_index, "assistant/docs_rag")
    [retrieve] = result.trace.spans("retrieve")
    assert retrieve.attributes["registry.query"] == "How do I rotate a deploy token?"
    system = result.trace.spans("chat")[0].attributes["registry.input_messages"][0]["content"]
    assert "[1] Deploy tokens › Rotating a token" in system


def test_a_react_json_agent_runs_its_tool_with_named_parameters(example: Path, docs_index: SqliteFtsRetriever) -> None:
    result = run_scripted(example, docs_index, "assistant/react_json")
    [tool] = result.trace.spans("execute_tool")
    assert tool.attributes["registry.tool.arguments"] == {"path": "."}
    second = result.trace.spans("chat")[1].attributes["registry.input_messages"]
    assert json.loads(second[-1]["content"])["observation"].startswith('{"tool": "list_directory"')
