"""The OpenAI adapter per kind of endpoint and per server, against the
scripted server's flavors (its own process, through the official SDK): what
each request carried, as the server logged it, and that each flavor takes
what the adapter sends it. Credentials never reach an error or a repr."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pytest

from registry.errors import ConfigurationError, ModelError
from registry.providers.chat import Adjustment, ChatReply, ChatRequest, ResponseFormat, StreamItem, ToolCallRequest
from registry.providers.openai_chat import OpenAIChatModel
from registry.providers.openai_request import NOT_STREAMED
from tests.support.header_server import Answer, HeaderServer
from tests.support.openai_server import ScriptedModelServer
from tests.support.ports import free_port

SEARCH = {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}
NOW = {"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}}
SCHEMA = {"type": "object", "required": ["label"], "properties": {"label": {"type": "string"}}}
PARAMS = {"temperature": 0.2, "top_p": 0.9, "max_tokens": 50, "stop": ["END"], "seed": 7, "top_k": 40, "mirostat": 2}
CALLED = {"tool_calls": [{"name": "search", "arguments": {"query": "tokens"}}]}
SECRET = "sk-test-0123456789abcdef"
_T = TypeVar("_T")


def _request(text: str = "hello", **fields: Any) -> ChatRequest:
    return ChatRequest(model="test-model", messages=({"role": "user", "content": text},), **fields)


def _complete(request: ChatRequest, **options: Any) -> ChatReply:
    async def scenario() -> ChatReply:
        model = OpenAIChatModel(**{"api_key": "test-key", "max_retries": 0, **options})
        try:
            return await model.complete(request)
        finally:
            await model.aclose()

    return asyncio.run(scenario())


def _with_model(base_url: str, use: Callable[[OpenAIChatModel], Awaitable[_T]], /, **options: Any) -> _T:
    """``use`` a model of ``base_url`` (made with ``options``), closed afterwards."""

    async def scenario() -> _T:
        model = OpenAIChatModel(base_url=base_url, api_key="test-key", max_retries=0, **options)
        try:
            return await use(model)
        finally:
            await model.aclose()

    return asyncio.run(scenario())


async def _last(items: AsyncIterator[StreamItem]) -> ChatReply:
    """A stream's reply, its last item."""
    found = [item async for item in items]
    assert isinstance(found[-1], ChatReply)
    return found[-1]


def _failure(request: ChatRequest, **options: Any) -> ModelError:
    with pytest.raises(ModelError) as caught:
        _complete(request, **options)
    return caught.value


# --- parameters ------------------------------------------------------------------------


def test_openai_is_sent_its_own_parameters_and_its_strict_validation_takes_them(tmp_path: Path) -> None:
    with ScriptedModelServer([{"content": "ok"}], tmp_path, flavor="strict") as server:
        _complete(_request(params=PARAMS), base_url=server.base_url, kind="openai")
        (body,) = server.requests()
    assert {key: body[key] for key in ("temperature", "top_p", "max_completion_tokens", "stop", "seed")} == {
        "temperature": 0.2,
        "top_p": 0.9,
        "max_completion_tokens": 50,
        "stop": ["END"],
        "seed": 7,
    }
    # OpenAI refuses arguments it does not know: top_k and mirostat were not sent.
    assert "top_k" not in body and "mirostat" not in body and "max_tokens" not in body


@pytest.mark.parametrize("model", ["o4-mini", "gpt-5-mini", "gpt-4o"])
def test_openai_reasoning_models_get_max_completion_tokens_which_they_take(model: str, tmp_path: Path) -> None:
    with ScriptedModelServer([{"content": "ok", "repeat": True}], tmp_path, flavor="strict") as server:
        whole = _complete(
            replace(_request(params={"max_tokens": 64}), model=model), base_url=server.base_url, kind="openai"
        )
        streamed = _with_model(
            server.base_url,
            lambda chat: _last(chat.stream(replace(_request(params={"max_tokens": 64}), model=model))),
            kind="openai",
        )
        sent = server.requests()
    assert whole.content == streamed.content == "ok"
    assert [(body["max_completion_tokens"], "max_tokens" in body) for body in sent] == [(64, False)] * 2


