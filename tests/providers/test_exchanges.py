"""The key of a request and the file of exchanges: what the key covers and
what it leaves out, the same key in another process, the file read back
exactly whatever the texts hold, and every way a file edited by hand (or
written by another version, or huge) is refused with where the problem is."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from registry.errors import ConfigurationError
from registry.format.safeyaml import parse_yaml
from registry.providers.chat import ChatReply, ChatRequest, ResponseFormat, ServedBy, ToolCallRequest, Usage
from registry.providers.exchangefile import load_exchanges
from registry.providers.exchanges import (
    LIMITS,
    Exchange,
    RecordedError,
    dump_exchanges,
    keyed_request,
    request_key,
    request_of_parts,
)

REQUEST = ChatRequest(
    model="gpt-4o-mini",
    messages=(
        {"role": "system", "content": "You triage tickets.\nAnswer in JSON."},
        {"role": "user", "content": "I was charged twice"},
    ),
    tools=({"type": "function", "function": {"name": "lookup_order", "parameters": {"type": "object"}}},),
    params={"temperature": 0.2, "max_tokens": 50},
    provider="openai",
    tool_choice="auto",
    response_format=ResponseFormat(schema={"type": "object", "required": ["label"]}, name="triage"),
    timeout=30,
    agent="support/triage",
)


def _exchange(request: ChatRequest = REQUEST, *replies: ChatReply | RecordedError, case: str | None = "c1") -> Exchange:
    return Exchange(case, request.agent, request, replies or (ChatReply("billing"),), request_key(request))


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "replay.yml"
    path.write_text(text, encoding="utf-8")
    return path


# --- the key ----------------------------------------------------------------------------------


def test_the_key_leaves_out_the_timeout_and_the_agent() -> None:
    assert request_key(replace(REQUEST, timeout=5, agent="other/agent")) == request_key(REQUEST)
    assert "timeout" not in keyed_request(REQUEST) and "agent" not in keyed_request(REQUEST)


@pytest.mark.parametrize(
    "changed",
    [
        replace(REQUEST, model="gpt-4o"),
        replace(REQUEST, provider="anthropic"),
        replace(REQUEST, provider=None),
        replace(REQUEST, messages=REQUEST.messages[:1]),
        replace(REQUEST, messages=(*REQUEST.messages[:1], {"role": "user", "content": "I was charged twice!"})),
        replace(REQUEST, tools=()),
        replace(REQUEST, params={"temperature": 0.3, "max_tokens": 50}),
        replace(REQUEST, params={"temperature": 0.2, "max_tokens": 50, "stop": ["\n"]}),
        replace(REQUEST, tool_choice="required"),
        replace(REQUEST, response_format=ResponseFormat(schema={"type": "object"}, name="triage")),
        replace(REQUEST, response_format=ResponseFormat(schema={"type": "object", "required": ["label"]})),
        replace(REQUEST, response_format=None),
    ],
)
def test_the_key_changes_with_each_part_the_model_receives(changed: ChatRequest) -> None:
    assert request_key(changed) != request_key(REQUEST)


def test_the_key_does_not_depend_on_the_order_keys_were_written_in() -> None:
    reordered = replace(
        REQUEST,
        messages=tuple(dict(reversed(list(message.items()))) for message in REQUEST.messages),
        params={"max_tokens": 50, "temperature": 0.2},
    )
    assert request_key(reordered) == request_key(REQUEST)


def test_the_key_is_the_same_in_another_process_with_another_hash_seed() -> None:
    script = (
        "from tests.providers.test_exchanges import REQUEST;"
        "from registry.providers.exchanges import request_key; print(request_key(REQUEST))"
    )
    keys = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={"PYTHONHASHSEED": seed, "PATH": ""},
            cwd=Path(__file__).resolve().parents[2],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert keys == {request_key(REQUEST)}
    assert len(request_key(REQUEST)) == 64


def test_a_request_read_back_from_its_parts_has_the_same_key() -> None:
    assert request_key(request_of_parts(keyed_request(REQUEST))) == request_key(REQUEST)


# --- the file ---------------------------------------------------------------------------------

TEXTS = [
    "",
    "yes",
    "1.0",
    "null",
    "2024-01-01",
    "- not a list",
    "  leading spaces\nthen a line",
    "trailing spaces  \nthen a line",
    "one line\n",
    "two blank lines after\n\n",
    "\n",
    "\nfirst a break",
    "a tab\there\n\tand at the start",
    "windows\r\nbreaks",
    "a separator\u2028and\x85next\nline",
    "é ü 漢字\nunicode",
    "key: value\nother: value",
    "'single' and \"double\"\n",
    "long words " * 40,
    "a line of " + "x" * 300 + "\nand another",
    "\x07 a bell\n",
    "---\n...",
    "\ufeffa byte order mark\n",
]


@pytest.mark.parametrize("text", TEXTS)
def test_every_text_reads_back_exactly(tmp_path: Path, text: str) -> None:
    request = replace(REQUEST, messages=({"role": "user", "content": text},))
    reply = ChatReply(text, (ToolCallRequest("abc123def", "lookup_order", '{"order_id": "A-1"}'),))
    path = tmp_path / "replay.yml"
    path.write_bytes(dump_exchanges([_exchange(request, reply)]))
    (exchange,) = load_exchanges(path)
    assert exchange.key == request_key(request)
    assert exchange.replies == (reply,)


def test_the_file_is_readable_yaml_with_block_strings_and_a_fixed_order() -> None:
    reply = ChatReply(
        "Label: billing\nReason: charged twice\n",
        usage=Usage(10, 5),
        model="gpt-4o-mini-2024-07-18",
        finish_reason="stop",
        response_id="chatcmpl-123",
        served_by=ServedBy("openai", "openai", "gpt-4o-mini"),
        origin="cache",
    )
    text = dump_exchanges([_exchange(REQUEST, reply)]).decode()
    assert text.startswith("# Model exchanges recorded by prompt-registry")
    assert "version: 1\nexchanges:\n- case: c1\n  agent: support/triage\n  request:\n" in text
    assert "    - role: system\n      content: |-\n        You triage tickets.\n" in text
    assert "  - content: |\n      Label: billing\n      Reason: charged twice\n" in text
    assert "usage: {input_tokens: 10, output_tokens: 5}" in text
    # What changes from run to run stays out of a reviewer's diff.
    assert "chatcmpl-123" not in text and "origin" not in text and "timeout" not in text


def test_the_file_is_the_same_whatever_order_the_exchanges_came_in() -> None:
    exchanges = [
        _exchange(replace(REQUEST, messages=REQUEST.messages[:n]), case=case)
        for case in ("b", "a", None)
        for n in (2, 1)
    ]
    assert dump_exchanges(exchanges) == dump_exchanges(list(reversed(exchanges)))
    cases = [item.get("case") for item in parse_yaml(dump_exchanges(exchanges)).value["exchanges"]]
    assert cases == [None, None, "a", "a", "b", "b"]


def test_a_recorded_failure_reads_back(tmp_path: Path) -> None:
    failure = RecordedError("status", "overloaded", 503)
    path = tmp_path / "replay.yml"
    path.write_bytes(dump_exchanges([_exchange(REQUEST, ChatReply("first"), failure)]))
    assert load_exchanges(path)[0].replies == (ChatReply("first"), failure)


def test_a_recording_too_large_to_replay_is_refused_before_it_is_written() -> None:
    request = replace(REQUEST, messages=({"role": "user", "content": "x" * LIMITS.max_bytes},))
    with pytest.raises(ConfigurationError, match="cannot be replayed: the file would be .* bytes, over the"):
        dump_exchanges([_exchange(request)])


# --- files edited by hand ---------------------------------------------------------------------

VALID = """\
version: 1
exchanges:
  - case: c1
    agent: support/triage
    request:
      model: gpt-4o-mini
      messages:
        - {role: user, content: hello}
    replies:
      - content: hi
