"""The model that serves each call through the binding its definition's
``model.provider`` names: the operator's models file, or without one the
``openai`` and ``anthropic`` bindings of the SDKs' usual environment.

For each request it takes the first route that matches (else the binding
named by the request's provider, else the file's ``default:``), sends the
request there under the route's model name, and stamps the reply with
``ServedBy``: the binding, its kind, the model sent and the route, which
the trace keeps. Adapters are built at a binding's first use, so a binding
that no run uses needs neither its key nor its library; ``binding_problem``
asks for both before a run's first call.

Keys are read from the environment given here when the adapter is built,
and never leave it otherwise: an adapter's error that quotes one (a server
echoing the key it refused) has it replaced before the error goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from typing import Any, Protocol

from registry.errors import ConfigurationError, ModelError
from registry.providers.chat import ChatModel, ChatReply, ChatRequest, ServedBy, StreamItem
from registry.providers.factory import build_adapter
from registry.providers.modelsfile import Binding, ModelsFile, Target

REDACTED = "[redacted]"


class AdapterFactory(Protocol):
    """What builds a binding's adapter: ``build_adapter``."""

    def __call__(self, binding: Binding, *, api_key: str | None, max_retries: int) -> ChatModel: ...


class RoutingChatModel:
    """A ``ChatModel`` over the bindings of ``models``, choosing one per request."""

    def __init__(
        self,
        models: ModelsFile,
        *,
        environ: Mapping[str, str],
        max_retries: int = 3,
        factory: AdapterFactory = build_adapter,
    ) -> None:
        """``environ``: where each binding's key is read (``Binding.key_env``).
        ``max_retries``: for bindings that set none."""
        if max_retries < 0:
            raise ConfigurationError("model retries must be 0 or more")
        self.models = models
        self.description = f"models from {models.source} ({', '.join(sorted(models.providers))})"
        self._environ = environ
        self._max_retries = max_retries
        self._factory = factory
        self._adapters: dict[str, ChatModel] = {}
        self._slots: dict[str, asyncio.Semaphore] = {}
        self._secrets: set[str] = set()

    async def complete(self, request: ChatRequest) -> ChatReply:
        target, adapter = self._open(request)
        async with self._slot(target.binding):
            try:
                reply = await adapter.complete(replace(request, model=target.model))
            except ModelError as exc:
                self._raise_scrubbed(exc)
                raise
        return _stamped(reply, target)

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamItem]:
        """The chosen adapter's stream, its last item stamped; closing this
        iterator closes the adapter's, and with it the connection."""
        target, adapter = self._open(request)
        async with self._slot(target.binding):
            items = adapter.stream(replace(request, model=target.model))
            try:
                async for item in items:
                    yield _stamped(item, target) if isinstance(item, ChatReply) else item
            except ModelError as exc:
                self._raise_scrubbed(exc)
                raise
            finally:
                close = getattr(items, "aclose", None)
                if close is not None:
                    await close()

    def binding_problem(self, provider: str | None) -> str | None:
        """Why calls for ``provider`` cannot be served: it is not bound, its
        key's variable is not set, or its adapter cannot be built. A
        provider whose binding depends on the model name (a route with a
        ``name`` glob) is checked at each call instead."""
        found = self.models.binding_for(provider)
        if found is None:
            return None
        if isinstance(found, str):
            return found
        try:
            self._adapter(found)
        except ConfigurationError as exc:
            return exc.detail
        return None

    async def aclose(self) -> None:
        """Close every adapter opened, each even when another fails to close."""
        adapters, self._adapters = list(self._adapters.values()), {}
        failure: BaseException | None = None
        for adapter in adapters:
            try:
                await adapter.aclose()
            except Exception as exc:  # the others still close; the first failure is raised after
                failure = failure or exc
        if failure is not None:
            raise failure

    # --- choosing and opening ---------------------------------------------------------------

    def _open(self, request: ChatRequest) -> tuple[Target, ChatModel]:
        """Where ``request`` goes, and its adapter. Raises ``ModelError``
        (reason ``unbound``) when no binding serves it or its adapter cannot
        be built: what ``binding_problem`` says before a run, for the calls
        whose binding depends on the model name."""
        target = self.models.target(request.provider, request.model)
        if target is None:
            raise ModelError(self.models.unbound(request.provider), reason="unbound")
        try:
            return target, self._adapter(target.binding)
        except ConfigurationError as exc:
            raise ModelError(exc.detail, reason="unbound") from exc

    def _adapter(self, binding: Binding) -> ChatModel:
        """The adapter of ``binding``, built at its first use. Raises
        ``ConfigurationError`` (``ModelError`` from ``complete``) when it cannot be."""
        adapter = self._adapters.get(binding.name)
        if adapter is None:
            api_key = self._key(binding)
            adapter = self._factory(binding, api_key=api_key, max_retries=self._max_retries)
            self._adapters[binding.name] = adapter
            if api_key:
                self._secrets.add(api_key)
        return adapter

    def _key(self, binding: Binding) -> str | None:
        key = self._environ.get(binding.key_env) if binding.key_env else None
        if binding.key_required and not key:
            # The variable's name, never a value: there is none to show.
            raise ConfigurationError(
                f"the provider {binding.name!r} ({binding.where}) needs an API key in"
                f" the environment variable {binding.key_env}, which is not set"
            )
        return key or None

    def _slot(self, binding: Binding) -> contextlib.AbstractAsyncContextManager[Any]:
        """A place among ``binding.max_concurrency`` calls in flight, or no limit."""
        if binding.max_concurrency is None:
            return contextlib.nullcontext()
        slot = self._slots.get(binding.name)
        if slot is None:
            slot = self._slots[binding.name] = asyncio.Semaphore(binding.max_concurrency)
        return slot

    def _raise_scrubbed(self, exc: ModelError) -> None:
        """Raise ``exc`` anew with every key this router holds replaced by
        ``[redacted]``, when it or its cause quotes one; else return."""
        if not any(secret in f"{exc.detail} {exc.__cause__ or ''}" for secret in self._secrets):
            return
        detail = exc.detail
        for secret in self._secrets:
            detail = detail.replace(secret, REDACTED)
        # From nothing: the original, and its cause, quote the key, and a
        # traceback or a log of the chain would show it.
        raise ModelError(detail, reason=exc.reason, http_status=exc.http_status) from None


def _stamped(reply: ChatReply, target: Target) -> ChatReply:
    route = target.route.written if target.route is not None else None
    return replace(reply, served_by=ServedBy(target.binding.name, target.binding.kind, target.model, route))
