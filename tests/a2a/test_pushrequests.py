"""A2A's push configuration operations (registry.a2a.pushrequests) over a
real SQLite task store: each caller's own tasks only, the key answered once
by the set that made it, every refusal made before anything is kept, and
each configuration kept told to ``on_set`` (where the notifier sends it
the task as it is)."""

from __future__ import annotations

from collections.abc import Iterator
from ipaddress import ip_network
from pathlib import Path

import pytest
from a2a.types import AuthenticationInfo, TaskPushNotificationConfig

from registry.a2a.pushconfigs import HMAC_SCHEME, PushConfig
from registry.a2a.pushrequests import StoredPushConfigs
from registry.errors import InvalidRequest, NotFound, TaskNotFound
from registry.protocol.service import Caller
from registry.protocol.store import TaskStore
from tests.support.push_tasks import task_store_with

URL = "http://127.0.0.1:9/hook"
CLIENT_KEY = "a-key-the-client-chose-0123456789abcdef"
ALICE = Caller("alice")
BOB = Caller("bob")
ADMIN = Caller("root", admin=True)


@pytest.fixture
def tasks(tmp_path: Path) -> Iterator[TaskStore]:
    store = task_store_with(f"sqlite:///{tmp_path / 'tasks.db'}", {"t1": "alice", "t2": "bob"})
    yield store
    store.close()


@pytest.fixture
def kept() -> list[PushConfig]:
    return []


@pytest.fixture
def configs(tasks: TaskStore, kept: list[PushConfig]) -> StoredPushConfigs:
    return StoredPushConfigs(tasks, allowed=[ip_network("127.0.0.0/8")], on_set=kept.append)


def config(config_id: str = "c1", *, url: str = URL, key: str | None = None) -> TaskPushNotificationConfig:
    made = TaskPushNotificationConfig(id=config_id, task_id="t1", url=url, token="client-token")
    if key is not None:
        made.authentication.CopyFrom(AuthenticationInfo(scheme=HMAC_SCHEME, credentials=key))
    return made


def test_the_key_the_service_made_is_answered_by_the_set_alone(
    configs: StoredPushConfigs, kept: list[PushConfig]
) -> None:
    made = configs.set(ALICE, "t1", config())
    assert made.authentication.scheme == HMAC_SCHEME and made.authentication.credentials == kept[0].secret
    read = configs.get(ALICE, "t1", "c1")
    assert (read.id, read.task_id, read.url, read.token) == ("c1", "t1", URL, "client-token")
    assert read.authentication.scheme == HMAC_SCHEME and read.authentication.credentials == ""
    assert [found.id for found in configs.list(ALICE, "t1")] == ["c1"]
    assert not configs.list(ALICE, "t1")[0].authentication.credentials


def test_a_key_the_client_chose_signs_and_is_never_answered_back(
    configs: StoredPushConfigs, kept: list[PushConfig]
) -> None:
    made = configs.set(ALICE, "t1", config(key=CLIENT_KEY))
    assert made.authentication.credentials == "" and kept[0].secret == CLIENT_KEY


def test_a_configuration_without_an_id_takes_the_tasks(configs: StoredPushConfigs) -> None:
    made = configs.set(ALICE, "t1", config(""))
    assert made.id == "t1" and configs.get(ALICE, "t1", "t1").url == URL


def test_each_configuration_kept_is_told_so_that_it_gets_the_task_as_it_is(
    configs: StoredPushConfigs, kept: list[PushConfig]
) -> None:
    configs.set(ALICE, "t1", config("c1"))
    configs.set(ALICE, "t1", config("c1", url=URL + "/v2"))
    assert [(found.config_id, found.task_id, found.url) for found in kept] == [
        ("c1", "t1", URL),
        ("c1", "t1", URL + "/v2"),
    ]


def test_another_owners_task_is_not_found_and_nothing_of_it_is_shown_or_changed(
    configs: StoredPushConfigs, kept: list[PushConfig]
) -> None:
    configs.set(ALICE, "t1", config())
    with pytest.raises(TaskNotFound):
        configs.set(BOB, "t1", config("c2"))
    with pytest.raises(NotFound):
        configs.get(BOB, "t1", "c1")
    assert configs.list(BOB, "t1") == []
    configs.delete(BOB, "t1", "c1")
    assert [found.id for found in configs.list(ALICE, "t1")] == ["c1"] and len(kept) == 1


def test_an_admin_acts_on_the_owners_behalf(configs: StoredPushConfigs, kept: list[PushConfig]) -> None:
    configs.set(ADMIN, "t2", config("by-admin"))
    assert kept[0].owner == "bob" and [found.id for found in configs.list(BOB, "t2")] == ["by-admin"]
    configs.delete(ADMIN, "t2", "by-admin")
    assert configs.list(BOB, "t2") == []
    with pytest.raises(TaskNotFound):
        configs.set(ADMIN, "no-such-task", config())


def test_an_unknown_configuration_is_not_found_and_deleting_it_changes_nothing(configs: StoredPushConfigs) -> None:
    with pytest.raises(NotFound, match="task 't1' has no push notification configuration 'c9'"):
        configs.get(ALICE, "t1", "c9")
    configs.delete(ALICE, "t1", "c9")


@pytest.mark.parametrize(
    ("refused", "reason"),
    [
        (config(url="http://10.0.0.1/hook"), "private addresses are refused unless the operator allows"),
        (config(url="ftp://127.0.0.1/hook"), "must be an absolute http:// or https:// URL"),
        (config(key="short"), "a HMAC-SHA256 key must be 32 to 256 printable ASCII characters"),
        (config("c\n1"), "id must be 1 to 128 printable characters"),
    ],
)
def test_a_configuration_refused_is_refused_by_check_and_set_alike_and_nothing_is_kept(
    configs: StoredPushConfigs, kept: list[PushConfig], refused: TaskPushNotificationConfig, reason: str
) -> None:
    with pytest.raises(InvalidRequest, match=reason):
        configs.check(refused)
    with pytest.raises(InvalidRequest, match=reason):
        configs.set(ALICE, "t1", refused)
    assert kept == [] and configs.list(ALICE, "t1") == []


def test_another_scheme_and_a_tenant_are_refused(configs: StoredPushConfigs) -> None:
    bearer = config()
    bearer.authentication.CopyFrom(AuthenticationInfo(scheme="Bearer", credentials=CLIENT_KEY))
    with pytest.raises(InvalidRequest, match="authentication scheme 'Bearer' is not taken"):
        configs.check(bearer)
    tenanted = config()
    tenanted.tenant = "acme"
    with pytest.raises(InvalidRequest, match="this service has no tenants"):
        configs.check(tenanted)
