"""The web UI, page by page, through Flask's test client over the example
library (a real tagged repository) and hostile definitions; the browser
tests are tests/browser/test_ui_browser.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from registry.serving.app import create_app
from registry.serving.ui.rendered import MAX_MARKED
from registry.settings import Settings
from tests.conftest import LibraryRepo
from tests.support.executor_fixtures import GATE_SCHEMA, json_leaf, leaf
from tests.support.ui_pages import csrf, page, valid_html

TOKEN = "ui-token-0123456789abcdef"


@pytest.fixture
def example_app(example: Path) -> Any:
    app = create_app(Settings(repo=str(example)))
    yield app
    app.extensions["prompt_registry.service"].close()


@pytest.fixture
def ui(example_app: Flask) -> FlaskClient:
    return example_app.test_client()


def test_the_root_sends_a_browser_to_the_releases_page(ui: FlaskClient) -> None:
    response = ui.get("/", headers={"Accept": "text/html"})
    assert response.status_code == 302 and response.headers["Location"] == "/ui/"
    text = page(ui, "/ui/")
    assert "v1.1.0" in text and "v1.0.0" in text and "@production" in text and "latest" in text


def test_the_agents_of_a_release_link_with_the_release(ui: FlaskClient) -> None:
    text = page(ui, "/ui/agents?release=v1.1.0")
    assert 'href="/ui/agents/support/gated_answer?release=v1.1.0"' in text
    assert "pattern: chain" in text and "ReAct" in text


def test_an_agent_page_shows_templates_inputs_and_a_playground(ui: FlaskClient) -> None:
    text = page(ui, "/ui/agents/explain_code/snippet?release=v1.1.0")
    assert "Provenance" in text and "sha256:" in text and "Render playground" in text
    assert 'class="hl-' in text  # highlighted by Pygments
    assert "curl -s -X POST" in text


def test_the_playground_renders_the_messages(ui: FlaskClient) -> None:
    form = page(ui, "/ui/agents/explain_code/snippet?release=v1.1.0")
    response = ui.post(
        "/ui/agents/explain_code/snippet?release=v1.1.0",
        data={"csrf_token": csrf(form), "code": "print(1)", "language": "python"},
    )
    text = response.get_data(as_text=True)
    assert response.status_code == 200, text[:2000]
    valid_html(text)
    assert "print(1)" in text and 'class="message message-user"' in text


def _rendered(client: FlaskClient, url: str, **inputs: str) -> str:
    """The playground's result for ``inputs``: the page's HTML, valid, from the result to the code snippets."""
    response = client.post(url, data={"csrf_token": csrf(page(client, url)), **inputs})
    text = response.get_data(as_text=True)
    assert response.status_code == 200, text[:2000]
    valid_html(text)
    return text[text.index('<div id="result"') : text.index("<h3>The same, from code</h3>")]


def test_the_playground_marks_the_placeholders_a_render_leaves_and_says_what_fills_them(ui: FlaskClient) -> None:
    result = _rendered(ui, "/ui/agents/chat/minimal?release=v1.1.0", question="What is a merge train?")
    # {question} is filled; {agent_scratchpad} is left, boxed where it is and listed with what fills it.
    assert "Question: What is a merge train?" in result and "{question}" not in result
    assert (
        '<tr id="placeholder-agent_scratchpad"><th scope="row"><code>{agent_scratchpad}</code></th>'
        '<td id="placeholder-agent_scratchpad-fill">the executor, with the thoughts, actions and observations so far,'
        " again every round</td><td>assistant</td></tr>"
    ) in result
    assert (
        '<pre tabindex="0"><a class="placeholder" href="#placeholder-agent_scratchpad"'
        ' aria-describedby="placeholder-agent_scratchpad-fill"><mark>{agent_scratchpad}</mark></a>\nThought:</pre>'
    ) in result
    assert "1 placeholder in the messages" in result and "unfilled" not in result


# A vanilla agent whose templates leave every kind of placeholder.
LEAVES_PLACEHOLDERS = """name: leaves placeholders
prompt_templates:
  system: |
    History: {chat_history}
    Notes: {agent_scratchpad} {note}
    Reply as {"answer": "{prefix}"}
  user: "{{ question }} {prefix}"
