"""What a pattern's expressions read, checked at load and at run time:
inputs and step fields named like dict methods read the data, and
``previous`` may be tested like any Jinja value."""

from __future__ import annotations

import pytest

from registry.errors import InvalidDefinition
from tests.conftest import LibraryRepo
from tests.support.executor_fixtures import executor_for, json_leaf, leaf

DICT_METHOD_NAMES = ("items", "keys", "values", "get", "pop", "update", "copy")

MAPPED = """\
name: Mapped
inputs: {{type: object, required: [{name}], properties: {{{name}: {{type: array, items: {{type: string}}}}}}}}
pattern:
  kind: parallel
  mode: map
  over: "{{{{ inputs.{name} }}}}"
  chunk_size: 2
  max_items: 10
  branch: {{agent: batch/chunk, inputs: {{words: "{{{{ chunk }}}}"}}}}
  aggregate: {{agent: batch/report, inputs: {{results: "{{{{ results }}}}"}}}}
"""
CHUNK = leaf("chunk", "Chunk: {{ words | join(', ') }}", words="array")
REPORT = leaf("report", "Reports: {{ results | join(' | ') }}", results="array")

CHAINED = """\
name: Chained
inputs: {{type: object, required: [question], properties: {{question: {{type: string}}}}}}
pattern:
  kind: chain
  steps:
    - {{id: pick, agent: batch/picker, inputs: {{question: "{{{{ inputs.question }}}}"}}}}
    - {{id: say, agent: batch/say, inputs: {{text: "{{{{ steps.pick.data.{name} }}}}"}}}}
"""
SAY = leaf("say", "Say: {{ text }}", text="string")

REFINED = """\
name: Refined
inputs: {{type: object, required: [task], properties: {{task: {{type: string}}}}}}
pattern:
  kind: evaluator_optimizer
  max_iterations: 3
  on_exhausted: fail
  generator:
    agent: code/write
    inputs: {{task: "{{{{ inputs.task }}}}", feedback: "{generator_feedback}"}}
  evaluator: {{agent: code/review, inputs: {{code: "{{{{ candidate }}}}"}}}}
"""
WRITE = leaf("writer", "Task {{ task }}; feedback [{{ feedback }}]", task="string", feedback="string")
VERDICT = "{type: object, required: [pass, feedback], properties: {pass: {type: boolean}, feedback: {type: string}}}"
REVIEW = json_leaf("reviewer", "Review: {{ code }}", VERDICT, code="string")


def _picker(name: str) -> str:
    schema = f"{{type: object, required: [{name}], properties: {{{name}: {{type: string}}}}}}"
    return json_leaf("picker", "Pick for {{ question }}", schema, question="string")


@pytest.mark.parametrize("name", DICT_METHOD_NAMES)
def test_a_map_over_an_input_named_like_a_dict_method_reads_the_list(repo: LibraryRepo, name: str) -> None:
    repo.release(
        "v1.0.0",
        {"batch/mapped.yml": MAPPED.format(name=name), "batch/chunk.yml": CHUNK, "batch/report.yml": REPORT},
    )
    replies = [
        {"agent": "batch/chunk", "when": "^Chunk: a, b$", "content": "AB"},
        {"agent": "batch/chunk", "when": "^Chunk: c$", "content": "C"},
        {"agent": "batch/report", "when": "^Reports: AB \\| C$", "content": "done"},
    ]
    with executor_for(repo.path, replies) as executor:
        result = executor.run("batch/mapped", {name: ["a", "b", "c"]})
    assert (result.outcome, result.output, result.error) == ("completed", "done", None)


@pytest.mark.parametrize("name", DICT_METHOD_NAMES)
def test_a_step_field_named_like_a_dict_method_reads_the_field(repo: LibraryRepo, name: str) -> None:
    repo.release(
        "v1.0.0",
        {"batch/chained.yml": CHAINED.format(name=name), "batch/picker.yml": _picker(name), "batch/say.yml": SAY},
    )
    replies = [
        {"agent": "batch/picker", "content": f'{{"{name}": "the field"}}'},
        {"agent": "batch/say", "when": "^Say: the field$", "content": "said"},
    ]
    with executor_for(repo.path, replies) as executor:
        result = executor.run("batch/chained", {"question": "q"})
    assert (result.outcome, result.output, result.error) == ("completed", "said", None)


TESTS_OF_PREVIOUS = (
    "{{ previous.feedback if previous is defined and previous else '' }}",
    "{{ '' if previous is none else previous.feedback }}",
    "{% if previous %}{{ previous.feedback }}{% endif %}",
)


@pytest.mark.parametrize("generator_feedback", TESTS_OF_PREVIOUS)
def test_previous_may_be_tested_before_its_fields_are_read(repo: LibraryRepo, generator_feedback: str) -> None:
    repo.release(
        "v1.0.0",
        {
            "code/refined.yml": REFINED.format(generator_feedback=generator_feedback),
            "code/write.yml": WRITE,
            "code/review.yml": REVIEW,
        },
    )
    replies = [
        {"agent": "code/write", "when": r"feedback \[\]$", "content": "first"},
        {"agent": "code/review", "when": "first", "content": '{"pass": false, "feedback": "shorter"}'},
        {"agent": "code/write", "when": r"feedback \[shorter\]$", "content": "second"},
        {"agent": "code/review", "when": "second", "content": '{"pass": true, "feedback": ""}'},
    ]
    with executor_for(repo.path, replies) as executor:
        result = executor.run("code/refined", {"task": "t"})
    assert (result.outcome, result.output, result.error) == ("completed", "second", None)


@pytest.mark.parametrize(
    ("generator_feedback", "shown"),
    [
        ("{{ previous.verdict if previous else '' }}", "reads previous.verdict"),
        ("{{ previous['score'] if previous is not none else '' }}", "reads previous.score"),
    ],
)
def test_reading_an_unknown_field_of_previous_is_still_refused(
    repo: LibraryRepo, generator_feedback: str, shown: str
) -> None:
    repo.release(
        "v1.0.0",
        {
            "code/refined.yml": REFINED.format(generator_feedback=generator_feedback),
            "code/write.yml": WRITE,
            "code/review.yml": REVIEW,
        },
    )
    with executor_for(repo.path, []) as executor, pytest.raises(InvalidDefinition) as info:
        executor.run("code/refined", {"task": "t"})
    messages = [issue.message for issue in info.value.errors]
    assert any(shown in message and "previous.output, previous.feedback" in message for message in messages), messages
