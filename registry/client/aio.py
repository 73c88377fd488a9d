"""``AsyncRegistryClient``: the asyncio client. Same behaviour as
``RegistryClient``; network waits are awaited, and CPU work that can take
milliseconds (compiling templates, verifying a bundle) runs in a thread, so
the event loop is never blocked."""

from __future__ import annotations

import asyncio
import ssl
import time
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


class AsyncRegistryClient:
    """The asyncio twin of ``RegistryClient``::

        async with AsyncRegistryClient("http://registry:8080", release="^1.2") as client:
            agent = await client.get("chat", "minimal")
            prompt = agent.render(question="...")   # compiled already: cheap

    Background refreshes and the release follower are tasks of the loop the
    client is first used in. Agents are compiled in a thread before they are
    returned, so ``agent.render`` never compiles on the loop.
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
        transport: httpx.AsyncBaseTransport | None = None,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        # Opening a bundle reads and hashes a file: done here, at startup, like
        # the sync client, before any request is served.
        self._core = ClientCore(base_url, release=release, ttl=ttl, bundle=bundle, retries=retries)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(
            base_url=self._core.base_url,
            timeout=timeout,
            headers=headers,
            transport=transport,
            verify=tls.context_for(self._core.base_url, verify) if transport is None else verify,
        )
        self._timeout = timeout
        self._follow_wait = follow_wait
        self._follow_wanted = follow
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    @property
    def release(self) -> str | None:
        return self._core.release

    async def get(self, usecase: str, name: str, *, release: str | None = None) -> Agent:
        """The agent ``usecase/name`` at ``release`` (default: the client's pin)."""
        self._start_following()
        key = self._core.key(usecase, name, release)
        entry = self._core.cache.get(key)
        if entry is not None:
            if not entry.is_fresh(time.monotonic()) and self._core.cache.begin_refresh(key):
                self._spawn(self._refresh(key, entry))
            return entry.agent
        if self._core.should_skip_network():
            try:
                return await self._from_bundle(key, RegistryUnavailable("registry unavailable"))
            except RegistryUnavailable:
                pass
        try:
            agent = await self._fetch(key, None)
        except RegistryUnavailable as error:
            return await self._from_bundle(key, error)
        await asyncio.to_thread(lambda: agent.compiled)
        return agent

    async def render(
        self, usecase: str, name: str, inputs: dict[str, Any] | None = None, *, release: str | None = None
    ) -> Prompt:
        """Render on the server; not retried, no fallback."""
        key = self._core.key(usecase, name, release)
        request = self._http.build_request(
            "POST", self._core.agent_url(key, "/render"), json=self._core.render_body(inputs)
        )
        return self._core.prompt_outcome(key, await self._send(request, retry=False))

    async def releases(self) -> Releases:
        return self._core.releases_outcome(await self._send(self._http.build_request("GET", "/v1/releases")))

    async def agents(self, release: str | None = None) -> Catalog:
        selector = release if release is not None else self._core.release
        params = {"release": selector} if selector else {}
        return self._core.catalog_outcome(
            await self._send(self._http.build_request("GET", "/v1/agents", params=params))
        )

    async def resolve(self, release: str | None = None) -> Resolution:
        selector = release if release is not None else self._core.release
        params = {"release": selector} if selector else {}
        return self._core.resolution_outcome(
            await self._send(self._http.build_request("GET", "/v1/agents", params=params))
        )

    async def aclose(self) -> None:
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._http.aclose()

    async def __aenter__(self) -> AsyncRegistryClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- internals -------------------------------------------------------

    async def _fetch(self, key: CacheKey, entry: Entry | None) -> Agent:
        request = self._http.build_request("GET", self._core.agent_url(key), headers=self._core.agent_headers(entry))
        return self._core.agent_outcome(key, entry, await self._send(request))

    async def _from_bundle(self, key: CacheKey, error: RegistryUnavailable) -> Agent:
        # Verifying a bundled agent parses and compiles it: off the loop.
        return await asyncio.to_thread(self._core.from_bundle, key, error)

    async def _send(self, request: httpx.Request, *, retry: bool = True) -> httpx.Response:
        attempt = 0
        while True:
            failure: BaseException | httpx.Response
            try:
                response = await self._http.send(request)
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
                    return failure
                raise self._core.unavailable(request, failure) from failure
            await asyncio.sleep(delay)
            attempt += 1

    def _spawn(self, coroutine: Any) -> None:
        if self._closed:
            coroutine.close()
            return
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _refresh(self, key: CacheKey, entry: Entry) -> None:
        try:
            agent = await self._fetch(key, entry)
            await asyncio.to_thread(lambda: agent.compiled)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a background task: nothing above it would see the error
            self._core.refresh_failed(key, entry, exc)
        finally:
            self._core.cache.end_refresh(key)

    def _start_following(self) -> None:
        if self._follow_wanted:
            self._follow_wanted = False
            self._spawn(self._follow())

    async def _follow(self) -> None:
        etag: str | None = None
        while not self._closed:
            headers = {"Prefer": f"wait={self._follow_wait:g}"}
            if etag is not None:
                headers["If-None-Match"] = etag
            try:
                response = await self._http.get(
                    "/v1/releases", headers=headers, timeout=self._follow_wait + self._timeout
                )
            except httpx.HTTPError:
                await asyncio.sleep(1.0)
                continue
            if response.status_code == 200:
                seen = response.headers.get("ETag")
                if etag is not None and seen != etag:
                    for key in self._core.cache.expire_pointers():
                        entry = self._core.cache.get(key)
                        if entry is not None and self._core.cache.begin_refresh(key):
                            self._spawn(self._refresh(key, entry))
                etag = seen
            elif response.status_code != 304:
                await asyncio.sleep(1.0)