inputs:
  type: object
  required: [question]
  properties:
    question: {type: string}
    note: {type: string}
"""


@pytest.fixture
def leaves(repo: LibraryRepo) -> Any:
    repo.release("v1.0.0", {"u/leaves.yml": LEAVES_PLACEHOLDERS})
    app = create_app(Settings(repo=str(repo.path)))
    yield app.test_client()
    app.extensions["prompt_registry.service"].close()


def test_a_placeholder_nothing_can_fill_is_flagged_as_lint_flags_it(leaves: FlaskClient) -> None:
    result = _rendered(leaves, "/ui/agents/u/leaves", question="<b>{prefix}</b>")
    rows = dict(re.findall(r'<tr id="placeholder-(\w+)">(.*?)</tr>', result))
    assert list(rows) == ["chat_history", "agent_scratchpad", "note", "prefix"]  # in the order they first appear
    assert "the executor, with the conversation&#39;s prior turns" in rows["chat_history"]
    assert "unfilled" not in rows["chat_history"] and "unfilled" not in rows["note"]
    assert "nothing: the executor fills it for react agents only, and this one is vanilla" in rows["agent_scratchpad"]
    assert "the input &#39;note&#39;, not given here: a run with these inputs stops" in rows["note"]
    assert "nothing: no input and no runtime variable fills it" in rows["prefix"]
    for name in ("agent_scratchpad", "prefix"):
        assert '<span class="badge badge-bad">unfilled</span>' in rows[name]
        assert f"<strong>Nothing can fill <code>{{{name}}}</code></strong>" in result
        assert f'<a class="placeholder unfillable" href="#placeholder-{name}"' in result
    assert "<td>user (2 times)</td>" in rows["prefix"]
    # In the JSON example, {prefix} is JSON text, shown as written.
    assert "Reply as {&#34;answer&#34;: &#34;{prefix}&#34;}" in result
    # Printed text holding a name the template writes is read as a placeholder too: marked inside escaped text.
    assert (
        '<pre tabindex="0">&lt;b&gt;<a class="placeholder unfillable" href="#placeholder-prefix"'
        ' aria-describedby="placeholder-prefix-fill"><mark>{prefix}</mark></a>&lt;/b&gt; ' in result
    )
    assert "<b>" not in result


def test_only_the_first_thousand_places_of_placeholders_are_boxed(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"u/many.yml": f"name: many\nprompt_templates:\n  user: '{'{x} ' * (MAX_MARKED + 5)}'\n"})
    app = create_app(Settings(repo=str(repo.path)))
    try:
        result = _rendered(app.test_client(), "/ui/agents/u/many", inputs="{}")
    finally:
        app.extensions["prompt_registry.service"].close()
    assert result.count("<mark>{x}</mark>") == MAX_MARKED and result.count("{x}") == MAX_MARKED + 5 + 1
    assert f"Only the first {MAX_MARKED} of the {MAX_MARKED + 5} places they hold are boxed" in result
    assert f"<td>user ({MAX_MARKED + 5} times)</td>" in result


def test_a_render_that_leaves_no_placeholder_lists_none(leaves: FlaskClient, ui: FlaskClient) -> None:
    url = "/ui/agents/explain_code/snippet?release=v1.1.0"
    result = _rendered(ui, url, code="print('{x}')", language="python")
    assert "Placeholders left" not in result and "<mark>" not in result and "print(&#39;{x}&#39;)" in result


def test_a_playground_post_without_the_csrf_token_is_refused(ui: FlaskClient) -> None:
    page(ui, "/ui/agents/explain_code/snippet?release=v1.1.0")
    response = ui.post("/ui/agents/explain_code/snippet?release=v1.1.0", data={"code": "x"})
    assert response.status_code == 400 and "CSRF" in response.get_data(as_text=True)


def test_a_composite_page_draws_its_graph(ui: FlaskClient) -> None:
    text = page(ui, "/ui/agents/support/routed_answer?release=v1.1.0")
    assert "<svg" in text and 'href="/ui/agents/support/classify_request?release=v1.1.0"' in text
    assert "Worst case: <strong>3</strong>" in text


def test_the_diff_page_classifies_the_release(ui: FlaskClient) -> None:
    text = page(ui, "/ui/diff?from=v1.0.0&to=v1.1.0")
    assert "Release class" in text and "added" in text and "assistant/react_text" in text


def test_an_unknown_release_is_an_html_page_with_the_problem(ui: FlaskClient) -> None:
    text = page(ui, "/ui/agents?release=v9", status=404)
    assert "release-not-found" in text


# --- hostile content --------------------------------------------------------------------

HOSTILE = """\
name: "<script>alert('name')</script>"
description: "<img src=x onerror=alert(1)> \\u202Eevil right-to-left \\u05e9\\u05dc\\u05d5\\u05dd"
prompt_templates:
  system: "</pre><script>alert('template')</script>{{ question }}"
  user: "{{ question }}"
