"""Shared by the linter's tests (in process and through the CLI): libraries
written into a directory, a good one, and for each rule one that breaks it."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from tests.conftest import MINIMAL, WITH_RULES

AGENTS = "ai_gateway/agents"
EVALS = "ai_gateway/evals"
RULES_PARTIAL = "Rules:\n{% for rule in rules %}- {{ rule }}\n{% endfor %}"


def write_library(tmp_path: Path, files: Mapping[str, str | bytes]) -> Path:
    """A library of ``files`` (relative to its agents root: eval files are
    ``../evals/<usecase>/<name>.yml``) under ``tmp_path``; its root."""
    base = tmp_path / "library"
    for relative, content in files.items():
        target = Path(os.path.normpath(base / AGENTS / relative))
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content, encoding="utf-8")
    (base / AGENTS).mkdir(parents=True, exist_ok=True)
    return base


def chain(*agents: str, question: str = "q", ids: tuple[str, ...] = (), limits: dict[str, int] | None = None) -> str:
    """A chain composite running ``agents`` in order."""
    steps = "".join(
        f"    - {{id: {ids[index] if ids else f's{index}'}, agent: {agent}, inputs: {{question: '{question}'}}}}\n"
        for index, agent in enumerate(agents)
    )
    bounds = f"  limits: {json.dumps(limits)}\n" if limits else ""
    return f"name: Chain\npattern:\n  kind: chain\n  steps:\n{steps}{bounds}"


GOOD = {"chat/with_rules.yml": WITH_RULES, "_partials/rules.jinja": RULES_PARTIAL, "chat/minimal.yml": MINIMAL}


# Each rule: a library that breaks it (on top of GOOD), and the rule id.
FAILING: dict[str, dict[str, str | bytes]] = {
    "yaml-syntax": {"chat/bad.yml": "name: [unclosed\n"},
    "duplicate-key": {"chat/bad.yml": MINIMAL + "name: again\n"},
    "not-a-mapping": {"chat/bad.yml": "- a list\n- not a mapping\n"},
    "schema": {"chat/bad.yml": MINIMAL + "modle: {name: x}\n"},
    "inputs-schema": {"chat/bad.yml": MINIMAL + "inputs: {type: object, properties: {question: {type: strng}}}\n"},
    "name": {"Chat/minimal.yml": MINIMAL},
    "layout": {"chat/deeper/minimal.yml": MINIMAL},
    "template-syntax": {"chat/bad.yml": "name: x\nprompt_templates:\n  user: '{% if %}'\n"},
    "undeclared-variable": {"chat/bad.yml": MINIMAL + "inputs: {type: object, properties: {other: {type: string}}}\n"},
    "unused-input": {
        "chat/bad.yml": MINIMAL
        + "inputs: {type: object, properties: {question: {type: string}, unused: {type: string}}}\n"
    },
    "missing-include": {
        "chat/bad.yml": "name: x\nprompt_templates:\n  user: \"{% include '_partials/nope.jinja' %}\"\n"
    },
    "dynamic-include": {"chat/bad.yml": "name: x\nprompt_templates:\n  user: \"{% include '_partials/' ~ which %}\"\n"},
    "unused-partial": {"_partials/orphan.jinja": "nobody includes me"},
    "agent-type": {"chat/bad.yml": MINIMAL + "type: react\n"},
    "react-example": {
        "chat/bad.yml": """\
name: x
type: react
tools: [{name: search, description: Search., parameters: {type: object, properties: {q: {type: string}}}}]
output_parser: {type: react_json}
prompt_templates:
  system: 'Reply like {"thought": "t", "action": {"tool_name": "search", "tool_params": []}, "answer": "both"}'
"""
    },
    "tool-extension": {
        "chat/bad.yml": """\
name: x
type: tool_calling
tools: [{name: refund, description: Refunds., parameters: {type: object}, x-requires-aproval: true}]
prompt_templates: {user: hi}
"""
    },
    "unknown-tool": {
        "chat/bad.yml": """\
