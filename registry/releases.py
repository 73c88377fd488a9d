"""Releases: which tags are releases, how they are ordered, how a request picks one.

A release is a tag whose name is a SemVer 2.0 version, with or without a
leading ``v`` (``v1.2.0``, ``1.3.0-rc.1``); every other tag is ignored.
Releases are ordered by SemVer precedence (build metadata does not count;
ties are broken by tag name so the order is total and stable).

A request names a release with a *selector*. Today a selector is ``latest``
(or nothing: the highest release that is not a prerelease) or an exact
version (``1.2.0`` finds ``v1.2.0`` and the other way round). Parsing is
separate from resolution so that ranges and channels can join as new
selector kinds without touching the callers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import semantic_version

from registry.errors import InvalidRequest, ReleaseNotFound
from registry.models import Release

# Checked before the SemVer parser, which also accepts non-ASCII digits and a
# trailing newline.
_TAG_SHAPE = re.compile(r"v?[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?", re.ASCII)
_MAX_TAG_LENGTH = 128
WORKTREE_TAG = "worktree"


def parse_version(tag: str) -> semantic_version.Version | None:
    """The SemVer version a tag names, or None when it is not a release tag."""
    if len(tag) > _MAX_TAG_LENGTH or not _TAG_SHAPE.fullmatch(tag):
        return None
    try:
        return semantic_version.Version(tag[1:] if tag.startswith("v") else tag)
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
    version: semantic_version.Version | None


Selector = LatestSelector | ExactSelector


def parse_selector(text: str | None) -> Selector:
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
    if version is None:
        shown = text if len(text) <= 80 else text[:80] + "..."
        raise InvalidRequest(
            f"release {shown!r} is not a release name: give an exact version such as 'v1.2.0' or '1.2.0', or 'latest'",
            parameter="release",
        )
    return ExactSelector(text=text, version=version)


def _sort_key(release: Release) -> tuple[object, str]:
    version = parse_version(release.tag)
    return (version.precedence_key if version is not None else (), release.tag)


@dataclass(frozen=True)
class ReleaseIndex:
    """The releases of a store at one moment, newest first."""

    releases: tuple[Release, ...]
    _by_tag: dict[str, Release] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_tag", {r.tag: r for r in self.releases})

    @classmethod
    def from_releases(cls, releases: Iterable[Release]) -> ReleaseIndex:
        """Build an index, sorting newest first."""
        return cls(tuple(sorted(releases, key=_sort_key, reverse=True)))

    @property
    def latest(self) -> Release | None:
        """The highest release that is not a prerelease."""
        return next((r for r in self.releases if not r.prerelease), None)

    def resolve(self, selector: Selector) -> Release:
        """The release a selector picks; ``ReleaseNotFound`` when none does."""
        if isinstance(selector, LatestSelector):
            if self.latest is None:
                raise ReleaseNotFound(
                    "there is no release yet: tag a commit with a version such as v1.0.0",
                    requested=selector.text,
                    available=self.tags(),
                )
            return self.latest
        text = selector.text
        alternative = text[1:] if text.startswith("v") else "v" + text
        found = self._by_tag.get(text) or self._by_tag.get(alternative)
        if found is None:
            raise ReleaseNotFound(
                f"release {text!r} does not exist",
                requested=text,
                available=self.tags(),
            )
        return found

    def tags(self, *, limit: int = 50) -> list[str]:
        """Tag names, newest first, at most ``limit`` of them (for messages)."""
        return [r.tag for r in self.releases[:limit]]


def release_for_tag(tag: str, commit: str) -> Release | None:
    """The release a tag makes, or None when the tag is not a release tag."""
    version = parse_version(tag)
    if version is None:
        return None
    return Release(tag=tag, version=str(version), commit=commit, prerelease=bool(version.prerelease))
