"""RegistryService over real repositories: resolution, catalogs, isolation."""

from __future__ import annotations

from pathlib import Path

import pytest

from registry.errors import AgentNotFound, InvalidDefinition, InvalidInputs, InvalidRequest, ReleaseNotFound
from registry.serving.service import RegistryService
from registry.store.git import GitStore
from registry.store.worktree import WorktreeStore
from tests.conftest import AGENTS, MINIMAL, LibraryRepo, client_for


def _service(repo: LibraryRepo) -> RegistryService:
    return RegistryService(GitStore(repo.path, root=AGENTS))


def test_every_answer_comes_from_the_resolved_release(released_repo: LibraryRepo) -> None:
    service = _service(released_repo)
    answer = service.get_agent("chat", "minimal", release="2.0.0-rc.1")
    assert answer.resolution.release.tag == "v2.0.0-rc.1"
    assert answer.agent.compiled.definition["prompt_templates"]["system"] == "You are very helpful."
    assert service.get_agent("chat", "minimal").resolution.release.tag == "v1.1.0"


def test_tags_on_one_commit_share_one_catalog_and_one_loaded_agent(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"a/b.yml": MINIMAL})
    repo.tag("v1.0.1")
    service = _service(repo)
    first = service.get_agent("a", "b", release="v1.0.0").agent
    second = service.get_agent("a", "b", release="v1.0.1").agent
    assert first is second


def test_names_are_checked_before_anything_is_read(released_repo: LibraryRepo) -> None:
    service = _service(released_repo)
    with pytest.raises(InvalidRequest):
        service.get_agent("chat", "../etc", release="v9.9.9")


def test_errors_are_the_registrys_own(released_repo: LibraryRepo) -> None:
    service = _service(released_repo)
    with pytest.raises(ReleaseNotFound):
        service.get_agent("chat", "minimal", release="v3.0.0")
    with pytest.raises(AgentNotFound):
        service.get_agent("chat", "missing")
    assert isinstance(AgentNotFound("x"), LookupError)


def test_a_broken_file_is_reported_for_itself_only(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"a/good.yml": MINIMAL, "a/bad.yml": "name: [\n"})
    service = _service(repo)
    with pytest.raises(InvalidDefinition) as caught:
        service.get_agent("a", "bad")
    assert caught.value.errors[0].file == "ai_gateway/agents/a/bad.yml"
    assert service.get_agent("a", "good").agent.title == "Minimal agent"
    assert [(a.name, a.valid) for a in service.list_agents().agents] == [("bad", False), ("good", True)]


def test_a_broken_file_raises_a_fresh_error_each_time(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"a/bad.yml": "name: [\n"})
    service = _service(repo)
    errors = []
    for _ in range(2):
        with pytest.raises(InvalidDefinition) as caught:
            service.get_agent("a", "bad")
        errors.append(caught.value)
    assert errors[0] is not errors[1]
    assert errors[0].errors == errors[1].errors


def test_render_validates_inputs_then_renders(released_repo: LibraryRepo) -> None:
    service = _service(released_repo)
    answer = service.render("chat", "with_rules", {"question": "Q", "rules": ["r"]}, release="v1.1.0")
    assert [m.role for m in answer.prompt.messages] == ["system", "user"]
    assert answer.prompt.messages[1].content == "Q"


# --- errors that can suggest, suggest -----------------------------------------------------------


def _support_repo(repo: LibraryRepo) -> LibraryRepo:
    return repo.release(
        "v1.0.0", {"support/triage.yml": MINIMAL, "support/escalate.yml": MINIMAL, "ops/summarise.yml": MINIMAL}
    )


def test_an_unknown_agent_names_its_release_and_the_closest_agent(repo: LibraryRepo) -> None:
    service = _service(_support_repo(repo))
    with pytest.raises(AgentNotFound) as caught:
        service.get_agent("support", "triag", release="^1")
    assert caught.value.detail == "agent support/triag does not exist in release v1.0.0; did you mean 'support/triage'?"
    assert caught.value.extensions == {"usecase": "support", "name": "triag", "suggestions": ["support/triage"]}
    with pytest.raises(AgentNotFound) as caught:
        service.render("suport", "escalte", {"question": "Q"}, release="v1.0.0")
    assert caught.value.extensions["suggestions"] == ["support/escalate"]


