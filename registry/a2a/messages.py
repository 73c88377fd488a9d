"""What an incoming A2A message may say, checked before anything changes.

A message that starts a task becomes the service's task request:

- its text parts, joined by newlines, are the task's ``input`` (the free
  text, which fills an agent's one required text input);
- one data part, an object, holds the agent's ``inputs``;
- file parts (``raw`` bytes) are uploaded to the task as its files, under
  the Agent Protocol's limits: a name (``filename``; ``docs/a.md`` is the
  file ``a.md`` under ``docs``, and a path that leaves the task's space,
  ``../../etc/passwd``, is refused), a media type, at most
  ``Limits.file_bytes`` each. A part by ``url`` is refused: the service
  fetches nothing a message points at;
- ``metadata`` names the agent (``agent``, ``usecase/name``) and its
  ``release`` on the service-wide endpoint; a per-agent endpoint names the
  agent itself. Other keys are refused, with a "did you mean".

A message to a task that waits for a decision carries it as a data part
``{"decision": "approve" | "reject" | "edit", "reason": ..., "arguments":
{...}}``; its text, if any, is the reason when the part gives none.

Every refusal is one ``InvalidParamsError`` naming the part and field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from a2a.types import Message, Part
from a2a.utils.errors import InvalidParamsError

from registry.a2a.mapping import plain, struct_plain
from registry.errors import InvalidRequest
from registry.models import close_matches, did_you_mean, shorten
from registry.protocol.records import Upload
from registry.protocol.requests import DECISIONS, STEP_KEYS
from registry.protocol.requests import content_type as checked_content_type
from registry.protocol.requests import file_name as checked_file_name
from registry.protocol.requests import relative_path as checked_relative_path

METADATA_KEYS = ("agent", "release")
MAX_PARTS = 100


@dataclass(frozen=True)
class Limits:
    """How much a message may carry, once parsed."""

    text_bytes: int
    """The text and data parts, together (UTF-8 bytes; data as protobuf counts it)."""
    file_bytes: int
    """Each file."""
    parts: int = MAX_PARTS


@dataclass(frozen=True)
class TaskRequest:
    """A message that starts a task, read."""

    agent: str
    release: str | None
    text: str | None
    inputs: dict[str, Any] | None
    uploads: tuple[Upload, ...]
    """The file parts, checked: stored with the task, before it can start."""

    def body(self) -> dict[str, Any]:
        """The service's task request (``TaskService.create_task``): every A2A task runs in the background."""
        extra: dict[str, Any] = {"agent": self.agent, "mode": "background"}
        if self.release is not None:
            extra["release"] = self.release
        if self.inputs is not None:
            extra["inputs"] = self.inputs
        return {"input": self.text, "additional_input": extra}


@dataclass(frozen=True)
class Decision:
    """A decision on a pending action, read (the service checks it against the action)."""

    decision: str
    reason: str | None = None
    arguments: dict[str, Any] | None = None

    def as_mapping(self) -> dict[str, Any]:
        found: dict[str, Any] = {"decision": self.decision}
        if self.reason is not None:
            found["reason"] = self.reason
        if self.arguments is not None:
            found["arguments"] = self.arguments
        return found


def task_request(message: Message, *, endpoint_agent: str | None, limits: Limits) -> TaskRequest:
    """The task ``message`` asks for; ``endpoint_agent`` is the agent a per-agent endpoint runs."""
    check_parts(message.parts, limits)
    metadata = _metadata(message)
    agent = _agent(metadata.get("agent"), endpoint_agent)
    release = metadata.get("release")
    if release is not None and (not isinstance(release, str) or not release):
        raise invalid("metadata.release must be a version, a range or a channel", "message.metadata.release")
    data = [(index, part) for index, part in enumerate(message.parts) if part.WhichOneof("content") == "data"]
    if len(data) > 1:
        raise invalid("a message starting a task holds at most one data part: the agent's inputs", "message.parts")
    inputs = None
    if data:
        index, part = data[0]
        inputs = plain(part.data)
        if not isinstance(inputs, dict):
            raise invalid("the data part holds the agent's inputs: a JSON object", f"message.parts[{index}].data")
    return TaskRequest(agent, release, _text(message.parts), inputs, _uploads(message.parts, limits))


