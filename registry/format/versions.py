"""Versions and selectors: the vocabulary a library's releases are named in.

A release is a tag whose name is a SemVer 2.0 version, with or without a
leading ``v`` (``v1.2.0``, ``1.3.0-rc.1``); every other tag is ignored.
Releases are ordered by SemVer precedence (build metadata does not count;
``registry.store.releases`` breaks ties by tag name so the order is total
and stable).

A request names a release with a *selector*:

- ``latest``, or nothing: the highest release that is not a prerelease;
- an exact version: ``1.2.0`` finds ``v1.2.0`` and the other way round;
- an npm-style range (``^1.2.0``, ``~1.2``, ``1.x``, ``>=1.1.0 <2.0.0``,
  alternatives with ``||``), parsed and matched by ``nodesemver``, a port of
  npm's own semver: the highest matching release wins, and a prerelease
  matches only when a comparator names a prerelease of the same
  major.minor.patch (npm's rule);
- a channel, ``@production``: a name that the repository's channels file maps
  to an exact version or a range (``registry.store.channels``).

Parsing is separate from resolution, and nothing a request gives is ever
handed to git as a revision. This module reads no repository: the server's
release index (``registry.store.releases``) and the client, which checks a
pinned release and a bundle's tag as the server would, share it. It lives in
the format, below both, rather than in the store, whose git and settings the
client must never import.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import nodesemver

from registry.errors import InvalidRequest
from registry.models import WORKTREE_TAG, Release, shorten

# Checked before the SemVer parser, which also accepts non-ASCII digits and a
# trailing newline.
_TAG_SHAPE = re.compile(r"v?[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?", re.ASCII)
_MAX_TAG_LENGTH = 128
_MAX_RANGE_LENGTH = 256
_MAX_ALTERNATIVES = 16
CHANNEL_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}", re.ASCII)


@functools.total_ordering
class Version:
    """A SemVer 2.0 version, ordered by precedence (build metadata ignored)."""

    __slots__ = ("precedence", "semver", "text")

    def __init__(self, semver: nodesemver.SemVer, text: str) -> None:
        self.semver = semver
        self.text = text
        # SemVer 2.0 section 11 as a tuple Python compares: a release ranks
        # above its prereleases; prerelease identifiers compare numbers
        # numerically, below words, which compare in ASCII order; a shorter
        # run of equal identifiers ranks lower. Sorting 10,000 tags by
        # nodesemver's own compare took half a second.
        identifiers = tuple((0, part, "") if isinstance(part, int) else (1, 0, part) for part in semver.prerelease)
        self.precedence = (semver.major, semver.minor, semver.patch, not identifiers, identifiers)

    @property
    def prerelease(self) -> bool:
        return bool(self.semver.prerelease)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Version) and self.precedence == other.precedence

    def __lt__(self, other: Version) -> bool:
        return self.precedence < other.precedence

    def __hash__(self) -> int:
        return hash(self.precedence)

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Version({self.text!r})"


@functools.lru_cache(maxsize=32_768)
def parse_version(tag: str) -> Version | None:
    """The SemVer version a tag names, or None when it is not a release tag.

    Remembered: every listing and every range resolution parses each tag
    again, and a library may have years of them.
    """
    if len(tag) > _MAX_TAG_LENGTH or not _TAG_SHAPE.fullmatch(tag):
        return None
    text = tag[1:] if tag.startswith("v") else tag
    precedence_part = text.split("+", 1)[0]  # build metadata may have leading zeros
    if any(p.isdigit() and len(p) > 1 and p.startswith("0") for p in re.split(r"[.-]", precedence_part)):
        return None  # SemVer forbids leading zeros in numeric identifiers
    try:
        return Version(nodesemver.make_semver(text, loose=False), text)
    except ValueError:
        return None


@dataclass(frozen=True)
class LatestSelector:
    """The highest release that is not a prerelease."""

    text: str = "latest"


@dataclass(frozen=True)
class ExactSelector:
    """One release, by its version (with or without ``v``) or the worktree name."""

    text: str
    version: Version | None


@dataclass(frozen=True)
class RangeSelector:
    """The highest release an npm-style range matches."""

    text: str
    range: nodesemver.Range

    def matches(self, version: Version) -> bool:
        """Whether ``version`` is in the range (npm's prerelease rule applies)."""
        return bool(self.range.test(version.semver))


@dataclass(frozen=True)
class ChannelSelector:
    """A channel of the repository's channels file, by name (without ``@``)."""

    name: str

    @property
    def text(self) -> str:
        return "@" + self.name


Selector = LatestSelector | ExactSelector | RangeSelector | ChannelSelector
_HELP = "give an exact version (v1.2.0), a range (^1.2, ~1.2.3, >=1.1.0 <2.0.0), a channel (@production) or latest"
NOT_COMMITS = "releases are version tags, ranges or channels, never commits"
# An abbreviated (git's default: 7 hex digits) or full commit id. Made only of
# digits it is also a valid range (a major version), so it is read as one.
COMMIT_ID = re.compile(r"[0-9a-fA-F]{7,40}", re.ASCII)


def parse_selector(text: str | None, *, allow_channels: bool = True) -> Selector:
    """Parse the ``release`` a request gives; ``None`` means latest.

    Raises ``InvalidRequest`` for anything that is not a selector, which
    includes every git revision syntax (``HEAD~1``, ``main``, a commit id,
    ``--upload-pack=...``): a release is never passed to git as a revision.
    """
    if text is None or text == "latest":
        return LatestSelector()
    if text == WORKTREE_TAG:
        return ExactSelector(text=text, version=None)
    version = parse_version(text)
    if version is not None:
        return ExactSelector(text=text, version=version)
    if text.startswith("@") and allow_channels:
        if not CHANNEL_NAME.fullmatch(text[1:]):
            raise InvalidRequest(
                f"channel {shorten(text)!r} is not a channel name: use 1 to 64 characters of a-z, 0-9, '_' and '-'",
                parameter="release",
            )
        return ChannelSelector(text[1:])
    return RangeSelector(text=text, range=_parse_range(text))


def _parse_range(text: str) -> nodesemver.Range:
    if len(text) > _MAX_RANGE_LENGTH:
        raise InvalidRequest(
            f"release range is {len(text)} characters; the limit is {_MAX_RANGE_LENGTH}", parameter="release"
        )
    alternatives = text.split("||")
    if len(alternatives) > _MAX_ALTERNATIVES:
        raise InvalidRequest(
            f"release range has {len(alternatives)} alternatives; the limit is {_MAX_ALTERNATIVES}",
            parameter="release",
        )
    blank_alternative = any(not part.strip() for part in alternatives)
    if not (text.isascii() and text.isprintable()) or text != text.strip() or blank_alternative:
        raise InvalidRequest(f"release {shorten(text)!r} is not a release: {_HELP}", parameter="release")
    try:
        return nodesemver.make_range(text, loose=False)
    except (ValueError, TypeError) as exc:
        if COMMIT_ID.fullmatch(text):
            detail = f"release {text!r} looks like a commit id: {NOT_COMMITS}; {_HELP}"
        else:
            detail = f"release {shorten(text)!r} is not a release: {_HELP}"
        raise InvalidRequest(detail, parameter="release") from exc


def release_for_tag(tag: str, commit: str) -> Release | None:
    """The release a tag makes, or None when the tag is not a release tag."""
    version = parse_version(tag)
    if version is None:
        return None
    return Release(tag=tag, version=version.text, commit=commit, prerelease=version.prerelease)
