"""The linter: every rule with a failing and a passing example, the output
formats, and hostile libraries (the lint, new and render commands:
tests/integration/test_lint_commands.py)."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree

import pytest

from registry.authoring.lint import lint
from registry.authoring.lintformat import as_codequality, as_json, as_junit, as_text
from registry.authoring.lintreport import RULES, LintReport
from registry.errors import RenderError
from registry.format.loading import LoadedAgent
from registry.format.safeyaml import YamlLimits
from registry.rendering import RenderLimits
from registry.store.worktree import open_worktree_catalog
from tests.conftest import MINIMAL
from tests.support.lint_libraries import AGENTS, EVALS, FAILING, GOOD, chain, write_library


def _rules(report: LintReport) -> set[str]:
    return {f.rule for f in report.findings}


def test_every_rule_has_a_failing_example() -> None:
    assert set(FAILING) == set(RULES) - {"internal"}


def test_a_good_library_passes(tmp_path: Path) -> None:
    report = lint(write_library(tmp_path, GOOD))
    assert report.findings == []
    assert report.definitions == [f"{AGENTS}/chat/minimal.yml", f"{AGENTS}/chat/with_rules.yml"]
    assert report.partials == [f"{AGENTS}/_partials/rules.jinja"]


@pytest.mark.parametrize("rule", sorted(FAILING))
def test_each_rule_fails_its_example(tmp_path: Path, rule: str) -> None:
    report = lint(write_library(tmp_path, {**GOOD, **FAILING[rule]}))
    assert rule in _rules(report)
    finding = next(f for f in report.findings if f.rule == rule)
    assert finding.severity == RULES[rule].severity
    assert finding.file.startswith((AGENTS, EVALS)) and finding.hint
    assert report.errors == sum(f.severity == "error" for f in report.findings)


def test_findings_carry_lines_and_columns(tmp_path: Path) -> None:
    unused = {"chat/unused.yml": FAILING["unused-input"]["chat/bad.yml"]}
    report = lint(write_library(tmp_path, {**GOOD, **FAILING["schema"], **unused}))
    schema = next(f for f in report.findings if f.rule == "schema")
    assert (schema.file, schema.line, schema.column) == (f"{AGENTS}/chat/bad.yml", 5, 1)
    assert "did you mean 'model'" in (schema.hint or "")
    unused_input = next(f for f in report.findings if f.rule == "unused-input")
    assert unused_input.line == 5 and unused_input.path == "/inputs/properties/unused"


SEED_LIKE = """\
name: Seed-like
type: {kind}
max_iterations: 3
output_parser: {{type: react_text}}
tools: [{{name: search, description: Searches., parameters: {{type: object}}}}]
prompt_templates:
  system: |
    Tools: {{{{ tools | map(attribute='name') | join(', ') }}}}
    Reply as {{"thought": "{{language}}"}}
  assistant: |
    {{agent_scratchpad}}
    Thought:
  user: |
    {{%- include '_partials/question.jinja' %}}
    {{chat_history}} {{{{ '{{kept}}' }}}}
    {{prefix}}
inputs: {{type: object, properties: {{question: {{type: string}}}}}}
"""


def test_placeholders_no_input_and_no_runtime_variable_fills_are_errors_at_their_line(tmp_path: Path) -> None:
    partials = {"_partials/question.jinja": "Context: {context}\nQuestion: {question}"}
    react = lint(write_library(tmp_path / "react", {"chat/seed.yml": SEED_LIKE.format(kind="react"), **partials}))
    unfilled = [f for f in react.findings if f.rule == "unfilled-placeholder"]
    assert [(f.line, f.severity, f.message) for f in unfilled] == [
        (
            13,
            "error",
            "user template: placeholder {context} (written in _partials/question.jinja, line 1)"
            " is filled by no input and no runtime variable",
        ),
        (16, "error", "user template: placeholder {prefix} is filled by no input and no runtime variable"),
    ]
    assert all(f.file == f"{AGENTS}/chat/seed.yml" for f in unfilled)
    assert "inputs.properties" in (unfilled[0].hint or "")
    # The scratchpad is a react agent's only.
    tool_calling = lint(
        write_library(tmp_path / "tools", {"chat/seed.yml": SEED_LIKE.format(kind="tool_calling"), **partials})
    )
    [scratchpad] = [f for f in tool_calling.findings if "agent_scratchpad" in f.message]
    assert scratchpad.message == (
        "assistant template: the executor fills {agent_scratchpad} for react agents only, and this one is tool_calling"
    )
    assert scratchpad.line == 11


def test_an_input_used_only_as_a_placeholder_is_used(tmp_path: Path) -> None:
    seed = "name: S\nprompt_templates:\n  user: 'Q: {question}'\ninputs: {type: object, properties: {question: {}}}\n"
    assert lint(write_library(tmp_path, {"chat/seed.yml": seed})).findings == []


def test_without_inputs_any_input_may_fill_a_placeholder(tmp_path: Path) -> None:
    seed = "name: S\nprompt_templates:\n  user: 'Q: {question} {agent_scratchpad}'\n"
    assert lint(write_library(tmp_path, {"chat/seed.yml": seed})).findings == []


def test_every_schema_error_is_reported_not_just_the_first(tmp_path: Path) -> None:
    everything_wrong = """\
