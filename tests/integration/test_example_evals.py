"""The example library's evaluations (``library/ai_gateway/evals``), as the
README shows them: v1.0.0 against v1.1.0, replayed from the committed
``library/replays/example.yml`` with no model, and that file kept exactly
what the scripted replies of ``library/replies/evals.yml`` record."""

from __future__ import annotations

import difflib
import json
import re
import shlex
from pathlib import Path

from tests.support.cli import run
from tests.support.servers import REPOSITORY

README = REPOSITORY / "README.md"
REPLAY = REPOSITORY / "library" / "replays" / "example.yml"
SCRIPT = REPOSITORY / "library" / "replies" / "evals.yml"
SIDES = ("--example", "--base", "v1.0.0", "--head", "v1.1.0")
REGENERATE = (
    "prompt-registry eval --example --base v1.0.0 --head v1.1.0"
    " --model scripted:library/replies/evals.yml --record library/replays/example.yml"
)


def test_the_committed_replay_file_is_what_the_scripted_replies_record(tmp_path: Path) -> None:
    recorded = tmp_path / "example.yml"
    result = run("eval", *SIDES, "--model", f"scripted:{SCRIPT}", "--record", str(recorded), cwd=REPOSITORY)
    assert result.returncode == 1, result.stderr  # the regression planted in v1.1.0 trips the gate
    fresh, committed = recorded.read_text(encoding="utf-8"), REPLAY.read_text(encoding="utf-8")
    difference = difflib.unified_diff(
        committed.splitlines(), fresh.splitlines(), "committed", "recorded now", lineterm="", n=1
    )
    assert fresh == committed, (
        "library/replays/example.yml no longer holds what the example's eval cases ask the model (a prompt,"
        f" an eval file or library/replies/evals.yml changed). Record it again, from the repository's root:\n"
        f"    {REGENERATE}\nThe first differences:\n" + "\n".join(list(difference)[:40])
    )


def test_the_replayed_example_fixes_three_cases_and_regresses_two(tmp_path: Path) -> None:
    # From elsewhere than the checkout: the replay file and the example's own tools are all it needs.
    result = run("eval", *SIDES, "--replay", str(REPLAY), "--format", "json", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert (report["base"]["tag"], report["head"]["tag"]) == ("v1.0.0", "v1.1.0")
    flipped = {
        (dataset["agent"], case["id"]): case["change"]
        for dataset in report["datasets"]
        for case in dataset["cases"]
        if case["change"] not in ("unchanged", "added")
    }
    assert flipped == {
        ("support/classify_request", "locked-out-2fa"): "fixed",
        ("support/classify_request", "instructions-in-the-message"): "fixed",
        ("support/routed_answer", "locked-out"): "fixed",
        ("support/draft_answer", "double-charge"): "regressed",
        ("support/gated_answer", "double-charge"): "regressed",
    }
    statuses = {
        (dataset["agent"], case["id"]): case["head"]["status"]
        for dataset in report["datasets"]
        for case in dataset["cases"]
    }
    failed = [case for case, status in statuses.items() if status != "passed"]
    assert failed == [("support/draft_answer", "double-charge"), ("support/gated_answer", "double-charge")]
    assert len(statuses) == 28
    added = {dataset["agent"] for dataset in report["datasets"] if dataset["base"]["eval_file"] is None}
    assert added == {"assistant/docs_rag", "assistant/react_text", "assistant/tools_triage"}
    assert [reason for reason in report["gate"]["reasons"] if "passed on base" in reason] == [
        "support/draft_answer.yml: 1 case passed on base and failed on head: double-charge",
        "support/gated_answer.yml: 1 case passed on base and failed on head: double-charge",
    ]


def _steady(line: str) -> str:
    """A report line without what differs from run to run: how long things took."""
    return re.sub(r"\d+\.\d+ s\b", "", line).rstrip()


def test_the_readme_eval_command_works_as_written_and_prints_what_it_shows() -> None:
    text = README.read_text(encoding="utf-8")
    command = re.search(r"```sh\n(\.venv/bin/prompt-registry eval .*?)```", text, re.DOTALL)
    shown = re.search(r"```text\n(eval base .*?)```", text, re.DOTALL)
    assert command and shown
    words = shlex.split(command.group(1).replace("\\\n", " "))
    result = run(*words[1:], cwd=REPOSITORY)
    assert result.returncode == 1, result.stderr
    printed = [_steady(line) for line in result.stdout.splitlines()]
    # Abridged: each line shown is printed, in that order; "..." stands for lines left out.
    lines = iter(printed)
    for line in shown.group(1).splitlines():
        if line.strip() != "...":
            assert _steady(line) in lines, f"the README shows {line!r}, which eval does not print there"
    assert printed[:2] == [_steady(line) for line in shown.group(1).splitlines()[:2]]
