"""A real OpenAI-compatible HTTP server whose replies the tests script.

Started as its own process on a free port and stopped by PID, like the
Redis of ``tests/support/redis_server.py``: the executor's tests talk to it through
the official ``openai`` SDK, over HTTP, exactly as they would to vLLM or a
LiteLLM proxy. Nothing of the SDK is patched.

The script is a JSON file, a list of replies. Each request to
``POST /v1/chat/completions`` (or Azure OpenAI's
``/openai/deployments/<deployment>/chat/completions?api-version=...``)
takes the first reply not used yet whose ``when`` (a regular expression,
searched in the last message's content) matches, or that has no ``when``.
A reply is one of:

- ``{"content": "..."}``: an assistant message;
- ``{"tool_calls": [{"name": ..., "arguments": {...}}]}``: a tool call;
- ``{"status": 500}``: that HTTP status with an OpenAI-style error body,
  whose message is ``"message"`` when given (``{authorization}`` in it is
  replaced by the request's Authorization header: a server quoting the key
  it refused; ``"retry_after": 1`` adds that ``Retry-After`` header);
- ``{"raw": "..."}``: these bytes as the body, whatever they are (malformed JSON);

and may add ``"delay": seconds`` before answering, ``"repeat": true`` to
be used again and again, and ``"model": "other-name"`` to say another model
answered. A request with ``"stream": true`` gets the reply as server-sent
events (tests/support/openai_stream.py): the content in pieces of
``"chunk_chars"`` characters (8) or as the list ``"chunks"``, with
``"delay_between"`` seconds before each event; ``"cut_after": n`` drops
the connection after n events (no end of the body), ``"error_after": n``
sends an error event after n events, and ``"sse": "..."`` sends that text as
the whole stream (malformed events). With no reply left, the answer is 500
with ``"script exhausted"``.

``--flavor`` reproduces a real server's differences
(tests/support/openai_flavors.py): ``generic`` (the default, accepts
anything), ``strict`` (OpenAI's validation), ``llama.cpp``, ``vllm``.

Every request is appended as one JSON line to the log file
(``{"request": n, "path": ..., "auth": "bearer" | "api-key" | null, "body": ...}``,
naming where the credential came, never its value), and so is how each
answer ended: ``{"request": n, "event": "finished" | "disconnected" |
"interrupted" | "cut" | "error" | "abandoned", "events": k}``:
``disconnected`` when the client closed the connection mid-stream (the
reply stopped there), ``abandoned`` when a whole reply was made for a
client that had left (what a server that does not stream does).

    python -m tests.support.openai_server --port 8000 --script replies.json --log requests.jsonl
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from tests.support.openai_flavors import (
    FLAVORS,
    answers_with_usage_in_streams,
    error_body,
    fails_to_stream,
    refusal,
    tool_calls_reach_the_client,
)
from tests.support.openai_stream import ChunkMaker, event, reply_events
from tests.support.scripted_process import Script, ScriptedHandler, ScriptedServerProcess, script_arguments, serve

_ROUTES = re.compile(r"^(?:/v1)?/chat/completions/?$|^/openai/deployments/(?P<deployment>[^/]+)/chat/completions/?$")


def tool_calls(reply: dict[str, Any], number: int) -> list[dict[str, Any]]:
    """The reply's tool calls in the Chat Completions shape."""
    return [
        {
            "id": f"call_{number}_{index}",
            "type": "function",
            "function": {"name": call["name"], "arguments": json.dumps(call.get("arguments", {}))},
        }
        for index, call in enumerate(reply.get("tool_calls") or [])
    ]


