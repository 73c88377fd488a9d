"""The evaluation jobs of ``docs/ci/`` run as CI runs them: the GitLab job's
script and the GitHub step's ``run`` script, in bash with ``-e``, in a real
library repository whose ``production`` channel is v1.0.0 while the merge
request's files are v1.1.0 (tests/support/eval_library.py: a prompt change
regresses a case). With no model key they replay the exchanges committed in
the merge request; the note goes to a real HTTP server standing in for
GitLab's notes API (tests/support/notes_server.py)."""

from __future__ import annotations

import json
import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import BuiltRepos, LibraryRepo
from tests.support.cli import run
from tests.support.eval_library import eval_library, script_yaml
from tests.support.notes_server import notes_server
from tests.support.servers import CLI, REPOSITORY, clean_environment

REPLAY = "ai_gateway/evals/_replays/merge-request.yml"


def gitlab_script() -> str:
    job = yaml.safe_load((REPOSITORY / "docs/ci/gitlab-ci.yml").read_text(encoding="utf-8"))["prompt-eval"]
    assert job["variables"]["PROMPT_EVAL_REPLAY"] == REPLAY
    return "\n".join(job["script"])


def github_step() -> dict[str, Any]:
    workflow = yaml.safe_load((REPOSITORY / "docs/ci/github-workflow.yml").read_text(encoding="utf-8"))
    step: dict[str, Any] = next(s for s in workflow["jobs"]["eval"]["steps"] if s.get("id") == "eval")
    assert "${{" not in step["run"]  # every expression goes through env, so this is the whole script
    return step


@pytest.fixture
def merge_request(repo: LibraryRepo, built_repos: BuiltRepos) -> LibraryRepo:
    """v1.1.0's files in the working tree, production at v1.0.0, and the
    exchanges of the change recorded (as an author does before pushing)."""
    return built_repos.copy(recorded_merge_request, repo)


def recorded_merge_request(repo: LibraryRepo) -> LibraryRepo:
    eval_library(repo)
    repo.write("channels.yml", "production: v1.0.0\n", under_agents=False)
    repo.commit("channels")
    script = repo.path.parent / "replies.yml"
    script.write_text(script_yaml(), encoding="utf-8")
    recorded = run(
        "eval", "--changed", "--base", "@production", "--head", "worktree",
        "--model", f"scripted:{script}", "--record", REPLAY, cwd=repo.path,
    )  # fmt: skip
    assert recorded.returncode == 1, recorded.stderr
    return repo


