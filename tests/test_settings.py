"""Settings from the environment into one frozen object."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest

from registry.errors import ConfigurationError
from registry.settings import BUNDLED_LIBRARY, Settings


def test_defaults_serve_the_bundled_library() -> None:
    settings = Settings.from_env({})
    assert settings.repo is None
    assert settings.served_worktree == str(BUNDLED_LIBRARY)
    assert (BUNDLED_LIBRARY / "ai_gateway" / "agents" / "chat" / "minimal.yml").is_file()


def test_environment_variables_are_read_and_overrides_win() -> None:
    environ = {"REGISTRY_REPO": "/srv/prompts", "REGISTRY_PORT": "9000", "REGISTRY_ROOT": "/prompts/agents/"}
    settings = Settings.from_env(environ, port=9100, host=None)
    assert settings.repo == "/srv/prompts"
    assert settings.port == 9100
    assert settings.host == "127.0.0.1"
    assert settings.root == "prompts/agents"


def test_settings_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Settings().port = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    "environ",
    [
        {"REGISTRY_PORT": "eighty"},
        {"REGISTRY_PORT": "70000"},
        {"REGISTRY_WORKERS": "0"},
        {"REGISTRY_KEEPALIVE": "0"},
        {"REGISTRY_KEEPALIVE": "2.5"},
        {"REGISTRY_KEEPALIVE": "86400"},
        {"REGISTRY_ROOT": "../outside"},
        {"REGISTRY_ROOT": "a/../../b"},
        {"REGISTRY_LOG_LEVEL": "loud"},
        {"REGISTRY_REPO": "/a", "REGISTRY_WORKTREE": "/b"},
        {"REGISTRY_AGENTS_ALLOW_PUSH_TO": "hooks.internal"},
        {"REGISTRY_AGENTS_ALLOW_PUSH_TO": "10.0.0.1/8"},
    ],
)
def test_bad_values_are_configuration_errors(environ: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError):
        Settings.from_env(environ)


def test_networks_push_notifications_may_reach_are_read_as_cidr() -> None:
    settings = Settings.from_env({"REGISTRY_AGENTS_ALLOW_PUSH_TO": "127.0.0.1, 10.1.0.0/16,fd00::/8"})
    assert settings.agents_allow_push_to == ("127.0.0.1/32", "10.1.0.0/16", "fd00::/8")
    assert [str(network) for network in settings.push_networks] == ["127.0.0.1/32", "10.1.0.0/16", "fd00::/8"]
    assert Settings.from_env({}, agents_allow_push_to=("::1",)).agents_allow_push_to == ("::1/128",)
    assert Settings().push_networks == ()


def test_the_sync_failing_limit_reaches_the_syncer(tmp_path: Path) -> None:
    from registry.serving.wiring import build_service

    upstream = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(upstream)], check=True)
    settings = Settings.from_env(
        {"REGISTRY_SYNC_FAILING_LIMIT": "120"}, remote=upstream.as_uri(), data_dir=str(tmp_path / "data")
    )
    service = build_service(settings)
    try:
        assert service.syncer is not None and service.syncer.failing_limit == 120
    finally:
        service.close()
    assert Settings.from_env({"REGISTRY_SYNC_FAILING_LIMIT": "0"}).sync_failing_limit == 0
    for bad in ("0.5", "-1", "9999999999"):
        with pytest.raises(ConfigurationError, match="sync failing limit"):
            Settings.from_env({"REGISTRY_SYNC_FAILING_LIMIT": bad})
