"""The ``diff``, ``check-release`` and ``render`` commands, run as a user runs
them (the installed CLI in a subprocess) on crafted releases in real git
repositories, and the CI templates' release gate run by bash."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import AGENTS, MINIMAL, LibraryRepo
from tests.support.diff_repos import TYPED, broken_library, first_release
from tests.support.servers import CLI, clean_environment


@pytest.fixture
def base_repo(repo: LibraryRepo) -> LibraryRepo:
    return first_release(repo)


def _cli(repo: LibraryRepo, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, *args], cwd=repo.path, env=clean_environment(), capture_output=True, text=True, timeout=60
    )


def test_the_diff_command_against_branches_and_the_worktree(base_repo: LibraryRepo) -> None:
    base_repo.write("chat/minimal.yml", MINIMAL.replace("helpful", "terse"))
    text = _cli(base_repo, "diff", "main", "worktree")
    assert text.returncode == 0, text.stderr
    assert "changed: chat/minimal" in text.stdout and "  +You are terse." in text.stdout
    as_json = json.loads(_cli(base_repo, "diff", "v1.0.0", "worktree", "--format", "json").stdout)
    assert [c["name"] for c in as_json["changed"]] == ["minimal"]
    for ref in ("nope", "HEAD~1", "--upload-pack=touch /tmp/x", "../../etc/passwd"):
        missing = _cli(base_repo, "diff", "v1.0.0", ref)
        assert missing.returncode in (1, 2) and "Traceback" not in missing.stderr, (ref, missing.stderr)


def test_the_check_release_command(base_repo: LibraryRepo) -> None:
    base_repo.remove("chat/minimal.yml")
    too_small = _cli(base_repo, "check-release", "v1.1.0")
    assert too_small.returncode == 1
    assert "major  chat/minimal: the agent was removed" in too_small.stdout
    assert "FAILED: v1.1.0 is a minor release, but the changes require a major release" in too_small.stdout
    assert _cli(base_repo, "check-release", "v2.0.0").returncode == 0
    assert _cli(base_repo, "check-release", "v0.9.0").returncode == 1  # not higher
    assert _cli(base_repo, "check-release", "banana").returncode == 2
    # A tag that exists already must keep its content.
    retag = _cli(base_repo, "check-release", "v1.0.0")
    assert retag.returncode == 1 and "tag v1.0.0 already exists with other content" in retag.stdout


def test_check_release_in_a_tag_pipeline_compares_with_the_release_before(base_repo: LibraryRepo) -> None:
    base_repo.release("v1.1.0", {"chat/other.yml": MINIMAL})  # the pipeline's tag exists already
    assert _cli(base_repo, "check-release", "v1.1.0", "--ref", "v1.1.0").returncode == 0
    base_repo.remove("chat/typed.yml")
    base_repo.commit("remove typed")
    base_repo.tag("v1.1.1")
    gate = _cli(base_repo, "check-release", "v1.1.1", "--ref", "v1.1.1")
    assert gate.returncode == 1 and "v1.1.0 -> v1.1.1" in gate.stdout


def test_check_release_refuses_invalid_definitions_naming_each_with_its_errors(repo: LibraryRepo) -> None:
    broken_library(repo)
    for args in (("check-release", "v2.1.0"), ("check-release", "v2.1.0", "--ref", "main")):
        gate = _cli(repo, *args)
        assert gate.returncode == 1, gate.stdout
        assert "\nok\n" not in gate.stdout and "(partials)" not in gate.stdout
        out = gate.stdout
        assert f"  {AGENTS}/chat/misspelt.yml:2:1: unknown key 'prompt_templatse'" in out
        assert f"  {AGENTS}/chat/undeclared.yml:3:" in out and "'questoin', which inputs does not declare" in out
        assert f"  {AGENTS}/chat/tabbed.yml:3:1: " in out
        assert "FAILED: 3 definitions are invalid; the registry would not serve them" in out
        assert "chat/fine" not in out


def test_the_first_release_passes_with_everything_added(repo: LibraryRepo) -> None:
    repo.write("chat/minimal.yml", MINIMAL)
    repo.write("chat/typed.yml", TYPED)
    repo.commit("first")
    untagged = _cli(repo, "check-release", "v0.1.0")
    assert untagged.returncode == 0, untagged.stdout + untagged.stderr
    repo.tag("v0.1.0")
    tagged = _cli(repo, "check-release", "v0.1.0", "--ref", "v0.1.0")  # the tag pipeline of the first tag
    assert tagged.returncode == 0, tagged.stdout + tagged.stderr
    for out in (untagged.stdout, tagged.stdout):
        assert out.startswith("v0.1.0: the first release")
        assert "  minor  chat/minimal: the agent was added\n  minor  chat/typed: the agent was added\nok\n" in out
    # The second tag compares with the first, as before.
    repo.write("chat/other.yml", MINIMAL)
    repo.commit("second")
    repo.tag("v0.2.0")
    second = _cli(repo, "check-release", "v0.2.0", "--ref", "v0.2.0")
    assert second.returncode == 0 and second.stdout.startswith("v0.1.0 -> v0.2.0"), second.stdout


def test_the_ci_templates_pass_on_the_first_tag(repo: LibraryRepo) -> None:
    from pathlib import Path

    repo.write("chat/minimal.yml", MINIMAL)
    repo.commit("first")
    repo.tag("v0.1.0")
    root = Path(__file__).resolve().parents[2]
    for name in ("docs/ci/gitlab-ci.yml", "docs/ci/github-workflow.yml"):
        lines = [line for line in (root / name).read_text().splitlines() if "prompt-registry check-release" in line]
        assert len(lines) == 1, name
        command = lines[0].strip().removeprefix("- ").removeprefix("run: ")
        command = command.replace("${{ github.ref_name }}", "$GITHUB_REF_NAME").replace("prompt-registry", CLI, 1)
        env = {**clean_environment(), "CI_COMMIT_TAG": "v0.1.0", "GITHUB_REF_NAME": "v0.1.0"}
        gate = subprocess.run(
            ["bash", "-c", command], cwd=repo.path, env=env, capture_output=True, text=True, timeout=60
        )
        assert gate.returncode == 0, (name, gate.stdout, gate.stderr)


def test_render_hints_at_quoting_a_value_read_as_json(repo: LibraryRepo) -> None:
    repo.write(
        "chat/texts.yml",
        "name: Texts\nprompt_templates:\n  user: '{{ text }} {{ count }} {{ tags | join(\",\") }}'\n"
        "inputs:\n  type: object\n  properties:\n    text: {type: string}\n    count: {type: integer}\n"
        "    tags: {type: array, items: {type: string}}\n",
    )
    failed = _cli(repo, "render", "chat/texts", "--input", "text=5", "--input", "count=2", "--input", "tags=[1]")
    assert failed.returncode == 2 and "Traceback" not in failed.stderr
    text_line = next(line for line in failed.stderr.splitlines() if line.startswith("  /text:"))
    assert "--input 'text=\"5\"'" in text_line
    assert sum("--input '" in line for line in failed.stderr.splitlines()) == 1  # not for /tags/0, a JSON list
    quoted = _cli(repo, "render", "chat/texts", "--input", 'text="5"', "--input", "count=2", "--input", 'tags=["a"]')
    assert quoted.returncode == 0 and "5 2 a" in quoted.stdout, quoted.stderr


def test_diff_says_a_short_commit_id_needs_to_be_given_in_full(released_repo: LibraryRepo) -> None:
    full = released_repo.git("rev-parse", "v1.0.0^{commit}")
    for short in (full[:7], "1234567"):
        result = _cli(released_repo, "diff", short, "v1.1.0")
        assert result.returncode == 1
        assert result.stderr == (
            f"prompt-registry: {short!r} is not a release, branch or tag; if it is a short commit id, give the"
            f" full 40-character id (git rev-parse {short})\n"
        )
    assert _cli(released_repo, "diff", full, "v1.1.0").returncode == 0
    unmatched = _cli(released_repo, "diff", "^7", "v1.1.0")
    assert unmatched.returncode == 1 and unmatched.stderr == "prompt-registry: no release matches '^7'\n"
