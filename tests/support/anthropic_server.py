"""A real Anthropic Messages API server whose replies the tests script.

Started as its own process on a free port and stopped by PID, like
``tests/support/openai_server.py``: the tests reach it through the official
``anthropic`` SDK over HTTP, on each of its three paths:

- ``POST /v1/messages`` (Anthropic's own API; an ``x-api-key`` or bearer token),
- ``POST /v1/projects/P/locations/R/publishers/anthropic/models/M:rawPredict``
  and ``:streamRawPredict`` (Vertex AI; a bearer token),
- ``POST /model/M/invoke`` and ``/invoke-with-response-stream`` (Bedrock; a
  SigV4 signature or a bearer API key; streams in AWS's event stream encoding).

It checks what the real API checks that a translation can get wrong, and
answers 400 ``invalid_request_error`` otherwise (``problem``): fields it
does not know, ``max_tokens``, roles that alternate from a user turn, empty
text, tool results that answer the tool uses just before them and come
first in their turn, tools and ``tool_choice``, and no sampling parameters
(``temperature``, ``top_p``, ``top_k``: refused since API version 2026-10-21).

The script is a JSON list of replies. Each request takes the first reply not
used yet whose ``when`` (a regular expression, searched in the text of the
last turn) matches, or that has none; ``"repeat": true`` keeps it for reuse.
A reply has:

- ``content`` (text; ``content_times`` repeats it, one delta per repetition
  when streamed), ``tool_calls`` (``[{"name", "arguments"}]``),
  ``model`` (another model's name), ``stop_reason``, ``usage``;
- or ``status`` (with ``error_type``, ``message``, ``headers``): that error
  in Anthropic's shape (Bedrock's ``{"message"}`` on Bedrock's paths);
- or ``raw``: these bytes as the body (or the event stream), whatever they are;

and for streams: ``cut_after`` N events (the connection dropped inside a
chunk), ``end_after`` N events (the body ended cleanly, no message_stop),
``stream_error`` ``{"type", "message"}`` after ``error_after`` events (1),
``event_delay`` seconds between events; ``delay`` seconds before any answer.

Every request is appended to the log as a JSON line (path, some headers,
body, when it came on the monotonic clock, which no clock adjustment moves,
and how many requests were in flight then), and so is every answer the
client left early (``"disconnected"``).

    python -m tests.support.anthropic_server --port 8000 --script replies.json --log requests.jsonl
"""

from __future__ import annotations

import base64
import json
import re
import socket
import threading
import time
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.support.scripted_process import Script, ScriptedHandler, ScriptedServerProcess, script_arguments, serve

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
FIELDS = {
    "model",
    "messages",
    "max_tokens",
    "system",
    "tools",
    "tool_choice",
    "stop_sequences",
    "stream",
    "metadata",
    "thinking",
    "service_tier",
}
VERTEX = re.compile(
    r"^/v1/projects/([^/]+)/locations/([^/]+)/publishers/anthropic/models/([^/:]+):(rawPredict|streamRawPredict)$"
)
BEDROCK = re.compile(r"^/model/([^/]+)/(invoke|invoke-with-response-stream)$")
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
LOGGED_HEADERS = ("x-api-key", "authorization", "anthropic-version", "x-amz-date")
DELTA_CHARS = 8


# --- what the real API refuses ---------------------------------------------------------------


def problem(body: Any, *, platform: str) -> str | None:
    """Why the API would answer ``body`` with 400, or None."""
    if not isinstance(body, dict):
        return "the body is not a JSON object"
    allowed = FIELDS | ({"anthropic_version"} if platform != "anthropic" else set())
    for key in body:
        if key not in allowed:
            return f"{key}: Extra inputs are not permitted"
    if platform == "anthropic" and not isinstance(body.get("model"), str):
        return "model: Field required"
    if platform != "anthropic" and not isinstance(body.get("anthropic_version"), str):
        return "anthropic_version: Field required"
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        return "max_tokens: Field required (an integer of at least 1)"
    return (
        _system_problem(body.get("system"))
        or _stop_problem(body)
        or _tools_problem(body.get("tools"), body.get("tool_choice"), "tool_choice" in body)
        or _messages_problem(body.get("messages"))
    )


def _system_problem(system: Any) -> str | None:
    if system is None or isinstance(system, str):
        return None
    if isinstance(system, list) and all(isinstance(b, dict) and b.get("type") == "text" for b in system):
        return None
    return "system: Input should be a valid string or a list of text blocks"


def _stop_problem(body: Mapping[str, Any]) -> str | None:
    stop = body.get("stop_sequences")
    if stop is not None and not (isinstance(stop, list) and all(isinstance(s, str) for s in stop)):
        return "stop_sequences: Input should be a valid list of strings"
    return None


