"""registry.client against a registry app in process (httpx's WSGI
transport), over real git; against real processes, the export command and a
server on a free port: tests/integration/test_client_processes.py."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from enum import IntEnum
from pathlib import Path
from typing import Any

import httpx
import pytest
from flask import Flask
from hypothesis import given, settings
from hypothesis import strategies as st

from registry.client import (
    AgentNotFound,
    InvalidDefinition,
    InvalidInputs,
    InvalidRequest,
    RegistryClient,
    RegistryUnavailable,
    ReleaseNotFound,
    RenderError,
    RetryPolicy,
)
from registry.client.agent import _plain_json_within, as_request_json
from registry.client.retry_after import MAX_RETRY_AFTER, parse_retry_after
from registry.format.bundle import Bundle
from registry.format.inputbudget import MAX_VALIDATED_DEPTH, measure
from registry.rendering import RenderLimits
from registry.settings import Settings
from tests.conftest import MINIMAL, LibraryRepo, eventually, make_app, schema_says
from tests.support.ports import free_port
from tests.support.registry_client import QUICK_RETRIES, RULES_INPUTS
from tests.support.waits import LATE


class RecordingTransport(httpx.WSGITransport):
    """The registry app in process; records every exchange, and answers with an
    injected fault instead when a test queues one."""

    def __init__(self, app: Flask) -> None:
        super().__init__(app=app)
        self.exchanges: list[tuple[str, str, int]] = []
        self.faults: list[httpx.Response | Exception] = []
        self._lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with self._lock:
            fault = self.faults.pop(0) if self.faults else None
        if isinstance(fault, Exception):
            self.exchanges.append((request.method, request.url.path, 0))
            raise fault
        response = fault if fault is not None else super().handle_request(request)
        self.exchanges.append((request.method, request.url.path, response.status_code))
        return response

    def statuses(self) -> list[int]:
        return [status for _, _, status in self.exchanges]


@pytest.fixture
def registry_app(released_repo: LibraryRepo) -> Iterator[Flask]:
    app = make_app(Settings(repo=str(released_repo.path)))
    yield app
    app.extensions["prompt_registry.service"].close()


@pytest.fixture
def transport(registry_app: Flask) -> RecordingTransport:
    return RecordingTransport(registry_app)


def _client(transport: httpx.BaseTransport, **options: Any) -> RegistryClient:
    options.setdefault("retries", QUICK_RETRIES)
    return RegistryClient("http://registry", transport=transport, **options)


# -- fetching and caching -------------------------------------------------------


def test_get_by_exact_tag_is_fetched_once_and_kept(transport: RecordingTransport, released_repo: LibraryRepo) -> None:
    client = _client(transport, release="v1.1.0", ttl=0)
    first = client.get("chat", "with_rules")
    assert first.source == "server"
    assert (first.usecase, first.name, first.title) == ("chat", "with_rules", "Agent with shared rules")
    assert first.tag == "v1.1.0" and first.commit == released_repo.git("rev-parse", "v1.1.0^{commit}")
    assert first.digest.startswith("sha256:")
    assert first.partials == {"_partials/rules.jinja": "Rules:\n{% for rule in rules %}- {{ rule }}\n{% endfor %}"}
    again = client.get("chat", "with_rules")
    assert again.source == "cache" and again.digest == first.digest
    time.sleep(0.05)
    assert client.get("chat", "with_rules").source == "cache"
    assert transport.statuses() == [200]  # ttl=0 does not apply to an immutable tag


def test_a_range_goes_stale_after_its_ttl_and_is_revalidated_in_the_background(
    transport: RecordingTransport,
) -> None:
    client = _client(transport, release="^1.0", ttl=0.2)
    assert client.get("chat", "minimal").source == "server"
    assert client.get("chat", "minimal").source == "cache"
    time.sleep(0.3)
    stale = client.get("chat", "minimal")  # answered at once, from the stale entry
    assert stale.source == "cache" and stale.tag == "v1.1.0"
    eventually(lambda: transport.statuses() == [200, 304])
    assert transport.exchanges[1][1] == "/v1/agents/chat/minimal"


def test_a_revalidation_that_finds_a_new_release_replaces_the_entry(
    transport: RecordingTransport, released_repo: LibraryRepo
) -> None:
    client = _client(transport, release="^1.0", ttl=0.1)
    assert client.get("chat", "minimal").tag == "v1.1.0"
    released_repo.release("v1.2.0", {"chat/minimal.yml": MINIMAL.replace("helpful", "precise")})
    time.sleep(0.15)
    client.get("chat", "minimal")
    eventually(lambda: client.get("chat", "minimal").tag == "v1.2.0")
    assert "precise" in client.get("chat", "minimal").render(question="q").messages[0].content


def test_a_304_for_a_moved_range_updates_the_provenance(
    transport: RecordingTransport, released_repo: LibraryRepo
) -> None:
    client = _client(transport, release="^1.0", ttl=0.1)
    assert client.get("chat", "with_rules").tag == "v1.1.0"
    released_repo.write("chat/other.yml", MINIMAL)  # with_rules itself is unchanged
    released_repo.commit("add other")
    released_repo.tag("v1.3.0")
    time.sleep(0.15)
    client.get("chat", "with_rules")
    eventually(lambda: client.get("chat", "with_rules").tag == "v1.3.0")
    assert 304 in transport.statuses()
    assert client.get("chat", "with_rules").commit == released_repo.git("rev-parse", "v1.3.0^{commit}")


def test_releases_and_resolve(transport: RecordingTransport) -> None:
    client = _client(transport, release="^1.0")
    releases = client.releases()
    assert releases.latest == "v1.1.0"
    assert [r.tag for r in releases.releases][:2] == ["v2.0.0-rc.1", "v1.1.0"]
    assert client.resolve().release.tag == "v1.1.0"
    assert client.resolve("v1.0.0").release.tag == "v1.0.0"


def test_agents_lists_a_release_and_says_what_it_resolved_to(
    transport: RecordingTransport, released_repo: LibraryRepo
) -> None:
    client = _client(transport, release="^1.0")
    catalog = client.agents()
    assert catalog.resolution.release.tag == "v1.1.0"
    assert catalog.resolution.release.commit == released_repo.git("rev-parse", "v1.1.0^{commit}")
    assert [(a.usecase, a.name, a.valid) for a in catalog.agents] == [
        ("chat", "minimal", True),
        ("chat", "with_rules", True),
    ]
    assert [a.name for a in client.agents("v1.0.0").agents] == ["minimal"]
    released_repo.release("v1.2.0", {"chat/broken.yml": "name: [unclosed"})
    broken = next(a for a in client.agents("v1.2.0").agents if a.name == "broken")
    assert not broken.valid and broken.errors and broken.title is None


# -- typed errors -----------------------------------------------------------------


def test_errors_are_typed_like_the_servers_problems(transport: RecordingTransport, released_repo: LibraryRepo) -> None:
    client = _client(transport)
    with pytest.raises(AgentNotFound):
        client.get("chat", "absent")
    with pytest.raises(ReleaseNotFound):
        client.get("chat", "minimal", release="v9.9.9")
    with pytest.raises(InvalidRequest):
        client.get("chat", "minimal", release="HEAD~1")
    with pytest.raises(InvalidRequest):
        RegistryClient("http://registry", release="not a range!", transport=transport)
    released_repo.release("v1.4.0", {"chat/broken.yml": "name: [unclosed"})
    with pytest.raises(InvalidDefinition) as broken:
        client.get("chat", "broken", release="v1.4.0")
    assert broken.value.errors and (broken.value.errors[0].file or "").endswith("chat/broken.yml")
    with pytest.raises(InvalidInputs) as invalid:
        client.render("chat", "with_rules", {"question": 3}, release="v1.1.0")
    assert {e.path for e in invalid.value.errors} == {"/question", "/rules"}
    assert transport.statuses().count(404) == 2  # nothing retried but failures of the transport


def test_input_errors_say_what_is_wrong_for_which_agent_at_which_release(transport: RecordingTransport) -> None:
    client = _client(transport, release="v1.1.0")
    agent = client.get("chat", "with_rules")
    with pytest.raises(InvalidInputs) as local:
        agent.render(rules=["a"])
    with pytest.raises(InvalidInputs) as remote:
        client.render("chat", "with_rules", {"rules": ["a"]})
    assert str(local.value) == str(remote.value) == "missing required input 'question' (chat/with_rules at v1.1.0)"
    with pytest.raises(InvalidInputs) as several:
        client.render("chat", "with_rules", {"question": 3})
    assert str(several.value) == (
        f"/question: {schema_says({'type': 'string'}, 3)}, and 1 more problem (chat/with_rules at v1.1.0)"
    )
    # A range is named by the release it resolved to.
    with pytest.raises(InvalidInputs) as ranged:
        _client(transport, release="^1.0").get("chat", "with_rules").render(question="q")
    assert str(ranged.value) == "missing required input 'rules' (chat/with_rules at v1.1.0)"
    # So is a server render: the problem carries the agent and the tag.
    with pytest.raises(InvalidInputs) as ranged_remote:
        _client(transport, release="^1.0").render("chat", "with_rules", {"question": "q"})
    assert str(ranged_remote.value) == "missing required input 'rules' (chat/with_rules at v1.1.0)"


def test_render_and_definition_errors_name_the_agent_and_release(
    transport: RecordingTransport, released_repo: LibraryRepo
) -> None:
    client = _client(transport, release="v1.0.0")
    with pytest.raises(RenderError) as local:
        client.get("chat", "minimal").render()
    with pytest.raises(RenderError) as remote:
        client.render("chat", "minimal", {})
    assert str(local.value) == str(remote.value) == "user template: 'question' is undefined (chat/minimal at v1.0.0)"
    released_repo.release("v1.4.0", {"chat/typo.yml": "name: A\nprompt_templates:\n  user: hi\nmodle: x\ntemp: 1\n"})
    with pytest.raises(InvalidDefinition) as invalid:
        client.get("chat", "typo", release="v1.4.0")
    assert str(invalid.value) == (
        "ai_gateway/agents/chat/typo.yml:4:1: unknown key 'modle', and 1 more problem (chat/typo at v1.4.0)"
    )


# -- local rendering parity ----------------------------------------------------


@pytest.mark.parametrize(
    ("agent", "inputs"),
    [
        ("minimal", {"question": "What is 2+2?"}),
        ("with_rules", RULES_INPUTS),
        ("with_rules", {"question": "ünïcødé ✓", "rules": []}),
    ],
)
def test_local_render_equals_the_server_render(
    transport: RecordingTransport, agent: str, inputs: dict[str, Any]
) -> None:
    client = _client(transport, release="v1.1.0")
    local = client.get("chat", agent).render(inputs)
    remote = client.render("chat", agent, inputs)
    assert local == remote
    assert local.as_dicts()[0]["role"] == "system"


SEED = """\
name: The seed's format
prompt_templates:
  system: "Tools: {{ tools | join(', ') }}. Answer as {\\"answer\\": \\"...\\"}"
  assistant: |
    {agent_scratchpad}
    Thought:
  user: "Question: {question} {% if code is defined %}{{ code }}{% endif %}"
