"""What a run's result says: its counts, its warnings, its short names for the
release, and its trace as text. The model is a real OpenAI-compatible HTTP
server reached through the official SDK, or the scripted model."""

from __future__ import annotations

from pathlib import Path

from registry.executor import EXHAUSTED, OpenAIChatModel
from tests.conftest import LibraryRepo
from tests.executor_fixtures import executor_for, leaf
from tests.openai_server import ScriptedModelServer

DRAFT = leaf("drafter", "Draft: {{ question }}", question="string")


def test_a_call_the_run_stopped_waiting_for_counts_as_made_not_answered(repo: LibraryRepo, tmp_path: Path) -> None:
    repo.release("v1.0.0", {"s/draft.yml": DRAFT})
    with ScriptedModelServer([{"content": "late", "delay": 3}], tmp_path) as server:
        model = OpenAIChatModel(base_url=server.base_url, api_key="k")
        with executor_for(repo.path, model, run_timeout=0.3) as executor:
            result = executor.run("s/draft", {"question": "q"})
    assert result.outcome == EXHAUSTED
    assert (result.llm_calls, result.llm_replies) == (1, 0)
    answer = result.as_dict()
    assert (answer["llm_calls"], answer["llm_replies"]) == (1, 0)
    assert result.trace.root.attributes["registry.llm_replies"] == 0
