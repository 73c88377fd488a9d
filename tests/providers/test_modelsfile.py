"""The models file: bindings and routes loaded from YAML, every problem
reported with its file and line, unknown keys and kinds with a "did you
mean", and keys named, never written."""

from __future__ import annotations

from pathlib import Path

import pytest

from registry.errors import ConfigurationError
from registry.providers.modelsfile import Binding, ModelsFile, load_models_file

GOOD = """\
providers:
  anthropic: {kind: anthropic, api_key_env: ANTHROPIC_API_KEY, max_concurrency: 8}
  openai: {kind: openai, api_key_env: OPENAI_API_KEY}
  local: {kind: openai_compatible, base_url: "http://127.0.0.1:8000/v1", server: llama.cpp, timeout: 30}
  vertex: {kind: anthropic_vertex, region: europe-west1, project_id: my-project}
  bedrock: {kind: anthropic_bedrock, aws_region: eu-central-1}
  azure: {kind: azure_openai, base_url: "https://me.openai.azure.com", api_version: "2024-10-21", deployment: gpt4o}
  mistral: {kind: litellm, provider: mistral, max_retries: 0}
routes:
  - match: {provider: anthropic, name: "claude-3-5-haiku*"}
    use: {provider: local, name: smollm2}
  - match: {provider: vllm}
    use: {provider: local}
default: local
"""


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "models.yml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def _problems(tmp_path: Path, text: str) -> list[tuple[int | None, str]]:
    with pytest.raises(ConfigurationError) as raised:
        load_models_file(_write(tmp_path, text))
    issues = raised.value.errors
    assert issues, "a models file error lists its problems"
    assert str(raised.value).startswith(f"{tmp_path / 'models.yml'}:{issues[0].line}:")
    return [(issue.line, issue.message) for issue in issues]


def test_a_models_file_binds_each_kind_with_its_own_keys(tmp_path: Path) -> None:
    models = load_models_file(_write(tmp_path, GOOD))
    assert list(models.providers) == ["anthropic", "openai", "local", "vertex", "bedrock", "azure", "mistral"]
    local = models.providers["local"]
    assert (local.kind, local.server, local.timeout, local.key_env, local.key_required) == (
        "openai_compatible",
        "llama.cpp",
        30.0,
        None,
        False,
    )
    assert models.providers["anthropic"].max_concurrency == 8
    assert models.providers["anthropic"].where == f"{tmp_path / 'models.yml'}:2:3"
    assert (models.providers["vertex"].region, models.providers["vertex"].project_id) == ("europe-west1", "my-project")
    assert models.providers["azure"].deployment == "gpt4o"
    assert (models.providers["mistral"].library_provider, models.providers["mistral"].max_retries) == ("mistral", 0)
    assert models.default_provider == "local"


def test_a_key_is_required_where_the_file_names_its_variable_or_a_vendor_is_called_directly(tmp_path: Path) -> None:
    models = load_models_file(
        _write(
            tmp_path,
            "providers:\n"
            "  named: {kind: openai_compatible, base_url: 'http://h/v1', api_key_env: GATEWAY_KEY}\n"
            "  vendor: {kind: anthropic}\n"
            "  proxied: {kind: openai, base_url: 'http://proxy/v1'}\n",
        )
    )
    keys = {name: (b.key_env, b.key_required) for name, b in models.providers.items()}
    assert keys == {
        "named": ("GATEWAY_KEY", True),
        "vendor": ("ANTHROPIC_API_KEY", True),
        "proxied": ("OPENAI_API_KEY", False),
    }


def test_routes_take_the_first_match_with_globs_on_the_model_name(tmp_path: Path) -> None:
    models = load_models_file(_write(tmp_path, GOOD))
    routed = models.target("anthropic", "claude-3-5-haiku-20241022")
    assert routed is not None and routed.route is not None
    assert (routed.binding.name, routed.model) == ("local", "smollm2")
    assert routed.route.written == "routes[0]: anthropic/claude-3-5-haiku* -> local/smollm2"
    not_routed = models.target("anthropic", "claude-3-5-sonnet-20241022")
    assert not_routed is not None and not_routed.route is None
    assert (not_routed.binding.name, not_routed.model) == ("anthropic", "claude-3-5-sonnet-20241022")
    by_provider = models.target("vllm", "qwen")
    assert by_provider is not None and (by_provider.binding.name, by_provider.model) == ("local", "qwen")
    assert models.target("ollama", "llama3") is None


def test_a_definition_naming_no_provider_takes_the_files_default_else_openai(tmp_path: Path) -> None:
    with_default = load_models_file(_write(tmp_path, GOOD))
    target = with_default.target(None, "anything")
    assert target is not None and target.binding.name == "local"
    without = load_models_file(_write(tmp_path, "providers:\n  openai: {kind: openai}\n  x: {kind: anthropic}\n"))
    target = without.target(None, "gpt-4o")
    assert target is not None and target.binding.name == "openai"
    only_local = load_models_file(
        _write(tmp_path, "providers:\n  local: {kind: openai_compatible, base_url: 'http://h'}\n")
    )
    problem = only_local.binding_for(None)
    assert isinstance(problem, str)
    assert problem.startswith("no model.provider, and the default provider 'openai' is not bound (bound: local)")


