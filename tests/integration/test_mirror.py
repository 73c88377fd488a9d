"""Serving a remote through a local mirror: sync, webhooks, readiness, faults;
over real git fetches from a remote on disk, with background sync threads and
worker processes."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from registry.settings import redact
from registry.store.mirror import GitMirror, Syncer, SyncError
from tests.conftest import MINIMAL, Upstream, eventually

SECRET = "hook-secret"


def _tags(client: FlaskClient) -> list[str]:
    return [r["tag"] for r in client.get("/v1/releases").get_json()["releases"]]


def _ready(client: FlaskClient) -> bool:
    return client.get("/readyz").status_code == 200


def test_the_first_sync_makes_the_registry_ready(upstream: Upstream, make_mirror_app: Callable[..., Flask]) -> None:
    client = make_mirror_app(upstream.url).test_client()
    eventually(lambda: _ready(client))
    body = client.get("/readyz").get_json()
    assert body["sync"]["remote"] == upstream.url and body["sync"]["last_error"] is None
    assert _tags(client) == ["v1.2.0"]
    assert client.get("/v1/agents/chat/minimal?release=^1.2").headers["X-Registry-Release"] == "v1.2.0"


def test_a_pushed_tag_appears_right_after_a_webhook(upstream: Upstream, make_mirror_app: Callable[..., Flask]) -> None:
    client = make_mirror_app(upstream.url, webhook_secret=SECRET).test_client()
    eventually(lambda: _ready(client))
    upstream.publish("v2.0.0", {"chat/minimal.yml": MINIMAL.replace("helpful", "terse")})
    upstream.publish("v1.3.0", {"chat/minimal.yml": MINIMAL.replace("helpful", "kind")})
    assert _tags(client) == ["v1.2.0"]  # nothing fetched yet: the interval is an hour
    response = client.post("/v1/hooks/git", headers={"X-Gitlab-Token": SECRET}, data=b"{}")
    assert response.status_code == 202
    eventually(lambda: "v1.3.0" in _tags(client), seconds=10)
    pinned = client.get("/v1/agents/chat/minimal?release=^1.2")
    assert pinned.headers["X-Registry-Release"] == "v1.3.0"
    assert pinned.get_json()["definition"]["prompt_templates"]["system"] == "You are kind."


def test_new_tags_appear_within_one_sync_interval(upstream: Upstream, make_mirror_app: Callable[..., Flask]) -> None:
    client = make_mirror_app(upstream.url, sync_interval=1).test_client()
    eventually(lambda: _ready(client))
    upstream.publish("v1.3.0", {"chat/minimal.yml": MINIMAL})
    eventually(lambda: "v1.3.0" in _tags(client), seconds=10)


def test_channels_are_read_from_the_remotes_default_branch(
    upstream: Upstream, make_mirror_app: Callable[..., Flask]
) -> None:
    upstream.work.write("channels.yml", "production: v1.2.0\n", under_agents=False)
    upstream.publish("v1.2.1", {})
    client = make_mirror_app(upstream.url).test_client()
    eventually(lambda: _ready(client))
    assert client.get("/v1/agents?release=@production").headers["X-Registry-Release"] == "v1.2.0"


def test_a_force_moved_and_a_deleted_tag_upstream(upstream: Upstream, make_mirror_app: Callable[..., Flask]) -> None:
    upstream.publish("v1.3.0", {"chat/minimal.yml": MINIMAL.replace("helpful", "kind")})
    app = make_mirror_app(upstream.url, webhook_secret=SECRET)
    client = app.test_client()
    eventually(lambda: _ready(client))
    first = upstream.work.git("rev-parse", "v1.2.0")
    upstream.work.write("chat/minimal.yml", MINIMAL.replace("helpful", "sneaky"))
    moved = upstream.work.commit("rewrite")
    upstream.work.git("tag", "-f", "v1.2.0", moved)
    upstream.work.git("push", "-q", "--force", "origin", "main", "--tags")
    upstream.work.git("push", "-q", "origin", ":refs/tags/v1.3.0")
    client.post("/v1/hooks/git", headers={"X-Gitlab-Token": SECRET})
    eventually(lambda: "v1.3.0" not in _tags(client))
    response = client.get("/v1/agents/chat/minimal?release=v1.2.0")
    assert response.headers["X-Registry-Commit"] == first
    assert response.get_json()["definition"]["prompt_templates"]["system"] == "You are helpful."
    assert client.get("/readyz").get_json()["moved_tags"] == [{"tag": "v1.2.0", "serving": first, "moved_to": moved}]


def test_an_unreachable_remote_is_not_ready_and_hides_its_credentials(
    make_mirror_app: Callable[..., Flask], caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    url = f"http://deploy:s3cret-token@127.0.0.1:{port}/prompts.git"
    client = make_mirror_app(url).test_client()
    eventually(lambda: client.get("/readyz").get_json(force=True).get("sync", {}).get("last_error") is not None)
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.get_json(force=True)
    assert body["type"] == "/problems/not-ready"
    assert body["sync"]["remote"] == f"http://***@127.0.0.1:{port}/prompts.git"
    releases = client.get("/v1/releases")
    assert releases.status_code == 503 and releases.get_json(force=True)["type"] == "/problems/not-ready"
    everything = " ".join(
        [response.get_data(as_text=True), releases.get_data(as_text=True), *(r.getMessage() for r in caplog.records)]
    )
    assert "s3cret-token" not in everything and "deploy:" not in everything


def test_a_remote_that_fails_later_keeps_serving_what_was_fetched(
    upstream: Upstream, make_mirror_app: Callable[..., Flask], tmp_path: Path
) -> None:
    client = make_mirror_app(upstream.url, webhook_secret=SECRET).test_client()
    eventually(lambda: _ready(client))
    upstream.bare.rename(tmp_path / "gone.git")
    client.post("/v1/hooks/git", headers={"X-Gitlab-Token": SECRET})
    eventually(lambda: client.get("/readyz").get_json()["sync"]["last_error"] is not None)
    assert client.get("/readyz").status_code == 200
    assert client.get("/v1/agents/chat/minimal").status_code == 200


@pytest.mark.parametrize(
    ("headers", "body", "status"),
    [
        ({}, b"{}", 401),
        ({"X-Gitlab-Token": "wrong"}, b"{}", 401),
        ({"X-Gitlab-Token": ""}, b"{}", 401),
        ({"X-Hub-Signature-256": "sha256=" + "0" * 64}, b"{}", 401),
        ({"X-Hub-Signature-256": "sha1=abc"}, b"{}", 401),
        ({"X-Hub-Signature-256": "sha256=" + hmac.new(SECRET.encode(), b"{}", hashlib.sha256).hexdigest()}, b"{}", 202),
        ({"X-Gitlab-Token": SECRET}, b"x" * (2 * 1024 * 1024), 413),
    ],
)
def test_webhook_secrets_are_checked(
    upstream: Upstream, make_mirror_app: Callable[..., Flask], headers: dict[str, str], body: bytes, status: int
) -> None:
    client = make_mirror_app(upstream.url, webhook_secret=SECRET).test_client()
    response = client.post("/v1/hooks/git", headers=headers, data=body)
    assert response.status_code == status
    if status != 202:
        assert response.mimetype == "application/problem+json"


def test_a_signature_for_another_body_is_refused(upstream: Upstream, make_mirror_app: Callable[..., Flask]) -> None:
    client = make_mirror_app(upstream.url, webhook_secret=SECRET).test_client()
    signature = "sha256=" + hmac.new(SECRET.encode(), b'{"ref": "a"}', hashlib.sha256).hexdigest()
    response = client.post("/v1/hooks/git", headers={"X-Hub-Signature-256": signature}, data=b'{"ref": "b"}')
    assert response.get_json(force=True)["type"] == "/problems/unauthorized"


def test_webhooks_are_off_without_a_secret_or_a_remote(
    upstream: Upstream, make_mirror_app: Callable[..., Flask], client: FlaskClient
) -> None:
    without_secret = make_mirror_app(upstream.url).test_client()
    assert without_secret.post("/v1/hooks/git", headers={"X-Gitlab-Token": SECRET}).status_code == 404
    assert client.post("/v1/hooks/git", headers={"X-Gitlab-Token": SECRET}).status_code == 404


def test_fifty_concurrent_webhooks_coalesce(upstream: Upstream, make_mirror_app: Callable[..., Flask]) -> None:
    app = make_mirror_app(upstream.url, webhook_secret=SECRET)
    client = app.test_client()
    eventually(lambda: _ready(client))
    syncer = app.extensions["prompt_registry.service"].syncer
    before = syncer.fetches
    barrier = threading.Barrier(50)

    def hook() -> int:
        barrier.wait()
        return app.test_client().post("/v1/hooks/git", headers={"X-Gitlab-Token": SECRET}).status_code

    threads_results: list[int] = []
    threads = [threading.Thread(target=lambda: threads_results.append(hook())) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert threads_results == [202] * 50
    time.sleep(1.0)
    assert 1 <= syncer.fetches - before <= 3


def test_reads_during_fetches_are_never_torn(upstream: Upstream, make_mirror_app: Callable[..., Flask]) -> None:
    app = make_mirror_app(upstream.url, webhook_secret=SECRET)
    client = app.test_client()
    eventually(lambda: _ready(client))
    stop = threading.Event()
    failures: list[str] = []

    def read() -> None:
        reader = app.test_client()
        while not stop.is_set():
            response = reader.get("/v1/agents/chat/minimal?release=^1")
            body = response.get_json()
            tag = response.headers["X-Registry-Release"]
            expected = "You are helpful." if tag == "v1.2.0" else f"You are helpful {tag}."
            if body["release"]["commit"] != response.headers["X-Registry-Commit"] or (
                body["definition"]["prompt_templates"]["system"] != expected
            ):
                failures.append(json.dumps(body)[:200])

    readers = [threading.Thread(target=read) for _ in range(4)]
    for reader in readers:
        reader.start()
    for minor in range(3, 7):
        tag = f"v1.{minor}.0"
        upstream.publish(tag, {"chat/minimal.yml": MINIMAL.replace("helpful.", f"helpful {tag}.")})
        client.post("/v1/hooks/git", headers={"X-Gitlab-Token": SECRET})
        eventually(lambda tag=tag: tag in _tags(client))  # type: ignore[misc]  # mypy infers no lambda with a default
    stop.set()
    for reader in readers:
        reader.join()
    assert failures == []


def test_a_slow_remote_times_out(tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(5)  # accepts connections, never answers
        mirror = GitMirror(f"http://127.0.0.1:{listener.getsockname()[1]}/x.git", tmp_path / "m.git", timeout=1.5)
        mirror.ensure()
        with pytest.raises(SyncError, match="timed out"):
            mirror.fetch()


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://user:pass@host/x.git", "https://***@host/x.git"),
        ("https://oauth2:glpat-abc@gitlab.example:8443/g/p.git", "https://***@gitlab.example:8443/g/p.git"),
        ("https://host/x.git", "https://host/x.git"),
        ("file:///srv/x.git", "file:///srv/x.git"),
    ],
)
def test_credentials_are_redacted_from_urls(url: str, shown: str) -> None:
    assert redact(url) == shown


def test_a_replayed_notification_only_triggers_another_coalesced_fetch(
    upstream: Upstream, make_mirror_app: Callable[..., Flask]
) -> None:
    app = make_mirror_app(upstream.url, webhook_secret=SECRET)
    client = app.test_client()
    eventually(lambda: _ready(client))
    body = b'{"ref": "refs/tags/v1.2.0"}'
    signature = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    for _ in range(3):
        assert client.post("/v1/hooks/git", headers={"X-Hub-Signature-256": signature}, data=body).status_code == 202
    time.sleep(0.5)
    assert _tags(client) == ["v1.2.0"]
    assert client.get("/readyz").status_code == 200


def _mirror_dir(app: Flask) -> Path:
    return Path(app.extensions["prompt_registry.service"].syncer.mirror.directory)


def _age(paths: list[Path], seconds: float) -> None:
    """Date files back, as if they had been left there ``seconds`` ago."""
    then = time.time() - seconds
    for path in paths:
        os.utime(path, (then, then))


def _install_hook(mirror: Path, script: str) -> Path:
    """A reference-transaction hook in the mirror: git runs it while it moves refs."""
    hook = mirror / "hooks" / "reference-transaction"
    hook.write_text("#!/bin/sh\n" + script, encoding="utf-8")
    hook.chmod(0o755)
    return hook


# Killed as a timeout or the OOM killer would kill it: after it has locked the
# refs it is about to move (v1.4.0 among them), before it moves any of them.
_KILL_GIT_WHILE_MOVING_V140 = """\
[ "$1" = prepared ] || exit 0
if grep -q refs/tags/v1.4.0; then kill -9 "$PPID"; fi
"""


def test_a_stale_ref_lock_is_cleared_and_every_pushed_tag_is_fetched(
    upstream: Upstream, make_mirror_app: Callable[..., Flask], caplog: pytest.LogCaptureFixture
) -> None:
    app = make_mirror_app(upstream.url)
    client = app.test_client()
    eventually(lambda: _ready(client))
    mirror = _mirror_dir(app)
    # What a git killed while updating refs leaves behind.
    lock = mirror / "refs" / "tags" / "v1.3.0.lock"
    lock.write_text("0" * 40 + "\n", encoding="utf-8")
    _age([lock], 3600)
    upstream.publish("v1.3.0", {"chat/minimal.yml": MINIMAL.replace("helpful", "kind")})
    upstream.publish("v1.4.0", {"chat/minimal.yml": MINIMAL.replace("helpful", "calm")})
    caplog.set_level(logging.INFO, logger="registry.store.mirror")

    assert app.extensions["prompt_registry.service"].syncer.sync_now()
    assert _tags(client) == ["v1.4.0", "v1.3.0", "v1.2.0"]
    assert client.get("/v1/agents/chat/minimal?release=v1.3.0").status_code == 200
    assert not lock.exists()
    assert client.get("/readyz").get_json()["sync"]["last_error"] is None
    assert any("refs/tags/v1.3.0.lock" in r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
    metrics = client.get("/metrics").get_data(as_text=True)
    assert "prompt_registry_sync_stale_locks_cleared_total 1.0" in metrics


def test_a_fresh_lock_is_left_alone_and_the_failed_fetch_changes_nothing_served(
    upstream: Upstream, make_mirror_app: Callable[..., Flask]
) -> None:
    app = make_mirror_app(upstream.url)
    client = app.test_client()
    eventually(lambda: _ready(client))
    lock = _mirror_dir(app) / "refs" / "tags" / "v1.3.0.lock"
    lock.write_text("0" * 40 + "\n", encoding="utf-8")  # as if a git were writing it right now
    upstream.publish("v1.3.0", {"chat/minimal.yml": MINIMAL.replace("helpful", "kind")})
    upstream.publish("v1.4.0", {"chat/minimal.yml": MINIMAL.replace("helpful", "calm")})

    assert not app.extensions["prompt_registry.service"].syncer.sync_now()
    assert lock.exists()
    # All or nothing: not v1.4.0 without v1.3.0.
    assert _tags(client) == ["v1.2.0"]
    assert client.get("/v1/agents/chat/minimal?release=^1").headers["X-Registry-Release"] == "v1.2.0"


def test_a_fetch_killed_while_moving_refs_changes_nothing_and_the_next_sync_heals(
    upstream: Upstream, make_mirror_app: Callable[..., Flask]
) -> None:
    app = make_mirror_app(upstream.url)
    client = app.test_client()
    eventually(lambda: _ready(client))
    syncer = app.extensions["prompt_registry.service"].syncer
    mirror = _mirror_dir(app)
    hook = _install_hook(mirror, _KILL_GIT_WHILE_MOVING_V140)
    upstream.publish("v1.3.0", {"chat/minimal.yml": MINIMAL.replace("helpful", "kind")})
    upstream.publish("v1.4.0", {"chat/minimal.yml": MINIMAL.replace("helpful", "calm")})

    assert not syncer.sync_now()
    assert _tags(client) == ["v1.2.0"]
    assert client.get("/v1/agents/chat/minimal?release=^1").headers["X-Registry-Release"] == "v1.2.0"
    left = list(mirror.rglob("*.lock"))
    assert any(lock.name == "v1.4.0.lock" for lock in left), "the killed git left its ref locks"

    hook.unlink()
    _age(left, 3600)  # the next sync, long after
    assert syncer.sync_now()
    assert _tags(client) == ["v1.4.0", "v1.3.0", "v1.2.0"]
    assert not list(mirror.rglob("*.lock"))


def test_readyz_is_not_ready_once_syncs_have_failed_for_longer_than_the_limit(
    upstream: Upstream, make_mirror_app: Callable[..., Flask], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_mirror_app(upstream.url)
    client = app.test_client()
    eventually(lambda: _ready(client))
    syncer = app.extensions["prompt_registry.service"].syncer
    syncer.failing_limit = 1.0
    upstream.bare.rename(tmp_path / "gone.git")
    assert not syncer.sync_now()
    assert client.get("/readyz").status_code == 200  # one failure is not yet a reason

    eventually(lambda: client.get("/readyz").status_code == 503, seconds=10)
    body = client.get("/readyz").get_json(force=True)
    assert body["type"] == "/problems/not-ready"
    assert "failed for" in body["detail"] and body["sync"]["failing_since"] is not None
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'prompt_registry_readiness{state="sync-failing"} 1.0' in metrics
    assert 'prompt_registry_readiness{state="ready"} 0.0' in metrics
    assert any("failed for" in r.getMessage() for r in caplog.records if r.name == "registry.serving.service")
    # What was fetched is still served to whoever asks.
    assert client.get("/v1/agents/chat/minimal").status_code == 200

    (tmp_path / "gone.git").rename(upstream.bare)
    assert syncer.sync_now()
    assert client.get("/readyz").status_code == 200
    assert 'prompt_registry_readiness{state="ready"} 1.0' in client.get("/metrics").get_data(as_text=True)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/releases"),
        ("GET", "/v1/agents"),
        ("GET", "/v1/agents/chat/minimal?release=^1"),
        ("POST", "/v1/agents/chat/minimal/render"),
        ("POST", "/v1/agents/chat/minimal/parse"),
        ("GET", "/v1/diff?from=v1.2.0&to=latest"),
        ("GET", "/v1/bundle"),
    ],
)
def test_before_its_first_sync_a_replica_answers_not_ready_with_retry_after(
    upstream: Upstream, make_mirror_app: Callable[..., Flask], tmp_path: Path, method: str, path: str
) -> None:
    later = tmp_path / "later.git"  # unreachable at first
    app = make_mirror_app(later.as_uri())
    client = app.test_client()
    syncer = app.extensions["prompt_registry.service"].syncer
    eventually(lambda: syncer.status().last_error is not None)
    body = {"inputs": {"question": "Q"}} if path.endswith("/render") else {"output": "Final Answer: hi"}

    response = client.open(path, method=method, json=body if method == "POST" else None)
    assert response.status_code == 503
    assert response.get_json(force=True)["type"] == "/problems/not-ready"
    assert int(response.headers["Retry-After"]) > 0

    upstream.bare.rename(later)  # the remote becomes reachable
    assert syncer.sync_now()
    assert client.open(path, method=method, json=body if method == "POST" else None).status_code == 200


# -- workers of one replica --------------------------------------------------------

_ENSURE_AT_ONCE = """
import os, sys, time
from registry.store.mirror import GitMirror
go = sys.argv[3]
while not os.path.exists(go):
    time.sleep(0.001)
