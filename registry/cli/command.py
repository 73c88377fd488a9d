"""What a command group gives the command line.

Each group module (``serve``, ``library``, ``authoring``, ``run``,
``evals``, ``agents``, ``index``) has a ``register(commands)`` that adds its
subcommands to the top-level parser, each declared beside its options and
given its handler with ``set_defaults(handler=...)``. ``main`` parses the
arguments and calls ``args.handler(args, stack)``: the handler returns the
exit code, and ``stack`` closes what it opened (temporary directories, the
client) when the command ends.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from contextlib import ExitStack
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import TypeAlias

    # The object add_subparsers returns: argparse has no public name for it.
    Commands: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]

Handler = Callable[[argparse.Namespace, ExitStack], int]
