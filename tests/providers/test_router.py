"""The router: each call through the binding its definition's provider
names (or a route's), stamped with who served it; keys read from the
environment at a binding's first use and never shown; concurrency bounded
per binding; every adapter closed. Here each binding is served by the
scripted model; tests/integration/test_models_cli.py runs the real adapters
against real servers."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from registry.errors import ModelError
from registry.executor.scripted import ScriptedModel
from registry.providers.chat import ChatModel, ChatReply, ChatRequest, StreamItem, TextDelta
from registry.providers.modelsfile import Binding, ModelsFile, load_models_file
from registry.providers.router import RoutingChatModel

MODELS = """\
providers:
  anthropic: {kind: anthropic, api_key_env: ANTHROPIC_KEY}
  local: {kind: openai_compatible, base_url: "http://127.0.0.1:1/v1", max_concurrency: 2}
  gated: {kind: openai_compatible, base_url: "http://127.0.0.1:2/v1", api_key_env: GATED_KEY}
routes:
  - match: {provider: anthropic, name: "claude-3-5-haiku*"}
    use: {provider: local, name: smollm2}
  - match: {provider: nightly, name: "exp-*"}
    use: {provider: local}
default: local
"""


class Built:
    """The adapters a router built, each a scripted model echoing who it is."""

    def __init__(self, replies: dict[str, list[Any]] | None = None) -> None:
        self.replies = replies or {}
        self.keys: dict[str, str | None] = {}
        self.models: dict[str, ChatModel] = {}

    def __call__(self, binding: Binding, *, api_key: str | None, max_retries: int) -> ChatModel:
        self.keys[binding.name] = api_key
        replies = self.replies.get(binding.name, [{"content": f"from {binding.name}", "repeat": True}])
        model = ScriptedModel.from_replies(replies, source=binding.name)
        self.models[binding.name] = model
        return model


def _models(tmp_path: Path, text: str = MODELS) -> ModelsFile:
    path = tmp_path / "models.yml"
    path.write_text(text, encoding="utf-8")
    return load_models_file(path)


def _request(provider: str | None, model: str, text: str = "hello") -> ChatRequest:
    return ChatRequest(model=model, messages=({"role": "user", "content": text},), provider=provider)


def _router(tmp_path: Path, built: Built, environ: dict[str, str] | None = None) -> RoutingChatModel:
    keys = {"ANTHROPIC_KEY": "a-key", "GATED_KEY": "g-key"} if environ is None else environ
    return RoutingChatModel(_models(tmp_path), environ=keys, factory=built)


def test_each_call_goes_where_its_provider_or_route_says_and_is_stamped(tmp_path: Path) -> None:
    built = Built()
    router = _router(tmp_path, built)

    async def calls() -> list[ChatReply]:
        try:
            return [
                await router.complete(_request("anthropic", "claude-3-5-haiku-20241022")),
                await router.complete(_request("anthropic", "claude-3-5-sonnet-20241022")),
                await router.complete(_request(None, "anything")),
                await router.complete(_request("gated", "g1")),
            ]
        finally:
            await router.aclose()

    routed, direct, default, gated = asyncio.run(calls())
    assert (routed.content, routed.model) == ("from local", "smollm2")
    assert routed.served_by is not None
    assert routed.served_by.as_dict() == {
        "provider": "local",
        "kind": "openai_compatible",
        "model": "smollm2",
        "route": "routes[0]: anthropic/claude-3-5-haiku* -> local/smollm2",
    }
    assert direct.content == "from anthropic"
    assert direct.served_by is not None and direct.served_by.as_dict() == {
        "provider": "anthropic",
        "kind": "anthropic",
        "model": "claude-3-5-sonnet-20241022",
    }
    assert default.content == "from local" and default.served_by is not None and default.served_by.route is None
    assert gated.content == "from gated"
    assert built.keys == {"local": None, "anthropic": "a-key", "gated": "g-key"}


def test_a_provider_nobody_bound_is_refused_before_the_first_call(tmp_path: Path) -> None:
    router = _router(tmp_path, Built())
    assert router.binding_problem("ollama") == (
        "model.provider 'ollama' is not bound (bound: anthropic, gated, local): bind it in a models file"
        " (--models FILE or REGISTRY_MODELS), or send every call to one endpoint with --model URL"
    )
    assert router.binding_problem("local") is None
    assert router.binding_problem(None) is None
    with pytest.raises(ModelError) as raised:
        asyncio.run(router.complete(_request("ollama", "llama3")))
    assert raised.value.reason == "unbound"
    assert "model.provider 'ollama' is not bound" in str(raised.value)


def test_a_provider_served_by_a_name_glob_is_checked_at_each_call(tmp_path: Path) -> None:
    router = _router(tmp_path, Built())
    assert router.binding_problem("nightly") is None

    async def calls() -> tuple[ChatReply, ModelError]:
        routed = await router.complete(_request("nightly", "exp-7"))
        try:
            await router.complete(_request("nightly", "stable-1"))
        except ModelError as exc:
            return routed, exc
        raise AssertionError("a model no route matches was served")

    routed, refused = asyncio.run(calls())
    assert routed.served_by is not None and routed.served_by.provider == "local"
    assert refused.reason == "unbound" and "model.provider 'nightly' is not bound" in refused.detail


def test_an_unset_key_is_named_by_its_variable_before_the_first_call(tmp_path: Path) -> None:
    built = Built()
    router = _router(tmp_path, built, environ={"ANTHROPIC_KEY": "a-key"})
    problem = router.binding_problem("gated")
    assert problem == (
        f"the provider 'gated' ({tmp_path / 'models.yml'}:4:3) needs an API key in the environment variable"
        " GATED_KEY, which is not set"
    )
    assert "gated" not in built.models
    assert router.binding_problem("local") is None
    with pytest.raises(ModelError) as raised:
        asyncio.run(router.complete(_request("gated", "m")))
    assert (raised.value.reason, raised.value.detail) == ("unbound", problem)


def test_a_key_quoted_in_an_adapters_error_is_redacted_and_the_chain_dropped(tmp_path: Path) -> None:
    secret = "g-key-0123456789"
    built = Built({"gated": [{"error": {"status": 401, "message": f"Incorrect API key provided: {secret}"}}]})
    router = _router(tmp_path, built, environ={"GATED_KEY": secret})
    with pytest.raises(ModelError) as raised:
        asyncio.run(router.complete(_request("gated", "m")))
    error = raised.value
    assert secret not in str(error) and "Incorrect API key provided: [redacted]" in str(error)
    assert (error.reason, error.http_status) == ("status", 401)
    assert error.__cause__ is None and error.__suppress_context__


def test_an_error_that_quotes_no_key_goes_on_unchanged(tmp_path: Path) -> None:
    built = Built({"local": [{"error": {"status": 503, "message": "overloaded"}}]})
    router = _router(tmp_path, built)
    with pytest.raises(ModelError) as raised:
        asyncio.run(router.complete(_request("local", "m")))
    assert str(raised.value) == "the scripted model answered 503 Service Unavailable: overloaded"


def test_a_stream_is_forwarded_and_its_reply_stamped(tmp_path: Path) -> None:
    router = _router(tmp_path, Built())

    async def streamed() -> list[StreamItem]:
        return [item async for item in router.stream(_request("anthropic", "claude-3-5-haiku-1"))]

    *deltas, reply = asyncio.run(streamed())
    assert all(isinstance(delta, TextDelta) for delta in deltas)
    assert "".join(delta.text for delta in deltas if isinstance(delta, TextDelta)) == "from local"
    assert isinstance(reply, ChatReply) and reply.served_by is not None
    assert (reply.served_by.provider, reply.served_by.model) == ("local", "smollm2")


class Gate:
    """A model whose calls wait until the test opens the gate: how many are in flight shows."""

    description = "a gate"

    def __init__(self) -> None:
        self.in_flight = 0
        self.most = 0
        self.open = asyncio.Event()
        self.closed = False

    async def complete(self, request: ChatRequest) -> ChatReply:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        await self.open.wait()
        self.in_flight -= 1
        return ChatReply(content="done", model=request.model)

    def stream(self, request: ChatRequest) -> AsyncIterator[StreamItem]:
        raise NotImplementedError

    def binding_problem(self, provider: str | None) -> str | None:
        return None

    async def aclose(self) -> None:
        self.closed = True


def test_calls_in_flight_through_a_binding_stay_within_its_max_concurrency(tmp_path: Path) -> None:
    gate = Gate()
    router = RoutingChatModel(_models(tmp_path), environ={}, factory=lambda binding, **_: gate)

    async def calls() -> tuple[int, list[ChatReply]]:
        tasks = [asyncio.create_task(router.complete(_request("local", f"m{n}"))) for n in range(5)]
        for _ in range(20):  # every task runs as far as it can
            await asyncio.sleep(0)
        waiting = gate.in_flight
        gate.open.set()
        return waiting, await asyncio.gather(*tasks)

    waiting, replies = asyncio.run(calls())
    assert waiting == 2 and gate.most == 2
    assert [reply.model for reply in replies] == [f"m{n}" for n in range(5)]


def test_closing_the_router_closes_every_adapter_it_opened_even_when_one_fails(tmp_path: Path) -> None:
    class Failing(Gate):
        async def aclose(self) -> None:
            self.closed = True
            raise OSError("could not close")

    adapters: dict[str, Gate] = {}

    def factory(binding: Binding, **_: Any) -> ChatModel:
        adapters[binding.name] = Failing() if binding.name == "anthropic" else Gate()
        adapters[binding.name].open.set()
        return adapters[binding.name]

    router = RoutingChatModel(_models(tmp_path), environ={"ANTHROPIC_KEY": "k", "GATED_KEY": "k"}, factory=factory)

    async def scenario() -> None:
        for provider in ("anthropic", "local", "gated"):
            await router.complete(_request(provider, "m"))
        await router.aclose()

    with pytest.raises(OSError, match="could not close"):
        asyncio.run(scenario())
    assert sorted(name for name, adapter in adapters.items() if adapter.closed) == ["anthropic", "gated", "local"]


def test_an_openai_compatible_binding_is_served_by_the_openai_adapter(tmp_path: Path) -> None:
    router = RoutingChatModel(_models(tmp_path), environ={}, max_retries=0)
    assert router.binding_problem("local") is None

    async def call() -> None:
        try:
            await router.complete(_request("local", "m"))
        finally:
            await router.aclose()

    with pytest.raises(ModelError) as raised:  # nothing listens on port 1
        asyncio.run(call())
    assert raised.value.reason == "connection"
    assert str(raised.value).startswith("the connection to the model endpoint http://127.0.0.1:1/v1 failed")


def test_importing_the_package_loads_no_sdk_and_a_missing_library_says_how_to_install_it(tmp_path: Path) -> None:
    (tmp_path / "models.yml").write_text("providers:\n  m: {kind: litellm, provider: mistral}\n", encoding="utf-8")
    script = (
        "import sys\n"
        "import registry.providers\n"
        "print(sorted(m for m in ('openai', 'anthropic', 'litellm') if m in sys.modules))\n"
        "sys.modules['litellm'] = None  # as if the extra were not installed\n"
        "from registry.providers import RoutingChatModel, load_models_file\n"
        f"router = RoutingChatModel(load_models_file({str(tmp_path / 'models.yml')!r}), environ={{}})\n"
        "print(router.binding_problem('m'))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    loaded, problem = done.stdout.splitlines()
    assert loaded == "[]"
    assert problem == (
        f"the provider 'm' ({tmp_path / 'models.yml'}:2:3) is of kind litellm, whose library litellm is not"
        " installed: pip install 'prompt-registry[providers]'"
    )


def test_the_executor_and_the_command_line_load_no_sdk_until_a_model_needs_one() -> None:
    # Every command imports the executor (run, test, agents serve): the
    # openai SDK's import (about a second) waits for an OpenAI model.
    script = (
        "import sys\n"
        "import registry.executor, registry.cli.main\n"
        "print(sorted(m for m in ('openai', 'anthropic', 'litellm') if m in sys.modules))\n"
        "from registry.executor import OpenAIChatModel\n"
        "print(OpenAIChatModel.__module__, 'openai' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.splitlines() == ["[]", "registry.providers.openai_chat True"]
