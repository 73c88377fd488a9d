"""A real OpenAI-compatible HTTP server whose replies the tests script.

Started as its own process on a free port and stopped by PID, like the
Redis of ``tests/support/redis_server.py``: the executor's tests talk to it through
the official ``openai`` SDK, over HTTP, exactly as they would to vLLM or a
LiteLLM proxy. Nothing of the SDK is patched.

The script is a JSON file, a list of replies. Each request to
``POST /v1/chat/completions`` takes the first reply not used yet whose
``when`` (a regular expression, searched in the last message's content)
matches, or that has no ``when``. A reply is one of:

- ``{"content": "..."}``: an assistant message;
- ``{"tool_calls": [{"name": ..., "arguments": {...}}]}``: a tool call;
- ``{"status": 500}``: that HTTP status with an OpenAI-style error body,
  whose message is ``"message"`` when given (``{authorization}`` in it is
  replaced by the request's Authorization header: a server quoting the key
  it refused);
- ``{"raw": "..."}``: these bytes as the body, whatever they are (malformed JSON);
and may add ``"delay": seconds`` before answering and ``"repeat": true`` to
be used again and again. With no reply left, the answer is 500 with
``"script exhausted"``. Every request body is appended as one JSON line to
the log file, for the tests to read.

    python -m tests.support.openai_server --port 8000 --script replies.json --log requests.jsonl
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.support.redis_server import free_port

REPOSITORY = Path(__file__).resolve().parents[2]


class Script:
    """The replies, each used once unless it repeats; safe across request threads."""

    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self._replies = replies
        self._used: set[int] = set()
        self._lock = threading.Lock()

    def next_reply(self, last_message: str) -> dict[str, Any] | None:
        with self._lock:
            for index, reply in enumerate(self._replies):
                if index in self._used:
                    continue
                pattern = reply.get("when")
                if pattern is not None and not re.search(pattern, last_message):
                    continue
                if not reply.get("repeat"):
                    self._used.add(index)
                return reply
        return None


def completion(reply: dict[str, Any], model: str, number: int) -> dict[str, Any]:
    """The Chat Completions answer carrying ``reply``."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
    finish = "stop"
    if "tool_calls" in reply:
        message["tool_calls"] = [
            {
                "id": f"call_{number}_{index}",
                "type": "function",
                "function": {"name": call["name"], "arguments": json.dumps(call.get("arguments", {}))},
            }
            for index, call in enumerate(reply["tool_calls"])
        ]
        finish = "tool_calls"
    return {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def make_handler(script: Script, log: Path) -> type[BaseHTTPRequestHandler]:
    counter = iter(range(1, 10**9))
    log_lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in two writes: without this, Nagle's
        # algorithm holds the body until the client's delayed ACK (40 ms).
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the request log below is the record

        def do_GET(self) -> None:
            self._send(200, b'{"status": "ok"}' if self.path == "/health" else b"{}")

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            with log_lock, log.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps({"path": self.path, "body": body}) + "\n")
            if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                self._send(404, b'{"error": {"message": "no such route", "type": "invalid_request_error"}}')
                return
            messages = body.get("messages") or [{}]
            last = messages[-1].get("content") or ""
            reply = script.next_reply(last if isinstance(last, str) else json.dumps(last))
            if reply is None:
                self._send(500, b'{"error": {"message": "script exhausted", "type": "server_error"}}')
                return
            time.sleep(float(reply.get("delay", 0)))
            if "status" in reply:
                message = str(reply.get("message", f"scripted {reply['status']}"))
                message = message.replace("{authorization}", self.headers.get("Authorization", ""))
                error = {"error": {"message": message, "type": "server_error"}}
                self._send(int(reply["status"]), json.dumps(error).encode())
            elif "raw" in reply:
                self._send(200, str(reply["raw"]).encode())
            else:
                self._send(200, json.dumps(completion(reply, str(body.get("model")), next(counter))).encode())

        def _send(self, status: int, payload: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    return Handler


class ScriptedModelServer:
    """``python -m tests.support.openai_server`` on a free port, stopped by PID."""

    def __init__(self, replies: Sequence[Mapping[str, Any]], directory: Path) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._script = directory / "replies.json"
        self._script.write_text(json.dumps(replies), encoding="utf-8")
        self.log = directory / "requests.jsonl"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> ScriptedModelServer:
        command = [sys.executable, "-m", "tests.support.openai_server", "--port", str(self.port)]
        command += ["--script", str(self._script), "--log", str(self.log)]
        self._process = subprocess.Popen(command, cwd=REPOSITORY)
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1).close()
                return self
            except OSError:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("the scripted model server did not start") from None
                time.sleep(0.05)

    def requests(self) -> list[dict[str, Any]]:
        """Every request body received so far, in order."""
        if not self.log.exists():
            return []
        lines = self.log.read_text(encoding="utf-8").splitlines()
        return [json.loads(line)["body"] for line in lines]

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--script", type=Path, required=True)
    parser.add_argument("--log", type=Path, required=True)
    args = parser.parse_args()
    script = Script(json.loads(args.script.read_text(encoding="utf-8")))
    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(script, args.log))
    server.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    server.serve_forever()


if __name__ == "__main__":
    main()
