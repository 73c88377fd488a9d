"""A library whose eval files the UI's agent page lists: shared by the page's
tests through Flask's test client (tests/serving/ui/test_ui_evals.py), the
reader's (tests/serving/test_evalcases.py) and the browser's.

- ``v1.0.0``: ``support/triage`` with an eval file of two cases (one with a
  judge, ``evals/helpfulness``; one whose inputs and history are hostile
  HTML); ``support/broken`` whose eval file has problems;
  ``support/without_any_eval_file`` with none; ``support/many`` with ``MANY`` cases.
- ``v1.1.0``: triage's eval file gains a case; the others are unchanged.
"""

from __future__ import annotations

from tests.conftest import LibraryRepo
from tests.support.eval_library import ECHO, EVALS, JUDGE, TRIAGE_V1

HOSTILE_TICKET = "<script>alert('case')</script>"

TRIAGE_CASES = """\
description: "Tickets a human labelled <b>by hand</b>."
defaults:
  expect:
    - outcome: completed
cases:
  - id: refund-simple
    description: A double charge is a billing question.
    tags: [billing, smoke]
    inputs: {ticket: "I was charged twice"}
    expect:
      - contains: refund
      - regex: "^(billing|general)$"
      - judge: {agent: evals/helpfulness, min_score: 0.7, expectation: Offers a refund.}
  - id: hostile
    description: "<img src=x onerror=alert(1)>"
    inputs: {ticket: "<script>alert('case')</script>"}
    history:
      - {role: user, content: "<b>Hello</b>"}
      - {role: assistant, content: Hi}
    repeat: 3
    expect:
      - not_contains: "<img src=x onerror=alert(2)>"
"""
ADDED_CASE = """\
  - id: added-in-v1-1
    inputs: {ticket: "Where is my parcel?"}
"""

# Line 4 has an unknown key, line 7 a pattern RE2 refuses, line 8 a case without an id.
BROKEN_CASES = """\
cases:
  - id: typo
    inputs: {question: "hi"}
    expected: [{contains: "Hello"}]
  - id: backreference
    expect:
      - regex: "(a)\\\\1"
  - inputs: {question: "no id"}
  - id: fine
    inputs: {question: "still listed"}
"""

MANY = 100_000
"""Cases in ``support/many``'s eval file: far more than a page reads."""


def many_cases(count: int) -> str:
    return "cases:\n" + "".join(f"  - {{id: case-{n}, inputs: {{question: q{n}}}}}\n" for n in range(count))


def ui_eval_library(repo: LibraryRepo) -> LibraryRepo:
    """``repo`` with the two releases of this module's docstring."""
    repo.write("support/triage.yml", TRIAGE_V1)
    repo.write("evals/helpfulness.yml", JUDGE)
    for name in ("broken", "without_any_eval_file", "many"):
        repo.write(f"support/{name}.yml", ECHO.format(title=name, prefix=name))
    repo.write(f"{EVALS}/support/triage.yml", TRIAGE_CASES, under_agents=False)
    repo.write(f"{EVALS}/support/broken.yml", BROKEN_CASES, under_agents=False)
    repo.write(f"{EVALS}/support/many.yml", many_cases(MANY), under_agents=False)
    repo.commit("v1.0.0")
    repo.tag("v1.0.0")
    repo.write(f"{EVALS}/support/triage.yml", TRIAGE_CASES + ADDED_CASE, under_agents=False)
    repo.commit("v1.1.0")
    repo.tag("v1.1.0")
    return repo
