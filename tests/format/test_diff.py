"""Semantic diff and the breaking-change gate, on crafted release pairs in
real git repositories."""

from __future__ import annotations

import json
import subprocess

import pytest

from registry.authoring.commands import required_bump
from registry.format.diff import classify
from registry.serving.service import RegistryService
from registry.settings import Settings
from tests.conftest import AGENTS, MINIMAL, LibraryRepo, make_app
from tests.support.servers import CLI, clean_environment

RULES_PARTIAL = "Rules:\n{% for rule in rules %}- {{ rule }}\n{% endfor %}"
TYPED = """\
name: Typed
prompt_templates:
  user: "{{ question }}{% if limit is defined %} ({{ limit }}){% endif %}{% if tone is defined %} {{ tone }}{% endif %}"
inputs:
  type: object
  required: [question]
  properties:
    question: {type: string}
    limit: {type: number}
    tone: {type: string, enum: [plain, warm]}
examples:
  - name: basic
    inputs: {question: "Why?", limit: 3}
"""


def _service(repo: LibraryRepo) -> RegistryService:
    app = make_app(Settings(repo=str(repo.path)))
    service: RegistryService = app.extensions["prompt_registry.service"]
    return service


# Each pair: what changes between v1.0.0 and v1.1.0, and the bump it requires.
PAIRS: dict[str, tuple[dict[str, str | None], str, str]] = {
    "agent removed": ({"chat/typed.yml": None}, "major", "the agent was removed"),
    "input removed": (
        {
            "chat/typed.yml": TYPED.replace("    tone: {type: string, enum: [plain, warm]}\n", "").replace(
                "{% if tone is defined %} {{ tone }}{% endif %}", ""
            )
        },
        "major",
        "input 'tone' was removed or renamed",
    ),
    "required input added": (
        {
            "chat/typed.yml": TYPED.replace("required: [question]", "required: [question, audience]")
            .replace("    question: {type: string}\n", "    question: {type: string}\n    audience: {type: string}\n")
            .replace('"{{ question }}', '"{{ audience }} {{ question }}')
            .replace('inputs: {question: "Why?", limit: 3}', 'inputs: {question: "Why?", limit: 3, audience: devs}')
        },
        "major",
        "required input 'audience' was added",
    ),
    "type narrowed": (
        {"chat/typed.yml": TYPED.replace("limit: {type: number}", "limit: {type: integer}")},
        "major",
        "input 'limit' was narrowed (type ['integer', 'number'] became ['integer'])",
    ),
    "enum narrowed": (
        {"chat/typed.yml": TYPED.replace("enum: [plain, warm]", "enum: [plain]")},
        "major",
        "input 'tone' was narrowed (its allowed values were reduced)",
    ),
    "agent added": ({"chat/other.yml": MINIMAL}, "minor", "the agent was added"),
    "optional input added": (
        {
            "chat/typed.yml": TYPED.replace(
                "    question: {type: string}\n", "    question: {type: string}\n    extra: {type: string}\n"
            ).replace('"{{ question }}', "\"{{ question }}{{ extra | default('') }}")
        },
        "minor",
        "optional input 'extra' was added",
    ),
    "type widened": (
        {"chat/typed.yml": TYPED.replace("limit: {type: number}", "limit: {type: [number, string]}")},
        "patch",
        "its content changed (inputs)",
    ),
    "wording": (
        {"chat/minimal.yml": MINIMAL.replace("helpful", "kind")},
        "patch",
        "its content changed (system template)",
    ),
    "partial only": (
        {"_partials/rules.jinja": RULES_PARTIAL.replace("Rules", "RULES")},
        "patch",
        "its content changed (partial _partials/rules.jinja)",
    ),
    "nothing": ({}, "none", ""),
}


@pytest.fixture
def base_repo(repo: LibraryRepo) -> LibraryRepo:
    repo.write("chat/minimal.yml", MINIMAL)
    repo.write("chat/typed.yml", TYPED)
    repo.write(
        "chat/ruled.yml", "name: Ruled\nprompt_templates:\n  system: \"{% include '_partials/rules.jinja' %}\"\n"
    )
    repo.write("_partials/rules.jinja", RULES_PARTIAL)
    repo.commit("base")
    repo.tag("v1.0.0")
    return repo


@pytest.mark.parametrize("case", sorted(PAIRS))
def test_each_classification(base_repo: LibraryRepo, case: str) -> None:
    files, expected, why = PAIRS[case]
    for relative, content in files.items():
        if content is None:
            base_repo.remove(relative)
        else:
            base_repo.write(relative, content)
    base_repo.git("add", "-A")
    base_repo.git("commit", "-q", "--allow-empty", "-m", case)
    base_repo.tag("v1.1.0")
    bump, reasons = classify(_service(base_repo).diff("v1.0.0", "v1.1.0"))
    assert bump == expected
    if why:
        assert why in [r.why for r in reasons if r.bump == expected], reasons


