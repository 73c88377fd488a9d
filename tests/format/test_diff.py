"""Semantic diff and the breaking-change gate, on crafted release pairs in
real git repositories (the commands that show them:
tests/integration/test_diff_commands.py)."""

from __future__ import annotations

import pytest

from registry.authoring.commands import required_bump
from registry.format.diff import classify
from registry.serving.service import RegistryService
from registry.settings import Settings
from tests.conftest import AGENTS, MINIMAL, LibraryRepo, make_app
from tests.support.diff_repos import RULES_PARTIAL, TYPED, broken_library, first_release


@pytest.fixture
def base_repo(repo: LibraryRepo) -> LibraryRepo:
    return first_release(repo)


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


def test_required_bump() -> None:
    assert required_bump("v1.2.3", "v2.0.0") == "major"
    assert required_bump("v1.2.3", "1.3.0") == "minor"
    assert required_bump("v1.2.3", "v1.2.4") == "patch"
    assert required_bump("v1.2.3", "v1.2.3") == "none"
    assert required_bump("v2.0.0-rc.1", "v2.0.0") == "patch"


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
        for variable, value in {'"$fail_on"': "regression", "$model": "", '"$PROMPT_EVAL_BASE"': "@production"}.items():
            command = command.replace(variable, value)
        argv = [
            a.replace('"$CI_COMMIT_TAG"', "v1.0.0") for a in shlex.split(command.replace("${{", "X").replace("}}", ""))
        ]
        _parser().parse_args(argv[1:])  # SystemExit on an unknown command or flag


# -- issue 15: the release gate refuses invalid definitions, first releases, renamed inputs ------------


def test_a_definition_that_becomes_invalid_is_labelled_so(repo: LibraryRepo) -> None:
    broken_library(repo)
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


def test_diff_text_is_coloured_only_when_asked(base_repo: LibraryRepo) -> None:
    from registry.authoring.commands import diff_text

    base_repo.release("v1.1.0", {"chat/minimal.yml": MINIMAL.replace("helpful", "terse")})
    diff = _service(base_repo).diff("v1.0.0", "v1.1.0")
    plain, coloured = diff_text(diff), diff_text(diff, colour=True)
    assert "\033[" not in plain and plain.endswith("\n2 agents unchanged\n")
    assert "\033[32m+You are terse.\033[0m" in coloured and "\033[31m-You are helpful.\033[0m" in coloured
    assert "\033[1m" in coloured
    assert diff_text(_service(base_repo).diff("v1.0.0", "v1.0.0")).endswith("\n3 agents unchanged\n")


def test_a_changed_tool_choice_is_a_changed_field(repo: LibraryRepo) -> None:
    tools = "type: tool_calling\ntools: [{name: search, description: Searches., parameters: {type: object}}]\n"
    repo.release("v1.0.0", {"chat/caller.yml": MINIMAL + tools})
    repo.release("v1.1.0", {"chat/caller.yml": MINIMAL + tools + "tool_choice: required\n"})
    [changed] = _service(repo).diff("v1.0.0", "v1.1.0").as_dict()["changed"]
    assert changed["fields"] == ["tool_choice"]
