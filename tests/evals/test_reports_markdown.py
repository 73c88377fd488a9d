"""The Markdown report: a merge request note that lists flipped cases first,
stays whole whatever the outputs hold (rendered here as CommonMark with
tables, raw HTML allowed as GitHub and GitLab allow it), and fits a comment."""

from __future__ import annotations

import re
from dataclasses import replace
from html.parser import HTMLParser

from markdown_it import MarkdownIt

from registry.evals import CaseComparison
from registry.evals.reports import RENDERERS
from registry.evals.reports.markdown import MAX_CHARS, render_markdown
from tests.support.eval_results import HOSTILE, case, dataset, evaluation, flips, many


class Tags(HTMLParser):
    """The tags of a page, each with its attributes; the text of each ``<code>`` and of the whole."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.code: list[str] = []
        self._in_code = 0
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_code += tag == "code"

    def handle_endtag(self, tag: str) -> None:
        self._in_code -= tag == "code"

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._in_code:
            self.code.append(data)


def rendered(note: str) -> str:
    return str(MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"]).render(note))


NOTE_TAGS = {
    "h2", "h3", "h4", "p", "strong", "em", "code", "sub", "br", "ul", "li", "blockquote",
    "table", "thead", "tbody", "tr", "th", "td", "details", "summary",
}  # fmt: skip


def test_flipped_cases_come_first_regressed_then_fixed_then_errors_then_failures() -> None:
    note = render_markdown(flips())
    order = [note.index(f"**`{case_id}`**") for case_id in ("refund", "login", "outage", "still-bad")]
    assert order == sorted(order)
    assert "#### Regressed (passed on base, failed on head): 1" in note
    assert "#### Fixed (failed on base, passed on head): 1" in note
    assert "<details><summary>Errors (could not be judged): 1</summary>" in note
    assert "`fine`" not in note and "`gone`" not in note  # passing and removed cases are counted, not listed
    assert "| output | `billing` | `general` |" in note


def test_the_title_names_both_pins_and_the_note_ends_with_the_gate() -> None:
    note = render_markdown(flips())
    assert note.startswith("## prompt-registry eval: ❌ gate failed\n")
    assert (
        "**base** `v1.0.0` at `aaaaaaaaaaaa`, requested as `@production` → **head** `worktree` at `bbbbbbbbbbbb`"
        in note
    )
    assert "| `support/triage` | 6 → 6 | 66.67% → 60% (▼ 6.67 points) | 1 | 1 | 1 | — |" in note
    gate = note[note.index("### ❌ Gate failed (`--fail-on regression`)") :]
    assert "- `support/triage.yml: 1 case could not be judged on head (error): outage`" in gate
    assert "- `support/triage.yml: 1 case passed on base and failed on head: refund`" in gate


def test_an_outage_is_listed_as_an_error_with_why_never_as_a_pass() -> None:
    note = render_markdown(flips())
    errors = note[note.index("<summary>Errors") : note.index("</details>", note.index("<summary>Errors"))]
    assert "**`outage`**" in errors
    assert "| status | **passed** | **error** |" in errors
    assert "`the model call failed: 503 overloaded`" in errors
    assert "| output | `answer` | *(no output)* |" in errors


def test_a_hostile_output_is_text_in_the_note_and_breaks_no_table() -> None:
    hostile = CaseComparison("evil", case("base", "evil", "passed"), case("head", "evil", "failed", output=HOSTILE))
    note = render_markdown(evaluation([dataset([hostile])]))
    assert "\x00" not in note and "\x1b" not in note and "\u202e" not in note and "\ud800" not in note
    note.encode("utf-8")  # it can be written
    page = Tags(rendered(note))
    assert {tag for tag, _ in page.tags} <= NOTE_TAGS  # no script, img, a, del: nothing the output asked for
    code = "".join(page.code)
    for text in ("<script>alert(1)</script>", "@alice #12", "![x](https://example.com/x.png)", "]]>", "**bold**"):
        assert text in code  # as typed, and in code: no mention, reference or link is made of it
    table = rendered(note).split("<strong><code>evil</code></strong>")[1]
    rows = re.findall(r"<tr>(.*?)</tr>", table.split("</table>")[0], re.DOTALL)
    assert [len(re.findall("<t[hd]", row)) for row in rows] == [3, 3, 3, 3]  # the pipes in it split no cell


def test_a_one_sided_run_shows_head_alone() -> None:
    cases = [
        CaseComparison("refund", None, case("head", "refund", "failed", output="general")),
        CaseComparison("login", None, case("head", "login", "passed")),
    ]
    note = render_markdown(evaluation([dataset(cases, two=False)], two=False))
    assert "**head** `worktree` at `bbbbbbbbbbbb`" in note and "**base**" not in note
    assert "| `support/triage` | 2 | 50% | 1 | 0 | — |" in note
    assert "<details><summary>Failures on head: 1</summary>" in note
    assert "| | head |\n|---|---|\n| status | **failed** |" in note
    assert "Regressed" not in note


def test_a_run_with_no_eval_file_says_so_and_still_gives_the_gate() -> None:
    note = render_markdown(evaluation([]))
    assert "No eval file to run." in note
    assert note.endswith("### ✅ Gate passed (`--fail-on regression`)\n")


def test_an_eval_file_of_which_nothing_ran_on_head_says_why() -> None:
    note = render_markdown(evaluation([dataset([], head_problem="support/triage is not a valid definition: line 1")]))
    assert "- ⛔ **nothing ran on head**: `support/triage is not a valid definition: line 1`" in note
    assert "`support/triage.yml: nothing ran on head: support/triage is not a valid definition: line 1`" in note


def test_a_changed_judge_shows_as_a_judge_change_with_both_digests() -> None:
    judged = CaseComparison(
        "refund", case("base", "refund", "passed", scores=[0.9]), case("head", "refund", "passed", scores=[0.6])
    )
    note = render_markdown(evaluation([dataset([judged], judged=True)]))
    assert "- **judge score** 0.90 → 0.60 (-0.30)" in note
    assert "- ⚠️ the judge `evals/helpfulness` changed (111111111111 → 222222222222)" in note
    assert f"| judge `evals/helpfulness` | `sha256:{'1' * 64}` | `sha256:{'2' * 64}` |" in note
    assert "interval" not in note  # one run a case: no interval


def test_repeated_cases_give_the_judge_score_change_a_bootstrap_interval() -> None:
    cases = [
        CaseComparison(
            f"c{n}",
            case("base", f"c{n}", "passed", "passed", scores=[0.5, 0.6]),
            case("head", f"c{n}", "passed", "passed", scores=[0.4 + 0.2 * (n % 3), 0.7]),
        )
        for n in range(10)
    ]
    result = evaluation([dataset(cases, judged=True)], repeat=2)
    note = render_markdown(result)
    line = next(line for line in note.splitlines() if line.startswith("- **judge score**"))
    interval = re.fullmatch(
        r"- \*\*judge score\*\* 0\.55 → 0\.64 \(\+0\.09\), 95% interval of the change ([-+]\d\.\d\d) to ([-+]\d\.\d\d)"
        r" \(10 cases resampled 2000 times\)",
        line,
    )
    assert interval is not None, line
    assert float(interval[1]) < 0.09 < float(interval[2])
    assert render_markdown(result) == note  # seeded: the same results, the same interval


def test_a_run_of_thousands_of_cases_is_cut_to_fit_a_comment_and_says_so() -> None:
    note = render_markdown(many(4000))
    assert len(note) <= MAX_CHARS < 65_536
    cut = re.search(r"> ✂️ Cut to fit a note of 60,000 characters: (\d+) cases not listed, (\d+) listed without", note)
    listed = re.findall(r"\*\*`(case-\d+)`\*\*", note)
    assert cut is not None and int(cut[1]) + len(listed) == 4000
    assert sum(int(more) for more in re.findall(r"… (\d+) more cases in the HTML/JSON report\.", note)) == int(cut[1])
    assert note.count("| output |") >= 10  # the first regressions keep their outputs
    assert listed and all(int(case_id.split("-")[1]) % 4 == 0 for case_id in listed)  # regressions first
    gate = note[note.index("### ❌ Gate failed") :]
    assert "- `support/triage.yml: 1000 cases passed on base and failed on head: case-0, case-4, case-8," in gate
    assert "- `support/triage.yml: 1000 cases could not be judged on head (error): case-3, case-7," in gate


def test_outputs_are_cut_and_each_says_how_much_is_left_out() -> None:
    long = CaseComparison("long", case("base", "long", "passed"), case("head", "long", "failed", output="x" * 5000))
    note = render_markdown(evaluation([dataset([long])]))
    assert "x" * 400 + "… (4600 more characters)" in note
    assert "x" * 401 not in note


def test_markdown_is_a_format_of_the_command() -> None:
    assert RENDERERS["markdown"] is render_markdown
    assert render_markdown(replace(flips(), seconds=0.0)).count("## prompt-registry eval") == 1


def test_a_run_of_hundreds_of_eval_files_keeps_the_first_whole_and_counts_the_rest() -> None:
    failing = [
        CaseComparison(f"c{n}", case("base", f"c{n}", "passed"), case("head", f"c{n}", "failed", output="no " * 100))
        for n in range(20)
    ]
    result = evaluation([dataset(failing, agent=f"usecase/agent{n:03d}") for n in range(300)])
    note = render_markdown(result)
    assert len(note) <= MAX_CHARS
    assert "| `usecase/agent049` |" in note and "| `usecase/agent050` |" not in note
    assert "… 250 more eval files in the HTML/JSON report." in note
    shown = re.findall(r"^### `usecase/agent(\d+)`", note, re.MULTILINE)
    assert shown[0] == "000" and 0 < len(shown) < 300
    assert f"… {300 - len(shown)} more eval files in the HTML/JSON report." in note
    assert f"{300 - len(shown)} eval files not shown" in note
    assert note.count("- `usecase/agent") == 30 and "- … 570 more reasons in the HTML/JSON report" in note


def test_a_note_is_never_longer_than_the_cap_whatever_it_names() -> None:
    result = replace(flips(), settings=replace(flips().settings, model="m" * 70_000))
    note = render_markdown(result)
    assert len(note) <= MAX_CHARS and note.endswith("… cut at 60,000 characters.\n")
