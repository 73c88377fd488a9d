"""What the sync and async clients share: building requests, reading answers,
retry decisions, fallbacks. No IO happens here; each client sends requests
and sleeps in its own way, and calls these for everything else."""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote

import httpx

from registry.client.agent import Agent, _Compilation, as_request_json
from registry.client.cache import AgentCache, CacheKey, Entry
from registry.client.retry_after import parse_retry_after
from registry.errors import (
    ERRORS_BY_SLUG,
    InvalidDefinition,
    InvalidInputs,
    InvalidRequest,
    NotFound,
    RegistryError,
    RegistryUnavailable,
    RenderError,
    Unauthorized,
)
from registry.format.bundle import Bundle, BundledAgent
from registry.format.definition import check_agent_name
from registry.format.versions import ExactSelector, RangeSelector, parse_selector, parse_version, release_for_tag
from registry.models import AgentSummary, Issue, Message, Placeholder, Prompt, Release, Resolution

log = logging.getLogger("registry.client")

RETRIED_STATUSES = frozenset({429, 502, 503, 504})
# After a failure, cold requests with a bundle skip the network for this long,
# so that an outage costs one timeout, not one per agent.
OUTAGE_COOLDOWN_SECONDS = 5.0
# A failed background refresh keeps the stale entry this long before trying again.
STALE_RETRY_SECONDS = 5.0
# How long one long-poll of the release list waits for a change (the server caps it at 60 s).
FOLLOW_WAIT_SECONDS = 30.0


@dataclass(frozen=True)
class RetryPolicy:
    """Retries for idempotent requests, on connection errors and 429/502/503/504.

    ``attempts`` counts the first try. Delays grow exponentially from
    ``backoff`` up to ``max_backoff``, with jitter; a ``Retry-After`` is
    honoured when it is at most ``max_retry_after`` seconds, and a longer one
    ends the retries at once (the gateway does not wait minutes for a prompt).
    """

    attempts: int = 3
    backoff: float = 0.1
    max_backoff: float = 2.0
    max_retry_after: float = 5.0

    def delay(self, attempt: int, retry_after: float | None) -> float | None:
        """Seconds to wait before try ``attempt + 1`` (0-based), or None to stop."""
        if attempt + 1 >= self.attempts:
            return None
        if retry_after is not None:
            return retry_after if retry_after <= self.max_retry_after else None
        ceiling = min(self.max_backoff, self.backoff * 2.0**attempt)
        return ceiling * (0.5 + random.random() / 2)


DEFAULT_RETRIES = RetryPolicy()


@dataclass(frozen=True)
class Releases:
    """``GET /v1/releases``: every release, the latest, and the channels."""

    releases: tuple[Release, ...]
    latest: str | None
    channels: dict[str, Any]


@dataclass(frozen=True)
class Catalog:
    """``GET /v1/agents``: the agents of one release, as it was resolved.
    Invalid agents are listed too, with their errors (``valid`` false)."""

    resolution: Resolution
    agents: tuple[AgentSummary, ...]


class Outage:
    """Logs an outage once when it starts (with what the client can still
    serve, as ``fallback`` puts it) and once when it ends, not per request."""

    def __init__(self, base_url: str, *, fallback: Callable[[], str]) -> None:
        self._base_url = base_url
        self._fallback = fallback
        self._since: float | None = None
        self._last_failure = -math.inf
        self._lock = threading.Lock()

    def failed(self, reason: str) -> None:
        with self._lock:
            self._last_failure = time.monotonic()
            if self._since is not None:
                return
            self._since = self._last_failure
        log.warning("registry %s unavailable (%s); %s", self._base_url, reason, self._fallback())

    def answered(self) -> None:
        with self._lock:
            if self._since is None:
                return
            seconds, self._since = time.monotonic() - self._since, None
        log.warning("registry %s answering again after %.1f s", self._base_url, seconds)

    def recent(self) -> bool:
        return time.monotonic() - self._last_failure < OUTAGE_COOLDOWN_SECONDS


