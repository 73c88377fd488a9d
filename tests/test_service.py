"""RegistryService over real repositories: resolution, catalogs, isolation."""

from __future__ import annotations

import pytest

from registry.errors import AgentNotFound, InvalidDefinition, InvalidRequest, ReleaseNotFound
from registry.gitstore import GitStore
from registry.service import RegistryService
from tests.conftest import AGENTS, MINIMAL, LibraryRepo


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
