"""Reading a file of model exchanges (``registry.providers.exchanges``
describes it), as a replay reads it: bounded before it is parsed, checked
whole, and every problem reported with its file, line and column
(``ConfigurationError.errors``), unknown keys with a "did you mean".
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from registry.errors import ConfigurationError, summarize
from registry.format.safeyaml import JsonPath, YamlDocument, YamlError, kind_of, parse_yaml
from registry.models import Issue, close_matches, did_you_mean, json_pointer, location, shorten
from registry.providers.chat import ChatReply, ServedBy, ToolCallRequest, Usage
from registry.providers.exchanges import (
    FILE_VERSION,
    LIMITS,
    Exchange,
    RecordedError,
    RecordedReply,
    request_key,
    request_of_parts,
)

_FILE_KEYS = ("version", "exchanges")
_EXCHANGE_KEYS = ("case", "agent", "request", "replies")
_REQUEST_KEYS = ("model", "provider", "messages", "tools", "params", "tool_choice", "response_format")
_FORMAT_KEYS = ("name", "schema")
_REPLY_KEYS = ("content", "tool_calls", "finish_reason", "model", "usage", "served_by", "error")
_ERROR_KEYS = ("reason", "message", "http_status")
_CALL_KEYS = ("id", "name", "arguments")
_USAGE_KEYS = ("input_tokens", "output_tokens")
_SERVED_KEYS = ("provider", "kind", "model", "route")


def load_exchanges(path: str | Path) -> list[Exchange]:
    """The exchanges of the file at ``path``. Raises ``ConfigurationError``
    naming every problem, each with its line (``errors``), the first in its message."""
    name = str(path)
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > LIMITS.max_bytes:
                raise ConfigurationError(
                    f"{name}: the replay file is {size} bytes; the limit is {LIMITS.max_bytes} bytes"
                    " (record fewer cases per file)"
                )
            # Bounded even if the file grows while it is read.
            data = handle.read(LIMITS.max_bytes + 1)
    except FileNotFoundError as exc:
        raise ConfigurationError(f"replay file {name} does not exist") from exc
    except OSError as exc:
        raise ConfigurationError(f"replay file {name} cannot be read: {exc.strerror or exc}") from exc
    try:
        document = parse_yaml(data, limits=LIMITS)
    except YamlError as exc:
        issues = [replace(issue, file=name) for issue in exc.issues]
        raise ConfigurationError(summarize(issues), errors=issues) from exc
    return _Loader(name, document).exchanges()


class _Loader:
    """Checks a file of exchanges, collecting every problem with where it is."""

    def __init__(self, source: str, document: YamlDocument) -> None:
        self._source = source
        self._document = document
        self._issues: list[Issue] = []

    def exchanges(self) -> list[Exchange]:
        value = self._document.value
        if not isinstance(value, dict):
            self._problem(f"a replay file is a mapping with `version:` and `exchanges:`, not {kind_of(value)}", ())
            raise self._error()
        self._check_keys(value, (), _FILE_KEYS)
        self._check_version(value)
        if self._issues:
            # Another version's exchanges are not worth checking against this one's rules.
            raise self._error()
        listed = value.get("exchanges")
        if not isinstance(listed, list):
            self._problem(f"`exchanges:` must be a list, not {kind_of(listed)}", ("exchanges",) if listed else ())
            raise self._error()
        exchanges: list[Exchange] = []
        seen: dict[tuple[str | None, str], str] = {}
        for index, item in enumerate(listed):
            exchange = self._exchange(item, ("exchanges", index))
            if exchange is None:
                continue
            first = seen.setdefault((exchange.case, exchange.key), exchange.where)
            if first != exchange.where:
                self._problem(
                    f"the same request of the same case is recorded at {first} already;"
                    " list both replies under one `replies:`",
                    ("exchanges", index),
                )
                continue
            exchanges.append(exchange)
        if self._issues:
            raise self._error()
        return exchanges

    def _check_version(self, value: Mapping[str, Any]) -> None:
        if "version" not in value:
            self._problem(f"a replay file needs `version: {FILE_VERSION}`", ())
            return
        version = value["version"]
        if version != FILE_VERSION or isinstance(version, bool):
            self._problem(
                f"replay file version {shorten(version, 20)} is not one this prompt-registry reads"
                f" (it reads version {FILE_VERSION}); record the file again with this version",
                ("version",),
            )

    # --- one exchange -------------------------------------------------------------------------

    def _exchange(self, value: Any, path: JsonPath) -> Exchange | None:
        if not isinstance(value, dict):
            self._problem(f"an exchange is a mapping with `request:` and `replies:`, not {kind_of(value)}", path)
            return None
        before = len(self._issues)
        self._check_keys(value, path, _EXCHANGE_KEYS)
        case = self._optional_text(value, path, "case")
        agent = self._optional_text(value, path, "agent")
        parts = self._request(value.get("request"), path)
        replies = self._replies(value.get("replies"), path)
        if len(self._issues) > before or parts is None:
            return None
        request = request_of_parts(parts)
        return Exchange(case, agent, request, replies, request_key(request), self._where(path))

    def _request(self, value: Any, parent: JsonPath) -> dict[str, Any] | None:
        path = parent + ("request",)
        if not isinstance(value, dict):
            what = "nothing" if value is None else kind_of(value)
            self._problem(f"an exchange needs a `request:` mapping, not {what}", parent if value is None else path)
            return None
        before = len(self._issues)
        self._check_keys(value, path, _REQUEST_KEYS)
        self._required_text(value, path, "model")
        self._optional_text(value, path, "provider")
        self._optional_text(value, path, "tool_choice")
        self._mappings(value, path, "messages", required=True)
        self._mappings(value, path, "tools", required=False)
        if "params" in value and not isinstance(value["params"], dict):
            self._problem(f"params must be a mapping, not {kind_of(value['params'])}", path + ("params",))
        if "response_format" in value:
            self._response_format(value["response_format"], path + ("response_format",))
        return value if len(self._issues) == before else None

    def _response_format(self, value: Any, path: JsonPath) -> None:
        if not isinstance(value, dict):
            self._problem(f"response_format must be a mapping with a `name:`, not {kind_of(value)}", path)
            return
        self._check_keys(value, path, _FORMAT_KEYS)
        self._required_text(value, path, "name")
        if "schema" in value and not isinstance(value["schema"], dict):
            found = kind_of(value["schema"])
            self._problem(f"response_format.schema must be a mapping, not {found}", path + ("schema",))

    def _mappings(self, value: Mapping[str, Any], path: JsonPath, key: str, *, required: bool) -> None:
        if key not in value:
            if required:
                self._problem(f"a request needs `{key}:`, a list", path)
            return
        found = value[key]
        if not isinstance(found, list):
            self._problem(f"{key} must be a list of mappings, not {kind_of(found)}", path + (key,))
            return
        for index, item in enumerate(found):
            if not isinstance(item, dict):
                self._problem(f"each of {key} must be a mapping, not {kind_of(item)}", path + (key, index))

    # --- replies ------------------------------------------------------------------------------

    def _replies(self, value: Any, parent: JsonPath) -> tuple[RecordedReply, ...]:
        path = parent + ("replies",)
        if not isinstance(value, list) or not value:
            what = "an empty list" if value == [] else kind_of(value)
            self._problem(f"an exchange needs `replies:`, a list of one reply or more, not {what}", parent)
            return ()
        replies = [self._reply(item, path + (index,)) for index, item in enumerate(value)]
        return tuple(reply for reply in replies if reply is not None)

    def _reply(self, value: Any, path: JsonPath) -> RecordedReply | None:
        if not isinstance(value, dict):
            self._problem(f"a reply is a mapping with `content:` (or `error:`), not {kind_of(value)}", path)
            return None
        before = len(self._issues)
        self._check_keys(value, path, _REPLY_KEYS)
        if "error" in value:
            return self._error_reply(value, path)
        content = value.get("content", "")
        if not isinstance(content, str):
            self._problem(f"content must be a string, not {kind_of(content)}", path + ("content",))
        calls = self._tool_calls(value.get("tool_calls", []), path + ("tool_calls",))
        finish = self._optional_text(value, path, "finish_reason")
        model = self._optional_text(value, path, "model")
        usage = self._usage(value.get("usage"), path + ("usage",))
        served_by = self._served_by(value.get("served_by"), path + ("served_by",))
        if len(self._issues) > before:
            return None
        return ChatReply(content, calls, usage=usage, model=model, finish_reason=finish, served_by=served_by)

    def _error_reply(self, value: Mapping[str, Any], path: JsonPath) -> RecordedError | None:
        others = [key for key in value if key != "error"]
        if others:
            self._problem(f"a reply with `error:` has nothing else, not {others[0]!r}", path, key=others[0])
        error, at = value["error"], path + ("error",)
        if not isinstance(error, dict):
            self._problem(f"error must be a mapping with `reason:` and `message:`, not {kind_of(error)}", at)
            return None
        self._check_keys(error, at, _ERROR_KEYS)
        reason = self._required_text(error, at, "reason")
        message = self._required_text(error, at, "message")
        status = error.get("http_status")
        if status is not None and (isinstance(status, bool) or not isinstance(status, int)):
            self._problem(f"http_status must be a number, not {kind_of(status)}", at + ("http_status",))
            return None
        if reason is None or message is None or others:
            return None
        return RecordedError(reason, message, status)

    def _tool_calls(self, value: Any, path: JsonPath) -> tuple[ToolCallRequest, ...]:
        if not isinstance(value, list):
            self._problem(f"tool_calls must be a list, not {kind_of(value)}", path)
            return ()
        calls = []
        for index, item in enumerate(value):
            at = path + (index,)
            if not isinstance(item, dict):
                self._problem(f"a tool call is a mapping with id, name and arguments, not {kind_of(item)}", at)
                continue
            self._check_keys(item, at, _CALL_KEYS)
            found = [
                self._required_text(item, at, key, hint=_ARGUMENTS_HINT if key == "arguments" else "")
                for key in _CALL_KEYS
            ]
            if None not in found:
                calls.append(ToolCallRequest(*(str(text) for text in found)))
        return tuple(calls)

    def _usage(self, value: Any, path: JsonPath) -> Usage | None:
        if value is None:
            return None
        if not isinstance(value, dict):
            self._problem(f"usage must be a mapping of token counts, not {kind_of(value)}", path)
            return None
        self._check_keys(value, path, _USAGE_KEYS)
        counts = {}
        for key in _USAGE_KEYS:
            count = value.get(key)
            if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
                self._problem(f"{key} must be a count of tokens, not {shorten(count, 20)}", path + (key,))
            counts[key] = count
        return Usage(counts["input_tokens"], counts["output_tokens"])

    def _served_by(self, value: Any, path: JsonPath) -> ServedBy | None:
        if value is None:
            return None
        if not isinstance(value, dict):
            self._problem(f"served_by must be a mapping, not {kind_of(value)}", path)
            return None
        self._check_keys(value, path, _SERVED_KEYS)
        found = [self._required_text(value, path, key) for key in _SERVED_KEYS[:3]]
        route = self._optional_text(value, path, "route")
        if None in found:
            return None
        return ServedBy(str(found[0]), str(found[1]), str(found[2]), route)

    # --- values and problems ------------------------------------------------------------------

    def _required_text(self, value: Mapping[str, Any], path: JsonPath, key: str, *, hint: str = "") -> str | None:
        if key not in value:
            self._problem(f"`{key}:` is missing", path)
            return None
        found = value[key]
        if not isinstance(found, str):
            self._problem(f"{key} must be a string, not {kind_of(found)}{hint}", path + (key,))
            return None
        return found

    def _optional_text(self, value: Mapping[str, Any], path: JsonPath, key: str) -> str | None:
        found = value.get(key)
        if found is not None and not isinstance(found, str):
            self._problem(f"{key} must be a string, not {kind_of(found)}", path + (key,))
            return None
        return found

    def _check_keys(self, value: Mapping[str, Any], path: JsonPath, known: Sequence[str]) -> None:
        for key in value:
            if key not in known:
                hint = did_you_mean(close_matches(str(key), known)) or f"the keys are {', '.join(known)}"
                self._problem(f"unknown key {shorten(key, 60)!r}; {hint}", path, key=key)

    def _problem(self, message: str, path: JsonPath, *, key: str | None = None) -> None:
        """Record a problem at ``path``, or at its ``key`` (the line of the key itself)."""
        at = path if key is None else path + (key,)
        position = self._document.position(at, key=key is not None)
        self._issues.append(
            Issue(
                message=message,
                path=json_pointer(path),
                file=self._source,
                line=position.line if position else None,
                column=position.column if position else None,
                rule="replay-file",
            )
        )

    def _where(self, path: JsonPath) -> str:
        position = self._document.position(path)
        return location(self._source, position.line if position else None, position.column if position else None)

    def _error(self) -> ConfigurationError:
        issues = sorted(self._issues, key=lambda issue: (issue.line or 0, issue.column or 0))
        return ConfigurationError(summarize(issues), errors=issues)


_ARGUMENTS_HINT = " (the JSON text the model wrote, quoted as a string)"
