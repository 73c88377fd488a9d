"""Where a library checkout keeps its agents: the one question every author
command asks first, kept apart from lint so that asking it imports nothing
of lint's checks (evals, providers) into ``render``, ``parse`` or ``eval``."""

from __future__ import annotations

from pathlib import Path

from registry.errors import ConfigurationError
from registry.settings import DEFAULT_ROOT


def find_agents_root(path: Path, root: str | None) -> str:
    """The agents root inside ``path``: ``root`` when given, else the default;
    ``ConfigurationError`` when it is not there."""
    wanted = (root or DEFAULT_ROOT).strip("/")
    if (path / wanted).is_dir():
        return wanted
    raise ConfigurationError(
        f"no prompt library here: no {wanted}/ in {path.resolve()}; run this inside a library checkout,"
        " or give --repo PATH (or --root)"
    )
