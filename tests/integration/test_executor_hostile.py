"""Hostile model endpoints and inputs: each run ends in a clear outcome with
its trace, bounded in time and memory. The model is a real
OpenAI-compatible HTTP server, reached through the official SDK."""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from registry.executor import COMPLETED, FAILED, OpenAIChatModel
from registry.store.example import build_example_repository
from tests.conftest import LibraryRepo
from tests.support.executor_fixtures import executor_for, leaf
from tests.support.openai_server import ScriptedModelServer
from tests.support.waits import LATE

DRAFT = leaf("drafter", "Draft: {{ question }}", question="string").replace(
    "model: {name: test-model,", "params: {timeout: 2}\nmodel: {name: test-model,"
)


@pytest.fixture
def drafter(repo: LibraryRepo) -> LibraryRepo:
    return repo.release("v1.0.0", {"s/draft.yml": DRAFT})


def run_against(repo: Path, replies: list[dict[str, Any]], directory: Path, **model: Any) -> Any:
    with ScriptedModelServer(replies, directory) as server:
        chat = OpenAIChatModel(base_url=server.base_url, api_key="k", backoff=0.01, max_backoff=0.05, **model)
        with executor_for(repo, chat) as executor:
            result = executor.run("s/draft", {"question": "q"})
        return result, server.requests()


@pytest.mark.parametrize(
    ("replies", "reason", "requests"),
    [
        ([{"status": 500, "repeat": True}], "status", 3),
        ([{"status": 503}, {"status": 502}, {"content": "recovered"}], None, 3),
        ([{"status": 400, "repeat": True}], "status", 1),
        ([{"raw": "{not json", "repeat": True}], "malformed", 1),
        ([{"raw": '{"id": "x", "object": "chat.completion", "choices": []}', "repeat": True}], "malformed", 1),
        # Held past the test: a run that waited for it would complete.
        ([{"content": "late", "delay": LATE}], "timeout", 1),
    ],
)
def test_a_failing_model_endpoint_ends_the_run_with_its_reason(
    drafter: LibraryRepo, tmp_path: Path, replies: list[dict[str, Any]], reason: str | None, requests: int
) -> None:
    result, sent = run_against(drafter.path, replies, tmp_path, max_retries=2)
    assert len(sent) == requests
    if reason is None:
        assert (result.outcome, result.output) == (COMPLETED, "recovered")
        return
    assert result.outcome == FAILED
    [chat] = result.trace.spans("chat")
    assert chat.status == "error" and chat.attributes["registry.error.reason"] == reason
    assert "the model call for s/draft failed" in result.error


def test_a_ten_megabyte_reply_is_refused_without_being_read(drafter: LibraryRepo, tmp_path: Path) -> None:
    with ScriptedModelServer([{"content": "x" * (10 * 1024 * 1024)}], tmp_path) as server:
        chat = OpenAIChatModel(base_url=server.base_url, api_key="k")
        with executor_for(drafter.path, chat) as executor:
            tracemalloc.start()
            try:
                result = executor.run("s/draft", {"question": "q"})
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
    assert result.outcome == FAILED and "over 4 MiB" in (result.error or "")
    assert result.trace.spans("chat")[0].attributes["registry.error.reason"] == "too-large"
    assert peak < 8 * 1024 * 1024


def test_inputs_over_a_maps_max_items_are_refused_before_any_model_call(tmp_path: Path) -> None:
    example = build_example_repository(tmp_path / "example")
    issues = [{"id": n, "title": f"issue {n}", "body": "it breaks"} for n in range(1, 61)]
    with executor_for(example, []) as executor:
        result = executor.run("triage/issue_batch", {"issues": issues, "project": "web"})
    assert result.outcome == FAILED and result.llm_calls == 0
    assert "invalid inputs for triage/issue_batch" in (result.error or "")
    assert "/issues" in (result.error or "")
