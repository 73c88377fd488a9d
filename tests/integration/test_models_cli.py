"""``prompt-registry run --models FILE``: each definition's provider bound
by the operator's models file to its own server, in one run; routes and
globs; a provider nobody bound; the SDKs' environment without a file;
typos refused with where they are; and keys that never show."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import LibraryRepo
from tests.support.anthropic_server import AnthropicServer
from tests.support.models_library import LIBRARY, environment, model_servers, prompt_registry, trace_spans

SECRET = "sk-test-9f8e7d6c5b4a39281706"


@pytest.fixture
def library(repo: LibraryRepo) -> Path:
    repo.release("v1.0.0", LIBRARY)
    return repo.path


def _run(library: Path, agent: str, *options: str, env: dict[str, str] | None = None, **inputs: str) -> Any:
    arguments = [f"{key}={value}" for key, value in inputs.items()]
    result = prompt_registry(
        "run", agent, "--repo", str(library), "--format", "json", "--model-retries", "0",
        *(word for argument in arguments for word in ("--input", argument)), *options,
        cwd=library.parent, env=env,
    )  # fmt: skip
    assert result.returncode in (0, 1), result.stderr
    assert "Traceback" not in result.stderr
    return json.loads(result.stdout), result


def _models_file(directory: Path, text: str) -> str:
    path = directory / "models.yml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_one_run_of_a_composite_calls_each_members_provider_at_its_own_server(library: Path, tmp_path: Path) -> None:
    with model_servers(
        tmp_path,
        local=[{"content": "Open Settings, then Profile."}],
        gateway=[{"content": '{"allow": true}'}],
    ) as servers:
        models = _models_file(
            tmp_path,
            "providers:\n"
            f"  vllm: {{kind: openai_compatible, base_url: '{servers['local'].base_url}', server: vllm}}\n"
            f"  anthropic: {{kind: openai_compatible, base_url: '{servers['gateway'].base_url}',"
            " api_key_env: GATEWAY_KEY, max_concurrency: 4}\n"
            "routes:\n"
            "  - match: {provider: anthropic, name: 'claude-3-5-haiku*'}\n"
            "    use: {name: gatekeeper}\n",
        )
        trace_file = tmp_path / "trace.json"
        answer, result = _run(
            library, "s/gated", "--models", models, "--trace-file", str(trace_file),
            env=environment(GATEWAY_KEY=SECRET), question="How do I change my e-mail?",
        )  # fmt: skip
        local, gateway = servers["local"].requests(), servers["gateway"].requests()
    assert (answer["outcome"], answer["output"]) == ("completed", "Open Settings, then Profile."), answer["error"]
    assert [request["model"] for request in local] == ["draft-model"]
    assert [request["model"] for request in gateway] == ["gatekeeper"]
    draft, gate = trace_spans(answer["trace"], "chat")
    assert {key: draft["attributes"].get(key) for key in _SERVED} == {
        "registry.model.requested.provider": "vllm",
        "gen_ai.request.model": "draft-model",
        "registry.provider.binding": "vllm",
        "registry.provider.kind": "openai_compatible",
        "registry.model.sent": "draft-model",
        "registry.route": None,
        "gen_ai.response.model": "draft-model",
    }
    assert {key: gate["attributes"].get(key) for key in _SERVED} == {
        "registry.model.requested.provider": "anthropic",
        "gen_ai.request.model": "claude-3-5-haiku-20241022",
        "registry.provider.binding": "anthropic",
        "registry.provider.kind": "openai_compatible",
        "registry.model.sent": "gatekeeper",
        "registry.route": "routes[0]: anthropic/claude-3-5-haiku* -> (same)/gatekeeper",
        "gen_ai.response.model": "gatekeeper",
    }
    assert answer["warnings"] == []
    assert SECRET not in result.stdout + result.stderr + trace_file.read_text(encoding="utf-8")


_SERVED = (
    "registry.model.requested.provider",
    "gen_ai.request.model",
    "registry.provider.binding",
    "registry.provider.kind",
    "registry.model.sent",
    "registry.route",
    "gen_ai.response.model",
)


def test_a_definition_naming_a_provider_nobody_bound_fails_before_any_call(library: Path, tmp_path: Path) -> None:
    with model_servers(tmp_path, local=[{"content": "unused", "repeat": True}]) as servers:
        models = _models_file(
            tmp_path, f"providers:\n  vllm: {{kind: openai_compatible, base_url: '{servers['local'].base_url}'}}\n"
        )
        answer, _ = _run(library, "s/ollama", "--models", models, question="hi")
        sent = servers["local"].requests()
    assert answer["outcome"] == "failed" and sent == []
    assert answer["error"] == (
        "s/ollama: model.provider 'ollama' is not bound (bound: vllm): bind it in a models file"
        " (--models FILE or REGISTRY_MODELS), or send every call to one endpoint with --model URL"
    )


def test_without_a_models_file_openai_and_anthropic_come_from_their_sdks_environment(
    library: Path, tmp_path: Path
) -> None:
    with model_servers(tmp_path, openai=[{"content": "from openai", "repeat": True}]) as servers:
        env = environment(OPENAI_BASE_URL=servers["openai"].base_url, OPENAI_API_KEY=SECRET)
        named, _ = _run(library, "s/openai", env=env, question="hi")
        unnamed, _ = _run(library, "s/plain", env=env, question="hi")
        claude, result = _run(library, "s/claude", env=env, question="hi")
        sent = servers["openai"].requests()
    assert (named["outcome"], named["output"]) == ("completed", "from openai")
    assert (unnamed["outcome"], unnamed["output"]) == ("completed", "from openai")
    assert [request["model"] for request in sent] == ["gpt-4o", "gpt-4o-mini"]
    [span] = trace_spans(named["trace"], "chat")
    assert (span["attributes"]["registry.provider.binding"], span["attributes"]["registry.provider.kind"]) == (
        "openai",
        "openai",
    )
    assert claude["outcome"] == "failed"
    assert claude["error"].startswith(
        "s/claude: the provider 'anthropic' (bound from the environment, without a models file) needs an API key"
        " in the environment variable ANTHROPIC_API_KEY, which is not set"
    )
    assert SECRET not in result.stdout + result.stderr


def test_the_models_file_can_come_from_registry_models(library: Path, tmp_path: Path) -> None:
    with model_servers(tmp_path, local=[{"content": "served", "repeat": True}]) as servers:
        models = _models_file(
            tmp_path,
            f"providers:\n  local: {{kind: openai_compatible, base_url: '{servers['local'].base_url}'}}\n"
            "default: local\n",
        )
        answer, _ = _run(library, "s/plain", env=environment(REGISTRY_MODELS=models), question="hi")
    assert (answer["outcome"], answer["output"]) == ("completed", "served")


def test_an_unset_key_variable_is_named_and_no_call_is_made(library: Path, tmp_path: Path) -> None:
    with model_servers(tmp_path, local=[{"content": "unused", "repeat": True}]) as servers:
        models = _models_file(
            tmp_path,
            f"providers:\n  openai: {{kind: openai_compatible, base_url: '{servers['local'].base_url}',"
            " api_key_env: LOCAL_GATEWAY_KEY}\n",
        )
        answer, _ = _run(library, "s/openai", "--models", models, question="hi")
        sent = servers["local"].requests()
    assert answer["outcome"] == "failed" and sent == []
    assert answer["error"] == (
        f"s/openai: the provider 'openai' ({models}:2:3) needs an API key in the environment variable"
        " LOCAL_GATEWAY_KEY, which is not set"
    )


def test_a_key_a_server_quotes_back_in_its_401_never_shows(library: Path, tmp_path: Path) -> None:
    refused = [{"status": 401, "message": "Incorrect API key provided: {authorization}"}]
    with model_servers(tmp_path, local=refused) as servers:
        models = _models_file(
            tmp_path,
            f"providers:\n  openai: {{kind: openai_compatible, base_url: '{servers['local'].base_url}',"
            " api_key_env: LOCAL_GATEWAY_KEY}\n",
        )
        trace_file = tmp_path / "trace.json"
        answer, result = _run(
            library, "s/openai", "--models", models, "--trace-file", str(trace_file),
            env=environment(LOCAL_GATEWAY_KEY=SECRET), question="hi",
        )  # fmt: skip
    assert answer["outcome"] == "failed"
    assert answer["error"] == (
        "the model call for s/openai failed: the model endpoint answered 401 Unauthorized:"
        " Incorrect API key provided: Bearer [redacted]"
    )
    assert SECRET not in result.stdout + result.stderr + trace_file.read_text(encoding="utf-8")


def test_a_reply_naming_another_model_is_a_warning(library: Path, tmp_path: Path) -> None:
    other = {
        "id": "x",
        "object": "chat.completion",
        "model": "qwen2.5-0.5b",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    }
    snapshot = {**other, "model": "gpt-4o-2024-08-06"}
    with model_servers(tmp_path, local=[{"raw": json.dumps(other)}, {"raw": json.dumps(snapshot)}]) as servers:
        models = _models_file(
            tmp_path, f"providers:\n  openai: {{kind: openai_compatible, base_url: '{servers['local'].base_url}'}}\n"
        )
        swapped, _ = _run(library, "s/openai", "--models", models, question="hi")
        dated, _ = _run(library, "s/openai", "--models", models, question="hi")
    assert swapped["outcome"] == "completed"
    assert swapped["warnings"] == ["s/openai: model 'gpt-4o' was asked for, and the reply names 'qwen2.5-0.5b'"]
    assert dated["warnings"] == []


TYPOS = """\
providers:
  anthropic: {kind: antropic, api_key_env: ANTHROPIC_API_KEY}
  local: {kind: openai_compatible, base_url: "http://127.0.0.1:8000/v1", sever: vllm}
