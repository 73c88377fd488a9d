"""The agent page's "Eval cases" section, through Flask's test client over a
real tagged repository (tests/support/ui_evals.py): the cases of the release
the page shows, hostile text as text, a broken file's problems at file:line,
an agent without an eval file, and a dataset far larger than a page reads."""

from __future__ import annotations

from collections.abc import Iterator
from xml.etree.ElementTree import Element

import html5lib
import pytest
from flask.testing import FlaskClient

from registry.serving.app import create_app
from registry.serving.evalcases import COUNTED, SHOWN
from registry.settings import Settings
from tests.conftest import LibraryRepo
from tests.support.eval_library import EVALS
from tests.support.ui_evals import HOSTILE_TICKET, ui_eval_library
from tests.support.ui_pages import page


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FlaskClient]:
    repo = ui_eval_library(LibraryRepo(tmp_path_factory.mktemp("ui-evals")))
    app = create_app(Settings(repo=str(repo.path)))
    yield app.test_client()
    app.extensions["prompt_registry.service"].close()


def section(client: FlaskClient, url: str) -> Element:
    """The page's eval cases section, parsed."""
    document: Element = html5lib.parse(page(client, url), namespaceHTMLElements=False)
    found = document.find(".//section[@id='eval-cases']")
    assert found is not None
    return found


def text(element: Element | None) -> str:
    """Its text, each piece apart, spaces collapsed."""
    assert element is not None
    return " ".join(" ".join(element.itertext()).split())


def rows(found: Element) -> dict[str, list[str]]:
    """Each case's row by case id: its cells' text."""
    return {
        str(row.get("id")).removeprefix("case-"): [text(cell) for cell in row]
        for row in found.iterfind(".//table[@id='eval-case-table']/tbody/tr")
    }


def test_the_cases_are_those_of_the_release_the_page_shows(ui: FlaskClient) -> None:
    before = section(ui, "/ui/agents/support/triage?release=v1.0.0")
    after = section(ui, "/ui/agents/support/triage?release=v1.1.0")
    assert list(rows(before)) == ["refund-simple", "hostile"]
    assert list(rows(after)) == ["refund-simple", "hostile", "added-in-v1-1"]
    assert f"{EVALS}/support/triage.yml at v1.0.0" in text(before.find(".//dl"))
    assert text(before.find(".//*[@id='eval-count']")) == "2 cases."


def test_each_case_shows_its_inputs_history_repeat_and_expectations(ui: FlaskClient) -> None:
    found = section(ui, "/ui/agents/support/triage?release=v1.0.0")
    assert "Dataset Tickets a human labelled <b>by hand</b>." in text(found.find(".//dl"))
    assert rows(found)["refund-simple"][:4] == [
        "refund-simple line 6 A double charge is a billing question. billing smoke",
        '{"ticket": "I was charged twice"}',
        "none",
        "1×",
    ]
    expectations = found.iterfind(".//tr[@id='case-refund-simple']//ul[@class='expectations']/li")
    assert [text(item) for item in expectations] == [
        "ends completed",  # the defaults' first
        "contains 'refund'",
        "matches /^(billing|general)$/",
        "judged by evals/helpfulness, at least 0.7",
    ]
    assert rows(found)["hostile"][2:4] == ["2 turns", "3×"]


def test_a_judge_leads_to_the_judge_agent_of_the_release_the_page_resolved(ui: FlaskClient) -> None:
    found = section(ui, "/ui/agents/support/triage")  # latest, which is v1.1.0
    (judge,) = found.iterfind(".//ul[@class='expectations']/li/a")
    assert (judge.get("href"), text(judge)) == (
        "/ui/agents/evals/helpfulness?release=v1.1.0",
        "judged by evals/helpfulness, at least 0.7",
    )
    page(ui, str(judge.get("href")))


def test_hostile_text_in_a_case_is_shown_as_text(ui: FlaskClient) -> None:
    html = page(ui, "/ui/agents/support/triage?release=v1.0.0")
    assert HOSTILE_TICKET not in html and "<img src=x" not in html
    found = section(ui, "/ui/agents/support/triage?release=v1.0.0")
    assert rows(found)["hostile"][:2] == [
        "hostile line 14 <img src=x onerror=alert(1)>",
        '{"ticket": "<script>alert(\'case\')</script>"}',
    ]
    assert "does not contain '<img src=x onerror=alert(2)>'" in rows(found)["hostile"][4]
    assert found.findall(".//script") == [] and found.findall(".//img") == []


def test_an_eval_file_with_problems_lists_them_at_file_and_line(ui: FlaskClient) -> None:
    found = section(ui, "/ui/agents/support/broken?release=v1.0.0")
    problems = [text(item) for item in found.iterfind(".//*[@id='eval-problems']/ul/li")]
    where = f"{EVALS}/support/broken.yml"
    assert len(problems) == 3
    assert "unknown key 'expected' in a case; did you mean 'expect'?" in problems[0]
    assert problems[0].endswith(f"({where}:4)")
    assert "RE2" in problems[1] and problems[1].endswith(f"({where}:7)")
    assert "a case needs an id" in problems[2] and problems[2].endswith(f"({where}:8)")
    assert list(rows(found)) == ["fine"]  # the one case that can run


def test_an_agent_without_an_eval_file_says_so_and_where_it_would_go(ui: FlaskClient) -> None:
    found = section(ui, "/ui/agents/support/without_any_eval_file?release=v1.0.0")
    assert text(found) == (
        "Eval cases None: v1.0.0 has no eval file for this agent. Its cases would go in"
        f" {EVALS}/support/without_any_eval_file.yml , where prompt-registry lint checks them and prompt-registry eval runs them."
    )


def test_a_dataset_of_100000_cases_lists_its_first_and_reads_no_further(ui: FlaskClient) -> None:
    found = section(ui, "/ui/agents/support/many?release=v1.0.0")
    listed = list(rows(found))
    assert listed == [f"case-{n}" for n in range(SHOWN)]
    assert text(found.find(".//*[@id='eval-count']")).startswith(f"More than {COUNTED:,} cases: the first {SHOWN}")
