"""Model exchanges as data: the key of a request, an exchange (one request
and the replies it got), and the file of exchanges that
``RecordingChatModel`` writes and ``ReplayChatModel`` reads
(``registry.providers.recording``; the file is read by
``registry.providers.exchangefile``).

The key of a request
--------------------
``request_key`` names what the model receives, so that the same request
has the same key in every run and every process: the SHA-256, in hex, of
the canonical JSON (keys sorted, no spaces, UTF-8, numbers as Python's
``json`` writes them) of ``{"key": 1, "request": PARTS}``, where ``PARTS``
(``keyed_request``) holds

- ``model``: the model name in the request (as the definition or the
  operator's mapping gives it; a route of the models file may send another);
- ``provider``: the definition's ``model.provider``, when it names one
  (the same name at two providers is two models);
- ``messages``: every message, whole;
- ``tools``: the function tools offered, when there are any;
- ``params``: the definition's ``model.params`` with the executor's ``stop``, when any;
- ``tool_choice``, when there is one;
- ``response_format``: its ``name`` and ``schema`` (when it has one), when asked for.

Not in it: the timeout (how long we wait, not what is asked) and the
agent (a label of ours that the model never sees). ``1`` is the version
of this definition of the key: a change to it changes every key.

The file
--------
``dump_exchanges`` writes YAML for a reviewer to read in a merge request::

    version: 1
    exchanges:
    - case: refund-simple              # the exchange_label of the calls; absent outside evals
      agent: support/triage            # who asked (for readers: not part of the key)
      request: {model: ..., provider: ..., messages: [...], tools: [...], params: {...}, ...}
      replies:                         # in the order the calls were made
      - content: ...
        tool_calls: [{id: ..., name: ..., arguments: '{"json": "text"}'}]
        finish_reason: stop
        model: gpt-4o-mini-2024-07-18
        usage: {input_tokens: 10, output_tokens: 5}
        served_by: {provider: openai, kind: openai, model: gpt-4o-mini}
      - error: {reason: status, message: ..., http_status: 503}   # a call that failed

Texts of several lines are block strings (``|``); keys come in a fixed
order (messages ``role`` first, then their other keys sorted; every other
mapping of the request sorted); exchanges are sorted by case, agent,
number of messages and key, so that recording the same run again writes
the same file, whatever order concurrent cases made their calls in. The
key is not written: it is computed from the request, so that a reviewer
may edit a reply, or a request, by hand.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import yaml

from registry.errors import ConfigurationError
from registry.format.safeyaml import YamlLimits
from registry.providers.chat import ChatReply, ChatRequest, ResponseFormat

KEY_VERSION = 1
FILE_VERSION = 1
"""The version of the file's format that this code writes and reads (``version:``)."""

LIMITS = YamlLimits(max_bytes=16 * 1024 * 1024, max_events=2_000_000, max_nodes=1_000_000)
"""What a replay file may hold: the reader refuses a larger one before
parsing it, and the recorder refuses to write one it could not read back."""

_HEADER = (
    "# Model exchanges recorded by prompt-registry: each request the model received, and its replies.\n"
    '# See "Recording and replaying model exchanges" in docs/executor.md. Written by the recorder;\n'
    "# a reply may be edited by hand, and a request edited no longer matches the run that made it.\n"
)


@dataclass(frozen=True)
class RecordedError:
    """A call that got no usable reply when it was recorded: replayed as
    the same ``ModelError`` (its ``reason``, its message)."""

    reason: str
    message: str
    http_status: int | None = None


RecordedReply = ChatReply | RecordedError


@dataclass(frozen=True)
class Exchange:
    """One request of one case, and the replies it got, in the order asked."""

    case: str | None
    """The ``exchange_label`` the calls were made under; None outside evals."""
    agent: str | None
    """The agent that asked (``usecase/name``), for readers and messages."""
    request: ChatRequest
    """The request's keyed parts (``keyed_request``); no agent, no timeout."""
    replies: tuple[RecordedReply, ...]
    key: str
    """``request_key(request)``."""
    where: str = ""
    """Where the exchange is written (``replay.yml:12:5``), once read from a file."""


