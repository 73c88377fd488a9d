"""Running a WSGI application under gunicorn, the production WSGI server.

``gunicorn_options`` is the one place the server configuration is derived
from ``Settings``: ``prompt-registry serve`` applies it through
``registry.serving.server``, ``prompt-registry agents serve`` through
``registry.protocol.server``, and ``gunicorn.conf.py`` at the top of the
repository applies the same options when gunicorn is run directly. The
workers it names answer requests gunicorn cannot parse with problems, its
hooks spread kept-alive connections over the workers and keep the loaded
application out of garbage collections, and its access log is JSON.

Workers are gevent's by default: each connection is a greenlet, so a client
that sends its request slowly (or not at all) holds a socket, not one of a
few threads. gunicorn bounds the time a client takes over its headers
(``keepalive``), ``registry.web.bodydeadline`` the time over its body. The
standard library must be patched before the registry is imported
(``registry.web.geventpatch``). ``REGISTRY_WORKER_CLASS=gthread`` keeps the
thread-per-request workers, whose reads have no deadline.

Each worker process builds its own application (and so its own git
connection and Redis connections): nothing that holds a subprocess, a socket
or a lock is shared across a fork. Threads (or greenlets) within a worker
share the application, which is thread-safe.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import socket
from collections.abc import MutableMapping
from datetime import datetime, timezone
from typing import Any

import gevent
from gunicorn.glogging import Logger
from gunicorn.http.errors import (
    ChunkMissingTerminator,
    InvalidChunkSize,
    InvalidHeader,
    InvalidHeaderName,
    InvalidHTTPVersion,
    InvalidRequestLine,
    InvalidRequestMethod,
    LimitRequestHeaders,
    LimitRequestLine,
    ObsoleteFolding,
)
from gunicorn.util import write_nonblock
from gunicorn.workers.ggevent import GeventWorker
from gunicorn.workers.gthread import ThreadWorker

from registry.settings import Settings
from registry.web.metrics import worker_exited
from registry.web.problems import PROBLEM_MEDIA_TYPE, PROBLEM_TYPE_PREFIX

# A kept-alive connection is closed after this many requests. Clients that
# reconnect at once after a worker dies all land on the survivor, and a
# connection stays with the worker that accepted it for as long as it lives;
# closing it now and then lets the kernel hand the new connection to whichever
# worker accepts first, so load spreads again within seconds. A reconnect per
# hundred requests costs well under 1% on loopback.
REQUESTS_PER_CONNECTION = 100


def bind_address(host: str, port: int) -> str:
    """gunicorn's bind syntax, bracketing IPv6 addresses."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def gunicorn_options(settings: Settings) -> dict[str, Any]:
    """gunicorn's settings for ``settings``: gevent (or gthread) workers, JSON access logs."""
    per_worker = (
        {"worker_connections": settings.connections}
        if settings.worker_class == "gevent"
        else {"threads": settings.threads}
    )
    return {
        "bind": bind_address(settings.host, settings.port),
        "workers": settings.workers,
        **per_worker,
        "worker_class": _WORKER_CLASSES[settings.worker_class],
        "loglevel": settings.log_level,
        "accesslog": "-" if settings.access_log else None,
        "errorlog": "-",
        "logger_class": f"{__name__}.JsonAccessLogger",
        # On SIGTERM a worker stops accepting and finishes what it has for
        # this long; a long-poll (at most 60 s) is cut short, and its client
        # simply polls again.
        "graceful_timeout": 10,
        "timeout": 30,
        # Under gevent also the deadline for a request's headers, from its
        # first byte (gunicorn reads them inside a timeout of this length).
        # Behind a load balancer, longer than the balancer's own idle timeout.
        "keepalive": settings.keepalive,
        "proc_name": "prompt-registry",
        "child_exit": _child_exit,
        "post_worker_init": _post_worker_init,
        "pre_request": _pre_request_gevent if settings.worker_class == "gevent" else _pre_request,
        # One well-known control socket per user would clash between
        # several registries on one machine; we manage by signals.
        "control_socket_disable": True,
    }


