"""Agent Cards: one per agent of the served release, and the service's own.

- ``GET /.well-known/agent-card.json``: the service, each valid agent of the
  release a skill (id ``usecase/name``); its endpoints are
  ``/a2a/jsonrpc`` and ``/a2a/rest``, where a message names its agent in
  ``metadata.agent``.
- ``GET /a2a/agents/{usecase}/{name}/.well-known/agent-card.json``: one
  agent; its endpoints, ``/a2a/agents/{usecase}/{name}/jsonrpc`` and
  ``.../rest``, run that agent. So the SDK's client finds it from
  ``{base}/a2a/agents/{usecase}/{name}``.

Each card offers JSON-RPC and HTTP+JSON at protocol version 1.0 (and the
same endpoints as 0.3, which they answer too), streaming and, when they are
configured, push notifications. What a card pins is in its extension
``AGENT_EXTENSION`` (``capabilities.extensions``): the agent, the release
(requested, tag, commit), the definition's digest and its ``inputs`` JSON
Schema. The service card's ``RELEASE_EXTENSION`` has the release and each
agent's digest, input schema and card.

The release is the service's (``--release``): what it resolves to is asked
of the registry at most every ``pointer_seconds``; what a commit holds is
built once and kept (content under a commit never changes). When the
registry is away, the cards last built are served.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
)
from a2a.utils.constants import PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_1_0, TransportProtocol
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from registry.client import Agent, Catalog, RegistryClient
from registry.errors import RegistryError
from registry.format.spec import AgentSpec

log = logging.getLogger("registry.a2a")

PREFIX = "/a2a"
AGENT_EXTENSION = "urn:prompt-registry:a2a:agent:v1"
RELEASE_EXTENSION = "urn:prompt-registry:a2a:release:v1"
INPUT_MODES = ["text/plain", "application/json", "application/octet-stream"]
OUTPUT_MODES = ["text/markdown", "application/json", "application/octet-stream"]
POINTER_SECONDS = 10.0
KEPT_RELEASES = 4
"""Releases whose facts are kept: the current one and a few it moved from."""
MAX_EXAMPLES = 5


@dataclass(frozen=True)
class AgentFacts:
    """What an agent's card says, as the registry serves the agent at one release."""

    usecase: str
    name: str
    title: str
    description: str | None
    input_schema: Mapping[str, Any] | None
    examples: tuple[str, ...]
    """Its examples' inputs, as JSON."""
    requested: str
    tag: str
    commit: str
    digest: str

    @property
    def agent(self) -> str:
        return f"{self.usecase}/{self.name}"

    @classmethod
    def of(cls, agent: Agent, requested: str) -> AgentFacts:
        spec = AgentSpec.of(agent.definition)
        return cls(
            usecase=agent.usecase,
            name=agent.name,
            title=spec.title,
            description=spec.description,
            input_schema=_json(spec.inputs) if spec.inputs is not None else None,
            examples=tuple(json.dumps(e.get("inputs"), sort_keys=True) for e in spec.examples[:MAX_EXAMPLES]),
            requested=requested,
            tag=agent.tag,
            commit=agent.commit,
            digest=agent.digest,
        )


@dataclass(frozen=True)
class ReleaseFacts:
    """The served release: what it resolved to, and its valid agents."""

    requested: str
    tag: str
    commit: str
    agents: tuple[AgentFacts, ...]

    def find(self, usecase: str, name: str) -> AgentFacts | None:
        return next((a for a in self.agents if (a.usecase, a.name) == (usecase, name)), None)


