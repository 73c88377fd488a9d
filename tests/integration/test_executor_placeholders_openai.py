"""The seed's chat/minimal, run as a ReAct agent through a real
OpenAI-compatible HTTP server (its own process) with the official SDK: the
request bodies the server receives carry the scratchpad, growing in the
assistant message round after round."""

from __future__ import annotations

from pathlib import Path

from registry.executor import COMPLETED, OpenAIChatModel
from tests.support.executor_fixtures import executor_for
from tests.support.openai_server import ScriptedModelServer
from tests.support.seed_agent import SEED_ANSWER, SEED_REPLIES, SEED_TOOLS, scratchpad_after

QUESTION = "Is gitlab-org/gitlab#12 fixed by merge trains?"


def test_the_server_receives_the_seeds_messages_with_the_scratchpad_filled(example: Path, tmp_path: Path) -> None:
    with ScriptedModelServer(SEED_REPLIES, tmp_path) as server:
        model = OpenAIChatModel(base_url=server.base_url, api_key="test-key", max_retries=0)
        with executor_for(example, model, tools=[SEED_TOOLS]) as executor:
            result = executor.run("chat/minimal", {"question": QUESTION})
        sent = [body["messages"] for body in server.requests()]
    assert (result.outcome, result.output, result.llm_calls) == (COMPLETED, SEED_ANSWER, 3)
    assert len(sent) == 3
    for steps, messages in enumerate(sent):
        assert [m["role"] for m in messages] == ["system", "assistant", "user"]
        assert messages[1]["content"] == (scratchpad_after(steps) + "\nThought:")
        assert messages[2]["content"] == f"Question: {QUESTION}"
        assert "{question}" not in messages[2]["content"] and "{agent_scratchpad}" not in messages[1]["content"]
    assert sent[0][0] == sent[1][0] == sent[2][0]
