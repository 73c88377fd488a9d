"""What the registry's operations answer (``registry.serving.service``): an
agent, a release's agents, the releases and channels, a render, a parse, a
diff, each with the release it was answered from, and the JSON shape the API
and the CLI give it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from registry.format.diff import LibraryDiff
from registry.format.loading import LoadedAgent
from registry.format.parsers import ParseResult
from registry.models import AgentSummary, Prompt, Resolution
from registry.rendering import RENDER_SEMANTICS
from registry.store.channels import ChannelTable
from registry.store.releases import ReleaseIndex


@dataclass(frozen=True)
class AgentListing:
    """The agents of one release."""

    resolution: Resolution
    agents: list[AgentSummary]


@dataclass(frozen=True)
class AgentAnswer:
    """One agent at one release; for a composite, with every agent it can run
    (``reached``, in the order of its graph's nodes), so that whoever runs it
    needs one answer."""

    resolution: Resolution
    agent: LoadedAgent
    reached: tuple[LoadedAgent, ...] = ()

    def render_etag(self, inputs: Any) -> str:
        """What names this agent rendered with ``inputs``, before rendering it:
        equal digests render identically, so the digest and the inputs name
        the result."""
        canonical = json.dumps(inputs, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        material = f"{RENDER_SEMANTICS}\0{self.agent.digest}\0{canonical}".encode()
        return "render-" + hashlib.sha256(material).hexdigest()[:40]


@dataclass(frozen=True)
class ReleaseOverview:
    """Every release, and every channel with what it points to now."""

    index: ReleaseIndex
    channels: ChannelTable

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape of ``GET /v1/releases``."""
        latest = self.index.latest
        body: dict[str, Any] = {
            "releases": [r.as_dict() for r in self.index.releases],
            "latest": latest.tag if latest else None,
            "channels": self.channels.describe(self.index),
        }
        if self.channels.problems:
            body["channel_errors"] = [p.as_dict() for p in self.channels.problems]
        return body

    @cached_property
    def etag(self) -> str:
        """Changes whenever a release or a channel does. Computed once per
        overview: a long-poll compares it every 0.2 s, and it hashes every release."""
        canonical = json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"))
        return "releases-" + hashlib.sha256(canonical.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class RenderAnswer:
    """A rendered prompt, with the agent and release it came from."""

    resolution: Resolution
    agent: LoadedAgent
    prompt: Prompt

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape of ``POST .../render`` and of ``render --format json``."""
        return {
            **_provenance(self.resolution, self.agent),
            "messages": self.prompt.as_dicts(),
            "model": self.prompt.model,
            "params": self.prompt.params,
            "placeholders": [placeholder.as_dict() for placeholder in self.prompt.placeholders],
        }


@dataclass(frozen=True)
class ParseAnswer:
    """A model's reply parsed by an agent's output parser, with the agent and
    release whose parser it was."""

    resolution: Resolution
    agent: LoadedAgent
    result: ParseResult

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape of ``POST .../parse``."""
        return {**_provenance(self.resolution, self.agent), "result": self.result.as_dict()}


def _provenance(resolution: Resolution, agent: LoadedAgent) -> dict[str, Any]:
    """What every answer about one agent opens with: the release and the agent."""
    return {
        "release": resolution.as_dict(),
        "usecase": agent.usecase,
        "name": agent.name,
        "digest": agent.digest,
    }


@dataclass(frozen=True)
class DiffAnswer:
    """What changed between two releases, with what each side resolved to."""

    source: Resolution
    target: Resolution
    diff: LibraryDiff

    @property
    def immutable(self) -> bool:
        """Whether the answer never changes: both sides name exact tags."""
        return self.source.immutable and self.target.immutable
