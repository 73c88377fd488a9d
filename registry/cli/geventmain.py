"""``prompt-registry serve`` with gevent workers, in an interpreter patched first.

``python -m registry.cli.geventmain serve ...`` patches the standard library
for gevent (``registry.web.geventpatch``), then runs the command line again
with the same arguments: the command line execs it once it knows it is
serving, since by then it has imported far too much to patch.
"""

from __future__ import annotations

import sys

from registry.web.geventpatch import patch


def main() -> int:
    patch()
    # Only now: all it imports binds the patched standard library.
    from registry.cli.main import main as command_line

    return command_line()


if __name__ == "__main__":
    sys.exit(main())
