"""``prompt-registry eval --report markdown|junit|html=FILE`` and ``--format
FORMAT -o FILE`` as CI runs it: the installed command, in a subprocess, on a
real git repository with two releases (tests/support/eval_library.py),
answered by the scripted model. The reports of one run (``every_report``)
are what the tests of each report's content read."""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest

from registry.cli.evals import FAIL_ON as FAIL_ON_CHOICES
from registry.cli.evals import FORMATS
from registry.evals import gate
from registry.evals.reports import RENDERERS
from registry.providers.exchangefile import load_exchanges
from tests.conftest import BuiltRepos, LibraryRepo
from tests.support.cli import run
from tests.support.eval_library import REPLIES, eval_library, script_yaml


@pytest.fixture
def library(repo: LibraryRepo, built_repos: BuiltRepos) -> LibraryRepo:
    return built_repos.copy(eval_library, repo)


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "replies.yml"
    path.write_text(script_yaml(), encoding="utf-8")
    return path


@dataclass(frozen=True)
class EveryReport:
    """One run of the command on the library, writing every report: the
    tests of each report's content read what it wrote."""

    library: LibraryRepo
    result: subprocess.CompletedProcess[str]
    record: Path
    note: Path
    junit: Path
    page: Path


@pytest.fixture(scope="module")
def every_report(tmp_path_factory: pytest.TempPathFactory, built_repos: BuiltRepos) -> EveryReport:
    directory = tmp_path_factory.mktemp("every-report")
    library = built_repos.copy(eval_library, LibraryRepo(directory / "library"))
    script = directory / "replies.yml"
    script.write_text(script_yaml(), encoding="utf-8")
    record, note = directory / "exchanges.yml", directory / "note.md"
    junit, page = directory / "eval.xml", directory / "eval.html"
    result = run(
        "eval", "--repo", str(library.path), "--base", "v1.0.0", "--head", "v1.1.0",
        "--model", f"scripted:{script}", "--record", str(record), "--format", "text",
        "--report", f"markdown={note}", "--report", f"junit={junit}", "--report", f"html={page}",
    )  # fmt: skip
    return EveryReport(library, result, record, note, junit, page)


