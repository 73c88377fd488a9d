"""The executor's Chat Completions shapes in Anthropic's Messages API, and
back: pure functions, no IO (``anthropic_chat`` sends what they build).

Requests (``to_messages_call``):

- ``system`` messages, wherever they stand, become the ``system`` text,
  joined by blank lines: the Messages API has no system turns.
- ``user``, ``assistant`` and ``tool`` messages become turns of content
  blocks. An assistant's ``tool_calls`` become ``tool_use`` blocks after its
  text; a ``tool`` message becomes a ``tool_result`` block in a user turn.
  Consecutive turns of one role are merged into one (the API wants user and
  assistant in turn), with the ``tool_result`` blocks first, as the API
  requires of a turn that answers tool calls. Text that is empty or only
  whitespace is left out: the API refuses such blocks.
- A conversation that does not begin with a user turn (it begins with the
  assistant, or has only a system prompt) begins with ``OPENING_TURN``; the
  API needs a user turn first.
- A last assistant turn is a prefill to the API, which refuses trailing
  whitespace there: it is stripped.
- Tool call arguments are JSON text; the API takes an object. Arguments
  that are not a JSON object (a model may write broken JSON, which the
  executor answers with an error observation) are sent as
  ``{"_raw": "<the text>"}``, so that the model sees what it wrote and the
  conversation can go on; empty arguments are ``{}``.
- Tools become ``{"name", "description", "input_schema"}``; ``tool_choice``
  ``auto``, ``required``, ``none`` or a tool's name becomes ``{"type":
  "auto"}``, ``{"type": "any"}``, ``{"type": "none"}`` or ``{"type": "tool",
  "name": ...}``.
- Structured output (a ``ResponseFormat`` with a schema) is a tool whose
  input schema is the schema (``OutputTool``): the reply's content is that
  tool's input as JSON text. A schema whose root is not an object (the API
  takes only objects) is wrapped as the property ``value`` and unwrapped
  from the reply. With no other tools the output tool is forced; beside
  tools the model is asked for, with ``tool_choice`` ``auto`` (or none),
  the model must call one of them or the output tool (``{"type": "any"}``),
  so the output tool is its final answer; with ``none`` the output tool is
  forced; with ``required`` or a tool's name the round is a tool call by
  definition, and no output tool is offered. Without a schema nothing is
  asked: Anthropic has no JSON mode, and the prompt asks for JSON.
- What is sent otherwise than asked (the opening turn, structured output
  as a tool or not at all, ``auto`` sent as ``any``) is
  ``MessagesCall.adjustments``, which the adapter puts on the reply.

Parameters: the API version the SDK speaks (``anthropic-version:
2026-10-21``, on every platform) takes ``max_tokens`` (required: the
definition's, else ``default_max_tokens``) and ``stop_sequences`` (a single
``stop`` string becomes a list of one), and refuses ``temperature``,
``top_p`` and ``top_k`` with a 400, whatever their value (the SDK has no
argument for them any more). Those are ``MessagesCall.dropped``: never sent.

Replies (``read_message``, and ``StreamAssembly`` for a stream): the text
blocks joined are the content, ``tool_use`` blocks are tool calls with
their input as JSON text, the input tokens count cached ones too, and
``stop_reason`` is said in Chat Completions words (``FINISH_REASONS``).
Other blocks (thinking, server tools) are left out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from registry.errors import ModelError
from registry.providers.chat import Adjustment, ChatReply, ChatRequest, ResponseFormat, ToolCallRequest, Usage
from registry.providers.params import TABLES, ProviderKind, split

OPENING_TURN = "Begin."
"""The user turn sent first when a conversation has none there."""
OUTPUT_DESCRIPTION = "Reply with your final answer as this tool's input."
FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
"""``stop_reason`` in the words of Chat Completions' ``finish_reason``;
others (``pause_turn``...) are kept as Anthropic says them."""
ACCEPTED = ("max_tokens", "stop_sequences")
"""The parameters the API version takes; ``params.TABLES`` may map more."""
_TOOL_NAME = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True)
class OutputTool:
    """The tool that carries a structured reply."""

    name: str
    wrapped: bool = False
    """The schema is not an object: the reply is the input's ``value``."""