name: 7
nmae: typo
model: {name: 3, provider: [x], params: "hot"}
params: []
prompt_templates:
  system: 12
  critic: "an unknown role"
  user: "{{ unclosed"
inputs: {type: objekt, properties: {a: {minLength: -1}}}
"""
    report = lint(write_library(tmp_path, {"chat/wrong.yml": everything_wrong}))
    messages = [f.message for f in report.findings if f.file.endswith("wrong.yml")]
    assert len(messages) >= 7, messages
    assert {"schema"} <= _rules(report)


def test_hostile_libraries(tmp_path: Path) -> None:
    files: dict[str, str | bytes] = {
        "chat/binary.yml": b"\x89PNG\r\n\x1a\n\x00\x00",
        "chat/list.yml": "- 1\n- 2\n",
        "chat/loop_a.yml": "name: a\nprompt_templates:\n  user: \"{% include '_partials/a.jinja' %}\"\n",
        "_partials/a.jinja": "{% include '_partials/b.jinja' %}",
        "_partials/b.jinja": "{% include '_partials/a.jinja' %}",
        "chat/escape.yml": "name: x\nprompt_templates:\n  user: \"{% include '../../etc/passwd' %}\"\n",
        "chat/big.yml": "name: x\nprompt_templates:\n  user: |\n" + "    " + "x" * (5 * 1024 * 1024) + "\n",
        "chat/ünï cødé.yml": MINIMAL,
        "chat/with space.yml": MINIMAL,
        "notes.txt": "not a definition",
    }
    report = lint(write_library(tmp_path, files))
    by_file: dict[str, set[str]] = {}
    for finding in report.findings:
        by_file.setdefault(finding.file.removeprefix(AGENTS + "/"), set()).add(finding.rule)
    assert by_file["chat/binary.yml"] == {"yaml-syntax"}
    assert by_file["chat/list.yml"] == {"not-a-mapping"}
    assert by_file["chat/escape.yml"] == {"missing-include"}
    assert by_file["chat/big.yml"] == {"file-size"}
    assert by_file["chat/ünï cødé.yml"] == {"name"} and by_file["chat/with space.yml"] == {"name"}
    # Recursive includes compile (Jinja resolves them at render time), so the
    # registry serves them; lint reports them, and the render stops with a
    # RenderError, never a crash.
    assert by_file["chat/loop_a.yml"] == {"recursive-include"}
    assert by_file["_partials/a.jinja"] == {"recursive-include"}
    loop = next(f for f in report.findings if f.file == f"{AGENTS}/_partials/a.jinja")
    assert "_partials/a.jinja -> _partials/b.jinja -> _partials/a.jinja" in loop.message
    catalog = open_worktree_catalog(tmp_path / "library", AGENTS, YamlLimits())
    loop_a = catalog.load("chat", "loop_a")
    assert isinstance(loop_a, LoadedAgent)
    with pytest.raises(RenderError, match="recursion too deep"):
        loop_a.compiled.render({}, limits=RenderLimits())
    assert "notes.txt" not in by_file


def test_a_partial_included_only_by_a_definition_with_a_schema_error_is_not_unused(tmp_path: Path) -> None:
    schema_error = """\
name: x
modle: {name: typo}
prompt_templates:
  user: "{% include '_partials/only.jinja' %}"
  critic: "{% include '_partials/critic.jinja' %}"
  assistant: 12