class _ProblemAnswers:
    """Answers to requests gunicorn cannot parse, as problem documents.

    gunicorn reads the request line and headers itself and answers what it
    cannot parse (a URL over ``limit_request_line``, too many or too long
    headers, a malformed line) with an HTML page of its own, before the
    application sees anything. Every other error of this service is an RFC
    9457 problem; these are too. Anything else is left to gunicorn.
    """

    cfg: Any
    log: Any

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        answer = self._problem(exc)
        if answer is None:
            super().handle_error(req, client, addr, exc)  # type: ignore[misc]  # the gunicorn worker this mixes into
            return
        status, reason, slug, detail = answer
        self.log.warning("Invalid request from ip=%s: %s", (addr or ("",))[0], detail)
        body = json.dumps({"type": PROBLEM_TYPE_PREFIX + slug, "title": reason, "status": status, "detail": detail})
        head = (
            f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\nContent-Type: {PROBLEM_MEDIA_TYPE}\r\n"
            f"Cache-Control: no-store\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        try:
            write_nonblock(client, (head + body).encode("latin-1"))
        except OSError:
            self.log.debug("could not send the answer to an invalid request")

    def _problem(self, exc: BaseException) -> tuple[int, str, str, str] | None:
        if isinstance(exc, LimitRequestLine):
            limit = self.cfg.limit_request_line
            return (
                414,
                "URI Too Long",
                "uri-too-long",
                f"the request line (method, path and query) is over {limit} bytes",
            )
        if isinstance(exc, LimitRequestHeaders):
            return (
                431,
                "Request Header Fields Too Large",
                "headers-too-large",
                f"the request headers are too large: {exc}",
            )
        if isinstance(exc, _UNPARSABLE):
            return 400, "Invalid request", "invalid-request", f"the request is not valid HTTP/1.1: {str(exc)[:200]}"
        return None


class ProblemGeventWorker(_ProblemAnswers, GeventWorker):
    """gunicorn's gevent worker, answering unparsable requests with problems,
    and closing its idle kept-alive connections as soon as it is told to stop.

    gunicorn's graceful stop waits for every connection to end, and one kept
    alive between requests ends only when its ``keepalive`` runs out: a
    client's idle connection held every stop for that long (a stop took
    6.3 s instead of 1.2 s; it would be a minute behind a balancer that
    needs a long ``keepalive``). A connection that has served a request and
    waits for the next is shut for reading when ``SIGTERM`` comes, so its
    greenlet reads the end and closes it, as HTTP/1.1 lets a server do with
    an idle connection (its client sends the next request on a new one). A
    connection in a request, or that has not sent its first, is left to
    finish."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._between_requests: set[socket.socket] = set()

    def handle(self, listener: Any, client: socket.socket, addr: Any) -> None:
        try:
            super().handle(listener, client, addr)
        finally:
            self._between_requests.discard(client)

    def handle_request(self, listener_name: Any, req: Any, sock: socket.socket, addr: Any) -> bool:
        self._between_requests.discard(sock)
        try:
            return super().handle_request(listener_name, req, sock, addr)
        finally:
            self._between_requests.add(sock)
            if not self.alive:
                # SIGTERM came during the request, after gunicorn decided to
                # keep the connection: its handler did not see this one.
                _shut_for_reading(sock)

    def handle_exit(self, sig: Any, frame: Any) -> None:
        super().handle_exit(sig, frame)
        for client in list(self._between_requests):
            _shut_for_reading(client)


def _shut_for_reading(client: socket.socket) -> None:
    """End the connection's reads, so the greenlet waiting on it reads its end.

    Through a duplicate of its descriptor: gevent's own ``shutdown`` would
    also cancel the greenlet's wait with an error, which gunicorn logs as a
    socket error with its traceback."""
    with contextlib.suppress(OSError):  # the client closed it first
        with socket.fromfd(client.fileno(), client.family, client.type) as same_connection:
            same_connection.shutdown(socket.SHUT_RD)


class ProblemThreadWorker(_ProblemAnswers, ThreadWorker):
    """gunicorn's gthread worker, answering unparsable requests with problems."""


_WORKER_CLASSES = {
    "gevent": f"{__name__}.ProblemGeventWorker",
    "gthread": f"{__name__}.ProblemThreadWorker",
}
_UNPARSABLE = (
    InvalidRequestLine,
    InvalidRequestMethod,
    InvalidHTTPVersion,
    InvalidHeader,
    InvalidHeaderName,
    ObsoleteFolding,
    InvalidChunkSize,
    ChunkMissingTerminator,
)


def _pre_request(worker: Any, req: Any) -> None:
    """Close the connection after this request once it has served its share.

    (A ``Connection: close`` header from the application would not do: gunicorn
    drops it as a hop-by-hop header.)"""
    if req.req_number >= REQUESTS_PER_CONNECTION:
        req.must_close = True


def _pre_request_gevent(worker: Any, req: Any) -> None:
    """``_pre_request``, then let every other ready connection go first.

    A gevent worker switches greenlets only when one waits; a kept-alive
    client whose next request is already there never waits, so under full
    load a few connections were served back to back while the rest queued
    (p50 0.4 ms, p99 135-460 ms; BENCHMARKS.md). One yield per request makes
    the turns round-robin. It sleeps a positive time, not ``sleep(0)``,
    which may resume before the loop polls for input: then new connections
    waited for every kept-alive one (a GET among 16 busy connections: p99
    35 ms, 12 ms with the poll; throughput the same)."""
    _pre_request(worker, req)
    gevent.sleep(1e-6)


def _post_worker_init(worker: Any) -> None:
    """The application is built: keep what it holds out of every later
    garbage collection. A full collection otherwise walks every object of the
    loaded registry (20-35 ms measured), stopping all of a gevent worker's
    connections at once; that was most of the render p99 under load."""
    gc.collect()
    gc.freeze()


def _child_exit(server: Any, worker: Any) -> None:
    """A worker is gone: its live gauges no longer count (multiprocess metrics)."""
    worker_exited(worker.pid)


class JsonAccessLogger(Logger):
    """gunicorn's logger, writing one JSON object per request.

    gunicorn's ``access_log_format`` cannot produce JSON safely: it does not
    escape quotes or control characters from the request line.
    """

    def access(self, resp: Any, req: Any, environ: MutableMapping[str, Any], request_time: Any) -> None:
        if not self.access_log_enabled:
            return
        status = resp.status.split(None, 1)[0] if isinstance(resp.status, str) else resp.status
        entry = {
            "time": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
            "remote_addr": environ.get("REMOTE_ADDR"),
            "method": environ.get("REQUEST_METHOD"),
            "path": environ.get("PATH_INFO"),
            "query": environ.get("QUERY_STRING") or None,
            "status": int(status) if str(status).isdigit() else status,
            "bytes": getattr(resp, "sent", None),
            "duration_ms": round(request_time.total_seconds() * 1000, 3),
            "user_agent": environ.get("HTTP_USER_AGENT"),
        }
        try:
            self.access_log.info(json.dumps(entry, ensure_ascii=False))
        except Exception:  # a log line must never take a request down
            logging.getLogger(__name__).exception("cannot write an access log entry")
