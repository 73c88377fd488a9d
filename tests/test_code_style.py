"""The code base passes its linter, its formatter and its type checker (configured in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


def test_mypy_finds_nothing() -> None:
    # pyproject.toml names what is checked (all of registry/) and how strictly.
    result = subprocess.run(MYPY, cwd=REPOSITORY, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
