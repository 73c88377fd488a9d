"""Claude through Anthropic's Messages API, directly, on Google Vertex AI or
on Amazon Bedrock, with the official ``anthropic`` SDK (its
``AsyncAnthropic``, ``AsyncAnthropicVertex`` and ``AsyncAnthropicBedrock``).

The SDK builds, signs and sends the requests and decodes the streams (SSE,
or Bedrock's AWS event stream); ``anthropic_messages`` translates requests
and replies; the policy is ours, as for the OpenAI adapter:

- retries: only for 429 and 5xx answers (529 "overloaded" among them),
  with capped exponential backoff and jitter, honouring ``Retry-After``;
  the SDK's own retries are off. A stream is retried only while it opens:
  an ``error`` event in the middle of one (``overloaded_error``) ends it;
- a deadline per call: ``ChatRequest.timeout``, else ``default_timeout``,
  for each attempt to open and for the whole of a stream; past it, or when
  the caller stops reading a stream, the connection is closed, so that the
  server stops generating;
- bounded memory: the transport under the SDK (``CappedTransport``) stops
  reading a body, streamed or not, at ``max_reply_bytes``;
- ``max_concurrency`` calls at once, when set; the others wait;
- one error: ``ModelError`` with a ``reason`` (``status``, ``timeout``,
  ``connection``, ``malformed``, ``too-large``, ``credentials``), raised
  ``from`` the SDK's exception; the credentials given are blanked out of
  every message.

Replies are read from the body's JSON (``AsyncStream[object]`` for a
stream), not from the SDK's models, which it builds without validating.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import json
import re
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import replace
from typing import Any, Literal, NoReturn, cast

import anthropic
import httpx2

from registry.errors import ConfigurationError, ModelError
from registry.models import close_matches, did_you_mean
from registry.providers.anthropic_messages import MessagesCall, StreamAssembly, read_message, to_messages_call
from registry.providers.chat import MAX_REPLY_BYTES, ChatReply, ChatRequest, StreamItem, TextDelta
from registry.providers.params import ProviderKind
from registry.providers.transport import (
    Refused,
    RetryPolicy,
    before,
    error_message,
    first_line,
    redacted,
    sdk_options,
    status_error,
    timed_out,
)

Platform = Literal["anthropic", "vertex", "bedrock"]
PLATFORMS: Mapping[str, ProviderKind] = {
    "anthropic": "anthropic",
    "vertex": "anthropic_vertex",
    "bedrock": "anthropic_bedrock",
}
"""Each platform, and the parameter table (``params.TABLES``) its calls use."""
DEFAULT_MAX_TOKENS = 4096
"""Sent as ``max_tokens`` when the definition sets none: the API requires one."""
ERROR_STATUSES = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
    # Bedrock's exceptions in its event streams
    "validationException": 400,
    "modelTimeoutException": 408,
    "modelStreamErrorException": 424,
    "throttlingException": 429,
    "internalServerException": 500,
    "serviceUnavailableException": 503,
}
"""The HTTP status of each error type, for an ``error`` event in a stream
(which came with 200): Anthropic's, and Bedrock's, which the SDK words alike."""

_Client = anthropic.AsyncAnthropic | anthropic.AsyncAnthropicVertex | anthropic.AsyncAnthropicBedrock
_END = object()


class AnthropicChatModel:
    """A ``ChatModel`` over Claude on ``platform``. A setting left None is
    the SDK's usual environment: ``ANTHROPIC_API_KEY`` and
    ``ANTHROPIC_BASE_URL``; ``CLOUD_ML_REGION``, ``ANTHROPIC_VERTEX_PROJECT_ID``
    and Google's application default credentials (with the ``vertex``
    extra); ``AWS_REGION`` and the AWS credential chain, or a Bedrock API
    key as ``api_key`` (with the ``bedrock`` extra)."""

    def __init__(
        self,
        *,
        platform: Platform = "anthropic",
        api_key: str | None = None,
        base_url: str | None = None,
        region: str | None = None,
        project_id: str | None = None,
        access_token: str | None = None,
        aws_region: str | None = None,
        aws_access_key: str | None = None,
        aws_secret_key: str | None = None,
        aws_session_token: str | None = None,
        aws_profile: str | None = None,
        max_retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        default_timeout: float = 60.0,
        max_reply_bytes: int = MAX_REPLY_BYTES,
        max_concurrency: int | None = None,
        default_max_tokens: int = DEFAULT_MAX_TOKENS,
    ) -> None:
        if platform not in PLATFORMS:
            hint = did_you_mean(close_matches(str(platform), PLATFORMS))
            raise ConfigurationError(
                f"unknown Anthropic platform {platform!r}; the platforms are {', '.join(PLATFORMS)}"
                + (f" ({hint})" if hint else "")
            )
        if default_timeout <= 0 or max_reply_bytes <= 0 or default_max_tokens <= 0:
            raise ConfigurationError("the model timeout, reply size cap and default max_tokens must be more than 0")
        if max_concurrency is not None and max_concurrency <= 0:
            raise ConfigurationError("max_concurrency must be more than 0, or None for no limit")
        self.platform = platform
        self._kind = PLATFORMS[platform]
        self._retry = RetryPolicy(max_retries, backoff, max_backoff)
        self._default_timeout = default_timeout
        self._default_max_tokens = default_max_tokens
        self._limit = asyncio.Semaphore(max_concurrency) if max_concurrency is not None else None
        self._secrets = tuple(s for s in (api_key, access_token, aws_secret_key, aws_session_token) if s)
        common: dict[str, Any] = {
            "base_url": base_url,
            **sdk_options(
                anthropic.DefaultAsyncHttpxClient, default_timeout=default_timeout, max_reply_bytes=max_reply_bytes
            ),
        }
        if platform == "vertex":
            self._client: _Client = _vertex_client(common, region, project_id, access_token)
        elif platform == "bedrock":
            aws = (aws_region, aws_access_key, aws_secret_key, aws_session_token, aws_profile)
            self._client = _bedrock_client(common, api_key, *aws)
        else:
            self._client = _direct_client(common, api_key)
        self.base_url = str(self._client.base_url).rstrip("/")
        self.description = f"{self._kind.replace('_', '-')} {self.base_url}"

    async def complete(self, request: ChatRequest) -> ChatReply:
        """Claude's reply to ``request``, after the retries 429 and 5xx answers
        get. Raises ``ModelError`` and nothing else."""
        call = self._call(request)
        timeout = request.timeout or self._default_timeout
        async with self._slot():
            body, _ = await self._retrying(call, timeout, stream=False)
        try:
            data = json.loads(body)
        except ValueError as exc:
            raise ModelError(
                f"the model endpoint's reply is not a Messages API message: it is not JSON ({first_line(exc)})",
                reason="malformed",
            ) from exc
        return replace(read_message(data, call.output), adjustments=call.adjustments)

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamItem]:
        """Claude's reply as it streams: ``TextDelta`` items, then the whole
        ``ChatReply``. Closing the iterator, cancelling its reader or the
        deadline closes the connection."""
        call = self._call(request)
        timeout = request.timeout or self._default_timeout
        async with self._slot():
            response, deadline = await self._retrying(call, timeout, stream=True)
            try:
                events = (await response.parse(to=anthropic.AsyncStream[object])).__aiter__()
                assembly = StreamAssembly(call.output)
                while (event := await self._next_event(events, deadline, timeout)) is not _END:
                    text = assembly.feed(event)
                    if text:
                        yield TextDelta(text)
                reply = assembly.reply()
            finally:
                # A stream left early is closed, with its connection, so that
                # the server stops generating; one read to its end is closed already.
                await response.http_response.aclose()
        if assembly.output is not None and reply.content:
            yield TextDelta(reply.content)
        yield replace(reply, adjustments=call.adjustments)

    def binding_problem(self, provider: str | None) -> str | None:
        """None: a router decides which definitions come here."""
        return None

    async def aclose(self) -> None:
        """Close the SDK client and, with it, the HTTP client and its connections."""
        await self._client.close()

    # --- sending ----------------------------------------------------------------------------

    def _call(self, request: ChatRequest) -> MessagesCall:
        return to_messages_call(request, kind=self._kind, default_max_tokens=self._default_max_tokens)

    @contextlib.asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        if self._limit is None:
            yield
            return
        async with self._limit:
            yield

    async def _post(self, call: MessagesCall, timeout: float, *, stream: bool) -> Any:
        """The raw response of ``call``: its body when not streamed, else the
        response itself, its body unread."""
        raw = await self._client.messages.with_raw_response.create(
            model=call.model,
            max_tokens=call.max_tokens,
            messages=cast("Any", list(call.messages)),
            system=call.system if call.system is not None else anthropic.omit,
            tools=cast("Any", list(call.tools)) if call.tools else anthropic.omit,
            tool_choice=cast("Any", call.tool_choice) if call.tool_choice is not None else anthropic.omit,
            stop_sequences=list(call.stop_sequences) if call.stop_sequences is not None else anthropic.omit,
            stream=stream,
            timeout=timeout,
        )
        return raw if stream else await raw.read()

    async def _retrying(self, call: MessagesCall, timeout: float, *, stream: bool) -> tuple[Any, float]:
        """What ``_post`` returns, after the retries of the policy, and the
        deadline of the attempt that gave it."""
        return await self._retry.run(
            lambda _deadline: self._post(call, timeout, stream=stream),
            timeout=timeout,
            refused=_refused,
            fail=lambda exc, retries: self._give_up(exc, retries, timeout),
        )

    async def _next_event(self, events: AsyncIterator[object], deadline: float, timeout: float) -> object:
        """The stream's next event (decoded JSON), or ``_END``."""
        try:
            return await before(deadline, events.__anext__())
        except StopAsyncIteration:
            return _END
        except (asyncio.TimeoutError, httpx2.TimeoutException) as exc:
            raise timed_out(timeout) from exc
        except anthropic.APIStatusError as exc:
            raise self._redacted(_stream_error(exc.body)) from exc
        except (httpx2.HTTPError, anthropic.APIConnectionError) as exc:
            raise ModelError(
                f"the model endpoint's stream ended early: {self._redact(first_line(exc))}", reason="connection"
            ) from exc
        except _undecodable() as exc:
            what = "an event is not JSON" if isinstance(exc, ValueError) else "its framing is broken"
            raise ModelError(
                f"the model endpoint's stream is not a Messages API stream: {what} ({first_line(exc)})",
                reason="malformed",
            ) from exc

    # --- errors -----------------------------------------------------------------------------

    def _give_up(self, exc: Exception, retries: int, timeout: float) -> NoReturn:
        """Raise the ``ModelError`` of a call that failed after ``retries`` retries."""
        if isinstance(exc, anthropic.APIStatusError):
            raise self._redacted(status_error(exc.status_code, exc.body, retries=retries)) from exc
        if isinstance(exc, (asyncio.TimeoutError, anthropic.APITimeoutError)):
            raise timed_out(timeout) from exc
        if isinstance(exc, anthropic.APIConnectionError):
            if isinstance(exc.__cause__, ModelError):
                # The transport's refusal (over the cap, compressed), which
                # the SDK wrapped: the error itself, not the wrapper.
                raise exc.__cause__ from None
            raise self._connection_error(exc) from exc
        if isinstance(exc, _credential_errors()):
            # Credentials the SDK resolves when it first signs a request:
            # Google's default credentials, the AWS chain.
            raise ModelError(
                f"Claude on {self.platform} has no usable credentials: {self._redact(first_line(exc))}",
                reason="credentials",
            ) from exc
        raise exc

    def _connection_error(self, exc: anthropic.APIConnectionError) -> ModelError:
        cause = exc.__cause__
        return ModelError(
            f"the connection to the model endpoint {self.base_url} failed: {self._redact(first_line(cause or exc))}",
            reason="connection",
        )

    def _redact(self, text: str) -> str:
        """``text`` without the credentials this model was given (a server may echo them)."""
        for secret in self._secrets:
            text = re.sub(rf"(?<![\w.-]){re.escape(secret)}(?![\w.-])", "[redacted]", text)
        return text

    def _redacted(self, error: ModelError) -> ModelError:
        return redacted(error, self._redact)