"""


@pytest.mark.parametrize(
    "inputs",
    [
        {"tools": ["search"]},
        {"tools": ["search"], "question": "Why {agent_scratchpad}?"},
        {"tools": ["{question}"], "question": {"nested": ["é"]}, "code": "f'{x}' {question}"},
    ],
)
def test_a_render_lists_the_placeholders_it_leaves_locally_as_on_the_server(
    repo: LibraryRepo, inputs: dict[str, Any]
) -> None:
    app = make_app(Settings(repo=str(repo.release("v1.0.0", {"chat/seed.yml": SEED}).path)))
    try:
        client = _client(RecordingTransport(app), release="v1.0.0")
        local = client.get("chat", "seed").render(inputs)
        assert local == client.render("chat", "seed", inputs)
        assert local.placeholders[0].name == "agent_scratchpad"
        for placeholder in local.placeholders:
            content = local.messages[placeholder.message].content
            assert content[placeholder.start : placeholder.end] == "{" + placeholder.name + "}"
    finally:
        app.extensions["prompt_registry.service"].close()


def test_render_question_fills_the_seeds_question(repo: LibraryRepo) -> None:
    app = make_app(Settings(repo=str(repo.release("v1.0.0", {"chat/seed.yml": SEED}).path)))
    try:
        prompt = _client(RecordingTransport(app)).get("chat", "seed").render(tools=[], question="Why?")
    finally:
        app.extensions["prompt_registry.service"].close()
    assert prompt.messages[2].content == "Question: Why? "
    assert [p.name for p in prompt.placeholders] == ["agent_scratchpad"]


@pytest.mark.parametrize(
    "placeholders",
    [
        [{"message": 5, "name": "x", "start": 0, "end": 3}],
        [{"message": 0, "name": "y", "start": 0, "end": 3}],
        [{"message": 0, "name": "x", "start": -3, "end": 3}],
        [{"message": True, "name": "x", "start": 0, "end": 3}],
        [{"message": 0, "name": "x"}],
        {"x": 1},
    ],
)
def test_a_render_answer_whose_placeholders_are_not_where_they_say_is_malformed(
    transport: RecordingTransport, placeholders: Any
) -> None:
    body = {"messages": [{"role": "user", "content": "{x}"}], "model": None, "params": None}
    transport.faults.append(httpx.Response(200, json={**body, "placeholders": placeholders}))
    with pytest.raises(RegistryUnavailable, match="malformed"):
        _client(transport).render("chat", "minimal", {"question": "q"})
    transport.faults.append(httpx.Response(200, json=body))  # a registry from before placeholders
    assert _client(transport).render("chat", "minimal", {"question": "q"}).placeholders == ()


@pytest.mark.parametrize(
    "inputs",
    [
        {"question": 3, "rules": "no"},
        {"rules": ["a"]},
        {"question": "q", "rules": ["a"], "extra": {"nested": [1, 2, 3]}},
    ],
)
def test_local_input_errors_equal_the_servers(transport: RecordingTransport, inputs: dict[str, Any]) -> None:
    client = _client(transport, release="v1.1.0")
    agent = client.get("chat", "with_rules")
    with pytest.raises(InvalidInputs) as local:
        agent.render(inputs)
    with pytest.raises(InvalidInputs) as remote:
        client.render("chat", "with_rules", inputs)
    assert local.value.errors == remote.value.errors


def test_local_render_errors_and_json_round_trip(transport: RecordingTransport) -> None:
    client = _client(transport, release="v1.0.0")
    agent = client.get("chat", "minimal")
    with pytest.raises(RenderError) as local:
        agent.render()
    with pytest.raises(RenderError) as remote:
        client.render("chat", "minimal", {})
    assert str(local.value) == str(remote.value)
    with pytest.raises(InvalidRequest):
        agent.render(question=float("nan"))
    with pytest.raises(InvalidRequest):
        agent.render(question=object())
    # A tuple travels as a JSON array, locally as on the wire.
    assert agent.render(question=("a", 1)) == client.render("chat", "minimal", {"question": ["a", 1]})


Level = IntEnum("Level", "LOW HIGH")
_JSONISH = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=6)
    | st.sampled_from(["\ud800", "a\udfff", "日本", Level.HIGH]),
    lambda children: (
        st.lists(children, max_size=4)
        | st.lists(children, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=3) | st.integers(-3, 3) | st.sampled_from(["\udc00"]), children, max_size=3)
    ),
    max_leaves=10,
)


@pytest.mark.slow  # 500 generated inputs: seconds of pure Python
@given(st.dictionaries(st.text(max_size=4), _JSONISH, max_size=4))
@settings(max_examples=500, deadline=None)
def test_inputs_are_taken_as_a_json_round_trip_would_give_them(inputs: dict[str, Any]) -> None:
    try:
        expected = json.loads(json.dumps(inputs, ensure_ascii=False, allow_nan=False).encode("utf-8"))
    except ValueError:  # NaN, infinity, a lone surrogate
        with pytest.raises(InvalidRequest):
            as_request_json(inputs)
        return
    taken = as_request_json(inputs)
    assert taken == expected
    assert json.dumps(taken) == json.dumps(expected)  # same types too: 1 and 1.0, True and 1


def test_inputs_json_cannot_carry_are_refused_however_large_or_cyclic() -> None:
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    with pytest.raises(InvalidRequest):
        as_request_json({"x": cyclic})
    with pytest.raises(InvalidRequest):
        as_request_json({"x": list(range(1000)) + ["\ud800"]})  # past what is checked by walking
    assert as_request_json({"x": [[i] for i in range(1000)]}) == {"x": [[i] for i in range(1000)]}
    with pytest.raises(InvalidRequest):
        as_request_json({"x": 10**5000})  # past the json module's 4,300 digits


_SMALL_BUDGET = RenderLimits(max_input_values=12, max_input_chars=24)
_PLAIN_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=16,
)


@pytest.mark.slow  # 500 generated inputs: seconds of pure Python
@given(st.dictionaries(st.text(max_size=6), _PLAIN_JSON | _JSONISH, max_size=5))
@settings(max_examples=500, deadline=None)
def test_the_clients_one_walk_counts_the_budget_as_the_server_measures_it(inputs: dict[str, Any]) -> None:
    """A render skips ``measure`` when the client's walk found the inputs
    within budget: the walk must never say so of inputs measure refuses."""
    if _plain_json_within(inputs, None):
        within = measure(inputs, max_values=_SMALL_BUDGET.max_input_values, max_chars=_SMALL_BUDGET.max_input_chars)
        assert _plain_json_within(inputs, _SMALL_BUDGET) == (within is None)


def test_the_clients_walk_knows_the_nesting_limit() -> None:
    def nested(levels: int) -> Any:
        value: Any = [1]
        for _ in range(levels - 1):
            value = [value]
        return value

    for levels in (MAX_VALIDATED_DEPTH - 1, MAX_VALIDATED_DEPTH, MAX_VALIDATED_DEPTH + 1):
        inputs = {"x": nested(levels)}
        assert _plain_json_within(inputs, RenderLimits()) == (measure(inputs) is None), levels


# -- faults -----------------------------------------------------------------------


def test_429_with_retry_after_is_retried_after_the_delay(transport: RecordingTransport) -> None:
    transport.faults.append(httpx.Response(429, headers={"Retry-After": "1"}))
    client = _client(transport, release="v1.0.0")
    started = time.monotonic()
    assert client.get("chat", "minimal").source == "server"
    # A lower bound on the client's own sleep, which never ends early: it cannot flake.
    assert time.monotonic() - started >= 0.9
    assert transport.statuses() == [429, 200]


def test_a_retry_after_longer_than_the_cap_is_not_waited_for(transport: RecordingTransport) -> None:
    transport.faults.append(httpx.Response(503, headers={"Retry-After": "3600"}))
    client = _client(transport, release="v1.0.0")
    with pytest.raises(RegistryUnavailable):
        client.get("chat", "minimal")
    assert transport.statuses() == [503]


# Sun, 06 Nov 1994 08:49:37 GMT, RFC 9110's example date, as "now".
NOW = 784111777.0


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("0", 0.0),
        ("120", 120.0),
        (" 7\t", 7.0),
        ("Sun, 06 Nov 1994 08:50:37 GMT", 60.0),  # IMF-fixdate
        ("Sunday, 06-Nov-94 08:50:37 GMT", 60.0),  # rfc850-date
        ("Sun Nov  6 08:50:37 1994", 60.0),  # asctime-date, in GMT
        ("Sun, 06 Nov 1994 08:48:37 GMT", 0.0),  # in the past: no wait
        ("Thu, 01 Jan 1970 00:00:00 GMT", 0.0),
        ("9" * 5000, MAX_RETRY_AFTER),  # more digits than int() takes
        ("1000000000000", MAX_RETRY_AFTER),
        ("Fri, 31 Dec 9999 23:59:59 GMT", MAX_RETRY_AFTER),
        ("1.5", None),  # delay-seconds is 1*DIGIT
        ("-1", None),
        ("+3", None),
        ("1e3", None),
        ("nan", None),
        ("inf", None),
        ("0x10", None),
        ("²", None),  # a digit to str.isdigit, not to RFC 9110
        ("٣", None),
        ("", None),
        ("soon", None),
        ("Sun, 31 Feb 1994 08:49:37 GMT", None),
        ("Sun, 06 Nov 99999 08:49:37 GMT", None),
        ("Sun, 06 Nov 1994 08:49:37 GMT" + " x" * 50_000, None),
        (None, None),
    ],
)
def test_retry_after_is_read_as_rfc_9110_says(value: str | None, seconds: float | None) -> None:
    assert parse_retry_after(value, now=NOW) == seconds


@pytest.mark.parametrize("value", ["²", "1.5", "-1", "garbage"])
def test_a_retry_after_that_is_not_one_falls_back_to_the_backoff(transport: RecordingTransport, value: str) -> None:
    transport.faults.append(httpx.Response(503, headers={b"Retry-After": value.encode()}))
    client = _client(transport, release="v1.0.0")
    assert client.get("chat", "minimal").source == "server"
    assert transport.statuses() == [503, 200]


def test_connection_errors_and_502s_are_retried(transport: RecordingTransport) -> None:
    transport.faults += [httpx.ConnectError("refused"), httpx.Response(502)]
    assert _client(transport, release="v1.0.0").get("chat", "minimal").source == "server"
    assert transport.statuses() == [0, 502, 200]


def test_500s_and_malformed_answers_are_unavailable_not_retried(transport: RecordingTransport) -> None:
    client = _client(transport, release="v1.0.0")
    transport.faults.append(httpx.Response(500, json={"type": "/problems/internal-error"}))
    with pytest.raises(RegistryUnavailable):
        client.get("chat", "minimal")
    transport.faults.append(httpx.Response(200, content=b'{"release": {"tag": '))
    with pytest.raises(RegistryUnavailable, match="malformed"):
        client.get("chat", "minimal")
    transport.faults.append(httpx.Response(200, json={"usecase": "chat"}))
    with pytest.raises(RegistryUnavailable, match="malformed"):
        client.get("chat", "minimal")
    assert transport.statuses() == [500, 200, 200]
    assert client.get("chat", "minimal").source == "server"


def test_render_posts_are_not_retried(transport: RecordingTransport) -> None:
    transport.faults.append(httpx.Response(503))
    with pytest.raises(RegistryUnavailable):
        _client(transport).render("chat", "minimal", {"question": "q"})
    assert transport.statuses() == [503]


def test_a_stale_entry_is_served_while_the_registry_fails_and_logged_once(
    transport: RecordingTransport, caplog: pytest.LogCaptureFixture
) -> None:
    client = _client(transport, release="^1.0", ttl=0.05)
    fetched = client.get("chat", "minimal")
    transport.faults += [httpx.ConnectError("down")] * 30
    caplog.set_level(logging.WARNING, logger="registry.client")
    for _ in range(5):
        time.sleep(0.06)
        agent = client.get("chat", "minimal")
        assert agent.source == "cache" and agent.digest == fetched.digest
    eventually(lambda: any("unavailable" in r.message for r in caplog.records))
    time.sleep(0.2)
    assert sum("unavailable" in r.message for r in caplog.records) == 1


class RawServer:
    """A TCP server on a free port that answers every connection with
    ``reply`` after ``delay`` seconds, then closes: for answers no well-behaved
    HTTP server would give."""

    def __init__(self, reply: bytes, *, delay: float = 0.0) -> None:
        self.port = free_port()
        self._socket = socket.create_server(("127.0.0.1", self.port))
        self._socket.settimeout(0.2)
        self._reply, self._delay = reply, delay
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._socket.accept()
            except OSError:
                continue
            with connection:
                connection.recv(65536)
                if self._stop.wait(self._delay):
                    return
                try:
                    connection.sendall(self._reply)
                except OSError:
                    pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._socket.close()


def test_truncated_bodies_and_slow_answers_are_unavailable() -> None:
    truncated = RawServer(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{"rel')
    # Its answer waits a minute (close() ends the wait unanswered): a client that
    # waited for it would get {} and no error.
    slow = RawServer(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", delay=LATE)
    try:
        with RegistryClient(f"http://127.0.0.1:{truncated.port}", retries=QUICK_RETRIES) as client:
            with pytest.raises(RegistryUnavailable, match="RemoteProtocolError"):
                client.get("chat", "minimal")
        with RegistryClient(f"http://127.0.0.1:{slow.port}", timeout=0.2, retries=RetryPolicy(attempts=1)) as client:
            with pytest.raises(RegistryUnavailable, match="Timeout"):
                client.get("chat", "minimal")
    finally:
        truncated.close()
        slow.close()


# -- bundles ----------------------------------------------------------------------


def _served_bundle(app: Flask, tmp_path: Path, release: str) -> Path:
    """The registry's ``GET /v1/bundle`` for ``release``, saved as a file."""
    response = app.test_client().get("/v1/bundle", query_string={"release": release})
    assert response.status_code == 200
    path = tmp_path / f"served-{release}.json"
    path.write_bytes(response.data)
    return path


