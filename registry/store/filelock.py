"""An exclusive lock on a file, shared by every process of a replica, whose
wait never stops the waiting process's other work.

``fcntl.flock(LOCK_EX)`` blocks the calling thread in the kernel. Under
gevent workers every connection of the worker shares that thread: a worker
waiting for its sibling's fetch (hundreds of milliseconds against a remote)
answered nothing meanwhile, exact tags included. Here the lock is tried
without blocking and the wait is a ``time.sleep``, which gevent makes a
yield and a thread spends asleep. The lock is released when the file is
closed, so a killed holder releases it too.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

# The first retry comes soon (the usual holder is done within milliseconds);
# later ones back off, to cost nothing while a fetch holds the lock.
_FIRST_WAIT_SECONDS = 0.002
_LONGEST_WAIT_SECONDS = 0.05


@contextmanager
def exclusively(path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if missing) for the block.

    Raises ``OSError`` when the file cannot be opened or locked.
    """
    with open(path, "a") as handle:
        wait = _FIRST_WAIT_SECONDS
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                time.sleep(wait)
                wait = min(wait * 2, _LONGEST_WAIT_SECONDS)
        yield
