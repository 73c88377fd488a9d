"""The composites' tests' library: leaf agents (a drafter, a gate, a classifier,
a judge) and a composite of every pattern kind that runs them."""

from __future__ import annotations

from tests.conftest import MINIMAL

DRAFT = """\
name: Draft an answer
inputs: {type: object, properties: {question: {type: string}}, required: [question], additionalProperties: false}
prompt_templates:
  user: "{{ question }}"
"""
GATE = """\
name: Response gate
inputs: {type: object, properties: {reply: {type: string}}, required: [reply]}
output_parser:
  type: json
  output_schema:
    type: object
    required: [allow]
    properties: {allow: {type: boolean}, reason: {type: string}}
prompt_templates:
  user: "May this be sent? {{ reply }}"
"""
CLASSIFY = """\
name: Classify
inputs: {type: object, properties: {question: {type: string}}, required: [question]}
output_parser:
  type: json
  output_schema:
    type: object
    required: [label]
    properties: {label: {type: string, enum: [billing, tech]}}
prompt_templates:
  user: "{{ question }}"
"""
JUDGE = """\
name: Judge
inputs: {type: object, properties: {candidate: {type: string}}, required: [candidate]}
output_parser:
  type: json
  output_schema:
    type: object
    required: [pass, feedback]
    properties: {pass: {type: boolean}, feedback: {type: string}}
prompt_templates:
  user: "{{ candidate }}"
"""
GATED = """\
name: Support answer with a response gate
inputs: {type: object, properties: {question: {type: string}}, required: [question]}
pattern:
  kind: chain
  steps:
    - id: draft
      agent: support/draft_answer
      inputs: {question: "{{ inputs.question }}"}
    - id: gate
      agent: compliance/response_gate
      inputs: {reply: "{{ steps.draft.output }}"}
      gate: {on_block: "This information is restricted. {{ gate.reason }}"}
  limits: {max_llm_calls: 10, timeout: 60}
"""
ROUTED = """\
name: Routed
inputs: {type: object, properties: {question: {type: string}}, required: [question]}
pattern:
  kind: route
  classifier: {agent: support/classify, inputs: {question: "{{ inputs.question }}"}}
  routes:
    billing: {agent: support/draft_answer, inputs: {question: "{{ inputs.question }}"}}
    tech: {agent: support/gated, inputs: {question: "{{ inputs.question }}"}}
"""
MAPPED = """\
name: Summarise many
inputs: {type: object, properties: {items: {type: array}}, required: [items]}
pattern:
  kind: parallel
  mode: map
  over: "{{ inputs.items }}"
  chunk_size: 10
  max_items: 50
  max_concurrency: 4
  branch: {agent: support/draft_answer, inputs: {question: "{{ chunk }} (part {{ chunk_index }})"}}
  aggregate: {agent: support/draft_answer, inputs: {question: "{{ results }}"}}
"""
REFINED = """\
name: Refined
inputs: {type: object, properties: {question: {type: string}}, required: [question]}
pattern:
  kind: evaluator_optimizer
  generator: {agent: support/draft_answer, inputs: {question: "{{ inputs.question }} {{ previous.feedback }}"}}
  evaluator: {agent: support/judge, inputs: {candidate: "{{ candidate }}"}}
  max_iterations: 3
  on_exhausted: return_last
"""
VOTED = """\
name: Voted
inputs: {type: object, properties: {question: {type: string}}, required: [question]}
pattern:
  kind: parallel
  mode: vote
  n: 5
  branch: {agent: support/classify, inputs: {question: "{{ inputs.question }}"}}
  aggregate: {strategy: majority, field: label}
"""
LEAVES = {
    "support/draft_answer.yml": DRAFT,
    "compliance/response_gate.yml": GATE,
    "support/classify.yml": CLASSIFY,
    "support/judge.yml": JUDGE,
    "chat/minimal.yml": MINIMAL,
}
COMPOSITES = {
    "support/gated.yml": GATED,
    "support/routed.yml": ROUTED,
    "support/mapped.yml": MAPPED,
    "support/refined.yml": REFINED,
    "support/voted.yml": VOTED,
}
