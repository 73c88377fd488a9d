"""Calls to an A2A server the way its clients make them: through the
official SDK's client, unmodified (``sdk_client``), or as raw JSON when a
test must see exactly what went over the wire (``jsonrpc``, ``sse_results``)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from a2a.client import Client, ClientConfig, create_client
from a2a.types import Message, Part, Role, SendMessageRequest, StreamResponse
from a2a.utils.constants import TransportProtocol
from google.protobuf.struct_pb2 import Value

JSONRPC = TransportProtocol.JSONRPC
REST = TransportProtocol.HTTP_JSON
TIMEOUT = 30.0


@asynccontextmanager
async def sdk_client(
    url: str, *, binding: str = JSONRPC, streaming: bool = False, wait: bool = False, token: str | None = None
) -> AsyncIterator[Client]:
    """The SDK's client of the agent at ``url`` (its card is read from
    ``url``/.well-known/agent-card.json); not streaming, it asks for the task
    at once (``returnImmediately``), or with ``wait`` once the task is over
    or waits for its client (the server waits up to 30 s)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(timeout=TIMEOUT, headers=headers) as http:
        config = ClientConfig(
            streaming=streaming,
            polling=not streaming and not wait,
            httpx_client=http,
            supported_protocol_bindings=[binding],
        )
        client = await create_client(url, client_config=config)
        try:
            yield client
        finally:
            await client.close()


def user_message(*parts: Part, task_id: str = "", **metadata: Any) -> SendMessageRequest:
    message = Message(message_id=f"m-{id(parts)}", role=Role.ROLE_USER, parts=list(parts), task_id=task_id)
    message.metadata.update(metadata)
    return SendMessageRequest(message=message)


def data(value: dict[str, Any]) -> Part:
    found = Value()
    found.struct_value.update(value)
    return Part(data=found)


async def responses(client: Client, request: SendMessageRequest) -> list[StreamResponse]:
    """Every answer to ``request``: one when not streaming, each event when streaming."""
    return [answer async for answer in client.send_message(request)]


def jsonrpc(
    url: str, method: str, params: dict[str, Any], *, version: str | None = "1.0", token: str | None = None
) -> dict[str, Any]:
    """A JSON-RPC call as JSON; ``version`` None sends no A2A-Version header (a client of 0.3)."""
    headers = {"A2A-Version": version} if version else {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    answer: dict[str, Any] = httpx.post(url, json=body, headers=headers, timeout=TIMEOUT).json()
    return answer


def sse_results(
    url: str, method: str, params: dict[str, Any], *, version: str | None = "1.0"
) -> Iterator[dict[str, Any]]:
    """The results of a streamed JSON-RPC call, as JSON, each as it comes;
    ``version`` None sends no A2A-Version header (a client of 0.3)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    headers = {"A2A-Version": version} if version else {}
    with httpx.stream("POST", url, json=body, headers=headers, timeout=TIMEOUT) as answer:
        for line in answer.iter_lines():
            if line.startswith("data:"):
                found: dict[str, Any] = json.loads(line[5:])
                yield found["result"]
