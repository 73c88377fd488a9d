"""gevent's patching of the standard library, before anything binds what it replaces.

gevent makes the standard library cooperative by patching it, and the patch
must come before anything binds what it replaces: GitPython imports
``subprocess.Popen`` by name, and once it has the unpatched one every git
call from a patched worker fails. The command line has imported far too
much by the time it knows it is serving, so it runs
``registry.cli.geventmain`` in a fresh interpreter instead (``python -m
registry.cli.geventmain serve ...``, the same arguments and environment, the
same process id), which patches and then runs the command line again.

``gunicorn.conf.py`` calls ``patch_for`` at its top for the same reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gevent import monkey

if TYPE_CHECKING:  # nothing of the registry is imported before the patch
    from registry.settings import Settings


def patch() -> None:
    """Patch the standard library for gevent."""
    monkey.patch_all()


def patch_for(settings: Settings) -> None:
    """Patch the standard library when ``settings`` ask for gevent workers."""
    if settings.worker_class == "gevent":
        patch()


def patched() -> bool:
    """Whether this interpreter's standard library is gevent's."""
    return bool(monkey.is_module_patched("socket"))