def decision(message: Message, *, limits: Limits) -> Decision:
    """The decision ``message`` carries on a task's pending action."""
    check_parts(message.parts, limits)
    _metadata(message)
    data = [(index, part) for index, part in enumerate(message.parts) if part.WhichOneof("content") == "data"]
    others = [index for index, part in enumerate(message.parts) if part.WhichOneof("content") not in ("data", "text")]
    if len(data) != 1 or others:
        raise invalid(
            'a message to a task that waits for a decision holds one data part, {"decision": "approve" | "reject"'
            ' | "edit", "reason": "...", "arguments": {...}}, and text parts at most (the reason)',
            "message.parts",
        )
    index, part = data[0]
    given = plain(part.data)
    field = f"message.parts[{index}].data"
    if not isinstance(given, dict):
        raise invalid("the decision is a JSON object", field)
    refuse_unknown(given, STEP_KEYS, what="a decision", field=field)
    choice = given.get("decision")
    if choice not in DECISIONS:
        raise invalid("decision must be approve, reject or edit", field + ".decision")
    reason = given.get("reason", _text(message.parts))
    if reason is not None and not isinstance(reason, str):
        raise invalid("reason must be text", field + ".reason")
    arguments = given.get("arguments")
    if arguments is not None and not isinstance(arguments, dict):
        raise invalid("arguments must be an object: the tool's arguments", field + ".arguments")
    if choice == "edit" and arguments is None:
        raise invalid("an edit needs arguments: the tool's arguments as the user changed them", field + ".arguments")
    return Decision(str(choice), reason, arguments)


def check_parts(parts: Sequence[Part], limits: Limits) -> None:
    """Refuse an empty message, too many parts, a part of no known kind, a
    part by URL, and more text and data than ``limits`` allow."""
    if not parts:
        raise invalid("a message needs at least one part", "message.parts")
    if len(parts) > limits.parts:
        raise invalid(f"a message holds at most {limits.parts} parts, not {len(parts)}", "message.parts")
    carried = 0
    for index, part in enumerate(parts):
        kind = part.WhichOneof("content")
        if kind is None:
            raise invalid(
                f"part {index} holds none of text, raw, url or data: a part of a kind this service does not know",
                f"message.parts[{index}]",
            )
        if kind == "url":
            raise invalid(
                "a file part by url is refused: the service fetches nothing a message points at; send its bytes (raw)",
                f"message.parts[{index}].url",
            )
        if kind == "text":
            carried += len(part.text.encode("utf-8"))
        elif kind == "data":
            carried += part.data.ByteSize()
    if carried > limits.text_bytes:
        raise invalid(
            f"the text and data parts hold {carried} bytes; a message may carry at most {limits.text_bytes}",
            "message.parts",
        )


def refuse_unknown(given: dict[str, Any], allowed: Sequence[str], *, what: str, field: str) -> None:
    """``InvalidParamsError`` for the first key of ``given`` not in ``allowed``, with a "did you mean"."""
    for key in given:
        if key in allowed:
            continue
        shown = shorten(key, 80)
        # Above difflib's default (0.6), as for the Agent Protocol's keys: no far-fetched guesses.
        suggestion = did_you_mean(close_matches(key, allowed, limit=1, cutoff=0.75))
        detail = f"{what} has no member {shown!r}; " + (suggestion or f"it takes {', '.join(allowed)}")
        raise invalid(detail, f"{field}.{shown}")


def invalid(message: str, field: str) -> InvalidParamsError:
    return InvalidParamsError(message=message, data={"errors": [{"field": field, "message": message}]})


def _metadata(message: Message) -> dict[str, Any]:
    metadata = struct_plain(message.metadata)
    refuse_unknown(metadata, METADATA_KEYS, what="the message's metadata", field="message.metadata")
    return metadata


def _agent(named: Any, endpoint_agent: str | None) -> str:
    if named is not None and not isinstance(named, str):
        raise invalid("metadata.agent names the agent to run, as usecase/name", "message.metadata.agent")
    if endpoint_agent is None:
        if not named:
            raise invalid(
                'name the agent to run in the message\'s metadata, {"agent": "usecase/name"}, or send the'
                " message to the agent's own endpoint (its card says where)",
                "message.metadata.agent",
            )
        return named
    if named is not None and named != endpoint_agent:
        raise invalid(
            f"this endpoint runs {endpoint_agent}, not {shorten(named, 80)}: leave metadata.agent out, or send"
            " the message to the service-wide endpoint",
            "message.metadata.agent",
        )
    return endpoint_agent


def _text(parts: Sequence[Part]) -> str | None:
    texts = [part.text for part in parts if part.WhichOneof("content") == "text"]
    return "\n".join(texts) if texts else None


def _uploads(parts: Sequence[Part], limits: Limits) -> tuple[Upload, ...]:
    uploads = []
    for index, part in enumerate(parts):
        if part.WhichOneof("content") != "raw":
            continue
        field = f"message.parts[{index}]"
        if len(part.raw) > limits.file_bytes:
            raise invalid(f"a file may hold at most {limits.file_bytes} bytes, not {len(part.raw)}", field + ".raw")
        given = part.filename or f"part-{index}"
        directory, _, base = given.replace("\\", "/").rpartition("/")
        try:
            # The Agent Protocol's own checks, as for its uploads (a name, and
            # a relative path that stays among the task's files).
            name = checked_file_name(base)
            relative = checked_relative_path(directory or None)
        except InvalidRequest as exc:
            raise invalid(f"filename {shorten(given, 80)!r}: {exc.detail}", field + ".filename") from exc
        uploads.append(Upload(name, relative, checked_content_type(part.media_type or None, name), part.raw))
    return tuple(uploads)
