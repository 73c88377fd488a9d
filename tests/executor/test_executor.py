"""The runtime: each agent type's loop and each pattern, against the
scripted model, over agents served from a real git repository."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from registry.errors import AgentNotFound, ReleaseNotFound
from registry.executor import BLOCKED, COMPLETED, EXHAUSTED, FAILED, PythonTools
from tests.conftest import LibraryRepo
from tests.support.executor_fixtures import (
    LABEL_SCHEMA,
    REACT,
    VERDICT_SCHEMA,
    executor_for,
    json_leaf,
    leaf,
    registry_client,
    vote_composite,
)
from tests.support.gated_answer import DRAFT, GATE, GATED
from tests.support.waits import LATE, RUN_LIMIT

CLASSIFIER = json_leaf("the classifier", "Classify: {{ question }}", LABEL_SCHEMA, question="string")
BILLING = leaf("billing", "Billing question: {{ question }}", question="string")
FALLBACK = leaf("fallback", "Other question: {{ question }}", question="string")

ROUTED = """\
name: Routed answer
inputs: {type: object, required: [question], properties: {question: {type: string}}}
pattern:
  kind: route
  classifier: {agent: support/classify, inputs: {question: "{{ inputs.question }}"}}
  routes:
    billing: {agent: support/billing, inputs: {question: "{{ inputs.question }}"}}
  default: {agent: support/fallback, inputs: {question: "{{ inputs.question }}"}}
"""


MAPPED = """\
name: Mapped
inputs: {type: object, required: [items], properties: {items: {type: array, items: {type: string}}}}
pattern:
  kind: parallel
  mode: map
  over: "{{ inputs['items'] }}"
  chunk_size: 2
  max_items: 5
  max_concurrency: 2
  branch: {agent: batch/chunk, inputs: {items: "{{ chunk }}", index: "{{ chunk_index }}"}}
  aggregate: {agent: batch/report, inputs: {results: "{{ results }}"}}
"""
CHUNK = leaf("chunk", "Batch {{ index }}: {{ items | join(', ') }}", items="array", index="integer")
REPORT = leaf("report", "Reports: {{ results | join(' | ') }}", results="array")

REVIEWED = """\
name: Reviewed
inputs: {type: object, required: [task], properties: {task: {type: string}}}
pattern:
  kind: evaluator_optimizer
  max_iterations: 3
  on_exhausted: {on_exhausted}
  generator:
    agent: code/write
    inputs: {task: "{{ inputs.task }}", previous: "{{ previous.output | default('none') }}", feedback: "{{ previous.feedback | default('none') }}"}
  evaluator: {agent: code/review, inputs: {code: "{{ candidate }}"}}
"""
WRITE = leaf(
    "writer",
    "Task {{ task }}; previous {{ previous }}; feedback {{ feedback }}",
    task="string",
    previous="string",
    feedback="string",
)
REVIEW = json_leaf("reviewer", "Review: {{ code }}", VERDICT_SCHEMA, code="string")

TOOLS = """\
name: Tool caller
type: tool_calling
max_iterations: 3
model: {name: test-model}
tools:
  - name: lookup
    description: Looks a word up.
    parameters: {type: object, required: [word], additionalProperties: false, properties: {word: {type: string}}}
prompt_templates:
  user: "{{ question }}"