class ClientCore:
    """The state and logic of a client, without its IO."""

    def __init__(
        self,
        base_url: str,
        *,
        release: str | None,
        ttl: float,
        bundle: str | Bundle | None,
        retries: RetryPolicy,
    ) -> None:
        if release is not None:
            parse_selector(release)  # a bad pin fails at startup, not on the first prompt
        if not ttl >= 0:
            raise ValueError("ttl must be a number of seconds, 0 or more")
        self.base_url = base_url.rstrip("/")
        self.release = release
        self.cache = AgentCache(ttl=ttl)
        self.retries = retries
        self.outage = Outage(self.base_url, fallback=self.fallback)
        self.bundle = Bundle.open(bundle) if isinstance(bundle, str) else bundle

    # -- requests --------------------------------------------------------

    def key(self, usecase: str, name: str, release: str | None) -> CacheKey:
        # Refused here, before a URL is made: "." and ".." would leave the route.
        check_agent_name(usecase, name)
        selector = release if release is not None else self.release
        return (usecase, name, selector or "latest")

    def agent_url(self, key: CacheKey, suffix: str = "") -> str:
        usecase, name, selector = key
        return f"/v1/agents/{quote(usecase, safe='')}/{quote(name, safe='')}{suffix}?release={quote(selector, safe='')}"

    def agent_headers(self, entry: Entry | None) -> dict[str, str]:
        return {"If-None-Match": f'"{entry.agent.digest}"'} if entry is not None else {}

    def render_body(self, inputs: dict[str, Any] | None) -> dict[str, Any]:
        return {"inputs": as_request_json(inputs or {})}

    def retry_delay(self, attempt: int, response: httpx.Response | None) -> float | None:
        asked = parse_retry_after(response.headers.get("Retry-After")) if response is not None else None
        return self.retries.delay(attempt, asked)

    def unavailable(self, request: httpx.Request, failure: BaseException | httpx.Response) -> RegistryUnavailable:
        if isinstance(failure, httpx.Response):
            reason = f"{request.method} {request.url.path} answered {failure.status_code}"
        else:
            reason = f"{request.method} {request.url.path}: {type(failure).__name__}: {failure}"
        self.outage.failed(reason)
        return RegistryUnavailable(f"the registry at {self.base_url} is unavailable ({reason})")

    # -- answers ---------------------------------------------------------

    def agent_outcome(self, key: CacheKey, entry: Entry | None, response: httpx.Response) -> Agent:
        """The agent an answer gives (caching it), or the error it means."""
        if response.status_code == 304 and entry is not None:
            # Same content; but a range may now resolve to another release
            # holding it, and the provenance must say which.
            tag, commit = response.headers.get("X-Registry-Release"), response.headers.get("X-Registry-Commit")
            if entry.agent.source == "bundle" or (
                tag and commit and (tag, commit) != (entry.agent.tag, entry.agent.commit)
            ):
                agent = replace(entry.agent, source="server")  # confirmed by the registry
                if tag and commit and (tag, commit) != (agent.tag, agent.commit):
                    release = release_for_tag(tag, commit) or Release(tag=tag, version=None, commit=commit)
                    agent = replace(agent, release=replace(agent.release, release=release))
                self.cache.put(key, agent, immutable=entry.immutable)
                return agent
            self.cache.renew(key, entry)
            return entry.agent
        body = self.json_answer(response, key)
        try:
            agent = _agent_from_answer(body)
        except (KeyError, TypeError, ValueError) as exc:
            raise self.malformed(response, exc) from exc
        immutable = "immutable" in response.headers.get("Cache-Control", "")
        self.cache.put(key, agent, immutable=immutable)
        return agent

    def prompt_outcome(self, key: CacheKey, response: httpx.Response) -> Prompt:
        body = self.json_answer(response, key)
        try:
            messages = tuple(Message(_text(m["role"]), _text(m["content"])) for m in body["messages"])
            return Prompt(
                messages=messages,
                model=_object_or_none(body.get("model")),
                params=_object_or_none(body.get("params")),
                placeholders=tuple(_placeholder(p, messages) for p in body.get("placeholders", ())),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise self.malformed(response, exc) from exc

    def releases_outcome(self, response: httpx.Response) -> Releases:
        body = self.json_answer(response)
        try:
            releases = tuple(_release(r) for r in body["releases"])
            return Releases(releases, body.get("latest"), dict(body.get("channels") or {}))
        except (KeyError, TypeError, ValueError) as exc:
            raise self.malformed(response, exc) from exc

    def catalog_outcome(self, response: httpx.Response) -> Catalog:
        body = self.json_answer(response)
        try:
            immutable = "immutable" in response.headers.get("Cache-Control", "")
            return Catalog(_resolution(body["release"], immutable=immutable), tuple(map(_summary, body["agents"])))
        except (KeyError, TypeError, ValueError) as exc:
            raise self.malformed(response, exc) from exc

    def resolution_outcome(self, response: httpx.Response) -> Resolution:
        body = self.json_answer(response)
        try:
            return _resolution(body["release"], immutable="immutable" in response.headers.get("Cache-Control", ""))
        except (KeyError, TypeError, ValueError) as exc:
            raise self.malformed(response, exc) from exc

    def json_answer(self, response: httpx.Response, key: CacheKey | None = None) -> dict[str, Any]:
        """A successful answer's JSON object; raises the error an error answer
        means (about the agent ``key`` names, when the request was for one)."""
        if response.status_code >= 500 or response.status_code == 429:
            raise self.unavailable(response.request, response)
        if response.status_code != 200:
            raise error_from_problem(response, key)
        try:
            body = response.json()
        except ValueError as exc:
            raise self.malformed(response, exc) from exc
        if not isinstance(body, dict):
            raise self.malformed(response, TypeError("not a JSON object"))
        return body

    def malformed(self, response: httpx.Response, exc: BaseException) -> RegistryUnavailable:
        return self.unavailable(response.request, ValueError(f"malformed answer ({exc})"))

    # -- fallbacks -------------------------------------------------------

    def from_bundle(self, key: CacheKey, error: RegistryUnavailable) -> Agent:
        """The agent from the bundle, when there is one for this release;
        else ``error``, saying why there is none. Cached for a TTL, so that
        an outage is not paid for on every request."""
        usecase, name, selector = key
        if self.bundle is None:
            raise RegistryUnavailable(f"{error.detail}; nothing cached and no bundle") from error
        misfit = bundle_misfit(selector, self.bundle)
        if misfit is not None:
            raise RegistryUnavailable(f"{error.detail}; {misfit}") from error
        release = Resolution(requested=selector, release=self.bundle.release.as_release())
        bundled = self.bundle.agent(usecase, name)
        agent = _agent_from_bundle(bundled, release)
        if bundled.reaches:
            # A composite: every agent it can run, from the same bundle, as the server would send them.
            members = [self.bundle.agent(*reached.split("/", 1)) for reached in bundled.reaches]
            agent = replace(agent, agents={f"{m.usecase}/{m.name}": _agent_from_bundle(m, release) for m in members})
        self.cache.put(key, agent, immutable=False, source="bundle")
        return agent

    def fallback(self) -> str:
        """What the client can serve while the registry is unavailable, in words."""
        cached = len(self.cache) > 0
        if self.bundle is None:
            return "serving cached prompts" if cached else "nothing cached or bundled to serve until it answers again"
        misfit = bundle_misfit(self.release or "latest", self.bundle)
        if misfit is None:
            bundled = f"{self.bundle.label} ({self.bundle.release.tag})"
            return f"serving cached prompts and {bundled}" if cached else f"serving {bundled}"
        return f"serving cached prompts; {misfit}" if cached else f"nothing cached to serve, and {misfit}"

    def should_skip_network(self) -> bool:
        """During an outage, a cold request with a bundle goes to the bundle at once."""
        return self.bundle is not None and self.outage.recent()

    def refresh_failed(self, key: CacheKey, entry: Entry, exc: BaseException) -> None:
        """A background refresh failed: keep serving the stale entry for a while,
        unless the registry said the agent is gone from what the key names."""
        if isinstance(exc, NotFound):
            log.warning("%s/%s at %s: %s; dropping the cached copy", *key, exc)
            self.cache.discard(key)
        elif isinstance(exc, RegistryUnavailable):
            self.cache.renew(key, entry, seconds=min(self.cache.ttl, STALE_RETRY_SECONDS))
        else:
            log.warning("refreshing %s/%s at %s failed: %s", *key, exc, exc_info=not isinstance(exc, RegistryError))
            self.cache.renew(key, entry, seconds=min(self.cache.ttl, STALE_RETRY_SECONDS))


def bundle_misfit(selector: str, bundle: Bundle) -> str | None:
    """Why ``bundle`` may not answer for ``selector``, or None when it may:
    for an exact tag it is, a range it is in, or latest/a channel (the best there is)."""
    tag = bundle.release.tag
    parsed = parse_selector(None if selector == "latest" else selector)
    version = parse_version(tag)
    if isinstance(parsed, ExactSelector):
        if parsed.text == tag or (version is not None and parsed.version == version):
            return None
        return f"{bundle.label} holds {tag}, not {selector}"
    if isinstance(parsed, RangeSelector) and (version is None or not parsed.matches(version)):
        return f"{bundle.label} holds {tag}, which does not satisfy {selector}"
    return None


def error_from_problem(response: httpx.Response, key: CacheKey | None = None) -> RegistryError:
    """The typed error an RFC 9457 problem answer stands for; an error about
    the agent of ``key`` names it, and the release requested."""
    try:
        body = response.json()
        slug = str(body["type"]).rsplit("/", 1)[-1]
        detail = str(body.get("detail") or body.get("title") or response.reason_phrase)
    except (ValueError, KeyError, TypeError, AttributeError):
        return InvalidRequest(f"the registry answered {response.status_code} without a problem body")
    cls = ERRORS_BY_SLUG.get(slug)
    extensions = {k: v for k, v in body.items() if k not in {"type", "title", "status", "detail", "errors"}}
    if cls is None:
        unknown = NotFound if response.status_code == 404 else InvalidRequest
        error: RegistryError = unknown(detail, **extensions)
    elif cls is Unauthorized:
        error = Unauthorized(detail, bearer="WWW-Authenticate" in response.headers)
    elif issubclass(cls, (InvalidInputs, InvalidDefinition)):
        issues = [Issue.from_dict(i) for i in body.get("errors") or [] if isinstance(i, dict)]
        error = cls(detail, issues, **extensions)
    else:
        error = cls(detail, **extensions)
    if key is not None and isinstance(error, (InvalidDefinition, InvalidInputs, RenderError)):
        usecase, name, selector = key
        # A registry names the agent and tag in the problem (taken as the
        # error's own, above); one that does not is named by the selector.
        error.locate(f"{usecase}/{name}", selector)
    return error


def _agent_from_bundle(bundled: BundledAgent, release: Resolution) -> Agent:
    return Agent(
        usecase=bundled.usecase,
        name=bundled.name,
        path=bundled.path,
        release=release,
        digest=bundled.digest,
        definition=bundled.compiled.definition,
        partials=bundled.partials,
        source="bundle",
        _compilation=_Compilation(bundled.compiled),
    )


def _agent_from_answer(body: dict[str, Any], release: Resolution | None = None) -> Agent:
    """An agent from a GET answer; a composite's agents (``agents``) share its release."""
    definition, partials = body["definition"], body["partials"]
    if not isinstance(definition, dict) or not isinstance(partials, dict):
        raise TypeError("definition and partials must be objects")
    release = release or _resolution(body["release"], immutable=False)
    graph, members = body.get("graph"), body.get("agents") or {}
    if (graph is not None and not isinstance(graph, dict)) or not isinstance(members, dict):
        raise TypeError("graph and agents must be objects")
    return Agent(
        usecase=_text(body["usecase"]),
        name=_text(body["name"]),
        path=_text(body["path"]),
        release=release,
        digest=_text(body["digest"]),
        definition=definition,
        partials={_text(k): _text(v) for k, v in partials.items()},
        source="server",
        graph=graph,
        agents={_text(name): _agent_from_answer(member, release) for name, member in members.items()},
    )


def _resolution(data: dict[str, Any], *, immutable: bool) -> Resolution:
    release = Release(tag=_text(data["tag"]), version=data.get("version"), commit=_text(data["commit"]))
    return Resolution(
        requested=_text(data["requested"]), release=release, channel=data.get("channel"), immutable=immutable
    )


def _summary(data: dict[str, Any]) -> AgentSummary:
    title = data.get("title")
    return AgentSummary(
        usecase=_text(data["usecase"]),
        name=_text(data["name"]),
        path=_text(data["path"]),
        title=None if title is None else _text(title),
        valid=data["valid"] is True,
        errors=tuple(Issue.from_dict(issue) for issue in data.get("errors") or ()),
    )


def _release(data: dict[str, Any]) -> Release:
    return Release(
        tag=_text(data["tag"]),
        version=data.get("version"),
        commit=_text(data["commit"]),
        prerelease=bool(data.get("prerelease", False)),
        moved_to=data.get("moved_to"),
    )


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _placeholder(value: Any, messages: tuple[Message, ...]) -> Placeholder:
    """One of a render answer's ``placeholders``: it must be where it says."""
    index, start, end = (_count(value[key]) for key in ("message", "start", "end"))
    name = _text(value["name"])
    if index >= len(messages) or messages[index].content[start:end] != f"{{{name}}}":
        raise ValueError(f"placeholder {name!r} is not where it says")
    return Placeholder(index, name, start, end)


def _count(value: Any) -> int:
    if type(value) is not int or value < 0:
        raise TypeError(f"expected a non-negative integer, got {value!r}")
    return value


def _object_or_none(value: Any) -> dict[str, Any] | None:
    if value is not None and not isinstance(value, dict):
        raise TypeError("expected an object or null")
    return value
