"""The model of any provider the multi-provider library ``any-llm``
(mozilla-ai's ``any-llm-sdk``) reaches: Gemini, Mistral, Bedrock's other
models, vLLM, Ollama... (kind ``any_llm``; ``pip install
'prompt-registry[providers]'``).

The library speaks Chat Completions whatever the provider, so requests go
as the executor writes them and replies come back in that shape; the policy
is ours, as in the other adapters: the library's own retries are off and
429 and 5xx answers are retried here with capped backoff honouring
``Retry-After``; every call has a deadline; every failure is a
``ModelError`` raised from the library's (unified) exception. Where the
library reaches a provider through the ``openai`` SDK, that SDK is given
our HTTP client, whose transport caps a reply's size; a streamed reply's
text is capped for every provider.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import httpx2
import openai
from any_llm import AnyLLM, AnyLLMError, RateLimitError
from any_llm.providers.openai.base import BaseOpenAIProvider

from registry.errors import ConfigurationError, ModelError
from registry.providers.chat import (
    MAX_REPLY_BYTES,
    ChatReply,
    ChatRequest,
    StreamItem,
    TextDelta,
    ToolCallRequest,
    Usage,
)
from registry.providers.params import split
from registry.providers.transport import CappedTransport, RetryPolicy, first_line, status_error, too_large

_NAMED_PARAMS = frozenset(
    {
        "temperature",
        "top_p",
        "max_tokens",
        "stop",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "parallel_tool_calls",
        "reasoning_effort",
    }
)
"""``model.params`` the library's ``acompletion`` takes by name; the others
(``top_k``) go in the body as extra fields to an OpenAI-compatible provider."""


_WITH_USAGE = {"include_usage": True}
"""Asked of a stream, so that its last chunk reports the tokens used."""


class AnyLLMChatModel:
    """A ``ChatModel`` over one provider of the ``any-llm`` library."""

    def __init__(
        self,
        *,
        provider: str,
        base_url: str | None = None,
        api_key: str | None = None,
        max_retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        default_timeout: float = 60.0,
        max_reply_bytes: int = MAX_REPLY_BYTES,
    ) -> None:
        """``provider``: the library's name for it (``mistral``, ``gemini``,
        ``vllm``...). ``api_key`` None: the library reads the provider's
        usual variable, or sends none where the provider needs none."""
        if default_timeout <= 0 or max_reply_bytes <= 0:
            raise ConfigurationError("the model timeout and reply size cap must be more than 0")
        self.description = f"any-llm {provider}" + (f" {base_url}" if base_url else "")
        self._retry = RetryPolicy(max_retries, backoff, max_backoff)
        self._default_timeout = default_timeout
        self._max_reply_bytes = max_reply_bytes
        try:
            provider_class = AnyLLM.get_provider_class(provider)
        except (AnyLLMError, ImportError, ValueError) as exc:
            raise ConfigurationError(f"any-llm has no provider {provider!r}: {first_line(exc)}") from exc
        self._openai_based = issubclass(provider_class, BaseOpenAIProvider)
        client_options: dict[str, Any] = {}
        if self._openai_based:
            client_options["http_client"] = openai.DefaultAsyncHttpx2Client(
                transport=CappedTransport(httpx2.AsyncHTTPTransport(), max_reply_bytes)
            )
        try:
            self._llm = AnyLLM.create(
                provider, api_key=api_key, api_base=base_url, unified_exceptions=True, max_retries=0, **client_options
            )
        except (AnyLLMError, ImportError, ValueError) as exc:
            raise ConfigurationError(f"any-llm cannot serve {provider!r}: {first_line(exc)}") from exc

    async def complete(self, request: ChatRequest) -> ChatReply:
        """The provider's reply, after the retries 429 and 5xx answers get.
        Raises ``ModelError`` and nothing else."""
        timeout = request.timeout or self._default_timeout
        attempt = 0
        while True:
            try:
                completion = await asyncio.wait_for(self._llm.acompletion(**self._arguments(request)), timeout)
            except AnyLLMError as exc:
                if exc.status_code is not None and self._retry.retries(exc.status_code, attempt):
                    await asyncio.sleep(self._retry.delay(attempt, _retry_after(exc)))
                    attempt += 1
                    continue
                raise _error(exc, attempt) from exc
            except asyncio.TimeoutError as exc:
                raise ModelError(f"the model did not answer within {timeout:g} s", reason="timeout") from exc
            return _reply(completion)

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamItem]:
        """The reply as the provider streams it, then the whole reply. The
        deadline covers the whole stream; a stream whose text passes the
        size cap is refused and closed."""
        timeout = request.timeout or self._default_timeout
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        reply = _StreamedReply(self._max_reply_bytes)
        try:
            started = self._llm.acompletion(**self._arguments(request), stream=True, stream_options=_WITH_USAGE)
            chunks = cast("AsyncIterator[Any]", await asyncio.wait_for(started, timeout))
            try:
                while True:
                    try:
                        chunk = await asyncio.wait_for(chunks.__anext__(), deadline - loop.time())
                    except StopAsyncIteration:
                        break
                    text = reply.add(chunk)
                    if text:
                        yield TextDelta(text)
            finally:
                close = getattr(chunks, "aclose", None)
                if close is not None:
                    await close()
        except AnyLLMError as exc:
            raise _error(exc, 0) from exc
        except asyncio.TimeoutError as exc:
            raise ModelError(f"the model did not finish its reply within {timeout:g} s", reason="timeout") from exc
        if not reply.chunks:
            raise ModelError("the model provider's stream ended before any of its reply", reason="malformed")
        yield reply.finished()

    def binding_problem(self, provider: str | None) -> str | None:
        """None: the router binds this model to the definitions it serves."""
        return None

    async def aclose(self) -> None:
        """Close the provider's SDK client, where the library keeps one that closes."""
        # The library has no close of its own; its OpenAI-based providers
        # keep the openai SDK's client as `client`.
        client = getattr(self._llm, "client", None)
        close = getattr(client, "close", None)
        if close is not None and asyncio.iscoroutinefunction(close):
            await close()

    def _arguments(self, request: ChatRequest) -> dict[str, Any]:
        sent = split("any_llm", request.params).sent
        arguments: dict[str, Any] = {
            "model": request.model,
            "messages": [dict(message) for message in request.messages],
            **{key: value for key, value in sent.items() if key in _NAMED_PARAMS},
        }
        extra = {key: value for key, value in sent.items() if key not in _NAMED_PARAMS}
        if extra:
            arguments.update({"extra_body": extra} if self._openai_based else extra)
        if request.tools:
            arguments["tools"] = [dict(tool) for tool in request.tools]
            arguments["tool_choice"] = _tool_choice(request.tool_choice or "auto")
        if request.response_format is not None:
            schema = request.response_format.schema
            arguments["response_format"] = (
                {"type": "json_schema", "json_schema": {"name": request.response_format.name, "schema": dict(schema)}}
                if schema is not None
                else {"type": "json_object"}
            )
        return arguments


