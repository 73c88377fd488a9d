"""Channels: names for releases, kept in the repository itself.

A channels file (default ``channels.yml`` at the root of the default
branch's head) maps channel names to an exact version or a range::

    production: v1.4.2
    canary: ^2.0.0-0

so that moving production to a new release, or rolling it back, is a merge
request and a revert. A request names a channel as ``release=@production``.

Nothing here fails quietly: a channel whose target is not a version or range,
or matches no release, is reported by name; a file that is not a flat mapping
is reported with its lines; a repository with no channels file has no
channels, and asking for one says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from registry.errors import InvalidRequest, ReleaseNotFound
from registry.format.safeyaml import YamlError, YamlLimits, parse_yaml
from registry.format.versions import CHANNEL_NAME, ExactSelector, LatestSelector, RangeSelector, parse_selector
from registry.models import Issue, Release, shorten
from registry.store.releases import ReleaseIndex

_CHANNELS_LIMITS = YamlLimits(max_bytes=64 * 1024, max_depth=4, max_nodes=10_000)


@dataclass(frozen=True)
class Channel:
    """One entry of the channels file: a usable selector, or why not."""

    name: str
    target: str
    selector: LatestSelector | ExactSelector | RangeSelector | None
    problem: str | None = None


@dataclass(frozen=True)
class ChannelTable:
    """The channels of a repository at one commit of its default branch."""

    path: str
    commit: str | None
    channels: dict[str, Channel] = field(default_factory=dict)
    problems: tuple[Issue, ...] = ()

    @classmethod
    def parse(cls, data: bytes | None, *, path: str, commit: str | None) -> ChannelTable:
        """Read a channels file; ``data`` is None when there is none."""
        if data is None:
            return cls(path=path, commit=commit)
        try:
            document = parse_yaml(data, limits=_CHANNELS_LIMITS)
        except YamlError as exc:
            if data.strip() == b"" or all(i.message.startswith("file is empty") for i in exc.issues):
                return cls(path=path, commit=commit)  # only comments: no channels yet
            return cls(path=path, commit=commit, problems=tuple(_in_file(i, path) for i in exc.issues))
        if not isinstance(document.value, dict):
            problem = Issue("a channels file is a mapping of channel names to versions or ranges", file=path)
            return cls(path=path, commit=commit, problems=(problem,))
        channels: dict[str, Channel] = {}
        problems: list[Issue] = []
        for name, target in document.value.items():
            position = document.position((name,), key=True)
            line = position.line if position else None
            if not CHANNEL_NAME.fullmatch(name):
                problems.append(
                    Issue(
                        f"channel name {shorten(name)!r} is not valid: use a-z, 0-9, '_' and '-'", file=path, line=line
                    )
                )
                continue
            channels[name] = _channel(name, target)
        return cls(path=path, commit=commit, channels=channels, problems=tuple(problems))

    def resolve(self, name: str, index: ReleaseIndex) -> Release:
        """The release channel ``name`` points to now; ``ReleaseNotFound`` otherwise."""
        channel = self.channels.get(name)
        if channel is None:
            if self.problems:
                raise ReleaseNotFound(
                    f"channel {name!r} cannot be resolved: the channels file {self.path} has problems",
                    requested="@" + name,
                    errors=[p.as_dict() for p in self.problems],
                )
            known = ", ".join("@" + n for n in self.channels) or f"none: the repository has no {self.path}"
            raise ReleaseNotFound(f"there is no channel {name!r} (channels: {known})", requested="@" + name)
        if channel.selector is None:
            raise ReleaseNotFound(
                f"channel {name!r} in {self.path} is unusable: {channel.problem}", requested="@" + name
            )
        try:
            return index.resolve(channel.selector)
        except ReleaseNotFound as exc:
            raise ReleaseNotFound(
                f"channel {name!r} points to {channel.target!r}, which matches no release",
                requested="@" + name,
                target=channel.target,
                available=index.tags(),
            ) from exc

    def describe(self, index: ReleaseIndex) -> dict[str, dict[str, Any]]:
        """Every channel with its target and what it resolves to now, or its problem."""
        described: dict[str, dict[str, Any]] = {}
        for name, channel in self.channels.items():
            entry: dict[str, Any] = {"target": channel.target}
            try:
                release = self.resolve(name, index)
            except ReleaseNotFound as exc:
                entry["error"] = exc.detail
            else:
                entry.update(tag=release.tag, commit=release.commit)
            described[name] = entry
        return described


def _channel(name: str, target: Any) -> Channel:
    if target is None:
        return Channel(name, "", None, "has no target: give a release version or range")
    if not isinstance(target, str):
        shown = shorten(str(target))
        return Channel(name, shown, None, f"target {shown!r} must be a version or range as a string; quote it")
    try:
        selector = parse_selector(target, allow_channels=False)
    except InvalidRequest as exc:
        return Channel(name, shorten(target), None, exc.detail)
    if not isinstance(selector, (LatestSelector, ExactSelector, RangeSelector)) or (
        isinstance(selector, ExactSelector) and selector.version is None
    ):
        return Channel(name, target, None, "a channel must name a release version or range")
    return Channel(name, target, selector)


def _in_file(issue: Issue, path: str) -> Issue:
    return Issue(issue.message, issue.path, path, issue.line, issue.column, issue.hint)