def _tools_problem(tools: Any, choice: Any, chosen: bool) -> str | None:
    names: list[str] = []
    for index, tool in enumerate(tools or []):
        if not isinstance(tool, dict) or not TOOL_NAME.match(str(tool.get("name"))):
            return f"tools.{index}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
        schema = tool.get("input_schema")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            return f"tools.{index}.input_schema.type: Input should be 'object'"
        names.append(tool["name"])
    if len(set(names)) != len(names):
        return "tools: Tool names must be unique."
    if not chosen:
        return None
    if not names:
        return "tool_choice may only be specified while providing tools"
    if not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "none", "tool"):
        return "tool_choice: Input tag does not match any of the expected tags: 'auto', 'any', 'tool', 'none'"
    if choice["type"] == "tool" and choice.get("name") not in names:
        return f"tool_choice.name: there is no tool named {choice.get('name')!r}"
    return None


def _messages_problem(messages: Any) -> str | None:
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    previous: dict[str, Any] | None = None
    for index, message in enumerate(messages):
        where = f"messages.{index}"
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            return f"{where}.role: Input should be 'user' or 'assistant'"
        expected = "user" if previous is None or previous["role"] == "assistant" else "assistant"
        if message["role"] != expected:
            return f"{where}: roles must alternate between 'user' and 'assistant', starting with 'user'"
        blocks = _blocks(message.get("content"))
        if blocks is None or not blocks:
            return f"{where}: all messages must have non-empty content"
        found = _blocks_problem(where, message["role"], blocks, _tool_uses(previous))
        if found:
            return found
        previous = {"role": message["role"], "content": blocks}
    if previous is not None and previous["role"] == "assistant":
        last = previous["content"][-1]
        if last.get("type") == "text" and last["text"] != last["text"].rstrip():
            return "final assistant content cannot end with trailing whitespace"
    return None


def _blocks(content: Any) -> list[dict[str, Any]] | None:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list) and all(isinstance(block, dict) for block in content):
        return content
    return None


def _tool_uses(turn: dict[str, Any] | None) -> list[str]:
    if turn is None or turn["role"] != "assistant":
        return []
    return [block.get("id") for block in turn["content"] if block.get("type") == "tool_use"]


def _blocks_problem(where: str, role: str, blocks: list[dict[str, Any]], asked: list[str]) -> str | None:
    answered: list[str] = []
    seen_other = False
    for index, block in enumerate(blocks):
        kind = block.get("type")
        if kind == "text":
            if not isinstance(block.get("text"), str) or not block["text"].strip():
                return f"{where}.content.{index}: text content blocks must contain non-whitespace text"
            seen_other = True
        elif kind == "tool_use" and role == "assistant":
            if not isinstance(block.get("input"), dict) or not isinstance(block.get("id"), str):
                return f"{where}.content.{index}.input: Input should be a valid dictionary"
        elif kind == "tool_result" and role == "user":
            if seen_other:
                return f"{where}: tool_result blocks must come first in the message"
            if block.get("tool_use_id") not in asked:
                return (
                    f"{where}.content.{index}: unexpected tool_use_id found in tool_result blocks: "
                    f"{block.get('tool_use_id')}. Each tool_result block must have a corresponding "
                    "tool_use block in the previous message."
                )
            answered.append(block["tool_use_id"])
        else:
            return f"{where}.content.{index}.type: {kind!r} is not a block a {role} turn may hold"
    missing = [id_ for id_ in asked if id_ not in answered]
    if missing:
        return (
            f"{where}: tool_use ids were found without tool_result blocks immediately after: "
            f"{', '.join(missing)}. Each tool_use block must have a corresponding tool_result block in the next message."
        )
    return None


# --- replies ---------------------------------------------------------------------------------


def last_turn_text(body: Mapping[str, Any]) -> str:
    """The text of the last turn: its text blocks and tool results, what ``when`` is searched in."""
    messages = body.get("messages") or [{}]
    texts = []
    for block in _blocks(messages[-1].get("content")) or []:
        if block.get("type") == "text":
            texts.append(str(block.get("text")))
        elif block.get("type") == "tool_result":
            inner = block.get("content", "")
            texts.append(inner if isinstance(inner, str) else " ".join(b.get("text", "") for b in _blocks(inner) or []))
    return "\n".join(texts)


def message(reply: Mapping[str, Any], model: str, number: int) -> dict[str, Any]:
    """The Messages API answer carrying ``reply``."""
    content: list[dict[str, Any]] = []
    text = str(reply.get("content") or "") * int(reply.get("content_times", 1))
    if text:
        content.append({"type": "text", "text": text})
    for index, call in enumerate(reply.get("tool_calls") or []):
        id_ = call.get("id", f"toolu_{number}_{index}")
        content.append({"type": "tool_use", "id": id_, "name": call["name"], "input": call.get("arguments", {})})
    stop = reply.get("stop_reason") or ("tool_use" if reply.get("tool_calls") else "end_turn")
    return {
        "id": f"msg_{number}",
        "type": "message",
        "role": "assistant",
        "model": reply.get("model", model),
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": reply.get("usage", {"input_tokens": 10, "output_tokens": 5}),
    }


