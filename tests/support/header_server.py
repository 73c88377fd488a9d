"""A small OpenAI-compatible HTTP server in a thread, for what the scripted
model server (tests/support/openai_server.py) cannot script: response headers,
a body with no length, a compressed body; and the body of one completion."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Answer:
    """One answer of ``HeaderServer``: ``body`` sent ``repeat`` times, with a
    Content-Length unless ``sized`` is false (then the connection's end ends it)."""

    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    repeat: int = 1
    sized: bool = True


class HeaderServer:
    """A real HTTP server in a thread, answering each request with the next of
    ``answers``; it records when each request came and its headers (which
    look names up in any case)."""

    def __init__(self, answers: list[Answer]) -> None:
        self.received: list[tuple[float, Message]] = []
        pending = iter(answers)
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                received.append((time.monotonic(), self.headers))
                answer = next(pending)
                self.send_response(answer.status)
                self.send_header("Content-Type", "application/json")
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                if answer.sized:
                    self.send_header("Content-Length", str(len(answer.body) * answer.repeat))
                self.end_headers()
                try:
                    for _ in range(answer.repeat):
                        self.wfile.write(answer.body)
                except OSError:
                    pass  # the client stopped reading: what a size cap does

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05})

    def __enter__(self) -> HeaderServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def completion_body(content: str) -> bytes:
    return (
        b'{"id": "chatcmpl-1", "model": "m", "choices": [{"index": 0, "finish_reason": "stop",'
        b' "message": {"role": "assistant", "content": "' + content.encode() + b'"}}]}'
    )
