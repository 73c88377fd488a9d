"""The runtime against a real model server: llama.cpp's OpenAI-compatible
server serving SmolLM2-135M-Instruct, as docs/real-model.md builds it.

Skipped, with the reason, unless ``REGISTRY_TEST_MODEL_URL`` names the
server's ``/v1`` base URL. The model is tiny: these tests check what the
runtime records and counts, never the quality of an answer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from registry.executor import COMPLETED, OUTCOMES, OpenAIChatModel, SqliteFtsRetriever
from tests.support.executor_fixtures import (
    LIBRARY_AGENTS,
    NO_SCHEMA_INPUTS,
    example_inputs,
    executor_for,
    library_tools,
)
from tests.support.servers import clean_environment

MODEL_URL = os.environ.get("REGISTRY_TEST_MODEL_URL", "")
pytestmark = [
    pytest.mark.realmodel,
    pytest.mark.skipif(not MODEL_URL, reason="no real model server: set REGISTRY_TEST_MODEL_URL (docs/real-model.md)"),
]
CLI = str(Path(sys.executable).parent / "prompt-registry")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, "run", *args, "--example", "--model", MODEL_URL],
        capture_output=True,
        text=True,
        timeout=600,
        env={**clean_environment(), "OPENAI_API_KEY": "sk-local"},
    )


def _chat_spans(span: dict[str, Any]) -> list[dict[str, Any]]:
    own = [span] if span["name"].startswith("chat ") else []
    return own + [found for child in span.get("children", []) for found in _chat_spans(child)]


def test_a_library_agent_runs_and_its_trace_names_the_model_asked_and_the_model_that_answered() -> None:
    result = _run(
        "support/draft_answer",
        "--input",
        "question=How do I reset my password?",
        "--model-map",
        "claude-3-5-haiku-20241022=smollm2",
        "--format",
        "json",
    )
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert (answer["outcome"], answer["llm_calls"], answer["llm_replies"]) == ("completed", 1, 1)
    assert answer["output"] and answer["usage"]["output_tokens"] > 0
    [chat] = _chat_spans(answer["trace"])
    assert chat["attributes"]["gen_ai.request.model"] == "smollm2"
    assert isinstance(chat["attributes"]["gen_ai.response.model"], str) and chat["attributes"]["gen_ai.response.model"]
    assert "HTTP Request" not in result.stderr


def test_a_model_map_that_matches_nothing_is_named_on_stderr() -> None:
    result = _run("support/draft_answer", "--input", "question=hi", "--model-map", "gpt-4o=smollm2")
    assert result.returncode == 0, result.stderr
    assert "model map gpt-4o=smollm2" in result.stderr and "matched no model" in result.stderr


@pytest.mark.parametrize("agent", LIBRARY_AGENTS)
def test_every_library_agent_ends_in_a_named_outcome_against_the_real_model(
    example: Path, docs_index: SqliteFtsRetriever, agent: str
) -> None:
    # A tiny model fails parsers often: what must hold is that every run ends
    # in one of the four outcomes, counted and explained, never an exception.
    model = OpenAIChatModel(base_url=MODEL_URL, api_key="sk-local", max_retries=0, default_timeout=300)
    unnamed = {"model_name": "smollm2"} if agent in NO_SCHEMA_INPUTS else {}
    with executor_for(
        example, model, tools=[library_tools()], retrievers={"product-docs": docs_index}, **unnamed
    ) as executor:
        result = executor.run(agent, example_inputs(agent))
    assert result.outcome in OUTCOMES
    # A call the model did not answer in time is counted as made, not answered.
    assert result.llm_calls >= 1 and result.llm_calls >= result.llm_replies, result.trace.as_text()
    if result.outcome == COMPLETED:
        assert result.output, result.trace.as_text()
    else:
        assert result.error and "internal" not in result.error, result.trace.as_text()
