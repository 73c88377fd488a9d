"""The executor's trace as OpenTelemetry spans, with GenAI semantic-convention names."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from registry.executor import OpenAIChatModel
from tests.conftest import LibraryRepo
from tests.support.executor_fixtures import GATE_SCHEMA, executor_for, json_leaf, leaf
from tests.support.header_server import Answer, HeaderServer, completion_body

GATED = """\
name: Gated
inputs: {type: object, required: [question], properties: {question: {type: string}}}
pattern:
  kind: chain
  steps:
    - {id: draft, agent: s/draft, inputs: {question: "{{ inputs.question }}"}}
    - {id: gate, agent: s/gate, inputs: {reply: "{{ steps.draft.output }}"}, gate: {on_block: "no"}}
"""


def test_a_run_is_emitted_as_nested_spans_with_gen_ai_attributes(repo: LibraryRepo) -> None:
    repo.release(
        "v1.0.0",
        {
            "s/draft.yml": leaf("drafter", "Draft: {{ question }}", question="string"),
            "s/gate.yml": json_leaf("gate", "Check: {{ reply }}", GATE_SCHEMA, reply="string"),
            "s/gated.yml": GATED,
        },
    )
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    replies = [
        {"agent": "s/draft", "content": "drafted", "usage": {"input_tokens": 12, "output_tokens": 3}},
        {"agent": "s/gate", "content": '{"allow": false, "reason": "no"}'},
    ]
    with executor_for(repo.path, replies, tracer_provider=provider) as executor:
        result = executor.run("s/gated", {"question": "q"})
    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert result.outcome == "blocked"
    assert set(spans) >= {"run s/gated", "invoke_agent s/gated", "invoke_agent s/draft", "chat test-model", "gate gate"}
    draft_chat = next(
        s for s in exporter.get_finished_spans() if s.name == "chat test-model" and s.parent is not None
        and s.parent.span_id == spans["invoke_agent s/draft"].context.span_id
    )  # fmt: skip
    assert draft_chat.attributes is not None
    assert draft_chat.attributes["gen_ai.operation.name"] == "chat"
    assert draft_chat.attributes["gen_ai.request.model"] == "test-model"
    assert draft_chat.attributes["gen_ai.usage.input_tokens"] == 12
    assert spans["invoke_agent s/draft"].parent.span_id == spans["invoke_agent s/gated"].context.span_id  # type: ignore[union-attr]
    assert spans["run s/gated"].status.status_code == StatusCode.ERROR
    assert spans["run s/gated"].attributes["registry.release.tag"] == "v1.0.0"  # type: ignore[index]
    provider.shutdown()


def test_a_reply_from_another_model_than_the_one_asked_for_records_both(repo: LibraryRepo) -> None:
    # llama.cpp's server answers whatever model name it is asked for with the one it serves.
    repo.release("v1.0.0", {"s/draft.yml": leaf("drafter", "Draft: {{ question }}", question="string")})
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with HeaderServer([Answer(200, completion_body("drafted"))]) as server:
        model = OpenAIChatModel(base_url=server.base_url, api_key="k")
        with executor_for(repo.path, model, tracer_provider=provider) as executor:
            result = executor.run("s/draft", {"question": "q"})
    [chat] = result.trace.spans("chat")
    assert (chat.attributes["gen_ai.request.model"], chat.attributes["gen_ai.response.model"]) == ("test-model", "m")
    [line] = [line for line in result.trace.as_text().splitlines() if "chat test-model" in line]
    assert line.endswith('"drafted" (answered by m)')
    [emitted] = [s for s in exporter.get_finished_spans() if s.name == "chat test-model"]
    assert emitted.attributes is not None
    assert (emitted.attributes["gen_ai.request.model"], emitted.attributes["gen_ai.response.model"]) == (
        "test-model",
        "m",
    )
    provider.shutdown()
