"""The model of any provider LiteLLM reaches (kind ``litellm``; ``pip install
'prompt-registry[providers]'``): Gemini, Mistral, Bedrock's other models,
Cohere, Groq, vLLM, Ollama... through BerriAI's multi-provider library, in
process (a LiteLLM *proxy* is an ``openai_compatible`` server instead).

LiteLLM speaks Chat Completions whatever the provider, so requests go as the
executor writes them and replies come back in that shape. The policy is
ours, as in the other adapters:

- retries: LiteLLM's own are off; 429 and 5xx answers are retried here with
  capped backoff honouring ``Retry-After`` (LiteLLM keeps the provider's
  response headers on its exception);
- a deadline per attempt, and for a stream one over the whole stream;
- bounded memory for streams: a streamed reply's text and tool calls are
  counted as they come and refused past ``max_reply_bytes``. LiteLLM sends
  through its own HTTP stack (httpx over aiohttp), which cannot take the
  size-capped httpx2 transport of the other adapters, so a whole reply
  (``complete``) past the cap is refused too, but only once LiteLLM has
  read it;
- one error: every failure is a ``ModelError`` with the reasons of the other
  adapters, raised from LiteLLM's exception. LiteLLM words every provider's
  failure as one of OpenAI's exception classes, and reports some replies it
  cannot read (not JSON, cut short) as a 500: those are retried like one;
- no key in errors: a provider that quotes the key it refused has it
  replaced by ``[redacted]``, and such an error is raised from nothing.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import warnings
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn, cast

# Before LiteLLM is imported: left alone, importing it fetches a model price
# list from GitHub (and waits for it on a network that drops packets), and its
# calls fetch other catalogs of its own; these make it use the copies it ships.
# An operator's own setting stands.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")

import litellm
import openai
from litellm.exceptions import MidStreamFallbackError
from litellm.llms.custom_httpx.async_client_cleanup import close_litellm_async_clients

from registry.errors import ConfigurationError, ModelError
from registry.models import close_matches, did_you_mean
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
from registry.providers.transport import (
    Refused,
    RetryPolicy,
    before,
    error_message,
    redacted,
    status_error,
    timed_out,
    too_large,
)

# LiteLLM prints a "Give Feedback / Get Help" banner to stdout at every
# failure unless told not to: the failure is a ModelError here, in our words.
litellm.suppress_debug_info = True
# Pydantic warns, at LiteLLM's first calls, that LiteLLM's own TypedDicts
# have ReadOnly items it does not enforce: nothing a user of ours can act on.
warnings.filterwarnings("ignore", message=r"Items? .* `ReadOnly` qualifier", category=UserWarning, module="pydantic")

PROVIDERS = frozenset(str(getattr(provider, "value", provider)) for provider in litellm.provider_list)
"""LiteLLM's names of the providers it reaches (``mistral``, ``gemini``, ``bedrock``...)."""

_WHAT = "the model provider"
_REDACTED = "[redacted]"
_WITH_USAGE = {"include_usage": True}
"""Asked of a stream, so that its last chunk reports the tokens used."""
_LITELLM_PREFIX = re.compile(r"^.*?Exception - ", re.DOTALL)
"""What LiteLLM puts before a provider's own message: ``litellm.RateLimitError:
RateLimitError: MistralException - {"message": ...}``."""


