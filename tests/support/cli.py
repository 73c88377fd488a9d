"""The installed ``prompt-registry`` command, run in a subprocess as a user
runs it: outside the test's environment of REGISTRY_ and OPENAI_ variables."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.servers import CLI, clean_environment


def run(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in clean_environment().items() if not k.startswith("OPENAI_")}
    return subprocess.run(
        [CLI, *args], capture_output=True, text=True, timeout=120, cwd=cwd, env={**environment, **(env or {})}
    )