def _tool_choice(choice: str) -> str | dict[str, Any]:
    if choice in ("auto", "required", "none"):
        return choice
    return {"type": "function", "function": {"name": choice}}


def _retry_after(exc: AnyLLMError) -> Mapping[str, str]:
    after = exc.retry_after if isinstance(exc, RateLimitError) else None
    return {"Retry-After": after} if after else {}


def _error(exc: AnyLLMError, retries: int) -> ModelError:
    """The ``ModelError`` of the library's unified exception."""
    for cause in (exc, exc.original_exception):
        if isinstance(cause, ModelError):  # our transport's size cap, raised inside the SDK
            return cause
        if isinstance(cause, BaseException) and isinstance(cause.__cause__, ModelError):
            return cause.__cause__
    if exc.status_code is not None:
        return status_error(exc.status_code, exc.message, retries=retries, what="the model provider")
    original = exc.original_exception
    if isinstance(original, (openai.APITimeoutError, TimeoutError)):
        return ModelError("the model provider did not answer in time", reason="timeout")
    if isinstance(original, openai.APIConnectionError):
        return ModelError(f"the connection to the model provider failed: {first_line(original)}", reason="connection")
    return ModelError(f"the model provider failed: {first_line(exc)}", reason="malformed")


def _reply(completion: Any) -> ChatReply:
    choices = getattr(completion, "choices", None)
    if not choices:
        raise ModelError("the model provider's reply has no choices", reason="malformed")
    choice = choices[0]
    message = choice.message
    calls = tuple(
        ToolCallRequest(call.id, call.function.name, call.function.arguments or "")
        for call in message.tool_calls or ()
        if getattr(call, "function", None) is not None
    )
    return ChatReply(
        content=message.content or "",
        tool_calls=calls,
        usage=_usage(completion.usage),
        model=completion.model,
        finish_reason=choice.finish_reason,
        response_id=completion.id,
    )


def _usage(usage: Any) -> Usage | None:
    if usage is None:
        return None
    return Usage(usage.prompt_tokens, usage.completion_tokens)


@dataclass
class _StreamedReply:
    """A reply put together from its chunks, refused past ``limit`` bytes of text."""

    limit: int
    chunks: int = 0
    text: list[str] = field(default_factory=list)
    size: int = 0
    calls: dict[int, dict[str, str]] = field(default_factory=dict)
    usage: Usage | None = None
    model: str | None = None
    finish_reason: str | None = None
    response_id: str | None = None

    def add(self, chunk: Any) -> str:
        """Take ``chunk`` in; its text."""
        self.chunks += 1
        self.model = chunk.model or self.model
        self.response_id = chunk.id or self.response_id
        if chunk.usage is not None:
            self.usage = _usage(chunk.usage)
        if not chunk.choices:
            return ""
        choice = chunk.choices[0]
        self.finish_reason = choice.finish_reason or self.finish_reason
        delta = choice.delta
        for call in delta.tool_calls or ():
            entry = self.calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
            entry["id"] = call.id or entry["id"]
            if call.function is not None:
                name, arguments = call.function.name or "", call.function.arguments or ""
                entry["name"] += name
                entry["arguments"] += arguments
                self._count(len(name.encode()) + len(arguments.encode()))
        text = delta.content or ""
        if text:
            self._count(len(text.encode()))
            self.text.append(text)
        return text

    def _count(self, size: int) -> None:
        self.size += size
        if self.size > self.limit:
            raise too_large(self.limit)

    def finished(self) -> ChatReply:
        return ChatReply(
            content="".join(self.text),
            tool_calls=tuple(
                ToolCallRequest(entry["id"], entry["name"], entry["arguments"])
                for _, entry in sorted(self.calls.items())
            ),
            usage=self.usage,
            model=self.model,
            finish_reason=self.finish_reason,
            response_id=self.response_id,
        )
