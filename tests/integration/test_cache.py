"""The cache tiers against a real redis-server: hits, misses, flushes and outages."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from registry.format.definition import content_format
from registry.serving.cache import AgentKey, MemoryTier, redis_key
from registry.serving.events import ReleaseEventsChannel
from registry.settings import Settings
from tests.conftest import MINIMAL, LibraryRepo, make_app
from tests.support.ports import free_port
from tests.support.redis_server import RedisServer, SentinelServer


def _metric(app: Flask, name: str, **labels: str) -> float:
    value = app.extensions["prompt_registry.service"].metrics.registry.get_sample_value(name, labels)
    return float(value or 0.0)


def _lookups(app: Flask, tier: str, result: str) -> float:
    return _metric(app, "prompt_registry_cache_lookups_total", tier=tier, result=result)


def _loads(app: Flask) -> float:
    return _metric(app, "prompt_registry_definition_loads_total", outcome="valid") + _metric(
        app, "prompt_registry_definition_loads_total", outcome="invalid"
    )


@pytest.fixture
def make_redis_app(released_repo: LibraryRepo) -> Iterator[Any]:
    apps: list[Flask] = []

    def build(url: str, **settings: Any) -> Flask:
        app = make_app(Settings(repo=str(released_repo.path), redis_url=url, **settings))
        apps.append(app)
        return app

    yield build
    for app in apps:
        app.extensions["prompt_registry.service"].close()


def _definition(client: FlaskClient, release: str = "v1.1.0", agent: str = "chat/with_rules") -> dict[str, Any]:
    response = client.get(f"/v1/agents/{agent}?release={release}")
    assert response.status_code == 200, response.get_json()
    body: dict[str, Any] = response.get_json()
    return body


def test_keys_are_built_from_structured_values_under_the_prefix() -> None:
    key = redis_key("team-a", AgentKey("abc123", "chat", "minimal"))
    assert key == f"team-a:agent:{content_format()}:abc123:chat:minimal"
    assert redis_key("team-b", AgentKey("abc123", "chat", "minimal")).startswith("team-b:")
    assert redis_key("team-a", ReleaseEventsChannel()) == "team-a:events"
    # Parts are escaped, so no value can forge another key's shape.
    assert redis_key("p", AgentKey("c", "a:b", "n")) == f"p:agent:{content_format()}:c:a%3Ab:n"


def test_the_memory_tier_is_bounded() -> None:
    tier = MemoryTier(maxsize=2)
    for index in range(5):
        tier.put(AgentKey("c", "u", f"n{index}"), index)
    assert len(tier) == 2
    assert tier.get(AgentKey("c", "u", "n4")) == 4 and tier.get(AgentKey("c", "u", "n0")) is None
    assert tier.put(AgentKey("c", "u", "n4"), 99) == 4  # the first value stored wins


def test_a_miss_in_every_tier_loads_from_git_and_fills_both(make_redis_app: Any, redis_url: str) -> None:
    app = make_redis_app(redis_url)
    client = app.test_client()
    first = _definition(client)
    assert _lookups(app, "memory", "miss") == 1 and _lookups(app, "redis", "miss") == 1
    assert _loads(app) == 1
    second = _definition(client)
    assert second == first
    assert _lookups(app, "memory", "hit") == 1 and _loads(app) == 1
    with redis.Redis.from_url(redis_url) as direct:
        keys = [k.decode() for k in direct.keys("*")]
    assert keys == [redis_key("prompt-registry", AgentKey(first["release"]["commit"], "chat", "with_rules"))]


def test_a_second_replica_is_served_from_redis_without_reading_git(make_redis_app: Any, redis_url: str) -> None:
    first_app, second_app = make_redis_app(redis_url), make_redis_app(redis_url)
    expected = _definition(first_app.test_client())
    client = second_app.test_client()
    assert _definition(client) == expected
    assert _lookups(second_app, "redis", "hit") == 1 and _loads(second_app) == 0
    # An agent rebuilt from a record compiles on first render, and renders
    # exactly as one loaded from git.
    inputs = {"inputs": {"question": "Why?", "rules": ["be kind"]}}
    rendered = client.post("/v1/agents/chat/with_rules/render?release=v1.1.0", json=inputs).get_json()
    direct = first_app.test_client().post("/v1/agents/chat/with_rules/render?release=v1.1.0", json=inputs)
    assert rendered == direct.get_json()
    assert _loads(second_app) == 0


def test_invalid_definitions_are_shared_with_their_errors(repo: LibraryRepo, redis_url: str) -> None:
    repo.release("v1.0.0", {"chat/broken.yml": "name: Broken\nprompt_templates:\n  user: '{{ unclosed'\n"})
    first = make_app(Settings(repo=str(repo.path), redis_url=redis_url))
    second = make_app(Settings(repo=str(repo.path), redis_url=redis_url))
    try:
        expected = first.test_client().get("/v1/agents/chat/broken?release=v1.0.0")
        shared = second.test_client().get("/v1/agents/chat/broken?release=v1.0.0")
        assert expected.status_code == shared.status_code == 422
        assert shared.get_json() == expected.get_json()
        assert _lookups(second, "redis", "hit") == 1 and _loads(second) == 0
    finally:
        for app in (first, second):
            app.extensions["prompt_registry.service"].close()


def test_unknown_agents_are_never_cached(make_redis_app: Any, redis_url: str) -> None:
    app = make_redis_app(redis_url)
    client = app.test_client()
    for index in range(20):
        assert client.get(f"/v1/agents/chat/made-up-{index}?release=v1.0.0").status_code == 404
    assert app.extensions["prompt_registry.service"].cache_status()["memory"]["entries"] == 0
    with redis.Redis.from_url(redis_url) as direct:
        assert direct.dbsize() == 0


def test_records_of_another_format_or_commit_are_misses(make_redis_app: Any, redis_url: str) -> None:
    writer = make_redis_app(redis_url)
    commit = _definition(writer.test_client())["release"]["commit"]
    key = redis_key("prompt-registry", AgentKey(commit, "chat", "with_rules"))
    with redis.Redis.from_url(redis_url) as direct:
        for garbage in (b"not json", b'{"record": 999}', b'{"record": 1, "commit": "elsewhere"}', b"[]"):
            direct.set(key, garbage)
            reader = make_redis_app(redis_url)
            assert _definition(reader.test_client())["release"]["commit"] == commit
            assert _loads(reader) == 1  # read from git instead


def test_a_flushed_redis_is_refilled(make_redis_app: Any, redis_url: str) -> None:
    first = make_redis_app(redis_url)
    expected = _definition(first.test_client())
    with redis.Redis.from_url(redis_url) as direct:
        direct.flushall()
        second = make_redis_app(redis_url)
        assert _definition(second.test_client()) == expected
        assert _loads(second) == 1 and direct.dbsize() == 1


def test_prefixes_keep_registries_apart(make_redis_app: Any, redis_url: str) -> None:
    make_redis_app(redis_url, redis_prefix="team-a").test_client().get("/v1/agents/chat/minimal?release=v1.0.0")
    other = make_redis_app(redis_url, redis_prefix="team-b")
    other.test_client().get("/v1/agents/chat/minimal?release=v1.0.0")
    assert _loads(other) == 1
    with redis.Redis.from_url(redis_url) as direct:
        prefixes = sorted({k.decode().split(":")[0] for k in direct.keys("*")})
    assert prefixes == ["team-a", "team-b"]


def test_a_redis_that_never_answers_at_startup(make_redis_app: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="registry.serving.cache")
    app = make_redis_app(f"redis://127.0.0.1:{free_port()}/0")
    client = app.test_client()
    for release in ("v1.0.0", "v1.1.0", "^1", "latest"):
        assert client.get(f"/v1/agents/chat/minimal?release={release}").status_code == 200
    assert _metric(app, "prompt_registry_redis_errors_total", operation="get") >= 1
    assert [r.message for r in caplog.records].count(
        next(r.message for r in caplog.records if "Redis is unavailable" in r.message)
    ) == 1
    assert app.extensions["prompt_registry.service"].cache_status()["redis"]["available"] is False


def test_redis_killed_mid_run_and_restarted(
    released_repo: LibraryRepo, own_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="registry.serving.cache")
    app = make_app(Settings(repo=str(released_repo.path), redis_url=own_redis.url))
    service = app.extensions["prompt_registry.service"]
    client = app.test_client()
    expected = {tag: _definition(client, tag, "chat/minimal") for tag in ("v1.0.0", "v2.0.0-rc.1")}
    try:
        own_redis.kill()
        # Cold requests (a fresh memory tier) and warm ones: all answered correctly.
        service.content.memory = MemoryTier(maxsize=16)
        for _ in range(3):
            for tag, body in expected.items():
                assert _definition(client, tag, "chat/minimal") == body
            assert _definition(client, "v1.1.0")["definition"]["name"] == "Agent with shared rules"
        outage_logs = [r for r in caplog.records if "Redis is unavailable" in r.message]
        assert len(outage_logs) == 1  # once per outage, not per request
        assert _metric(app, "prompt_registry_redis_errors_total", operation="get") >= 1

        own_redis.start()
        service.content.shared._retry_at = 0.0  # skip the rest of the back-off
        service.content.memory = MemoryTier(maxsize=16)
        assert _definition(client, "v1.0.0", "chat/minimal") == expected["v1.0.0"]
        assert any("Redis is available again" in r.message for r in caplog.records)
        with own_redis.client() as direct:
            assert direct.dbsize() == 1  # writing again
    finally:
        service.close()


def test_a_slow_redis_is_given_up_on(released_repo: LibraryRepo, own_redis: RedisServer) -> None:
    app = make_app(Settings(repo=str(released_repo.path), redis_url=own_redis.url, redis_timeout=0.05))
    client = app.test_client()
    blocker = own_redis.client()
    # DEBUG SLEEP blocks the whole server: every call from the registry times out.
    sleeper = threading.Thread(target=lambda: blocker.execute_command("DEBUG", "SLEEP", "1.5"))
    sleeper.start()
    try:
        threading.Event().wait(0.1)
        body = _definition(client, "v1.0.0", "chat/minimal")
        assert body["definition"]["name"] == "Minimal agent"
        assert _metric(app, "prompt_registry_redis_errors_total", operation="get") == 1
    finally:
        sleeper.join()
        blocker.close()
        app.extensions["prompt_registry.service"].close()


def test_the_worktree_is_cached_by_content(tmp_path: Any, redis_url: str) -> None:
    directory = tmp_path / "work"
    (directory / "ai_gateway/agents/chat").mkdir(parents=True)
    target = directory / "ai_gateway/agents/chat/minimal.yml"
    target.write_text(MINIMAL, encoding="utf-8")
    app = make_app(Settings(worktree=str(directory), redis_url=redis_url))
    try:
        client = app.test_client()
        before = client.get("/v1/agents/chat/minimal").get_json()
        target.write_text(MINIMAL.replace("helpful", "precise"), encoding="utf-8")
        after = client.get("/v1/agents/chat/minimal").get_json()
        assert after["definition"]["prompt_templates"]["system"] == "You are precise."
        assert after["digest"] != before["digest"]
    finally:
        app.extensions["prompt_registry.service"].close()


def test_redis_through_sentinel(released_repo: LibraryRepo, own_redis: RedisServer, tmp_path: Any) -> None:
    sentinel = SentinelServer(tmp_path / "sentinel", own_redis.port).start()
    app = make_app(Settings(repo=str(released_repo.path), redis_url=sentinel.url))
    try:
        assert _definition(app.test_client())["definition"]["name"] == "Agent with shared rules"
        with own_redis.client() as primary:
            assert primary.dbsize() == 1  # written to the primary the Sentinel named
        assert _metric(app, "prompt_registry_redis_errors_total", operation="set") == 0
    finally:
        app.extensions["prompt_registry.service"].close()
        sentinel.stop()


@pytest.mark.parametrize(
    "url",
    ["redis+sentinel://h1/x", "redis+sentinel://h1:1/", "redis+sentinel://h1:1/a/b", "http://x", "redis:/x", ""],
)
def test_malformed_redis_urls_are_refused_at_startup(url: str) -> None:
    from registry.errors import ConfigurationError

    if url == "":
        assert Settings.from_env({"REDIS_URL": ""}).redis_url is None  # empty means unset
        return
    with pytest.raises(ConfigurationError, match="Redis"):
        Settings(redis_url=url)
