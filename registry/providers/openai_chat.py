"""The model of OpenAI's Chat Completions API, of Azure OpenAI and of any
OpenAI-compatible server (vLLM, llama.cpp, Ollama, LiteLLM...), through
the official ``openai`` SDK (``AsyncOpenAI``, ``AsyncAzureOpenAI``).

The SDK sends the request (a stream through ``chat.completions.create``; a
whole reply's body posted as built, which spares the SDK's walk of it) and
decodes server-sent events; the request's vocabulary is
``openai_request``'s (what it sent otherwise than asked is on the reply,
``ChatReply.adjustments``), the reading of the reply ``openai_reply``'s,
and the policy is ours:

- retries: only for 429 and 5xx answers, and only before a reply's first
  byte (a stream is never restarted), with capped exponential backoff and
  jitter, honouring ``Retry-After``; the SDK's own retries are off, so
  that no other policy hides behind this one;
- a deadline per attempt: ``ChatRequest.timeout``, else
  ``default_timeout``, from sending the request to the reply's last byte
  (a stream's last chunk); waiting for one of ``max_concurrency`` calls
  counts in the first attempt's;
- a cancelled or timed-out stream closes its connection, so that the
  server stops generating; for llama.cpp ``complete`` streams under the
  hood for that reason (``complete_by_streaming``): llama.cpp goes on
  generating a whole reply nobody waits for, and the next request waits
  behind it;
- bounded memory: the transport under the SDK (``CappedTransport``) stops
  reading a body, streamed or not, at ``max_reply_bytes``;
- one error: every failure is a ``ModelError`` whose ``reason`` says which
  (``status``, ``timeout``, ``connection``, ``malformed``, ``too-large``),
  raised ``from`` the SDK's or the JSON decoder's exception; the API key
  never appears in one (nor in the model's ``repr``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import replace
from typing import Any, NoReturn, TypeVar, cast
from urllib.parse import urlsplit, urlunsplit

import httpx2
import openai
from openai import AsyncStream
from openai.types.chat import ChatCompletionChunk

from registry.errors import ConfigurationError, ModelError
from registry.models import close_matches, did_you_mean
from registry.providers.chat import (
    MAX_REPLY_BYTES,
    ChatReply,
    ChatRequest,
    StreamItem,
    TextDelta,
    stream_by_completing,
)
from registry.providers.openai_reply import StreamAssembler, reply_from_body
from registry.providers.openai_request import (
    NOT_STREAMED,
    OPENAI_KINDS,
    SERVERS,
    Dialect,
    OpenAIKind,
    SentRequest,
    Server,
    build,
    can_stream,
)
from registry.providers.transport import (
    Refused,
    RetryPolicy,
    before,
    first_line,
    redacted,
    sdk_options,
    status_error,
    timed_out,
)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_NO_KEY = "not-set"
"""Sent as the API key when there is none: local servers need none, and the
SDK refuses to start without one (or reads ``OPENAI_API_KEY`` itself)."""
_SECRET_CHARS = 8
_T = TypeVar("_T")


class OpenAIChatModel:
    """A ``ChatModel`` over OpenAI, Azure OpenAI or an OpenAI-compatible endpoint.

    Every option is a keyword (a models file's binding names the same ones):

    - ``base_url``: the endpoint (``http://host:8000/v1``); for Azure, the
      resource's endpoint (``https://NAME.openai.azure.com``); None: OpenAI's.
    - ``api_key``: None sends a placeholder (never the environment's: the
      caller passes what it read).
    - ``kind``: ``openai``, ``azure_openai`` or ``openai_compatible``; None:
      ``openai_compatible`` for a ``base_url`` other than OpenAI's, else ``openai``.
    - ``server``: which compatible server it is, for its known differences
      (``llama.cpp``, ``vllm``, ``ollama``, ``litellm``); None: a generic one.
    - ``api_version``, ``azure_deployment``: Azure's (the deployment, when
      not given, is the request's model name, as the SDK does).
    - ``max_retries``, ``backoff``, ``max_backoff``: the retry policy of 429 and 5xx.
    - ``default_timeout``: seconds per attempt when the request names none.
    - ``max_reply_bytes``: the most of a reply's body read.
    - ``max_concurrency``: calls in flight at once; None: no limit, except
      1 for llama.cpp (llama-cpp-python interrupts a stream for the next request).
    - ``complete_by_streaming``: ``complete`` streams under the hood, so
      that a timeout stops the server; None: for llama.cpp only.
    """

    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        kind: str | None = None,
        server: str | None = None,
        api_version: str | None = None,
        azure_deployment: str | None = None,
        max_retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        default_timeout: float = 60.0,
        max_reply_bytes: int = MAX_REPLY_BYTES,
        max_concurrency: int | None = None,
        complete_by_streaming: bool | None = None,
    ) -> None:
        if default_timeout <= 0 or max_reply_bytes <= 0:
            raise ConfigurationError("the model timeout and reply size cap must be more than 0")
        if max_concurrency is not None and max_concurrency < 1:
            raise ConfigurationError("max_concurrency must be 1 or more (or none, for no limit)")
        self._dialect = _dialect(kind, server, base_url)
        self.kind: OpenAIKind = self._dialect.kind
        self.server: Server | None = self._dialect.server
        self._base_url = base_url or DEFAULT_BASE_URL
        # Redacted from messages; a few letters (a test's "k") are no secret,
        # and replacing them would garble every message.
        secrets = (api_key, urlsplit(self._base_url).password)
        self._secrets = tuple(secret for secret in secrets if secret and len(secret) >= _SECRET_CHARS)
        self.base_url = _without_credentials(self._base_url)
        """The endpoint, without any user and password it was given."""
        self.description = self._describe(azure_deployment)
        self._retry = RetryPolicy(max_retries, backoff, max_backoff)
        self._default_timeout = default_timeout
        # llama-cpp-python's server makes one reply at a time and ends a
        # stream (with no finish reason) as soon as another request comes:
        # calls to it wait for each other here instead.
        self._max_concurrency = 1 if max_concurrency is None and self.server == "llama.cpp" else max_concurrency
        self._slots: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None
        self.complete_by_streaming = (
            self.server == "llama.cpp" if complete_by_streaming is None else complete_by_streaming
        )
        self._client = self._sdk_client(api_key, api_version, azure_deployment, max_reply_bytes)

    def _sdk_client(
        self,
        api_key: str | None,
        api_version: str | None,
        azure_deployment: str | None,
        max_reply_bytes: int,
    ) -> openai.AsyncOpenAI:
        common: dict[str, Any] = {
            "api_key": api_key or _NO_KEY,
            **sdk_options(
                openai.DefaultAsyncHttpx2Client,
                default_timeout=self._default_timeout,
                max_reply_bytes=max_reply_bytes,
            ),
        }
        if self.kind != "azure_openai":
            if api_version is not None or azure_deployment is not None:
                raise ConfigurationError(f"api_version and azure_deployment are Azure's: not for kind {self.kind}")
            return openai.AsyncOpenAI(base_url=self._base_url, **common)
        if api_version is None:
            raise ConfigurationError("kind azure_openai needs an api_version (such as 2024-10-21)")
        if self._base_url == DEFAULT_BASE_URL:
            raise ConfigurationError("kind azure_openai needs base_url: the resource's endpoint")
        return openai.AsyncAzureOpenAI(
            azure_endpoint=self._base_url, azure_deployment=azure_deployment, api_version=api_version, **common
        )

    def _describe(self, azure_deployment: str | None) -> str:
        server = f" ({self.server})" if self.server else ""
        deployment = f" deployment {azure_deployment}" if azure_deployment else ""
        return f"{self.kind}{server} {self.base_url}{deployment}"

    def __repr__(self) -> str:
        return f"OpenAIChatModel({self.description})"

    # --- the ChatModel interface ------------------------------------------------------

    async def complete(self, request: ChatRequest) -> ChatReply:
        """The endpoint's reply to ``request``, after the retries 429 and 5xx
        answers get. Raises ``ModelError`` and nothing else."""
        if self.complete_by_streaming and can_stream(request, self._dialect):
            items = self.stream(request)
            try:
                async for item in items:
                    if isinstance(item, ChatReply):
                        return item
            finally:
                await items.aclose()
            raise AssertionError("a stream always ends with its reply")
        sent = build(request, self._dialect, stream=False)
        timeout = request.timeout or self._default_timeout
        begun = asyncio.get_running_loop().time()
        async with self._slot(timeout):
            body, _ = await self._retrying(lambda deadline: self._send(sent, deadline), timeout, begun)
        return replace(reply_from_body(body), adjustments=sent.adjustments)

    async def stream(self, request: ChatRequest) -> AsyncGenerator[StreamItem, None]:
        """The reply as it comes: a ``TextDelta`` per piece of text, then the
        whole ``ChatReply`` (its tool calls assembled from their pieces).
        Closing the iterator, or cancelling the task reading it, closes the
        connection. Raises ``ModelError`` and nothing else. A reply llama.cpp
        cannot stream comes whole, as one delta, and says so (``NOT_STREAMED``)."""
        if not can_stream(request, self._dialect):
            async for item in stream_by_completing(self, request):
                if isinstance(item, ChatReply):
                    item = replace(item, adjustments=(*item.adjustments, NOT_STREAMED))
                yield item
            return
        sent = build(request, self._dialect, stream=True)
        timeout = request.timeout or self._default_timeout
        begun = asyncio.get_running_loop().time()
        async with self._slot(timeout):
            chunks, deadline = await self._retrying(lambda deadline: self._open(sent, deadline), timeout, begun)
            try:
                assembler = StreamAssembler()
                while (chunk := await self._next_chunk(chunks, deadline, timeout)) is not None:
                    piece = assembler.add(chunk)
                    if piece:
                        yield TextDelta(piece)
                reply = replace(assembler.reply(), adjustments=sent.adjustments)
            finally:
                # Closing the response closes its connection when the body
                # was not read to its end: the server stops generating.
                await chunks.close()
            yield reply

    def binding_problem(self, provider: str | None) -> str | None:
        """None: the model serves whichever definition it is given to."""
        return None

    async def aclose(self) -> None:
        """Close the SDK client and, with it, the HTTP client and its connections."""
        await self._client.close()

    # --- calls ---------------------------------------------------------------------------

    async def _send(self, sent: SentRequest, deadline: float) -> bytes:
        # The body is posted as built (openai_request builds it in the wire's
        # own JSON), with the options `chat.completions.create` gives it: the
        # SDK still sends it, with its headers and key, and raises its errors,
        # but skips walking it against its parameter types, which cost a
        # third of a call's CPU (BENCHMARKS.md, "Evaluations"). The raw
        # response's body is read, as JSON, by reply_from_body.
        arguments = dict(sent.arguments)
        options: openai.RequestOptions = {"timeout": _left(deadline), "security": {"bearer_auth": True}}
        extra = arguments.pop("extra_body", None)
        if extra is not None:
            options["extra_json"] = extra
        response = await self._client.post(
            "/chat/completions", body=arguments, options=options, cast_to=httpx2.Response
        )
        return response.content

    async def _open(self, sent: SentRequest, deadline: float) -> AsyncStream[ChatCompletionChunk]:
        """The stream, once its answer's head came."""
        chunks = await self._client.chat.completions.create(**sent.arguments, timeout=_left(deadline))
        return cast("AsyncStream[ChatCompletionChunk]", chunks)

    async def _next_chunk(
        self, chunks: AsyncStream[ChatCompletionChunk], deadline: float, timeout: float
    ) -> dict[str, Any] | list[Any] | str | None:
        """The next chunk's JSON, or None at the stream's end."""
        try:
            chunk: Any = await before(deadline, chunks.__anext__())
        except StopAsyncIteration:
            return None
        except Exception as exc:
            raise self._translated(exc, timeout, attempts=0) from exc
        # The SDK builds chunks without validating them: their JSON, as it came, is read instead.
        return cast("dict[str, Any]", chunk.to_dict(warnings=False)) if hasattr(chunk, "to_dict") else chunk

    async def _retrying(self, send: Callable[[float], Awaitable[_T]], timeout: float, begun: float) -> tuple[_T, float]:
        """``send(deadline)`` after the retries of the policy: its answer and
        the deadline of the attempt that gave it. The first attempt's
        deadline counts from ``begun`` (before waiting for a slot)."""
        return await self._retry.run(
            send,
            timeout=timeout,
            refused=_refused,
            fail=lambda exc, retries: self._give_up(exc, retries, timeout),
            begun=begun,
        )

    def _slot(self, timeout: float) -> _Slot:
        if self._max_concurrency is None:
            return _Slot(None, timeout)
        loop = asyncio.get_running_loop()
        # One semaphore per event loop: an asyncio primitive belongs to the loop it first waited in.
        if self._slots is None or self._slots[0] is not loop:
            self._slots = (loop, asyncio.Semaphore(self._max_concurrency))
        return _Slot(self._slots[1], timeout)

    # --- errors ------------------------------------------------------------------------

    def _give_up(self, exc: Exception, retries: int, timeout: float) -> NoReturn:
        """Raise the ``ModelError`` of a call that failed after ``retries`` retries."""
        raise self._translated(exc, timeout, attempts=retries) from exc

    def _translated(self, exc: BaseException, timeout: float, *, attempts: int) -> ModelError:
        """The ``ModelError`` of a failure of the SDK, without the credentials."""
        if isinstance(exc, ModelError):
            return self._redacted(exc)
        if isinstance(exc, openai.APIStatusError):
            return self._redacted(status_error(exc.status_code, exc.body, retries=attempts))
        if isinstance(exc, (asyncio.TimeoutError, openai.APITimeoutError)):
            return timed_out(timeout)
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc
            what = f"the connection to the model endpoint {self.base_url} failed: {first_line(cause)}"
            return self._redacted(ModelError(what, reason="connection"))
        if isinstance(exc, openai.APIError):
            # An error event in a stream (OpenAI and vLLM send one when generation fails).
            return self._redacted(ModelError(f"the model endpoint reported an error: {exc.message}", reason="status"))
        if isinstance(exc, ValueError):
            why = f"the model endpoint sent an event that is not JSON ({first_line(exc)})"
            return ModelError(why, reason="malformed")
        return self._redacted(ModelError(f"the model call failed: {first_line(exc)}", reason="connection"))

    def _redacted(self, error: ModelError) -> ModelError:
        return redacted(error, self._redact)

    def _redact(self, text: str) -> str:
        """``text`` without the credentials this model was given (a server may echo them)."""
        for secret in self._secrets:
            text = text.replace(secret, "[redacted]")
        return text


class _Slot:
    """One of ``max_concurrency`` calls in flight, waited for within the call's timeout."""

    def __init__(self, semaphore: asyncio.Semaphore | None, timeout: float) -> None:
        self._semaphore = semaphore
        self._timeout = timeout

    async def __aenter__(self) -> None:
        if self._semaphore is None:
            return
        try:
            await asyncio.wait_for(self._semaphore.acquire(), self._timeout)
        except asyncio.TimeoutError as exc:
            raise ModelError(
                f"the model endpoint did not answer within {self._timeout:g} s: every connection allowed was busy",
                reason="timeout",
            ) from exc

    async def __aexit__(self, *exc: object) -> None:
        if self._semaphore is not None:
            self._semaphore.release()


def _refused(exc: Exception) -> Refused | None:
    return Refused(exc.status_code, exc.response.headers) if isinstance(exc, openai.APIStatusError) else None


def _left(deadline: float) -> float:
    """Seconds until ``deadline`` (on the running loop's clock), at least 0."""
    return max(deadline - asyncio.get_running_loop().time(), 0.0)


def _dialect(kind: str | None, server: str | None, base_url: str | None) -> Dialect:
    if kind is None:
        kind = "openai_compatible" if base_url and urlsplit(base_url).hostname != "api.openai.com" else "openai"
    if kind not in OPENAI_KINDS:
        hint = did_you_mean(close_matches(kind, OPENAI_KINDS))
        raise ConfigurationError(
            f"kind {kind!r} is not one of {', '.join(OPENAI_KINDS)}" + (f"; {hint}" if hint else "")
        )
    if server is not None and kind != "openai_compatible":
        raise ConfigurationError(f"server {server!r} is for kind openai_compatible, not {kind}")
    if server is not None and server not in SERVERS:
        hint = did_you_mean(close_matches(server, SERVERS))
        raise ConfigurationError(
            f"server {server!r} is not one of {', '.join(SERVERS)}" + (f"; {hint}" if hint else "")
        )
    return Dialect(kind, server)


def _without_credentials(url: str) -> str:
    """``url`` without a user and password, which would otherwise reach messages and traces."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port is not None else host
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
