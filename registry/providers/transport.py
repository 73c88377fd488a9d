"""What every provider adapter shares about HTTP: a body size cap under the
SDK, the retry policy and its loop, deadlines, and the wording of failures.

An adapter keeps only what is its SDK's own: which of its exceptions is an
error answer (``Refused``, for the policy to retry or not) and which
``ModelError`` each failure becomes.

Both official SDKs (``openai`` and ``anthropic``) are built on ``httpx2``
and accept an HTTP client of ours, which is how the cap reaches them
without patching either: ``CappedTransport`` stops reading a response at
``limit`` bytes, streamed or not, so that a runaway reply costs bounded memory.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, NoReturn, TypeVar

import httpx2

from registry.client.retry_after import parse_retry_after
from registry.errors import ConfigurationError, ModelError

_MESSAGE_CHARS = 200
_T = TypeVar("_T")


class CappedTransport(httpx2.AsyncBaseTransport):
    """An HTTP transport that refuses a response body longer than ``limit``
    bytes without reading past it (beyond the chunk that crosses it).

    It asks for uncompressed bodies and refuses compressed ones, so that
    what it counts is what the client decodes and keeps. ``malformed`` words
    the refusal of a compressed body as the adapter's own kind of error.
    """

    def __init__(self, inner: httpx2.AsyncBaseTransport, limit: int, *, what: str = "the model endpoint") -> None:
        self._inner = inner
        self._limit = limit
        self._what = what

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        request.headers["Accept-Encoding"] = "identity"
        response = await self._inner.handle_async_request(request)
        declared = response.headers.get("Content-Length", "")
        encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
        if declared.isdigit() and int(declared) > self._limit:
            await response.aclose()
            raise too_large(self._limit)
        if encoding != "identity":
            await response.aclose()
            raise ModelError(
                f"{self._what}'s reply is compressed ({encoding}) although an uncompressed reply was asked for",
                reason="malformed",
            )
        return httpx2.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=CappedStream(response.stream, self._limit),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


class CappedStream(httpx2.AsyncByteStream):
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
                raise too_large(self._limit)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


@dataclass(frozen=True)
class RetryPolicy:
    """Which answers are retried, how often, and after how long: 429 and 5xx
    (Anthropic's 529 "overloaded" among them), capped exponential backoff
    with jitter, ``Retry-After`` honoured within reason."""

    max_retries: int = 3
    backoff: float = 0.5
    max_backoff: float = 8.0

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.backoff < 0 or self.max_backoff < 0:
            raise ConfigurationError("model retries and backoff must be 0 or more")

    def retries(self, status: int, attempt: int) -> bool:
        """Whether an answer with ``status`` after ``attempt`` retries gets another."""
        return attempt < self.max_retries and (status == 429 or status >= 500)

    def delay(self, attempt: int, headers: Mapping[str, str]) -> float:
        """Seconds to wait before retry ``attempt + 1``."""
        asked = parse_retry_after(headers.get("Retry-After"))
        if asked is not None:
            # Honoured, within reason: a server asking for an hour should not
            # hold a run for an hour.
            return min(asked, self.max_backoff * 4)
        ceiling = min(self.max_backoff, self.backoff * 2.0**attempt)
        # Jitter, so that clients failed by one outage do not all come back at once.
        return ceiling * (0.5 + random.random() / 2)

    async def run(
        self,
        send: Callable[[float], Awaitable[_T]],
        *,
        timeout: float,
        refused: Callable[[Exception], Refused | None],
        fail: Callable[[Exception, int], NoReturn],
        begun: float | None = None,
    ) -> tuple[_T, float]:
        """``send(deadline)`` until it answers: its answer, and the deadline
        of the attempt that gave it (a stream's reader keeps to it).

        Each attempt has ``timeout`` seconds, the first from ``begun`` (the
        loop's time, such as before waiting for a connection slot) or else
        from now, each retry from its start. An exception that ``refused``
        reads as an error answer this policy retries is retried after
        ``delay``; any other, or the last, goes to ``fail`` with the number
        of retries made, which raises it as the adapter words it."""
        loop = asyncio.get_running_loop()
        deadline = (loop.time() if begun is None else begun) + timeout
        attempt = 0
        while True:
            try:
                return await before(deadline, send(deadline)), deadline
            except Exception as exc:
                answer = refused(exc)
                if answer is None or not self.retries(answer.status, attempt):
                    fail(exc, attempt)
                await asyncio.sleep(self.delay(attempt, answer.headers))
                attempt += 1
                deadline = loop.time() + timeout


@dataclass(frozen=True)
class Refused:
    """An SDK's exception read as an error answer: its HTTP status, and the
    headers that may say when to come back (``Retry-After``)."""

    status: int
    headers: Mapping[str, str]


def sdk_options(
    http_client: Callable[..., httpx2.AsyncClient], *, default_timeout: float, max_reply_bytes: int
) -> dict[str, Any]:
    """The options an official SDK's client (``openai``, ``anthropic``) is
    built with: its own retries off, so that no other policy hides behind
    ``RetryPolicy``; the default deadline; and ``http_client``, the SDK's
    own client class (its connection limits and redirects), over the
    size-capped transport."""
    return {
        "max_retries": 0,
        "timeout": default_timeout,
        "http_client": http_client(transport=CappedTransport(httpx2.AsyncHTTPTransport(), max_reply_bytes)),
    }


async def before(deadline: float, awaitable: Awaitable[_T]) -> _T:
    """What ``awaitable`` gives, or ``TimeoutError`` at ``deadline`` (the loop's time)."""
    if sys.version_info >= (3, 11):
        # Not wait_for: before 3.12 it runs the awaitable as a task of its own
        # and loses the caller's cancellation when both happen at once, which
        # would read a cancelled stream to its end; and that task per wait
        # cost half a millisecond of a stream's first token.
        async with asyncio.timeout_at(deadline):
            return await awaitable
    return await asyncio.wait_for(awaitable, max(deadline - asyncio.get_running_loop().time(), 0.0))


def status_error(status: int, body: object, *, retries: int, what: str = "the model endpoint") -> ModelError:
    """The ``ModelError`` of an HTTP error answer, with the status in words
    and the first line of the body's message (never its headers, which is
    where credentials travel)."""
    try:
        words = f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        words = {529: "529 Overloaded"}.get(status, str(status))
    after = f" after {retries} {'retry' if retries == 1 else 'retries'}" if retries else ""
    message = error_message(body)
    detail = f"{what} answered {words}{after}" + (f": {message}" if message else "")
    return ModelError(detail, reason="status", http_status=status)


def redacted(error: ModelError, redact: Callable[[str], str]) -> ModelError:
    """``error`` with ``redact`` applied to its message (to blank out the
    credentials an adapter was given): ``error`` itself when that changes nothing."""
    detail = redact(error.detail)
    if detail == error.detail:
        return error
    return ModelError(detail, reason=error.reason, http_status=error.http_status)


def error_message(body: object) -> str:
    """The message of an error body, the first 200 characters on one line:
    ``{"error": {"message": ...}}`` (OpenAI, vLLM, Anthropic), ``{"error": "..."}``,
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


def first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def timed_out(timeout: float, *, what: str = "the model endpoint") -> ModelError:
    return ModelError(f"{what} did not answer within {timeout:g} s", reason="timeout")


def too_large(limit: int) -> ModelError:
    return ModelError(f"the model's reply is over {size(limit)}; the rest was not read", reason="too-large")


def size(count: int) -> str:
    for unit, name in ((1024 * 1024, "MiB"), (1024, "KiB")):
        if count >= unit and count % unit == 0:
            return f"{count // unit} {name}"
    return f"{count} bytes"
