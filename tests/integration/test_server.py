"""Serving under gunicorn: real ``prompt-registry serve`` processes, stopped by PID."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator

import pytest

from registry.settings import BUNDLED_LIBRARY
from registry.web.server import REQUESTS_PER_CONNECTION
from tests.support.servers import (
    RegistryProcess,
    clean_environment,
    established_connections,
    keep_alive_load,
    live_workers,
)
from tests.support.waits import LATE


def _quiet_environment() -> dict[str, str]:
    # The server's output is read only once it stops: thousands of access
    # log lines would fill the pipe and block it.
    return {**clean_environment(), "REGISTRY_ACCESS_LOG": "0"}


def _eventually(condition: Callable[[], bool], *, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(0.05)


def test_a_kept_alive_connection_is_closed_after_its_share_of_requests() -> None:
    with RegistryProcess("--worktree", str(BUNDLED_LIBRARY), env=_quiet_environment()) as server:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        connection.connect()
        first = connection.sock
        # http.client closes its socket on "Connection: close"; a duplicate
        # shows whether the server closed its end.
        with first.dup() as peer, contextlib.closing(connection):
            for number in range(1, REQUESTS_PER_CONNECTION + 1):
                connection.request("GET", "/healthz")
                response = connection.getresponse()
                response.read()
                assert response.status == 200
                if number < REQUESTS_PER_CONNECTION:
                    assert connection.sock is first and response.getheader("Connection") != "close"
            assert response.getheader("Connection") == "close"
            assert peer.recv(1) == b""


def test_a_stop_closes_an_idle_kept_alive_connection_rather_than_wait_it_out() -> None:
    # Connections kept alive for a minute (LATE): a stop that waited for the
    # idle one would reach gunicorn's graceful timeout (10 s) first, and its
    # master would kill the worker rather than see it exit.
    environment = {**_quiet_environment(), "REGISTRY_KEEPALIVE": str(int(LATE)), "REGISTRY_WORKERS": "1"}
    with RegistryProcess("--worktree", str(BUNDLED_LIBRARY), env=environment) as server:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=LATE / 4)
        connection.request("GET", "/healthz")
        response = connection.getresponse()
        response.read()
        assert response.status == 200 and response.getheader("Connection") != "close"
        with contextlib.closing(connection):
            master = server.master()
            master.send_signal(signal.SIGTERM)
            assert connection.sock.recv(1) == b""
            assert master.wait(timeout=LATE / 4) == 0
    assert "Worker exiting" in server.output and "Traceback" not in server.output, server.output


def test_load_spreads_back_over_both_workers_after_one_is_killed() -> None:
    with RegistryProcess(
        "--worktree", str(BUNDLED_LIBRARY), "--workers", "2", "--threads", "4", env=_quiet_environment()
    ) as server:
        master = server.master()
        _eventually(lambda: len(live_workers(master)) == 2)
        with keep_alive_load(server.port, "/v1/releases", clients=4) as answered:
            _eventually(lambda: sum(established_connections(w, server.port) for w in live_workers(master)) == 4)
            busiest = max(live_workers(master), key=lambda w: established_connections(w, server.port))
            os.kill(busiest.pid, signal.SIGKILL)
            _eventually(
                lambda: busiest.pid not in {w.pid for w in live_workers(master)} and len(live_workers(master)) == 2
            )
            # The clients reconnect at once, all to the survivor; the
            # replacement gets its share as their connections are closed.
            _eventually(
                lambda: all(established_connections(w, server.port) > 0 for w in live_workers(master)), within=60
            )
            before = sum(answered)
            _eventually(lambda: sum(answered) > before + 100, within=60)


_SLOW_STARTS = {
    # One byte of a request line, then nothing.
    "one byte": (b"G", b""),
    # A request line, then one byte of a header at a time.
    "header drip": (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: ", b"a" * 1000),
    # Complete headers, then one byte of the body at a time.
    "body drip": (
        b"POST /v1/agents/chat/minimal/render?release=worktree HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n",
        b"{" + b" " * 999,
    ),
}


@contextlib.contextmanager
def _slow_connections(port: int, kind: str, *, count: int) -> Iterator[list[socket.socket]]:
    """``count`` connections that send the start of a request, then one more
    byte every half second, until the block ends."""
    start, drip = _SLOW_STARTS[kind]
    sockets = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(count)]
    stop = threading.Event()

    def dribble() -> None:
        for byte in drip:
            if stop.wait(0.5):
                return
            for sock in sockets:
                with contextlib.suppress(OSError):
                    sock.sendall(bytes([byte]))

    for sock in sockets:
        sock.sendall(start)
    dripper = threading.Thread(target=dribble)
    dripper.start()
    try:
        yield sockets
    finally:
        stop.set()
        dripper.join(timeout=5)
        for sock in sockets:
            sock.close()


@pytest.mark.parametrize("kind", sorted(_SLOW_STARTS))
def test_slow_clients_cost_a_socket_not_a_thread(kind: str) -> None:
    # One worker of four threads under gthread: eight slow clients would hold every thread.
    with RegistryProcess("--worktree", str(BUNDLED_LIBRARY), "--threads", "4", env=_quiet_environment()) as server:
        with _slow_connections(server.port, kind, count=8):
            time.sleep(0.5)  # every slow connection has been accepted and started
            for _ in range(20):
                with urllib.request.urlopen(server.base + "/v1/agents/chat/minimal?release=worktree", timeout=3) as r:
                    assert r.status == 200


def test_a_client_that_stops_sending_its_headers_is_disconnected() -> None:
    environment = {**_quiet_environment(), "REGISTRY_KEEPALIVE": "1"}
    with RegistryProcess("--worktree", str(BUNDLED_LIBRARY), env=environment) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=LATE / 4) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: ")
            assert sock.recv(1024) == b""  # within the keepalive (1 s), or the timeout fails the test


def test_a_body_not_sent_within_the_deadline_is_answered_408() -> None:
    environment = {**_quiet_environment(), "REGISTRY_BODY_SECONDS": "1"}
    with RegistryProcess("--worktree", str(BUNDLED_LIBRARY), env=environment) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            start, _ = _SLOW_STARTS["body drip"]
            sock.sendall(start + b'{"inputs": ')
            answer = b""
            while b"}" not in answer.partition(b"\r\n\r\n")[2]:
                chunk = sock.recv(4096)
                assert chunk, f"closed without an answer: {answer!r}"
                answer += chunk
        # The body was refused, not the server: it still answers.
        with urllib.request.urlopen(server.base + "/healthz", timeout=5) as response:
            assert response.status == 200
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 ")
    assert b"Content-Type: application/problem+json" in head
    problem = json.loads(body)
    assert problem["type"] == "/problems/request-timeout" and problem["status"] == 408


_SPINNING_AGENT = """\
name: Spins until its clock runs out
prompt_templates:
  user: "{% for i in range(90000) %}{{ ('ab' * 20000) | replace('a', 'c') | length }}{% endfor %}"
