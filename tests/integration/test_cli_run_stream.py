"""``prompt-registry run --stream``, as a user runs it: the installed
command, in a subprocess, against the bundled library and a scripted model
whose replies stream word by word."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.support.cli import run
from tests.support.servers import CLI, clean_environment

ANSWER = "Open Settings › Billing and choose Request refund."


def _script(tmp_path: Path, draft: str, gate: str, *, stream_delay: float = 0.0) -> Path:
    path = tmp_path / "replies.yml"
    replies = [
        {"agent": "support/draft_answer", "content": draft, "stream_delay": stream_delay},
        {"agent": "compliance/response_gate", "content": gate},
    ]
    path.write_text(json.dumps(replies), encoding="utf-8")  # JSON is YAML
    return path


def _run_gated(script: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return run(
        "run", "support/gated_answer", "--example", "--input", "question=How do I get a refund?",
        "--model", f"scripted:{script}", "--stream", *options,
    )  # fmt: skip


def _one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("prompt-registry:")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_stream_prints_the_answer_then_the_trace_and_the_outcome(tmp_path: Path) -> None:
    result = _run_gated(_script(tmp_path, ANSWER, '{"allow": true}'))
    assert result.returncode == 0, result.stderr
    answer, rest = result.stdout.split("\n\n", 1)
    assert answer == ANSWER
    assert rest.startswith("run support/gated_answer")
    assert "└─ gate gate" in rest and "outcome: completed · support/gated_answer @ v1.1.0" in rest
    assert ANSWER not in rest.split("outcome: completed", 1)[1]  # printed once, as it came


def test_stream_as_jsonl_prints_one_typed_event_a_line_the_outcome_last(tmp_path: Path) -> None:
    result = _run_gated(_script(tmp_path, ANSWER, '{"allow": true}'), "--format", "jsonl")
    assert result.returncode == 0, result.stderr
    events: list[dict[str, Any]] = [json.loads(line) for line in result.stdout.splitlines()]
    assert all(isinstance(event.get("type"), str) for event in events)
    text = [event for event in events if event["type"] == "text"]
    assert "".join(event["text"] for event in text) == ANSWER and len(text) > 1
    gate = next(index for index, event in enumerate(events) if event["type"] == "gate")
    assert gate < events.index(text[0])
    assert events[-1]["type"] == "outcome" and events[-1]["outcome"] == "completed"
    assert events[-1]["output"] == ANSWER


def test_a_blocked_stream_prints_the_on_block_text_and_exits_1(tmp_path: Path) -> None:
    script = _script(tmp_path, "the password is hunter2", '{"allow": false, "reason": "a secret"}')
    result = _run_gated(script, "--format", "jsonl")
    assert result.returncode == 1
    events = [json.loads(line) for line in result.stdout.splitlines()]
    text = "".join(event["text"] for event in events if event["type"] == "text")
    assert text == events[-1]["output"] and "hunter2" not in text
    assert events[-1]["outcome"] == "blocked"


def test_the_answer_is_printed_as_it_arrives(tmp_path: Path) -> None:
    # Ten pieces, 0.3 s apart: a text line read while the command still runs was flushed as it came.
    script = _script(tmp_path, " ".join(["word"] * 10), '{"allow": true}', stream_delay=0.3)
    command = [
        CLI, "run", "support/gated_answer", "--example", "--input", "question=q",
        "--model", f"scripted:{script}", "--stream", "--format", "jsonl",
    ]  # fmt: skip
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=clean_environment()) as process:
        assert process.stdout is not None
        first_text = next(line for line in process.stdout if json.loads(line)["type"] == "text")
        still_running = process.poll() is None
        rest = process.stdout.read()
    assert json.loads(first_text)["text"] == "word "
    assert still_running
    assert json.loads(rest.splitlines()[-1])["outcome"] == "completed"


def test_stream_with_format_json_or_jsonl_without_stream_is_a_usage_error(tmp_path: Path) -> None:
    script = _script(tmp_path, ANSWER, '{"allow": true}')
    result = _run_gated(script, "--format", "json")
    assert result.returncode == 2
    assert "--stream prints the run as it happens: use --format text or jsonl" in _one_line_error(result)
    result = run(
        "run", "support/gated_answer", "--example", "--input", "question=q", "--model", f"scripted:{script}",
        "--format", "jsonl",
    )  # fmt: skip
    assert result.returncode == 2
    assert "--format jsonl prints the events of a streamed run: add --stream" in _one_line_error(result)


def test_an_agent_that_does_not_exist_is_one_line_and_exit_1(tmp_path: Path) -> None:
    script = _script(tmp_path, ANSWER, '{"allow": true}')
    result = run("run", "support/nowhere", "--example", "--model", f"scripted:{script}", "--stream")
    assert result.returncode == 1 and result.stdout == ""
    assert "support/nowhere" in _one_line_error(result)
