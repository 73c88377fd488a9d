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


def _params_tables() -> list[str]:
    """docs/executor.md's "Parameters, per provider" tables, as registry/providers/params.py has them:
    each neutral parameter's name per adapter kind, and the kind of each well-known provider name."""
    from registry.providers import params

    columns: dict[tuple[object, ...], list[params.ProviderKind]] = {}
    for kind in params.KINDS:
        same = (tuple(sorted(params.TABLES[kind].items())), kind in params.PASSES_UNKNOWN)
        columns.setdefault(same, []).append(kind)
    groups = [kinds[0] for kinds in columns.values()]
    lines = [
        "| `model.params` | " + " | ".join(", ".join(f"`{k}`" for k in kinds) for kinds in columns.values()) + " |",
        "|---" * (len(groups) + 1) + "|",
    ]
    for key in params.NEUTRAL:
        cells = [f"`{params.TABLES[kind][key]}`" if key in params.TABLES[kind] else "—" for kind in groups]
        lines.append(f"| `{key}` | " + " | ".join(cells) + " |")
    other = ["as written" if kind in params.PASSES_UNKNOWN else "—" for kind in groups]
    lines.append("| any other key | " + " | ".join(other) + " |")
    providers = ["| `model.provider` | the adapter kind lint assumes |", "|---|---|"]
    providers += [f"| `{name}` | `{kind}` |" for name, kind in params.WELL_KNOWN.items()]
    return ["\n".join(lines) + "\n", "\n".join(providers) + "\n"]


def test_the_parameter_tables_of_the_executor_docs_are_the_codes() -> None:
    text = (DOCS / "executor.md").read_text(encoding="utf-8")
    for table in _params_tables():
        assert table in text, f"docs/executor.md should have this table, as the code has it:\n{table}"
