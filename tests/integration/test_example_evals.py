"""The example library's evaluations (``library/ai_gateway/evals``), as the
README shows them: v1.0.0 against v1.1.0, replayed from the committed
``library/replays/example.yml`` with no model, and that file kept exactly
what the scripted replies of ``library/replies/evals.yml`` record."""

from __future__ import annotations

import difflib
import json
from pathlib import Path

from tests.support.cli import run
from tests.support.servers import REPOSITORY

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
