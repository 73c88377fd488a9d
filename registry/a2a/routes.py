"""``a2a_routes``: A2A's routes, for the service's ASGI application to mount.

=============================================================  ==========================================
path                                                           what
=============================================================  ==========================================
``/.well-known/agent-card.json``                               the service's card
``/a2a/jsonrpc``                                               JSON-RPC (1.0, and 0.3's method names)
``/a2a/rest/...``                                              HTTP+JSON (``/message:send``, ``/tasks``...)
``/a2a/agents/{usecase}/{name}/.well-known/agent-card.json``   one agent's card
``/a2a/agents/{usecase}/{name}/jsonrpc``                       JSON-RPC, running that agent
``/a2a/agents/{usecase}/{name}/rest/...``                      HTTP+JSON, running that agent
=============================================================  ==========================================

Everything under ``/a2a`` and the service card pass ``access.Guard`` first
(tokens, the body limit). The HTTP+JSON routes are mounted under their
own prefix: the SDK's ``path_prefix`` would add a ``/{tenant}`` mount at
the root of the application, which swallows every other path.
"""

from __future__ import annotations

import math

from a2a.server.routes import create_jsonrpc_routes, create_rest_routes
from starlette.routing import BaseRoute, Mount, Route, Router

from registry.a2a.access import CallContextBuilder, Guard, Tokens
from registry.a2a.cards import PREFIX, CardFacts, CardOptions, card_routes
from registry.a2a.handler import PushConfigs, TaskRequestHandler
from registry.a2a.messages import Limits
from registry.a2a.stream import HubEvents
from registry.client import RegistryClient
from registry.protocol.hub import EventHub
from registry.protocol.service import TaskService
from registry.settings import Settings

_ENVELOPE_BYTES = 64 * 1024
"""Room for a message's JSON around its parts."""


def body_limit(settings: Settings) -> int:
    """The largest A2A request body: a message's text and data, and one file
    of the largest size (base64 in JSON, so a third larger), with room around."""
    return settings.max_request_bytes + math.ceil(settings.agents_max_artifact_bytes * 4 / 3) + _ENVELOPE_BYTES


def a2a_routes(
    service: TaskService,
    registry: RegistryClient,
    settings: Settings,
    *,
    hub: EventHub,
    push_configs: PushConfigs | None = None,
) -> list[BaseRoute]:
    """A2A over ``service``'s tasks, with cards of ``settings.agents_release``
    from ``registry``; push notifications when ``push_configs`` keeps their
    configurations; streams fed by ``hub``, the process's poller of the task
    logs, which must be the one ``create_asgi_app`` runs (give it the same)."""
    handler = TaskRequestHandler(
        service,
        events=HubEvents(hub, service.store),
        limits=Limits(text_bytes=settings.max_request_bytes, file_bytes=settings.agents_max_artifact_bytes),
        push_configs=push_configs,
    )
    tokens = Tokens(settings.api_tokens, settings.admin_tokens)
    service_card, agent_card = card_routes(
        CardFacts(registry, settings.agents_release),
        CardOptions(push_notifications=push_configs is not None, secured=tokens.required),
    )
    builder = CallContextBuilder()
    inner: list[BaseRoute] = [agent_card]
    for endpoint in ("", "/agents/{usecase}/{name}"):
        inner.extend(create_jsonrpc_routes(handler, f"{endpoint}/jsonrpc", builder, enable_v0_3_compat=True))
        inner.append(Mount(f"{endpoint}/rest", routes=create_rest_routes(handler, builder, enable_v0_3_compat=True)))
    limit = body_limit(settings)
    return [
        Route(service_card.path, Guard(service_card.app, tokens=tokens, max_body=limit), methods=["GET"]),
        Mount(PREFIX, app=Guard(Router(routes=inner), tokens=tokens, max_body=limit)),
    ]