def completion(reply: dict[str, Any], model: str, number: int, *, calls: bool = True) -> dict[str, Any]:
    """The Chat Completions answer carrying ``reply`` (its tool calls unless not ``calls``)."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
    finish = "stop"
    if "tool_calls" in reply and calls:
        message["tool_calls"] = tool_calls(reply, number)
        finish = "tool_calls"
    elif message["content"] is None:
        message["content"] = ""
    return {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


class GenerationSlot:
    """llama.cpp's one generation at a time: a request waits for the one
    before it to end, and a stream is interrupted when another waits
    (llama-cpp-python's ``interrupt_requests``, on by default)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting = 0
        self._count_lock = threading.Lock()

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        with self._count_lock:
            self._waiting += 1
        self._lock.acquire()
        with self._count_lock:
            self._waiting -= 1
        try:
            yield
        finally:
            self._lock.release()

    def wanted(self) -> bool:
        with self._count_lock:
            return self._waiting > 0


@dataclass(frozen=True)
class ServerOptions:
    flavor: str = "generic"
    served_model: str | None = None
    """vllm: the only model name served; llama.cpp: unused (it echoes any)."""
    auto_tool_choice: bool = True
    """vllm: started with --enable-auto-tool-choice."""


class RequestLog:
    """The JSON-lines log of requests and of how each answer ended."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._numbers = itertools.count(1)

    def request(self, path: str, auth: str | None, body: Any) -> int:
        with self._lock:
            number = next(self._numbers)
            self._write({"request": number, "path": path, "auth": auth, "body": body})
        return number

    def ended(self, number: int, how: str, events: int) -> None:
        with self._lock:
            self._write({"request": number, "event": how, "events": events})

    def _write(self, line: dict[str, Any]) -> None:
        with self._path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(line) + "\n")


class ChatCompletionsHandler(ScriptedHandler):
    """Answers with the script; ``make_handler`` gives each server its own subclass."""

    log: RequestLog
    options: ServerOptions
    slot: GenerationSlot | None
    completions: Iterator[int]

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        auth = "api-key" if self.headers.get("api-key") else "bearer" if self.headers.get("Authorization") else None
        number = self.log.request(self.path, auth, body)
        path, _, query = self.path.partition("?")
        route = _ROUTES.match(path)
        if route is None or (route.group("deployment") and "api-version=" not in query):
            self._send(404, json.dumps(error_body("no such route", "invalid_request_error")).encode())
            return
        options = self.options
        refused = refusal(
            options.flavor, body, served_model=options.served_model, auto_tool_choice=options.auto_tool_choice
        )
        if refused is not None:
            self._send(refused[0], json.dumps(refused[1]).encode())
            return
        messages = body.get("messages") or [{}]
        last = messages[-1].get("content") or ""
        reply = self.script.next_reply(last if isinstance(last, str) else json.dumps(last))
        if reply is None:
            self._send(500, json.dumps(error_body("script exhausted", "server_error")).encode())
            return
        with self.slot.held() if self.slot is not None else contextlib.nullcontext():
            self._answer(number, reply, body)

    def _answer(self, number: int, reply: dict[str, Any], body: dict[str, Any]) -> None:
        time.sleep(float(reply.get("delay", 0)))
        if "status" in reply:
            message = str(reply.get("message", f"scripted {reply['status']}"))
            message = message.replace("{authorization}", self.headers.get("Authorization", ""))
            error = json.dumps(error_body(message, "server_error")).encode()
            retry_after = {"Retry-After": str(reply["retry_after"])} if "retry_after" in reply else {}
            self._send(int(reply["status"]), error, retry_after)
        elif "raw" in reply:
            self._send(200, str(reply["raw"]).encode())
        elif body.get("stream"):
            self._stream(number, reply, body)
            return
        else:
            model = str(reply.get("model") or body.get("model"))
            calls = tool_calls_reach_the_client(self.options.flavor, body)
            answer = completion(reply, model, next(self.completions), calls=calls)
            try:
                self._send(200, json.dumps(answer).encode())
            except OSError:
                # The whole reply was made for a client that had left.
                self.close_connection = True
                self.log.ended(number, "abandoned", 0)
                return
        self.log.ended(number, "finished", 1)

    def _stream(self, number: int, reply: dict[str, Any], body: dict[str, Any]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if fails_to_stream(self.options.flavor, body):
            self._chunk(b"")
            self.close_connection = True
            self.log.ended(number, "error", 0)
            return
        sent = 0
        try:
            for data in self._events(reply, body):
                ending = self._ending(reply, sent, data)
                if ending is not None:
                    self.log.ended(number, ending, sent)
                    return
                time.sleep(float(reply.get("delay_between", 0)))
                self._chunk(data)
                sent += 1
            self._chunk(b"")
        except OSError:
            self.close_connection = True
            self.log.ended(number, "disconnected", sent)
            return
        self.log.ended(number, "finished", sent)

    def _ending(self, reply: dict[str, Any], sent: int, data: bytes) -> str | None:
        """How the stream ends before ``data`` is sent, if it does."""
        if sent == reply.get("cut_after"):
            # No last chunk: the body ends mid-reply, as when a proxy drops the connection.
            self.close_connection = True
            return "cut"
        if self.slot is not None and self.slot.wanted() and not data.startswith(b"data: [DONE]"):
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")
            return "interrupted"
        if sent == reply.get("error_after"):
            self._chunk(event(error_body("scripted error mid-stream", "server_error")))
            self._chunk(b"")
            return "error"
        return None

    def _events(self, reply: dict[str, Any], body: dict[str, Any]) -> Iterator[bytes]:
        if "sse" in reply:
            yield str(reply["sse"]).encode()
            return
        number = next(self.completions)
        flavor = self.options.flavor
        calls = tool_calls(reply, number) if tool_calls_reach_the_client(flavor, body) else []
        chunks = ChunkMaker(number, str(reply.get("model") or body.get("model")))
        usage = answers_with_usage_in_streams(flavor, body)
        yield from reply_events(reply, calls, chunks, flavor=flavor, usage=usage)

    def _chunk(self, data: bytes) -> None:
        """One piece of a chunked body; the empty one ends it."""
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))


def make_handler(script: Script, log: Path, options: ServerOptions | None = None) -> type[BaseHTTPRequestHandler]:
    options = options or ServerOptions()
    attributes = {
        "script": script,
        "log": RequestLog(log),
        "options": options,
        "slot": GenerationSlot() if options.flavor == "llama.cpp" else None,
        "completions": itertools.count(1),
    }
    return type("Handler", (ChatCompletionsHandler,), attributes)


class ScriptedModelServer(ScriptedServerProcess):
    """``python -m tests.support.openai_server`` on a free port, stopped by PID."""

    def __init__(
        self,
        replies: Sequence[Mapping[str, Any]],
        directory: Path,
        *,
        flavor: str = "generic",
        served_model: str | None = None,
        auto_tool_choice: bool = True,
    ) -> None:
        if flavor not in FLAVORS:
            raise ValueError(f"flavor {flavor!r}: expected one of {', '.join(FLAVORS)}")
        options = ["--flavor", flavor]
        if served_model is not None:
            options += ["--served-model", served_model]
        if not auto_tool_choice:
            options.append("--no-auto-tool-choice")
        super().__init__(
            "tests.support.openai_server",
            replies,
            directory,
            script="replies.json",
            log="requests.jsonl",
            what="the scripted model server",
            options=options,
        )
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.azure_endpoint = f"http://127.0.0.1:{self.port}"
        """What Azure OpenAI's SDK client takes (it adds ``/openai/deployments/...``)."""

    def endings(self) -> list[tuple[str, int]]:
        """How each answer ended so far, in order: (``finished``, ``disconnected``,
        ``abandoned``, ``interrupted``, ``cut`` or ``error``; the events sent before)."""
        return [(entry["event"], entry["events"]) for entry in self.entries() if "event" in entry]

    def wait_for_endings(self, count: int, *, timeout: float = 10) -> list[tuple[str, int]]:
        """``endings()`` once there are ``count`` of them: the server notices a
        closed connection when it next writes to it."""
        deadline = time.monotonic() + timeout
        while len(endings := self.endings()) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        return endings


def main() -> None:
    parser = script_arguments(__doc__.split("\n")[0])
    parser.add_argument("--flavor", choices=FLAVORS, default="generic")
    parser.add_argument("--served-model", help="vllm: the only model name it serves")
    parser.add_argument("--no-auto-tool-choice", action="store_true", help="vllm: without --enable-auto-tool-choice")
    args = parser.parse_args()
    script = Script.from_file(args.script)
    options = ServerOptions(args.flavor, args.served_model, not args.no_auto_tool_choice)
    serve(args.port, make_handler(script, args.log, options))


if __name__ == "__main__":
    main()
