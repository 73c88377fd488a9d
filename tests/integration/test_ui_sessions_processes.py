"""The UI's sign-in sessions with real processes: an agent run by the installed
CLI beside a hostile temporary directory, and sign-outs shared by the workers
through a real Redis."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from registry.serving.ui.sessions import LIFETIME
from tests.support.redis_server import RedisServer
from tests.support.servers import CLI, clean_environment
from tests.support.ui_sessions import (
    TOKEN,
    make_hostile_tmp,
    opens,
    sign_out,
    signed_in,
    with_cookie,
    workers_over,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def workers(example: Path) -> Iterator[Any]:
    with workers_over(example) as make:
        yield make


@pytest.fixture
def hostile_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return make_hostile_tmp(tmp_path, monkeypatch)


def test_running_an_agent_does_not_depend_on_the_uis_temporary_directory(hostile_tmp: Path) -> None:
    command = [CLI, "run", "support/gated_answer", "--example", "--input", "question=q"]
    command += ["--model", "scripted:library/replies/gated_answer.yml"]
    environment = {**clean_environment(), "TMPDIR": str(hostile_tmp), "REGISTRY_API_TOKENS": TOKEN}
    done = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert list((hostile_tmp / f"prompt-registry-ui-{os.getuid()}").iterdir()) == []


def test_sign_outs_are_shared_through_redis(workers: Any, shared_redis: RedisServer, redis_url: str) -> None:
    one, other = workers(redis_url=redis_url), workers(redis_url=redis_url)
    client = one.test_client()
    value = signed_in(client)
    sign_out(client)
    assert not opens(with_cookie(other, value))
    [key] = shared_redis.client().keys("*ui-signed-out*")
    assert 0 < int(shared_redis.client().ttl(key)) <= LIFETIME + 1