"""


def test_a_long_render_lets_other_requests_through_between_its_slices(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """One gevent worker: a render that computes for seconds must not hold
    every other request of its worker until it is done (registry.web.slowlane)."""
    agents = tmp_path / "ai_gateway" / "agents" / "slow"
    agents.mkdir(parents=True)
    (agents / "spin.yml").write_text(_SPINNING_AGENT)
    (agents / "quick.yml").write_text("name: Quick\nprompt_templates:\n  user: hello\n")
    environment = {**_quiet_environment(), "REGISTRY_MAX_RENDER_SECONDS": "4"}
    with RegistryProcess("--worktree", str(tmp_path), env=environment) as server:
        rendered = threading.Event()
        answers: list[int] = []

        def render() -> None:
            request = urllib.request.Request(
                server.base + "/v1/agents/slow/spin/render?release=worktree", data=b"{}", method="POST"
            )
            request.add_header("Content-Type", "application/json")
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    answers.append(response.status)
            except urllib.error.HTTPError as refused:  # the render's clock ran out: 422, as it may
                answers.append(refused.code)
            rendered.set()

        spinner = threading.Thread(target=render)
        spinner.start()
        time.sleep(0.5)  # the render is under way: it computes for seconds
        try:
            for _ in range(5):
                with urllib.request.urlopen(server.base + "/v1/agents/slow/quick?release=worktree", timeout=30) as r:
                    assert r.status == 200
            assert not rendered.is_set(), "the GETs waited for the render to finish"
        finally:
            spinner.join(timeout=60)
        assert answers and answers[0] in (200, 422)


@pytest.mark.parametrize("worker_class", ["gevent", "gthread"])
def test_requests_the_server_cannot_parse_are_answered_with_problems(worker_class: str) -> None:
    """gunicorn answers these itself, before the application: in HTML, until
    the registry's workers answered them as problems like every other error."""
    requests = {
        414: b"GET /v1/agents/chat/minimal?release=" + b"v" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        431: b"GET /healthz HTTP/1.1\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(150)) + b"\r\n",
        400: b"GET /healthz HTTP/1.1\r\nBad Header Name: v\r\n\r\n",
    }
    slugs = {414: "uri-too-long", 431: "headers-too-large", 400: "invalid-request"}
    environment = {**_quiet_environment(), "REGISTRY_WORKER_CLASS": worker_class}
    with RegistryProcess("--worktree", str(BUNDLED_LIBRARY), env=environment) as server:
        for status, raw in requests.items():
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
                sock.sendall(raw)
                answer = b""
                while chunk := sock.recv(65536):
                    answer += chunk
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 %d " % status), head
            assert b"Content-Type: application/problem+json" in head
            problem = json.loads(body)
            assert problem["type"] == f"/problems/{slugs[status]}" and problem["status"] == status
            assert b"<html" not in body and b"vvvvvvvvvv" not in body
        with urllib.request.urlopen(server.base + "/healthz", timeout=5) as response:
            assert response.status == 200
