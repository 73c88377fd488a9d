"""Push notification configurations (registry.a2a.pushconfigs) in the task
store's database, SQLite and a real PostgreSQL: each task's own, its
owner's alone, at most so many, signed with a key the server makes unless
the client gives one."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from registry.a2a.pushconfigs import HMAC_SCHEME, MIN_SECRET_CHARS, PushConfigStore, client_secret
from registry.errors import InvalidRequest, TaskNotFound
from registry.protocol.store import TaskStore
from tests.support.postgres_server import postgres_server  # noqa: F401  (a fixture: pytest finds it here)
from tests.support.push_tasks import task_store_with

URL = "https://hooks.example.com/a2a"
CLIENT_KEY = "k" * MIN_SECRET_CHARS


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def tasks(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TaskStore]:
    """Tasks t1 and t2 of alice and t3 of bob, in SQLite or on the session's PostgreSQL."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'tasks.db'}"
    else:
        url = str(request.getfixturevalue("postgres_server").create_database())
    store = task_store_with(url, {"t1": "alice", "t2": "alice", "t3": "bob"})
    yield store
    store.close()


@pytest.fixture
def configs(tasks: TaskStore) -> PushConfigStore:
    return PushConfigStore(tasks, max_per_task=3)


def test_a_configuration_round_trips_with_a_key_the_server_made(configs: PushConfigStore) -> None:
    stored = configs.set("t1", owner="alice", config_id="c1", url=URL, token="client-token")
    assert len(stored.secret) >= MIN_SECRET_CHARS
    assert configs.get("t1", "c1", owner="alice") == stored
    assert configs.list("t1", owner="alice") == [stored]
    assert stored.secret not in repr(stored) and "client-token" not in repr(stored)
    another = configs.set("t2", owner="alice", config_id="c1", url=URL)
    assert another.secret != stored.secret and another.token is None


def test_a_key_the_client_gives_is_the_one_kept(configs: PushConfigStore) -> None:
    stored = configs.set("t1", owner="alice", config_id="c1", url=URL, secret=CLIENT_KEY)
    assert stored.secret == CLIENT_KEY
    assert configs.get("t1", "c1", owner=None) == stored


def test_setting_an_id_again_replaces_that_configuration(configs: PushConfigStore) -> None:
    configs.set("t1", owner="alice", config_id="c1", url=URL)
    replaced = configs.set("t1", owner="alice", config_id="c1", url=URL + "/v2", token="t")
    assert configs.list("t1", owner="alice") == [replaced]
    assert replaced.url == URL + "/v2"


def test_only_the_tasks_owner_sees_and_changes_its_configurations(configs: PushConfigStore) -> None:
    stored = configs.set("t1", owner="alice", config_id="c1", url=URL)
    with pytest.raises(TaskNotFound):
        configs.set("t1", owner="bob", config_id="c2", url=URL)
    with pytest.raises(TaskNotFound):
        configs.set("missing", owner="alice", config_id="c1", url=URL)
    assert configs.get("t1", "c1", owner="bob") is None
    assert configs.list("t1", owner="bob") == []
    assert configs.delete("t1", "c1", owner="bob") is False
    assert configs.list("t1", owner=None) == [stored]
    assert configs.delete("t1", "c1", owner="alice") is True
    assert configs.delete("t1", "c1", owner="alice") is False
    assert configs.list("t1", owner=None) == []


def test_a_task_has_at_most_so_many_configurations(configs: PushConfigStore) -> None:
    for number in range(3):
        configs.set("t1", owner="alice", config_id=f"c{number}", url=URL)
    with pytest.raises(InvalidRequest, match="has 3 push notification configurations, the most it may have"):
        configs.set("t1", owner="alice", config_id="c3", url=URL)
    configs.set("t1", owner="alice", config_id="c0", url=URL + "/again")  # a replacement is no new one
    configs.set("t2", owner="alice", config_id="c3", url=URL)  # another task counts its own
    assert len(configs.list("t1", owner="alice")) == 3


def test_configurations_set_at_once_never_pass_the_cap(configs: PushConfigStore) -> None:
    def attempt(number: int) -> bool:
        try:
            configs.set("t1", owner="alice", config_id=f"c{number}", url=URL)
            return True
        except InvalidRequest:
            return False

    with ThreadPoolExecutor(max_workers=8) as pool:
        accepted = sum(pool.map(attempt, range(12)))
    assert accepted == 3 and len(configs.list("t1", owner=None)) == 3


def test_configurations_go_with_their_task(tasks: TaskStore, configs: PushConfigStore) -> None:
    configs.set("t3", owner="bob", config_id="c1", url=URL)
    with tasks.transaction(writes=True) as db:
        db.exec_driver_sql("DELETE FROM tasks WHERE task_id = 't3'")
    assert configs.list("t3", owner=None) == []


@pytest.mark.parametrize(
    ("config_id", "token", "message"),
    [
        ("", None, "id must be 1 to 128 printable characters"),
        ("x" * 129, None, "id must be 1 to 128 printable characters"),
        ("c1", "line\nbreak", "token must be at most 1024 printable ASCII characters"),
        ("c1", "é" * 10, "token must be at most 1024 printable ASCII characters"),
        ("c1", "t" * 1025, "token must be at most 1024 printable ASCII characters"),
    ],
)
def test_ids_and_tokens_out_of_bounds_are_refused(
    configs: PushConfigStore, config_id: str, token: str | None, message: str
) -> None:
    with pytest.raises(InvalidRequest, match=message):
        configs.set("t1", owner="alice", config_id=config_id, url=URL, token=token)


def test_a_client_chooses_its_key_with_the_hmac_scheme_or_leaves_it_to_the_server() -> None:
    assert client_secret(None, None) is None
    assert client_secret("", "") is None
    assert client_secret(HMAC_SCHEME, None) is None
    assert client_secret("hmac-sha256", CLIENT_KEY) == CLIENT_KEY


@pytest.mark.parametrize(
    ("scheme", "credentials", "message"),
    [
        ("HMAC-SHA265", CLIENT_KEY, "did you mean 'HMAC-SHA256'"),
        ("Bearer", "abc", "scheme 'Bearer' is not taken"),
        (None, CLIENT_KEY, "scheme '' is not taken"),
        (HMAC_SCHEME, "short", f"{MIN_SECRET_CHARS} to 256 printable ASCII characters"),
        (HMAC_SCHEME, "k" * 257, f"{MIN_SECRET_CHARS} to 256 printable ASCII characters"),
        (HMAC_SCHEME, "é" * 40, f"{MIN_SECRET_CHARS} to 256 printable ASCII characters"),
    ],
)
def test_another_scheme_or_a_key_out_of_bounds_is_one_clear_error(
    scheme: str | None, credentials: str, message: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        client_secret(scheme, credentials)
    assert message in str(refused.value) and credentials not in str(refused.value)
