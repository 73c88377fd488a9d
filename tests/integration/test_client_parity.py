"""Local rendering equals the server's, to the byte and to the error: a
property-based test over generated inputs, against a real server process."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from registry.client import RegistryClient, RegistryError
from tests.conftest import LibraryRepo
from tests.support.servers import RegistryProcess

BRIEFING = """\
name: Briefing with every construct the parity test exercises
prompt_templates:
  system: |
    {% include '_partials/voice.jinja' %}
    {%- for tag in tags | default([]) %}
    - {{ loop.index }}. {{ tag | trim | title }}{% if not loop.last %},{% endif %}
    {%- endfor %}
  user: |
    {% from '_partials/voice.jinja' import quoted -%}
    {{ quoted(question) }} x{{ count }}{% if urgent is defined and urgent %} (URGENT){% endif %}
    {{ (notes | default({})) | dictsort | map('join', '=') | join('; ') }}
    {{ "%-8s|" | format(question[:8]) }}{{ question | wordcount }} words, {{ question | length }} chars
inputs:
  type: object
  required: [question, count]
  additionalProperties: false
  properties:
    question: {type: string, minLength: 1, maxLength: 200}
    count: {type: integer, minimum: 0, maximum: 5}
    urgent: {type: boolean}
    tags: {type: array, maxItems: 4, items: {type: string, pattern: "^[a-z ]+$"}}
    notes: {type: object, additionalProperties: {type: string}}
"""

# The seed's format: placeholders after Jinja, JSON and code around them.
SEED = """\
name: Placeholders after Jinja
prompt_templates:
  system: |
    Reply as {"thought": "...", "answer": "{question}"}.
    {%- for note in notes | default([]) %}
    - {{ note }}
    {%- endfor %}
  assistant: |
    {agent_scratchpad}
    Thought:
  user: |
    Question: {question} ({chat_history})
    {{ code | default('') }}
"""

VOICE = """\
Speak plainly.
{%- macro quoted(text) %}"{{ text | replace('"', "'") }}"{% endmacro %}"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryProcess]:
    repo = LibraryRepo(tmp_path_factory.mktemp("parity") / "library")
    repo.release("v1.0.0", {"brief/briefing.yml": BRIEFING, "brief/seed.yml": SEED, "_partials/voice.jinja": VOICE})
    with RegistryProcess("--repo", str(repo.path), "--threads", "4") as running:
        yield running


@pytest.fixture(scope="module")
def client(server: RegistryProcess) -> Iterator[RegistryClient]:
    with RegistryClient(server.base, release="v1.0.0", timeout=10) as client:
        yield client


json_scalars = st.none() | st.booleans() | st.integers(-10, 10) | st.floats(allow_nan=False, allow_infinity=False)
text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=30)
json_values = st.recursive(
    json_scalars | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=6,
)

# Valid inputs (every optional field sometimes present), and hostile ones:
# each field replaced by any JSON value or left out, and unknown fields.
valid_inputs = st.fixed_dictionaries(
    {"question": text.filter(bool), "count": st.integers(0, 5)},
    optional={
        "urgent": st.booleans(),
        "tags": st.lists(st.from_regex(r"[a-z ]{1,10}", fullmatch=True), max_size=4),
        "notes": st.dictionaries(text, text, max_size=3),
    },
)
hostile_inputs = st.fixed_dictionaries(
    {},
    optional={
        "question": text | json_values,
        "count": st.integers(-1, 6) | json_values,
        "urgent": st.booleans() | json_values,
        "tags": st.lists(text, max_size=5) | json_values,
        "notes": st.dictionaries(text, json_values, max_size=3),
        "surprise": json_values,
    },
)
inputs_strategy = valid_inputs | hostile_inputs


def _outcome(call: Any) -> tuple[str, Any]:
    try:
        prompt = call()
    except RegistryError as error:
        errors = [e.as_dict() for e in getattr(error, "errors", [])]
        return (type(error).__name__, errors or str(error))
    return ("prompt", (prompt.as_dicts(), [p.as_dict() for p in prompt.placeholders]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(inputs=inputs_strategy)
def test_local_render_equals_server_render(client: RegistryClient, inputs: dict[str, Any]) -> None:
    agent = client.get("brief", "briefing")
    local = _outcome(lambda: agent.render(inputs))
    remote = _outcome(lambda: client.render("brief", "briefing", inputs))
    assert local == remote


braces = st.lists(st.sampled_from([*'{}"\\ qé', "{question}", "{x}", "{{", "}}"]), max_size=12).map("".join)
seed_inputs = st.fixed_dictionaries(
    {},
    optional={
        "question": braces | json_values,
        "chat_history": braces,
        "agent_scratchpad": braces,
        "code": braces,
        "notes": st.lists(braces, max_size=3),
    },
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(inputs=seed_inputs)
def test_local_placeholders_equal_the_servers(client: RegistryClient, inputs: dict[str, Any]) -> None:
    agent = client.get("brief", "seed")
    local = _outcome(lambda: agent.render(inputs))
    assert local == _outcome(lambda: client.render("brief", "seed", inputs))
    assert local[0] == "prompt"
    left = {p["name"] for p in local[1][1]}
    assert left >= {"question", "chat_history", "agent_scratchpad"} - set(inputs)


def test_the_valid_case_renders(client: RegistryClient) -> None:
    inputs = {
        "question": 'Why "now"?',
        "count": 2,
        "urgent": True,
        "tags": [" alpha", "beta "],
        "notes": {"b": "2", "a": "1"},
    }
    local = client.get("brief", "briefing").render(inputs)
    assert local == client.render("brief", "briefing", inputs)
    assert local.messages[1].content.startswith("\"Why 'now'?\" x2 (URGENT)\na=1; b=2\n")


@pytest.mark.parametrize(
    "inputs",
    [
        {"question": "q", "count": 1, "notes": {str(i): "x" for i in range(10_001)}},
        {
            "question": "q",
            "count": 1,
            "tags": [
                [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["x"]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]
            ],
        },
        {"question": "q", "count": 1, "tags": [{"k": "v"} for _ in range(4_000)]},
    ],
    ids=["too-many-values", "too-deep", "wide"],
)
def test_inputs_over_their_budget_are_refused_alike_locally_and_on_the_server(
    client: RegistryClient, inputs: dict[str, Any]
) -> None:
    agent = client.get("brief", "briefing")
    local = _outcome(lambda: agent.render(inputs))
    remote = _outcome(lambda: client.render("brief", "briefing", inputs))
    assert local == remote
    assert local[0] == "InvalidInputs"