def test_a_bundle_that_does_not_fit_the_pin_says_why_it_was_not_used(
    registry_app: Flask, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    path = _served_bundle(registry_app, tmp_path, "v1.1.0")
    down = f"http://127.0.0.1:{free_port()}"
    client = RegistryClient(down, release="^2", bundle=str(path), retries=QUICK_RETRIES)
    request.addfinalizer(client.close)
    with pytest.raises(RegistryUnavailable) as ranged:
        client.get("chat", "minimal")
    message = str(ranged.value)
    assert message.startswith(f"the registry at {down} is unavailable (")
    assert message.endswith(f"; the bundle {path} holds v1.1.0, which does not satisfy ^2")
    with pytest.raises(RegistryUnavailable) as exact:
        client.get("chat", "minimal", release="v1.0.0")
    assert str(exact.value).endswith(f"; the bundle {path} holds v1.1.0, not v1.0.0")
    with RegistryClient(down, retries=QUICK_RETRIES) as bare, pytest.raises(RegistryUnavailable) as nothing:
        bare.get("chat", "minimal")
    assert str(nothing.value).endswith("; nothing cached and no bundle")


def test_the_outage_warning_says_what_can_still_be_served(
    registry_app: Flask, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="registry.client")
    path = _served_bundle(registry_app, tmp_path, "v1.1.0")
    down = f"http://127.0.0.1:{free_port()}"
    warnings: dict[str, str] = {}
    cases: list[tuple[str, dict[str, Any]]] = [
        ("bare", {}),
        ("bundle", {"release": "^1.0", "bundle": str(path)}),
        ("unfit", {"release": "^2", "bundle": str(path)}),
    ]
    for case, options in cases:
        caplog.clear()
        with RegistryClient(down, retries=QUICK_RETRIES, **options) as client:
            try:
                client.get("chat", "minimal")
            except RegistryUnavailable:
                pass
        (warnings[case],) = [r.getMessage() for r in caplog.records if "unavailable" in r.getMessage()]
    assert warnings["bare"].endswith("; nothing cached or bundled to serve until it answers again")
    assert warnings["bundle"].endswith(f"; serving the bundle {path} (v1.1.0)")
    assert warnings["unfit"].endswith(
        f"; nothing cached to serve, and the bundle {path} holds v1.1.0, which does not satisfy ^2"
    )


def test_the_outage_warning_with_a_cache_says_it_serves_cached_prompts(
    transport: RecordingTransport, caplog: pytest.LogCaptureFixture
) -> None:
    client = _client(transport, release="^1.0", ttl=0)
    client.get("chat", "minimal")
    caplog.set_level(logging.WARNING, logger="registry.client")
    transport.faults += [httpx.ConnectError("down")] * 3
    with pytest.raises(RegistryUnavailable):
        client.get("chat", "with_rules")
    (warning,) = [r.getMessage() for r in caplog.records if "unavailable" in r.getMessage()]
    assert warning.endswith("; serving cached prompts")


# -- the server's side: partials in answers, GET /v1/bundle ----------------------


def test_an_agent_with_a_computed_include_carries_every_template_file(released_repo: LibraryRepo) -> None:
    dynamic = "name: Picks a partial\nprompt_templates:\n  system: \"{% include '_partials/' ~ which %}\"\n"
    released_repo.release("v1.6.0", {"chat/dynamic.yml": dynamic, "_partials/b.jinja": "B says {{ which }}"})
    app = make_app(Settings(repo=str(released_repo.path)))
    try:
        client = _client(RecordingTransport(app), release="v1.6.0")
        agent = client.get("chat", "dynamic")
        assert set(agent.partials) == {"_partials/rules.jinja", "_partials/b.jinja"}
        assert agent.render(which="b.jinja") == client.render("chat", "dynamic", {"which": "b.jinja"})
        with pytest.raises(RenderError):
            agent.render(which="../chat/minimal.yml")
    finally:
        app.extensions["prompt_registry.service"].close()


def test_get_bundle(registry_app: Flask) -> None:
    http = registry_app.test_client()
    response = http.get("/v1/bundle?release=v1.0.0")
    assert response.status_code == 200
    assert response.headers["Cache-Control"].endswith("immutable")
    assert Bundle(response.data).release.tag == "v1.0.0"
    again = http.get("/v1/bundle?release=v1.0.0", headers={"If-None-Match": response.headers["ETag"]})
    assert again.status_code == 304
    for query, status, slug in [
        ("release=v7.0.0", 404, "release-not-found"),
        ("release=HEAD~1", 400, "invalid-request"),
        ("release=v1.0.0&release=v1.1.0", 400, "invalid-request"),
    ]:
        problem = http.get(f"/v1/bundle?{query}")
        assert problem.json is not None
        assert (problem.status_code, problem.json["type"]) == (status, f"/problems/{slug}")
        assert problem.content_type == "application/problem+json"