class CardFacts:
    """The served release's facts, cached per commit; its pointer re-read every ``pointer_seconds``."""

    def __init__(
        self,
        registry: RegistryClient,
        release: str,
        *,
        pointer_seconds: float = POINTER_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._registry = registry
        self._release = release
        self._pointer_seconds = pointer_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._pointer: tuple[float, str] | None = None
        self._by_commit: dict[str, ReleaseFacts] = {}

    def current(self) -> ReleaseFacts:
        """The release's facts now; ``RegistryError`` when the registry cannot say and nothing was built yet."""
        with self._lock:  # one build at a time: concurrent first requests share it
            now = self._clock()
            if self._pointer is not None and now - self._pointer[0] < self._pointer_seconds:
                return self._by_commit[self._pointer[1]]
            try:
                catalog = self._registry.agents(self._release)
            except RegistryError as exc:
                if self._pointer is None:
                    raise
                log.warning("serving the agent cards of %s: the registry did not answer: %s", self._pointer[1], exc)
                self._pointer = (now, self._pointer[1])
                return self._by_commit[self._pointer[1]]
            commit = catalog.resolution.release.commit
            if commit not in self._by_commit:
                self._by_commit[commit] = self._build(catalog)
                for old in list(self._by_commit)[:-KEPT_RELEASES]:
                    del self._by_commit[old]
            self._pointer = (now, commit)
            return self._by_commit[commit]

    def _build(self, catalog: Catalog) -> ReleaseFacts:
        release = catalog.resolution.release
        agents = []
        for summary in catalog.agents:
            if not summary.valid:
                continue  # it cannot run: no card
            try:
                agent = self._registry.get(summary.usecase, summary.name, release=release.tag)
                agents.append(AgentFacts.of(agent, self._release))
            except RegistryError as exc:
                log.warning("no agent card for %s/%s at %s: %s", summary.usecase, summary.name, release.tag, exc)
        return ReleaseFacts(self._release, release.tag, release.commit, tuple(agents))


@dataclass(frozen=True)
class CardOptions:
    """What every card says of the service."""

    push_notifications: bool
    secured: bool
    """Bearer tokens are required."""


def agent_card(facts: AgentFacts, base_url: str, options: CardOptions) -> AgentCard:
    """The card of one agent, whose endpoints run it."""
    card = _card(
        name=facts.title,
        description=facts.description or facts.title,
        version=facts.tag,
        endpoint=f"{base_url}{PREFIX}/agents/{facts.usecase}/{facts.name}",
        options=options,
    )
    card.skills.append(_skill(facts))
    extension = AgentExtension(
        uri=AGENT_EXTENSION,
        description="The agent, the release this card pins and the definition's inputs (a JSON Schema).",
    )
    extension.params.update(_agent_params(facts))
    card.capabilities.extensions.append(extension)
    return card


def service_card(release: ReleaseFacts, base_url: str, options: CardOptions) -> AgentCard:
    """The service's card: every agent of the release, a skill each."""
    card = _card(
        name="prompt-registry agents",
        description=(
            f"The agents of release {release.tag} of this registry, one skill each. A message names the agent"
            ' to run in its metadata ({"agent": "usecase/name"}); each agent also has a card and endpoints of'
            f" its own under {base_url}{PREFIX}/agents/<usecase>/<name>."
        ),
        version=release.tag,
        endpoint=f"{base_url}{PREFIX}",
        options=options,
    )
    card.skills.extend(_skill(facts) for facts in release.agents)
    extension = AgentExtension(
        uri=RELEASE_EXTENSION,
        description="The release the service runs, and each agent's digest, inputs (a JSON Schema) and card.",
    )
    extension.params.update(
        {
            "release": {"requested": release.requested, "tag": release.tag, "commit": release.commit},
            "agents": {
                facts.agent: {
                    "digest": facts.digest,
                    "input_schema": facts.input_schema,
                    "card": f"{base_url}{PREFIX}/agents/{facts.agent}/.well-known/agent-card.json",
                }
                for facts in release.agents
            },
        }
    )
    card.capabilities.extensions.append(extension)
    return card


def card_routes(facts: CardFacts, options: CardOptions) -> tuple[Route, Route]:
    """The service's card (at the root) and each agent's (under ``PREFIX``, relative to it)."""

    async def service(request: Request) -> Response:
        release = await _facts(facts)
        if isinstance(release, Response):
            return release
        return _card_response(service_card(release, _base(request), options))

    async def agent(request: Request) -> Response:
        release = await _facts(facts)
        if isinstance(release, Response):
            return release
        usecase, name = request.path_params["usecase"], request.path_params["name"]
        found = release.find(usecase, name)
        if found is None:
            detail = f"release {release.tag} has no agent {usecase}/{name} that can run"
            return JSONResponse({"error": {"code": 404, "status": "NOT_FOUND", "message": detail}}, status_code=404)
        return _card_response(agent_card(found, _base(request), options))

    return (
        Route("/.well-known/agent-card.json", service, methods=["GET"]),
        Route("/agents/{usecase}/{name}/.well-known/agent-card.json", agent, methods=["GET"]),
    )


async def _facts(facts: CardFacts) -> ReleaseFacts | Response:
    try:
        return await asyncio.to_thread(facts.current)
    except RegistryError as exc:
        detail = f"the registry cannot say what the release holds now: {exc}"
        return JSONResponse({"error": {"code": 503, "status": "UNAVAILABLE", "message": detail}}, status_code=503)


def _card_response(card: AgentCard) -> Response:
    # Revalidated on every use: the release behind it may move.
    return JSONResponse(agent_card_to_dict(card), headers={"Cache-Control": "no-cache"})


def _base(request: Request) -> str:
    return str(request.base_url).rstrip("/")


def _card(*, name: str, description: str, version: str, endpoint: str, options: CardOptions) -> AgentCard:
    card = AgentCard(
        name=name,
        description=description,
        version=version,
        supported_interfaces=[
            AgentInterface(url=f"{endpoint}/{path}", protocol_binding=binding, protocol_version=protocol)
            for protocol in (PROTOCOL_VERSION_1_0, PROTOCOL_VERSION_0_3)
            for binding, path in ((TransportProtocol.JSONRPC, "jsonrpc"), (TransportProtocol.HTTP_JSON, "rest"))
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=options.push_notifications),
        default_input_modes=INPUT_MODES,
        default_output_modes=OUTPUT_MODES,
    )
    if options.secured:
        card.security_schemes["bearer"].CopyFrom(
            SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer"))
        )
        requirement = SecurityRequirement()
        requirement.schemes["bearer"].SetInParent()
        card.security_requirements.append(requirement)
    return card


def _skill(facts: AgentFacts) -> AgentSkill:
    return AgentSkill(
        id=facts.agent,
        name=facts.title,
        description=facts.description or facts.title,
        tags=[facts.usecase],
        examples=list(facts.examples),
        input_modes=INPUT_MODES,
        output_modes=OUTPUT_MODES,
    )


def _agent_params(facts: AgentFacts) -> dict[str, Any]:
    return {
        "agent": facts.agent,
        "release": {"requested": facts.requested, "tag": facts.tag, "commit": facts.commit},
        "digest": facts.digest,
        "input_schema": facts.input_schema,
    }


def _json(value: Mapping[str, Any]) -> dict[str, Any]:
    # A protobuf Struct holds JSON values only: a YAML date becomes its text.
    found: dict[str, Any] = json.loads(json.dumps(value, default=str))
    return found