def events(reply: Mapping[str, Any], whole: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The stream of events of ``whole`` (a message): text in deltas, tool input in two pieces."""
    start = {**whole, "content": [], "stop_reason": None, "usage": {**whole["usage"], "output_tokens": 1}}
    out: list[dict[str, Any]] = [{"type": "message_start", "message": start}, {"type": "ping"}]
    for index, block in enumerate(whole["content"]):
        if block["type"] == "text":
            out.append({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})
            times = int(reply.get("content_times", 1))
            text = str(reply.get("content"))
            pieces = (
                [text] * times if times > 1 else [text[i : i + DELTA_CHARS] for i in range(0, len(text), DELTA_CHARS)]
            )
            out += [_delta(index, {"type": "text_delta", "text": piece}) for piece in pieces]
        else:
            out.append({"type": "content_block_start", "index": index, "content_block": {**block, "input": {}}})
            written = json.dumps(block["input"])
            half = len(written) // 2
            out += [
                _delta(index, {"type": "input_json_delta", "partial_json": p}) for p in (written[:half], written[half:])
            ]
        out.append({"type": "content_block_stop", "index": index})
    usage = {"output_tokens": whole["usage"].get("output_tokens", 5)}
    out.append(
        {"type": "message_delta", "delta": {"stop_reason": whole["stop_reason"], "stop_sequence": None}, "usage": usage}
    )
    out.append({"type": "message_stop"})
    return out


def _delta(index: int, delta: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": delta}


def sse(event: Mapping[str, Any]) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def aws_frame(payload: bytes, headers: Mapping[str, str]) -> bytes:
    """One message of AWS's event stream encoding, with its CRCs, as Bedrock sends it."""
    encoded = b""
    for name, value in headers.items():
        raw_name, raw_value = name.encode(), value.encode()
        encoded += bytes([len(raw_name)]) + raw_name + b"\x07" + len(raw_value).to_bytes(2, "big") + raw_value
    total = 12 + len(encoded) + len(payload) + 4
    prelude = total.to_bytes(4, "big") + len(encoded).to_bytes(4, "big")
    prelude += zlib.crc32(prelude).to_bytes(4, "big")
    frame = prelude + encoded + payload
    return frame + zlib.crc32(frame).to_bytes(4, "big")


def bedrock_event(event: Mapping[str, Any]) -> bytes:
    if event["type"] == "error":
        error = event["error"]
        headers = {":message-type": "exception", ":exception-type": error["type"], ":content-type": "application/json"}
        return aws_frame(json.dumps({"message": error["message"]}).encode(), headers)
    payload = json.dumps({"bytes": base64.b64encode(json.dumps(event).encode()).decode()}).encode()
    return aws_frame(payload, {":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"})


# --- the server ------------------------------------------------------------------------------


class Handler(ScriptedHandler):
    """Answers with the script's replies; ``bind`` gives it the script and the log."""

    log: Path
    log_lock = threading.Lock()
    counter = iter(range(1, 10**9))
    in_flight = 0

    @classmethod
    def bind(cls, script: Script, log: Path) -> type[Handler]:
        return type("BoundHandler", (cls,), {"script": script, "log": log})

    def record(self, entry: Mapping[str, Any]) -> None:
        with self.log_lock, self.log.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry) + "\n")

    def do_POST(self) -> None:
        with self.log_lock:
            Handler.in_flight += 1
        try:
            self._post()
        finally:
            with self.log_lock:
                Handler.in_flight -= 1

    def _post(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = raw.decode(errors="replace")
        headers = {name: self.headers[name] for name in LOGGED_HEADERS if name in self.headers}
        entry = {
            "path": self.path,
            "headers": headers,
            "body": body,
            "at": time.monotonic(),
            "in_flight": self.in_flight,
        }
        self.record(entry)
        route = self._route(body)
        if route is None:
            return
        platform, model, streamed = route
        found = problem(body, platform=platform)
        if found is not None:
            self._error(400, "invalid_request_error", found, platform)
            return
        reply = self.script.next_reply(last_turn_text(body))
        if reply is None:
            self._error(500, "api_error", "script exhausted", platform)
            return
        time.sleep(float(reply.get("delay", 0)))
        try:
            self._answer(reply, platform, model, streamed)
        except (BrokenPipeError, ConnectionResetError):
            # The client left before the answer was written (it refused it, or timed out).
            self.record({"path": self.path, "event": "disconnected"})
            self.close_connection = True

    def _answer(self, reply: Mapping[str, Any], platform: str, model: str, streamed: bool) -> None:
        if "status" in reply:
            status = int(reply["status"])
            kind = reply.get("error_type", ERROR_TYPES.get(status, "api_error"))
            self._error(status, kind, reply.get("message", f"scripted {status}"), platform, reply.get("headers"))
        elif streamed:
            self._stream(reply, message(reply, model, next(self.counter)), platform)
        elif "raw" in reply:
            self._send(200, str(reply["raw"]).encode())
        else:
            self._send(200, json.dumps(message(reply, model, next(self.counter))).encode())

    def _route(self, body: Any) -> tuple[str, str, bool] | None:
        """The platform, the model and whether to stream; None once refused."""
        model = str(body.get("model")) if isinstance(body, dict) else ""
        streamed = isinstance(body, dict) and body.get("stream") is True
        auth = self.headers.get("authorization", "")
        if self.path == "/v1/messages":
            if not (self.headers.get("x-api-key") or auth.startswith("Bearer ")):
                self._error(401, "authentication_error", "x-api-key header is required", "anthropic")
                return None
            return "anthropic", model, streamed
        vertex, bedrock = VERTEX.match(self.path), BEDROCK.match(self.path)
        if vertex and auth.startswith("Bearer "):
            return "vertex", vertex.group(3), vertex.group(4) == "streamRawPredict"
        if bedrock and (auth.startswith("AWS4-HMAC-SHA256 Credential=") or auth.startswith("Bearer ")):
            return "bedrock", bedrock.group(1), bedrock.group(2) == "invoke-with-response-stream"
        if vertex or bedrock:
            self._error(401, "authentication_error", "the request is not signed", "anthropic")
        else:
            self._error(404, "not_found_error", f"no route {self.path}", "anthropic")
        return None

    def _error(
        self, status: int, kind: str, text: str, platform: str, headers: Mapping[str, str] | None = None
    ) -> None:
        payload: dict[str, Any] = {"message": text}
        if platform != "bedrock":
            payload = {"type": "error", "error": {"type": kind, "message": text}}
        self._send(status, json.dumps(payload).encode(), headers)

    def _stream(self, reply: Mapping[str, Any], whole: Mapping[str, Any], platform: str) -> None:
        self.send_response(200)
        kind = "application/vnd.amazon.eventstream" if platform == "bedrock" else "text/event-stream"
        self.send_header("Content-Type", kind)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        encode = bedrock_event if platform == "bedrock" else sse
        frames = [str(reply["raw"]).encode()] if "raw" in reply else [encode(e) for e in events(reply, whole)]
        if "stream_error" in reply:
            at = int(reply.get("error_after", 1))
            frames = frames[:at] + [encode({"type": "error", "error": reply["stream_error"]})]
        self._write_frames(frames, reply)

    def _write_frames(self, frames: Sequence[bytes], reply: Mapping[str, Any]) -> None:
        delay = float(reply.get("event_delay", 0))
        cut, end = reply.get("cut_after"), reply.get("end_after")
        for number, frame in enumerate(frames):
            if number == cut:
                # A chunk announced and never finished: the connection drops mid-reply.
                self.wfile.write(f"{len(frame) + 100:x}\r\n".encode() + frame)
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if number == end:
                break
            if delay and number:
                time.sleep(delay)
            self.wfile.write(f"{len(frame):x}\r\n".encode() + frame + b"\r\n")
        self.wfile.write(b"0\r\n\r\n")


class AnthropicServer(ScriptedServerProcess):
    """``python -m tests.support.anthropic_server`` on a free port, stopped by PID."""

    def __init__(self, replies: Sequence[Mapping[str, Any]], directory: Path) -> None:
        super().__init__(
            "tests.support.anthropic_server",
            replies,
            directory,
            script="anthropic-replies.json",
            log="anthropic-requests.jsonl",
            what="the scripted Anthropic server",
        )
        self.base_url = f"http://127.0.0.1:{self.port}"
        """For ``AsyncAnthropic`` and ``AsyncAnthropicBedrock``; Vertex's is ``vertex_url``."""
        self.vertex_url = f"{self.base_url}/v1"

    def wait_for_disconnect(self, timeout: float = 10.0) -> bool:
        """Whether the server saw a client leave a stream, within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(entry.get("event") == "disconnected" for entry in self.entries()):
                return True
            time.sleep(0.05)
        return False


def main() -> None:
    args = script_arguments(__doc__.split("\n")[0]).parse_args()
    script = Script.from_file(args.script)
    serve(args.port, Handler.bind(script, args.log))


if __name__ == "__main__":
    main()
