"""Releases: a store's release index, newest first, and how a selector picks one.

Which tags are releases, how versions are ordered and what a selector is
belong to the format (``registry.format.versions``), which the client shares;
this module orders the releases a store lists (ties in SemVer precedence are
broken by tag name so the order is total and stable) and resolves a selector
against them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from registry.errors import ReleaseNotFound
from registry.format.versions import (
    COMMIT_ID,
    NOT_COMMITS,
    ExactSelector,
    LatestSelector,
    RangeSelector,
    Version,
    parse_version,
)
from registry.models import Release, shorten


def _sort_key(release: Release) -> tuple[bool, Version | None, str]:
    version = parse_version(release.tag)
    return (version is not None, version, release.tag)


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

    def resolve(self, selector: LatestSelector | ExactSelector | RangeSelector) -> Release:
        """The release a selector picks; ``ReleaseNotFound`` when none does.

        Channels are resolved a level up (``registry.store.channels``): they need
        the channels file as well as the releases.
        """
        if isinstance(selector, RangeSelector):
            for release in self.releases:  # newest first: the first match is the highest
                version = parse_version(release.tag)
                if version is not None and selector.matches(version):
                    return release
            detail = f"no release matches {shorten(selector.text)!r}"
            if COMMIT_ID.fullmatch(selector.text):
                detail += f" (if that is a commit id: {NOT_COMMITS})"
            raise ReleaseNotFound(
                detail,
                requested=selector.text,
                available=self.tags(),
            )
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
