"""Live task events (``GET /ap/v1/agent/tasks/{task_id}/events``) from a real
``prompt-registry agents serve`` (gunicorn, uvicorn's worker, SQLite), read
by real HTTP clients: httpx streaming, and for a client that stops reading,
a socket that sends its request and reads nothing until the end, then reads
the answer with the standard library's HTTP client."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from registry.protocol.store import TaskStore
from tests.support.ports import free_port
from tests.support.servers import RegistryProcess, clean_environment
from tests.support.sse import WAIT_SECONDS, Comment, Message, Subscriber, parse
from tests.support.triage_agent import triage_service_command

TOKEN_A = "events-token-a-0123456789abcdef"
TOKEN_B = "events-token-b-0123456789abcdef"
BUFFER = 8
ENVIRONMENT = {
    "REGISTRY_API_TOKENS": f"{TOKEN_A},{TOKEN_B}",
    "REGISTRY_AGENTS_EVENTS_HEARTBEAT": "0.3",
    "REGISTRY_AGENTS_EVENTS_BUFFER": str(BUFFER),
}


class AgentsServer(RegistryProcess):
    """``agents serve`` over the triage agent, whose ``list_jobs`` waits for approval."""

    def __init__(self, directory: Path, database: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        port = free_port()
        command = [*triage_service_command(directory, port), "--database-url", f"sqlite:///{database}"]
        super().__init__(command=command, port=port, cwd=directory, env={**clean_environment(), **ENVIRONMENT})

    def headers(self, token: str = TOKEN_A) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    def create_task(self, token: str = TOKEN_A) -> str:
        body = {"additional_input": {"agent": "assistant/react_text", "inputs": {"pipeline_id": 7, "question": "Why?"}}}
        created = httpx.post(self.base + "/ap/v1/agent/tasks", json=body, headers=self.headers(token), timeout=30)
        assert created.status_code == 200, created.text
        return str(created.json()["task_id"])

    def step(self, task_id: str, **additional: str) -> None:
        answer = httpx.post(
            f"{self.base}/ap/v1/agent/tasks/{task_id}/steps",
            json={"additional_input": additional},
            headers=self.headers(),
            timeout=WAIT_SECONDS,
        )
        assert answer.status_code == 200, answer.text

    def events_url(self, task_id: str, query: str = "") -> str:
        return f"{self.base}/ap/v1/agent/tasks/{task_id}/events{query}"

    def subscribe(self, task_id: str, query: str = "", **headers: str) -> Subscriber:
        return Subscriber(self.events_url(task_id, query), headers={**self.headers(), **headers})


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("events") / "tasks.db"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, database: Path) -> Iterator[AgentsServer]:
    with AgentsServer(tmp_path_factory.mktemp("a"), database) as process:
        yield process


def run_to_its_end(server: AgentsServer) -> tuple[str, list[Message]]:
    """A task stepped to its end with a subscriber from its start: the task, and what the subscriber got."""
    task = server.create_task()
    subscriber = server.subscribe(task)
    server.step(task)
    server.step(task, decision="approve")
    return task, subscriber.rest()


def ids(messages: list[Message]) -> list[int]:
    return [int(m.id or 0) for m in messages]


def test_a_subscriber_sees_the_task_as_it_runs_and_its_stream_ends_after_the_outcome(server: AgentsServer) -> None:
    task = server.create_task()
    subscriber = server.subscribe(task)
    assert subscriber.status == 200
    server.step(task)
    # The proposed action reaches the subscriber while the task waits for its decision.
    waiting = subscriber.until(lambda m: m.event == "state" and m.json()["status"] == "waiting_for_input")
    assert [m.event for m in waiting] == ["state", "state", "state", "step", "tool_call", "action", "step", "state"]
    assert waiting[5].json()["status"] == "pending" and waiting[5].json()["tool"] == "list_jobs"
    assert waiting[6].json()["worker"] and waiting[6].json()["status"] == "completed"
    server.step(task, decision="approve")
    rest = subscriber.rest()
    assert [m.event for m in rest][-3:] == ["step", "state", "outcome"]
    assert ids(waiting + rest) == list(range(1, len(waiting) + len(rest) + 1))
    assert rest[-1].json()["output"] == "pipeline 7 failed in its lint job."
    text = "".join(m.json()["delta"] for m in rest if m.event == "text")
    assert text == "pipeline 7 failed in its lint job."
    assert [m.json()["tool"] for m in rest if m.event == "tool_result"] == ["list_jobs"]


def test_last_event_id_resumes_after_it_before_the_after_query_and_204_once_nothing_follows(
    server: AgentsServer,
) -> None:
    task, everything = run_to_its_end(server)
    last = len(everything)
    assert ids(server.subscribe(task, "?after=3").rest()) == list(range(4, last + 1))
    assert ids(server.subscribe(task, "?after=2", **{"Last-Event-ID": "5"}).rest()) == list(range(6, last + 1))
    resumed = server.subscribe(task, **{"Last-Event-ID": str(last - 1)}).rest()
    assert [m.event for m in resumed] == ["outcome"] and resumed[0].data == everything[-1].data
    # Over, and nothing after the last entry: no content, so that an EventSource stops reconnecting.
    # (Until it has been over for a moment: its last entries may still be on their way.)
    deadline = time.monotonic() + WAIT_SECONDS
    headers = {**server.headers(), "Last-Event-ID": str(last)}
    while (status := httpx.get(server.events_url(task), headers=headers, timeout=WAIT_SECONDS).status_code) != 204:
        assert status == 200 and time.monotonic() < deadline, status
        time.sleep(0.2)


def test_a_quiet_stream_carries_heartbeats(server: AgentsServer) -> None:
    task = server.create_task()
    subscriber = server.subscribe(task, "?after=1")  # after its "created": nothing more until a step
    comments = [subscriber.next() for _ in range(3)]
    subscriber.close()
    assert comments == [Comment("heartbeat")] * 3


def test_another_owner_s_task_is_not_found_and_a_missing_token_is_refused(server: AgentsServer) -> None:
    task = server.create_task(TOKEN_A)
    other = httpx.get(server.events_url(task), headers=server.headers(TOKEN_B), timeout=30)
    assert other.status_code == 404 and other.headers["content-type"] == "application/problem+json"
    assert other.json()["type"] == "/problems/task-not-found" and other.json()["message"] == other.json()["detail"]
    anonymous = httpx.get(server.events_url(task), timeout=30)
    assert anonymous.status_code == 401 and anonymous.json()["type"] == "/problems/unauthorized"
    misspelt = httpx.get(server.events_url(task, "?aftr=1"), headers=server.headers(), timeout=30)
    assert misspelt.status_code == 400 and "did you mean 'after'?" in misspelt.json()["detail"]


def test_a_subscriber_that_stops_reading_is_dropped_while_another_gets_everything_and_resumes_losing_nothing(
    server: AgentsServer, database: Path
) -> None:
    task = server.create_task()
    stuck = socket.socket()
    # A small window: the server's writes stop soon after the client stops reading.
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stuck.connect(("127.0.0.1", server.port))
    request = (
        f"GET /ap/v1/agent/tasks/{task}/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN_A}\r\n\r\n"
    )
    stuck.sendall(request.encode())
    reader = server.subscribe(task)
    store = TaskStore(f"sqlite:///{database}")
    try:
        big = "x" * 48 * 1024  # some 10 MB in all: more than the sockets and the buffers hold
        for start in range(0, 200, 20):
            store.append_events(task, [("text", {"delta": big, "n": n}) for n in range(start, start + 20)])
        store.append_events(task, [("state", {"status": "failed"}), ("outcome", {"outcome": "failed"})])
    finally:
        store.close()
    everything = reader.rest()
    last = int(everything[-1].id or 0)
    assert everything[-1].event == "outcome" and ids(everything) == list(range(1, last + 1))
    # Now the stuck client reads: what was on its way, then the end of a stream that was cut short.
    stuck.settimeout(WAIT_SECONDS)
    answer = http.client.HTTPResponse(stuck)
    answer.begin()
    got = [m for m in parse(answer.read().decode().split("\n")) if isinstance(m, Message)]
    stuck.close()
    assert answer.status == 200 and ids(got) == list(range(1, len(got) + 1)) and len(got) < last
    resumed = server.subscribe(task, **{"Last-Event-ID": str(len(got))}).rest()
    assert ids(got + resumed) == list(range(1, last + 1))


def test_entries_two_processes_append_to_one_database_reach_a_subscriber_of_a_third(
    server: AgentsServer, database: Path, tmp_path: Path
) -> None:
    task = server.create_task()
    with AgentsServer(tmp_path / "b", database) as other:
        subscriber = other.subscribe(task)  # on the other server: it reads what the first one writes
        store = TaskStore(f"sqlite:///{database}")
        try:
            appending = threading.Thread(
                target=lambda: [store.append_event(task, "artifact", {"file_name": f"{n}.txt"}) for n in range(30)]
            )
            appending.start()  # this process appends while the server's step appends
            server.step(task)
            appending.join()
            server.step(task, decision="approve")
        finally:
            store.close()
        got = subscriber.rest()
    assert ids(got) == list(range(1, len(got) + 1)) and got[-1].event == "outcome"
    assert len([m for m in got if m.event == "artifact" and m.json()["file_name"].endswith(".txt")]) == 30
    assert [m.json()["status"] for m in got if m.event == "step"] == ["running", "completed", "running", "completed"]
