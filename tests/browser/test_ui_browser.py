"""The web UI in a real headless Chromium, used as a person would: by clicking,
typing and pressing keys, over real servers (``prompt-registry serve --example``,
one with API tokens, one over hostile definitions, and one showing the tasks of
``prompt-registry agents serve``). Every page visited must bring no console
error, no uncaught exception, no dialog and nothing blocked by the CSP, and
must be valid HTML (checked at the end of the session). The same pages through
Flask's test client are tests/serving/ui/test_ui.py; the browser and its checks are
tests/support/browser.py."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

import pytest
from playwright.sync_api import expect

from tests.conftest import LibraryRepo
from tests.support.browser import (  # noqa: F401  (fixtures)
    PHONE,
    Tab,
    browser_fixture,
    open_tab_fixture,
    screenshots_fixture,
    session_summary_fixture,
    visited_pages_fixture,
)
from tests.support.ports import free_port
from tests.support.servers import RegistryProcess, clean_environment
from tests.support.triage_agent import triage_service_command
from tests.support.ui_evals import HOSTILE_TICKET, ui_eval_library

if TYPE_CHECKING:
    # What add_cookies takes, which Playwright names only in its private module.
    from playwright._impl._api_structures import SetCookieParam

OpenTab = Callable[..., Tab]
TOKEN = "browser-token-0123456789abcdef"

HOSTILE = """\
name: "<script>alert('name')</script>"
description: "<img src=x onerror=alert(1)> \\u202Eevil right-to-left"
prompt_templates:
  system: "</pre><script>alert('template')</script>{{ question }}"
