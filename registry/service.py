"""The registry's operations, independent of HTTP.

``RegistryService`` is what the HTTP API and the CLI call. Every operation
resolves the requested release to one commit first and then answers entirely
from that commit's catalog, so an answer is never mixed from two releases.
Catalogs are cached by commit: a commit's content never changes, so there is
nothing to invalidate, only a bound on how many are kept.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from cachetools import LRUCache

from registry.channels import ChannelTable
from registry.errors import NotFound, NotReady
from registry.loading import LoadedAgent, ReleaseCatalog, check_agent_name
from registry.mirror import Syncer
from registry.models import AgentSummary, Prompt, Release, Resolution
from registry.releases import ChannelSelector, ReleaseIndex, parse_selector
from registry.rendering import RenderLimits
from registry.safeyaml import YamlLimits
from registry.store import Store

_CATALOGS_KEPT = 32
# How often a waiting request looks for a change: release and channel checks
# cost a stat, a scandir and a ref read, so this is cheap.
_LONG_POLL_CHECK_SECONDS = 0.2


@dataclass(frozen=True)
class AgentListing:
    """The agents of one release."""

    resolution: Resolution
    agents: list[AgentSummary]


@dataclass(frozen=True)
class AgentAnswer:
    """One agent at one release."""

    resolution: Resolution
    agent: LoadedAgent


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

    @property
    def etag(self) -> str:
        """Changes whenever a release or a channel does."""
        canonical = json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"))
        return "releases-" + hashlib.sha256(canonical.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class RenderAnswer:
    """A rendered prompt, with the agent and release it came from."""

    resolution: Resolution
    agent: LoadedAgent
    prompt: Prompt


class RegistryService:
    """Releases, agents and rendering over one store."""

    def __init__(
        self,
        store: Store,
        *,
        syncer: Syncer | None = None,
        long_poll_slots: int = 2,
        yaml_limits: YamlLimits = YamlLimits(),
        render_limits: RenderLimits = RenderLimits(),
    ) -> None:
        self.store = store
        self.syncer = syncer
        # Waiting requests hold a server thread each; bounding them keeps
        # threads free for ordinary requests whatever the gateways do.
        self._long_polls = threading.BoundedSemaphore(long_poll_slots)
        self._yaml_limits = yaml_limits
        self._render_limits = render_limits
        self._catalogs: LRUCache[str, ReleaseCatalog] = LRUCache(maxsize=_CATALOGS_KEPT)
        self._lock = threading.Lock()

    def releases(self) -> ReleaseOverview:
        """Every release, newest first, and the channels."""
        return ReleaseOverview(self.store.releases(), self.store.channels())

    def releases_after(self, known_etag: str | None, *, wait: float) -> tuple[ReleaseOverview, bool]:
        """The overview, waiting up to ``wait`` seconds for it to change from
        ``known_etag``. Returns it and whether this request waited (it does
        not when every long-poll slot is taken: the caller polls again)."""
        overview = self.releases()
        if known_etag is None or wait <= 0 or overview.etag != known_etag:
            return overview, False
        if not self._long_polls.acquire(blocking=False):
            return overview, False
        try:
            deadline = time.monotonic() + wait
            while (remaining := deadline - time.monotonic()) > 0:
                time.sleep(min(_LONG_POLL_CHECK_SECONDS, remaining))
                overview = self.releases()
                if overview.etag != known_etag:
                    break
            return overview, True
        finally:
            self._long_polls.release()

    def resolve(self, release: str | None) -> Resolution:
        """The release a request names: ``None`` or ``latest``, an exact
        version, a range, or a ``@channel``."""
        selector = parse_selector(release)
        index = self.store.releases()
        if isinstance(selector, ChannelSelector):
            resolved = self.store.channels().resolve(selector.name, index)
            return Resolution(requested=selector.text, release=resolved, channel=selector.name)
        return Resolution(requested=selector.text, release=index.resolve(selector))

    def list_agents(self, *, release: str | None = None) -> AgentListing:
        """Every agent of a release, invalid ones included with their errors."""
        resolution = self.resolve(release)
        return AgentListing(resolution, self._catalog(resolution.release).summaries())

    def get_agent(self, usecase: str, name: str, *, release: str | None = None) -> AgentAnswer:
        """One agent's definition at a release."""
        check_agent_name(usecase, name)
        resolution = self.resolve(release)
        return AgentAnswer(resolution, self._catalog(resolution.release).get(usecase, name))

    def render(self, usecase: str, name: str, inputs: Any, *, release: str | None = None) -> RenderAnswer:
        """One agent rendered with ``inputs`` at a release."""
        answer = self.get_agent(usecase, name, release=release)
        prompt = answer.agent.compiled.render(inputs, limits=self._render_limits)
        return RenderAnswer(answer.resolution, answer.agent, prompt)

    def readiness(self) -> dict[str, Any]:
        """What ``/readyz`` reports; ``NotReady`` before the first successful sync."""
        moved = [
            {"tag": r.tag, "serving": r.commit, "moved_to": r.moved_to}
            for r in self.store.releases().releases
            if r.moved_to is not None
        ]
        if self.syncer is None:
            return {"status": "ready", "moved_tags": moved}
        status = self.syncer.status()
        sync = {
            "remote": status.remote,
            "last_success": _timestamp(status.last_success),
            "last_attempt": _timestamp(status.last_attempt),
            "last_error": status.last_error,
        }
        if not status.synced:
            raise NotReady("no successful sync from the remote yet", sync=sync)
        return {"status": "ready", "sync": sync, "moved_tags": moved}

    def request_sync(self) -> None:
        """Fetch from the remote soon (a push notification arrived)."""
        if self.syncer is None:
            raise NotFound("this registry serves no remote, so there is nothing to sync")
        self.syncer.trigger()

    def close(self) -> None:
        """Stop syncing and release the store."""
        if self.syncer is not None:
            self.syncer.stop()
        self.store.close()

    def _catalog(self, release: Release) -> ReleaseCatalog:
        with self._lock:
            catalog = self._catalogs.get(release.commit)
        if catalog is not None:
            return catalog
        # Built outside the lock: listing a tree reads git, and other
        # releases' requests should not wait for it.
        catalog = ReleaseCatalog(
            self.store.tree(release),
            root=self.store.root,
            yaml_limits=self._yaml_limits,
        )
        with self._lock:
            return self._catalogs.setdefault(release.commit, catalog)


def _timestamp(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, tz=timezone.utc).isoformat(timespec="seconds")
