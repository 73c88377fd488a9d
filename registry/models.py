"""Plain data shared by the service, the HTTP API and the client.

Nothing here does IO; every class is a frozen dataclass with an ``as_dict``
that gives the JSON shape the API uses.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any


def encode_json(value: Any) -> bytes:
    """Compact UTF-8 JSON, keys in their given order: the API's encoding."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def shorten(text: object, limit: int = 80) -> str:
    """``text`` cut to ``limit`` characters with "..." when longer: caller input
    quoted in a message stays short whatever its size."""
    text = str(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def plural(count: int, noun: str) -> str:
    """``1 definition``, ``2 definitions``: a count in words."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def location(file: str | None, line: int | None = None, column: int | None = None) -> str:
    """``file:line:column``, of the parts that are known ("" for none)."""
    return ":".join(str(part) for part in (file, line, column) if part is not None)


def close_matches(word: str, candidates: Iterable[str], *, limit: int = 3, cutoff: float = 0.6) -> list[str]:
    """The candidates most like ``word``, best first (at most ``limit``): what
    a "did you mean" may suggest. Similarity is difflib's ratio, at least ``cutoff``."""
    return difflib.get_close_matches(word, list(candidates), n=limit, cutoff=cutoff)


def did_you_mean(matches: Sequence[str]) -> str | None:
    """``did you mean 'x'?`` for the best of ``matches`` (from ``close_matches``),
    or None when there is none."""
    # Long enough for any usecase/name; an author's own name may be longer.
    return f"did you mean {shorten(matches[0], 160)!r}?" if matches else None


def json_pointer(path: tuple[str | int, ...]) -> str:
    """RFC 6901 pointer for a path of keys and indexes."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


@dataclass(frozen=True)
class Issue:
    """One validation problem, with where it is.

    ``path`` is a JSON Pointer into the definition (``/prompt_templates/user``)
    or into the render inputs; ``line`` and ``column`` are 1-based positions
    in the YAML file when known.
    """

    message: str
    path: str = ""
    file: str | None = None
    line: int | None = None
    column: int | None = None
    hint: str | None = None
    rule: str | None = None
    """The check that found it, a stable id (``schema``, ``yaml-syntax``,
    ``undeclared-variable``, ...; see ``registry.authoring.lintreport.RULES``)."""

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "message": self.message}
        for key in ("file", "line", "column", "hint", "rule"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Issue:
        """The inverse of ``as_dict``."""
        return cls(
            message=str(data["message"]),
            path=str(data.get("path", "")),
            file=data.get("file"),
            line=data.get("line"),
            column=data.get("column"),
            hint=data.get("hint"),
            rule=data.get("rule"),
        )


WORKTREE_TAG = "worktree"
"""The tag of a served working tree's one release."""


@dataclass(frozen=True)
class Release:
    """A release: a tag whose name is a SemVer version, and its commit.

    For a served working tree the tag is ``WORKTREE_TAG`` and ``commit`` is
    a content hash of the directory.
    """

    tag: str
    version: str | None
    commit: str
    prerelease: bool = False
    moved_to: str | None = None
    """Set when the tag now points elsewhere; ``commit`` stays the first-seen one."""

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "tag": self.tag,
            "version": self.version,
            "commit": self.commit,
            "prerelease": self.prerelease,
            "moved": self.moved_to is not None,
        }
        if self.moved_to is not None:
            out["moved_to"] = self.moved_to
        return out


@dataclass(frozen=True)
class Resolution:
    """How a request's ``release`` was resolved: the provenance of an answer."""

    requested: str
    release: Release
    channel: str | None = None
    immutable: bool = False
    """The request named one release tag exactly: the answer never changes."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "requested": self.requested,
            "tag": self.release.tag,
            "version": self.release.version,
            "commit": self.release.commit,
            "channel": self.channel,
        }

    @cached_property
    def json(self) -> bytes:
        """``as_dict()`` encoded once: resolutions are memoized per selector,
        so a warm request reuses the bytes."""
        return encode_json(self.as_dict())


@dataclass(frozen=True)
class Message:
    """One rendered chat message."""

    role: str
    content: str

    def as_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True)
class Placeholder:
    """A ``{name}`` a rendered message leaves for whoever runs the prompt to
    fill (``registry.rendering.placeholders`` says what is one)."""

    message: int
    """The index of the message in ``Prompt.messages``."""
    name: str
    start: int
    """Where ``{`` is in the message's content, in characters (code points)."""
    end: int
    """Just after ``}``: ``content[start:end] == "{" + name + "}"``."""

    def as_dict(self) -> dict[str, Any]:
        return {"message": self.message, "name": self.name, "start": self.start, "end": self.end}


@dataclass(frozen=True)
class Prompt:
    """A rendered prompt: the messages, plus model and call settings, and
    the placeholders the messages leave (in message order, then text order)."""

    messages: tuple[Message, ...]
    model: dict[str, Any] | None = None
    params: dict[str, Any] | None = None
    placeholders: tuple[Placeholder, ...] = ()

    def as_dicts(self) -> list[dict[str, str]]:
        """The messages as ``[{"role", "content"}]``, ready for a chat call."""
        return [m.as_dict() for m in self.messages]

    def as_text(self) -> str:
        """The messages role by role (``--- role ---`` then the content): the
        format of golden files and of ``prompt-registry render``."""
        return "".join(f"--- {m.role} ---\n{m.content}\n" for m in self.messages)


@dataclass(frozen=True)
class AgentSummary:
    """One entry of a release's agent listing."""

    usecase: str
    name: str
    path: str
    title: str | None
    valid: bool
    errors: tuple[Issue, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "usecase": self.usecase,
            "name": self.name,
            "title": self.title,
            "path": self.path,
            "valid": self.valid,
        }
        if not self.valid:
            out["errors"] = [e.as_dict() for e in self.errors]
        return out
