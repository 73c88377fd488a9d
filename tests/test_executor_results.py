"""What a run's result says: its counts, its warnings, its short names for the
release, and its trace as text. The model is a real OpenAI-compatible HTTP
server reached through the official SDK, or the scripted model."""

from __future__ import annotations

from pathlib import Path

from registry.executor import BLOCKED, COMPLETED, EXHAUSTED, OpenAIChatModel
from tests.conftest import LibraryRepo
from tests.executor_fixtures import GATE_SCHEMA, executor_for, json_leaf, leaf
from tests.openai_server import ScriptedModelServer

DRAFT = leaf("drafter", "Draft: {{ question }}", question="string")
GATE = json_leaf("the gate", "Check this reply: {{ reply }}", GATE_SCHEMA, reply="string")
GATED = """\
name: Gated answer
inputs: {type: object, required: [question], properties: {question: {type: string}}}
pattern:
  kind: chain
  steps:
    - {id: draft, agent: s/draft, inputs: {question: "{{ inputs.question }}"}}
    - {id: gate, agent: s/gate, inputs: {reply: "{{ steps.draft.output }}"}, gate: {on_block: "Sorry."}}
"""


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


def test_the_release_has_short_names_on_the_result(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"s/draft.yml": DRAFT})
    with executor_for(repo.path, [{"content": "ok"}]) as executor:
        result = executor.run("s/draft", {"question": "q"})
    assert (result.tag, result.commit) == ("v1.0.0", repo.git("rev-parse", "v1.0.0"))
    assert (result.tag, result.commit) == (result.release.release.tag, result.release.release.commit)


def test_a_gate_that_blocks_without_a_reason_says_so_without_a_dangling_colon(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"s/draft.yml": DRAFT, "s/gate.yml": GATE, "s/gated.yml": GATED})
    replies = [{"agent": "s/draft", "content": "drafted"}, {"agent": "s/gate", "content": '{"allow": false}'}]
    with executor_for(repo.path, replies) as executor:
        result = executor.run("s/gated", {"question": "q"})
    assert (result.outcome, result.output) == (BLOCKED, "Sorry.")
    assert result.error == "the gate of step 'gate' (s/gate) blocked the reply (it gave no reason)"


def test_a_long_reply_keeps_its_token_count_in_the_text_trace(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"s/draft.yml": DRAFT})
    reply = {"content": "word " * 200, "usage": {"input_tokens": 1234, "output_tokens": 567}}
    with executor_for(repo.path, [reply]) as executor:
        result = executor.run("s/draft", {"question": "q"})
    assert result.outcome == COMPLETED
    [line] = [line for line in result.trace.as_text().splitlines() if "chat test-model" in line]
    assert line.endswith("... [1234→567 tokens]"), line
    assert len(line) <= 100