"""
    files: dict[str, str | bytes] = {
        "chat/bad.yml": schema_error,
        "_partials/only.jinja": "{% include '_partials/nested.jinja' %}",
        "_partials/nested.jinja": "nested",
        "_partials/critic.jinja": "an unknown role's template is still followed",
        "_partials/orphan.jinja": "nobody includes me",
    }
    report = lint(write_library(tmp_path, files))
    unused = [f.file for f in report.findings if f.rule == "unused-partial"]
    assert unused == [f"{AGENTS}/_partials/orphan.jinja"]
    assert _rules(report) == {"schema", "unused-partial"}


@pytest.mark.parametrize(
    "unreadable",
    [
        "name: [unclosed\nprompt_templates: {user: \"{% include '_partials/orphan.jinja' %}\"}\n",
        "- a list\n",
        "name: x\nprompt_templates: \"{% include '_partials/orphan.jinja' %}\"\n",
        "name: x\nprompt_templates:\n  user: \"{% include '_partials/orphan.jinja' %}{% if %}\"\n",
        "name: x\nprompt_templates:\n  user: \"{% include '_partials/broken.jinja' %}\"\n",
    ],
    ids=["yaml-syntax", "not-a-mapping", "templates-not-a-mapping", "template-syntax", "partial-syntax"],
)
def test_no_partial_is_called_unused_when_a_definitions_includes_cannot_be_read(
    tmp_path: Path, unreadable: str
) -> None:
    files: dict[str, str | bytes] = {
        "chat/bad.yml": unreadable,
        "_partials/orphan.jinja": "perhaps included",
        "_partials/broken.jinja": "{% include '_partials/orphan.jinja' %}{% endif %}",
    }
    report = lint(write_library(tmp_path, files))
    assert report.errors and "unused-partial" not in _rules(report)


def test_a_recursive_include_is_reported_once_per_cycle_with_its_path(tmp_path: Path) -> None:
    files: dict[str, str | bytes] = {
        "chat/one.yml": """\
name: one
prompt_templates:
  system: "{% include '_partials/a.jinja' %}"
  user: "{% include '_partials/b.jinja' %}"
