"""The ``lint``, ``new`` and ``render`` commands run as a user runs them (the
installed CLI in a subprocess): exit codes, report files and messages."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.conftest import LibraryRepo
from tests.support.lint_libraries import AGENTS, FAILING, GOOD, write_library
from tests.support.servers import CLI, clean_environment


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], cwd=cwd, env=clean_environment(), capture_output=True, text=True, timeout=120)


def test_the_lint_command(tmp_path: Path) -> None:
    good = write_library(tmp_path / "good", GOOD)
    assert _run("lint", cwd=good).returncode == 0
    bad = write_library(tmp_path / "bad", {**GOOD, **FAILING["yaml-syntax"]})
    result = _run("lint", "--format", "codequality", "-o", "report.json", cwd=bad)
    assert result.returncode == 1 and "1 error" in result.stdout
    assert json.loads((bad / "report.json").read_text())[0]["check_name"] == "yaml-syntax"
    missing = _run("lint", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert missing.returncode == 2 and "not a directory" in missing.stderr and "Traceback" not in missing.stderr
    no_root = _run("lint", cwd=tmp_path)
    assert no_root.returncode == 2 and "--root" in no_root.stderr


def test_new_then_lint_then_render(tmp_path: Path) -> None:
    assert _run("new", "support/triage", cwd=tmp_path).returncode == 0
    written = (tmp_path / AGENTS / "support/triage.yml").read_text()
    assert written.startswith("# yaml-language-server: $schema=../../../schemas/agent-definition.v1.schema.json")
    assert (tmp_path / "schemas/agent-definition.v1.schema.json").exists()
    assert _run("lint", cwd=tmp_path).returncode == 0
    again = _run("new", "support/triage", cwd=tmp_path)
    assert again.returncode == 2 and "already exists" in again.stderr
    assert _run("new", "Bad Name/x", cwd=tmp_path).returncode == 2
    rendered = _run("render", "support/triage", "--input", "question=Is it down?", cwd=tmp_path)
    assert rendered.returncode == 0 and "--- user ---\nIs it down?" in rendered.stdout
    missing = _run("render", "support/triage", cwd=tmp_path)
    assert missing.returncode == 2
    assert missing.stderr == "prompt-registry: missing required input 'question' (support/triage at worktree)\n"


def test_render_a_release_with_an_inputs_file(released_repo: LibraryRepo, tmp_path: Path) -> None:
    inputs = tmp_path / "inputs.yml"
    inputs.write_text("question: Why?\nrules: [Be kind]\n")
    result = _run(
        "render",
        "chat/with_rules",
        "--release",
        "v1.1.0",
        "--inputs-file",
        str(inputs),
        "--format",
        "json",
        cwd=released_repo.path,
    )
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    assert body["release"]["tag"] == "v1.1.0"
    assert body["messages"][0]["content"].endswith("- Be kind\n")
    absent = _run("render", "chat/with_rules", "--release", "v9.0.0", cwd=released_repo.path)
    assert absent.returncode == 1 and "v9.0.0" in absent.stderr


def test_render_says_which_placeholders_it_leaves_and_lint_which_nothing_fills(tmp_path: Path) -> None:
    seed = (
        "name: Seed\nprompt_templates:\n  assistant: '{agent_scratchpad}'\n  user: |\n    Question: {question}\n"
        "    Topic: {topic}\ninputs: {type: object, properties: {question: {type: string}}}\n"
    )
    library = write_library(tmp_path, {"chat/seed.yml": seed})
    rendered = _run("render", "chat/seed", "--input", "question=Why?", cwd=library)
    assert rendered.returncode == 0, rendered.stderr
    assert rendered.stdout.splitlines()[1] == (
        "# placeholders left for the agent loop: {agent_scratchpad} (assistant), {topic} (user)"
    )
    assert "--- user ---\nQuestion: Why?\nTopic: {topic}\n" in rendered.stdout
    body = json.loads(_run("render", "chat/seed", "--format", "json", cwd=library).stdout)
    assert [p["name"] for p in body["placeholders"]] == ["agent_scratchpad", "question", "topic"]
    linted = _run("lint", cwd=library)
    assert linted.returncode == 1
    assert (
        f"{AGENTS}/chat/seed.yml:6: error [unfilled-placeholder] user template: placeholder {{topic}} is filled"
        " by no input and no runtime variable\n    hint: declare 'topic' under inputs.properties, or print it,"
        " {{ '{topic}' }}, to keep it as text\n" in linted.stdout
    )
    assert "agent_scratchpad" in linted.stdout  # a vanilla agent's scratchpad: nothing fills it