def test_what_serves_a_provider_before_any_call(tmp_path: Path) -> None:
    models = load_models_file(_write(tmp_path, GOOD))
    openai = models.binding_for("openai")
    assert isinstance(openai, Binding) and openai.name == "openai"
    vllm = models.binding_for("vllm")  # a route without a name glob: always local
    assert isinstance(vllm, Binding) and vllm.name == "local"
    assert models.binding_for("anthropic") is None  # depends on the model name: checked per call
    problem = models.binding_for("ollama")
    assert problem == (
        "model.provider 'ollama' is not bound (bound: anthropic, azure, bedrock, local, mistral, openai, vertex):"
        " bind it in a models file (--models FILE or REGISTRY_MODELS), or send every call to one endpoint"
        " with --model URL"
    )


def test_without_a_file_openai_and_anthropic_are_bound_where_their_sdks_look() -> None:
    models = ModelsFile.from_environment({"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    openai, anthropic = models.providers["openai"], models.providers["anthropic"]
    assert (openai.kind, openai.base_url, openai.key_env, openai.key_required) == (
        "openai",
        "http://127.0.0.1:9/v1",
        "OPENAI_API_KEY",
        False,
    )
    assert (anthropic.kind, anthropic.base_url, anthropic.key_env, anthropic.key_required) == (
        "anthropic",
        None,
        "ANTHROPIC_API_KEY",
        True,
    )
    assert models.default_provider == "openai"


def test_every_problem_is_reported_with_its_line_and_a_did_you_mean(tmp_path: Path) -> None:
    problems = _problems(
        tmp_path,
        "providers:\n"
        "  anthropic: {kind: antropic}\n"
        "  openai: {kind: openai, base_ur: 'http://x/v1'}\n"
        "  local: {kind: vllm, base_url: 'http://h/v1'}\n"
        "  llama: {kind: openai_compatible, base_url: 'http://h/v1', server: llamacpp, max_concurrency: 0}\n"
        "  az: {kind: azure_openai, region: westeurope}\n"
        "routes:\n"
        "  - match: {provider: anthropic, nme: 'claude*'}\n"
        "    use: {provider: locl}\n"
        "default: opena\n"
        "rutes: []\n",
    )
    assert problems == [
        (2, "unknown kind 'antropic'; did you mean 'anthropic'?"),
        (3, "unknown key 'base_ur' for kind openai; did you mean 'base_url'?"),
        (4, "unknown kind 'vllm'; did you mean 'openai_compatible' with `server: vllm`?"),
        (5, "server must be one of llama.cpp, vllm, ollama, litellm, not 'llamacpp'; did you mean 'llama.cpp'?"),
        (5, "max_concurrency must be an integer from 1 to 10000, not 0"),
        (6, "a provider of kind azure_openai needs `base_url:`"),
        (6, "a provider of kind azure_openai needs `api_version:`"),
        (6, "unknown key 'region' for kind azure_openai; region is a key of kind anthropic_vertex"),
        (8, "unknown key 'nme'; did you mean 'name'?"),
        (9, "'locl' is not a provider of this file (anthropic, az, llama, local, openai); did you mean 'local'?"),
        (10, "'opena' is not a provider of this file (anthropic, az, llama, local, openai); did you mean 'openai'?"),
        (11, "unknown key 'rutes'; did you mean 'routes'?"),
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "is empty; it needs a `providers:` mapping"),
        ("- a list\n", ":1:1: a models file is a mapping with a `providers:` mapping, not a list"),
        ("routes: []\n", "a models file needs a `providers:` mapping of names to bindings"),
        ("providers: {}\n", "`providers:` must be a mapping of names to bindings, not an empty mapping"),
        ("providers:\n  x: {base_url: 'http://h'}\n", ":2:6: a provider needs a `kind:`, one of openai, azure_openai,"),
        (
            "providers:\n  x: {kind: openai, timeout: -1}\n",
            "timeout must be seconds, more than 0 and at most 86400, not -1",
        ),
        (
            "providers:\n  x: {kind: anthropic_vertex, api_key_env: K}\n",
            "unknown key 'api_key_env' for kind anthropic_vertex",
        ),
        ("providers:\n  x: {kind: litellm}\n", "a provider of kind litellm needs `provider:`"),
        ("providers:\n  x: {kind: openai_compatible, base_url: ftp://h}\n", "base_url must be an http(s) URL"),
        ("providers:\n  x: {kind: openai}\nroutes:\n  - {match: {}, use: {name: y}}\n", "not an empty mapping"),
        ("providers:\n  x: {kind: openai}\nroutes:\n  - {use: {name: y}}\n", "a route needs `match:`"),
        ("providers: [\n", "models.yml:2:1: "),
    ],
)
def test_a_file_that_cannot_be_used_is_refused_with_where(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        load_models_file(_write(tmp_path, text))
    assert expected in str(raised.value)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"models file .*nowhere.yml does not exist"):
        load_models_file(tmp_path / "nowhere.yml")


def test_a_key_written_where_its_variable_belongs_is_never_quoted(tmp_path: Path) -> None:
    secret = "sk-proj-abc123def456"
    with pytest.raises(ConfigurationError) as raised:
        load_models_file(
            _write(
                tmp_path,
                f"providers:\n  openai: {{kind: openai, api_key_env: {secret}}}\n"
                f"  local: {{kind: openai_compatible, base_url: 'http://user:{secret}@h/v1'}}\n",
            )
        )
    text = str(raised.value) + "".join(issue.message for issue in raised.value.errors)
    assert "api_key_env names the environment variable that holds the key" in text
    assert "base_url must not carry credentials" in text
    assert secret not in text
