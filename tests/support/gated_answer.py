"""The support/gated chain of the executor's tests: a drafter, then a gate
that allows or blocks the draft."""

from __future__ import annotations

from tests.support.executor_fixtures import GATE_SCHEMA, json_leaf, leaf

DRAFT = leaf("the drafter", "Draft a reply to: {{ question }}", question="string")
GATE = json_leaf("the gate", "Check this reply: {{ reply }}", GATE_SCHEMA, reply="string")

GATED = """\
name: Gated answer
inputs: {type: object, required: [question], properties: {question: {type: string}}}
pattern:
  kind: chain
  steps:
    - id: draft
      agent: support/draft
      inputs: {question: "{{ inputs.question }}"}
    - id: gate
      agent: support/gate
      inputs: {reply: "{{ steps.draft.output }}"}
      gate: {on_block: "Sorry: {{ gate.reason }}"}
  limits: {max_llm_calls: 4, timeout: 60}
"""
