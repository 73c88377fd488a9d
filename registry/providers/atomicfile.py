"""Writing a file so that no reader ever sees it half written: the bytes go
to a temporary file beside it, which then replaces it in one rename.
Readers, in this process or another, see the old file or the new one,
whole; two writers of the same file at once leave one of their two files,
whole (the last to rename)."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (its directory must exist).
    Raises ``OSError`` when it cannot; the temporary file is removed then."""
    # Beside the target, so that the rename stays within one file system;
    # hidden and suffixed, so that nobody takes it for an entry. Made with
    # the mode any new file gets (the umask's), not a temporary file's 0600:
    # the file is for others to read (a reviewer, another process).
    temporary = path.parent / f".{path.name}.{secrets.token_hex(8)}.tmp"
    handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            # On disk before the rename: a crash then leaves the old file or the new, never an empty one.
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
