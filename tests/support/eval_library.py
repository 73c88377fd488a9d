"""A library with eval files, shared by the eval runner's unit tests and the
``prompt-registry eval`` tests: two releases where a prompt change flips a
case, a judge agent, and the scripts that answer them.

- ``v1.0.0``: ``support/triage`` asks "Ticket: ..."; ``support/faq`` and
  ``support/greeter`` with eval files; the judge ``evals/helpfulness``.
- ``v1.1.0``: triage asks "Please label: ..." (the script labels that
  ``general``, so the case ``refund`` regresses); faq's eval file gains a
  case; greeter is untouched (``--changed`` leaves it out).
"""

from __future__ import annotations

import json

from tests.conftest import LibraryRepo

EVALS = "ai_gateway/evals"

TRIAGE = """\
name: Triage
model: {{name: gpt-test}}
prompt_templates:
  system: You label support tickets with one word.
  user: "{user}"
inputs:
  type: object
  required: [ticket]
  properties:
    ticket: {{type: string}}
"""
TRIAGE_V1 = TRIAGE.format(user="Ticket: {{ ticket }}")
TRIAGE_V2 = TRIAGE.format(user="Please label: {{ ticket }}")

ECHO = """\
name: {title}
model: {{name: gpt-test}}
prompt_templates:
  user: "{prefix}: {{{{ question }}}}"
inputs:
  type: object
  required: [question]
  properties:
    question: {{type: string}}
"""

JUDGE = """\
name: Helpfulness judge
model: {name: gpt-judge}
prompt_templates:
  system: You grade a support answer. Reply with JSON only.
  user: "Judge: {{ answer }} for {{ inputs | tojson }} ({{ expectation }})"
inputs:
  type: object
  required: [inputs, answer]
  properties: {inputs: {type: object}, answer: {type: string}, expectation: {type: string}}
output_parser:
  type: json
  output_schema:
    type: object
    required: [score, pass, reason]
    properties:
      score: {type: number, minimum: 0, maximum: 1}
      pass: {type: boolean}
      reason: {type: string}
"""

TRIAGE_CASES = """\
description: Tickets a human labelled.
cases:
  - id: refund
    tags: [billing]
    inputs: {ticket: "I was charged twice"}
    expect:
      - regex: "^billing$"
      - judge: {agent: evals/helpfulness, min_score: 0.5, expectation: "a billing label"}
  - id: login
    inputs: {ticket: "I cannot log in"}
    expect:
      - contains: account
"""
FAQ_CASES = """\
cases:
  - id: hours
    inputs: {question: "When are you open?"}
    expect: [{contains: "9 to 5"}]
"""
FAQ_MORE = (
    FAQ_CASES
    + """\
  - id: phone
    inputs: {question: "What is your phone number?"}
    expect: [{contains: "555"}]
"""
)
GREETER_CASES = """\
cases:
  - id: hello
    inputs: {question: "hi"}
    expect: [{contains: "Hello"}]
"""

REPLIES = [
    {"when": "^Ticket: I was charged", "content": "billing"},
    {"when": "^Please label: I was charged", "content": "general"},
    {"when": "log in", "content": "account"},
    {"when": "^FAQ: When", "content": "We are open 9 to 5."},
    {"when": "^FAQ: What is your phone", "content": "Call 555-0100."},
    {"when": "^Greeter:", "content": "Hello there!"},
    {"when": "^Judge:", "content": '{"score": 0.9, "pass": true, "reason": "a fine label"}'},
]
"""What answers every run of the library: the scripted model's replies
(each used again and again), in the order they are tried."""


def script_yaml(replies: list[dict[str, str]] = REPLIES) -> str:
    """``replies`` as a scripted model's file (``--model scripted:FILE``)."""
    return "".join(f"- {json.dumps({**reply, 'repeat': True})}\n" for reply in replies)


def server_script(replies: list[dict[str, str]] = REPLIES, **extra: object) -> list[dict[str, object]]:
    """``replies`` as the scripted OpenAI-compatible server's (tests/support/openai_server.py)."""
    return [{**reply, "repeat": True, **extra} for reply in replies]


def eval_library(repo: LibraryRepo) -> LibraryRepo:
    """``repo`` with the two releases of this module's docstring."""
    repo.write("support/triage.yml", TRIAGE_V1)
    repo.write("support/faq.yml", ECHO.format(title="FAQ", prefix="FAQ"))
    repo.write("support/greeter.yml", ECHO.format(title="Greeter", prefix="Greeter"))
    repo.write("evals/helpfulness.yml", JUDGE)
    repo.write(f"{EVALS}/support/triage.yml", TRIAGE_CASES, under_agents=False)
    repo.write(f"{EVALS}/support/faq.yml", FAQ_CASES, under_agents=False)
    repo.write(f"{EVALS}/support/greeter.yml", GREETER_CASES, under_agents=False)
    repo.commit("v1.0.0")
    repo.tag("v1.0.0")
    repo.write("support/triage.yml", TRIAGE_V2)
    repo.write(f"{EVALS}/support/faq.yml", FAQ_MORE, under_agents=False)
    repo.commit("v1.1.0")
    repo.tag("v1.1.0")
    return repo


def many_cases(count: int) -> str:
    """An eval file of ``count`` cases for ``support/greeter``."""
    case = '  - {{id: c{n}, inputs: {{question: "hi {n}"}}, expect: [{{contains: Hello}}]}}\n'
    return "cases:\n" + "".join(case.format(n=n) for n in range(count))