def test_a_changed_agent_shows_fields_templates_partials_and_examples(base_repo: LibraryRepo) -> None:
    base_repo.write(
        "chat/typed.yml",
        TYPED.replace('"{{ question }}', '"Q: {{ question }}').replace("name: Typed", "name: Typed v2"),
    )
    base_repo.write("_partials/rules.jinja", RULES_PARTIAL.replace("- ", "* "))
    base_repo.write("chat/new.yml", MINIMAL)
    base_repo.remove("chat/minimal.yml")
    base_repo.commit("v1.1.0")
    base_repo.tag("v1.1.0")
    body = _service(base_repo).diff("v1.0.0", "^1.1").as_dict()
    assert body["added"] == ["chat/new"] and body["removed"] == ["chat/minimal"]
    changed = {c["name"]: c for c in body["changed"]}
    assert set(changed) == {"typed", "ruled"}
    typed = changed["typed"]
    assert typed["fields"] == ["name"]
    assert f"--- a/{AGENTS}/chat/typed.yml#user" in typed["templates"]["user"]
    assert "+--- user ---\n" not in typed["examples"]["basic"] and "+Q: Why? (3)" in typed["examples"]["basic"]
    assert "-{% for rule in rules %}- {{ rule }}" in changed["ruled"]["partials"]["_partials/rules.jinja"]
    assert body["unchanged"] == 0


def test_get_v1_diff(base_repo: LibraryRepo) -> None:
    base_repo.release("v1.1.0", {"chat/other.yml": MINIMAL})
    client = make_app(Settings(repo=str(base_repo.path))).test_client()
    response = client.get("/v1/diff?from=v1.0.0&to=v1.1.0")
    assert response.json is not None
    assert response.status_code == 200 and response.json["added"] == ["chat/other"]
    assert response.headers["Cache-Control"].endswith("immutable")
    for query, status, slug in [
        ("from=v1.0.0", 400, "invalid-request"),
        ("from=v1.0.0&to=main", 400, "invalid-request"),  # branches are for the CLI only
        ("from=v1.0.0&to=v9.0.0", 404, "release-not-found"),
        ("from=v1.0.0&from=v1.1.0&to=v1.1.0", 400, "invalid-request"),
    ]:
        problem = client.get(f"/v1/diff?{query}")
        assert problem.json is not None
        assert (problem.status_code, problem.json["type"]) == (status, f"/problems/{slug}"), query


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


def test_required_bump() -> None:
    assert required_bump("v1.2.3", "v2.0.0") == "major"
    assert required_bump("v1.2.3", "1.3.0") == "minor"
    assert required_bump("v1.2.3", "v1.2.4") == "patch"
    assert required_bump("v1.2.3", "v1.2.3") == "none"
    assert required_bump("v2.0.0-rc.1", "v2.0.0") == "patch"


def test_check_release_in_a_tag_pipeline_compares_with_the_release_before(base_repo: LibraryRepo) -> None:
    base_repo.release("v1.1.0", {"chat/other.yml": MINIMAL})  # the pipeline's tag exists already
    assert _cli(base_repo, "check-release", "v1.1.0", "--ref", "v1.1.0").returncode == 0
    base_repo.remove("chat/typed.yml")
    base_repo.commit("remove typed")
    base_repo.tag("v1.1.1")
    gate = _cli(base_repo, "check-release", "v1.1.1", "--ref", "v1.1.1")
    assert gate.returncode == 1 and "v1.1.0 -> v1.1.1" in gate.stdout


def test_the_ci_templates_call_real_commands() -> None:
    import shlex
    from pathlib import Path

    import yaml

    from registry.cli.main import _parser

    root = Path(__file__).resolve().parents[2]
    commands = []
    for name in ("docs/ci/gitlab-ci.yml", "docs/ci/github-workflow.yml", ".pre-commit-hooks.yaml"):
        text = (root / name).read_text()
        yaml.safe_load(text)
        for line in text.splitlines():
            line = line.strip().removeprefix("- ").removeprefix("run: ").removeprefix("entry: ")
            if line.startswith("prompt-registry "):
                commands.append(line.split(" || ")[0].split(" | ")[0].split(" > ")[0].split(" >> ")[0])
    assert len(commands) >= 10
    for command in commands:
        argv = [
            a.replace('"$CI_COMMIT_TAG"', "v1.0.0") for a in shlex.split(command.replace("${{", "X").replace("}}", ""))
        ]
        _parser().parse_args(argv[1:])  # SystemExit on an unknown command or flag