class LiteLLMChatModel:
    """A ``ChatModel`` over one provider of LiteLLM."""

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
        """``provider``: LiteLLM's name for it (``mistral``, ``gemini``,
        ``hosted_vllm``...). ``api_key`` None: LiteLLM reads the provider's
        usual variable (``MISTRAL_API_KEY``...), or sends none where the
        provider needs none."""
        if default_timeout <= 0 or max_reply_bytes <= 0:
            raise ConfigurationError("the model timeout and reply size cap must be more than 0")
        if provider not in PROVIDERS:
            hint = did_you_mean(close_matches(provider, PROVIDERS))
            raise ConfigurationError(f"LiteLLM has no provider {provider!r}" + (f"; {hint}" if hint else ""))
        self.provider = provider
        self.description = f"litellm {provider}" + (f" {base_url}" if base_url else "")
        self._base_url = base_url
        self._api_key = api_key
        # The key as a word of its own, so that a short one is not found inside other words.
        self._quoted_key = re.compile(rf"(?<![\w.-]){re.escape(api_key)}(?![\w.-])") if api_key else None
        self._retry = RetryPolicy(max_retries, backoff, max_backoff)
        self._default_timeout = default_timeout
        self._max_reply_bytes = max_reply_bytes

    async def complete(self, request: ChatRequest) -> ChatReply:
        """The provider's reply, after the retries 429 and 5xx answers get.
        Raises ``ModelError`` and nothing else."""
        timeout = request.timeout or self._default_timeout
        completion, _ = await self._retrying(request, timeout, stream=False)
        reply = _reply(completion)
        if _size(reply) > self._max_reply_bytes:
            raise too_large(self._max_reply_bytes)
        return reply

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamItem]:
        """The reply as the provider streams it, then the whole reply. A 429
        or 5xx before the first chunk is retried; the deadline then covers
        the whole stream; a stream past the size cap is refused and closed."""
        timeout = request.timeout or self._default_timeout
        opened, deadline = await self._retrying(request, timeout, stream=True)
        chunks = cast("litellm.CustomStreamWrapper", opened)
        reply = _StreamedReply(self._max_reply_bytes)
        try:
            while True:
                chunk = await self._next_chunk(chunks, deadline, timeout)
                if chunk is None:
                    break
                text = reply.add(chunk)
                if text:
                    yield TextDelta(text)
        finally:
            # Closes the response, and with it the connection, so that the
            # provider stops generating for a reader that left.
            await chunks.aclose()
        if not reply.anything:
            # What LiteLLM makes of a body that is not a stream, among others.
            raise ModelError("the model provider's stream ended without any text or tool call", reason="malformed")
        yield reply.finished()

    def binding_problem(self, provider: str | None) -> str | None:
        """None: the router binds this model to the definitions it serves."""
        return None

    async def aclose(self) -> None:
        """Close the connections LiteLLM holds. LiteLLM keeps its HTTP
        clients in one cache of its own, shared by every LiteLLM binding of
        the process: they are all closed (the router closes its adapters
        together, when its run or service ends) and dropped from the cache,
        so that a later call opens new ones rather than using closed ones."""
        await close_litellm_async_clients()
        litellm.in_memory_llm_clients_cache.flush_cache()

    # --- calls ------------------------------------------------------------------------------

    async def _call(self, request: ChatRequest, timeout: float, *, stream: bool) -> object:
        arguments = self._arguments(request, timeout)
        if stream:
            arguments.update(stream=True, stream_options=_WITH_USAGE)
        return cast(object, await litellm.acompletion(**arguments))

    def _arguments(self, request: ChatRequest, timeout: float) -> dict[str, Any]:
        arguments: dict[str, Any] = {
            "model": request.model,
            "custom_llm_provider": self.provider,
            "messages": [dict(message) for message in request.messages],
            # LiteLLM's retries off (ours are above it), its own deadline
            # ours, and a parameter the provider refuses an error rather
            # than dropped, whatever LITELLM_DROP_PARAMS says.
            "max_retries": 0,
            "timeout": timeout,
            "drop_params": False,
            **split("litellm", request.params).sent,
        }
        if self._base_url is not None:
            arguments["api_base"] = self._base_url
        if self._api_key is not None:
            arguments["api_key"] = self._api_key
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

    async def _retrying(self, request: ChatRequest, timeout: float, *, stream: bool) -> tuple[object, float]:
        """What ``_call`` returns, after the retries of the policy, and the
        deadline of the attempt that gave it."""
        return await self._retry.run(
            lambda _deadline: self._call(request, timeout, stream=stream),
            timeout=timeout,
            refused=_refused,
            fail=lambda exc, retries: self._give_up(exc, retries, timeout),
        )

    async def _next_chunk(self, chunks: litellm.CustomStreamWrapper, deadline: float, timeout: float) -> Any:
        """The stream's next chunk, or None at its end."""
        try:
            return await before(deadline, chunks.__anext__())
        except StopAsyncIteration:
            return None
        except (asyncio.TimeoutError, openai.APITimeoutError) as exc:
            raise _timeout(timeout) from exc
        except openai.OpenAIError as exc:
            self._fail(_error(exc, 0), exc)

    def _give_up(self, exc: Exception, retries: int, timeout: float) -> NoReturn:
        """Raise the ``ModelError`` of a call that failed after ``retries`` retries."""
        if isinstance(exc, (asyncio.TimeoutError, openai.APITimeoutError)):
            # Ours, or LiteLLM's own deadline (the same), whichever came first.
            raise _timeout(timeout) from exc
        if isinstance(exc, openai.OpenAIError):
            self._fail(_error(exc, retries), exc)
        raise exc

    def _fail(self, error: ModelError, cause: BaseException) -> NoReturn:
        """Raise ``error`` from ``cause``, or, when either quotes the key,
        raise it with the key replaced and from nothing: a traceback or a
        log of the chain would show it."""
        if self._quoted_key is None or not any(map(self._quoted_key.search, (error.detail, str(cause)))):
            raise error from cause
        raise redacted(error, functools.partial(self._quoted_key.sub, _REDACTED)) from None


# --- errors ---------------------------------------------------------------------------------


def _timeout(timeout: float) -> ModelError:
    return timed_out(timeout, what="the model")


