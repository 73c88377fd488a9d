"""A2A over the Agent Protocol service's tasks, through the SDK's own client,
unmodified, against a real server process (uvicorn) over a real git
repository and SQLite: the cards, a task's life over both bindings, an
approval given as a message, and what each caller may see. What goes over
the wire is checked against the specification's schema as the SDK derives it.

Tasks run on the server's own worker, as under ``agents serve``: nothing
steps them. A test that needs a task to hold still gives it an approval to
wait for, or a question the scripted model is slow to answer ("slow ...")."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, AgentCardResolutionError
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Part,
    SendMessageResponse,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import (
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from registry.a2a.cards import AGENT_EXTENSION
from registry.a2a.mapping import plain, struct_plain
from tests.conftest import LibraryRepo
from tests.support.a2a_calls import JSONRPC, REST, data, jsonrpc, responses, sdk_client, user_message
from tests.support.a2a_schema import check_against_spec
from tests.support.a2a_server import A2AServer
from tests.support.executor_fixtures import REACT, leaf

ACTION = 'Thought: look it up\nAction: lookup\nAction Input: {"word": "ox"}'
SLOW_SECONDS = 5
REPLIES: list[dict[str, Any]] = [
    {"when": "^slow", "content": ACTION, "delay": SLOW_SECONDS, "repeat": True},
    {"when": "^Observation: The user rejected this call", "content": "Final Answer: as you wish", "repeat": True},
    {"when": "^Observation: (ox|cow) means something$", "content": "Final Answer: an animal", "repeat": True},
    {"content": ACTION, "repeat": True},
]
TOKEN_A = "token-a-0123456789abcdef"
TOKEN_B = "token-b-0123456789abcdef"


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> LibraryRepo:
    repo = LibraryRepo(tmp_path_factory.mktemp("a2a") / "library")
    described = REACT.replace("type: react\n", "description: Looks words up.\ntype: react\n")
    return repo.release(
        "v1.0.0",
        {"a/react.yml": described, "s/draft.yml": leaf("drafter", "Draft: {{ question }}", question="string")},
    )


@pytest.fixture(scope="module")
def server(library: LibraryRepo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[A2AServer]:
    data_dir = tmp_path_factory.mktemp("data")
    with A2AServer(library.path, data_dir, REPLIES, "--require-approval", "lookup") as found:
        yield found


@pytest.fixture(scope="module")
def secured(library: LibraryRepo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[A2AServer]:
    data_dir = tmp_path_factory.mktemp("secured")
    options = ["--require-approval", "lookup", "--api-token", TOKEN_A, "--api-token", TOKEN_B]
    with A2AServer(library.path, data_dir, REPLIES, *options) as found:
        yield found


def agent_url(server: A2AServer, agent: str = "a/react") -> str:
    return f"{server.base}/a2a/agents/{agent}"


MOVING = (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
"""A task a worker has yet to take, or is running."""


def start(
    server: A2AServer,
    *parts: Part,
    binding: str = JSONRPC,
    token: str | None = None,
    wait: bool = False,
    **metadata: Any,
) -> Task:
    """The task a message starts: as it is at once, or with ``wait`` once it
    waits for its client or is over."""

    async def send() -> Task:
        async with sdk_client(agent_url(server), binding=binding, token=token, wait=wait) as client:
            [answer] = await responses(client, user_message(*parts, **metadata))
            return answer.task

    return asyncio.run(send())


def settled(server: A2AServer, task_id: str) -> Task:
    """The task once no worker is on it (it waits for its client, or is over)."""

    async def poll() -> Task:
        async with sdk_client(agent_url(server)) as client:
            for _ in range(600):
                task = await client.get_task(GetTaskRequest(id=task_id))
                if task.status.state not in MOVING:
                    return task
                await asyncio.sleep(0.05)
        raise AssertionError(f"task {task_id} is still {TaskState.Name(task.status.state)}")

    return asyncio.run(poll())


# --- cards -------------------------------------------------------------------------------


def test_the_well_known_card_lists_the_agents_and_each_agent_has_its_own(
    server: A2AServer, library: LibraryRepo
) -> None:
    async def cards() -> tuple[AgentCard, AgentCard]:
        async with httpx.AsyncClient(timeout=30) as http:
            service = await A2ACardResolver(http, server.base).get_agent_card()
            agent = await A2ACardResolver(http, agent_url(server)).get_agent_card()
            return service, agent

    service, agent = asyncio.run(cards())
    assert [skill.id for skill in service.skills] == ["a/react", "s/draft"]
    assert (agent.name, agent.description, agent.version) == ("ReAct helper", "Looks words up.", "v1.0.0")
    assert agent.supported_interfaces[0].url == f"{agent_url(server)}/jsonrpc"
    assert agent.capabilities.streaming
    [extension] = agent.capabilities.extensions
    params = struct_plain(extension.params)
    assert extension.uri == AGENT_EXTENSION
    assert params["release"]["commit"] == library.git("rev-parse", "v1.0.0^{commit}")
    assert params["input_schema"]["required"] == ["question"] and params["digest"].startswith("sha256:")
    for url in (f"{server.base}/.well-known/agent-card.json", f"{agent_url(server)}/.well-known/agent-card.json"):
        check_against_spec(httpx.get(url, timeout=30).json(), AgentCard)


def test_an_agent_the_release_does_not_hold_has_no_card(server: A2AServer) -> None:
    async def card() -> None:
        async with httpx.AsyncClient(timeout=30) as http:
            await A2ACardResolver(http, agent_url(server, "a/nope")).get_agent_card()

    with pytest.raises(AgentCardResolutionError) as caught:
        asyncio.run(card())
    assert caught.value.status_code == 404


# --- a task's life -----------------------------------------------------------------------


@pytest.mark.parametrize("binding", [JSONRPC, REST])
def test_a_message_starts_a_background_task_pinned_to_the_release(server: A2AServer, binding: str) -> None:
    task = start(server, Part(text="ox?"), binding=binding, release="^1")
    # A worker takes it at once: the answer may find it queued, running, or at its approval already.
    assert task.status.state in (*MOVING, TaskState.TASK_STATE_INPUT_REQUIRED) and task.context_id == task.id
    pinned = struct_plain(task.metadata)
    assert (pinned["agent"], pinned["mode"], pinned["release"]["tag"]) == ("a/react", "background", "v1.0.0")
    # The same task, as the Agent Protocol shows it.
    shown = httpx.get(f"{server.base}/ap/v1/agent/tasks/{task.id}", timeout=30).json()
    assert (shown["task_id"], shown["input"], shown["additional_input"]["mode"]) == (task.id, "ox?", "background")


@pytest.mark.parametrize("binding", [JSONRPC, REST])
def test_get_list_and_cancel_a_task(server: A2AServer, binding: str) -> None:
    task = start(server, Part(text="ox?"), binding=binding, wait=True)  # it holds still at its approval

    async def calls() -> tuple[Task, list[str], Task]:
        async with sdk_client(agent_url(server), binding=binding) as client:
            got = await client.get_task(GetTaskRequest(id=task.id))
            listed: list[str] = []
            page = await client.list_tasks(ListTasksRequest(page_size=1))
            while True:
                listed += [t.id for t in page.tasks]
                if not page.next_page_token:
                    break
                page = await client.list_tasks(ListTasksRequest(page_size=1, page_token=page.next_page_token))
            cancelled = await client.cancel_task(CancelTaskRequest(id=task.id))
            with pytest.raises(TaskNotCancelableError):
                await client.cancel_task(CancelTaskRequest(id=task.id))
            with pytest.raises(TaskNotFoundError):
                await client.get_task(GetTaskRequest(id="no-such-task"))
            return got, listed, cancelled

    got, listed, cancelled = asyncio.run(calls())
    assert got.id == task.id and got.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert task.id in listed and len(listed) == len(set(listed))
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED


def test_what_goes_over_the_wire_fits_the_specification(server: A2AServer) -> None:
    rpc = f"{server.base}/a2a/jsonrpc"
    message = {"messageId": "m-wire", "role": "ROLE_USER", "parts": [{"text": "ox?"}], "metadata": {"agent": "a/react"}}
    sent = jsonrpc(rpc, "SendMessage", {"message": message, "configuration": {"returnImmediately": True}})
    created = check_against_spec(sent["result"], SendMessageResponse)
    assert isinstance(created, SendMessageResponse)
    settled(server, created.task.id)
    got = jsonrpc(rpc, "GetTask", {"id": created.task.id})["result"]
    check_against_spec(got, Task)
    assert got["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    listed = jsonrpc(rpc, "ListTasks", {"includeArtifacts": True, "pageSize": 100})["result"]
    for task in listed["tasks"]:
        check_against_spec(task, Task)


# --- approvals ---------------------------------------------------------------------------


def test_a_pending_action_is_input_required_and_a_message_approves_it(server: A2AServer) -> None:
    waiting = start(server, Part(text="ox?"), wait=True)

    async def approve() -> Task:
        async with sdk_client(agent_url(server), wait=True) as client:
            [answer] = await responses(client, user_message(data({"decision": "approve"}), task_id=waiting.id))
            with pytest.raises(UnsupportedOperationError, match="TASK_STATE_COMPLETED: it is over"):
                await responses(client, user_message(data({"decision": "approve"}), task_id=waiting.id))
            return answer.task

    done = asyncio.run(approve())
    assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    asked = plain(waiting.status.message.parts[1].data)["action"]
    assert (asked["tool"], asked["arguments"], asked["thought"]) == ("lookup", {"word": "ox"}, "look it up")
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    [answer] = done.artifacts
    assert (answer.name, answer.parts[0].text) == ("answer.md", "an animal")
    actions = httpx.get(f"{server.base}/ap/v1/agent/tasks/{waiting.id}/actions", timeout=30).json()["actions"]
    assert [a["status"] for a in actions] == ["approved"]


def test_a_decision_before_the_task_asks_for_one_is_refused_and_a_working_task_can_be_cancelled(
    server: A2AServer,
) -> None:
    task = start(server, Part(text="slow ox?"))  # the model takes its time to answer

    async def decide_then_cancel() -> tuple[Task, Task]:
        async with sdk_client(agent_url(server)) as client:
            before = await client.get_task(GetTaskRequest(id=task.id))
            with pytest.raises(UnsupportedOperationError, match="no action is pending, there is nothing to decide"):
                await responses(client, user_message(data({"decision": "approve"}), task_id=task.id))
            return before, await client.cancel_task(CancelTaskRequest(id=task.id))

    before, cancelled = asyncio.run(decide_then_cancel())
    assert before.status.state in MOVING and cancelled.status.state == TaskState.TASK_STATE_CANCELED
    # The step under way, if a worker had taken the task, ends; nothing runs after it.
    steps_url = f"{server.base}/ap/v1/agent/tasks/{task.id}/steps"
    for _ in range(SLOW_SECONDS * 40):
        steps = [s["status"] for s in httpx.get(steps_url, timeout=30).json()["steps"]]
        if "running" not in steps:
            break
        time.sleep(0.05)
    assert steps in ([], ["completed"])
    assert settled(server, task.id).status.state == TaskState.TASK_STATE_CANCELED


def test_a_rejection_carries_its_reason_and_an_edit_its_arguments(server: A2AServer) -> None:
    rejected, edited = start(server, Part(text="ox?"), wait=True), start(server, Part(text="ox?"), wait=True)

    async def decide() -> tuple[Task, Task]:
        async with sdk_client(agent_url(server), binding=REST, wait=True) as client:
            [no] = await responses(
                client, user_message(Part(text="not that one"), data({"decision": "reject"}), task_id=rejected.id)
            )
            [changed] = await responses(
                client, user_message(data({"decision": "edit", "arguments": {"word": "cow"}}), task_id=edited.id)
            )
            return no.task, changed.task

    no, changed = asyncio.run(decide())
    assert no.artifacts[0].parts[0].text == "as you wish"
    assert changed.artifacts[0].parts[0].text == "an animal"
    actions = httpx.get(f"{server.base}/ap/v1/agent/tasks/{rejected.id}/actions", timeout=30).json()["actions"]
    assert [(a["status"], a["reason"]) for a in actions] == [("rejected", "not that one")]
    actions = httpx.get(f"{server.base}/ap/v1/agent/tasks/{edited.id}/actions", timeout=30).json()["actions"]
    assert [(a["status"], a["edited_arguments"]) for a in actions] == [("edited", {"word": "cow"})]


def test_without_a_push_configuration_store_push_is_refused_and_the_card_says_so(server: A2AServer) -> None:
    task = start(server, Part(text="ox?"))
    card = httpx.get(f"{agent_url(server)}/.well-known/agent-card.json", timeout=30).json()
    assert card["capabilities"]["pushNotifications"] is False

    async def configure() -> None:
        async with sdk_client(agent_url(server)) as client:
            config = TaskPushNotificationConfig(task_id=task.id, url="https://hooks.example/a2a")
            with pytest.raises(PushNotificationNotSupportedError):
                await client.create_task_push_notification_config(config)

    asyncio.run(configure())


# --- who may see what --------------------------------------------------------------------


def test_a_task_is_its_owners_another_token_gets_not_found(secured: A2AServer) -> None:
    task = start(secured, Part(text="ox?"), token=TOKEN_A, wait=True)
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED

    async def other() -> None:
        async with sdk_client(agent_url(secured), token=TOKEN_B) as client:
            with pytest.raises(TaskNotFoundError):
                await client.get_task(GetTaskRequest(id=task.id))
            with pytest.raises(TaskNotFoundError):
                await responses(client, user_message(data({"decision": "approve"}), task_id=task.id))
            with pytest.raises(TaskNotFoundError):
                await client.cancel_task(CancelTaskRequest(id=task.id))
            listed = await client.list_tasks(ListTasksRequest())
            assert task.id not in [t.id for t in listed.tasks]

    asyncio.run(other())


def test_without_a_valid_token_nothing_answers_but_401(secured: A2AServer) -> None:
    for url in (f"{secured.base}/.well-known/agent-card.json", f"{agent_url(secured)}/.well-known/agent-card.json"):
        refused = httpx.get(url, timeout=30)
        assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Bearer")
        assert httpx.get(url, headers={"Authorization": "Bearer wrong"}, timeout=30).status_code == 401
    card = httpx.get(f"{secured.base}/.well-known/agent-card.json", headers={"Authorization": f"Bearer {TOKEN_A}"})
    assert card.json()["securitySchemes"]["bearer"]["httpAuthSecurityScheme"] == {"scheme": "Bearer"}
    answer = httpx.post(f"{secured.base}/a2a/jsonrpc", json={"jsonrpc": "2.0", "id": 1, "method": "GetTask"})
    assert answer.status_code == 401


# --- A2A 0.3 -----------------------------------------------------------------------------


def test_clients_of_a2a_0_3_are_answered_by_its_method_names(server: A2AServer) -> None:
    rpc = f"{server.base}/a2a/jsonrpc"
    message = {
        "kind": "message",
        "messageId": "m-03",
        "role": "user",
        "parts": [{"kind": "text", "text": "ox?"}],
        "metadata": {"agent": "a/react"},
    }
    sent = jsonrpc(rpc, "message/send", {"message": message, "configuration": {"blocking": False}}, version=None)
    task = sent["result"]
    assert task["kind"] == "task" and task["status"]["state"] in ("submitted", "working", "input-required")
    got = jsonrpc(rpc, "tasks/get", {"id": task["id"]}, version=None)["result"]
    assert got["id"] == task["id"]
    cancelled = jsonrpc(rpc, "tasks/cancel", {"id": task["id"]}, version=None)["result"]
    assert cancelled["status"]["state"] == "canceled"
    unknown = dict(message, parts=[{"kind": "video", "video": "..."}])
    refused = jsonrpc(rpc, "message/send", {"message": unknown}, version=None)
    assert refused["error"]["code"] == -32600
