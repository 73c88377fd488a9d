"""The code base passes its linter and formatter (configured in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
RUFF = [sys.executable, "-m", "ruff"]
CHECKED = ["registry", "tests", "bench"]


def test_ruff_finds_nothing() -> None:
    result = subprocess.run([*RUFF, "check", *CHECKED], cwd=REPOSITORY, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_code_is_formatted() -> None:
    result = subprocess.run([*RUFF, "format", "--check", *CHECKED], cwd=REPOSITORY, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
