"""The eval file's published JSON Schema (schemas/eval.v1.schema.json) says
what the reader accepts: the same keys, the same assertion kinds, and the
same verdict on files good and bad."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from registry.errors import ConfigurationError
from registry.evals import ASSERTION_KINDS, OUTCOMES
from registry.evals.expectations import EQUALS_KEYS, JUDGE_KEYS, TOOL_CALLED_KEYS
from registry.evals.reading import CASE_KEYS, DEFAULTS_KEYS, FILE_KEYS, TURN_KEYS, EvalFile

REPOSITORY = Path(__file__).resolve().parents[2]
SCHEMA_FILE = REPOSITORY / "schemas" / "eval.v1.schema.json"
SCHEMA: dict[str, Any] = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
CASE = "cases:\n  - id: one\n    inputs: {question: q}\n"

GOOD = [
    CASE,
    "agent: support/triage\ndescription: Tickets.\ndefaults: {repeat: 3, expect: [{outcome: completed}]}\n" + CASE,
    "cases:\n  - id: a.b_c-1\n    description: d\n    tags: [smoke, billing]\n    repeat: 2\n"
    "    history: [{role: user, content: hi}, {role: assistant, content: hello}]\n    expect:\n"
    "      - contains: refund\n      - not_contains: I cannot\n      - json_schema: {type: object, required: [label]}\n"
    "      - equals: {path: items.0.label, value: billing}\n      - equals: {value: {a: 1}}\n"
    "      - regex: '^(billing|general)$'\n      - tool_called: lookup_order\n"
    "      - tool_called: {name: lookup_order, args: {order_id: A-1}}\n      - outcome: blocked\n"
    "      - max_llm_calls: 3\n      - judge: evals/helpfulness\n"
    "      - judge: {agent: evals/helpfulness, min_score: 0.7, expectation: Offers a refund.}\n",
]
BAD = [
    "agent: support/triage\n",
    "cases: []\n",
    "cases: {one: {}}\n",
    "agnet: support/triage\n" + CASE,
    "agent: Support/Triage\n" + CASE,
    "agent: triage\n" + CASE,
    "defaults: {repeat: 0}\n" + CASE,
    "defaults: {repeats: 2}\n" + CASE,
    "cases:\n  - inputs: {q: x}\n",
    "cases:\n  - {id: 'has space'}\n",
    "cases:\n  - {id: one, input: {q: x}}\n",
    "cases:\n  - {id: one, inputs: [q]}\n",
    "cases:\n  - {id: one, repeat: 101}\n",
    "cases:\n  - {id: one, tags: ['bad tag']}\n",
    "cases:\n  - {id: one, history: [{role: system, content: x}]}\n",
    "cases:\n  - {id: one, history: [{role: user}]}\n",
    "cases:\n  - {id: one, expect: {contains: x}}\n",
    "cases:\n  - {id: one, expect: [{contain: x}]}\n",
    "cases:\n  - {id: one, expect: [{contains: x, regex: y}]}\n",
    "cases:\n  - {id: one, expect: [{contains: ''}]}\n",
    "cases:\n  - {id: one, expect: [{contains: 3}]}\n",
    "cases:\n  - {id: one, expect: [{json_schema: [1]}]}\n",
    "cases:\n  - {id: one, expect: [{equals: {path: label}}]}\n",
    "cases:\n  - {id: one, expect: [{equals: {path: a..b, value: 1}}]}\n",
    "cases:\n  - {id: one, expect: [{equals: {pth: a, value: 1}}]}\n",
    "cases:\n  - {id: one, expect: [{regex: ''}]}\n",
    "cases:\n  - {id: one, expect: [{tool_called: {args: {a: 1}}}]}\n",
    "cases:\n  - {id: one, expect: [{tool_called: {name: t, arguments: {a: 1}}}]}\n",
    "cases:\n  - {id: one, expect: [{outcome: complete}]}\n",
    "cases:\n  - {id: one, expect: [{max_llm_calls: 0}]}\n",
    "cases:\n  - {id: one, expect: [{max_llm_calls: true}]}\n",
    "cases:\n  - {id: one, expect: [{judge: {min_score: 0.5}}]}\n",
    "cases:\n  - {id: one, expect: [{judge: {agent: evals/h, min_score: 1.5}}]}\n",
    "cases:\n  - {id: one, expect: [{judge: {agent: evals/h, min_sore: 0.5}}]}\n",
    "cases:\n  - {id: one, expect: [{judge: Evals/H}]}\n",
]


def _reader_accepts(text: str) -> bool:
    try:
        eval_file = EvalFile(io.BytesIO(text.encode()), source="x.yml", agent="support/triage")
        list(eval_file.cases())
    except ConfigurationError:
        return False
    return True


def test_the_schema_is_a_valid_draft_2020_12_schema_shipped_with_the_package() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert (REPOSITORY / "registry" / "schemas" / SCHEMA_FILE.name).is_file()


def test_the_schema_has_the_keys_and_assertion_kinds_of_the_reader() -> None:
    defs = SCHEMA["$defs"]
    assert list(SCHEMA["properties"]) == list(FILE_KEYS)
    assert list(SCHEMA["properties"]["defaults"]["properties"]) == list(DEFAULTS_KEYS)
    assert list(defs["case"]["properties"]) == list(CASE_KEYS)
    assert list(defs["turn"]["properties"]) == list(TURN_KEYS)
    assert [ref["$ref"].rsplit("/", 1)[1] for ref in defs["assertion"]["oneOf"]] == list(ASSERTION_KINDS)
    for kind in ASSERTION_KINDS:
        assert defs[kind]["required"] == [kind] and defs[kind]["additionalProperties"] is False
    assert defs["outcome"]["properties"]["outcome"]["enum"] == list(OUTCOMES)
    assert list(defs["equals"]["properties"]["equals"]["properties"]) == list(EQUALS_KEYS)
    assert list(defs["tool_called"]["properties"]["tool_called"]["oneOf"][1]["properties"]) == list(TOOL_CALLED_KEYS)
    assert list(defs["judge"]["properties"]["judge"]["oneOf"][1]["properties"]) == list(JUDGE_KEYS)


@pytest.mark.parametrize("text", GOOD)
def test_a_good_file_is_accepted_by_both(text: str) -> None:
    assert VALIDATOR.is_valid(yaml.safe_load(text))
    assert _reader_accepts(text)


@pytest.mark.parametrize("text", BAD)
def test_a_bad_file_is_refused_by_both(text: str) -> None:
    assert not VALIDATOR.is_valid(yaml.safe_load(text))
    assert not _reader_accepts(text)


def test_the_eval_files_of_the_docs_are_valid() -> None:
    page = (REPOSITORY / "docs" / "evals.md").read_text(encoding="utf-8")
    examples = re.findall(r"```yaml\n(.*?)```", page, re.DOTALL)
    assert examples
    for example in examples:
        if "cases:" in example:
            assert VALIDATOR.is_valid(yaml.safe_load(example)), example
            assert _reader_accepts(example), example
