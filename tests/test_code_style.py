"""The code base passes its linter, its formatter and its type checker (configured in pyproject.toml)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parent.parent
RUFF = [sys.executable, "-m", "ruff"]
MYPY = [sys.executable, "-m", "mypy"]
CHECKED = ["registry", "tests", "bench"]


def test_ruff_finds_nothing() -> None:
    result = subprocess.run([*RUFF, "check", *CHECKED], cwd=REPOSITORY, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_code_is_formatted() -> None:
    result = subprocess.run([*RUFF, "format", "--check", *CHECKED], cwd=REPOSITORY, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow  # mypy over registry, tests and bench: seconds even with its cache
def test_mypy_finds_nothing() -> None:
    # pyproject.toml names what is checked (registry/, tests/ and bench/) and how strictly.
    result = subprocess.run(MYPY, cwd=REPOSITORY, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


MODULE_LINES = 600
FUNCTION_LINES = 60


def package_modules() -> list[Path]:
    # Alembic's migrations are written once, as the schema was then, and
    # a long one stays long (the first creates every table).
    return [path for path in sorted((REPOSITORY / "registry").rglob("*.py")) if "migrations" not in path.parts]


def test_every_module_of_the_package_is_under_600_lines() -> None:
    long = [
        f"{path.relative_to(REPOSITORY)}: {lines} lines"
        for path in package_modules()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) >= MODULE_LINES
    ]
    assert not long, "split these by concern:\n" + "\n".join(long)


def test_every_function_of_the_package_is_at_most_60_lines() -> None:
    long = [
        f"{path.relative_to(REPOSITORY)}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1} lines"
        for path in package_modules()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > FUNCTION_LINES
    ]
    assert not long, "split these into named steps:\n" + "\n".join(long)