def _refused(exc: Exception) -> Refused | None:
    return Refused(exc.status_code, exc.response.headers) if isinstance(exc, anthropic.APIStatusError) else None


def _stream_error(body: object) -> ModelError:
    """The ``ModelError`` of an ``error`` event: its type, its message, and the status that type has."""
    error = body.get("error") if isinstance(body, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    message = error_message(body)
    named = f"{kind}: {message}" if isinstance(kind, str) else message
    status = ERROR_STATUSES.get(kind) if isinstance(kind, str) else None
    return ModelError(f"the model endpoint's stream ended with an error: {named}", reason="status", http_status=status)


def _credential_errors() -> tuple[type[Exception], ...]:
    """What the SDK raises when it cannot resolve credentials, with the
    errors of the cloud libraries it loads them with (those installed)."""
    found: list[type[Exception]] = [anthropic.AnthropicError, RuntimeError]
    for module, name in (("botocore.exceptions", "BotoCoreError"), ("google.auth.exceptions", "GoogleAuthError")):
        with contextlib.suppress(ImportError):
            found.append(getattr(importlib.import_module(module), name))
    return tuple(found)


@contextlib.contextmanager
def _settings_of(platform: str) -> Iterator[None]:
    """The SDK's refusal of its settings (a missing region, credentials given twice) as ours."""
    try:
        yield
    except ConfigurationError:
        raise
    except (ValueError, anthropic.CredentialsError) as exc:
        # A credentials profile (ANTHROPIC_CONFIG_DIR, ANTHROPIC_PROFILE) it cannot read, too.
        raise ConfigurationError(f"Claude on {platform}: {first_line(exc)}") from exc


def _undecodable() -> tuple[type[Exception], ...]:
    """What decoding a stream raises on bytes that are not one: JSON's error,
    and botocore's for Bedrock's event stream frames (when installed)."""
    found: list[type[Exception]] = [ValueError]
    with contextlib.suppress(ImportError):
        found.append(importlib.import_module("botocore.eventstream").ParserError)
    return tuple(found)


def _direct_client(common: dict[str, Any], api_key: str | None) -> anthropic.AsyncAnthropic:
    with _settings_of("anthropic"):
        client = anthropic.AsyncAnthropic(api_key=api_key, **common)
    if client.api_key is None and client.auth_token is None and client.credentials is None:
        raise ConfigurationError("Claude on anthropic has no credentials: give an API key or set ANTHROPIC_API_KEY")
    return client


def _vertex_client(
    common: dict[str, Any], region: str | None, project_id: str | None, access_token: str | None
) -> anthropic.AsyncAnthropicVertex:
    if access_token is None and not _installed("google.auth"):
        raise ConfigurationError(
            "Claude on vertex without an access token needs google-auth: pip install 'prompt-registry[vertex]'"
        )
    with _settings_of("vertex"):
        client = anthropic.AsyncAnthropicVertex(
            region=region if region is not None else anthropic.not_given,
            project_id=project_id if project_id is not None else anthropic.not_given,
            access_token=access_token,
            **common,
        )
    if access_token is not None and client.project_id is None:
        # With a token given, no credentials file can name the project.
        raise ConfigurationError("Claude on vertex needs a project id: give one or set ANTHROPIC_VERTEX_PROJECT_ID")
    return client


def _bedrock_client(
    common: dict[str, Any],
    api_key: str | None,
    aws_region: str | None,
    aws_access_key: str | None,
    aws_secret_key: str | None,
    aws_session_token: str | None,
    aws_profile: str | None,
) -> anthropic.AsyncAnthropicBedrock:
    if not _installed("botocore"):
        # The SDK signs with it, and decodes Bedrock's event streams with it.
        raise ConfigurationError("Claude on bedrock needs boto3: pip install 'prompt-registry[bedrock]'")
    with _settings_of("bedrock"):
        return anthropic.AsyncAnthropicBedrock(
            api_key=api_key,
            aws_region=aws_region,
            aws_access_key=aws_access_key,
            aws_secret_key=aws_secret_key,
            aws_session_token=aws_session_token,
            aws_profile=aws_profile,
            **common,
        )


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported: ``find_spec`` of a dotted name
    raises, rather than answering None, when its parent package is missing
    (``google`` for ``google.auth``)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False
