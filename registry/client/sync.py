"""``RegistryClient``: the thread-safe, blocking client."""

from __future__ import annotations

import logging
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from registry.client import tls
from registry.client.agent import Agent
from registry.client.cache import CacheKey, Entry
from registry.client.core import (
    DEFAULT_RETRIES,
    FOLLOW_WAIT_SECONDS,
    RETRIED_STATUSES,
    Catalog,
    ClientCore,
    Releases,
    RetryPolicy,
)
from registry.errors import RegistryUnavailable
from registry.format.bundle import Bundle
from registry.models import Prompt, Resolution

log = logging.getLogger("registry.client")


class RegistryClient:
    """Fetches agents from a registry, pinned to a release, and keeps them.

    One instance is meant to be shared by every thread of a process::

        client = RegistryClient("http://registry:8080", release="^1.2", bundle="prompts-v1.2.0.json")
        prompt = client.get("chat", "minimal").render(question="...")

    ``get`` answers from memory whenever it can: agents fetched by exact tag
    are kept for good; by range, ``latest`` or channel for ``ttl`` seconds,
    then served stale while one background request revalidates them. When
    the registry cannot answer, a cached agent is served, then the bundle;
    with neither, ``RegistryUnavailable`` is raised. ``follow=True`` watches
    the registry's release list so that a new release is seen within about
    a second rather than a TTL.
    """

    def __init__(
        self,
        base_url: str,
        *,
        release: str | None = None,
        timeout: float = 2.0,
        ttl: float = 60.0,
        bundle: str | Bundle | None = None,
        token: str | None = None,
        retries: RetryPolicy = DEFAULT_RETRIES,
        follow: bool = False,
        follow_wait: float = FOLLOW_WAIT_SECONDS,
        transport: httpx.BaseTransport | None = None,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        self._core = ClientCore(base_url, release=release, ttl=ttl, bundle=bundle, retries=retries)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(
            base_url=self._core.base_url,
            timeout=timeout,
            headers=headers,
            transport=transport,
            # A given transport is used as it is: no context to build for it.
            verify=tls.context_for(self._core.base_url, verify) if transport is None else verify,
        )
        self._timeout = timeout
        self._follow_wait = follow_wait
        self._refresher = ThreadPoolExecutor(max_workers=2, thread_name_prefix="registry-refresh")
        self._stopping = threading.Event()
        self._follower: threading.Thread | None = None
        if follow:
            self._follower = threading.Thread(target=self._follow, name="registry-follow", daemon=True)
            self._follower.start()

    @property
    def release(self) -> str | None:
        """The release this client is pinned to (None: latest)."""
        return self._core.release

    def get(self, usecase: str, name: str, *, release: str | None = None) -> Agent:
        """The agent ``usecase/name`` at ``release`` (default: the client's pin)."""
        key = self._core.key(usecase, name, release)
        entry = self._core.cache.get(key)
        if entry is not None:
            if not entry.is_fresh(time.monotonic()) and self._core.cache.begin_refresh(key):
                self._submit_refresh(key, entry)
            return entry.agent
        if self._core.should_skip_network():
            try:
                return self._core.from_bundle(key, RegistryUnavailable("registry unavailable"))
            except RegistryUnavailable:
                pass  # no bundle for this release: try the registry after all
        try:
            return self._fetch(key, None)
        except RegistryUnavailable as error:
            return self._core.from_bundle(key, error)

    def render(
        self, usecase: str, name: str, inputs: dict[str, Any] | None = None, *, release: str | None = None
    ) -> Prompt:
        """Render on the server (``POST .../render``); ``get(...).render(...)``
        gives the same result locally. Not retried, and no fallback."""
        key = self._core.key(usecase, name, release)
        request = self._http.build_request(
            "POST", self._core.agent_url(key, "/render"), json=self._core.render_body(inputs)
        )
        return self._core.prompt_outcome(key, self._send(request, retry=False))

    def releases(self) -> Releases:
        """Every release of the registry, its latest, and its channels."""
        return self._core.releases_outcome(self._send(self._http.build_request("GET", "/v1/releases")))

    def agents(self, release: str | None = None) -> Catalog:
        """The agents of ``release`` (default: the client's pin), and what it resolved to."""
        selector = release if release is not None else self._core.release
        params = {"release": selector} if selector else {}
        return self._core.catalog_outcome(self._send(self._http.build_request("GET", "/v1/agents", params=params)))

    def resolve(self, release: str | None = None) -> Resolution:
        """What ``release`` (default: the client's pin) resolves to now."""
        selector = release if release is not None else self._core.release
        params = {"release": selector} if selector else {}
        return self._core.resolution_outcome(self._send(self._http.build_request("GET", "/v1/agents", params=params)))

    def close(self) -> None:
        """Stop background work and close connections."""
        self._stopping.set()
        self._refresher.shutdown(wait=False, cancel_futures=True)
        # A follower waiting in a long-poll ends when it returns (a daemon
        # thread: it never holds up the process's exit).
        self._http.close()

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- internals -------------------------------------------------------

    def _fetch(self, key: CacheKey, entry: Entry | None) -> Agent:
        request = self._http.build_request("GET", self._core.agent_url(key), headers=self._core.agent_headers(entry))
        return self._core.agent_outcome(key, entry, self._send(request))

    def _send(self, request: httpx.Request, *, retry: bool = True) -> httpx.Response:
        """Send with retries; ``RegistryUnavailable`` when no answer came."""
        attempt = 0
        while True:
            failure: BaseException | httpx.Response
            try:
                response = self._http.send(request)
            except httpx.HTTPError as exc:
                failure = exc
                delay = self._core.retry_delay(attempt, None) if retry else None
            else:
                if response.status_code not in RETRIED_STATUSES:
                    if response.status_code < 500:
                        self._core.outage.answered()
                    return response
                failure = response
                delay = self._core.retry_delay(attempt, response) if retry else None
            if delay is None:
                if isinstance(failure, httpx.Response):
                    return failure  # the caller turns a 429/5xx answer into RegistryUnavailable
                raise self._core.unavailable(request, failure) from failure
            self._stopping.wait(delay)
            attempt += 1

    def _submit_refresh(self, key: CacheKey, entry: Entry) -> None:
        try:
            self._refresher.submit(self._refresh, key, entry)
        except RuntimeError:  # closed
            self._core.cache.end_refresh(key)

    def _refresh(self, key: CacheKey, entry: Entry) -> None:
        try:
            self._fetch(key, entry)
        except Exception as exc:  # a background task: nothing above it would see the error
            self._core.refresh_failed(key, entry, exc)
        finally:
            self._core.cache.end_refresh(key)

    def _follow(self) -> None:
        """Long-poll ``GET /v1/releases``; on a change, refresh every pointer entry."""
        etag: str | None = None
        while not self._stopping.is_set():
            headers = {"Prefer": f"wait={self._follow_wait:g}"}
            if etag is not None:
                headers["If-None-Match"] = etag
            try:
                response = self._http.get("/v1/releases", headers=headers, timeout=self._follow_wait + self._timeout)
            except httpx.HTTPError:
                self._stopping.wait(1.0)
                continue
            except RuntimeError:  # the client was closed
                return
            if response.status_code == 200:
                seen = response.headers.get("ETag")
                if etag is not None and seen != etag:
                    self._release_changed()
                etag = seen
            elif response.status_code != 304:
                self._stopping.wait(1.0)

    def _release_changed(self) -> None:
        for key in self._core.cache.expire_pointers():
            entry = self._core.cache.get(key)
            if entry is not None and self._core.cache.begin_refresh(key):
                self._submit_refresh(key, entry)
