"""The model of any OpenAI-compatible Chat Completions endpoint (OpenAI,
vLLM, llama.cpp, LiteLLM...), through the official ``openai`` SDK.

The SDK builds and sends the request; the policy is ours:

- retries: only for 429 and 5xx answers, with capped exponential backoff and
  jitter, honouring ``Retry-After``; the SDK's own retries are off, so that
  no other policy hides behind this one;
- a deadline per attempt: ``ChatRequest.timeout``, else ``default_timeout``;
- bounded memory: the transport under the SDK (``_CappedTransport``) stops
  reading a body at ``max_reply_bytes``;
- one error: every failure is a ``ModelError`` whose ``reason`` says which
  (``status``, ``timeout``, ``connection``, ``malformed``, ``too-large``),
  raised ``from`` the SDK's or the JSON decoder's exception when there is one.

The reply is read from the body's JSON here rather than from the SDK's
parsed object: the SDK builds that object without validating it, so a body
that is not a chat completion comes back as a string, a list, or a
completion whose fields are missing or of any type.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Mapping
from http import HTTPStatus
from typing import Any, cast

import httpx2
import openai
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolUnionParam

from registry.client.retry_after import parse_retry_after
from registry.errors import ConfigurationError, ModelError
from registry.executor.chat import MAX_REPLY_BYTES, ChatReply, ChatRequest, ToolCallRequest, Usage

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_NO_KEY = "not-set"
"""Sent as the API key when there is none: local servers need none, and the
SDK refuses to start without one (or reads ``OPENAI_API_KEY`` itself)."""
_NATIVE_PARAMS = ("temperature", "top_p", "max_tokens", "stop")
"""Sampling parameters of the Chat Completions API; the others (``top_k``,
which vLLM and llama.cpp accept) go in the body as extra fields."""
_MESSAGE_CHARS = 200


class OpenAIChatModel:
    """A ``ChatModel`` over an OpenAI-compatible endpoint at ``base_url``
    (None: OpenAI's own). ``api_key`` None sends a placeholder."""

    def __init__(
        self,
        *,
        base_url: str | None,
        api_key: str | None,
        max_retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        default_timeout: float = 60.0,
        max_reply_bytes: int = MAX_REPLY_BYTES,
    ) -> None:
        if max_retries < 0 or backoff < 0 or max_backoff < 0:
            raise ConfigurationError("model retries and backoff must be 0 or more")
        if default_timeout <= 0 or max_reply_bytes <= 0:
            raise ConfigurationError("the model timeout and reply size cap must be more than 0")
        self.base_url = base_url or DEFAULT_BASE_URL
        self.description = f"openai {self.base_url}"
        self._max_retries = max_retries
        self._backoff = backoff
        self._max_backoff = max_backoff
        self._default_timeout = default_timeout
        self._client = openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=api_key or _NO_KEY,
            max_retries=0,
            timeout=default_timeout,
            # The SDK's defaults (connection limits, redirects), over our transport.
            http_client=openai.DefaultAsyncHttpx2Client(
                transport=_CappedTransport(httpx2.AsyncHTTPTransport(), max_reply_bytes)
            ),
        )

    async def complete(self, request: ChatRequest) -> ChatReply:
        """The endpoint's reply to ``request``, after the retries 429 and 5xx
        answers get. Raises ``ModelError`` and nothing else."""
        timeout = request.timeout or self._default_timeout
        attempt = 0
        while True:
            try:
                body = await asyncio.wait_for(self._send(request, timeout), timeout)
            except openai.APIStatusError as exc:
                if attempt < self._max_retries and _retryable(exc.status_code):
                    await asyncio.sleep(self._delay(attempt, exc.response.headers))
                    attempt += 1
                    continue
                raise _status_error(exc, retries=attempt) from exc
            except (asyncio.TimeoutError, openai.APITimeoutError) as exc:
                raise ModelError(f"the model endpoint did not answer within {timeout:g} s", reason="timeout") from exc
            except openai.APIConnectionError as exc:
                cause = exc.__cause__ or exc
                raise ModelError(
                    f"the connection to the model endpoint {self.base_url} failed: {_first_line(cause)}",
                    reason="connection",
                ) from exc
            return _reply(body)

    async def aclose(self) -> None:
        """Close the SDK client and, with it, the HTTP client and its connections."""
        await self._client.close()

    async def _send(self, request: ChatRequest, timeout: float) -> bytes:
        params = request.params
        extra = {key: value for key, value in params.items() if key not in _NATIVE_PARAMS}
        # The raw response: its body is read, as JSON, by _reply.
        raw = await self._client.chat.completions.with_raw_response.create(
            model=request.model,
            messages=cast("list[ChatCompletionMessageParam]", [dict(m) for m in request.messages]),
            tools=cast("list[ChatCompletionToolUnionParam]", [dict(t) for t in request.tools])
            if request.tools
            else openai.omit,
            temperature=params.get("temperature", openai.omit),
            top_p=params.get("top_p", openai.omit),
            max_tokens=params.get("max_tokens", openai.omit),
            stop=params.get("stop", openai.omit),
            extra_body=extra or None,
            timeout=timeout,
        )
        return raw.http_response.content

    def _delay(self, attempt: int, headers: httpx2.Headers) -> float:
        """Seconds to wait before retry ``attempt + 1``."""
        asked = parse_retry_after(headers.get("Retry-After"))
        if asked is not None:
            # Honoured, within reason: a server asking for an hour should not
            # hold a run for an hour.
            return min(asked, self._max_backoff * 4)
        ceiling = min(self._max_backoff, self._backoff * 2.0**attempt)
        # Jitter, so that clients failed by one outage do not all come back at once.
        return ceiling * (0.5 + random.random() / 2)