name: x
type: react
tools: [{name: search, description: Search., parameters: {type: object}}]
output_parser: {type: react_text}
prompt_templates:
  system: |
    Example:
    Action: serch
    Action Input: {"q": "x"}
"""
    },
    "model-param": {"chat/bad.yml": MINIMAL + "model: {name: gpt-4o-mini, provider: openai, params: {top_k: 40}}\n"},
    "unfilled-placeholder": {
        "chat/bad.yml": "name: x\nprompt_templates:\n  user: 'Question: {question}'\ninputs: {type: object, properties: {}}\n"
    },
    "file-size": {"chat/bad.yml": "name: x\nprompt_templates:\n  user: |\n" + "    padding\n" * 40_000},
    "recursive-include": {
        "chat/bad.yml": "name: x\nprompt_templates:\n  user: \"{% include '_partials/self.jinja' %}\"\n",
        "_partials/self.jinja": "again: {% include '_partials/self.jinja' %}",
    },
    "composite-reference": {"chat/bad.yml": chain("chat/miniml")},
    "composite-cycle": {"chat/bad.yml": chain("chat/bad")},
    "composite-inputs": {"chat/bad.yml": chain("chat/minimal", question="{{ steps.later.output }}")},
    "composite-duplicate-id": {"chat/bad.yml": chain("chat/minimal", "chat/minimal", ids=("a", "a"))},
    "composite-parser": {
        "chat/bad.yml": chain("chat/minimal").replace("id: s0,", "id: s0, gate: {on_block: blocked},"),
    },
    "composite-route": {
        "chat/classify.yml": MINIMAL + "output_parser: {type: json, output_schema: {required: [label],"
        " properties: {label: {type: string}}}}\n",
        "chat/bad.yml": "name: x\npattern:\n  kind: route\n  classifier: {agent: chat/classify, inputs: {question: q}}\n"
        "  routes: {a: {agent: chat/minimal, inputs: {question: q}}}\n",
    },
    "composite-depth": {
        **{f"chat/n{i}.yml": chain(f"chat/n{i + 1}") for i in range(9)},
        "chat/n9.yml": chain("chat/minimal"),
    },
    "composite-budget": {"chat/bad.yml": chain(*["chat/minimal"] * 11, limits={"max_llm_calls": 10})},
    "eval-schema": {"../evals/chat/minimal.yml": "cases:\n  - id: one\n    expect: [{contain: x}]\n"},
    "eval-layout": {"../evals/minimal.yml": "cases: [{id: one}]\n"},
    "eval-agent": {"../evals/chat/minimal.yml": "agent: chat/minimall\ncases: [{id: one}]\n"},
    "eval-inputs": {"../evals/chat/minimal.yml": "cases: [{id: one, inputs: {questoin: q}}]\n"},
    "eval-judge": {
        "../evals/chat/minimal.yml": "cases: [{id: one, inputs: {question: q}, expect: [{judge: chat/with_rules}]}]\n"
    },
    "eval-duplicate-id": {"../evals/chat/minimal.yml": "cases: [{id: one, inputs: {question: q}}, {id: one}]\n"},
    "eval-regex": {
        "../evals/chat/minimal.yml": "cases: [{id: one, inputs: {question: q}, expect: [{regex: '(a)\\1'}]}]\n"
    },
    "composite-size": {  # 2 chains of 50 agents each, and one more: 103 agents reached
        **{f"chat/l{i}.yml": MINIMAL for i in range(100)},
        "chat/half0.yml": chain(*[f"chat/l{i}" for i in range(50)], limits={"max_llm_calls": 1000}),
        "chat/half1.yml": chain(*[f"chat/l{i}" for i in range(50, 100)], limits={"max_llm_calls": 1000}),
        "chat/bad.yml": chain("chat/half0", "chat/half1", "chat/minimal", limits={"max_llm_calls": 1000}),
    },
}
