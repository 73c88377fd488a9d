"""The push notification configurations clients set on their tasks, kept in
the task store's ``push_configs`` table (``registry.protocol.tables``).

A configuration is A2A's ``TaskPushNotificationConfig``: an id (unique per
task), the URL notifications go to, the client's optional ``token`` (sent
back in each notification) and the key every notification is signed with.
That key is the server's (``secrets.token_urlsafe``) unless the client gives
its own as A2A's ``authentication`` with the scheme ``HMAC-SHA256`` and the
key as ``credentials`` (``client_secret``). The set answer carries the key
once, in ``authentication.credentials``; later reads show the scheme alone.

Only the task's owner sets, reads or deletes its configurations; the
deliveries read them all (``owner=None``). At most ``MAX_CONFIGS_PER_TASK``
per task. The URL's own check (``pushtargets.check_push_url``) is the
caller's, before ``set``: it resolves names, which a store does not.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import Row, Select, delete, func, insert, select, update

from registry.errors import InvalidRequest, TaskNotFound
from registry.models import close_matches, did_you_mean, shorten
from registry.protocol.store import TaskStore
from registry.protocol.tables import push_configs, tasks

HMAC_SCHEME = "HMAC-SHA256"
"""The ``authentication.scheme`` of every configuration: how its notifications are signed."""
MAX_CONFIGS_PER_TASK = 10
MIN_SECRET_CHARS = 32
MAX_SECRET_CHARS = 256
MAX_TOKEN_CHARS = 1024
MAX_CONFIG_ID_CHARS = 128
_SECRET_BYTES = 32


@dataclass(frozen=True)
class PushConfig:
    """One task's push notification configuration, as stored."""

    config_id: str
    task_id: str
    owner: str
    url: str
    token: str | None = field(repr=False)
    """The client's own token, sent back in ``X-A2A-Notification-Token``."""
    secret: str = field(repr=False)
    """The key notifications are signed with (HMAC-SHA256): never logged, shown once."""
    created_at: datetime


def client_secret(scheme: str | None, credentials: str | None) -> str | None:
    """The signing key a client chose, from A2A's ``authentication``
    (``scheme`` ``HMAC-SHA256``, the key as ``credentials``), or None when
    it gave none (the server makes one); ``InvalidRequest`` for another
    scheme, or a key too short or too long."""
    if not scheme and not credentials:
        return None
    if (scheme or "").upper() != HMAC_SCHEME:
        suggestion = did_you_mean(close_matches((scheme or "").upper(), [HMAC_SCHEME]))
        raise InvalidRequest(
            f"authentication scheme {shorten(scheme or '')!r} is not taken: notifications are signed with"
            f" {HMAC_SCHEME}, whose key may be given as its credentials" + (f" ({suggestion})" if suggestion else "")
        )
    if credentials is None:
        return None
    if not MIN_SECRET_CHARS <= len(credentials) <= MAX_SECRET_CHARS or not _printable_ascii(credentials):
        raise InvalidRequest(
            f"a {HMAC_SCHEME} key must be {MIN_SECRET_CHARS} to {MAX_SECRET_CHARS} printable ASCII characters"
        )
    return credentials


