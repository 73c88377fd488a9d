"""A repair round through a real OpenAI-compatible server (its own process)
and the official SDK: the reply that did not parse and the parse error are
two more messages of the next request, and the run counts both calls."""

from __future__ import annotations

from pathlib import Path

from registry.executor import COMPLETED, FAILED, OpenAIChatModel
from tests.support.executor_fixtures import executor_for
from tests.support.openai_server import ScriptedModelServer

CLASSIFIER = "support/classify_request"


def test_the_library_classifier_is_repaired_over_http(example: Path, tmp_path: Path) -> None:
    replies = [{"content": "billing"}, {"content": '{"label": "billing"}'}]
    with ScriptedModelServer(replies, tmp_path) as server:
        model = OpenAIChatModel(base_url=server.base_url, api_key="test-key", max_retries=0)
        with executor_for(example, model) as executor:
            result = executor.run(CLASSIFIER, {"question": "I was charged twice."})
        first, repair = server.requests()
    assert (result.outcome, result.data, result.llm_calls) == (COMPLETED, {"label": "billing"}, 2)
    assert repair["messages"][: len(first["messages"])] == first["messages"]
    sent_back, error = repair["messages"][len(first["messages"]) :]
    assert sent_back == {"role": "assistant", "content": "billing"}
    assert error["role"] == "user" and error["content"].startswith("Your reply is not valid JSON")
    assert result.usage.input_tokens == 20  # what the server reports, 10 per call


def test_a_classifier_that_never_gives_json_fails_after_one_repair_round(example: Path, tmp_path: Path) -> None:
    with ScriptedModelServer([{"content": "billing", "repeat": True}], tmp_path) as server:
        model = OpenAIChatModel(base_url=server.base_url, api_key="test-key", max_retries=0)
        with executor_for(example, model) as executor:
            result = executor.run(CLASSIFIER, {"question": "I was charged twice."})
        assert len(server.requests()) == 2
    assert (result.outcome, result.llm_calls) == (FAILED, 2)
    assert (result.error or "").startswith(f"the reply of {CLASSIFIER} does not parse: Your reply is not valid JSON")
