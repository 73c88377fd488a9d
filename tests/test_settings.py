"""Settings from the environment into one frozen object."""

from __future__ import annotations

import dataclasses

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
        {"REGISTRY_ROOT": "../outside"},
        {"REGISTRY_ROOT": "a/../../b"},
        {"REGISTRY_LOG_LEVEL": "loud"},
        {"REGISTRY_REPO": "/a", "REGISTRY_WORKTREE": "/b"},
    ],
)
def test_bad_values_are_configuration_errors(environ: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError):
        Settings.from_env(environ)
