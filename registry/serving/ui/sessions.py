"""The UI's sign-in sessions: the bearer token sealed, not merely signed, in
the session cookie; sessions that expire; and sign-out that revokes.

Flask's session cookie is signed, not encrypted: whoever reads it reads what
it holds. So the cookie holds the token only as a Fernet token
(AES-128-CBC with an HMAC-SHA256, ``cryptography``'s recipe) under a key
derived from the UI's secret (``REGISTRY_UI_SECRET``): without the secret,
the cookie gives nothing away. A sealed session names a random session id
and carries the time it was made; it opens for ``LIFETIME`` seconds, then
never again.

Sign-out revokes: the session id is remembered as signed out until the
session would have expired anyway, so the same cookie, kept and sent again,
opens nothing. Where it is remembered must be shared by every process that
may receive the cookie (gunicorn's workers, and replicas behind one address):

- ``RedisSignedOut`` when the registry has a Redis (``REDIS_URL``), shared by
  replicas. Like the cache, it fails open: when Redis cannot be reached, a
  session's revocation cannot be read, the failure is logged, and the
  session is taken as not revoked (the pages stay usable in an outage);
- ``DirectorySignedOut`` otherwise: one empty file per signed-out session, in
  ``<REGISTRY_DATA_DIR>/ui-signed-out``, or without a data directory in
  ``<temporary directory>/prompt-registry-ui-<uid>/signed-out`` (one
  machine's workers share it; made readable by its owner only).

Nothing else is kept on the server: sessions work across replicas with the
same secret without any store, and only revocations need one. That store is
made when first needed (``LazySignedOut``), by the first sign-in or the first
session to check, never with the application: a registry whose UI nobody
signs in to (the one ``prompt-registry run`` serves in process, say) never
makes one, and one that cannot be made (another user's directory, a
read-only disk) fails signing in with a ``ConfigurationError`` that says why,
and nothing else.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import secrets
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from registry.errors import ConfigurationError
from registry.serving.cache import connect, redis_error, redis_key
from registry.settings import Settings

if TYPE_CHECKING:
    import redis

log = logging.getLogger(__name__)

LIFETIME = 8 * 3600
"""Seconds a sign-in lasts: a working day."""
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{22,64}")


class SignedOut(Protocol):
    """The session ids signed out before their sessions expired."""

    def add(self, session_id: str, *, seconds: int) -> None:
        """Remember ``session_id`` as signed out for (at least) ``seconds``."""

    def __contains__(self, session_id: object) -> bool:
        """Whether ``session_id`` was signed out (and is still remembered)."""

    def ready(self) -> None:
        """Raise ``ConfigurationError`` when sign-outs cannot be kept here."""


@dataclass(frozen=True)
class SignedOutKey:
    session_id: str

    def parts(self) -> tuple[str, ...]:
        return ("ui-signed-out", self.session_id)


class RedisSignedOut:
    """Signed-out session ids in Redis, each expiring with its session."""

    def __init__(self, client: redis.Redis, *, prefix: str) -> None:
        self.client = client
        self.prefix = prefix

    def add(self, session_id: str, *, seconds: int) -> None:
        try:
            self.client.set(redis_key(self.prefix, SignedOutKey(session_id)), b"1", ex=max(1, seconds))
        except redis_error() as exc:
            log.error("cannot record a UI sign-out in Redis (%s: %s): that cookie stays valid", type(exc).__name__, exc)

    def __contains__(self, session_id: object) -> bool:
        if not isinstance(session_id, str):
            return False
        try:
            return bool(self.client.exists(redis_key(self.prefix, SignedOutKey(session_id))))
        except redis_error() as exc:
            log.warning("cannot read UI sign-outs from Redis (%s: %s); letting the session in", type(exc).__name__, exc)
            return False

    def ready(self) -> None:
        """Always: Redis fails open, in each use."""

    def close(self) -> None:
        self.client.close()


class DirectorySignedOut:
    """Signed-out session ids as empty files in a directory of this machine,
    removed once their sessions would have expired."""

    def __init__(self, directory: Path, *, lifetime: int = LIFETIME, clock: Callable[[], float] = time.time) -> None:
        self.directory = directory
        self.lifetime = lifetime
        self._clock = clock
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)

    def add(self, session_id: str, *, seconds: int) -> None:
        if not _SESSION_ID.fullmatch(session_id):
            return
        try:
            self._forget_expired()
            (self.directory / session_id).touch()
        except OSError as exc:
            raise ConfigurationError(f"cannot record a UI sign-out in {self.directory}: {exc.strerror}") from exc

    def __contains__(self, session_id: object) -> bool:
        return (
            isinstance(session_id, str)
            and bool(_SESSION_ID.fullmatch(session_id))
            and (self.directory / session_id).exists()
        )

    def _forget_expired(self) -> None:
        horizon = self._clock() - self.lifetime
        for entry in self.directory.iterdir():
            try:
                if entry.stat().st_mtime < horizon:
                    entry.unlink(missing_ok=True)
            except FileNotFoundError:
                continue  # another worker removed it first

    def ready(self) -> None:
        """Always: the directory was made with the store."""

    def close(self) -> None:
        """Nothing to close: files are opened only while used."""


class LazySignedOut:
    """The store ``make`` gives, made at its first use rather than at startup.

    A store that cannot be made raises its ``ConfigurationError`` in that use,
    and is tried again at the next (once the operator has fixed the cause)."""

    def __init__(self, make: Callable[[], RedisSignedOut | DirectorySignedOut]) -> None:
        self._make = make
        self._store: RedisSignedOut | DirectorySignedOut | None = None
        self._lock = threading.Lock()

    def _made(self) -> RedisSignedOut | DirectorySignedOut:
        with self._lock:
            if self._store is None:
                self._store = self._make()
            return self._store

    def add(self, session_id: str, *, seconds: int) -> None:
        self._made().add(session_id, seconds=seconds)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._made()

    def ready(self) -> None:
        self._made().ready()

    def close(self) -> None:
        """Close the store, if it was ever made."""
        with self._lock:
            if self._store is not None:
                self._store.close()


@dataclass(frozen=True)
class Session:
    session_id: str
    token: str
    made_at: int


class UiSessions:
    """Seals tokens into session values and opens them again, while they last."""

    def __init__(
        self,
        secret: str,
        signed_out: SignedOut,
        *,
        lifetime: int = LIFETIME,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._fernet = Fernet(_fernet_key(secret))
        self.signed_out = signed_out
        self.lifetime = lifetime
        self._clock = clock

    def seal(self, token: str) -> str:
        """A new session for ``token``, as the text the cookie keeps.

        ``ConfigurationError`` when sign-outs cannot be kept: a session that
        could not be revoked is never made."""
        self.signed_out.ready()
        payload = json.dumps({"sid": secrets.token_urlsafe(24), "token": token}).encode()
        return self._fernet.encrypt_at_time(payload, int(self._clock())).decode("ascii")

    def open(self, sealed: str) -> Session | None:
        """The session ``sealed`` holds; None when it is not ours, expired or signed out."""
        session = self._unseal(sealed)
        return None if session is None or session.session_id in self.signed_out else session

    def revoke(self, sealed: str) -> None:
        """Sign out the session ``sealed`` holds: it never opens again."""
        session = self._unseal(sealed)
        if session is not None:
            left = session.made_at + self.lifetime - int(self._clock())
            self.signed_out.add(session.session_id, seconds=left + 1)

    def _unseal(self, sealed: str) -> Session | None:
        try:
            now = int(self._clock())
            payload = json.loads(self._fernet.decrypt_at_time(sealed.encode("ascii"), self.lifetime, now))
            made_at = self._fernet.extract_timestamp(sealed.encode("ascii"))
        except (InvalidToken, UnicodeError, ValueError):
            return None
        if not isinstance(payload, dict) or not all(isinstance(payload.get(k), str) for k in ("sid", "token")):
            return None
        return Session(payload["sid"], payload["token"], made_at)


def signed_out_store(settings: Settings) -> RedisSignedOut | DirectorySignedOut:
    """Where the settings say signed-out sessions are remembered (see the
    module); ``ConfigurationError`` when that place cannot be used."""
    if settings.redis_url:
        return RedisSignedOut(connect(settings.redis_url, timeout=settings.redis_timeout), prefix=settings.redis_prefix)
    try:
        if settings.data_dir:
            return DirectorySignedOut(Path(settings.data_dir) / "ui-signed-out")
        return DirectorySignedOut(_private_directory(Path(tempfile.gettempdir()) / f"prompt-registry-ui-{os.getuid()}"))
    except OSError as exc:
        raise ConfigurationError(
            f"cannot keep the UI's sign-outs in {exc.filename}: {exc.strerror}; "
            "set REGISTRY_DATA_DIR to a directory this user may write"
        ) from exc


def _private_directory(path: Path) -> Path:
    """``path/signed-out``, in a directory of ours that no one else may write."""
    path.mkdir(mode=0o700, exist_ok=True)
    found = path.lstat()
    # In a shared temporary directory, someone else may have made it first.
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o022:
        raise ConfigurationError(
            f"{path} is not a directory of this user that only it may write: "
            "set REGISTRY_DATA_DIR for the UI's sign-outs to be kept there"
        )
    return path / "signed-out"


def _fernet_key(secret: str) -> bytes:
    # A key of its own, derived from the secret that also signs the cookie.
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"prompt-registry ui session").derive(
        secret.encode()
    )
    return base64.urlsafe_b64encode(key)