def keyed_request(request: ChatRequest) -> dict[str, Any]:
    """The parts of ``request`` its key covers, as plain JSON values (see the module's docstring)."""
    parts: dict[str, Any] = {"model": request.model}
    if request.provider is not None:
        parts["provider"] = request.provider
    parts["messages"] = [_plain(message) for message in request.messages]
    if request.tools:
        parts["tools"] = [_plain(tool) for tool in request.tools]
    if request.params:
        parts["params"] = _plain(request.params)
    if request.tool_choice is not None:
        parts["tool_choice"] = request.tool_choice
    if request.response_format is not None:
        response_format: dict[str, Any] = {"name": request.response_format.name}
        if request.response_format.schema is not None:
            response_format["schema"] = _plain(request.response_format.schema)
        parts["response_format"] = response_format
    return parts


def request_key(request: ChatRequest) -> str:
    """The key of ``request``: 64 hex digits, the same in every run and process."""
    canonical = json.dumps(
        {"key": KEY_VERSION, "request": keyed_request(request)},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def request_of_parts(parts: Mapping[str, Any]) -> ChatRequest:
    """The request whose keyed parts are ``parts`` (checked already): ``keyed_request``'s inverse."""
    response_format = parts.get("response_format")
    return ChatRequest(
        model=parts["model"],
        messages=tuple(parts["messages"]),
        tools=tuple(parts.get("tools") or ()),
        params=dict(parts.get("params") or {}),
        provider=parts.get("provider"),
        tool_choice=parts.get("tool_choice"),
        response_format=(
            ResponseFormat(schema=response_format.get("schema"), name=response_format["name"])
            if response_format is not None
            else None
        ),
    )


def recorded_reply(reply: ChatReply) -> ChatReply:
    """What a recording keeps of ``reply``: not its response id nor its
    origin, which change from run to run and would only add noise to a diff."""
    return replace(reply, response_id=None, origin=None)


def reply_data(reply: RecordedReply) -> dict[str, Any]:
    """A reply as the file writes it (a cache entry keeps it so too)."""
    if isinstance(reply, RecordedError):
        error: dict[str, Any] = {"reason": reply.reason, "message": reply.message}
        if reply.http_status is not None:
            error["http_status"] = reply.http_status
        return {"error": error}
    out: dict[str, Any] = {"content": reply.content}
    if reply.tool_calls:
        out["tool_calls"] = [call.as_dict() for call in reply.tool_calls]
    if reply.finish_reason is not None:
        out["finish_reason"] = reply.finish_reason
    if reply.model is not None:
        out["model"] = reply.model
    if reply.usage is not None:
        out["usage"] = _OnOneLine(reply.usage.as_dict())
    if reply.served_by is not None:
        out["served_by"] = _OnOneLine(reply.served_by.as_dict())
    return out


def sorted_exchanges(exchanges: Iterable[Exchange]) -> list[Exchange]:
    """``exchanges`` in the file's order: by case (none first), agent, number of messages, key."""
    return sorted(
        exchanges,
        key=lambda e: (e.case is not None, e.case or "", e.agent or "", len(e.request.messages), e.key),
    )


def exchanges_data(exchanges: Iterable[Exchange]) -> dict[str, Any]:
    """The file's content as plain values, in its order."""
    listed = []
    for exchange in sorted_exchanges(exchanges):
        item: dict[str, Any] = {}
        if exchange.case is not None:
            item["case"] = exchange.case
        if exchange.agent is not None:
            item["agent"] = exchange.agent
        item["request"] = _readable_request(keyed_request(exchange.request))
        item["replies"] = [reply_data(reply) for reply in exchange.replies]
        listed.append(item)
    return {"version": FILE_VERSION, "exchanges": listed}


def dump_exchanges(exchanges: Iterable[Exchange]) -> bytes:
    """The file of ``exchanges``: UTF-8 YAML, the same bytes for the same
    exchanges. Raises ``ConfigurationError`` when the file would be more
    than a replay reads (``LIMITS``): a recording no replay can use."""
    data = exchanges_data(exchanges)
    text = yaml.dump(
        data, Dumper=_ReadableDumper, sort_keys=False, allow_unicode=True, default_flow_style=False, width=100
    )
    payload = (_HEADER + text).encode("utf-8")
    problem = _size_problem(data, len(payload))
    if problem is not None:
        raise ConfigurationError(f"the recording cannot be replayed: {problem}; record fewer cases per file")
    return payload


def _size_problem(data: Any, size: int) -> str | None:
    """Why a file of ``size`` bytes holding ``data`` could not be read back
    within ``LIMITS``, or None when it can."""
    if size > LIMITS.max_bytes:
        return f"the file would be {size} bytes, over the {LIMITS.max_bytes} bytes a replay reads"
    nodes, collections, depth = _measure(data)
    # What safeyaml counts: a node per value and per key; an event per node,
    # one more per collection (its end), and four for the stream and document.
    if nodes > LIMITS.max_nodes or nodes + collections + 4 > LIMITS.max_events:
        return f"the file would hold {nodes} YAML values, over the {LIMITS.max_nodes} a replay reads"
    if depth > LIMITS.max_depth:
        return f"the file would nest {depth} levels deep, over the {LIMITS.max_depth} a replay reads"
    return None


def _measure(value: Any) -> tuple[int, int, int]:
    """The nodes, collections and depth of a plain value, as YAML would write it."""
    if isinstance(value, dict):
        measured = [_measure(child) for child in value.values()]
        nodes = 1 + sum(1 + m[0] for m in measured)
    elif isinstance(value, list):
        measured = [_measure(child) for child in value]
        nodes = 1 + sum(m[0] for m in measured)
    else:
        return 1, 0, 0
    collections = 1 + sum(m[1] for m in measured)
    return nodes, collections, 1 + max((m[2] for m in measured), default=0)


def _plain(value: Any) -> Any:
    """``value`` as plain JSON values: mappings as dicts (string keys), sequences as lists."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _readable_request(parts: dict[str, Any]) -> dict[str, Any]:
    """``parts`` in the file's key order: messages ``role`` first, every other mapping sorted."""
    out = dict(parts)
    out["messages"] = [
        {**({"role": message["role"]} if "role" in message else {}), **_sorted(message)}
        for message in parts["messages"]
    ]
    for name in ("tools", "params", "response_format"):
        if name in out:
            out[name] = _sorted(out[name])
    return out


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _sorted(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted(item) for item in value]
    return value


# Characters YAML's reader turns into "\n" (or keeps as breaks) inside a
# block string: a text holding one is written quoted, with escapes, so
# that it reads back exactly.
_NOT_IN_BLOCKS = frozenset("\r\x85\u2028\u2029")
_BaseDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _ReadableDumper(_BaseDumper):  # type: ignore[misc, valid-type]  # libyaml's or Python's, known at run time
    """The safe dumper (libyaml's emitter when there is one: fifteen times
    faster than PyYAML's own, whose output is the same but for rare
    details): texts of several lines as block strings, and no anchors (a
    reader sees every value where it is)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


class _OnOneLine(dict[str, Any]):
    """A small mapping the file writes on one line: ``usage: {input_tokens: 10, output_tokens: 5}``."""


def _represent_on_one_line(dumper: yaml.SafeDumper, mapping: _OnOneLine) -> yaml.MappingNode:
    return dumper.represent_mapping("tag:yaml.org,2002:map", mapping, flow_style=True)


def _represent_text(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = None
    if _NOT_IN_BLOCKS.intersection(text):
        style = '"'  # escaped: quoted plainly, the reader would take them for line breaks too
    elif "\n" in text:
        style = "|"
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_ReadableDumper.add_representer(str, _represent_text)
_ReadableDumper.add_representer(_OnOneLine, _represent_on_one_line)
