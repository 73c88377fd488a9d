"""Shared by the output parsers' tests: a repository holding, at v1.0.0, the
bundled library's agents of every output type."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LibraryRepo

LIBRARY = Path(__file__).resolve().parents[2] / "library" / "ai_gateway" / "agents"


def agents_of_every_type(repo: LibraryRepo) -> LibraryRepo:
    """``repo`` with v1.0.0: the library's assistant agents of every output type."""
    for name in ("react_text", "react_json", "tools_triage", "docs_rag"):
        repo.write(f"assistant/{name}.yml", (LIBRARY / "assistant" / f"{name}.yml").read_text())
    repo.commit("agents of every type")
    repo.tag("v1.0.0")
    return repo