def ci_shell(script: str, cwd: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    environment = {
        k: v for k, v in clean_environment().items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "PROMPT_EVAL_"))
    }
    environment["PATH"] = f"{Path(CLI).parent}{os.pathsep}{environment['PATH']}"
    return subprocess.run(
        ["bash", "-e", "-c", script], cwd=cwd, env={**environment, **variables},
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip


def gitlab_variables(port: int, **more: str) -> dict[str, str]:
    return {
        "PROMPT_EVAL_BASE": "@production",
        "PROMPT_EVAL_REPLAY": REPLAY,
        "CI_API_V4_URL": f"http://127.0.0.1:{port}/api/v4",
        "CI_PROJECT_ID": "7",
        "CI_MERGE_REQUEST_IID": "3",
        "CI_MERGE_REQUEST_LABELS": "prompts,needs-review",
        "PROMPT_EVAL_NOTE_TOKEN": "glpat-note-token",
        **more,
    }


def test_the_gitlab_job_replays_the_change_posts_the_note_and_fails_on_the_regression(
    merge_request: LibraryRepo, tmp_path: Path
) -> None:
    with notes_server(tmp_path) as server:
        job = ci_shell(gitlab_script(), merge_request.path, **gitlab_variables(server.port))
        posted = server.entries()
    assert job.returncode == 1, job.stderr
    [note] = posted
    assert note["path"] == "/api/v4/projects/7/merge_requests/3/notes" and note["token"] == "glpat-note-token"
    body = note["body"]["body"][0]
    assert body == (merge_request.path / "prompt-eval.md").read_text(encoding="utf-8")
    assert body.startswith("## prompt-registry eval: ❌ gate failed")
    assert "production" in body and "support/triage" in body and "support/greeter" not in body  # --changed
    suites = ET.parse(merge_request.path / "prompt-eval.xml").getroot()
    assert {suite.get("name") for suite in suites} == {"support/triage", "support/faq"}
    assert (merge_request.path / "prompt-eval.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_the_skip_label_keeps_the_reports_and_says_the_gate_was_skipped(
    merge_request: LibraryRepo, tmp_path: Path
) -> None:
    with notes_server(tmp_path) as server:
        variables = gitlab_variables(server.port, CI_MERGE_REQUEST_LABELS="prompts,prompt-eval::skip")
        job = ci_shell(gitlab_script(), merge_request.path, **variables)
        [note] = server.entries()
    assert job.returncode == 0, job.stderr
    assert note["body"]["body"][0].startswith("> **The gate was skipped** for this merge request")
    assert "regressed" in note["body"]["body"][0].lower()


def test_a_refused_note_is_said_and_the_job_still_ends_as_the_gate_says(
    merge_request: LibraryRepo, tmp_path: Path
) -> None:
    with notes_server(tmp_path, [{"status": 401, "repeat": True}]) as server:
        job = ci_shell(gitlab_script(), merge_request.path, **gitlab_variables(server.port))
    assert job.returncode == 1
    assert "the note could not be posted; the report is in the job's artifacts" in job.stdout


def test_without_a_token_no_note_is_posted(merge_request: LibraryRepo, tmp_path: Path) -> None:
    with notes_server(tmp_path) as server:
        job = ci_shell(gitlab_script(), merge_request.path, **gitlab_variables(server.port, PROMPT_EVAL_NOTE_TOKEN=""))
        assert server.entries() == []
    assert job.returncode == 1 and (merge_request.path / "prompt-eval.md").exists()


def test_a_prompt_edited_after_recording_makes_its_cases_errors_named_in_the_note(
    merge_request: LibraryRepo, tmp_path: Path
) -> None:
    greeter = (merge_request.path / "ai_gateway/agents/support/greeter.yml").read_text(encoding="utf-8")
    merge_request.write("support/faq.yml", greeter)
    with notes_server(tmp_path) as server:
        job = ci_shell(gitlab_script(), merge_request.path, **gitlab_variables(server.port))
        [note] = server.entries()
    assert job.returncode == 1 and "Traceback" not in job.stderr
    body = note["body"]["body"][0]
    assert "has no recorded reply for case 'head:support/faq:hours#1'" in body


def test_the_github_step_writes_the_summary_and_hands_the_gate_to_the_last_step(
    merge_request: LibraryRepo, tmp_path: Path
) -> None:
    step = github_step()
    summary, output = tmp_path / "summary.md", tmp_path / "output"
    variables = {**step["env"], "PROMPT_EVAL_SKIP_GATE": "false"}
    variables = {k: v for k, v in variables.items() if not k.endswith("_API_KEY")}
    job = ci_shell(
        step["run"], merge_request.path, **variables, GITHUB_STEP_SUMMARY=str(summary), GITHUB_OUTPUT=str(output)
    )
    assert job.returncode == 0, job.stderr  # the last step fails the job, after the comment and the artifacts
    assert output.read_text(encoding="utf-8") == "status=1\n"
    assert summary.read_text(encoding="utf-8").startswith("## prompt-registry eval: ❌ gate failed")
    skipped = ci_shell(
        step["run"], merge_request.path, **{**variables, "PROMPT_EVAL_SKIP_GATE": "true"},
        GITHUB_STEP_SUMMARY=str(summary), GITHUB_OUTPUT=str(output),
    )  # fmt: skip
    assert skipped.returncode == 0 and output.read_text(encoding="utf-8").endswith("status=0\n")


def test_the_templates_evaluate_against_production_with_every_report() -> None:
    for script in (gitlab_script(), github_step()["run"]):
        [command] = [line.strip() for line in script.splitlines() if line.strip().startswith("prompt-registry eval")]
        for option in ("--changed", '--base "$PROMPT_EVAL_BASE"', "--head worktree", "--fail-on"):
            assert option in command
        reports = sorted(part.split("=")[0] for part in command.split("--report ")[1:])
        assert reports == ["html", "junit", "markdown"]
    assert json.loads(json.dumps(github_step()["env"]))["PROMPT_EVAL_BASE"] == "@production"
