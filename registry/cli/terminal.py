"""When the CLI's reports are in colour (their styles are
``registry.authoring.colour``'s)."""

from __future__ import annotations

import os
from typing import TextIO


def use_colour(stream: TextIO) -> bool:
    """Colour on a terminal, unless NO_COLOR is set and not empty (https://no-color.org)."""
    return stream.isatty() and not os.environ.get("NO_COLOR")