@dataclass(frozen=True)
class MessagesCall:
    """One Messages API request, in the API's own terms."""

    model: str
    max_tokens: int
    messages: tuple[dict[str, Any], ...]
    system: str | None = None
    tools: tuple[dict[str, Any], ...] = ()
    tool_choice: dict[str, Any] | None = None
    stop_sequences: tuple[str, ...] | None = None
    dropped: tuple[str, ...] = ()
    """The definition's parameters (neutral names) that Anthropic does not take: not sent."""
    output: OutputTool | None = None
    adjustments: tuple[Adjustment, ...] = ()
    """What is sent otherwise than the request asked (``adjustments``): the reply carries them."""

    def body(self) -> dict[str, Any]:
        """The request body, as the API reads it (without ``stream``)."""
        out: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens, "messages": list(self.messages)}
        if self.system is not None:
            out["system"] = self.system
        if self.tools:
            out["tools"] = list(self.tools)
        if self.tool_choice is not None:
            out["tool_choice"] = self.tool_choice
        if self.stop_sequences is not None:
            out["stop_sequences"] = list(self.stop_sequences)
        return out


def to_messages_call(request: ChatRequest, *, kind: ProviderKind, default_max_tokens: int) -> MessagesCall:
    """``request`` as one Messages API call; ``kind`` picks the parameter table."""
    params = split(kind, request.params)
    refused = tuple(key for key, name in TABLES[kind].items() if key in request.params and name not in ACCEPTED)
    stop = params.sent.get("stop_sequences")
    system, turns, opened = _conversation(request.messages)
    tools, tool_choice, output = tool_plan(request.tools, request.tool_choice, request.response_format)
    return MessagesCall(
        model=request.model,
        max_tokens=params.sent.get("max_tokens", default_max_tokens),
        messages=tuple(turns),
        system=system,
        tools=tuple(tools),
        tool_choice=tool_choice,
        # Chat Completions takes one stop string; Anthropic only a list.
        stop_sequences=((stop,) if isinstance(stop, str) else tuple(stop)) if stop is not None else None,
        dropped=params.dropped + refused,
        output=output,
        adjustments=adjustments(request, output, opened=opened),
    )


def adjustments(request: ChatRequest, output: OutputTool | None, *, opened: bool) -> tuple[Adjustment, ...]:
    """What a call sends otherwise than ``request`` asks: an opening turn
    added, structured output as a tool (and the ``tool_choice`` that makes
    it the answer), or not asked for at all. A translation that keeps the
    meaning (``required`` as ``any``, ``stop`` as ``stop_sequences``) is none."""
    found = []
    if opened:
        found.append(Adjustment("messages", f"a first user turn {OPENING_TURN!r} was added: Anthropic needs one"))
    wanted = request.response_format
    if wanted is None:
        return tuple(found)
    if wanted.schema is None:
        why = "response_format json_object was not sent: Anthropic has no JSON mode"
        return (*found, Adjustment("response_format", why))
    if output is None:
        why = f"response_format was not sent: tool_choice {request.tool_choice} makes the round a tool call"
        return (*found, Adjustment("response_format", why))
    shape = ", the schema wrapped as its property value (it takes only objects)" if output.wrapped else ""
    beside = bool(request.tools) and request.tool_choice != "none"
    how = "beside the tools offered" if beside else "forced"
    found.append(Adjustment("response_format", f"response_format was sent as the tool {output.name}{shape}, {how}"))
    if beside:
        choice = request.tool_choice or "auto"
        why = f"tool_choice {choice} was sent as any: the model calls a tool or answers through {output.name}"
        found.append(Adjustment("tool_choice", why))
    elif request.tools:
        found.append(Adjustment("tool_choice", f"tool_choice none was sent as the tool {output.name}, forced"))
    return tuple(found)


# --- messages ------------------------------------------------------------------------------


def _unsendable(why: str) -> ModelError:
    return ModelError(f"the request cannot be sent to Anthropic: {why}", reason="malformed")