def test_max_tokens_sent_to_an_openai_reasoning_model_is_refused_as_openai_refuses_it(tmp_path: Path) -> None:
    # What a binding of OpenAI as a compatible server would send: max_tokens,
    # which o4-mini refuses. OpenAI's kinds never send it.
    with ScriptedModelServer([{"content": "ok"}], tmp_path, flavor="strict") as server:
        request = replace(_request(params={"max_tokens": 64}), model="o4-mini")
        error = _failure(request, base_url=server.base_url, kind="openai_compatible")
    assert (error.reason, error.http_status) == ("status", 400)
    assert str(error) == (
        "the model endpoint answered 400 Bad Request: Unsupported parameter: 'max_tokens' is not supported"
        " with this model. Use 'max_completion_tokens' instead."
    )


def test_openai_refuses_what_a_compatible_server_is_sent(tmp_path: Path) -> None:
    # The same parameters, as an OpenAI-compatible server takes them, are
    # what OpenAI's validation refuses: the kind decides what is sent.
    with ScriptedModelServer([{"content": "ok"}], tmp_path, flavor="strict") as server:
        error = _failure(_request(params=PARAMS), base_url=server.base_url)
    assert str(error) == "the model endpoint answered 400 Bad Request: Unrecognized request argument supplied: mirostat"


def test_a_compatible_server_gets_the_local_options_in_the_body(tmp_path: Path) -> None:
    with ScriptedModelServer([{"content": "ok"}], tmp_path) as server:
        _complete(_request(params=PARAMS), base_url=server.base_url, server="vllm")
        (body,) = server.requests()
    assert (body["top_k"], body["mirostat"], body["seed"]) == (40, 2, 7)


# --- tools ------------------------------------------------------------------------------


def test_llama_cpp_calls_the_tools_it_is_offered_because_a_tool_choice_goes_with_them(tmp_path: Path) -> None:
    with ScriptedModelServer([CALLED], tmp_path, flavor="llama.cpp") as server:
        reply = _complete(_request(tools=(SEARCH,)), base_url=server.base_url, server="llama.cpp")
        (body,) = server.requests()
    assert body["tool_choice"] == "auto"
    assert reply.tool_calls == (ToolCallRequest("call_1_0", "search", '{"query": "tokens"}'),)


def test_llama_cpp_is_asked_for_the_one_tool_by_name_when_a_tool_is_required(tmp_path: Path) -> None:
    with ScriptedModelServer([CALLED], tmp_path, flavor="llama.cpp") as server:
        request = _request(tools=(SEARCH,), tool_choice="required")
        reply = _complete(request, base_url=server.base_url, server="llama.cpp")
        (body,) = server.requests()
    assert body["tool_choice"] == {"type": "function", "function": {"name": "search"}}
    assert [call.name for call in reply.tool_calls] == ["search"]


def test_llama_cpp_without_the_server_named_answers_500_to_required(tmp_path: Path) -> None:
    # What the server hint is for: the same request to the same server,
    # sent as a generic compatible server would take it.
    with ScriptedModelServer([CALLED], tmp_path, flavor="llama.cpp") as server:
        error = _failure(_request(tools=(SEARCH, NOW), tool_choice="required"), base_url=server.base_url)
    assert (error.reason, error.http_status) == ("status", 500)


def test_llama_cpp_gets_auto_for_required_among_several_tools(tmp_path: Path) -> None:
    with ScriptedModelServer([CALLED], tmp_path, flavor="llama.cpp") as server:
        request = _request(tools=(SEARCH, NOW), tool_choice="required")
        reply = _complete(request, base_url=server.base_url, server="llama.cpp")
        (body,) = server.requests()
    assert body["tool_choice"] == "auto" and reply.tool_calls


def test_a_tools_name_is_sent_as_a_named_function_and_strict_takes_it(tmp_path: Path) -> None:
    with ScriptedModelServer([CALLED], tmp_path, flavor="strict") as server:
        _complete(_request(tools=(SEARCH, NOW), tool_choice="search"), base_url=server.base_url, kind="openai")
        (body,) = server.requests()
    assert body["tool_choice"] == {"type": "function", "function": {"name": "search"}}


