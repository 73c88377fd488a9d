"""Channels files: parsing, resolution, and every way they can be wrong."""

from __future__ import annotations

import pytest

from registry.errors import ReleaseNotFound
from registry.format.versions import release_for_tag
from registry.store.channels import ChannelTable
from registry.store.releases import ReleaseIndex

INDEX = ReleaseIndex.from_releases(
    r for i, tag in enumerate(("v1.4.2", "v1.5.0", "v2.0.0-rc.1")) if (r := release_for_tag(tag, f"{i:040x}"))
)


def _table(text: str | None) -> ChannelTable:
    return ChannelTable.parse(None if text is None else text.encode(), path="channels.yml", commit="c" * 40)


def test_channels_point_to_exact_releases_and_ranges() -> None:
    table = _table("production: v1.4.2\ncanary: ^2.0.0-0\nstable: ^1.4\n")
    assert table.resolve("production", INDEX).tag == "v1.4.2"
    assert table.resolve("canary", INDEX).tag == "v2.0.0-rc.1"
    assert table.resolve("stable", INDEX).tag == "v1.5.0"
    assert list(table.describe(INDEX)) == ["production", "canary", "stable"]


def test_a_missing_file_means_no_channels_and_says_so() -> None:
    table = _table(None)
    assert table.channels == {} and table.problems == ()
    with pytest.raises(ReleaseNotFound, match="has no channels.yml"):
        table.resolve("production", INDEX)


def test_an_unknown_channel_lists_the_known_ones() -> None:
    with pytest.raises(ReleaseNotFound, match="@production"):
        _table("production: v1.4.2\n").resolve("prod", INDEX)


def test_a_channel_naming_no_release_is_reported_not_skipped() -> None:
    table = _table("production: v9.9.9\ncanary: ^3\n")
    with pytest.raises(ReleaseNotFound) as caught:
        table.resolve("production", INDEX)
    assert caught.value.extensions["target"] == "v9.9.9"
    described = table.describe(INDEX)
    assert "matches no release" in described["production"]["error"]
    assert "matches no release" in described["canary"]["error"]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("production: [v1\n", "syntax"),
        ("- v1.4.2\n", "mapping"),
        ("production: v1\nproduction: v2\n", "duplicate"),
        ("a: &a [x, *a]\n", "recursive"),
    ],
)
def test_an_invalid_channels_file_is_reported_with_its_lines(text: str, fragment: str) -> None:
    table = _table(text)
    assert table.problems and fragment in table.problems[0].message.lower()
    assert table.problems[0].file == "channels.yml"
    with pytest.raises(ReleaseNotFound, match="has problems"):
        table.resolve("production", INDEX)


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("production: HEAD~1\n", "production"),
        ("production: main\n", "production"),
        ("production: 1.4\n", "production"),
        ("production: '@canary'\n", "production"),
        ("production: worktree\n", "production"),
        ("production: null\n", "production"),
    ],
)
def test_targets_that_are_not_versions_or_ranges_make_the_channel_unusable(text: str, name: str) -> None:
    table = _table(text)
    with pytest.raises(ReleaseNotFound, match="unusable"):
        table.resolve(name, INDEX)
    assert "error" in table.describe(INDEX)[name]


@pytest.mark.parametrize("key", ["../prod", "a/b", "Prod", "pro d", "x" * 65])
def test_channel_names_with_path_characters_are_reported(key: str) -> None:
    table = _table(f"'{key}': v1.4.2\nproduction: v1.4.2\n")
    assert len(table.problems) == 1 and table.problems[0].line == 1
    assert table.resolve("production", INDEX).tag == "v1.4.2"


@pytest.mark.parametrize("text", ["", "\n", "# production: v1.4.2\n"])
def test_an_empty_or_commented_out_file_means_no_channels(text: str) -> None:
    table = _table(text)
    assert table.channels == {} and table.problems == ()


def test_a_channel_without_a_target_says_so() -> None:
    with pytest.raises(ReleaseNotFound, match="has no target"):
        _table("production:\n").resolve("production", INDEX)
