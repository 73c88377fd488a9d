"""Commands that start the test MCP server (tests/support/mcp_server.py) as
a stdio child process, for the executor's MCP tools to run."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

SERVER = Path(__file__).resolve().with_name("mcp_server.py")
STDIO = f"{shlex.quote(sys.executable)} {shlex.quote(str(SERVER))} --stdio"


def down_the_first_time(marker: Path) -> str:
    """A command that exits with status 3 the first time it runs, and runs the test server after."""
    script = f"test -e {shlex.quote(str(marker))} || {{ touch {shlex.quote(str(marker))}; echo down >&2; exit 3; }}"
    return f"sh -c {shlex.quote(f'{script}; exec {STDIO}')}"
