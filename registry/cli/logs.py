"""The command line's logging: the registry's own records at
``REGISTRY_LOG_LEVEL`` (info by default), the libraries' chatter only at debug.

An operator reads what the registry did; a line per HTTP request made by
the SDKs (httpx, the OpenAI SDK's httpx2) or per Alembic plugin loaded says
nothing the trace, the access log or the startup line does not.
"""

from __future__ import annotations

import logging

from registry.settings import Settings, environment_for

# Loggers of libraries that log routine work at INFO.
CHATTY_LIBRARIES = ("httpx", "httpx2", "httpcore", "alembic", "openai", "anthropic", "mcp")

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging() -> str:
    """Set the root logger's level and quiet the chatty libraries; returns
    the level's name. Raises ``ConfigurationError`` for an unknown level."""
    level_name = Settings.from_env(environment_for("log_level")).log_level
    level = logging.getLevelName(level_name.upper())
    logging.basicConfig(level=level, format=_FORMAT)
    quiet = level if level_name == "debug" else max(level, logging.WARNING)
    for name in CHATTY_LIBRARIES:
        logging.getLogger(name).setLevel(quiet)
    return level_name