GitMirror(sys.argv[1], sys.argv[2]).ensure()
"""


def test_workers_booting_together_make_one_mirror(upstream: Upstream, tmp_path: Path) -> None:
    """Every worker of a replica ensures the mirror as it boots; with a new
    data directory they all find none, and only one may make it."""
    directory, go = tmp_path / "data" / "mirror.git", tmp_path / "go"
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", _ENSURE_AT_ONCE, upstream.url, str(directory), str(go)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    time.sleep(0.5)  # all of them waiting for the signal
    go.touch()
    outcomes = [(worker.communicate(timeout=60)[1], worker.returncode) for worker in workers]
    assert [error for error, status in outcomes if status != 0] == []
    mirror = GitMirror(upstream.url, directory)
    mirror.fetch()
    assert (
        "v1.2.0"
        in subprocess.run(
            ["git", "-C", str(directory), "tag"], capture_output=True, text=True, check=True
        ).stdout.split()
    )


_WAIT_UNDER_GEVENT = """
import gevent.monkey
gevent.monkey.patch_all()
import sys
import gevent
from registry.store.filelock import exclusively
def tick():
    while True:
        print("tick", flush=True)
        gevent.sleep(0.01)
ticker = gevent.spawn(tick)
# The ticker cannot run before this greenlet yields: every tick printed
# after "waiting" ran while the lock was being waited for.
print("waiting", flush=True)
with exclusively(sys.argv[1]):
    ticker.kill()
    print("acquired", flush=True)
