"""Reading a request body within a deadline, before the application sees it.

gunicorn's gevent worker bounds how long a client may take over a request's
headers (``keepalive``) but not over its body: a client that sends one byte
of its body every few seconds would keep a greenlet, and a socket, for as
long as it liked. ``BodyDeadline`` wraps the WSGI application and reads the
whole body (at most one byte more than the largest accepted) within
``seconds``; a client that is slower is answered ``408 request-timeout``. The
application then reads the body from memory, and ``registry.web.slowlane``
knows its size before the application starts on it.

The deadline is a ``gevent.Timeout``: it interrupts a read only where reads
are cooperative, that is under the gevent worker (``prompt-registry serve``'s
default). Under the gthread worker the body is still read up front, without
a deadline.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from typing import Any

import gevent

from registry.errors import RequestTimeout
from registry.web.problems import problem_response
from registry.web.slowlane import BODY_BYTES_KEY

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class BodyDeadline:
    """WSGI middleware: the body arrives within ``seconds``, or the answer is 408."""

    def __init__(self, app: WSGIApp, *, seconds: float, max_bytes: int) -> None:
        self._app = app
        self._seconds = seconds
        self._max_bytes = max_bytes

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        wanted = self._wanted(environ)
        if wanted:
            try:
                with gevent.Timeout(self._seconds):
                    body = _read(environ["wsgi.input"], wanted)
            except gevent.Timeout:
                error = RequestTimeout(f"the request body did not arrive within {self._seconds:g} seconds")
                response = problem_response(error.slug, error.status, error.title, error.detail)
                return response(environ, start_response)
            environ["wsgi.input"] = io.BytesIO(body)
            environ[BODY_BYTES_KEY] = len(body)
        return self._app(environ, start_response)

    def _wanted(self, environ: dict[str, Any]) -> int:
        """How many bytes to read now: the declared length, or for a chunked
        body one more than the largest accepted (so the application can tell
        it is too large); 0 when there is nothing to read, or when the
        declared length is refused anyway without reading."""
        length = environ.get("CONTENT_LENGTH")
        if length:
            declared = int(length) if length.isdigit() else 0
            return declared if declared <= self._max_bytes else 0
        chunked = "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()
        return self._max_bytes + 1 if chunked else 0


def _read(source: Any, wanted: int) -> bytes:
    chunks, size = [], 0
    while size < wanted:
        chunk = source.read(min(65536, wanted - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)