inputs:
  type: object
  required: [question]
  properties:
    question: {type: string, description: "<b onmouseover=alert(1)>hover</b>", default: "\\"><script>alert(2)</script>"}
"""


@pytest.fixture(scope="module")
def registry() -> Iterator[RegistryProcess]:
    with RegistryProcess("--example") as process:
        yield process


# An input whose constraints are a long JSON value, beside short columns.
WIDE = """\
name: wide
prompt_templates:
  user: "{{ kind }} {{ note }}"
inputs:
  type: object
  required: [kind]
  properties:
    kind:
      type: string
      description: One of many kinds.
      enum: [KINDS]
    note: {type: string, maxLength: 40}
""".replace("KINDS", ", ".join(f"kind_number_{n}_of_a_very_long_list_of_kinds" for n in range(120)))


@pytest.fixture(scope="module")
def hostile_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryProcess]:
    repo = LibraryRepo(tmp_path_factory.mktemp("hostile"))
    repo.release("v1.0.0", {"evil/agent.yml": HOSTILE, "evil/wide.yml": WIDE})
    with RegistryProcess("--repo", str(repo.path)) as process:
        yield process


@pytest.fixture(scope="module")
def evals_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryProcess]:
    """A repository whose agents have eval files: a hostile case, a judge, a broken file, none."""
    repo = ui_eval_library(LibraryRepo(tmp_path_factory.mktemp("evals")))
    with RegistryProcess("--repo", str(repo.path)) as process:
        yield process


@pytest.fixture(scope="module")
def locked_registry() -> Iterator[RegistryProcess]:
    with RegistryProcess("--example", env={**clean_environment(), "REGISTRY_API_TOKENS": TOKEN}) as process:
        yield process


@pytest.fixture(scope="module")
def agents_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryProcess]:
    """``agents serve`` with a scripted model and a tool that waits for approval."""
    directory = tmp_path_factory.mktemp("agents")
    port = free_port()
    command = triage_service_command(directory, port)
    with RegistryProcess(command=command, port=port, cwd=directory) as process:
        yield process


@pytest.fixture(scope="module")
def tasks_registry(agents_service: RegistryProcess) -> Iterator[RegistryProcess]:
    """A registry whose UI shows the tasks of ``agents_service``."""
    environment = {**clean_environment(), "REGISTRY_AGENTS_URL": agents_service.base}
    with RegistryProcess("--example", env=environment) as process:
        yield process


# --- releases, agents, the playground ----------------------------------------------------


def test_a_person_goes_from_the_releases_to_an_agent_and_renders_it(
    registry: RegistryProcess, open_tab: OpenTab
) -> None:
    tab = open_tab(registry.base)
    page = tab.page
    tab.goto("/ui/")
    assert page.get_by_role("heading", name="Releases", exact=True).is_visible()
    tab.screenshot("releases", docs=True)

    releases = page.get_by_role("table", name="Releases", exact=True)
    tab.follow(releases.get_by_role("link", name="v1.1.0", exact=True).click)
    assert page.url == registry.base + "/ui/agents?release=v1.1.0"
    rows = page.locator("#agents tbody tr")
    everyone = rows.count()
    assert everyone > 10

    page.get_by_label("Filter").press_sequentially("support/")
    shown = page.locator("#agents tbody tr:visible")
    assert 0 < shown.count() < everyone
    assert all(name.startswith("support/") for name in shown.locator("th a").all_inner_texts())
    page.get_by_label("Filter").press_sequentially("routed")
    assert shown.locator("th a").all_inner_texts() == ["support/routed_answer"]
    page.get_by_label("Filter").fill("")
    assert shown.count() == everyone
    tab.screenshot("agents")

    page.get_by_label("Filter").press_sequentially("explain")
    tab.follow(page.get_by_role("link", name="explain_code/snippet", exact=True).click)
    assert page.get_by_role("heading", name="Render playground").is_visible()

    form = page.locator("#render-form")
    form.get_by_label(re.compile("^code")).fill("def double(x):\n    return 2 * x")
    form.get_by_label(re.compile("^language")).fill("python")
    form.get_by_label(re.compile("^audience")).select_option("beginner")
    assert form.get_by_label(re.compile("^language")).evaluate("e => e.tagName") == "INPUT"  # a short string
    tab.screenshot("playground", docs=True, part=form)
    tab.follow(form.get_by_role("button", name="Render").click)

    result = page.locator("#result")
    system, user = result.locator("article.message-system"), result.locator("article.message-user")
    assert system.get_by_role("heading", name="system").is_visible()
    assert "The reader is new to programming" in system.inner_text()
    assert "```python\ndef double(x):\n    return 2 * x\n```" in user.inner_text()
    assert page.url.endswith("#result")
    tab.screenshot("agent", docs=True)


def test_the_playground_is_filled_and_sent_with_the_keyboard_alone(
    registry: RegistryProcess, open_tab: OpenTab
) -> None:
    tab = open_tab(registry.base)
    page = tab.page
    tab.goto("/ui/agents/explain_code/snippet?release=v1.1.0")
    tab.press_tab_until("#render-form textarea[name=code]")
    page.keyboard.type("SELECT 1;")
    tab.press_tab_until("#render-form [name=language]")
    page.keyboard.type("sql")
    tab.press_tab_until("#render-form button[type=submit]")
    assert page.evaluate("() => getComputedStyle(document.activeElement).outlineStyle") != "none"
    tab.follow(lambda: page.keyboard.press("Enter"))
    user = page.locator("#result article.message-user")
    assert "```sql\nSELECT 1;\n```" in user.inner_text()


def test_the_placeholders_a_render_leaves_are_boxed_and_lead_to_what_fills_them(
    registry: RegistryProcess, open_tab: OpenTab
) -> None:
    tab = open_tab(registry.base)
    page = tab.page
    tab.goto("/ui/agents/chat/minimal?release=v1.1.0")
    form = page.locator("#render-form")
    form.get_by_label(re.compile("^question")).fill("What is a merge train?")
    tab.follow(form.get_by_role("button", name="Render").click)

    # Left in the assistant message, boxed (not told by colour alone), and described by what fills it.
    box = page.locator("#result article.message-assistant").get_by_role("link", name="{agent_scratchpad}")
    fills = "the executor, with the thoughts, actions and observations so far, again every round"
    expect(box).to_have_accessible_description(fills)
    assert box.locator("mark").evaluate("e => getComputedStyle(e).borderTopStyle") == "solid"
    row = page.get_by_role("row", name="{agent_scratchpad}")
    assert row.get_by_role("cell").all_inner_texts() == [fills, "assistant"]
    tab.screenshot("placeholders", docs=True, part=page.locator("#result"))

    # Reached by keyboard, the box leads to its row, which is then marked beyond its colour too.
    tab.press_tab_until("#result a.placeholder")
    page.keyboard.press("Enter")
    page.wait_for_url("**#placeholder-agent_scratchpad")
    assert row.evaluate("e => e.matches(':target')")
    assert row.locator("th").evaluate("e => getComputedStyle(e).boxShadow") != "none"


def test_a_release_is_compared_with_the_one_before(registry: RegistryProcess, open_tab: OpenTab) -> None:
    tab = open_tab(registry.base)
    page = tab.page
    tab.goto("/ui/")
    tab.follow(page.get_by_role("link", name="diff with v1.0.0").click)
    assert page.url == registry.base + "/ui/diff?from=v1.0.0&to=v1.1.0"
    assert page.get_by_label("From").input_value() == "v1.0.0"
    bump = page.locator("#bump .badge")
    assert bump.inner_text() == "minor"  # v1.1.0 adds agents and changes none
    assert page.locator("article.change-added").count() > 0
    assert page.get_by_role("link", name="assistant/react_text").is_visible()
    tab.screenshot("diff", docs=True)

    page.get_by_label("From").fill("v1.1.0")
    page.get_by_label("To").fill("v1.0.0")
    tab.follow(page.get_by_role("button", name="Compare").click)
    assert page.locator("article.change-removed").count() > 0


def test_a_node_of_a_composite_graph_leads_to_its_agent(registry: RegistryProcess, open_tab: OpenTab) -> None:
    tab = open_tab(registry.base)
    page = tab.page
    tab.goto("/ui/agents?release=v1.1.0")
    tab.follow(page.get_by_role("link", name="support/routed_answer", exact=True).click)
    graph = page.locator(".graph svg")
    assert graph.is_visible()
    assert page.get_by_role("heading", name="Render playground").count() == 0
    graph.scroll_into_view_if_needed()
    tab.screenshot("graph", docs=True, part=page.locator("section[aria-labelledby=graph]"))

    node = graph.locator("a").filter(has_text="support/classify_request")
    tab.follow(node.click)
    assert page.url == registry.base + "/ui/agents/support/classify_request?release=v1.1.0"
    assert page.get_by_role("heading", name="Render playground").is_visible()


@pytest.mark.parametrize("agent", ["explain_code/snippet", "support/routed_answer"])
def test_an_agent_page_fits_a_phone_without_sideways_scrolling(
    registry: RegistryProcess, open_tab: OpenTab, agent: str
) -> None:
    tab = open_tab(registry.base, viewport=PHONE, phone=True)
    tab.goto(f"/ui/agents/{agent}?release=v1.1.0")
    width = tab.page.evaluate(
        """() => {
            const root = document.documentElement;
            const wide = [...document.body.querySelectorAll("*")]
                .filter(e => e.getBoundingClientRect().right > root.clientWidth + 0.5)
                .map(e => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + (e.getAttribute("class") ? "." + e.getAttribute("class").split(" ").join(".") : ""));
            return {scroll: root.scrollWidth, client: root.clientWidth, wide: wide.slice(0, 10)};
        }"""
    )
    tab.screenshot(f"phone-{agent.replace('/', '-')}")
    assert width["scroll"] <= width["client"], width


def test_hostile_text_of_a_definition_and_of_the_inputs_stays_text(
    hostile_registry: RegistryProcess, open_tab: OpenTab
) -> None:
    tab = open_tab(hostile_registry.base)
    page = tab.page
    tab.goto("/ui/agents")
    tab.follow(page.get_by_role("link", name="evil/agent").click)
    assert page.get_by_role("heading", level=1).inner_text() == "<script>alert('name')</script>"
    question = page.locator("#render-form").get_by_label(re.compile("^question"))
    assert question.input_value() == '"><script>alert(2)</script>'
    question.fill("<img src=x onerror=alert(3)>")
    tab.follow(page.get_by_role("button", name="Render").click)
    system = page.locator("#result article.message-system pre")
    assert system.inner_text() == "</pre><script>alert('template')</script><img src=x onerror=alert(3)>"
    assert page.locator("main script, main img, main [onmouseover]").count() == 0


def test_an_agent_page_lists_its_eval_cases_as_text_and_leads_to_their_judge(
    evals_registry: RegistryProcess, open_tab: OpenTab
) -> None:
    tab = open_tab(evals_registry.base)
    page = tab.page
    tab.goto("/ui/agents/support/triage?release=v1.0.0")
    cases = page.get_by_role("table", name="Eval cases")
    assert cases.locator("tbody tr th code").all_inner_texts() == ["refund-simple", "hostile"]
    hostile = cases.get_by_role("row", name=re.compile("^hostile"))
    assert hostile.get_by_role("cell").first.inner_text() == '{"ticket": "<script>alert(\'case\')</script>"}'
    assert HOSTILE_TICKET in hostile.inner_text()
    assert page.locator("main script, main img").count() == 0
    section = page.locator("#eval-cases")
    section.scroll_into_view_if_needed()
    tab.screenshot("evals", docs=True, part=section)

    tab.follow(cases.get_by_role("link", name="judged by evals/helpfulness, at least 0.7").click)
    assert page.url == evals_registry.base + "/ui/agents/evals/helpfulness?release=v1.0.0"
    assert page.get_by_role("heading", level=1).inner_text() == "Helpfulness judge"


def test_an_eval_file_with_problems_shows_them_and_a_page_fits_a_phone(
    evals_registry: RegistryProcess, open_tab: OpenTab
) -> None:
    tab = open_tab(evals_registry.base, viewport=PHONE, phone=True)
    page = tab.page

    def fits() -> bool:
        return bool(page.evaluate("() => document.documentElement.scrollWidth <= document.documentElement.clientWidth"))

    tab.goto("/ui/agents/support/broken?release=v1.0.0")
    problems = page.locator("#eval-problems li").all_inner_texts()
    assert len(problems) == 3 and problems[0].endswith("(ai_gateway/evals/support/broken.yml:4)")
    assert fits()
    tab.goto("/ui/agents/support/many?release=v1.0.0")
    assert page.locator("#eval-case-table tbody tr").count() == 50
    assert fits()
    tab.goto("/ui/agents/support/without_any_eval_file?release=v1.0.0")  # where its eval file would go: a long path
    assert "ai_gateway/evals/support/without_any_eval_file.yml" in page.locator("#eval-cases").inner_text()
    assert fits()


@pytest.mark.parametrize("viewport", ["desktop", "phone"])
def test_table_cells_beside_a_long_value_keep_their_words_whole(
    hostile_registry: RegistryProcess, open_tab: OpenTab, viewport: str
) -> None:
    tab = open_tab(hostile_registry.base, **({"viewport": PHONE, "phone": True} if viewport == "phone" else {}))
    tab.goto("/ui/agents/evil/wide")
    lines = tab.page.evaluate(
        """() => [...document.querySelectorAll("section[aria-labelledby=inputs] tr")].flatMap(row =>
            [...row.children].slice(0, 3).map(cell => {
                const range = document.createRange();
                range.selectNodeContents(cell);
                const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
                return [cell.innerText, tops.size];
            }))"""
    )
    # Name, Type, Required: each on one line ("Type", not "Ty/pe"; "string", not "str/in/g").
    assert ["Name", 1] in lines and ["string", 1] in lines
    assert all(count == 1 for _, count in lines), lines
    tab.screenshot(f"wide-inputs-{viewport}")


# --- sign in ----------------------------------------------------------------------------


def test_a_person_signs_in_with_the_api_token_into_a_strict_httponly_cookie(
    locked_registry: RegistryProcess, open_tab: OpenTab
) -> None:
    tab = open_tab(locked_registry.base)
    page = tab.page
    tab.goto("/ui/agents?release=v1.1.0")
    assert page.url.startswith(locked_registry.base + "/ui/login?next=")
    page.get_by_label("Token").fill("not-the-token-0123456789")
    tab.follow(page.get_by_role("button", name="Sign in").click, status=401)
    assert page.get_by_role("alert").inner_text() == "That token is not one of this registry's."

    page.get_by_label("Token").fill(TOKEN)
    tab.follow(lambda: page.get_by_label("Token").press("Enter"))
    assert page.url == locked_registry.base + "/ui/agents?release=v1.1.0"
    assert page.get_by_role("link", name="support/routed_answer").is_visible()
    [cookie] = page.context.cookies()
    assert (cookie["httpOnly"], cookie["sameSite"], cookie["path"]) == (True, "Strict", "/ui")
    assert TOKEN not in cookie["value"] and page.evaluate("() => document.cookie") == ""

    tab.follow(page.get_by_role("button", name="Sign out").click)
    assert page.url == locked_registry.base + "/ui/login"
    tab.goto("/ui/")
    assert page.url.startswith(locked_registry.base + "/ui/login")

    # The cookie as it was before signing out, kept and sent again from another browser: revoked.
    replay = open_tab(locked_registry.base)
    replay.page.context.add_cookies([cast("SetCookieParam", cookie)])
    replay.goto("/ui/agents?release=v1.1.0")
    assert replay.page.url.startswith(locked_registry.base + "/ui/login?next=")


# --- tasks and approvals -----------------------------------------------------------------


def create_task(agents: RegistryProcess, question: str) -> str:
    body = {"additional_input": {"agent": "assistant/react_text", "inputs": {"pipeline_id": 7, "question": question}}}
    request = urllib.request.Request(
        agents.base + "/ap/v1/agent/tasks",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        task: dict[str, Any] = json.loads(response.read())
    return str(task["task_id"])


def open_pending_action(tab: Tab, agents: RegistryProcess, question: str) -> str:
    """A new task, found in the task list and stepped in the UI until its action waits; its id."""
    task = create_task(agents, question)
    page = tab.page
    tab.goto("/ui/")
    tab.follow(page.get_by_role("navigation", name="Main").get_by_role("link", name="Tasks").click)
    tab.follow(page.get_by_role("link", name=task[:8]).click)
    assert task_state(tab) == "created"
    tab.follow(page.get_by_role("button", name="Run the next step").click)
    action = page.locator("section.action")
    assert action.get_by_role("heading", name="Waiting for your decision").is_visible()
    assert "list_jobs" in action.inner_text() and "which job failed?" in action.inner_text()
    assert json.loads(action.locator("pre").inner_text()) == {"pipeline_id": 7}
    return task


def task_state(tab: Tab) -> str:
    return tab.page.locator(".facts dt:text-is('State') + dd .badge").inner_text()


def test_an_approved_action_runs_and_the_task_completes(
    tasks_registry: RegistryProcess, agents_service: RegistryProcess, open_tab: OpenTab
) -> None:
    tab = open_tab(tasks_registry.base)
    page = tab.page
    open_pending_action(tab, agents_service, "Why?")
    tab.screenshot("task", docs=True)
    tab.follow(page.get_by_role("button", name="Approve").click)
    assert task_state(tab) == "completed"
    assert page.locator("section.action").count() == 0
    assert "pipeline 7 failed in its lint job." in page.locator(".facts").inner_text()
    assert "Decision: approve" in page.locator(".timeline").inner_text()
    tab.screenshot("task-completed")


def test_a_rejected_action_tells_the_model_why(
    tasks_registry: RegistryProcess, agents_service: RegistryProcess, open_tab: OpenTab
) -> None:
    tab = open_tab(tasks_registry.base)
    page = tab.page
    open_pending_action(tab, agents_service, "Was it the linter?")
    page.get_by_label("Reason").fill("do not read the jobs")
    tab.follow(page.get_by_role("button", name="Reject").click)
    assert task_state(tab) == "completed"
    assert "I did not look at the jobs, as asked." in page.locator(".facts").inner_text()
    assert "Decision: reject (do not read the jobs)" in page.locator(".timeline").inner_text()


def test_an_edited_action_runs_with_the_new_arguments(
    tasks_registry: RegistryProcess, agents_service: RegistryProcess, open_tab: OpenTab
) -> None:
    tab = open_tab(tasks_registry.base)
    page = tab.page
    open_pending_action(tab, agents_service, "And the next one?")
    page.get_by_label("Arguments to run it with").fill('{"pipeline_id": 8}')
    tab.follow(page.get_by_role("button", name="Run with these").click)
    assert task_state(tab) == "completed"
    assert "pipeline 8 failed in its lint job." in page.locator(".facts").inner_text()
    assert "Decision: edit" in page.locator(".timeline").inner_text()


def step_in_the_service(agents: RegistryProcess, task: str, **additional: str) -> None:
    """A step posted to the service by another client than the page."""
    request = urllib.request.Request(
        f"{agents.base}/ap/v1/agent/tasks/{task}/steps",
        data=json.dumps({"additional_input": additional}).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 200


def test_a_task_page_follows_its_task_live_as_another_client_steps_it(
    tasks_registry: RegistryProcess, agents_service: RegistryProcess, open_tab: OpenTab
) -> None:
    tab = open_tab(tasks_registry.base)
    page = tab.page
    task = create_task(agents_service, "Live?")
    tab.goto(f"/ui/tasks/{task}")
    assert task_state(tab) == "created"
    page.evaluate("window.loadedOnce = true")  # gone if the page were loaded again
    live, wait = page.locator("#live-log"), 30_000
    step_in_the_service(agents_service, task)
    # The decision the action waits for appears, from the page's stream alone.
    expect(page.locator("section.action")).to_be_visible(timeout=wait)
    expect(live).to_contain_text("tool call list_jobs", timeout=wait)
    expect(live).to_contain_text("action pending list_jobs", timeout=wait)
    expect(page.locator("[data-task-state]")).to_have_text("waiting_for_input", timeout=wait)
    step_in_the_service(agents_service, task, decision="approve")
    expect(page.locator("[data-task-state]")).to_have_text("completed", timeout=wait)
    expect(live).to_contain_text("outcome completed", timeout=wait)
    expect(live).to_contain_text("pipeline 7 failed in its lint job.", timeout=wait)
    expect(page.locator(".facts")).to_contain_text("pipeline 7 failed in its lint job.", timeout=wait)
    expect(page.locator("section.action")).to_have_count(0)
    # Each step says which worker process ran it.
    workers = page.locator(".timeline li").filter(has_text="ran on ")
    expect(workers).to_have_count(2)
    assert page.evaluate("window.loadedOnce") is True
    tab.screenshot("task-live")
    tab.assert_nothing_went_wrong()
