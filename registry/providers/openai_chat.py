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
from collections.abc import AsyncIterator
from typing import Any, cast

import httpx2
import openai
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolUnionParam

from registry.errors import ConfigurationError, ModelError
from registry.providers.chat import (
    MAX_REPLY_BYTES,
    ChatReply,
    ChatRequest,
    StreamItem,
    ToolCallRequest,
    Usage,
    stream_by_completing,
)
from registry.providers.transport import CappedTransport, RetryPolicy, first_line, status_error

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_NO_KEY = "not-set"
"""Sent as the API key when there is none: local servers need none, and the
SDK refuses to start without one (or reads ``OPENAI_API_KEY`` itself)."""
_NATIVE_PARAMS = ("temperature", "top_p", "max_tokens", "stop")
"""Sampling parameters of the Chat Completions API; the others (``top_k``,
which vLLM and llama.cpp accept) go in the body as extra fields."""


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
        if default_timeout <= 0 or max_reply_bytes <= 0:
            raise ConfigurationError("the model timeout and reply size cap must be more than 0")
        self.base_url = base_url or DEFAULT_BASE_URL
        self.description = f"openai {self.base_url}"
        self._retry = RetryPolicy(max_retries, backoff, max_backoff)
        self._default_timeout = default_timeout
        self._client = openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=api_key or _NO_KEY,
            max_retries=0,
            timeout=default_timeout,
            # The SDK's defaults (connection limits, redirects), over our transport.
            http_client=openai.DefaultAsyncHttpx2Client(
                transport=CappedTransport(httpx2.AsyncHTTPTransport(), max_reply_bytes)
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
                if self._retry.retries(exc.status_code, attempt):
                    await asyncio.sleep(self._retry.delay(attempt, exc.response.headers))
                    attempt += 1
                    continue
                raise status_error(exc.status_code, exc.body, retries=attempt) from exc
            except (asyncio.TimeoutError, openai.APITimeoutError) as exc:
                raise ModelError(f"the model endpoint did not answer within {timeout:g} s", reason="timeout") from exc
            except openai.APIConnectionError as exc:
                cause = exc.__cause__ or exc
                raise ModelError(
                    f"the connection to the model endpoint {self.base_url} failed: {first_line(cause)}",
                    reason="connection",
                ) from exc
            return _reply(body)

    def stream(self, request: ChatRequest) -> AsyncIterator[StreamItem]:
        """The reply as it comes; for now the whole reply as one delta."""
        return stream_by_completing(self, request)

    def binding_problem(self, provider: str | None) -> str | None:
        """None: every definition's calls go to this one endpoint (``--model URL``)."""
        return None

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


def _malformed(why: str) -> ModelError:
    return ModelError(f"the model endpoint's reply is not a chat completion: {why}", reason="malformed")


def _reply(body: bytes) -> ChatReply:
    """The ``ChatReply`` in a Chat Completions response body."""
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise _malformed(f"it is not JSON ({first_line(exc)})") from exc
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
