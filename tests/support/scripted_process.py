"""What the scripted model servers of the tests share
(``tests/support/openai_server.py``, ``tests/support/anthropic_server.py``):
each runs as its own process, ``python -m MODULE --port N --script FILE
--log FILE``, on a free loopback port, answers from a JSON list of replies,
and logs every request as a JSON line.

``ScriptedServerProcess`` starts one (once ``/health`` answers), reads its
log and stops it by PID; ``script_arguments``, ``Script``, ``serve`` and a
subclass of ``ScriptedHandler`` are what such a server is made of.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

from tests.support.ports import free_port

REPOSITORY = Path(__file__).resolve().parents[2]
_STARTUP_SECONDS = 20
_Self = TypeVar("_Self", bound="ScriptedServerProcess")


class ScriptedServerProcess:
    """``python -m {module}`` on a free port, answering ``replies``; its
    script and log are files in ``directory``, named ``script`` and ``log``.
    ``options`` are its further command-line options; ``what`` names it in
    the error of a server that did not start."""

    def __init__(
        self,
        module: str,
        replies: Sequence[Mapping[str, Any]],
        directory: Path,
        *,
        script: str,
        log: str,
        what: str,
        options: Sequence[str] = (),
        health_tls: ssl.SSLContext | None = None,
    ) -> None:
        self.port = free_port()
        self._module = module
        self._script = directory / script
        self._script.write_text(json.dumps(replies), encoding="utf-8")
        self.log = directory / log
        self._options = list(options)
        self._what = what
        # A server behind TLS is asked https://localhost/health, trusting what this context trusts.
        self._health_tls = health_tls
        self._process: subprocess.Popen[bytes] | None = None

    def start(self: _Self) -> _Self:
        command = [sys.executable, "-m", self._module, "--port", str(self.port)]
        command += ["--script", str(self._script), "--log", str(self.log), *self._options]
        self._process = subprocess.Popen(command, cwd=REPOSITORY)
        deadline = time.monotonic() + _STARTUP_SECONDS
        health = f"https://localhost:{self.port}/health" if self._health_tls else f"http://127.0.0.1:{self.port}/health"
        while True:
            try:
                urllib.request.urlopen(health, timeout=1, context=self._health_tls).close()
                return self
            except OSError:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"{self._what} did not start") from None
                time.sleep(0.05)

    def entries(self) -> list[dict[str, Any]]:
        """Every line of the log so far, in order."""
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text(encoding="utf-8").splitlines()]

    def requests(self) -> list[dict[str, Any]]:
        """Every request body received so far, in order."""
        return [entry["body"] for entry in self.entries() if "body" in entry]

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None

    def __enter__(self: _Self) -> _Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Script:
    """The replies, each used once unless it repeats; safe across request threads."""

    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self._replies = replies
        self._used: set[int] = set()
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: Path) -> Script:
        """The script written by ``ScriptedServerProcess``: a JSON list of replies."""
        return cls(json.loads(path.read_text(encoding="utf-8")))

    def next_reply(self, last_text: str) -> dict[str, Any] | None:
        """The first reply not used up whose ``when`` (a regular expression)
        is found in ``last_text``, the text of the request's last turn, or
        that has no ``when``; None when there is none."""
        with self._lock:
            for index, reply in enumerate(self._replies):
                if index in self._used:
                    continue
                pattern = reply.get("when")
                if pattern is not None and not re.search(pattern, last_text):
                    continue
                if not reply.get("repeat"):
                    self._used.add(index)
                return reply
        return None


class ScriptedHandler(BaseHTTPRequestHandler):
    """What the scripted servers' request handlers share: HTTP/1.1, the
    script (``Script``), ``/health``, and JSON answers (``_send``)."""

    protocol_version = "HTTP/1.1"
    # Headers and body go out in several writes: without this, Nagle's
    # algorithm holds the body until the client's delayed ACK (40 ms).
    disable_nagle_algorithm = True
    script: Script

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the server's own request log is the record

    def do_GET(self) -> None:
        self._send(200, b'{"status": "ok"}' if self.path == "/health" else b"{}")

    def _send(self, status: int, payload: bytes, headers: Mapping[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)


def script_arguments(description: str) -> argparse.ArgumentParser:
    """The command line every scripted server takes: ``--port``, ``--script``
    (the JSON list of replies) and ``--log``; a server adds its own."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--script", type=Path, required=True)
    parser.add_argument("--log", type=Path, required=True)
    return parser


class _ScriptedHTTPServer(ThreadingHTTPServer):
    # socketserver listens with a backlog of 5: when more clients connect at
    # once (an eval's 20 cases in flight), the kernel drops the rest's
    # handshakes, which they retry a second later, or read a reset.
    request_queue_size = 128


def serve(port: int, handler: type[BaseHTTPRequestHandler], *, tls: ssl.SSLContext | None = None) -> None:
    """Answer with ``handler`` on loopback ``port`` until SIGTERM; over TLS
    with ``tls`` (a server context holding its certificate)."""
    server = _ScriptedHTTPServer(("127.0.0.1", port), handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    server.daemon_threads = True
    # shutdown() waits for serve_forever to return: not from the signal
    # handler, which runs in the thread serve_forever is blocked in.
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    # A short poll: SIGTERM's shutdown() waits for the loop to look (0.5 s by default, at every stop).
    server.serve_forever(poll_interval=0.05)