class _CappedTransport(httpx2.AsyncBaseTransport):
    """An HTTP transport that refuses a response body longer than ``limit``
    bytes without reading past it (beyond the chunk that crosses it).

    It asks for uncompressed bodies and refuses compressed ones, so that
    what it counts is what the client decodes and keeps.
    """

    def __init__(self, inner: httpx2.AsyncBaseTransport, limit: int) -> None:
        self._inner = inner
        self._limit = limit

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        request.headers["Accept-Encoding"] = "identity"
        response = await self._inner.handle_async_request(request)
        declared = response.headers.get("Content-Length", "")
        encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
        if declared.isdigit() and int(declared) > self._limit:
            await response.aclose()
            raise _too_large(self._limit)
        if encoding != "identity":
            await response.aclose()
            raise _malformed(f"it is compressed ({encoding}) although an uncompressed reply was asked for")
        return httpx2.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_CappedStream(response.stream, self._limit),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


class _CappedStream(httpx2.AsyncByteStream):
    """A response body that fails once more than ``limit`` bytes came."""

    def __init__(self, inner: httpx2.AsyncByteStream | httpx2.SyncByteStream, limit: int) -> None:
        # An async transport's responses always stream asynchronously.
        assert isinstance(inner, httpx2.AsyncByteStream)
        self._inner = inner
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        received = 0
        async for chunk in self._inner:
            received += len(chunk)
            if received > self._limit:
                raise _too_large(self._limit)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


def _retryable(status: int) -> bool:
    return status == 429 or status >= 500


def _status_error(exc: openai.APIStatusError, *, retries: int) -> ModelError:
    status = exc.status_code
    try:
        words = f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        words = str(status)
    after = f" after {retries} {'retry' if retries == 1 else 'retries'}" if retries else ""
    message = _error_message(exc.body)
    detail = f"the model endpoint answered {words}{after}" + (f": {message}" if message else "")
    return ModelError(detail, reason="status", http_status=status)


def _error_message(body: object) -> str:
    """The message of an error body, the first 200 characters on one line:
    ``{"error": {"message": ...}}`` (OpenAI, vLLM), ``{"error": "..."}``,
    ``{"message": ...}``, ``{"detail": ...}`` (FastAPI), or the text itself."""
    found: object = body
    if isinstance(body, Mapping):
        error = body.get("error", body)
        if isinstance(error, Mapping):
            found = error.get("message") or error.get("detail") or json.dumps(body)
        else:
            found = error
    text = " ".join(str(found or "").split())
    return text if len(text) <= _MESSAGE_CHARS else text[:_MESSAGE_CHARS] + "..."


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _too_large(limit: int) -> ModelError:
    return ModelError(f"the model's reply is over {_size(limit)}; the rest was not read", reason="too-large")


def _size(count: int) -> str:
    for unit, name in ((1024 * 1024, "MiB"), (1024, "KiB")):
        if count >= unit and count % unit == 0:
            return f"{count // unit} {name}"
    return f"{count} bytes"


def _malformed(why: str) -> ModelError:
    return ModelError(f"the model endpoint's reply is not a chat completion: {why}", reason="malformed")


def _reply(body: bytes) -> ChatReply:
    """The ``ChatReply`` in a Chat Completions response body."""
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise _malformed(f"it is not JSON ({_first_line(exc)})") from exc
    if not isinstance(data, dict):
        raise _malformed(f"it is a JSON {type(data).__name__}, not an object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise _malformed("it has no choices")
    choice = choices[0]
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise _malformed("its first choice has no message")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise _malformed("its message content is not text")
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise _malformed("its tool_calls is not a list")
    usage = data.get("usage")
    return ChatReply(
        content=content or "",
        tool_calls=tuple(_tool_call(call) for call in calls),
        usage=Usage(_count(usage, "prompt_tokens"), _count(usage, "completion_tokens"))
        if isinstance(usage, dict)
        else None,
        model=_text(data.get("model")),
        finish_reason=_text(choice.get("finish_reason")),
        response_id=_text(data.get("id")),
    )


def _tool_call(call: Any) -> ToolCallRequest:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict):
        raise _malformed("a tool call has no function")
    id_, name, arguments = call.get("id"), function.get("name"), function.get("arguments")
    if not isinstance(id_, str) or not isinstance(name, str) or not isinstance(arguments, str):
        raise _malformed("a tool call lacks its id, function name or arguments text")
    return ToolCallRequest(id=id_, name=name, arguments=arguments)


def _count(usage: dict[str, Any], key: str) -> int | None:
    value = usage.get(key)
    # bool is an int to Python, never a token count.
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
