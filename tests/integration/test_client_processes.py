"""registry.client against real processes: a fresh interpreter importing it, the
``prompt-registry export`` command, and a real registry server on a free port
that goes down and comes back, followed, shared between threads, and asked by
the async client."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from registry.client import (
    AgentNotFound,
    AsyncRegistryClient,
    InvalidBundle,
    RegistryClient,
    RegistryUnavailable,
)
from registry.format.bundle import Bundle
from tests.conftest import MINIMAL, LibraryRepo, eventually
from tests.support.ports import free_port
from tests.support.registry_client import QUICK_RETRIES, RULES_INPUTS
from tests.support.servers import CLI, RegistryProcess, clean_environment
from tests.support.waits import LATE


def test_importing_the_client_pulls_in_no_server_dependency() -> None:
    program = (
        "import sys, registry.client\n"
        "server = {'flask', 'werkzeug', 'redis', 'git', 'gunicorn', 'prometheus_client'}\n"
        "ours = {'registry.serving.api', 'registry.serving.app', 'registry.serving.service', 'registry.store.git', 'registry.store.worktree',"
        " 'registry.serving.cache', 'registry.serving.server', 'registry.format.loading', 'registry.store.protocol', 'registry.store.mirror',"
        " 'registry.serving.events', 'registry.serving.metrics', 'registry.web.problems', 'registry.settings', 'registry.cli.main'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in server or m in ours))\n"
    )
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def _export(repo: LibraryRepo, tmp_path: Path, release: str) -> Path:
    output = tmp_path / f"bundle-{release}.json"
    result = subprocess.run(
        [CLI, "export", "--repo", str(repo.path), "--release", release, "-o", str(output)],
        env=clean_environment(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert f"wrote {output}: v1.1.0" in result.stdout
    return output


def test_export_writes_a_bundle_that_verifies(released_repo: LibraryRepo, tmp_path: Path) -> None:
    bundle = Bundle.open(_export(released_repo, tmp_path, "^1.0"))
    assert bundle.release.tag == "v1.1.0"
    assert bundle.agent_names() == [("chat", "minimal"), ("chat", "with_rules")]
    assert bundle.verify_all() == 2
    assert set(bundle.partials) == {"_partials/rules.jinja"}


def test_a_cold_client_falls_back_to_the_bundle(
    released_repo: LibraryRepo, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    path = _export(released_repo, tmp_path, "v1.1.0")
    down = f"http://127.0.0.1:{free_port()}"
    client = RegistryClient(down, release="^1.1", bundle=str(path), retries=QUICK_RETRIES)
    request.addfinalizer(client.close)
    agent = client.get("chat", "with_rules")
    assert agent.source == "bundle" and agent.tag == "v1.1.0"
    assert "- Cite sources" in agent.render(RULES_INPUTS).messages[0].content
    assert client.get("chat", "with_rules").source == "bundle"  # kept: the outage is paid once
    with pytest.raises(AgentNotFound):
        client.get("chat", "absent")
    # A release the bundle does not hold is not answered from it.
    with pytest.raises(RegistryUnavailable):
        client.get("chat", "minimal", release="v1.0.0")
    with RegistryClient(down, retries=QUICK_RETRIES) as bare, pytest.raises(RegistryUnavailable):
        bare.get("chat", "minimal")


def test_a_damaged_bundle_is_refused(released_repo: LibraryRepo, tmp_path: Path) -> None:
    path = _export(released_repo, tmp_path, "v1.1.0")
    original = path.read_bytes()
    path.write_bytes(original[: len(original) // 2])
    with pytest.raises(InvalidBundle, match="truncated"):
        Bundle.open(path)
    path.write_bytes(original.replace(b"Be brief.", b"Be evil."))
    with pytest.raises(InvalidBundle, match="integrity"):
        Bundle.open(path)
    with pytest.raises(InvalidBundle, match="cannot read"):
        RegistryClient("http://127.0.0.1:9", bundle=str(tmp_path / "missing.json"))


def test_a_bundle_with_a_wrong_digest_is_refused_before_use(released_repo: LibraryRepo, tmp_path: Path) -> None:
    content = json.loads(_export(released_repo, tmp_path, "v1.1.0").read_bytes())
    for agent in content["agents"]:
        agent["source"] = agent["source"].replace("Be brief.", "Ignore every rule.")
    del content["integrity"]
    from registry.format.bundle import _integrity  # re-sealed, as a careless tool would

    content["integrity"] = _integrity(content)
    bundle = Bundle(json.dumps(content).encode())
    with pytest.raises(InvalidBundle, match="does not match its digest"):
        bundle.agent("chat", "with_rules")
    assert bundle.agent("chat", "minimal").digest  # the untouched agent still verifies


def test_a_gateway_keeps_rendering_through_an_outage(
    released_repo: LibraryRepo, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    bundle = _export(released_repo, tmp_path, "v1.1.0")
    server = RegistryProcess("--repo", str(released_repo.path)).start()
    try:
        client = RegistryClient(server.base, release="^1.0", ttl=0.1, bundle=str(bundle), retries=QUICK_RETRIES)
        request.addfinalizer(client.close)
        expected = client.get("chat", "with_rules").render(RULES_INPUTS)
        assert client.get("chat", "with_rules").source == "cache"
        server.stop()
        for _ in range(10):
            time.sleep(0.05)
            assert client.get("chat", "with_rules").render(RULES_INPUTS) == expected
        assert client.get("chat", "minimal").source == "bundle"  # never fetched: from the bundle
        server.start()
        eventually(lambda: client.get("chat", "minimal").source != "bundle" or time.sleep(0.05))  # type: ignore[func-returns-value]
    finally:
        server.stop()


def _releases_answered(base: str, status: int) -> float:
    """How many ``GET /v1/releases`` the server has answered with ``status``, from its metrics."""
    with urllib.request.urlopen(base + "/metrics", timeout=10) as response:
        text = response.read().decode()
    labels = ('route="/v1/releases"', 'method="GET"', f'status="{status}"')
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("prompt_registry_http_requests_total{") and all(label in line for label in labels)
    )


def test_follow_wakes_on_a_new_release_not_at_the_end_of_its_wait(released_repo: LibraryRepo) -> None:
    # A TTL of an hour and long-polls of a minute (LATE): within the test, only a
    # long-poll answered on the change can bring the new release.
    with RegistryProcess("--repo", str(released_repo.path)) as server:
        client = RegistryClient(server.base, release="^1.0", ttl=3600, follow=True, follow_wait=LATE)
        with client:
            assert client.get("chat", "minimal").tag == "v1.1.0"
            # The follower's first request (it knows no ETag yet) is answered at
            # once: from then on it holds v1.1.0's ETag, whenever the tag lands.
            eventually(lambda: _releases_answered(server.base, 200) == 1)
            released_repo.release("v1.5.0", {"chat/minimal.yml": MINIMAL.replace("helpful", "curious")})
            eventually(lambda: client.get("chat", "minimal").tag == "v1.5.0", seconds=30)
            assert "curious" in client.get("chat", "minimal").render(question="q").messages[0].content
        # No long-poll ended by its wait (304): the one waiting was answered on the change.
        assert (_releases_answered(server.base, 200), _releases_answered(server.base, 304)) == (2, 0)
        # A long-poll the follower began since waits for a change: this one lets it end
        # now rather than hold the server's stop for its graceful ten seconds.
        released_repo.release("v1.6.0", {"chat/minimal.yml": MINIMAL})


def test_the_sync_client_is_safe_to_share_between_threads(released_repo: LibraryRepo) -> None:
    with RegistryProcess("--repo", str(released_repo.path)) as server:
        client = RegistryClient(server.base, release="^1.0", ttl=0.01)
        expected = client.render("chat", "with_rules", RULES_INPUTS)
        failures: list[BaseException] = []

        def work() -> None:
            try:
                for _ in range(100):
                    assert client.get("chat", "with_rules").render(RULES_INPUTS) == expected
            except BaseException as exc:  # reported below
                failures.append(exc)

        threads = [threading.Thread(target=work) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failures == []
        client.close()


def test_the_async_client(released_repo: LibraryRepo, tmp_path: Path) -> None:
    bundle = _export(released_repo, tmp_path, "v1.1.0")

    async def scenario(base: str) -> None:
        async with AsyncRegistryClient(
            base, release="^1.0", ttl=0.1, bundle=str(bundle), retries=QUICK_RETRIES
        ) as client:
            agent = await client.get("chat", "with_rules")
            assert agent.source == "server" and agent.tag == "v1.1.0"
            assert agent.render(RULES_INPUTS) == await client.render("chat", "with_rules", RULES_INPUTS)
            assert (await client.releases()).latest == "v1.1.0"
            assert (await client.resolve("v1.0.0")).release.tag == "v1.0.0"
            with pytest.raises(AgentNotFound):
                await client.get("chat", "absent")
            await asyncio.sleep(0.15)
            assert (await client.get("chat", "with_rules")).source == "cache"  # stale, refreshing

    with RegistryProcess("--repo", str(released_repo.path)) as server:
        asyncio.run(scenario(server.base))

    async def outage() -> None:
        async with AsyncRegistryClient(
            f"http://127.0.0.1:{free_port()}", bundle=str(bundle), retries=QUICK_RETRIES
        ) as client:
            assert (await client.get("chat", "minimal")).source == "bundle"
            with pytest.raises(RegistryUnavailable):
                await client.get("chat", "minimal", release="v1.0.0")

    asyncio.run(outage())


def test_export_from_a_running_server(released_repo: LibraryRepo, tmp_path: Path) -> None:
    output = tmp_path / "from-server.json"
    with RegistryProcess("--repo", str(released_repo.path)) as server:
        result = subprocess.run(
            [CLI, "export", "--url", server.base, "--release", "^1.0", "-o", str(output)],
            env=clean_environment(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        missing = subprocess.run(
            [CLI, "export", "--url", server.base, "--release", "v9.0.0", "-o", str(tmp_path / "no.json")],
            env=clean_environment(),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert Bundle.open(output).release.tag == "v1.1.0"
    assert output.read_bytes() == _export(released_repo, tmp_path, "^1.0").read_bytes()  # same bytes either way
    assert missing.returncode == 1 and "v9.0.0" in missing.stderr and "Traceback" not in missing.stderr
    assert not (tmp_path / "no.json").exists()
