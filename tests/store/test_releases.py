"""Release tags, SemVer precedence and selectors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from registry.errors import InvalidRequest, ReleaseNotFound
from registry.format.versions import (
    ChannelSelector,
    ExactSelector,
    LatestSelector,
    RangeSelector,
    Version,
    parse_selector,
    parse_version,
    release_for_tag,
)
from registry.store.releases import ReleaseIndex

identifiers = st.one_of(
    st.integers(min_value=0, max_value=999).map(str),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=6).filter(lambda s: not s.isdigit()),
)
versions = st.builds(
    lambda major, minor, patch, pre: f"{major}.{minor}.{patch}" + (f"-{'.'.join(pre)}" if pre else ""),
    st.integers(0, 50),
    st.integers(0, 50),
    st.integers(0, 50),
    st.lists(identifiers, max_size=3),
)


def _selector(text: str) -> LatestSelector | ExactSelector | RangeSelector:
    """A selector the release index resolves by itself (channels are the store's)."""
    selector = parse_selector(text)
    assert not isinstance(selector, ChannelSelector)
    return selector


def _version(tag: str) -> Version:
    version = parse_version(tag)
    assert version is not None
    return version


def _index(*tags: str) -> ReleaseIndex:
    releases = [release_for_tag(tag, f"{i:040x}") for i, tag in enumerate(tags)]
    return ReleaseIndex.from_releases(r for r in releases if r is not None)


@pytest.mark.parametrize("tag", ["v1.2.0", "1.3.0-rc.1", "0.0.1", "v10.20.30+build.1", "1.0.0-alpha.beta.1"])
def test_semver_tags_are_versions(tag: str) -> None:
    assert parse_version(tag) is not None


@pytest.mark.parametrize(
    "tag",
    ["v1.2", "1", "V1.2.0", "vv1.2.0", "v1.2.0.0", "01.2.0", "1.2.0-", "1.2.0-01", "１.2.0", "1.2.0\n", "x" * 200],
)
def test_other_tags_are_not_versions(tag: str) -> None:
    assert parse_version(tag) is None


@given(st.lists(versions, min_size=1, max_size=12, unique=True))
def test_index_is_sorted_by_precedence_and_latest_is_the_highest_stable(tags: list[str]) -> None:
    index = _index(*tags)
    ordered = [_version(r.tag) for r in index.releases]
    assert all(a >= b for a, b in zip(ordered, ordered[1:], strict=False))
    stable = [v for v in ordered if v is not None and not v.prerelease]
    if stable:
        assert index.latest is not None and parse_version(index.latest.tag) == max(stable)
    else:
        assert index.latest is None


@given(versions, versions)
def test_precedence_agrees_with_the_semver_reference(a: str, b: str) -> None:
    """Versions compare by a tuple of our own; node-semver's compare is the reference."""
    left, right = parse_version(a), parse_version(b)
    assert left is not None and right is not None
    expected = left.semver.compare(right.semver)
    assert (left < right, left == right, left > right) == (expected < 0, expected == 0, expected > 0)
    assert (hash(left) == hash(right)) or left != right


@given(versions)
def test_a_prerelease_sorts_below_its_release(version: str) -> None:
    base = version.split("-")[0]
    if "-" in version:
        assert parse_version(version) < parse_version(base)  # type: ignore[operator]


def test_exact_selector_finds_the_tag_with_or_without_v() -> None:
    index = _index("v1.2.0", "1.3.0")
    assert index.resolve(_selector("1.2.0")).tag == "v1.2.0"
    assert index.resolve(_selector("v1.3.0")).tag == "1.3.0"
    assert index.resolve(_selector("v1.2.0")).tag == "v1.2.0"


def test_exact_tag_name_wins_over_the_other_spelling() -> None:
    index = _index("v1.2.0", "1.2.0")
    assert index.resolve(_selector("1.2.0")).tag == "1.2.0"
    assert index.resolve(_selector("v1.2.0")).tag == "v1.2.0"


def test_latest_skips_prereleases_and_prereleases_are_found_exactly() -> None:
    index = _index("v1.0.0", "v2.0.0-rc.1")
    assert index.resolve(LatestSelector()).tag == "v1.0.0"
    assert index.resolve(_selector("2.0.0-rc.1")).tag == "v2.0.0-rc.1"


def test_no_release_and_unknown_release_are_not_found_with_the_available_ones() -> None:
    with pytest.raises(ReleaseNotFound):
        _index().resolve(LatestSelector())
    with pytest.raises(ReleaseNotFound) as caught:
        _index("v1.0.0").resolve(_selector("v3.0.0"))
    assert caught.value.extensions["available"] == ["v1.0.0"]


def test_none_and_latest_select_latest() -> None:
    assert isinstance(parse_selector(None), LatestSelector)
    assert isinstance(parse_selector("latest"), LatestSelector)
    assert parse_selector("worktree") == ExactSelector("worktree", None)


@pytest.mark.parametrize("text", ["HEAD", "main", "--upload-pack=x", "a" * 40, "", "v1.2.0 ", "@", "@../x", "@A"])
def test_anything_else_is_an_invalid_request(text: str) -> None:
    with pytest.raises(InvalidRequest):
        parse_selector(text)


@pytest.mark.parametrize("text", ["1a2b3c4", "DEADBEEF", "b31db9a3e999d9a92836fd7115b81a217a311f1a"])
def test_a_commit_id_is_refused_as_one(text: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_selector(text)
    assert caught.value.detail.startswith(
        f"release {text!r} looks like a commit id: releases are version tags, ranges or channels, never commits; "
    )
    assert caught.value.extensions == {"parameter": "release"}


def test_a_commit_id_of_digits_reads_as_a_range_and_says_commits_are_not_releases() -> None:
    with pytest.raises(ReleaseNotFound) as caught:
        _index("v1.0.0").resolve(_selector("1234567"))
    assert caught.value.detail == (
        "no release matches '1234567' (if that is a commit id: releases are version tags, ranges or channels,"
        " never commits)"
    )
    assert _index("v1.0.0", "v20240101.0.0").resolve(_selector("20240101")).tag == "v20240101.0.0"


# --- ranges -----------------------------------------------------------------------------------


RANGE_TAGS = ("v1.2.0", "v1.2.5", "v1.3.0-rc.1", "v1.3.0", "v2.0.0-rc.1", "v2.0.0", "v2.1.0-beta.1")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("^1.2", "v1.3.0"),
        ("^1.2.0", "v1.3.0"),
        ("~1.2", "v1.2.5"),
        ("~1.2.0", "v1.2.5"),
        ("1.x", "v1.3.0"),
        ("1.2.*", "v1.2.5"),
        (">=1.1.0 <2.0.0", "v1.3.0"),
        ("^1.2.0 || ^2.0.0", "v2.0.0"),
        ("^2.0.0-0", "v2.0.0"),
        (">=1.3.0-rc.0 <1.3.0", "v1.3.0-rc.1"),
        ("~2.1.0-beta.0", "v2.1.0-beta.1"),
        ("1.2.0 - 1.2.9", "v1.2.5"),
        ("*", "v2.0.0"),
        ("^v1.2.0", "v1.3.0"),  # npm accepts a v inside ranges
        ("~>1.2", "v1.2.5"),  # and ~> as ~
    ],
)
def test_a_range_resolves_to_the_highest_matching_release(text: str, expected: str) -> None:
    assert _index(*RANGE_TAGS).resolve(_selector(text)).tag == expected


