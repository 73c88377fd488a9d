"""The ``test`` command (the installed CLI in a subprocess): golden files
written by --update, and a run that fails when a definition's examples cannot
be checked."""

from __future__ import annotations

import subprocess
from pathlib import Path

from registry.authoring.examples import run_examples
from tests.support.servers import CLI, clean_environment
from tests.support.triage_examples import AGENTS, DEFINITION, triage_library

NOT_SERVED_WHY = (
    "(a definition is <usecase>/<name>.yml, each name 1 to 64 characters of a-z, 0-9, '_' and '-'),"
    " so its examples were not run"
)


def test_the_test_command(tmp_path: Path) -> None:
    base = triage_library(tmp_path, "  - name: login\n    inputs: {ticket: x}\n    golden: true\n")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [CLI, "test", *args], cwd=base, env=clean_environment(), capture_output=True, text=True, timeout=60
        )

    failing = run()
    assert failing.returncode == 1 and "FAILED   support/triage [login]" in failing.stdout
    assert run("--update").returncode == 0
    passing = run()
    assert passing.returncode == 0 and passing.stdout.endswith("1 passed, 0 failed\n")


def _run_cli(base: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, "test", *args], cwd=base, env=clean_environment(), capture_output=True, text=True, timeout=60
    )


def test_a_definition_whose_examples_cannot_be_checked_fails_the_run(tmp_path: Path) -> None:
    base = triage_library(tmp_path, "  - name: login\n    inputs: {ticket: x}\n")
    other = base / AGENTS / "support" / "other.yml"
    other.write_text(DEFINITION.replace("prompt_templates:", "prompt_templatse:") + "  - name: a\n    inputs: {}\n")
    outside = base / AGENTS / "support" / "Capital.yml"  # a name the registry does not serve
    outside.write_text(DEFINITION + "  - name: a\n    inputs: {ticket: x}\n")
    report = run_examples(base)
    assert [(r.agent, r.example, r.passed) for r in report.results if r.example] == [("support/triage", "login", True)]
    assert [(r.file, r.problems[:2]) for r in report.not_run] == [
        (
            f"{AGENTS}/support/other.yml",
            [
                "the definition is invalid, so its examples were not run",
                f"{AGENTS}/support/other.yml:1:1: missing required key 'prompt_templates'",
            ],
        ),
        (f"{AGENTS}/support/Capital.yml", [f"the registry does not serve this file {NOT_SERVED_WHY}"]),
    ]
    assert report.failed == report.not_run
    run = _run_cli(base)
    assert run.returncode == 1
    assert f"NOT RUN  {AGENTS}/support/other.yml: the definition is invalid, so its examples were not run" in run.stdout
    assert f"    {AGENTS}/support/other.yml:2:1: unknown key 'prompt_templatse'" in run.stdout
    assert f"NOT RUN  {AGENTS}/support/Capital.yml: the registry does not serve this file (a definition" in run.stdout
    assert run.stdout.endswith("1 passed, 0 failed, 2 definitions not run\n")