"""


def test_a_file_written_by_hand_is_read(tmp_path: Path) -> None:
    (exchange,) = load_exchanges(_write(tmp_path, VALID))
    assert (exchange.case, exchange.agent, exchange.replies) == ("c1", "support/triage", (ChatReply("hi"),))
    assert exchange.key == request_key(ChatRequest("gpt-4o-mini", ({"role": "user", "content": "hello"},)))
    assert exchange.where.endswith("replay.yml:3:5")


def test_invalid_yaml_is_a_configuration_error_with_file_line_and_column(tmp_path: Path) -> None:
    path = _write(tmp_path, VALID.replace("      - content: hi", '      - content: "hi'))
    with pytest.raises(ConfigurationError) as raised:
        load_exchanges(path)
    assert str(raised.value).startswith(f"{path}:")
    assert raised.value.errors[0].line is not None and raised.value.errors[0].column is not None


@pytest.mark.parametrize(
    ("edit", "where", "message"),
    [
        (("      - content: hi", "      - contnet: hi"), "10:9", "unknown key 'contnet'; did you mean 'content'?"),
        (("    request:", "    requests:"), "5:5", "unknown key 'requests'; did you mean 'request'?"),
        (("    request:", "    requests:"), "3:5", "an exchange needs a `request:` mapping, not nothing"),
        (("      model: gpt-4o-mini\n", ""), "6:7", "`model:` is missing"),
        (("      - content: hi", "      - content: [hi]"), "10:18", "content must be a string, not a list"),
        (("    replies:\n      - content: hi\n", "    replies: []\n"), "3:5", "needs `replies:`"),
        (("        - {role: user, content: hello}", "        - hello"), "8:11", "each of messages must be a mapping"),
        (("      - content: hi", "      - error: {reason: status}"), "10:16", "`message:` is missing"),
        (("      - content: hi", "      - {content: hi, error: {reason: r, message: m}}"), "10:10", "has nothing else"),
    ],
)
def test_a_file_with_a_bad_structure_says_where(
    tmp_path: Path, edit: tuple[str, str], where: str, message: str
) -> None:
    path = _write(tmp_path, VALID.replace(*edit))
    with pytest.raises(ConfigurationError) as raised:
        load_exchanges(path)
    assert str(raised.value).startswith(f"{path}:")
    found = [issue for issue in raised.value.errors if message in issue.message]
    assert [f"{issue.file}:{issue.line}:{issue.column}" for issue in found] == [f"{path}:{where}"]


def test_every_problem_is_reported_not_only_the_first(tmp_path: Path) -> None:
    text = VALID.replace("      - content: hi", "      - contnet: hi").replace("    agent:", "    agnet:")
    with pytest.raises(ConfigurationError) as raised:
        load_exchanges(_write(tmp_path, text))
    assert [issue.line for issue in raised.value.errors] == [4, 10]
    assert "and 1 more problem" in str(raised.value)


def test_the_same_request_recorded_twice_in_a_case_is_refused(tmp_path: Path) -> None:
    exchange = VALID.split("exchanges:\n", 1)[1]
    path = _write(tmp_path, VALID + exchange)
    with pytest.raises(ConfigurationError, match=r"replay.yml:11:5: .*recorded at .*replay.yml:3:5 already"):
        load_exchanges(path)


@pytest.mark.parametrize(
    ("version", "message"),
    [
        ("version: 2", "replay.yml:1:10: replay file version 2 is not one this prompt-registry reads"),
        ("version: true", "replay file version True is not one"),
        ("versoin: 1", "unknown key 'versoin'; did you mean 'version'?"),
    ],
)
def test_a_file_of_another_format_version_is_refused(tmp_path: Path, version: str, message: str) -> None:
    # Another version's exchanges may look like anything: only the version is reported.
    path = _write(tmp_path, VALID.replace("version: 1", version).replace("content: hi", "text: hi"))
    with pytest.raises(ConfigurationError) as raised:
        load_exchanges(path)
    assert message in str(raised.value)
    assert "'text'" not in str(raised.value)


def test_a_huge_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "replay.yml"
    with path.open("wb") as handle:
        handle.write(VALID.encode())
        handle.truncate(LIMITS.max_bytes + 1)
    with pytest.raises(ConfigurationError, match=f"the replay file is {LIMITS.max_bytes + 1} bytes; the limit is"):
        load_exchanges(path)


def test_a_file_nested_too_deep_is_refused_by_the_yaml_limits(tmp_path: Path) -> None:
    deep = "[" * (LIMITS.max_depth + 1) + "]" * (LIMITS.max_depth + 1)
    path = _write(tmp_path, VALID.replace("{role: user, content: hello}", f"{{role: user, content: {deep}}}"))
    with pytest.raises(ConfigurationError, match=r"replay.yml:\d+:\d+: nesting is deeper than"):
        load_exchanges(path)


@pytest.mark.parametrize(("text", "message"), [("", "file is empty"), ("- a list", "is a mapping")])
def test_a_file_that_is_not_a_mapping_is_refused(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        load_exchanges(_write(tmp_path, text))


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"replay file .*nowhere.yml does not exist"):
        load_exchanges(tmp_path / "nowhere.yml")
