"""The documentation: every page is reachable from the index, and every
relative link points at a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
DOCS = REPOSITORY / "docs"
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _relative_links(page: Path) -> list[str]:
    return [link for link in _LINK.findall(page.read_text(encoding="utf-8")) if "://" not in link]


def test_the_docs_index_links_every_page() -> None:
    linked = {(DOCS / link).resolve() for link in _relative_links(DOCS / "README.md")}
    # Images are linked from the pages that show them, not from the index.
    pages = {
        path.resolve()
        for path in DOCS.rglob("*")
        if path.is_file() and path.name != "README.md" and path.suffix != ".png"
    }
    assert pages - linked == set()


def test_every_relative_link_in_the_docs_and_readme_exists() -> None:
    for page in [REPOSITORY / "README.md", *sorted(DOCS.rglob("*.md"))]:
        for link in _relative_links(page):
            assert (page.parent / link).exists(), f"{page.relative_to(REPOSITORY)} links {link}, which does not exist"


def test_nothing_pins_prompt_registry_to_a_release_tag_it_never_published() -> None:
    # This project publishes no release tags yet: a pin must be a commit id.
    pinned = re.compile(r"prompt-registry\.git@v\d|^\s*#?\s*rev:\s*v\d", re.MULTILINE)
    for path in [REPOSITORY / ".pre-commit-hooks.yaml", *sorted(DOCS.rglob("*"))]:
        if path.is_file() and path.suffix != ".png":
            assert not pinned.search(path.read_text(encoding="utf-8")), path.relative_to(REPOSITORY)