routes:
  - match: {provider: anthropic}
    use: {provider: locl}
"""


@pytest.mark.parametrize("command", [["run", "s/plain", "--input", "question=hi"], ["agents", "serve", "--port", "0"]])
def test_a_models_file_with_typos_exits_2_with_each_problem_on_its_line(
    library: Path, tmp_path: Path, command: list[str]
) -> None:
    models = _models_file(tmp_path, TYPOS)
    result = prompt_registry(*command, "--repo", str(library), "--models", models, cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        f"prompt-registry: {models}:2:21: unknown kind 'antropic'; did you mean 'anthropic'?, and 2 more problems",
        f"  {models}:2:21: /providers/anthropic/kind: unknown kind 'antropic'; did you mean 'anthropic'?",
        f"  {models}:3:74: /providers/local: unknown key 'sever' for kind openai_compatible; did you mean 'server'?",
        f"  {models}:6:21: /routes/0/use/provider: 'locl' is not a provider of this file (anthropic, local);"
        " did you mean 'local'?",
    ]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--models", "m.yml", "--model", "http://127.0.0.1:9/v1"], "give --models FILE"),
        (["--models", "m.yml", "--api-key", SECRET], "--api-key is not for a models file"),
        (["--models", "missing.yml"], "models file missing.yml does not exist"),
    ],
)
def test_models_options_that_conflict_exit_2_with_one_line(
    library: Path, tmp_path: Path, options: list[str], message: str
) -> None:
    (tmp_path / "m.yml").write_text("providers:\n  openai: {kind: openai}\n", encoding="utf-8")
    result = prompt_registry("run", "s/plain", "--repo", str(library), "--input", "q=1", *options, cwd=tmp_path)
    lines = [line for line in result.stderr.splitlines() if line.startswith("prompt-registry:")]
    assert result.returncode == 2 and len(lines) == 1 and message in lines[0], result.stderr
    assert SECRET not in result.stderr


def test_one_composite_runs_its_anthropic_member_through_the_anthropic_sdk_and_its_openai_one_through_openai(
    library: Path, tmp_path: Path
) -> None:
    with model_servers(tmp_path, openai=[{"content": "Open Settings, then Profile."}]) as servers:
        claude = tmp_path / "claude"
        claude.mkdir()
        # The gate's parser is json with a schema: Claude is asked for it as a
        # forced tool named after the agent, whose input is the answer.
        with AnthropicServer([{"tool_calls": [{"name": "gate", "arguments": {"allow": True}}]}], claude) as anthropic:
            models = _models_file(
                tmp_path,
                "providers:\n"
                f"  vllm: {{kind: openai, base_url: '{servers['openai'].base_url}', api_key_env: OPENAI_KEY}}\n"
                f"  anthropic: {{kind: anthropic, base_url: '{anthropic.base_url}', api_key_env: CLAUDE_KEY}}\n",
            )
            answer, result = _run(
                library, "s/gated", "--models", models,
                env=environment(OPENAI_KEY=SECRET, CLAUDE_KEY=SECRET + "-claude"), question="How do I change my e-mail?",
            )  # fmt: skip
            to_claude = anthropic.entries()
        to_openai = servers["openai"].requests()
    assert (answer["outcome"], answer["output"]) == ("completed", "Open Settings, then Profile."), answer["error"]
    assert [request["model"] for request in to_openai] == ["draft-model"]
    [claude_call] = [entry for entry in to_claude if "body" in entry]
    assert claude_call["path"] == "/v1/messages" and claude_call["body"]["model"] == "claude-3-5-haiku-20241022"
    assert claude_call["body"]["tool_choice"] == {"type": "tool", "name": "gate"}
    draft, gate = trace_spans(answer["trace"], "chat")
    assert draft["attributes"]["registry.provider.kind"] == "openai"
    assert gate["attributes"]["registry.provider.kind"] == "anthropic"
    assert SECRET not in result.stdout + result.stderr