class PushConfigStore:
    """The ``push_configs`` table of a task store's database."""

    def __init__(self, tasks_store: TaskStore, *, max_per_task: int = MAX_CONFIGS_PER_TASK) -> None:
        self._store = tasks_store
        self._max_per_task = max_per_task

    def set(
        self,
        task_id: str,
        *,
        owner: str,
        config_id: str,
        url: str,
        token: str | None = None,
        secret: str | None = None,
    ) -> PushConfig:
        """Add the configuration ``config_id`` to the task of ``owner``, or
        replace the one of that id; ``secret`` (``client_secret``), else a
        new key of the server's. ``TaskNotFound`` when the task is not
        there or not ``owner``'s; ``InvalidRequest`` for an id or token out
        of bounds, or a task with ``max_per_task`` configurations already."""
        check_fields(config_id, token)
        config = PushConfig(
            config_id=config_id,
            task_id=task_id,
            owner=owner,
            url=url,
            token=token,
            secret=secret if secret is not None else secrets.token_urlsafe(_SECRET_BYTES),
            created_at=datetime.now(timezone.utc),
        )
        values = {
            "url": url,
            "token": token,
            "authentication": {"scheme": HMAC_SCHEME},
            "secret": config.secret,
            "created_at": config.created_at,
        }
        with self._store.transaction(writes=True) as db:
            # Locking the task's row makes two concurrent sets count in turn (PostgreSQL);
            # SQLite's write transactions are one at a time already.
            owned = db.execute(
                select(tasks.c.task_id).where(tasks.c.task_id == task_id, tasks.c.owner == owner).with_for_update()
            ).one_or_none()
            if owned is None:
                raise TaskNotFound(f"no task {shorten(task_id)!r}")
            this = (push_configs.c.task_id == task_id, push_configs.c.config_id == config_id)
            if db.execute(update(push_configs).where(*this).values(owner=owner, **values)).rowcount == 1:
                return config
            count = db.execute(
                select(func.count()).select_from(push_configs).where(push_configs.c.task_id == task_id)
            ).scalar_one()
            if count >= self._max_per_task:
                raise InvalidRequest(
                    f"task {shorten(task_id)!r} has {count} push notification configurations,"
                    f" the most it may have: delete one first"
                )
            db.execute(insert(push_configs).values(config_id=config_id, task_id=task_id, owner=owner, **values))
        return config

    def get(self, task_id: str, config_id: str, *, owner: str | None) -> PushConfig | None:
        """The task's configuration ``config_id``, if there is one and the
        task is ``owner``'s (``None``: anyone's)."""
        with self._store.transaction() as db:
            row = db.execute(_select(task_id, owner).where(push_configs.c.config_id == config_id)).one_or_none()
        return None if row is None else _config(row)

    def list(self, task_id: str, *, owner: str | None) -> list[PushConfig]:
        """The task's configurations, oldest first, when the task is
        ``owner``'s (``None``: anyone's, as deliveries read them)."""
        with self._store.transaction() as db:
            rows = db.execute(
                _select(task_id, owner).order_by(push_configs.c.created_at, push_configs.c.config_id)
            ).all()
        return [_config(row) for row in rows]

    def delete(self, task_id: str, config_id: str, *, owner: str) -> bool:
        """Delete the task's configuration ``config_id`` if the task is
        ``owner``'s; False when there was none to delete."""
        with self._store.transaction(writes=True) as db:
            deleted = db.execute(
                delete(push_configs).where(
                    push_configs.c.task_id == task_id,
                    push_configs.c.config_id == config_id,
                    push_configs.c.task_id.in_(select(tasks.c.task_id).where(tasks.c.owner == owner)),
                )
            )
        return deleted.rowcount == 1


def _select(task_id: str, owner: str | None) -> Select[Any]:
    """The task's configurations, when the task is ``owner``'s (``None``: anyone's)."""
    statement = select(push_configs).where(push_configs.c.task_id == task_id)
    if owner is None:
        return statement
    return statement.join(tasks, tasks.c.task_id == push_configs.c.task_id).where(tasks.c.owner == owner)


def _config(row: Row[Any]) -> PushConfig:
    fields = dict(row._mapping)
    # Always {"scheme": HMAC_SCHEME}: kept for the protocol's answers, not the record.
    fields.pop("authentication", None)
    return PushConfig(**fields)


def check_fields(config_id: str | None, token: str | None) -> None:
    """``InvalidRequest`` for a configuration id or a token ``PushConfigStore.set``
    refuses; ``config_id`` None: not known yet (the task's id, to come)."""
    if config_id is not None and (not config_id or len(config_id) > MAX_CONFIG_ID_CHARS or not config_id.isprintable()):
        raise InvalidRequest(
            f"a push notification configuration's id must be 1 to {MAX_CONFIG_ID_CHARS} printable characters"
        )
    # The token goes back in a header, which takes ASCII only.
    if token is not None and (len(token) > MAX_TOKEN_CHARS or not _printable_ascii(token)):
        raise InvalidRequest(f"a push notification token must be at most {MAX_TOKEN_CHARS} printable ASCII characters")


def _printable_ascii(text: str) -> bool:
    return text.isascii() and text.isprintable()