def _refused(exc: Exception) -> Refused | None:
    """An error answer (LiteLLM gives its failures of other kinds a status too)."""
    if not isinstance(exc, openai.OpenAIError):
        return None
    status = _status(exc)
    return Refused(status, _retry_after(exc)) if status is not None else None


def _status(exc: openai.OpenAIError) -> int | None:
    """The HTTP status of an error answer; None for a failure that is not one
    (LiteLLM gives its connection errors and broken streams a status too)."""
    if isinstance(exc, (openai.APIConnectionError, MidStreamFallbackError)):
        return None
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) and 400 <= status < 600 else None


def _error(exc: openai.OpenAIError, retries: int) -> ModelError:
    """The ``ModelError`` of LiteLLM's exception."""
    detail = _provider_message(exc)
    if isinstance(exc, MidStreamFallbackError):
        original = exc.original_exception
        said = _provider_message(original) if isinstance(original, openai.OpenAIError) else detail
        return ModelError(f"{_WHAT}'s stream broke off: {error_message(said)}", reason="connection")
    if isinstance(exc, openai.APIConnectionError):
        return ModelError(f"the connection to {_WHAT} failed: {error_message(detail)}", reason="connection")
    status = _status(exc)
    if status is not None:
        return status_error(status, detail, retries=retries, what=_WHAT)
    return ModelError(f"{_WHAT}'s reply is not usable: {error_message(detail)}", reason="malformed")


def _provider_message(exc: openai.OpenAIError) -> object:
    """The provider's own message in LiteLLM's: its JSON error body when it
    is one (for ``error_message`` to read), else the text."""
    text = _LITELLM_PREFIX.sub("", str(getattr(exc, "message", None) or exc), count=1).strip()
    try:
        return json.loads(text)
    except ValueError:
        return text


def _retry_after(exc: openai.OpenAIError) -> Mapping[str, str]:
    """The ``Retry-After`` of the answer ``exc`` reports, where LiteLLM kept it."""
    response = getattr(exc, "response", None)
    for headers in (getattr(exc, "litellm_response_headers", None), getattr(response, "headers", None)):
        if isinstance(headers, Mapping):
            for name, value in headers.items():
                if str(name).lower() == "retry-after":
                    return {"Retry-After": str(value)}
    return {}


# --- replies --------------------------------------------------------------------------------


def _tool_choice(choice: str) -> str | dict[str, Any]:
    if choice in ("auto", "required", "none"):
        return choice
    return {"type": "function", "function": {"name": choice}}


def _answered_model(response: Any) -> str | None:
    """The model the provider says answered: LiteLLM names the requested
    one on stream chunks, and keeps the provider's among its hidden fields."""
    hidden = getattr(response, "_hidden_params", None)
    said = hidden.get("provider_response_model") if isinstance(hidden, dict) else None
    model = said or getattr(response, "model", None)
    return model if isinstance(model, str) else None


def _reply(completion: Any) -> ChatReply:
    choices = getattr(completion, "choices", None)
    if not choices:
        raise ModelError("the model provider's reply has no choices", reason="malformed")
    choice = choices[0]
    message = choice.message
    calls = tuple(
        ToolCallRequest(call.id or "", call.function.name or "", call.function.arguments or "")
        for call in message.tool_calls or ()
        if getattr(call, "function", None) is not None
    )
    return ChatReply(
        content=message.content or "",
        tool_calls=calls,
        usage=_usage(getattr(completion, "usage", None)),
        model=_answered_model(completion),
        finish_reason=choice.finish_reason,
        response_id=completion.id,
    )


def _usage(usage: Any) -> Usage | None:
    if usage is None:
        return None
    return Usage(usage.prompt_tokens, usage.completion_tokens)


def _size(reply: ChatReply) -> int:
    """The bytes of a reply's text and tool calls: what the size cap counts."""
    calls = sum(len(call.name.encode()) + len(call.arguments.encode()) for call in reply.tool_calls)
    return len(reply.content.encode()) + calls


@dataclass
class _StreamedReply:
    """A reply put together from its chunks, refused past ``limit`` bytes of
    text and tool calls."""

    limit: int
    anything: bool = False
    """Whether a chunk carried any of the reply: text or a tool call."""
    text: list[str] = field(default_factory=list)
    size: int = 0
    calls: dict[int, dict[str, str]] = field(default_factory=dict)
    usage: Usage | None = None
    model: str | None = None
    finish_reason: str | None = None
    response_id: str | None = None

    def add(self, chunk: Any) -> str:
        """Take ``chunk`` in; its text."""
        self.model = self.model or _answered_model(chunk)
        self.response_id = self.response_id or chunk.id
        if getattr(chunk, "usage", None) is not None:
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
        self.anything = self.anything or bool(text or delta.tool_calls)
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