def report(library: LibraryRepo, script: Path, output: Path, report_format: str, *args: str) -> str:
    result = run(
        "eval", "--repo", str(library.path), "--base", "v1.0.0", "--head", "v1.1.0",
        "--model", f"scripted:{script}", "--format", report_format, "-o", str(output), *args,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr  # refund regressed
    assert result.stdout == f"gate failed (--fail-on regression); the report is in {output}\n"
    return output.read_text(encoding="utf-8")


def test_every_report_is_a_format_of_the_command_and_every_gate_a_fail_on() -> None:
    assert set(FORMATS) == set(RENDERERS)
    assert FAIL_ON_CHOICES == gate.FAIL_ON


def test_the_markdown_note_names_both_releases_and_the_regression_first(every_report: EveryReport) -> None:
    note, library = every_report.note.read_text(encoding="utf-8"), every_report.library
    base, head = library.git("rev-parse", "v1.0.0")[:12], library.git("rev-parse", "v1.1.0")[:12]
    assert note.startswith(
        f"## prompt-registry eval: ❌ gate failed\n\n**base** `v1.0.0` at `{base}` → **head** `v1.1.0` at `{head}`"
    )
    assert "| `support/triage` | 2 → 2 | 100% → 50% (▼ 50 points) | 1 | 0 | 0 | 0.90 → 0.90 (+0.00) |" in note
    assert "**`refund`** `ai_gateway/evals/support/triage.yml:3:5`" in note
    assert "| output | `billing` | `general` |" in note
    assert note.endswith("- `support/triage.yml: the pass rate fell from 100% to 50%, more than the tolerance of 0%`\n")


def test_junit_has_a_testcase_per_case_on_head_with_base_in_properties(every_report: EveryReport) -> None:
    root, library = ET.parse(every_report.junit).getroot(), every_report.library
    assert [suite.attrib["name"] for suite in root.iter("testsuite")] == [
        "support/faq",
        "support/greeter",
        "support/triage",
    ]
    assert {key: root.attrib[key] for key in ("tests", "failures", "errors", "skipped")} == {
        "tests": "5", "failures": "1", "errors": "0", "skipped": "0",
    }  # fmt: skip
    refund = next(case for case in root.iter("testcase") if case.attrib["name"] == "refund")
    assert refund.attrib["classname"] == "support/triage"
    failure = refund.find("failure")
    assert failure is not None and failure.attrib["message"].startswith(
        "regressed (passed on base): matches /^billing$/"
    )
    found = {prop.attrib["name"]: prop.attrib["value"] for prop in refund.iter("property")}
    assert found["base.status"] == "passed" and found["base.commit"] == library.git("rev-parse", "v1.0.0")
    assert found["base.digest"].startswith("sha256:") and found["base.digest"] != found["head.digest"]
    assert found["judge.evals/helpfulness.head.digest"].startswith("sha256:")


class Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.targets: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.targets += [value or "" for name, value in attrs if name in ("src", "href")]


def test_the_html_page_shows_the_word_diff_and_loads_nothing(library: LibraryRepo, tmp_path: Path) -> None:
    replies = [
        {**reply, "content": "Sorry, your refund is general."}
        if reply["when"] == "^Please label: I was charged"
        else reply
        for reply in REPLIES
    ]
    script = tmp_path / "replies.yml"
    script.write_text(script_yaml(replies), encoding="utf-8")
    page = report(library, script, tmp_path / "eval.html", "html", "support/triage")
    assert '<pre class="output"><del>billing</del></pre>' in page
    assert '<pre class="output"><ins>Sorry, your refund is general.</ins></pre>' in page
    links = Links()
    links.feed(page)
    assert links.targets == ["#dataset-1"]


def test_one_run_writes_every_report_asked_for_and_the_model_is_asked_once(every_report: EveryReport) -> None:
    result, record = every_report.result, every_report.record
    note, junit, page = every_report.note, every_report.junit, every_report.page
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith("eval base v1.0.0") and "regressed" in result.stdout
    assert result.stderr.splitlines()[-3:] == [
        f"markdown report: {note}",
        f"junit report: {junit}",
        f"html report: {page}",
    ]
    assert note.read_text(encoding="utf-8").startswith("## prompt-registry eval: ❌ gate failed")
    assert ET.fromstring(junit.read_text(encoding="utf-8")).tag == "testsuites"
    assert page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    # One run: each case of each side reached the model once, not once per report.
    exchanges = load_exchanges(record)
    assert exchanges and all(len(exchange.replies) == 1 for exchange in exchanges)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("junit", "--report 'junit': write it FORMAT=FILE, as in --report junit=eval.xml"),
        ("jnuit=x.xml", "--report 'jnuit=x.xml': no format 'jnuit'; did you mean 'junit'?"),
        ("pdf=x.pdf", "--report 'pdf=x.pdf': no format 'pdf'; one of text, markdown, junit, json, html"),
        (
            "html=/nonexistent/dir/x.html",
            "cannot write /nonexistent/dir/x.html: there is no directory /nonexistent/dir",
        ),
        ("html=.", "cannot write .: it is a directory"),
    ],
)
def test_a_report_that_could_not_be_written_is_refused_before_any_case_runs(
    library: LibraryRepo, script: Path, tmp_path: Path, value: str, message: str
) -> None:
    record = tmp_path / "exchanges.yml"
    result = run(
        "eval", "--repo", str(library.path), "--head", "v1.1.0", "--model", f"scripted:{script}",
        "--record", str(record), "--report", value,
    )  # fmt: skip
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == f"prompt-registry: {message}\n"
    assert not record.exists()


def test_two_reports_naming_one_file_are_refused(library: LibraryRepo, script: Path, tmp_path: Path) -> None:
    same = tmp_path / "eval.out"
    result = run(
        "eval", "--repo", str(library.path), "--head", "v1.1.0", "--model", f"scripted:{script}",
        "-o", str(same), "--report", f"junit={same}",
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr == f"prompt-registry: {same} is named for two reports: give each its own file\n"