""",
        "chat/two.yml": "name: two\nmodle: x\nprompt_templates:\n  user: \"{% include '_partials/b.jinja' %}\"\n",
        "_partials/a.jinja": "A\n{% if x %}{{ x }}{% endif %}\n{% include '_partials/b.jinja' %}",
        "_partials/b.jinja": "{% import '_partials/a.jinja' as a %}{% include '_partials/c.jinja' %}",
        "_partials/c.jinja": "{% include '_partials/c.jinja' %}",
        "_partials/orphan.jinja": "{% extends '_partials/orphan.jinja' %}",
    }
    report = lint(write_library(tmp_path, files))
    found = [
        (f.file.removeprefix(AGENTS + "/"), f.line, f.message) for f in report.findings if f.rule == "recursive-include"
    ]
    ab = "_partials/a.jinja -> _partials/b.jinja -> _partials/a.jinja"
    cc = "_partials/c.jinja -> _partials/c.jinja"
    assert found == [
        (
            "_partials/a.jinja",
            3,
            f"recursive include: {ab}; every include in it is unconditional, so rendering never ends",
        ),
        (
            "_partials/c.jinja",
            1,
            f"recursive include: {cc}; every include in it is unconditional, so rendering never ends",
        ),
        (
            "_partials/orphan.jinja",
            1,
            "recursive include: _partials/orphan.jinja -> _partials/orphan.jinja; every include in it is"
            " unconditional, so rendering never ends",
        ),
        ("chat/one.yml", 3, f"system template reaches a recursive include: {ab}"),
        ("chat/one.yml", 3, f"system template reaches a recursive include: {cc}"),
        ("chat/two.yml", 4, f"user template reaches a recursive include: {ab}"),
        ("chat/two.yml", 4, f"user template reaches a recursive include: {cc}"),
    ]
    assert all(f.severity == "error" for f in report.findings if f.rule == "recursive-include")


def test_a_long_recursive_include_is_shown_with_its_middle_left_out(tmp_path: Path) -> None:
    files: dict[str, str | bytes] = {
        f"_partials/p{i:02d}.jinja": f"{{% include '_partials/p{(i + 1) % 12:02d}.jinja' %}}" for i in range(12)
    }
    report = lint(write_library(tmp_path, files))
    (finding,) = [f for f in report.findings if f.rule == "recursive-include"]
    shown = " -> ".join(f"_partials/p{i:02d}.jinja" for i in range(6))
    assert f"{shown} -> (5 more) -> _partials/p11.jinja -> _partials/p00.jinja;" in finding.message


def test_a_recursive_include_that_can_end_is_not_reported(tmp_path: Path) -> None:
    tree = "{{ node.name }}({% for child in node.children %}{% with node = child %}{% include '_partials/tree.jinja' %}{% endwith %}{% endfor %})"
    files: dict[str, str | bytes] = {
        "chat/tree.yml": "name: tree\nprompt_templates:\n  user: \"{% include '_partials/tree.jinja' %}\"\n",
        "_partials/tree.jinja": tree,
    }
    report = lint(write_library(tmp_path, files))
    assert report.findings == []
    agent = open_worktree_catalog(tmp_path / "library", AGENTS, YamlLimits()).load("chat", "tree")
    assert isinstance(agent, LoadedAgent)
    node = {"name": "a", "children": [{"name": "b", "children": []}, {"name": "c", "children": []}]}
    assert agent.compiled.render({"node": node}, limits=RenderLimits()).messages[0].content == "a(b()c())"


@pytest.mark.slow  # lints 2,000 files: seconds of pure Python
def test_two_thousand_files_in_one_usecase(tmp_path: Path) -> None:
    files: dict[str, str | bytes] = {f"bulk/agent_{i:04d}.yml": MINIMAL for i in range(2000)}
    files["bulk/agent_0999.yml"] = "name: [broken\n"
    report = lint(write_library(tmp_path, files))
    assert len(report.definitions) == 2000
    assert [(f.file, f.rule) for f in report.findings] == [(f"{AGENTS}/bulk/agent_0999.yml", "yaml-syntax")]


def test_output_formats(tmp_path: Path) -> None:
    report = lint(write_library(tmp_path, {**GOOD, **FAILING["schema"], **FAILING["unused-partial"]}))
    text = as_text(report)
    assert f"{AGENTS}/chat/bad.yml:5:1: error [schema] unknown key 'modle'" in text
    assert text.rstrip().endswith("1 error, 1 warning in 3 definitions and 2 partials")
    assert "\033[" not in text and "\033[31m" in as_text(report, colour=True)
    body = json.loads(as_json(report))
    assert body["summary"] == {"definitions": 3, "partials": 2, "evals": 0, "errors": 1, "warnings": 1}
    assert [f["rule"] for f in body["findings"]] == ["unused-partial", "schema"]  # sorted by file
    suite = ElementTree.fromstring(as_junit(report)).find("testsuite")
    assert suite is not None and suite.get("tests") == "5" and suite.get("failures") == "1"
    failed = [case for case in suite if case.find("failure") is not None]
    assert [case.get("name") for case in failed] == [f"{AGENTS}/chat/bad.yml"]
    quality = json.loads(as_codequality(report))
    assert {q["severity"] for q in quality} == {"major", "minor"}
    assert all(q["location"]["path"].startswith(AGENTS) and len(q["fingerprint"]) == 64 for q in quality)
    assert len({q["fingerprint"] for q in quality}) == len(quality)


def test_a_library_with_composites_passes_and_their_inputs_count_as_used(tmp_path: Path) -> None:
    composite = (
        "name: Chain\ninputs: {type: object, properties: {question: {type: string}}}\n"
        "pattern:\n  kind: chain\n  steps:\n    - {id: a, agent: chat/minimal, inputs: {question: '{{ inputs.question }}'}}\n"
    )
    report = lint(write_library(tmp_path, {**GOOD, "chat/composite.yml": composite}))
    assert report.findings == []


def test_a_composite_finding_has_its_line_and_the_cycle_path(tmp_path: Path) -> None:
    files = {"chat/a.yml": chain("chat/b"), "chat/b.yml": chain("chat/a")}
    report = lint(write_library(tmp_path, {**GOOD, **files}))
    cycles = [(f.file, f.line, f.message) for f in report.findings if f.rule == "composite-cycle"]
    assert cycles == [
        (f"{AGENTS}/chat/a.yml", 5, "composites reference each other in a cycle: chat/a -> chat/b -> chat/a"),
        (f"{AGENTS}/chat/b.yml", 5, "composites reference each other in a cycle: chat/b -> chat/a -> chat/b"),
    ]


APPROVED_TOOL = """\
name: Refunds
type: tool_calling
tools:
  - name: refund
    description: Refunds an order.
    parameters: {{type: object, properties: {{order: {{type: string}}}}}}
    x-requires-approval: {value}
    x-owner: payments-team
