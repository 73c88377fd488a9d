"""The registry's operations, independent of HTTP.

``RegistryService`` is what the HTTP API and the CLI call; what it answers is
in ``registry.serving.answers``. Every operation resolves the requested
release to one commit first and then answers entirely from that commit's
catalog, so an answer is never mixed from two releases. Loaded agents are
cached by commit and path in the content tiers (``registry.serving.cache``): a
commit's content never changes, so there is nothing to invalidate, only
bounds. What a range, ``latest`` or a channel resolves to is a pointer: it is
cached next to the release index it was worked out from, and a new index (a
tag pushed, fetched, moved) replaces it.

With a remote, a replica has nothing to answer from before its first
successful sync: every request that reads releases is answered ``NotReady``
(``503 not-ready``) until then, never "no such release". And ``readiness``
turns ``NotReady`` again once fetches have failed for longer than the
syncer's ``failing_limit``, while requests go on being answered from what was
fetched.

With a remote and a Redis, replicas announce release changes to each other
(``registry.serving.events``): a worker that hears one fetches at once, and answers
pointer requests only after that fetch (up to ``CATCH_UP_SECONDS``), so that
no replica resolves a range to an outdated release once it has heard. A fetch
that failed is announced too when it changed what the replica serves. A
worker that reconnects to Redis states its releases; one whose differ
fetches, and answers with its own if they still differ.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timezone
from functools import lru_cache
from typing import Any

from cachetools import LRUCache

from registry.errors import (
    AgentNotFound,
    InvalidDefinition,
    InvalidInputs,
    NotAPrompt,
    NotFound,
    NotReady,
    ReleaseNotFound,
    RenderError,
    StoreError,
)
from registry.format.bundle import BundleRelease, encode_bundle
from registry.format.definition import check_agent_name
from registry.format.diff import LibraryDiff, diff_catalogs
from registry.format.loading import LoadedAgent, ReleaseCatalog
from registry.format.safeyaml import YamlLimits
from registry.format.versions import ChannelSelector, ExactSelector, Selector, parse_selector
from registry.models import AgentSummary, Release, Resolution
from registry.rendering import RenderLimits
from registry.serving.answers import AgentAnswer, AgentListing, DiffAnswer, ParseAnswer, ReleaseOverview, RenderAnswer
from registry.serving.cache import AgentKey, ContentCache, MemoryTier
from registry.serving.events import ReleaseChange, ReleaseEvents
from registry.serving.metrics import Metrics
from registry.store.channels import ChannelTable
from registry.store.mirror import NOT_SYNCED, SYNC_FAILING, Syncer, SyncStatus
from registry.store.protocol import Store
from registry.store.releases import ReleaseIndex

log = logging.getLogger(__name__)

# Catalogs are light (a tree handle and a template environment); the agents
# they load live in the content cache. A fleet whose gateways pin more
# releases than are kept re-reads a commit's tree on most requests, and the
# garbage brings full collections (bench/faults.py measured p99 21.8 ms
# against 16.8 at 100 pinned releases with 64 kept): keep many.
_CATALOGS_KEPT = 256
# Pointer resolutions kept per release index: bounded because range texts
# come from requests.
_RESOLUTIONS_KEPT = 1024
# Diffs between two commits never change (their files do not), and one
# renders every example of every changed agent twice: kept, a few of them.
_DIFFS_KEPT = 16
CATCH_UP_SECONDS = 2.0
# How often a waiting request looks for a change: release and channel checks
# cost a stat, a scandir and a ref read, so this is cheap.
_LONG_POLL_CHECK_SECONDS = 0.2


class RegistryService:
    """Releases, agents and rendering over one store."""

    def __init__(
        self,
        store: Store,
        *,
        syncer: Syncer | None = None,
        content: ContentCache[LoadedAgent | InvalidDefinition] | None = None,
        events: ReleaseEvents | None = None,
        metrics: Metrics | None = None,
        long_poll_slots: int = 2,
        yaml_limits: YamlLimits = YamlLimits(),
        render_limits: RenderLimits = RenderLimits(),
    ) -> None:
        self.store = store
        self.syncer = syncer
        self.metrics = metrics or Metrics()
        self.content = content or ContentCache(MemoryTier(4096), None, self.metrics)
        # Announcements only matter to a replica that fetches from a remote.
        self.events = events if syncer is not None else None
        # Waiting requests hold a server thread each; bounding them keeps
        # threads free for ordinary requests whatever the gateways do.
        self._long_polls = threading.BoundedSemaphore(long_poll_slots)
        self._yaml_limits = yaml_limits
        self._render_limits = render_limits
        self._catalogs: LRUCache[str, ReleaseCatalog] = LRUCache(maxsize=_CATALOGS_KEPT)
        self._diffs: LRUCache[tuple[str, str], LibraryDiff] = LRUCache(maxsize=_DIFFS_KEPT)
        self._resolutions: LRUCache[str, tuple[ReleaseIndex, ChannelTable | None, Resolution]] = LRUCache(
            maxsize=_RESOLUTIONS_KEPT
        )
        self._lock = threading.Lock()
        self._last_overview: ReleaseOverview | None = None
        # The fetch that must finish before pointers are trusted again (0: none).
        self._catch_up_fetch = 0
        self._announced_etag: str | None = None
        self._heard_etag: str | None = None
        # The state a reconnected replica stated, to answer after our fetch
        # if ours still differs.
        self._answer_etag: str | None = None
        # Once a sync has succeeded, the status file need not be read per request.
        self._synced = syncer is None
        self._reported_failing_since: float | None = None
        if syncer is not None:
            syncer.on_fetched = self._after_fetch

    def start(self) -> None:
        """Start the background work: fetching from the remote, hearing other replicas."""
        if self.events is not None:
            self.events.start(self.hear_release_change, state=self._current_etag)
        if self.syncer is not None:
            self.syncer.start()

    def releases(self) -> ReleaseOverview:
        """Every release, newest first, and the channels."""
        self._require_synced()
        return self._overview()

    def _overview(self) -> ReleaseOverview:
        index, channels = self.store.releases(), self.store.channels()
        last = self._last_overview
        if last is not None and last.index is index and last.channels is channels:
            return last
        self._last_overview = overview = ReleaseOverview(index, channels)
        return overview

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
                overview = self._overview()
                if overview.etag != known_etag:
                    break
            return overview, True
        finally:
            self._long_polls.release()

    def resolve(self, release: str | None) -> Resolution:
        """The release a request names: ``None`` or ``latest``, an exact
        version, a range, or a ``@channel``."""
        selector = _parse_selector(release)
        self._require_synced()
        if self._catch_up_fetch and not isinstance(selector, ExactSelector):
            self._catch_up()
        try:
            return self._resolve(selector)
        except ReleaseNotFound:
            # A release another replica announced may not be fetched here yet.
            if not self._catch_up_fetch:
                raise
            self._catch_up()
            return self._resolve(selector)

    def _resolve(self, selector: Selector) -> Resolution:
        index = self.store.releases()
        channels = self.store.channels() if isinstance(selector, ChannelSelector) else None
        cached = self._resolutions.get(selector.text)
        if cached is not None and cached[0] is index and cached[1] is channels:
            return cached[2]
        if isinstance(selector, ChannelSelector):
            assert channels is not None
            resolved = channels.resolve(selector.name, index)
            resolution = Resolution(requested=selector.text, release=resolved, channel=selector.name)
        else:
            resolved = index.resolve(selector)
            # A tag's content never changes (a moved tag keeps its first commit);
            # the worktree's does.
            immutable = isinstance(selector, ExactSelector) and resolved.version is not None
            resolution = Resolution(requested=selector.text, release=resolved, immutable=immutable)
        with self._lock:
            self._resolutions[selector.text] = (index, channels, resolution)
        return resolution

    def list_agents(self, *, release: str | None = None) -> AgentListing:
        """Every agent of a release, invalid ones included with their errors."""
        resolution = self.resolve(release)
        catalog = self._catalog(resolution.release)
        summaries = []
        for usecase, name in catalog.agent_names():
            path = catalog.repository_path(f"{usecase}/{name}.yml")
            loaded = self._load(catalog, usecase, name)
            if isinstance(loaded, InvalidDefinition):
                summaries.append(
                    AgentSummary(usecase, name, path, title=None, valid=False, errors=tuple(loaded.errors))
                )
            else:
                summaries.append(AgentSummary(usecase, name, loaded.path, title=loaded.title, valid=True))
        return AgentListing(resolution, summaries)

    def get_agent(self, usecase: str, name: str, *, release: str | None = None) -> AgentAnswer:
        """One agent's definition at a release."""
        check_agent_name(usecase, name)
        resolution = self.resolve(release)
        catalog = self._catalog(resolution.release)
        try:
            loaded = self._load(catalog, usecase, name)
        except AgentNotFound:
            # A catalog serves every tag of its commit: only the request knows
            # which release it named.
            raise catalog.agent_not_found(usecase, name, release=resolution.release) from None
        if isinstance(loaded, InvalidDefinition):
            # A fresh exception each time: re-raising one instance would grow
            # its traceback with every request.
            agent = f"{usecase}/{name}"
            raise InvalidDefinition(
                loaded.detail, loaded.errors, agent=agent, release=resolution.release.tag, **loaded.extensions
            )
        if loaded.graph is None:
            return AgentAnswer(resolution, loaded)
        return AgentAnswer(resolution, loaded, self._reached(catalog, loaded))

    def _reached(self, catalog: ReleaseCatalog, composite: LoadedAgent) -> tuple[LoadedAgent, ...]:
        """Every agent a valid composite can run, from the content cache: each
        was valid when the composite was checked, in the same commit."""
        assert composite.graph is not None
        reached = []
        for node in composite.graph["nodes"][1:]:
            usecase, _, name = str(node["agent"]).partition("/")
            loaded = self._load(catalog, usecase, name)
            if isinstance(loaded, InvalidDefinition):  # cannot be, in one commit; kept as a last line
                raise InvalidDefinition(loaded.detail, loaded.errors, agent=f"{usecase}/{name}")
            reached.append(loaded)
        return tuple(reached)

    def render(self, usecase: str, name: str, inputs: Any, *, release: str | None = None) -> RenderAnswer:
        """One agent rendered with ``inputs`` at a release."""
        return self.render_answer(self.get_agent(usecase, name, release=release), inputs)

    @property
    def render_limits(self) -> RenderLimits:
        """The bounds every render of this service keeps."""
        return self._render_limits

    def render_answer(self, answer: AgentAnswer, inputs: Any) -> RenderAnswer:
        """Render an agent already fetched with ``get_agent``."""
        try:
            prompt = answer.agent.compiled.render(inputs, limits=self._render_limits)
        except (InvalidInputs, RenderError, NotAPrompt) as exc:
            # Named here, where the release a range resolved to is known: the
            # problem carries both, and a client's exception message too.
            exc.locate(f"{answer.agent.usecase}/{answer.agent.name}", answer.resolution.release.tag)
            raise
        return RenderAnswer(answer.resolution, answer.agent, prompt)

    def parse(self, usecase: str, name: str, output: str, *, release: str | None = None) -> ParseAnswer:
        """A model's reply (``output``) parsed by one agent's output parser at a release."""
        answer = self.get_agent(usecase, name, release=release)
        return ParseAnswer(answer.resolution, answer.agent, answer.agent.compiled.parser.parse(output))

    def diff(self, source: str | None, target: str | None) -> LibraryDiff:
        """What changed between two releases (versions, ranges or channels)."""
        return self.compare(source, target).diff

    def compare(self, source: str | None, target: str | None) -> DiffAnswer:
        """What changed between two releases, and what each resolved to:
        each is resolved once, so a tag pushed meanwhile cannot make the
        diff and the resolutions disagree."""
        before, after = self.resolve(source), self.resolve(target)
        key = (before.release.commit, after.release.commit)
        with self._lock:
            diff = self._diffs.get(key)
        if diff is None or diff.source != before.release or diff.target != after.release:
            diff = diff_catalogs(
                before.release, self.catalog(before.release), after.release, self.catalog(after.release)
            )
            with self._lock:
                self._diffs[key] = diff
        return DiffAnswer(before, after, diff)

    def catalog(self, release: Release) -> ReleaseCatalog:
        """The catalog of one release (for the authors' commands)."""
        return self._catalog(release)

    def export_bundle(self, release: str | None = None) -> tuple[Resolution, bytes]:
        """Every agent and partial of a release as a bundle file (``registry.format.bundle``)."""
        resolution = self.resolve(release)
        catalog = self._catalog(resolution.release)
        agents, invalid = [], []
        for usecase, name in catalog.agent_names():
            loaded = self._load(catalog, usecase, name)
            if isinstance(loaded, InvalidDefinition):
                invalid.append((usecase, name, catalog.repository_path(f"{usecase}/{name}.yml"), loaded))
            else:
                source = catalog.definition_source(usecase, name)
                agents.append((usecase, name, loaded.path, loaded.digest, source))
        bundle_release = BundleRelease(
            tag=resolution.release.tag,
            version=resolution.release.version,
            commit=resolution.release.commit,
            content_id=catalog.tree.content_id,
        )
        return resolution, encode_bundle(
            bundle_release, agents=agents, invalid=invalid, partials=catalog.template_files()
        )

    def readiness(self) -> dict[str, Any]:
        """What ``/readyz`` reports; ``NotReady`` before the first successful
        sync, and once fetches have failed for longer than the syncer allows."""
        moved = [
            {"tag": r.tag, "serving": r.commit, "moved_to": r.moved_to}
            for r in self.store.releases().releases
            if r.moved_to is not None
        ]
        if self.syncer is None:
            return {"status": "ready", "moved_tags": moved}
        status = self.syncer.status()
        now = time.time()
        sync = {
            "remote": status.remote,
            "last_success": _timestamp(status.last_success),
            "last_attempt": _timestamp(status.last_attempt),
            "last_error": status.last_error,
            "failing_since": _timestamp(status.failing_since),
        }
        state = status.state(now)
        if state == NOT_SYNCED:
            raise NotReady("no successful sync from the remote yet", sync=sync)
        if state == SYNC_FAILING:
            detail = (
                f"fetches from the remote have failed for {status.failing_for(now):.0f} s, longer than the"
                f" {status.failing_limit:g} s allowed; still answering from what was fetched before"
            )
            self._report_failing(status, detail)
            raise NotReady(detail, sync=sync)
        return {"status": "ready", "sync": sync, "moved_tags": moved}

    def _report_failing(self, status: SyncStatus, detail: str) -> None:
        """Log, once per run of failures, that this replica is not ready because of them."""
        if self._reported_failing_since == status.failing_since:
            return
        self._reported_failing_since = status.failing_since
        log.error("not ready: %s (the latest error: %s)", detail, status.last_error)

    def cache_status(self) -> dict[str, Any]:
        """What ``GET /v1/admin/cache`` reports: the tiers of this worker."""
        shared = self.content.shared
        return {
            "memory": {"entries": len(self.content.memory), "capacity": self.content.memory.capacity},
            "redis": None
            if shared is None
            else {
                "prefix": shared.prefix,
                "available": shared.available,
                "announcements": None if self.events is None else self.events.subscribed.is_set(),
            },
        }

    def request_sync(self) -> None:
        """Fetch from the remote soon (a push notification arrived)."""
        if self.syncer is None:
            raise NotFound("this registry serves no remote, so there is nothing to sync")
        self.syncer.trigger()

    def close(self) -> None:
        """Stop the background work and release the store and Redis."""
        if self.events is not None:
            self.events.stop()
        if self.syncer is not None:
            self.syncer.stop()
        if self.content.shared is not None:
            self.content.shared.close()
        self.store.close()

    def hear_release_change(self, change: ReleaseChange) -> None:
        """Another replica announced a release change, or stated its releases
        on reconnecting to Redis: unless we serve exactly that, fetch now, and
        hold pointer requests until that fetch is done."""
        if self.syncer is None:
            return
        if change.etag is not None:
            self._heard_etag = change.etag
            if change.etag == self._overview().etag:
                return  # we already serve exactly that
        if change.reconnected:
            self._answer_etag = change.etag
        fetch = self.syncer.trigger()
        with self._lock:
            self._catch_up_fetch = max(self._catch_up_fetch, fetch)

    def _after_fetch(self, succeeded: bool) -> None:
        """After each fetch: announce a change this replica is the first to
        see, or answer a replica that stated different releases.

        A failed fetch is looked at too: one that moved refs before it failed
        (the remote's default branch is read after them) changed what this
        replica serves, and the others must hear of it like any change.
        """
        if self.events is None or (not succeeded and self._announced_etag is None):
            return
        try:
            etag = self._overview().etag
        except StoreError as exc:
            log.warning("cannot read the releases after a fetch, so announcing nothing: %s", exc.detail)
            return
        previous, self._announced_etag = self._announced_etag, etag
        answer, self._answer_etag = self._answer_etag, None
        # A process's first fetch is no change to the fleet (every replica
        # starts that way), so it is not announced: a deploy would otherwise
        # make every worker of every replica fetch again.
        changed = previous is not None and etag != previous and etag != self._heard_etag
        if changed or (answer is not None and etag != answer):
            self.events.publish(etag)

    def _current_etag(self) -> str | None:
        """This replica's releases, for a reconnected subscriber to state;
        None before the first sync, when it has none to state."""
        if not self._has_synced():
            return None
        try:
            return self._overview().etag
        except StoreError:
            return None

    def _require_synced(self) -> None:
        """Before its first sync a replica has no releases to answer from: it
        says that it is not ready, never that a release does not exist."""
        if not self._has_synced():
            raise NotReady("this replica has not synced from its remote yet; ask again shortly")

    def _has_synced(self) -> bool:
        if not self._synced and self.syncer is not None and self.syncer.status().synced:
            self._synced = True
        return self._synced

    def _catch_up(self) -> None:
        """Wait (boundedly) for the fetch a release announcement asked for."""
        fetch = self._catch_up_fetch
        if not fetch or self.syncer is None:
            return
        if not self.syncer.wait_for(fetch, CATCH_UP_SECONDS):
            log.warning(
                "a fetch for a release another replica announced is taking over %g s; answering from what is here",
                CATCH_UP_SECONDS,
            )
        with self._lock:
            if self._catch_up_fetch == fetch:
                self._catch_up_fetch = 0

    def _load(self, catalog: ReleaseCatalog, usecase: str, name: str) -> LoadedAgent | InvalidDefinition:
        """One agent of a release, from the first cache tier that has it."""

        def load() -> LoadedAgent | InvalidDefinition:
            loaded = catalog.load(usecase, name)
            self.metrics.definition_loads.labels("invalid" if isinstance(loaded, InvalidDefinition) else "valid").inc()
            return loaded

        return self.content.get(
            AgentKey(catalog.commit, usecase, name),
            load,
            encode=catalog.encode,
            decode=lambda data: catalog.decode(usecase, name, data),
        )

    def _catalog(self, release: Release) -> ReleaseCatalog:
        with self._lock:
            catalog = self._catalogs.get(release.commit)
        if catalog is not None:
            return catalog
        # Built outside the lock: finding the tree reads git, and other
        # releases' requests should not wait for it.
        catalog = ReleaseCatalog(
            self.store.tree(release),
            root=self.store.root,
            yaml_limits=self._yaml_limits,
        )
        with self._lock:
            return self._catalogs.setdefault(release.commit, catalog)


@lru_cache(maxsize=_RESOLUTIONS_KEPT)
def _parse_selector(text: str | None) -> Selector:
    """``parse_selector``, remembered: parsing a range is most of resolving one."""
    return parse_selector(text)


def _timestamp(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, tz=timezone.utc).isoformat(timespec="seconds")