def conversation(messages: Sequence[Mapping[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """The system text (None: none) and the turns of ``messages``."""
    system, turns, _ = _conversation(messages)
    return system, turns


def _conversation(messages: Sequence[Mapping[str, Any]]) -> tuple[str | None, list[dict[str, Any]], bool]:
    """``conversation``, and whether it had to begin with ``OPENING_TURN``."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "system":
            system.extend(block["text"] for block in text_blocks(message.get("content")))
            continue
        role, blocks = _turn(role, message)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    for turn in turns:
        if turn["role"] == "user":
            # Stable: the tool results first, in their order, then the rest in theirs.
            turn["content"].sort(key=lambda block: block["type"] != "tool_result")
    opened = not turns or turns[0]["role"] != "user"
    if opened:
        turns.insert(0, {"role": "user", "content": [{"type": "text", "text": OPENING_TURN}]})
    _strip_prefill(turns)
    return ("\n\n".join(system) if system else None), turns, opened


def _turn(role: object, message: Mapping[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    if role == "user":
        return "user", text_blocks(message.get("content"))
    if role == "assistant":
        calls = message.get("tool_calls") or []
        return "assistant", text_blocks(message.get("content")) + [tool_use_block(call) for call in calls]
    if role == "tool":
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": str(message.get("tool_call_id"))}
        text = "".join(block["text"] for block in text_blocks(message.get("content")))
        if text:
            result["content"] = text
        return "user", [result]
    raise _unsendable(f"a message has the role {role!r}, not system, user, assistant or tool")


def text_blocks(content: object) -> list[dict[str, Any]]:
    """A message's content (text, None, or Chat Completions text parts) as text blocks."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content.strip() else []
    if isinstance(content, list):
        blocks: list[dict[str, Any]] = []
        for part in content:
            if not (isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise _unsendable(f"a message has a content part of type {kind!r}; only text is translated")
            blocks.extend(text_blocks(part["text"]))
        return blocks
    raise _unsendable(f"a message's content is a {type(content).__name__}, not text")


def tool_use_block(call: Mapping[str, Any]) -> dict[str, Any]:
    """An assistant's Chat Completions tool call as a ``tool_use`` block."""
    function = call.get("function")
    if not isinstance(function, Mapping):
        raise _unsendable("an assistant's tool call has no function")
    return {
        "type": "tool_use",
        "id": str(call.get("id")),
        "name": str(function.get("name")),
        "input": tool_input(function.get("arguments")),
    }


def tool_input(arguments: object) -> dict[str, Any]:
    """Tool call arguments (JSON text) as the object the API takes."""
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        return {}
    if isinstance(arguments, Mapping):
        return dict(arguments)
    text = str(arguments)
    try:
        value = json.loads(text)
    except ValueError:
        return {"_raw": text}
    return value if isinstance(value, dict) else {"_raw": text}


def _strip_prefill(turns: list[dict[str, Any]]) -> None:
    last = turns[-1]
    if last["role"] != "assistant" or last["content"][-1]["type"] != "text":
        return
    text = last["content"][-1]["text"].rstrip()
    if text:
        last["content"][-1] = {"type": "text", "text": text}
        return
    del last["content"][-1]
    if not last["content"]:
        del turns[-1]


# --- tools ----------------------------------------------------------------------------------


def tool_definition(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A Chat Completions function tool as an Anthropic tool."""
    function = tool.get("function")
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise _unsendable("a tool has no function name")
    schema = dict(function.get("parameters") or {"properties": {}})
    schema.setdefault("type", "object")
    out: dict[str, Any] = {"name": function["name"]}
    if function.get("description"):
        out["description"] = str(function["description"])
    out["input_schema"] = schema
    return out


def tool_choice_of(choice: str | None) -> dict[str, Any]:
    """The executor's ``tool_choice`` (None: ``auto``) in Anthropic's terms."""
    if choice is None or choice == "auto":
        return {"type": "auto"}
    if choice == "required":
        return {"type": "any"}
    if choice == "none":
        return {"type": "none"}
    return {"type": "tool", "name": choice}


def tool_plan(
    tools: Sequence[Mapping[str, Any]], choice: str | None, response_format: ResponseFormat | None
) -> tuple[list[dict[str, Any]], dict[str, Any] | None, OutputTool | None]:
    """The tools, the ``tool_choice`` and the output tool of a call (see the module's docstring)."""
    offered = [tool_definition(tool) for tool in tools]
    schema = response_format.schema if response_format is not None else None
    if response_format is None or schema is None or choice not in (None, "auto", "none"):
        return offered, (tool_choice_of(choice) if offered else None), None
    name = _output_name(response_format.name, {tool["name"] for tool in offered})
    definition, wrapped = output_definition(name, schema)
    forced = {"type": "tool", "name": name}
    chosen = {"type": "any"} if offered and choice != "none" else forced
    return [*offered, definition], chosen, OutputTool(name, wrapped)


def _output_name(wanted: str, taken: set[str]) -> str:
    name = _TOOL_NAME.sub("_", wanted)[:64] or "output"
    while name in taken:
        name = name[:58] + "_reply"
    return name


def output_definition(name: str, schema: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """The output tool for ``schema``, and whether the schema had to be wrapped."""
    if schema.get("type") == "object":
        return {"name": name, "description": OUTPUT_DESCRIPTION, "input_schema": dict(schema)}, False
    inner = {key: value for key, value in schema.items() if key not in ("$defs", "definitions")}
    wrapper: dict[str, Any] = {"type": "object", "properties": {"value": inner}, "required": ["value"]}
    # References point at the root's definitions: they move to the new root.
    wrapper.update({key: schema[key] for key in ("$defs", "definitions") if key in schema})
    return {"name": name, "description": OUTPUT_DESCRIPTION, "input_schema": wrapper}, True


# --- replies --------------------------------------------------------------------------------


def malformed(why: str) -> ModelError:
    return ModelError(f"the model endpoint's reply is not a Messages API message: {why}", reason="malformed")


def read_message(data: object, output: OutputTool | None) -> ChatReply:
    """The ``ChatReply`` in a Messages API response body (decoded JSON)."""
    if not isinstance(data, dict):
        raise malformed(f"it is a JSON {type(data).__name__}, not an object")
    content = data.get("content")
    if not isinstance(content, list):
        raise malformed("it has no content list")
    texts: list[str] = []
    tools: list[tuple[str, str, dict[str, Any]]] = []
    for block in content:
        if not isinstance(block, dict):
            raise malformed("a content block is not an object")
        if block.get("type") == "text":
            texts.append(_string(block, "text", "a text block"))
        elif block.get("type") == "tool_use":
            tools.append(_tool_use(block))
    usage = data.get("usage")
    return assemble(
        texts,
        tools,
        output,
        usage=read_usage(usage) if isinstance(usage, dict) else None,
        stop_reason=data.get("stop_reason"),
        model=data.get("model"),
        response_id=data.get("id"),
    )


def _string(block: Mapping[str, Any], key: str, what: str) -> str:
    value = block.get(key)
    if not isinstance(value, str):
        raise malformed(f"{what} has no {key} text")
    return value


def _tool_use(block: Mapping[str, Any]) -> tuple[str, str, dict[str, Any]]:
    id_, name = _string(block, "id", "a tool_use block"), _string(block, "name", "a tool_use block")
    value = block.get("input")
    if not isinstance(value, dict):
        raise malformed(f"the input of tool_use {name!r} is not an object")
    return id_, name, value


def read_usage(usage: Mapping[str, Any]) -> Usage:
    """Anthropic's usage: input tokens are the uncached ones plus those written to and read from the cache."""
    parts = [_count(usage, key) for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")]
    counted = [part for part in parts if part is not None]
    return Usage(sum(counted) if counted else None, _count(usage, "output_tokens"))


def _count(usage: Mapping[str, Any], key: str) -> int | None:
    value = usage.get(key)
    # bool is an int to Python, never a token count.
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def assemble(
    texts: Sequence[str],
    tools: Sequence[tuple[str, str, dict[str, Any]]],
    output: OutputTool | None,
    *,
    usage: Usage | None,
    stop_reason: object,
    model: object,
    response_id: object,
) -> ChatReply:
    """The reply of a message's text and tool uses: the output tool's input,
    when it was called, is the content (the text beside it is not)."""
    content = "".join(texts)
    calls: list[ToolCallRequest] = []
    answered = False
    for id_, name, value in tools:
        if output is not None and name == output.name:
            content, answered = output_text(value, output), True
        else:
            calls.append(ToolCallRequest(id_, name, json.dumps(value, ensure_ascii=False)))
    finish = FINISH_REASONS.get(stop_reason, stop_reason) if isinstance(stop_reason, str) else None
    if answered and not calls and finish == "tool_calls":
        finish = "stop"  # the output tool is the answer, not a call to make
    return ChatReply(
        content=content,
        tool_calls=tuple(calls),
        usage=usage,
        model=model if isinstance(model, str) else None,
        finish_reason=finish,
        response_id=response_id if isinstance(response_id, str) else None,
    )


def output_text(value: Mapping[str, Any], output: OutputTool) -> str:
    """The output tool's input as the reply's JSON text. A wrapped reply
    without its ``value`` is given as written, for the parser to refuse."""
    if output.wrapped and "value" in value:
        return json.dumps(value["value"], ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False)


# --- streams --------------------------------------------------------------------------------


@dataclass
class _ToolBlock:
    id: str
    name: str
    parts: list[str] = field(default_factory=list)
    value: dict[str, Any] | None = None


class StreamAssembly:
    """A streamed message, event by event (the decoded ``data`` of each
    server-sent event): ``feed`` returns the text to pass on, ``reply`` the
    whole reply once the message has stopped.

    With an output tool, text is held back: the content is the tool's
    input, known at the end, which ``reply`` gives whole. Events of types it
    does not know are skipped, as the API's versioning policy asks.
    """

    def __init__(self, output: OutputTool | None) -> None:
        self.output = output
        self._texts: list[str] = []
        self._blocks: dict[int, _ToolBlock | None] = {}
        """Each content block by index: a tool use, or None for text and others."""
        self._usage: dict[str, Any] = {}
        self._message: dict[str, Any] = {}
        self._stop_reason: object = None
        self.stopped = False

    def feed(self, event: object) -> str | None:
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            raise malformed("a stream event is not an object with a type")
        kind = event["type"]
        if kind == "content_block_delta":
            return self._delta(event)
        if kind == "message_start":
            message = event.get("message")
            if not isinstance(message, dict):
                raise malformed("message_start has no message")
            self._message = message
            usage = message.get("usage")
            self._usage.update(usage if isinstance(usage, dict) else {})
        elif kind == "content_block_start":
            return self._start(event)
        elif kind == "content_block_stop":
            self._stop(event)
        elif kind == "message_delta":
            delta = event.get("delta")
            if isinstance(delta, dict) and "stop_reason" in delta:
                self._stop_reason = delta["stop_reason"]
            usage = event.get("usage")
            self._usage.update(usage if isinstance(usage, dict) else {})
        elif kind == "message_stop":
            self.stopped = True
        return None

    def _index(self, event: Mapping[str, Any]) -> int:
        index = event.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            raise malformed(f"{event['type']} has no index")
        return index

    def _start(self, event: Mapping[str, Any]) -> str | None:
        block = event.get("content_block")
        if not isinstance(block, dict):
            raise malformed("content_block_start has no content_block")
        index = self._index(event)
        if block.get("type") == "tool_use":
            name = _string(block, "name", "a tool_use block")
            self._blocks[index] = _ToolBlock(_string(block, "id", "a tool_use block"), name)
            return None
        self._blocks[index] = None
        return self._text(block.get("text")) if block.get("type") == "text" else None

    def _delta(self, event: Mapping[str, Any]) -> str | None:
        index = self._index(event)
        delta = event.get("delta")
        if index not in self._blocks or not isinstance(delta, dict):
            raise malformed(f"content_block_delta {index} has no delta or no block started")
        block = self._blocks[index]
        if delta.get("type") == "text_delta":
            return self._text(_string(delta, "text", "a text_delta"))
        if delta.get("type") == "input_json_delta":
            if block is None:
                raise malformed(f"input_json_delta {index} is not in a tool_use block")
            block.parts.append(_string(delta, "partial_json", "an input_json_delta"))
        return None

    def _text(self, text: object) -> str | None:
        if not isinstance(text, str) or not text:
            return None
        self._texts.append(text)
        return text if self.output is None else None

    def _stop(self, event: Mapping[str, Any]) -> None:
        block = self._blocks.get(self._index(event))
        if block is None:
            return
        written = "".join(block.parts)
        try:
            value = json.loads(written) if written.strip() else {}
        except ValueError as exc:
            raise malformed(f"the input of tool_use {block.name!r} is not JSON") from exc
        if not isinstance(value, dict):
            raise malformed(f"the input of tool_use {block.name!r} is not an object")
        block.value = value

    def reply(self) -> ChatReply:
        """The whole reply; a ``connection`` error if the message never stopped."""
        if not self.stopped:
            raise ModelError("the model endpoint's stream ended early, before message_stop", reason="connection")
        tools = []
        for block in self._blocks.values():
            if block is not None:
                if block.value is None:
                    raise malformed(f"tool_use {block.name!r} was never stopped")
                tools.append((block.id, block.name, block.value))
        return assemble(
            self._texts,
            tools,
            self.output,
            usage=read_usage(self._usage) if self._usage else None,
            stop_reason=self._stop_reason,
            model=self._message.get("model"),
            response_id=self._message.get("id"),
        )
