"""``prompt-registry eval`` as a user runs it: the installed command, in a
subprocess, on a real git repository with two releases, answered by the
scripted model or by the scripted OpenAI-compatible server (a real HTTP
server, through the official SDK)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import BuiltRepos, LibraryRepo
from tests.support.cli import run
from tests.support.eval_library import EVALS, eval_library, many_cases, script_yaml, server_script
from tests.support.openai_server import ScriptedModelServer


@pytest.fixture
def library(repo: LibraryRepo, built_repos: BuiltRepos) -> LibraryRepo:
    return built_repos.copy(eval_library, repo)


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "replies.yml"
    path.write_text(script_yaml(), encoding="utf-8")
    return path


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("prompt-registry")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def untimed(report: str) -> list[str]:
    """The lines of a text report but for the model and those that say how long runs took."""
    lines = report.splitlines()
    return [lines[0]] + [line for line in lines[2:] if " s/run" not in line]


def eval_command(library: LibraryRepo, *args: str) -> subprocess.CompletedProcess[str]:
    return run("eval", "--repo", str(library.path), *args)


def test_a_prompt_change_that_flips_a_case_fails_the_gate(library: LibraryRepo, script: Path) -> None:
    result = eval_command(library, "--base", "v1.0.0", "--head", "v1.1.0", "--model", f"scripted:{script}")
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    base, head = library.git("rev-parse", "v1.0.0")[:12], library.git("rev-parse", "v1.1.0")[:12]
    assert lines[0] == f"eval base v1.0.0 ({base}) → head v1.1.0 ({head})"
    assert "  cases 2/2 passed → 1/2 passed (1 regressed) · pass rate 100% → 50%" in lines
    assert "  ✗ regressed  refund  ai_gateway/evals/support/triage.yml:3:5" in lines
    assert "        output: general" in lines
    assert lines[-3:] == [
        "gate failed (--fail-on regression):",
        "  support/triage.yml: 1 case passed on base and failed on head: refund",
        "  support/triage.yml: the pass rate fell from 100% to 50%, more than the tolerance of 0%",
    ]
    never = eval_command(
        library, "--base", "v1.0.0", "--head", "v1.1.0", "--model", f"scripted:{script}", "--fail-on", "never"
    )
    assert never.returncode == 0 and never.stdout.splitlines()[-1] == "gate passed (--fail-on never)"


def test_json_goes_to_a_file_with_tag_commit_and_digest_of_each_side_and_judge(
    library: LibraryRepo, script: Path, tmp_path: Path
) -> None:
    report = tmp_path / "eval.json"
    result = eval_command(
        library, "support/triage", "--base", "v1.0.0", "--head", "v1.1.0", "--model", f"scripted:{script}",
        "--format", "json", "-o", str(report),
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stdout == f"gate failed (--fail-on regression); the report is in {report}\n"
    written = json.loads(report.read_text(encoding="utf-8"))
    assert written["base"]["tag"] == "v1.0.0" and written["base"]["commit"] == library.git("rev-parse", "v1.0.0")
    triage = written["datasets"][0]
    assert triage["base"]["digest"].startswith("sha256:") and triage["base"]["digest"] != triage["head"]["digest"]
    assert triage["head"]["judges"][0]["agent"] == "evals/helpfulness"
    assert triage["head"]["judges"][0]["digest"].startswith("sha256:")
    verdict = triage["cases"][0]["head"]["runs"][0]["assertions"][1]
    assert verdict["judge"]["score"] == 0.9 and verdict["status"] == "passed"


def test_changed_evaluates_only_what_changed_between_the_sides(library: LibraryRepo, script: Path) -> None:
    result = eval_command(library, "--base", "v1.0.0", "--head", "v1.1.0", "--changed", "--model", f"scripted:{script}")
    assert "support/faq  ai_gateway/evals/support/faq.yml  [eval file changed]" in result.stdout
    assert "support/triage  ai_gateway/evals/support/triage.yml  [definition changed]" in result.stdout
    assert "greeter" not in result.stdout


def test_a_model_outage_mid_run_makes_the_rest_errors_and_the_exit_code_says_so(
    library: LibraryRepo, tmp_path: Path
) -> None:
    library.write(f"{EVALS}/support/greeter.yml", many_cases(10), under_agents=False)
    hello: dict[str, object] = {"content": "Hello!"}
    replies = [hello] * 4 + [{"status": 500, "repeat": True}]
    with ScriptedModelServer(replies, tmp_path) as server:
        result = eval_command(
            library, "support/greeter", "--model", server.base_url, "--model-retries", "0", "--concurrency", "1"
        )
    assert result.returncode == 1, result.stderr
    assert "  cases 4/10 passed, 6 errors · pass rate 100%" in result.stdout
    assert "  ! error  c4  ai_gateway/evals/support/greeter.yml:6:5" in result.stdout
    assert "      head: error: the model call for support/greeter failed:" in result.stdout
    assert result.stdout.splitlines()[-1] == (
        "  support/greeter.yml: 6 cases could not be judged on head (error): c4, c5, c6, c7, c8 and 1 more"
    )


def test_no_more_cases_than_the_concurrency_are_in_flight(library: LibraryRepo, tmp_path: Path) -> None:
    library.write(f"{EVALS}/support/greeter.yml", many_cases(12), under_agents=False)
    with ScriptedModelServer(server_script(delay=0.3), tmp_path) as server:
        result = eval_command(library, "support/greeter", "--model", server.base_url, "--concurrency", "3")
        entries = server.entries()
    assert result.returncode == 0, result.stdout + result.stderr
    in_flight, most = 0, 0
    for entry in entries:  # in the order the server saw them: a request, then how its answer ended
        in_flight += 1 if "body" in entry else -1
        most = max(most, in_flight)
    assert sum("body" in entry for entry in entries) == 12
    assert 1 < most <= 3  # the bound holds, and cases did run side by side


def test_an_invalid_definition_in_the_working_tree_is_named_and_nothing_runs_for_it(
    library: LibraryRepo, tmp_path: Path
) -> None:
    library.write("support/triage.yml", "name: Triage\nprompt_templatse: {user: hi}\n")
    with ScriptedModelServer(server_script(), tmp_path) as server:
        result = eval_command(library, "support/triage", "--base", "v1.1.0", "--model", server.base_url)
        requests = server.requests()
    assert result.returncode == 1
    assert requests == []
    problem = (
        "support/triage is not a valid definition in the working tree: ai_gateway/agents/support/triage.yml:1:1:"
        " missing required key 'prompt_templates', and 1 more problem"
    )
    assert f"  nothing ran on head: {problem}" in result.stdout.splitlines()
    assert result.stdout.splitlines()[-1] == f"  support/triage.yml: nothing ran on head: {problem}"


def test_a_recorded_run_replays_with_no_model_and_a_request_not_recorded_names_its_case(
    library: LibraryRepo, script: Path, tmp_path: Path
) -> None:
    recording = tmp_path / "replay.yml"
    sides = ("--base", "v1.0.0", "--head", "v1.1.0")
    recorded = eval_command(
        library, "support/triage", *sides, "--model", f"scripted:{script}", "--record", str(recording)
    )
    assert recorded.returncode == 1
    assert "- case: head:support/triage:refund#1" in recording.read_text(encoding="utf-8")
    replayed = eval_command(library, "support/triage", *sides, "--replay", str(recording))
    assert replayed.returncode == 1
    assert untimed(replayed.stdout) == untimed(recorded.stdout)
    library.write(
        "support/triage.yml",
        (library.path / "ai_gateway/agents/support/triage.yml").read_text().replace("Please", "Kindly"),
    )
    edited = eval_command(library, "support/triage", "--base", "v1.0.0", "--replay", str(recording))
    assert edited.returncode == 1
    assert (
        f"      head: error: the model call for support/triage failed: {recording} has no recorded reply for case"
        in (edited.stdout)
    )
    assert "'head:support/triage:refund#1'" in edited.stdout


def test_a_second_run_with_the_same_cache_asks_the_model_nothing(library: LibraryRepo, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with ScriptedModelServer(server_script(), tmp_path) as server:
        first = eval_command(
            library, "support/faq", "--base", "v1.0.0", "--model", server.base_url, "--cache", str(cache)
        )
        asked = len(server.requests())
        second = eval_command(
            library, "support/faq", "--base", "v1.0.0", "--model", server.base_url, "--cache", str(cache)
        )
        assert len(server.requests()) == asked == 3  # hours on both sides, phone on head
    assert first.returncode == second.returncode == 0
    assert untimed(second.stdout) == untimed(first.stdout)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--concurency", "3"), "unrecognized arguments: --concurency; did you mean '--concurrency'?"),
        (("support/triag",), "support/triag is not an agent of this library; did you mean 'support/triage'?"),
        (("--changed",), "--changed compares two sides: give --base REF too"),
        (("--replay", "r.yml", "--model", "scripted:x.yml"), "--replay answers every call from its file, with no"),
        (("--base", "v9"), "--base v9: no release matches 'v9'"),
        (("--concurrency", "0"), "--concurrency must be from 1 to 256"),
        (("--tolerance", "5"), "--tolerance is a fall in pass rate from 0 to 1"),
        (("--replay", "missing.yml"), "replay file missing.yml does not exist"),
        (("support",), "'support' is not an agent: name one as usecase/name"),
    ],
)
def test_usage_and_configuration_errors_exit_2_in_one_line(
    library: LibraryRepo, script: Path, args: tuple[str, ...], message: str
) -> None:
    model = () if "--model" in args or "--replay" in args else ("--model", f"scripted:{script}")
    result = eval_command(library, *args, *model)
    assert message in one_line_error(result)
