"""Who calls, and how much they may send, settled before the SDK reads a byte.

``Guard`` wraps the A2A routes (an ASGI application): with bearer tokens
configured (the registry's ``REGISTRY_API_TOKENS`` and
``REGISTRY_ADMIN_TOKENS``, as for the Agent Protocol) a request without a
valid one gets 401; a body over ``max_body`` bytes is refused from its
``Content-Length`` when it declares one, and once it has sent that many
bytes when it does not, before anything parses it. Refusals are in the
binding's own error format (a JSON-RPC error on a ``.../jsonrpc`` path, the
HTTP+JSON error payload elsewhere).

``CallContextBuilder`` puts into each SDK call context who calls (a
``Caller``), the agent a per-agent endpoint runs, and the service's base
URL (for the links the answers carry).
"""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.response_helpers import build_error_response
from a2a.server.routes import DefaultServerCallContextBuilder
from a2a.utils.error_handlers import build_rest_error_payload
from a2a.utils.errors import A2AError, InvalidRequestError
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from registry.errors import Unauthorized
from registry.protocol.service import Caller
from registry.web.auth import bearer_token, token_matches

CALLER = "registry.a2a.caller"
AGENT = "registry.a2a.agent"
BASE_URL = "registry.a2a.base_url"
_BODIES = frozenset({"POST", "PUT", "PATCH"})


@dataclass(frozen=True)
class Tokens:
    """The bearer tokens the service takes; none: anyone may call."""

    api: tuple[str, ...] = field(default=(), repr=False)
    admin: tuple[str, ...] = field(default=(), repr=False)

    @property
    def required(self) -> bool:
        return bool(self.api or self.admin)

    def caller(self, authorization: str | None) -> Caller:
        """Who sends ``authorization``; ``Unauthorized`` when tokens are required and it holds none of them."""
        if not self.required:
            return Caller.for_token(None)
        token = bearer_token(authorization or "")
        if token_matches(token, self.admin):
            return Caller.for_token(token, admin=True)
        if token_matches(token, self.api):
            return Caller.for_token(token)
        raise Unauthorized("the bearer token is not valid", bearer=True)


class Guard:
    """The token, then the body's size, for every request to ``app``."""

    def __init__(self, app: ASGIApp, *, tokens: Tokens, max_body: int) -> None:
        self._app = app
        self._tokens = tokens
        self._max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        try:
            scope[CALLER] = self._tokens.caller(headers.get("authorization"))
        except Unauthorized as exc:
            await _unauthorized(exc.detail, send)
            return
        if scope["method"] in _BODIES:
            body = await self._body(headers, receive)
            if body is None:
                refusal = InvalidRequestError(
                    message=f"the request body is over {self._max_body} bytes, the most an A2A request may send"
                )
                await _refuse(scope, refusal, send)
                return
            receive = _replay(body, receive)
        await self._app(scope, receive, send)

    async def _body(self, headers: Headers, receive: Receive) -> bytes | None:
        """The whole body, or None as soon as it is known to be over the limit."""
        declared = headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self._max_body):
            return None
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self._max_body:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` that gives ``body`` first, then what the client sends next (its disconnect)."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def _refuse(scope: Scope, error: A2AError, send: Send) -> None:
    if str(scope.get("path", "")).endswith("/jsonrpc"):
        # JSON-RPC errors travel in a 200, as the SDK sends them; the id is unknown, unread.
        await _send_json(send, 200, build_error_response(None, error))
        return
    payload = build_rest_error_payload(error)
    await _send_json(send, int(payload["error"]["code"]), payload)


async def _unauthorized(detail: str, send: Send) -> None:
    payload = {"error": {"code": 401, "status": "UNAUTHENTICATED", "message": detail}}
    await _send_json(send, 401, payload, headers=[(b"www-authenticate", b'Bearer realm="prompt-registry"')])


async def _send_json(
    send: Send, status: int, payload: MutableMapping[str, Any], *, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = json.dumps(payload).encode("utf-8")
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode("ascii")),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class CallContextBuilder(DefaultServerCallContextBuilder):
    """The SDK's call context, with who calls, the endpoint's agent and the base URL."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state[CALLER] = request.scope[CALLER]
        params = request.path_params
        context.state[AGENT] = f"{params['usecase']}/{params['name']}" if "usecase" in params else None
        context.state[BASE_URL] = str(request.base_url).rstrip("/")
        return context


def caller_of(context: ServerCallContext) -> Caller:
    found = context.state[CALLER]
    assert isinstance(found, Caller)  # the guard put it there before the SDK built the context
    return found


def agent_of(context: ServerCallContext) -> str | None:
    """The agent the endpoint runs; None for the service-wide endpoint."""
    found = context.state.get(AGENT)
    return found if isinstance(found, str) else None


def base_url_of(context: ServerCallContext) -> str:
    return str(context.state.get(BASE_URL, ""))
