"""Replicas sharing one Redis: a sync in one reaches the others at once."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from registry.serving.events import ReleaseEvents
from tests.conftest import MINIMAL, Upstream, eventually
from tests.support.redis_server import RedisServer


def _ready(app: Flask) -> bool:
    service = app.extensions["prompt_registry.service"]
    events: ReleaseEvents | None = service.events
    return app.test_client().get("/readyz").status_code == 200 and events is not None and events.subscribed.is_set()


def _release(client: FlaskClient, selector: str) -> str:
    response = client.get(f"/v1/agents/chat/minimal?release={selector}")
    assert response.status_code == 200, response.get_json()
    return str(response.headers["X-Registry-Release"])


def _heard(app: Flask) -> float:
    metrics = app.extensions["prompt_registry.service"].metrics
    return float(
        metrics.registry.get_sample_value("prompt_registry_release_events_total", {"direction": "received"}) or 0
    )


@pytest.fixture
def replicas(upstream: Upstream, make_mirror_app: Callable[..., Flask], redis_url: str) -> tuple[Flask, Flask]:
    # An hour between fetches: without the announcement, B would not fetch.
    first = make_mirror_app(upstream.url, redis_url=redis_url, sync_interval=3600)
    second = make_mirror_app(upstream.url, redis_url=redis_url, sync_interval=3600)
    eventually(lambda: _ready(first) and _ready(second))
    return first, second


def test_a_sync_in_one_replica_reaches_the_other(replicas: tuple[Flask, Flask], upstream: Upstream) -> None:
    first, second = replicas
    a, b = first.test_client(), second.test_client()
    assert _release(a, "^1") == _release(b, "^1") == "v1.2.0"
    fetches_before = second.extensions["prompt_registry.service"].syncer.fetches
    heard_before = _heard(second)
    upstream.publish("v1.3.0", {"chat/minimal.yml": MINIMAL.replace("helpful", "kind")})

    first.extensions["prompt_registry.service"].syncer.sync_now()  # as a webhook or the timer would
    assert _release(a, "^1") == "v1.3.0"
    eventually(lambda: _heard(second) > heard_before)
    # Once heard, B answers the range with the new release on the very next
    # request: it waits for its own fetch rather than answer from before.
    assert _release(b, "^1") == "v1.3.0"
    assert _release(b, "latest") == "v1.3.0"
    assert second.extensions["prompt_registry.service"].syncer.fetches > fetches_before


def test_a_replica_that_hears_its_own_state_does_not_fetch(replicas: tuple[Flask, Flask]) -> None:
    first, second = replicas
    service = second.extensions["prompt_registry.service"]
    fetches, heard = service.syncer.fetches, _heard(second)
    first.extensions["prompt_registry.service"].syncer.sync_now()  # nothing changed upstream
    time.sleep(0.3)
    assert service.syncer.fetches == fetches
    assert _heard(second) == heard  # nothing changed, so nothing was announced


def test_garbage_on_the_channel_is_ignored(replicas: tuple[Flask, Flask], redis_url: str) -> None:
    import redis

    first, second = replicas
    with redis.Redis.from_url(redis_url) as direct:
        for message in (b"not json", b"[]", b'{"etag": 5}', b'{"origin": 1}', b"\xff\xfe"):
            direct.publish("prompt-registry:events", message)
    time.sleep(0.3)
    assert _ready(second) and _release(second.test_client(), "^1") == "v1.2.0"


def _subscribe_errors(app: Flask) -> float:
    metrics = app.extensions["prompt_registry.service"].metrics
    return float(
        metrics.registry.get_sample_value("prompt_registry_redis_errors_total", {"operation": "subscribe"}) or 0
    )


def test_a_fetch_that_fails_after_moving_refs_is_announced(replicas: tuple[Flask, Flask], upstream: Upstream) -> None:
    first, second = replicas
    mirror = Path(first.extensions["prompt_registry.service"].syncer.mirror.directory)
    hook = mirror / "hooks" / "reference-transaction"
    # git is killed right after it moved the refs: the fetch fails, but what
    # the replica serves has changed.
    hook.write_text('#!/bin/sh\n[ "$1" = committed ] && kill -9 "$PPID"\nexit 0\n', encoding="utf-8")
    hook.chmod(0o755)
    upstream.publish("v1.3.0", {"chat/minimal.yml": MINIMAL.replace("helpful", "kind")})

    assert not first.extensions["prompt_registry.service"].syncer.sync_now()
    assert _release(first.test_client(), "^1") == "v1.3.0"
    eventually(lambda: _release(second.test_client(), "^1") == "v1.3.0", seconds=5)


@pytest.mark.parametrize("outage", ["stop", "kill"])
def test_after_a_redis_outage_every_replica_converges_at_once(
    upstream: Upstream, make_mirror_app: Callable[..., Flask], own_redis: RedisServer, outage: str
) -> None:
    first = make_mirror_app(upstream.url, redis_url=own_redis.url)
    second = make_mirror_app(upstream.url, redis_url=own_redis.url)
    eventually(lambda: _ready(first) and _ready(second))
    b = second.test_client()
    getattr(own_redis, outage)()  # SIGTERM, or SIGKILL with no goodbye to the clients
    upstream.publish("v1.4.0", {"chat/minimal.yml": MINIMAL.replace("helpful", "calm")})
    first.extensions["prompt_registry.service"].syncer.sync_now()  # its announcement is lost
    assert _release(b, "^1") == "v1.2.0"
    # Long enough down that a subscriber backing off would wait seconds more.
    eventually(lambda: _subscribe_errors(second) >= 5, seconds=10)

    own_redis.start()
    # Syncs are an hour apart: only the comparison made on reconnecting brings
    # v1.4.0 within the test (the deadline stops a test that never converges).
    eventually(lambda: _release(b, "^1") == "v1.4.0")
    assert _release(first.test_client(), "^1") == "v1.4.0"


def test_replicas_that_agree_do_not_fetch_after_a_redis_restart(
    upstream: Upstream, make_mirror_app: Callable[..., Flask], own_redis: RedisServer
) -> None:
    first = make_mirror_app(upstream.url, redis_url=own_redis.url)
    second = make_mirror_app(upstream.url, redis_url=own_redis.url)
    eventually(lambda: _ready(first) and _ready(second))
    syncers = [app.extensions["prompt_registry.service"].syncer for app in (first, second)]
    fetches = [syncer.fetches for syncer in syncers]
    own_redis.kill()
    eventually(lambda: not first.extensions["prompt_registry.service"].events.subscribed.is_set())
    own_redis.start()
    eventually(lambda: _ready(first) and _ready(second), seconds=10)
    time.sleep(0.5)  # time for any needless fetch to start
    assert [syncer.fetches for syncer in syncers] == fetches