def test_an_unknown_agent_names_the_tag_asked_for_when_tags_share_a_commit(repo: LibraryRepo) -> None:
    _support_repo(repo).tag("v1.0.1")
    service = _service(repo)
    for tag in ("v1.0.0", "v1.0.1"):
        with pytest.raises(AgentNotFound) as caught:
            service.get_agent("support", "triag", release=tag)
        assert f"does not exist in release {tag};" in caught.value.detail


def test_an_agent_of_the_same_name_in_another_usecase_is_suggested(repo: LibraryRepo) -> None:
    service = _service(_support_repo(repo))
    with pytest.raises(AgentNotFound) as caught:
        service.get_agent("chat", "summarise")
    assert caught.value.extensions["suggestions"] == ["ops/summarise"]


def test_an_unknown_agent_with_nothing_close_has_no_suggestions(repo: LibraryRepo) -> None:
    service = _service(_support_repo(repo))
    with pytest.raises(AgentNotFound) as caught:
        service.get_agent("billing", "refund")
    assert caught.value.detail == "agent billing/refund does not exist in release v1.0.0"
    assert caught.value.extensions == {"usecase": "billing", "name": "refund"}


def test_an_unknown_agent_of_a_worktree_is_not_in_the_working_tree(tmp_path: Path) -> None:
    (tmp_path / AGENTS / "support").mkdir(parents=True)
    (tmp_path / AGENTS / "support" / "triage.yml").write_text(MINIMAL)
    service = RegistryService(WorktreeStore(tmp_path, root=AGENTS))
    with pytest.raises(AgentNotFound) as caught:
        service.get_agent("support", "triag")
    assert (
        caught.value.detail == "agent support/triag does not exist in the working tree; did you mean 'support/triage'?"
    )


def test_the_problem_for_an_unknown_agent_carries_its_suggestions(repo: LibraryRepo) -> None:
    client = client_for(_support_repo(repo))
    response = client.get("/v1/agents/support/triag?release=v1.0.0")
    assert response.status_code == 404
    assert response.get_json() == {
        "type": "/problems/agent-not-found",
        "title": "Agent not found",
        "status": 404,
        "detail": "agent support/triag does not exist in release v1.0.0; did you mean 'support/triage'?",
        "usecase": "support",
        "name": "triag",
        "suggestions": ["support/triage"],
    }


def test_a_misspelt_render_input_names_the_declared_one(released_repo: LibraryRepo) -> None:
    service = _service(released_repo)
    with pytest.raises(InvalidInputs) as caught:
        service.render("chat", "with_rules", {"questoin": "Q", "rules": []}, release="v1.1.0")
    messages = {issue.path: issue.message for issue in caught.value.errors}
    assert messages["/questoin"] == "unexpected input 'questoin' (did you mean 'question'?)"


def test_a_tab_in_a_definitions_indentation_is_named_where_it_is(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"a/tabbed.yml": "name: Tabbed\nprompt_templates:\n\tsystem: hi\n"})
    with pytest.raises(InvalidDefinition) as caught:
        _service(repo).get_agent("a", "tabbed")
    (issue,) = caught.value.errors
    assert (issue.message, issue.file, issue.line, issue.column) == (
        "tabs are not allowed in YAML indentation",
        f"{AGENTS}/a/tabbed.yml",
        3,
        1,
    )
    assert str(caught.value) == (
        f"{AGENTS}/a/tabbed.yml:3:1: tabs are not allowed in YAML indentation (a/tabbed at v1.0.0)"
    )


def test_a_commit_id_as_a_release_says_releases_are_never_commits(released_repo: LibraryRepo) -> None:
    client = client_for(released_repo)
    for commit in ("1a2b3c4", released_repo.git("rev-parse", "v1.0.0")):
        body = client.get(f"/v1/agents/chat/minimal?release={commit}").get_json()
        assert (body["status"], body["parameter"]) == (400, "release")
        assert body["detail"].startswith(
            f"release '{commit}' looks like a commit id: releases are version tags, ranges or channels, never commits"
        )


def test_a_render_error_names_the_agent_and_the_tag_a_range_resolved_to(released_repo: LibraryRepo) -> None:
    client = client_for(released_repo)
    problem = client.post("/v1/agents/chat/with_rules/render?release=^1", json={"inputs": {}}).json
    assert problem is not None
    assert problem["type"] == "/problems/invalid-inputs"
    assert (problem["agent"], problem["release"]) == ("chat/with_rules", "v1.1.0")
