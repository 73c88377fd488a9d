"""Preparing prometheus_client's multiprocess mode for a gunicorn server.

prometheus_client decides once, when it is first imported, whether metric
values live in memory or in files shared by the worker processes; so this
module imports nothing of it, and ``prompt-registry serve`` (and
``gunicorn.conf.py``) call ``prepare_metrics_directory`` before anything that
does.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

MULTIPROCESS_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"


def prepare_metrics_directory() -> str:
    """Point ``PROMETHEUS_MULTIPROC_DIR`` at an empty directory and return it.

    A directory the operator named is emptied of a previous run's files
    (their counts would otherwise be added to this run's); without one, a
    temporary directory is made and removed when this process exits.
    """
    given = os.environ.get(MULTIPROCESS_VARIABLE)
    if given:
        directory = Path(given)
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob("*.db"):
            stale.unlink(missing_ok=True)
        return str(directory)
    created = tempfile.mkdtemp(prefix="prompt-registry-metrics-")
    os.environ[MULTIPROCESS_VARIABLE] = created
    owner = os.getpid()

    def remove() -> None:
        # Forked workers inherit this hook; only the process that made the
        # directory (gunicorn's master) may remove it.
        if os.getpid() == owner:
            shutil.rmtree(created, ignore_errors=True)

    atexit.register(remove)
    return created