def test_the_round_after_a_tool_call_reaches_llama_cpp_with_empty_content_and_a_tool_message(
    tmp_path: Path,
) -> None:
    call = {"id": "call_1_0", "type": "function", "function": {"name": "search", "arguments": '{"query": "x"}'}}
    turns = (
        {"role": "user", "content": "find x"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1_0", "content": "x is found"},
    )
    request = ChatRequest(model="smollm2", messages=turns, tools=(SEARCH,))
    with ScriptedModelServer([{"content": "Found it."}], tmp_path, flavor="llama.cpp") as server:
        reply = _complete(request, base_url=server.base_url, server="llama.cpp")
        (body,) = server.requests()
    assert reply.content == "Found it."
    assert body["messages"][1] == {"role": "assistant", "content": "", "tool_calls": [call]}
    assert body["messages"][2] == {"role": "tool", "tool_call_id": "call_1_0", "content": "x is found"}


def test_vllm_without_auto_tool_choice_says_how_to_start_it(tmp_path: Path) -> None:
    with ScriptedModelServer([CALLED], tmp_path, flavor="vllm", auto_tool_choice=False) as server:
        error = _failure(_request(tools=(SEARCH,)), base_url=server.base_url, server="vllm")
    assert str(error) == (
        "the model endpoint answered 400 Bad Request: "
        '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
    )


def test_vllm_answers_404_for_a_model_it_does_not_serve(tmp_path: Path) -> None:
    with ScriptedModelServer([{"content": "ok"}], tmp_path, flavor="vllm", served_model="qwen") as server:
        error = _failure(_request(), base_url=server.base_url, server="vllm")
        assert _complete(ChatRequest("qwen", ({"role": "user", "content": "hi"},)), base_url=server.base_url).content
    assert (error.http_status, str(error)) == (
        404,
        "the model endpoint answered 404 Not Found: The model `test-model` does not exist.",
    )


# --- structured output ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("flavor", "options", "expected"),
    [
        (
            "strict",
            {"kind": "openai"},
            {"type": "json_schema", "json_schema": {"name": "classify", "schema": SCHEMA, "strict": False}},
        ),
        (
            "vllm",
            {"server": "vllm"},
            {"type": "json_schema", "json_schema": {"name": "classify", "schema": SCHEMA, "strict": False}},
        ),
        ("llama.cpp", {"server": "llama.cpp"}, {"type": "json_object", "schema": SCHEMA}),
        ("llama.cpp", {}, {"type": "json_object"}),
        ("generic", {"server": "ollama"}, {"type": "json_object"}),
    ],
)
def test_structured_output_is_asked_for_as_each_server_takes_it(
    flavor: str, options: dict[str, Any], expected: dict[str, Any], tmp_path: Path
) -> None:
    request = _request(response_format=ResponseFormat(SCHEMA, "classify"))
    with ScriptedModelServer([{"content": '{"label": "x"}'}], tmp_path, flavor=flavor) as server:
        reply = _complete(request, base_url=server.base_url, **options)
        (body,) = server.requests()
    assert body["response_format"] == expected
    assert reply.content == '{"label": "x"}'


def test_llama_cpp_refuses_a_json_schema_which_is_why_it_is_not_sent_one(tmp_path: Path) -> None:
    request = _request(response_format=ResponseFormat(SCHEMA, "classify"))
    with ScriptedModelServer([{"content": "{}"}], tmp_path, flavor="llama.cpp") as server:
        error = _failure(request, base_url=server.base_url, server="vllm")  # the wrong hint
    assert error.http_status == 500 and "Input should be 'text' or 'json_object'" in str(error)


