"""The HTML report: one page that parses, loads nothing, shows every output
as text, and marks what changed word by word."""

from __future__ import annotations

from html.parser import HTMLParser

import html5lib

from registry.evals import CaseComparison
from registry.evals.reports import RENDERERS
from registry.evals.reports.html import OUTPUT_CHARS, render_html
from registry.evals.reports.worddiff import MAX_TOKENS
from tests.support.eval_results import HOSTILE, JUDGE_DIGESTS, case, dataset, evaluation, flips, many


class Page(HTMLParser):
    """Every tag with its attributes, and the text, of a page."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def named(self, tag: str) -> list[dict[str, str | None]]:
        return [attrs for name, attrs in self.tags if name == tag]


def test_the_page_is_valid_html_and_loads_nothing() -> None:
    page = render_html(flips())
    html5lib.HTMLParser(strict=True).parse(page)
    parsed = Page(page)
    assert not parsed.named("script") and not parsed.named("img") and not parsed.named("link")
    for _, attrs in parsed.tags:
        for name in ("src", "href", "action", "srcset", "data"):
            assert "//" not in (attrs.get(name) or ""), attrs
    assert {attrs["href"] for attrs in parsed.named("a")} == {"#dataset-1"}
    policy = next(attrs for attrs in parsed.named("meta") if attrs.get("http-equiv") == "Content-Security-Policy")
    assert policy["content"] == "default-src 'none'; style-src 'unsafe-inline'"


def test_a_hostile_output_is_text_on_the_page() -> None:
    hostile = CaseComparison("<evil>", case("base", "evil", "passed"), case("head", "evil", "failed", output=HOSTILE))
    page = render_html(evaluation([dataset([hostile])]))
    page.encode("utf-8")
    html5lib.HTMLParser(strict=True).parse(page)
    for character in ("\x00", "\x1b", "\u202e", "\ud800"):
        assert character not in page
    parsed = Page(page)
    assert not parsed.named("script") and not parsed.named("img") and not parsed.named("details")[1:]
    text = "".join(parsed.text)
    assert "<script>alert(1)</script>" in text and "<img src=x onerror=alert(2)>" in text and "<evil>" in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_outputs_are_side_by_side_with_a_word_diff() -> None:
    changed = CaseComparison(
        "refund",
        case("base", "refund", "passed", output="Your refund of 20 dollars is on its way."),
        case("head", "refund", "failed", output="Your refund of 25 dollars was sent."),
    )
    page = render_html(evaluation([dataset([changed])]))
    assert '<pre class="output">Your refund of<del> 20</del> dollars<del> is on its way</del>.</pre>' in page
    assert '<pre class="output">Your refund of<ins> 25</ins> dollars<ins> was sent</ins>.</pre>' in page


def test_each_case_shows_its_assertions_judge_runs_and_trace_ids() -> None:
    judged = CaseComparison(
        "refund", case("base", "refund", "passed", scores=[0.9]), case("head", "refund", "failed", scores=[0.4])
    )
    page = render_html(evaluation([dataset([judged], judged=True)]))
    text = "".join(Page(page).text)
    assert "contains 'refund': the output does not contain 'refund'" in text
    assert "(judge evals/helpfulness 222222222222, score 0.4)" in text
    assert "refund-head-1".ljust(32, "0") in text and "refund-base-1".ljust(32, "0") in text
    digests = f'<td class="digest">{JUDGE_DIGESTS["base"]}</td><td class="digest">{JUDGE_DIGESTS["head"]}</td>'
    assert f'<tr><th>judge evals/helpfulness</th>{digests}<td class="changed">changed</td></tr>' in page
    assert "<tr><th>judge score</th><td>0.900 (1 score)</td><td>0.400 (1 score)</td><td>-0.500</td></tr>" in page


def test_cases_worth_a_look_come_first_and_open_the_rest_folded() -> None:
    parsed = Page(render_html(flips()))
    summaries = [attrs for attrs in parsed.named("details")]
    assert ["open" in attrs for attrs in summaries] == [True, True, True, True, False, False, False]
    marks = [attrs["class"] for attrs in parsed.named("span") if (attrs["class"] or "").startswith("mark ")]
    assert marks == [f"mark {m}" for m in ("regressed", "fixed", "error", "failed", "unchanged", "added", "removed")]


def test_an_outage_shows_as_an_error_with_no_output() -> None:
    text = "".join(Page(render_html(flips())).text)
    assert "head: error" in text and "failed: the model call failed: 503 overloaded" in text
    assert "(no output)" in text


def test_a_one_sided_run_shows_head_alone_without_a_diff() -> None:
    cases = [CaseComparison("refund", None, case("head", "refund", "failed", output="general"))]
    page = render_html(evaluation([dataset(cases, two=False)], two=False))
    html5lib.HTMLParser(strict=True).parse(page)
    text = "".join(Page(page).text)
    assert "head: failed" in text and "base:" not in text and "<ins>" not in page
    assert '<pre class="output">general</pre>' in page


def test_a_run_with_no_eval_file_is_a_page_that_says_so() -> None:
    page = render_html(evaluation([]))
    html5lib.HTMLParser(strict=True).parse(page)
    assert "No eval file to run." in page


def test_a_page_of_thousands_of_cases_cuts_long_outputs_and_says_so() -> None:
    page = render_html(many(2000, output="word " * 2500))
    assert len(Page(page).named("details")) == 2000
    assert page.count(f"Cut at {OUTPUT_CHARS:,} of 12,500 characters: the JSON report has it whole.") == 2000
    # every fourth case is an outage on head: no output there, and nothing to compare
    assert page.count(f"Cut at {OUTPUT_CHARS:,} of 12,505 characters: the JSON report has it whole.") == 1500
    assert page.count(f"The word diff compares the first {MAX_TOKENS:,} words of each output.") == 1500


def test_html_is_a_format_of_the_command() -> None:
    assert RENDERERS["html"] is render_html
