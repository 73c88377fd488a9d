"""The shop/refunds agent of the tool-approval tests: a ReAct agent whose refund
tool needs a person's approval, the replies that look an order up and then
refund it, and the error a run with no one to ask ends with."""

from __future__ import annotations

REFUNDS = """\
name: Refunds
type: react
max_iterations: 3
output_parser: {type: react_text}
model: {name: test-model}
tools:
  - name: refund
    description: Refunds an order.
    parameters: {type: object, required: [order], properties: {order: {type: string}}}
    x-requires-approval: true
  - name: lookup
    description: Looks an order up.
    parameters: {type: object, required: [order], properties: {order: {type: string}}}
prompt_templates:
  system: Use the tools. Reply with Thought/Action/Action Input or Final Answer.
  user: "{{ question }}"
inputs: {type: object, required: [question], properties: {question: {type: string}}}
"""


LOOKUP = 'Thought: check it\nAction: lookup\nAction Input: {"order": "A-1"}'


REFUND = 'Thought: pay it back\nAction: refund\nAction Input: {"order": "A-1"}'


NEEDS_APPROVAL = (
    "the call of tool 'refund' needs a person's approval, which this run cannot ask for: run the agent as a task"
    " (prompt-registry agents serve) or step by step (Executor.step)"
)