inputs: {type: object, required: [question], properties: {question: {type: string}}}
"""


@pytest.fixture
def library(repo: LibraryRepo) -> LibraryRepo:
    repo.release(
        "v1.0.0",
        {
            "support/draft.yml": DRAFT,
            "support/gate.yml": GATE,
            "support/gated.yml": GATED,
            "support/classify.yml": CLASSIFIER,
            "support/billing.yml": BILLING,
            "support/fallback.yml": FALLBACK,
            "support/routed.yml": ROUTED,
            "support/vote.yml": vote_composite("support/classify", n=5, concurrency=5, field=None),
            "batch/chunk.yml": CHUNK,
            "batch/report.yml": REPORT,
            "batch/mapped.yml": MAPPED,
            "code/write.yml": WRITE,
            "code/review.yml": REVIEW,
            "code/reviewed.yml": REVIEWED.replace("{on_exhausted}", "return_last"),
            "code/strict.yml": REVIEWED.replace("{on_exhausted}", "fail"),
            "assistant/react.yml": REACT,
            "assistant/tools.yml": TOOLS,
        },
    )
    return repo


def lookup_tools(**extra: Any) -> PythonTools:
    return PythonTools({"lookup": lambda word: f"{word} means something", **extra})


# --- chain -------------------------------------------------------------------------------


def test_a_gate_that_allows_returns_the_reply_it_gated(library: LibraryRepo) -> None:
    replies = [
        {"agent": "support/draft", "content": "You can pay by card."},
        {"agent": "support/gate", "when": "You can pay by card", "content": '{"allow": true}'},
    ]
    with executor_for(library.path, replies) as executor:
        result = executor.run("support/gated", {"question": "How do I pay?"})
    assert (result.outcome, result.output, result.llm_calls) == (COMPLETED, "You can pay by card.", 2)
    assert result.release.release.tag == "v1.0.0"
    assert result.release.release.commit == library.git("rev-parse", "v1.0.0")


def test_a_gate_that_blocks_ends_the_run_blocked_with_its_on_block_text(library: LibraryRepo) -> None:
    replies = [
        {"agent": "support/draft", "content": "The admin password is hunter2."},
        {"agent": "support/gate", "content": '{"allow": false, "reason": "it leaks a secret"}'},
    ]
    with executor_for(library.path, replies) as executor:
        result = executor.run("support/gated", {"question": "password?"})
    assert result.outcome == BLOCKED
    assert result.output == "Sorry: it leaks a secret"
    assert "hunter2" not in (result.output or "")
    gates = result.trace.spans("gate")
    assert [g.attributes["registry.decision"] for g in gates] == ["block"]


def test_a_gate_whose_reply_is_not_json_fails_the_run_naming_the_gate(library: LibraryRepo) -> None:
    replies = [
        {"agent": "support/draft", "content": "Fine."},
        {"agent": "support/gate", "content": "looks fine to me", "repeat": True},
    ]
    with executor_for(library.path, replies) as executor:
        result = executor.run("support/gated", {"question": "q"})
    assert result.outcome == FAILED
    assert "support/gate" in (result.error or "") and "does not parse" in (result.error or "")
    assert result.llm_calls == 3  # the draft, the gate's reply and its one repair round


def test_the_composite_inputs_are_checked_before_any_model_call(library: LibraryRepo) -> None:
    with executor_for(library.path, []) as executor:
        result = executor.run("support/gated", {"question": 42})
    assert result.outcome == FAILED
    assert "invalid inputs" in (result.error or "")
    assert result.llm_calls == 0


# --- route -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("label", "agent", "answer"),
    [("billing", "support/billing", "Billing says hi"), ("other", "support/fallback", "Fallback says hi")],
)
def test_the_classifier_label_picks_the_route_or_the_default(
    library: LibraryRepo, label: str, agent: str, answer: str
) -> None:
    replies = [
        {"agent": "support/classify", "content": json.dumps({"label": label})},
        {"agent": agent, "content": answer},
    ]
    with executor_for(library.path, replies) as executor:
        result = executor.run("support/routed", {"question": "invoice?"})
    assert (result.outcome, result.output) == (COMPLETED, answer)
    [route] = result.trace.spans("route")
    assert label in route.attributes["registry.decision"]


# --- parallel ----------------------------------------------------------------------------


def test_a_majority_vote_returns_the_most_common_answer(library: LibraryRepo) -> None:
    replies = [{"agent": "support/classify", "content": '{"label": "tech"}', "times": 3}] + [
        {"agent": "support/classify", "content": '{"label": "billing"}', "times": 2}
    ]
    with executor_for(library.path, replies) as executor:
        result = executor.run("support/vote", {"question": "q"})
    assert result.outcome == COMPLETED
    assert json.loads(result.output or "") == {"label": "tech"}
    assert result.llm_calls == 5


@pytest.mark.parametrize(("concurrency", "rounds"), [(5, 1), (1, 5)])
def test_branches_run_concurrently_up_to_max_concurrency(repo: LibraryRepo, concurrency: int, rounds: int) -> None:
    vote = vote_composite("support/classify", n=5, concurrency=concurrency, field=None)
    repo.release("v1.0.0", {"support/classify.yml": CLASSIFIER, "support/vote.yml": vote})
    replies = [{"agent": "support/classify", "content": '{"label": "tech"}', "delay": 0.2, "repeat": True}]
    with executor_for(repo.path, replies) as executor:
        result = executor.run("support/vote", {"question": "q"})
    chats = result.trace.spans("chat")
    assert result.outcome == COMPLETED and len(chats) == 5
    # How many calls were in flight at once, from their recorded spans.
    overlapping = max(sum(1 for o in chats if o.started < c.started + 0.1 < (o.ended or 0)) for c in chats)
    assert overlapping == concurrency


def test_a_map_runs_one_branch_per_chunk_in_order_and_cuts_at_max_items(library: LibraryRepo) -> None:
    replies = [
        {"agent": "batch/chunk", "when": "^Batch 0: a, b$", "content": "AB"},
        {"agent": "batch/chunk", "when": "^Batch 1: c, d$", "content": "CD"},
        {"agent": "batch/chunk", "when": "^Batch 2: e$", "content": "E"},
        {"agent": "batch/report", "when": "^Reports: AB \\| CD \\| E$", "content": "all done"},
    ]
    with executor_for(library.path, replies) as executor:
        result = executor.run("batch/mapped", {"items": ["a", "b", "c", "d", "e", "f", "g"]})
    assert (result.outcome, result.output, result.llm_calls) == (COMPLETED, "all done", 4)
    [composite] = [s for s in result.trace.spans("invoke_agent") if s.attributes.get("registry.pattern")]
    assert composite.attributes["registry.parallel.items_dropped"] == 2


def test_a_failing_branch_fails_the_run_and_cancels_the_others(library: LibraryRepo) -> None:
    replies = [
        {"agent": "batch/chunk", "when": "Batch 0", "error": {"status": 400, "message": "bad request"}},
        {"agent": "batch/chunk", "content": "slow", "delay": LATE, "repeat": True},
    ]
    with executor_for(library.path, replies) as executor:
        result = executor.run("batch/mapped", {"items": ["a", "b", "c", "d"]})
    assert result.outcome == FAILED and "batch/chunk" in (result.error or "")
    # The other branch's call was cancelled, not waited for: its span ended on
    # the cancellation (a call left to answer would have ended without it).
    slow = [chat for chat in result.trace.spans("chat") if "Batch 1" in str(chat.attributes["registry.input_messages"])]
    assert [chat.attributes.get("registry.step_ended_here") for chat in slow] == [True]


# --- evaluator-optimizer -------------------------------------------------------------------


def test_the_generator_sees_no_previous_round_first_then_the_feedback(library: LibraryRepo) -> None:
    replies = [
        {"agent": "code/write", "when": "previous none; feedback none$", "content": "def f(): pass"},
        {"agent": "code/review", "content": '{"pass": false, "feedback": "add a docstring"}'},
        {"agent": "code/write", "when": "feedback add a docstring$", "content": 'def f():\n    """Doc."""'},
        {"agent": "code/review", "content": '{"pass": true, "feedback": ""}'},
    ]
    with executor_for(library.path, replies) as executor:
        result = executor.run("code/reviewed", {"task": "write f"})
    assert result.outcome == COMPLETED
    assert result.output == 'def f():\n    """Doc."""'
    assert [s.attributes["registry.decision"] for s in result.trace.spans("evaluate")] == ["revise", "pass"]


@pytest.mark.parametrize(("agent", "outcome"), [("code/reviewed", COMPLETED), ("code/strict", EXHAUSTED)])
def test_no_passing_candidate_returns_the_last_or_exhausts(library: LibraryRepo, agent: str, outcome: str) -> None:
    replies = [
        {"agent": "code/write", "content": "attempt", "repeat": True},
        {"agent": "code/review", "content": '{"pass": false, "feedback": "no"}', "repeat": True},
    ]
    with executor_for(library.path, replies) as executor:
        result = executor.run(agent, {"task": "t"})
    assert result.outcome == outcome and result.llm_calls == 6
    if outcome == COMPLETED:
        assert result.output == "attempt"


# --- limits at run time --------------------------------------------------------------------


def test_a_composite_timeout_ends_the_run_exhausted(repo: LibraryRepo) -> None:
    repo.release(
        "v1.0.0",
        {
            "support/draft.yml": DRAFT,
            "support/gate.yml": GATE,
            "support/gated.yml": GATED.replace("timeout: 60", f"timeout: {RUN_LIMIT}"),
        },
    )
    replies = [{"agent": "support/draft", "content": "slow", "delay": LATE}]
    with executor_for(repo.path, replies) as executor:
        result = executor.run("support/gated", {"question": "q"})
    assert result.outcome == EXHAUSTED and "time limit" in (result.error or "")
    # The draft was cut short, not waited for (waited for, it would have
    # reached the gate, which has no reply: a failed run).
    [draft] = result.trace.spans("chat")
    assert draft.attributes.get("registry.step_ended_here") is True


def test_the_run_timeout_of_the_operator_bounds_a_leaf(library: LibraryRepo) -> None:
    replies = [{"content": "late", "delay": LATE}]
    with executor_for(library.path, replies, run_timeout=RUN_LIMIT) as executor:
        result = executor.run("support/draft", {"question": "q"})
    assert result.outcome == EXHAUSTED and "time limit" in (result.error or "")
    assert result.trace.spans("chat")[0].attributes.get("registry.error.reason") == "timeout"


# --- leaves --------------------------------------------------------------------------------


def test_react_runs_the_tool_and_feeds_the_observation_back(library: LibraryRepo) -> None:
    replies = [
        {"agent": "assistant/react", "content": 'Thought: look\nAction: lookup\nAction Input: {"word": "ox"}'},
        {"agent": "assistant/react", "when": "^Observation: ox means something$", "content": "Final Answer: an animal"},
    ]
    with executor_for(library.path, replies, tools=[lookup_tools()]) as executor:
        result = executor.run("assistant/react", {"question": "what is an ox?"})
    assert (result.outcome, result.output, result.llm_calls) == (COMPLETED, "an animal", 2)
    [tool] = result.trace.spans("execute_tool")
    assert tool.attributes["registry.tool.arguments"] == {"word": "ox"}


def test_react_sends_a_parse_error_back_so_the_model_corrects_itself(library: LibraryRepo) -> None:
    replies = [
        {"agent": "assistant/react", "content": "I think it is an animal."},
        {"agent": "assistant/react", "when": "^Observation: ", "content": "Final Answer: an animal"},
    ]
    with executor_for(library.path, replies, tools=[lookup_tools()]) as executor:
        result = executor.run("assistant/react", {"question": "ox?"})
    assert (result.outcome, result.output) == (COMPLETED, "an animal")
    assert [s.attributes["registry.parse.kind"] for s in result.trace.spans("parse")] == ["ParseError", "FinalAnswer"]


def test_react_without_a_final_answer_is_exhausted_at_max_iterations(library: LibraryRepo) -> None:
    replies = [{"content": 'Action: lookup\nAction Input: {"word": "ox"}', "repeat": True}]
    with executor_for(library.path, replies, tools=[lookup_tools()]) as executor:
        result = executor.run("assistant/react", {"question": "ox?"})
    assert result.outcome == EXHAUSTED and result.llm_calls == 4
    assert "max_iterations 4" in (result.error or "")


def test_tool_calling_sends_native_tools_and_appends_results(library: LibraryRepo) -> None:
    replies = [
        {"tool_calls": [{"name": "lookup", "arguments": {"word": "ox"}}]},
        {"when": "^ox means something$", "content": "An ox is an animal."},
    ]
    with executor_for(library.path, replies, tools=[lookup_tools()]) as executor:
        result = executor.run("assistant/tools", {"question": "ox?"})
    assert (result.outcome, result.output) == (COMPLETED, "An ox is an animal.")
    first = result.trace.spans("chat")[0]
    assert first.attributes["registry.tools_offered"] == ["lookup"]


def test_a_model_that_never_stops_calling_tools_is_exhausted(library: LibraryRepo) -> None:
    replies = [{"tool_calls": [{"name": "lookup", "arguments": {"word": "ox"}}], "repeat": True}]
    with executor_for(library.path, replies, tools=[lookup_tools()]) as executor:
        result = executor.run("assistant/tools", {"question": "ox?"})
    assert result.outcome == EXHAUSTED and result.llm_calls == 3
    assert len(result.trace.spans("execute_tool")) == 2


@pytest.mark.parametrize(
    ("arguments", "status"),
    [({"word": 3}, "invalid_arguments"), ({"word": "ox", "extra": 1}, "invalid_arguments"), ("not json{", None)],
)
def test_arguments_that_violate_the_schema_become_an_observation(
    library: LibraryRepo, arguments: Any, status: str | None
) -> None:
    replies = [
        {"tool_calls": [{"name": "lookup", "arguments": arguments}]},
        {"when": "^Error: ", "content": "Sorry, I could not look it up."},
    ]
    with executor_for(library.path, replies, tools=[lookup_tools()]) as executor:
        result = executor.run("assistant/tools", {"question": "ox?"})
    assert result.outcome == COMPLETED
    tools = result.trace.spans("execute_tool")
    assert [t.attributes["registry.tool.status"] for t in tools] == ([status] if status else [])


def test_a_tool_that_raises_hangs_or_floods_becomes_an_observation(library: LibraryRepo) -> None:
    release = threading.Event()

    def hang(word: str) -> str:
        release.wait(30)
        return "late"

    for implementation, status, expected in [
        (lambda word: 1 / 0, "error", "ZeroDivisionError"),
        (hang, "timeout", "did not finish within 0.3 s"),
        (lambda word: "x" * (50 * 1024 * 1024), "ok", "[output truncated"),
    ]:
        replies = [
            {"tool_calls": [{"name": "lookup", "arguments": {"word": "ox"}}]},
            {"content": "done"},
        ]
        tools = PythonTools({"lookup": implementation})
        with executor_for(library.path, replies, tools=[tools], tool_timeout=0.3) as executor:
            result = executor.run("assistant/tools", {"question": "ox?"})
        [tool] = result.trace.spans("execute_tool")
        assert result.outcome == COMPLETED
        assert tool.attributes["registry.tool.status"] == status
        assert expected in tool.attributes["registry.tool.output"]
        assert len(tool.attributes["registry.tool.output"]) < 70 * 1024
    release.set()


def test_a_tool_nobody_bound_fails_the_run_before_any_model_call(library: LibraryRepo) -> None:
    with executor_for(library.path, []) as executor:
        result = executor.run("assistant/react", {"question": "q"})
    assert result.outcome == FAILED and result.llm_calls == 0
    assert "lookup" in (result.error or "") and "assistant/react" in (result.error or "")


def test_conversation_history_goes_after_the_system_message(library: LibraryRepo) -> None:
    replies = [{"content": "Still fine."}]
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    with executor_for(library.path, replies) as executor:
        result = executor.run("support/draft", {"question": "and now?"}, history=history)
    sent = result.trace.spans("chat")[0].attributes["registry.input_messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
    assert sent[1:3] == history


def test_model_params_and_the_mapped_model_name_are_sent(library: LibraryRepo) -> None:
    with executor_for(library.path, [{"content": "ok"}], model_map={"test-model": "served-model"}) as executor:
        result = executor.run("support/draft", {"question": "q"})
    chat = result.trace.spans("chat")[0].attributes
    assert chat["gen_ai.request.model"] == "served-model"
    assert chat["gen_ai.request.temperature"] == 0.2 and chat["gen_ai.request.max_tokens"] == 50


# --- the release ---------------------------------------------------------------------------


def test_a_tag_pushed_mid_run_changes_nothing(library: LibraryRepo) -> None:
    # While the drafter's reply is on its way, v2.0.0 changes the gate's
    # template; the gate still gets v1.0.0's, which its reply matches.
    replies = [
        {"agent": "support/draft", "content": "drafted", "delay": 0.6},
        {"agent": "support/gate", "when": "^Check this reply: drafted$", "content": '{"allow": true}'},
    ]
    pusher = threading.Timer(
        0.1, lambda: library.release("v2.0.0", {"support/gate.yml": GATE.replace("Check this reply", "CHANGED")})
    )
    with executor_for(library.path, replies) as executor:
        pusher.start()
        result = executor.run("support/gated", {"question": "q"}, release="latest")
        pusher.join()
        assert library.git("tag", "--list", "v2.0.0") == "v2.0.0"
        assert (result.outcome, result.release.release.tag) == (COMPLETED, "v1.0.0")
        later = executor.run("support/gate", {"reply": "x"}, release="v2.0.0")
    assert later.outcome == FAILED  # the script has no reply for the new template
    assert "CHANGED" in later.trace.spans("chat")[0].attributes["registry.input_messages"][-1]["content"]


def test_an_unknown_agent_or_release_raises_the_clients_error(library: LibraryRepo) -> None:
    with executor_for(library.path, []) as executor:
        with pytest.raises(AgentNotFound):
            executor.run("support/nope", {})
        with pytest.raises(ReleaseNotFound):
            executor.run("support/draft", {}, release="v9")


def test_the_trace_names_agent_release_and_digest_of_every_step(library: LibraryRepo) -> None:
    replies = [
        {"agent": "support/draft", "content": "ok"},
        {"agent": "support/gate", "content": '{"allow": true}'},
    ]
    with executor_for(library.path, replies) as executor, registry_client(library.path) as client:
        result = executor.run("support/gated", {"question": "q"})
        draft = client.get("support", "draft", release="v1.0.0")
    agents = {s.attributes["gen_ai.agent.name"]: s.attributes for s in result.trace.spans("invoke_agent")}
    assert set(agents) == {"support/gated", "support/draft", "support/gate"}
    assert agents["support/draft"]["registry.agent.digest"] == draft.digest
    assert all(a["registry.release.tag"] == "v1.0.0" for a in agents.values())
    text = result.trace.as_text()
    assert "invoke_agent support/draft" in text and "chat test-model" in text
    json.dumps(result.as_dict())
