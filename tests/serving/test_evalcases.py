"""EvalCaseReader over real git repositories: an agent's eval file at one
release, read as far as a page needs, kept by blob id. The page that shows
it is tested in tests/serving/ui/test_ui_evals.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from registry.models import Release
from registry.serving.evalcases import COUNTED, MAX_PROBLEMS, SHOWN, EvalCaseReader
from registry.store.git import GitStore
from registry.store.worktree import WorktreeStore
from tests.conftest import AGENTS, MINIMAL, LibraryRepo
from tests.support.eval_library import EVALS
from tests.support.ui_evals import many_cases, ui_eval_library


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GitStore]:
    repo = ui_eval_library(LibraryRepo(tmp_path_factory.mktemp("evals")))
    opened = GitStore(repo.path, root=AGENTS)
    yield opened
    opened.close()


def release(store: GitStore, tag: str) -> Release:
    return next(found for found in store.releases().releases if found.tag == tag)


def test_the_cases_are_those_of_the_release_asked_for(store: GitStore) -> None:
    reader = EvalCaseReader(store)
    before = reader.of_agent(release(store, "v1.0.0"), "support", "triage")
    after = reader.of_agent(release(store, "v1.1.0"), "support", "triage")
    assert [case.id for case in before.cases] == ["refund-simple", "hostile"]
    assert [case.id for case in after.cases] == ["refund-simple", "hostile", "added-in-v1-1"]
    assert before.blob != after.blob and before.path == after.path == f"{EVALS}/support/triage.yml"


def test_a_case_is_listed_with_its_defaults_and_each_assertion_in_its_own_words(store: GitStore) -> None:
    listed = EvalCaseReader(store).of_agent(release(store, "v1.0.0"), "support", "triage")
    first, hostile = listed.cases
    assert listed.description == "Tickets a human labelled <b>by hand</b>."
    assert (first.line, first.tags, first.inputs, first.history, first.repeat) == (
        6,
        ("billing", "smoke"),
        '{"ticket": "I was charged twice"}',
        0,
        1,
    )
    assert [(e.kind, e.description, e.judge) for e in first.expect] == [
        ("outcome", "ends completed", None),  # the defaults' come first
        ("contains", "contains 'refund'", None),
        ("regex", "matches /^(billing|general)$/", None),
        ("judge", "judged by evals/helpfulness, at least 0.7", "evals/helpfulness"),
    ]
    assert (hostile.history, hostile.repeat) == (2, 3)


def test_a_file_unchanged_between_releases_is_read_once(store: GitStore) -> None:
    reader = EvalCaseReader(store)
    before = reader.of_agent(release(store, "v1.0.0"), "support", "broken")
    assert reader.of_agent(release(store, "v1.1.0"), "support", "broken") is before


def test_a_large_file_is_read_no_further_than_counted(store: GitStore) -> None:
    listed = EvalCaseReader(store).of_agent(release(store, "v1.0.0"), "support", "many")
    assert (len(listed.cases), listed.read, listed.complete) == (SHOWN, COUNTED, False)
    assert listed.cases[-1].id == f"case-{SHOWN - 1}"


def test_the_cases_after_those_listed_are_counted(repo: LibraryRepo) -> None:
    repo.write("u/some.yml", MINIMAL)
    repo.write(f"{EVALS}/u/some.yml", many_cases(SHOWN + 70), under_agents=False)
    repo.commit()
    repo.tag("v1.0.0")
    with_store = GitStore(repo.path, root=AGENTS)
    listed = EvalCaseReader(with_store).of_agent(release(with_store, "v1.0.0"), "u", "some")
    with_store.close()
    assert (len(listed.cases), listed.read, listed.more, listed.complete) == (SHOWN, SHOWN + 70, 70, True)


def test_problems_past_those_listed_are_counted(repo: LibraryRepo) -> None:
    repo.write("u/ids.yml", MINIMAL)
    cases = "".join(f"  - inputs: {{n: {n}}}\n" for n in range(MAX_PROBLEMS + 10))
    repo.write(f"{EVALS}/u/ids.yml", "cases:\n" + cases, under_agents=False)
    repo.commit()
    repo.tag("v1.0.0")
    with_store = GitStore(repo.path, root=AGENTS)
    listed = EvalCaseReader(with_store).of_agent(release(with_store, "v1.0.0"), "u", "ids")
    with_store.close()
    assert (listed.cases, len(listed.problems), listed.more_problems) == ((), MAX_PROBLEMS, 10)
    assert (listed.problems[0].file, listed.problems[0].line) == (f"{EVALS}/u/ids.yml", 2)
    assert listed.problems[0].message.startswith("a case needs an id")


def test_an_agent_without_an_eval_file_has_none(store: GitStore) -> None:
    listed = EvalCaseReader(store).of_agent(release(store, "v1.0.0"), "support", "without_any_eval_file")
    assert (listed.found, listed.path, listed.cases) == (False, f"{EVALS}/support/without_any_eval_file.yml", ())


def test_a_working_tree_preview_says_why_it_lists_no_cases(repo: LibraryRepo) -> None:
    repo.write("support/triage.yml", MINIMAL)
    repo.write(f"{EVALS}/support/triage.yml", many_cases(1), under_agents=False)
    worktree = WorktreeStore(repo.path, root=AGENTS)
    (current,) = worktree.releases().releases
    listed = EvalCaseReader(worktree).of_agent(current, "support", "triage")
    assert not listed.found and listed.unavailable and "git repository" in listed.unavailable
