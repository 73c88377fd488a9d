"""The tests' own layering: a test module imports nothing from another test
module. What two of them share lives in tests/support/ or in conftest.py's
fixtures, so that moving or splitting one test module never breaks another."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import LONGEST_FIRST

TESTS = Path(__file__).resolve().parent


def _is_test_module(name: str) -> bool:
    return name.rsplit(".", 1)[-1].startswith("test_")


def _imported_test_modules(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if _is_test_module(alias.name)]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if _is_test_module(node.module):
                found.append(node.module)
            else:
                found += [f"{node.module}.{a.name}" for a in node.names if _is_test_module(a.name)]
    return found


def test_no_test_module_imports_another() -> None:
    offenders = {
        str(path.relative_to(TESTS)): imported
        for path in sorted(TESTS.rglob("*.py"))
        if (imported := _imported_test_modules(path))
    }
    assert offenders == {}


def test_each_module_named_to_run_first_exists() -> None:
    """A module renamed or deleted would silently fall back into the queue
    (its new name last among the slow ones)."""
    assert [name for name in LONGEST_FIRST if not (TESTS / name).is_file()] == []
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