# -- issue 15: the release gate refuses invalid definitions, first releases, renamed inputs ------------


def _broken_library(repo: LibraryRepo) -> LibraryRepo:
    """v2.0.0 valid; then a misspelt key, an undeclared variable and a tab-indented file, committed."""
    typed_without_examples = TYPED.split("examples:")[0]
    repo.write("chat/misspelt.yml", MINIMAL)
    repo.write("chat/undeclared.yml", typed_without_examples)
    repo.write("chat/tabbed.yml", MINIMAL)
    repo.write("chat/fine.yml", MINIMAL)
    repo.commit("valid")
    repo.tag("v2.0.0")
    repo.write("chat/misspelt.yml", MINIMAL.replace("prompt_templates:", "prompt_templatse:"))
    repo.write("chat/undeclared.yml", typed_without_examples.replace("{{ question }}", "{{ questoin }}"))
    repo.write("chat/tabbed.yml", "name: Tabbed\nprompt_templates:\n\tsystem: hi\n")
    repo.commit("broken")
    return repo


def test_check_release_refuses_invalid_definitions_naming_each_with_its_errors(repo: LibraryRepo) -> None:
    _broken_library(repo)
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


def test_a_definition_that_becomes_invalid_is_labelled_so(repo: LibraryRepo) -> None:
    _broken_library(repo)
    repo.tag("v2.1.0")
    bump, reasons = classify(_service(repo).diff("v2.0.0", "v2.1.0"))
    assert bump == "major"
    assert {(r.agent, r.why) for r in reasons} == {
        (f"chat/{name}", "it became invalid, so the registry will not serve it")
        for name in ("misspelt", "undeclared", "tabbed")
    }
    repo.write("chat/misspelt.yml", MINIMAL)
    repo.commit("fixed")
    repo.tag("v2.2.0")
    _, reasons = classify(_service(repo).diff("v2.1.0", "v2.2.0"))
    assert [(r.bump, r.agent, r.why) for r in reasons] == [("minor", "chat/misspelt", "it became valid")]


def test_each_change_label_names_what_changed(base_repo: LibraryRepo) -> None:
    base_repo.write("_partials/rules.jinja", RULES_PARTIAL.replace("Rules", "RULES"))
    base_repo.write("chat/typed.yml", TYPED.replace("limit: 3}", "limit: 4}"))
    base_repo.write("chat/minimal.yml", "# a comment\n" + MINIMAL)
    base_repo.commit("several")
    base_repo.tag("v1.0.1")
    _, reasons = classify(_service(base_repo).diff("v1.0.0", "v1.0.1"))
    assert [(r.agent, r.why) for r in reasons] == [
        ("chat/minimal", "its file changed (comments or formatting only)"),
        ("chat/ruled", "its content changed (partial _partials/rules.jinja)"),
        ("chat/typed", "its content changed (examples)"),
    ]


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


def test_examples_render_each_side_with_the_inputs_of_its_own_version(base_repo: LibraryRepo) -> None:
    renamed = (
        TYPED.replace("required: [question]", "required: [query]")
        .replace("    question: {type: string}", "    query: {type: string}")
        .replace('"{{ question }}', '"Q: {{ query }}')
        .replace('inputs: {question: "Why?"', 'inputs: {query: "Why?"')
    )
    base_repo.release("v2.0.0", {"chat/typed.yml": renamed})
    typed = next(c for c in _service(base_repo).diff("v1.0.0", "v2.0.0").changes if c.name == "typed")
    example = typed.examples["basic"]
    assert "does not render" not in example
    assert "-Why? (3)\n+Q: Why? (3)\n" in example


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


def test_diff_text_is_coloured_only_when_asked(base_repo: LibraryRepo) -> None:
    from registry.authoring.commands import diff_text

    base_repo.release("v1.1.0", {"chat/minimal.yml": MINIMAL.replace("helpful", "terse")})
    diff = _service(base_repo).diff("v1.0.0", "v1.1.0")
    plain, coloured = diff_text(diff), diff_text(diff, colour=True)
    assert "\033[" not in plain and plain.endswith("\n2 agents unchanged\n")
    assert "\033[32m+You are terse.\033[0m" in coloured and "\033[31m-You are helpful.\033[0m" in coloured
    assert "\033[1m" in coloured
    assert diff_text(_service(base_repo).diff("v1.0.0", "v1.0.0")).endswith("\n3 agents unchanged\n")


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
