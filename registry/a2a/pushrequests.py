"""A2A's push notification operations (``handler.PushConfigs``) over the
task store's configurations (``pushconfigs``).

Owners: a caller sets, reads, lists and deletes the configurations of its
own tasks only; another owner's task is ``TaskNotFound``, as it is for
every operation of the service (the handler asks the service first, and
every read and write here is limited to the caller's tasks again). An
admin's call acts on the task's owner's behalf.

A configuration's URL is checked when it is set (``pushtargets``: an early,
one-line refusal of the service's own network unless ``--allow-push-to``
allows it), and again at every delivery. The key that signs its
notifications is answered once, by the ``set`` that made it; reads show the
scheme alone. A key the client chose itself is never answered back.

Once a configuration is kept, ``on_set`` (``PushNotifier.snapshot``) sends
it the task as it is: a worker may have moved the task on before the
configuration was kept (one sent with the message that starts the task is
kept just after the task is), and the changes after that are sent as they
happen, so the receiver misses none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from a2a.types import AuthenticationInfo, TaskPushNotificationConfig

from registry.a2a.pushconfigs import HMAC_SCHEME, PushConfig, PushConfigStore, check_fields, client_secret
from registry.a2a.pushtargets import Network, check_push_url
from registry.errors import InvalidRequest, NotFound, TaskNotFound
from registry.models import shorten
from registry.protocol.service import Caller
from registry.protocol.store import TaskStore


class StoredPushConfigs:
    """``handler.PushConfigs`` over the ``push_configs`` table of ``store``."""

    def __init__(
        self, store: TaskStore, *, allowed: Sequence[Network] = (), on_set: Callable[[PushConfig], None]
    ) -> None:
        """``allowed``: the networks a URL may name although they are not
        public; ``on_set``: told of each configuration once it is kept."""
        self._store = store
        self._configs = PushConfigStore(store)
        self._allowed = tuple(allowed)
        self._on_set = on_set

    def check(self, config: TaskPushNotificationConfig) -> None:
        self._checked(config)

    def set(self, caller: Caller, task_id: str, config: TaskPushNotificationConfig) -> TaskPushNotificationConfig:
        secret = self._checked(config)
        kept = self._configs.set(
            task_id,
            owner=self._owner(caller, task_id),
            config_id=config.id or task_id,
            url=config.url,
            token=config.token or None,
            secret=secret,
        )
        self._on_set(kept)
        return _shown(kept, with_key=secret is None)

    def get(self, caller: Caller, task_id: str, config_id: str) -> TaskPushNotificationConfig:
        found = self._configs.get(task_id, config_id, owner=caller.scope)
        if found is None:
            raise NotFound(f"task {shorten(task_id)!r} has no push notification configuration {shorten(config_id)!r}")
        return _shown(found, with_key=False)

    def list(self, caller: Caller, task_id: str) -> list[TaskPushNotificationConfig]:
        return [_shown(found, with_key=False) for found in self._configs.list(task_id, owner=caller.scope)]

    def delete(self, caller: Caller, task_id: str, config_id: str) -> None:
        # Deleting what is not there changes nothing, as the SDK's own stores do.
        self._configs.delete(task_id, config_id, owner=self._owner(caller, task_id))

    def _checked(self, config: TaskPushNotificationConfig) -> str | None:
        """The key the client chose (None: the service makes one), once the
        configuration passes every check of its own."""
        if config.tenant:
            raise InvalidRequest(f"this service has no tenants: leave tenant out, not {shorten(config.tenant)!r}")
        check_fields(config.id or None, config.token or None)
        check_push_url(config.url, allowed=self._allowed)
        if not config.HasField("authentication"):
            return None
        return client_secret(config.authentication.scheme or None, config.authentication.credentials or None)

    def _owner(self, caller: Caller, task_id: str) -> str:
        """Whose the task is, when ``caller`` may act on it (an admin, on anyone's)."""
        if not caller.admin:
            return caller.owner
        task = self._store.get_task(task_id, owner=None)
        if task is None:
            raise TaskNotFound(f"no task {shorten(task_id)!r}")
        return task.owner


def _shown(config: PushConfig, *, with_key: bool) -> TaskPushNotificationConfig:
    """The configuration as A2A shows it; its key only in the answer of the ``set`` that made it."""
    shown = TaskPushNotificationConfig(id=config.config_id, task_id=config.task_id, url=config.url)
    if config.token:
        shown.token = config.token
    shown.authentication.CopyFrom(AuthenticationInfo(scheme=HMAC_SCHEME, credentials=config.secret if with_key else ""))
    return shown