prompt_templates: {{user: hi}}
"""


def test_a_tool_may_require_approval_and_carry_other_extensions(tmp_path: Path) -> None:
    report = lint(write_library(tmp_path, {"chat/refunds.yml": APPROVED_TOOL.format(value="true")}))
    assert report.findings == []


def test_requires_approval_must_be_a_boolean(tmp_path: Path) -> None:
    report = lint(write_library(tmp_path, {"chat/refunds.yml": APPROVED_TOOL.format(value='"yes"')}))
    [finding] = report.findings
    assert (finding.rule, finding.severity, finding.line) == ("schema", "error", 7)
    assert "x-requires-approval" in finding.path


def test_a_misspelt_approval_key_is_a_warning_with_the_right_spelling(tmp_path: Path) -> None:
    report = lint(write_library(tmp_path, {**GOOD, **FAILING["tool-extension"]}))
    [finding] = [f for f in report.findings if f.rule == "tool-extension"]
    assert "'x-requires-aproval' is not read by the executor" in finding.message
    assert finding.hint == "did you mean 'x-requires-approval'?"
    assert finding.line == 3


@pytest.mark.parametrize(
    "key", ["x-require-approval", "x-requires_approval", "x-approval", "x-Approve", "x-needs-approving"]
)
def test_any_approval_key_the_executor_does_not_read_is_a_warning(tmp_path: Path, key: str) -> None:
    bad = FAILING["tool-extension"]["chat/bad.yml"]
    assert isinstance(bad, str)
    text = bad.replace("x-requires-aproval", key)
    report = lint(write_library(tmp_path, {"chat/bad.yml": text}))
    [finding] = [f for f in report.findings if f.rule == "tool-extension"]
    assert finding.hint == "did you mean 'x-requires-approval'?"


def test_an_extension_key_of_ones_own_is_no_warning(tmp_path: Path) -> None:
    bad = FAILING["tool-extension"]["chat/bad.yml"]
    assert isinstance(bad, str)
    text = bad.replace("x-requires-aproval", "x-owner")
    assert lint(write_library(tmp_path, {"chat/bad.yml": text})).findings == []


# --- model.params: the vocabulary, and what each provider takes ----------------------------------


def _param_findings(tmp_path: Path, model: str) -> list[tuple[str, str | None, int | None]]:
    report = lint(write_library(tmp_path, {"chat/agent.yml": MINIMAL + f"model: {model}\n"}))
    assert {f.rule for f in report.findings} <= {"model-param"} and report.errors == 0
    return [(f.message, f.hint, f.line) for f in report.findings]


def test_a_param_the_provider_does_not_take_is_a_warning_naming_both(tmp_path: Path) -> None:
    found = _param_findings(tmp_path, "{name: m, provider: anthropic, params: {seed: 7, top_k: 40, max_tokens: 9}}")
    assert found == [
        (f"provider 'anthropic' (anthropic) does not take model.params key '{key}': it is never sent", hint, 5)
        for key, hint in (("seed", RULES["model-param"].hint), ("top_k", RULES["model-param"].hint))
    ]


def test_a_misspelt_param_gets_did_you_mean_whatever_the_provider(tmp_path: Path) -> None:
    found = _param_findings(tmp_path, "{name: m, params: {max_token: 10, temprature: 0.5}}")
    assert [(message, hint) for message, hint, _ in found] == [
        ("model.params key 'max_token' is not in the parameters' vocabulary", "did you mean 'max_tokens'?"),
        ("model.params key 'temprature' is not in the parameters' vocabulary", "did you mean 'temperature'?"),
    ]


def test_a_providers_own_name_for_a_neutral_param_points_at_the_neutral_one(tmp_path: Path) -> None:
    [(message, hint, _)] = _param_findings(tmp_path, "{name: m, provider: anthropic, params: {stop_sequences: [x]}}")
    assert message == "model.params key 'stop_sequences' is not in the parameters' vocabulary"
    assert hint == "did you mean 'stop'?"


def test_a_local_servers_own_options_and_unknown_providers_get_no_warning(tmp_path: Path) -> None:
    # vLLM, Ollama and llama.cpp take options of their own; a provider lint does not know
    # is bound by the operator's models file, which lint does not read.
    assert _param_findings(tmp_path, "{name: m, provider: ollama, params: {mirostat: 2, typical_p: 0.9}}") == []
    assert _param_findings(tmp_path / "b", "{name: m, provider: our-gateway, params: {top_k: 5, seed: 1}}") == []
    assert _param_findings(tmp_path / "c", "{name: m, params: {top_k: 5, seed: 1}}") == []


def test_openai_takes_no_top_k_and_every_other_param_given(tmp_path: Path) -> None:
    found = _param_findings(tmp_path, "{name: m, provider: openai, params: {top_k: 5, temperature: 0.1, seed: 1}}")
    assert [message for message, _, _ in found] == [
        "provider 'openai' (openai) does not take model.params key 'top_k': it is never sent"
    ]
