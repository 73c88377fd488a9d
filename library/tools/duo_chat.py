"""Tools for the seed's chat/minimal (docs/executor.md, "Placeholders after
Jinja"): an issue tracker and a documentation search that know a little,
answered from memory.

    prompt-registry run chat/minimal --example --model URL \\
      --tools library.tools.duo_chat:TOOLS --input question="What is a merge train?"

``--tools MODULE:ATTR`` imports ``MODULE`` from the current directory (run
it from the repository's root) and binds each name of the mapping ``ATTR``
to its callable, which gets the model's arguments as keyword arguments.
"""

from __future__ import annotations

from typing import Any

_ISSUES: dict[str, dict[str, Any]] = {
    "gitlab-org/gitlab#12": {
        "title": "main breaks after concurrent merges",
        "labels": ["bug", "ci"],
        "description": "Two merge requests pass their pipelines alone, then break main once both are merged.",
        "comments": ["Would merge trains prevent this?"],
    },
}
_PAGES: dict[str, str] = {
    "ci/pipelines/merge_trains.md": (
        "A merge train queues merge requests. Each one's pipeline runs on the merged result of the merge"
        " requests ahead of it, so main stays green when several merge at once."
    ),
    "user/project/releases/index.md": "A release is a tag with release notes, assets and evidence.",
    "ci/yaml/index.md": "Jobs are defined in .gitlab-ci.yml; each runs in a stage, in order.",
}


def issue_reader(reference: str) -> dict[str, Any] | str:
    """An issue by reference: ``#12`` is one of gitlab-org/gitlab."""
    full = f"gitlab-org/gitlab{reference}" if reference.startswith("#") else reference
    return _ISSUES.get(full, f"no issue {reference}")


def gitlab_documentation(query: str) -> list[dict[str, str]]:
    """The pages that share a word of four letters or more with ``query``."""
    words = {word for word in query.lower().split() if len(word) >= 4}
    return [
        {"page": page, "text": text}
        for page, text in _PAGES.items()
        if words & set((page + " " + text).lower().replace("_", " ").replace("/", " ").split())
    ]


TOOLS = {"issue_reader": issue_reader, "gitlab_documentation": gitlab_documentation}