"""


def test_waiting_for_the_sync_lock_leaves_a_gevent_worker_serving(tmp_path: Path) -> None:
    """A gevent worker shares one thread among its connections: while it waits
    for another process's lock, its other greenlets must keep running."""
    lock = tmp_path / "sync.lock"
    holder_code = (
        "import sys\nfrom registry.store.filelock import exclusively\n"
        "with exclusively(sys.argv[1]):\n    print('held', flush=True)\n    sys.stdin.read()\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", holder_code, str(lock)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as holder:
        assert holder.stdin is not None and holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        with subprocess.Popen(
            [sys.executable, "-c", _WAIT_UNDER_GEVENT, str(lock)], stdout=subprocess.PIPE, text=True
        ) as waiter:
            assert waiter.stdout is not None
            # Were the wait to block the thread, no tick would come: the lock
            # is then let go after a minute, and "acquired" fails the test.
            watchdog = threading.Timer(60, holder.stdin.close)
            watchdog.start()
            assert waiter.stdout.readline().strip() == "waiting"
            # The holder keeps the lock until the other greenlet has run ten
            # times: the wait did not block the worker's one thread.
            assert [waiter.stdout.readline().strip() for _ in range(10)] == ["tick"] * 10
            watchdog.cancel()
            holder.stdin.close()
            rest = waiter.stdout.read().split()
        assert waiter.wait(timeout=60) == 0
    assert rest[-1] == "acquired" and set(rest[:-1]) <= {"tick"}


def test_a_worker_whose_sibling_fetched_after_it_was_asked_does_not_fetch_again(
    upstream: Upstream, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    first = Syncer(GitMirror(upstream.url, data / "mirror.git"), interval=3600, data_dir=data)
    second = Syncer(GitMirror(upstream.url, data / "mirror.git"), interval=3600, data_dir=data)
    begun = second.status().fetches_started  # what the second saw when it was asked
    assert first.sync_now()
    # Its turn at the lock comes after the first's fetch, which began after
    # it was asked, and succeeded: nothing more to fetch.
    assert second._fetch_locked(begun)
    assert (first.fetches, second.fetches) == (1, 0)
    # Asked while that fetch was under way (or after it began), it fetches:
    # the fetch under way may have missed what it was asked for.
    assert second._fetch_locked(second.status().fetches_started)
    assert second.fetches == 1
    assert second.status().fetches_started == second.status().last_success_fetch == 2