def test_the_reply_says_what_was_sent_otherwise_than_asked(tmp_path: Path) -> None:
    required = _request(tools=(SEARCH, NOW), tool_choice="required")
    structured = _request(response_format=ResponseFormat(SCHEMA, "classify"))
    replies: list[dict[str, Any]] = [CALLED, CALLED, {"content": '{"label": "x"}'}, {"content": "as asked"}]

    async def scenario(model: OpenAIChatModel) -> list[ChatReply]:
        streamed = [item async for item in model.stream(required)]
        assert isinstance(streamed[-1], ChatReply)
        return [
            await model.complete(required),
            streamed[-1],
            await model.complete(structured),
            await model.complete(_request()),
        ]

    with ScriptedModelServer(replies, tmp_path, flavor="llama.cpp") as server:
        whole, streamed, json_mode, plain = _with_model(server.base_url, scenario, server="llama.cpp")
        sent = server.requests()
    assert [body.get("tool_choice") for body in sent[:2]] == ["auto", "auto"]
    auto = Adjustment("tool_choice", "tool_choice required was sent as auto: llama.cpp refuses required")
    assert whole.adjustments == (auto,)
    assert streamed.adjustments == (auto, NOT_STREAMED)
    assert json_mode.adjustments == (
        Adjustment("response_format", "response_format was sent as json_object with the schema, which llama.cpp takes"),
    )
    assert plain.adjustments == ()
    assert [call.name for call in whole.tool_calls] == ["search"]


# --- Azure OpenAI ------------------------------------------------------------------------


def test_azure_openai_is_called_on_its_deployments_path_with_its_api_version_and_key_header(tmp_path: Path) -> None:
    with ScriptedModelServer([{"content": "from azure"}, {"content": "again"}], tmp_path, flavor="strict") as server:
        options = {"base_url": server.azure_endpoint, "kind": "azure_openai", "api_version": "2024-10-21"}
        reply = _complete(_request(), azure_deployment="gpt4o-prod", **options)
        _complete(_request(params={"max_tokens": 64}), **options)
        first, second = [entry for entry in server.entries() if "path" in entry]
    assert reply.content == "from azure"
    assert first["path"] == "/openai/deployments/gpt4o-prod/chat/completions?api-version=2024-10-21"
    # Without a deployment, the SDK's: the request's model names it.
    assert second["path"] == "/openai/deployments/test-model/chat/completions?api-version=2024-10-21"
    assert first["auth"] == "api-key"
    # A deployment's name says nothing of its model: max_completion_tokens, always.
    assert (second["body"]["max_completion_tokens"], "max_tokens" in second["body"]) == (64, False)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"kind": "azure_openai", "base_url": "https://x.openai.azure.com"}, "kind azure_openai needs an api_version"),
        ({"kind": "azure_openai", "api_version": "2024-10-21"}, "kind azure_openai needs base_url"),
        ({"kind": "openai", "api_version": "2024-10-21"}, "api_version and azure_deployment are Azure's"),
        ({"kind": "azure", "base_url": "http://h/v1"}, "kind 'azure' is not one of openai, azure_openai"),
        ({"kind": "openai", "server": "vllm"}, "server 'vllm' is for kind openai_compatible, not openai"),
        ({"base_url": "http://h/v1", "server": "llamacpp"}, "did you mean 'llama.cpp'?"),
        ({"base_url": "http://h/v1", "max_concurrency": 0}, "max_concurrency must be 1 or more"),
    ],
)
def test_a_binding_the_adapter_cannot_serve_is_a_configuration_error(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        OpenAIChatModel(**options)
    assert message in str(caught.value)


# --- credentials ---------------------------------------------------------------------


def test_a_key_an_endpoint_echoes_in_its_error_is_redacted() -> None:
    body = b'{"error": {"message": "Incorrect API key provided: ' + SECRET.encode() + b'. See your keys."}}'
    with HeaderServer([Answer(401, body)]) as server:
        error = _failure(_request(), base_url=server.base_url, api_key=SECRET)
    assert str(error) == (
        "the model endpoint answered 401 Unauthorized: Incorrect API key provided: [redacted]. See your keys."
    )
    assert SECRET not in repr(error)


def test_credentials_in_the_url_are_in_no_error_and_no_repr() -> None:
    url = f"http://user:{SECRET}@127.0.0.1:{free_port()}/v1"
    error = _failure(_request(), base_url=url, api_key=SECRET)

    async def shown() -> str:
        model = OpenAIChatModel(base_url=url, api_key=SECRET)
        await model.aclose()
        return f"{model!r} {model.description}"

    assert error.reason == "connection" and SECRET not in str(error) and "user:" not in str(error)
    assert SECRET not in asyncio.run(shown())