inputs:
  type: object
  required: [question]
  properties:
    question: {type: string, description: "<b onmouseover=alert(1)>hover</b>", default: "\\"><script>alert(2)</script>"}
"""


@pytest.fixture
def hostile(repo: LibraryRepo) -> Any:
    long_line = "x" * 20000
    big = "{{ question }}\n" + ("A line of a very large template.\n" * 32000)
    repo.release(
        "v1.0.0",
        {
            "evil/agent.yml": HOSTILE,
            "evil/long.yml": leaf("long", long_line + " {{ question }}", question="string"),
            "evil/big.yml": "name: big\nprompt_templates:\n  user: |\n"
            + "".join(f"    {line}\n" for line in big.splitlines()),
            "evil/gate.yml": json_leaf("<gate>", "{{ reply }}", GATE_SCHEMA, reply="string"),
        },
    )
    # Templates of a megabyte need the operator's leave: the default cap is 256 KiB.
    app = create_app(Settings(repo=str(repo.path), max_definition_bytes=2 * 1024 * 1024))
    yield app.test_client()
    app.extensions["prompt_registry.service"].close()


def test_hostile_agent_text_is_inert(hostile: FlaskClient) -> None:
    text = page(hostile, "/ui/agents/evil/agent")
    assert "<script>alert" not in text and "<img src=x" not in text and "<b onmouseover" not in text
    assert "&lt;script&gt;alert(&#39;name&#39;)&lt;/script&gt;" in text or "&lt;script&gt;" in text
    listing = page(hostile, "/ui/agents")
    assert "<script>alert" not in listing


def test_long_lines_and_a_megabyte_template_are_shown(hostile: FlaskClient) -> None:
    assert "x" * 1000 in page(hostile, "/ui/agents/evil/long")
    assert "A line of a very large template." in page(hostile, "/ui/agents/evil/big")


# --- sign in ----------------------------------------------------------------------------


@pytest.fixture
def locked(example: Path) -> Any:
    app = create_app(Settings(repo=str(example), api_tokens=(TOKEN,)))
    yield app.test_client()
    app.extensions["prompt_registry.service"].close()


def test_with_tokens_pages_ask_to_sign_in_and_the_session_cookie_is_strict(locked: FlaskClient) -> None:
    response = locked.get("/ui/agents?release=v1.1.0")
    assert response.status_code == 302 and response.headers["Location"].startswith("/ui/login")
    form = page(locked, "/ui/login")
    wrong = locked.post("/ui/login", data={"csrf_token": csrf(form), "token": "nope"})
    assert wrong.status_code == 401
    right = locked.post(
        "/ui/login", data={"csrf_token": csrf(form), "token": TOKEN, "next": "/ui/agents?release=v1.1.0"}
    )
    assert right.status_code == 302 and right.headers["Location"] == "/ui/agents?release=v1.1.0"
    cookie = right.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert "support/gated_answer" in page(locked, "/ui/agents?release=v1.1.0")


def test_sign_in_never_redirects_off_the_site(locked: FlaskClient) -> None:
    form = page(locked, "/ui/login")
    response = locked.post(
        "/ui/login", data={"csrf_token": csrf(form), "token": TOKEN, "next": "https://evil.example/"}
    )
    assert response.headers["Location"] == "/ui/"


@pytest.mark.parametrize("url", ["/ui/agents?relase=v1.0.0", "/ui/agents?release=v1.0.0&release=v1.1.0", "/ui/?x=1"])
def test_a_page_refuses_a_query_parameter_it_does_not_read(ui: FlaskClient, url: str) -> None:
    text = page(ui, url, status=400)
    assert "invalid-request" in text
    if "relase" in url:
        assert "did you mean" in text and "release" in text


def test_an_unknown_page_is_an_html_404(ui: FlaskClient) -> None:
    assert "there is no page /ui/nowhere" in page(ui, "/ui/nowhere", status=404)


def test_a_client_that_asks_the_root_for_json_is_given_the_ui_too(ui: FlaskClient) -> None:
    answer = ui.get("/", headers={"Accept": "application/json"})
    assert answer.get_json()["links"]["ui"] == "/ui/"
    page(ui, answer.get_json()["links"]["ui"])


# --- what a page says, and how ------------------------------------------------------------


def test_the_playground_gives_short_strings_one_line_and_labels_name_no_widget(ui: FlaskClient) -> None:
    text = page(ui, "/ui/agents/explain_code/snippet?release=v1.1.0")
    form = text[text.index('id="render-form"') :]
    # language and file_path declare no length: one line each; code may be 20000 characters.
    assert re.search(r'<input id="in-language" name="language" type="text"', form)
    assert re.search(r'<input id="in-file_path" name="file_path" type="text"', form)
    assert re.search(r'<textarea id="in-code" name="code"', form)
    labels = re.findall(r"<label for=\"in-[^\"]+\">(.*?)</label>", form, re.S)
    assert labels and not any(re.search(r"\b(text|textarea|select|json|integer)\b", label) for label in labels)


def test_counts_are_worded_in_the_singular_and_the_plural(ui: FlaskClient) -> None:
    # Its user template is "{{ question }}\n": one line, ended by a line break.
    agent = page(ui, "/ui/agents/chat/tool_calling?release=v1.1.0")
    assert '<h3>user <span class="muted">(1 line)</span></h3>' in agent
    diff = page(ui, "/ui/diff?from=v1.0.0&to=v1.1.0")
    heading = re.search(r'<h2 id="changes">Agents \(([^)]*)\)</h2>', diff)
    # v1.1.0 adds the assistant usecase and changes two support prompts (and the composites running them).
    assert heading and re.fullmatch(r"\d+ added, \d+ changed, \d+ unchanged", heading.group(1)), heading


def test_an_invalid_agent_keeps_the_hint_of_lint(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"u/bad.yml": "name: bad\ndescripton: x\nprompt_templates:\n  user: hi\n"})
    app = create_app(Settings(repo=str(repo.path)))
    try:
        client = app.test_client()
        for url, status in (("/ui/agents/u/bad", 422), ("/ui/agents", 200)):
            assert "did you mean &#39;description&#39;?" in page(client, url, status=status), url
    finally:
        app.extensions["prompt_registry.service"].close()


def test_a_diff_with_a_release_that_is_not_there_keeps_the_form_to_correct_it(ui: FlaskClient) -> None:
    text = page(ui, "/ui/diff?from=v9.9.9&to=v1.1.0", status=404)
    assert '<input id="from" name="from" value="v9.9.9"' in text and '<input id="to" name="to" value="v1.1.0"' in text
    assert "release-not-found" in text and 'role="alert"' in text
