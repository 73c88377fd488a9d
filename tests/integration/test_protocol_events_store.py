"""Tasks' event logs in the task store, on SQLite and on a real PostgreSQL:
entries appended together are numbered together, concurrent writers never
share a number, and one query reads the entries after many positions."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from registry.protocol.store import TaskStore
from tests.support.postgres_server import postgres_server  # noqa: F401  (a fixture: pytest finds it here)
from tests.support.push_tasks import add_task


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TaskStore]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'tasks.db'}"
    else:
        url = str(request.getfixturevalue("postgres_server").create_database())
    opened = TaskStore(url)
    yield opened
    opened.close()


def test_entries_appended_together_are_numbered_together_and_read_back_as_written(store: TaskStore) -> None:
    task = add_task(store, "t1")
    assert store.append_event(task, "state", {"status": "running"}) == 1
    assert store.append_events(task, [("state", {"status": "completed"}), ("outcome", {"output": "é\nok"})]) == [2, 3]
    [running, completed, outcome] = store.events_after(task, 0)
    assert (completed.kind, completed.data, outcome.data) == ("state", {"status": "completed"}, {"output": "é\nok"})
    assert completed.created_at == outcome.created_at and completed.created_at.tzinfo is not None


def test_concurrent_writers_of_one_log_never_share_a_number(store: TaskStore) -> None:
    task = add_task(store, "t1")
    with ThreadPoolExecutor(4) as pool:
        numbers = list(pool.map(lambda n: store.append_event(task, "text", {"n": n}), range(60)))
    assert sorted(numbers) == list(range(1, 61))
    assert sorted(e.data["n"] for e in store.events_after(task, 0)) == list(range(60))


def test_one_query_reads_what_follows_each_position_of_many_tasks_in_order(store: TaskStore) -> None:
    tasks = [add_task(store, f"t{n:03d}") for n in range(250)]
    for task in tasks:
        store.append_events(task, [("text", {"n": n}) for n in range(5)])
    windows = [(task, 2) for task in tasks] + [("t000", 0), ("unknown", 0)]
    found = store.events_in(windows, batch=2)
    by_task = {task: [e.seq for e in found if e.task_id == task] for task in tasks}
    # t000 is read from two positions: 1-2 and 3-4, in order; the others 3-4.
    assert by_task == {task: [1, 2, 3, 4] if task == "t000" else [3, 4] for task in tasks}
    assert [e.task_id for e in found] == sorted(e.task_id for e in found)
    assert found[0].data == {"n": 0} and found[0].created_at.tzinfo is not None
    assert store.events_in([], batch=10) == []
