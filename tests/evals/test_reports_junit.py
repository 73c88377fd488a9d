"""The JUnit XML report: what GitLab's and GitHub's test report widgets
read, parsed back with ElementTree: counts, statuses, base's result in
properties, and outputs that XML 1.0 could not hold."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from registry.evals import CaseComparison
from registry.evals.reports import render_json
from registry.evals.reports.junit import render_junit
from tests.support.eval_results import BASE_PIN, HOSTILE, JUDGE_DIGESTS, case, dataset, evaluation, flips


def properties(element: ET.Element) -> dict[str, str]:
    found = element.find("properties")
    assert found is not None
    return {prop.attrib["name"]: prop.attrib["value"] for prop in found.iter("property")}


def cases_of(root: ET.Element) -> dict[str, ET.Element]:
    return {case.attrib["name"]: case for case in root.iter("testcase")}


def test_one_suite_per_eval_file_and_one_testcase_per_case_with_its_status() -> None:
    root = ET.fromstring(render_junit(flips()))
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert [suite.attrib["name"] for suite in suites] == ["support/triage"]
    counts = {key: suites[0].attrib[key] for key in ("tests", "failures", "errors", "skipped")}
    assert counts == {"tests": "7", "failures": "2", "errors": "1", "skipped": "1"}
    assert {key: root.attrib[key] for key in counts} == counts
    cases = cases_of(root)
    assert list(cases) == ["still-bad", "refund", "login", "outage", "fine", "new", "gone"]
    outcome = {
        name: [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        for name, case in cases.items()
    }
    assert outcome == {
        "still-bad": ["failure"], "refund": ["failure"], "login": [], "outage": ["error"],
        "fine": [], "new": [], "gone": ["skipped"],
    }  # fmt: skip
    refund = cases["refund"]
    assert (refund.attrib["classname"], refund.attrib["time"]) == ("support/triage", "0.250")
    assert (refund.attrib["file"], refund.attrib["line"]) == ("ai_gateway/evals/support/triage.yml", "5")
    failure = refund.find("failure")
    assert failure is not None and failure.attrib["type"] == "contains"
    assert (
        failure.attrib["message"]
        == "regressed (passed on base): contains 'refund': the output does not contain 'refund'"
    )
    still_bad = cases["still-bad"].find("failure")
    assert still_bad is not None and still_bad.attrib["message"].startswith("contains 'refund'")
    assert refund.findtext("system-out") == "general"


def test_an_outage_is_an_error_never_a_pass() -> None:
    outage = cases_of(ET.fromstring(render_junit(flips())))["outage"]
    error = outage.find("error")
    assert error is not None and error.attrib == {"message": "the model call failed: 503 overloaded", "type": "run"}
    assert "run 1 (head:support/triage:outage#1): error, failed" in (error.text or "")
    assert outage.find("system-out") is None  # it gave no output


def test_each_testcase_carries_base_result_and_both_digests_in_properties() -> None:
    cases = cases_of(ET.fromstring(render_junit(flips())))
    refund = properties(cases["refund"])
    assert refund["change"] == "regressed" and refund["base.status"] == "passed"
    assert (refund["base.tag"], refund["base.commit"]) == ("v1.0.0", BASE_PIN.commit)
    assert (refund["base.digest"], refund["head.digest"]) == ("sha256:" + "3" * 64, "sha256:" + "4" * 64)
    assert refund["head.trace_id"].startswith("refund-head-1")
    login = properties(cases["login"])
    assert login["base.status"] == "failed" and login["base.reason"].startswith("contains 'refund'")
    assert properties(cases["new"])["base.status"] == "absent"


def test_each_suite_names_both_pins_and_every_judge_digest() -> None:
    judged = CaseComparison("c", case("base", "c", "passed", scores=[0.9]), case("head", "c", "passed", scores=[0.8]))
    suite = ET.fromstring(render_junit(evaluation([dataset([judged], judged=True)]))).find("testsuite")
    assert suite is not None
    found = properties(suite)
    assert (found["base.requested"], found["base.tag"], found["head.tag"]) == ("@production", "v1.0.0", "worktree")
    assert found["judge.evals/helpfulness.base.digest"] == JUDGE_DIGESTS["base"]
    assert found["judge.evals/helpfulness.head.digest"] == JUDGE_DIGESTS["head"]
    assert properties(suite.findall("testcase")[0])["judge.evals/helpfulness.head.digest"] == JUDGE_DIGESTS["head"]


def test_an_output_xml_cannot_hold_is_replaced_and_the_file_still_parses() -> None:
    hostile = CaseComparison("evil]]>", case("base", "evil", "passed"), case("head", "evil", "failed", output=HOSTILE))
    written = render_junit(evaluation([dataset([hostile])]))
    assert "\x00" not in written and "\x1b" not in written
    evil = cases_of(ET.fromstring(written))["evil]]>"]
    output = evil.findtext("system-out") or ""
    assert "]]>" in output and "<script>alert(1)</script>" in output
    assert "\ufffd[31mred\ufffd[0m" in output and "\x00" not in output


def test_a_one_sided_run_has_no_base_properties() -> None:
    cases = [CaseComparison("refund", None, case("head", "refund", "failed"))]
    root = ET.fromstring(render_junit(evaluation([dataset(cases, two=False)], two=False)))
    refund = cases_of(root)["refund"]
    assert refund.find("failure") is not None
    assert not any(name.startswith("base.") for name in properties(refund))
    assert not any(name.startswith("base.") for name in properties(root.findall("testsuite")[0]))


def test_an_eval_file_of_which_nothing_ran_on_head_is_an_error_testcase() -> None:
    root = ET.fromstring(render_junit(evaluation([dataset([], head_problem="not a valid definition")])))
    suite = root.findall("testsuite")[0]
    assert (suite.attrib["tests"], suite.attrib["errors"]) == ("1", "1")
    error = suite.find("testcase/error")
    assert error is not None and error.attrib["message"] == "nothing ran on head: not a valid definition"


def test_a_run_with_no_eval_file_is_an_empty_report() -> None:
    root = ET.fromstring(render_junit(evaluation([])))
    assert root.findall("testsuite") == [] and root.attrib["tests"] == "0"


def test_a_lone_surrogate_in_an_output_is_replaced_in_xml_and_escaped_in_json() -> None:
    odd = CaseComparison("odd", None, case("head", "odd", "failed", output="half \ud800 a pair"))
    result = evaluation([dataset([odd], two=False)], two=False)
    written = render_junit(result)
    written.encode("utf-8")  # it can be written
    assert cases_of(ET.fromstring(written))["odd"].findtext("system-out") == "half \ufffd a pair"
    as_json = render_json(result)
    as_json.encode("utf-8")
    assert json.loads(as_json)["datasets"][0]["cases"][0]["head"]["runs"][0]["output"] == "half \ud800 a pair"