def test_prereleases_only_match_a_range_that_names_one_of_the_same_version() -> None:
    index = _index("v1.0.0", "v1.1.0-rc.1", "v2.0.0-rc.1")
    assert index.resolve(_selector("^1.0.0")).tag == "v1.0.0"
    assert index.resolve(_selector(">=1.1.0-rc.0")).tag == "v1.1.0-rc.1"
    with pytest.raises(ReleaseNotFound):
        index.resolve(_selector("^2.0.0"))


def test_an_unsatisfiable_range_names_the_range_and_the_releases() -> None:
    with pytest.raises(ReleaseNotFound) as caught:
        _index("v1.0.0").resolve(_selector("^3.0.0"))
    assert caught.value.extensions == {"requested": "^3.0.0", "available": ["v1.0.0"]}


@pytest.mark.parametrize(
    "text",
    [
        "^" + "1" * 300,
        " || ".join(["^1.0.0"] * 17),
        "||" * 500,
        "^1.2.0 ||",
        ">=",
        "^1.2.0a",
        "^1.2.0\x00",
        "^1.2.0\n",
        "１.x",
        "x" * 10_000,
    ],
)
def test_malformed_or_enormous_ranges_are_invalid_requests(text: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_selector(text)
    assert len(caught.value.detail) < 300


def test_a_caret_range_with_a_prerelease_starting_with_a_hyphen_is_an_invalid_request() -> None:
    # node-semver's caret and tilde expansion cannot parse these (documented in docs/api.md).
    with pytest.raises(InvalidRequest):
        parse_selector("^1.0.0--")
    selector = parse_selector(">=1.0.0--")
    assert isinstance(selector, RangeSelector)
    assert selector.matches(_version("v1.0.0"))


@given(
    st.lists(versions, min_size=1, max_size=12, unique=True),
    st.sampled_from(["^", "~", ">=", "<", ""]),
    versions.filter(lambda version: "--" not in version and ".-" not in version),  # see the test above
)
def test_a_resolved_range_matches_and_nothing_higher_does(tags: list[str], operator: str, bound: str) -> None:
    index = _index(*tags)
    selector = parse_selector(operator + bound if operator else bound.split("-")[0].rsplit(".", 1)[0] + ".x")
    matching = [r for r in index.releases if selector.matches(parse_version(r.tag))]  # type: ignore[union-attr, arg-type]
    if not matching:
        with pytest.raises(ReleaseNotFound):
            index.resolve(selector)  # type: ignore[arg-type]
        return
    chosen = index.resolve(selector)  # type: ignore[arg-type]
    assert chosen == matching[0]
    assert all(parse_version(r.tag) <= parse_version(chosen.tag) for r in matching)  # type: ignore[operator]
    if "-" not in bound or operator == "":
        assert not chosen.prerelease or chosen.tag.split("-")[0] == bound.split("-")[0]
