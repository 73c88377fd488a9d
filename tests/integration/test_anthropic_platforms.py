"""Claude on each platform the SDK reaches, against the scripted Messages API
server: Anthropic's own API with the SDK's usual environment, Vertex AI
(an access token) and Bedrock (a SigV4 signature by boto3, or an API key;
streams in AWS's event stream encoding), and the settings each refuses."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from registry.errors import ConfigurationError, ModelError
from registry.providers.chat import ChatReply, ChatRequest, StreamItem, TextDelta, ToolCallRequest
from tests.support.anthropic_server import AnthropicServer

if TYPE_CHECKING:
    from registry.providers.anthropic_chat import AnthropicChatModel

ACCESS_KEY = "AKIDEXAMPLEKEY1234"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
TOKEN = "ya29.test-access-token-0042"
SEARCH = {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {}}}}


@pytest.fixture(autouse=True)
def no_ambient_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The SDKs' usual environment, emptied: no key, region or profile of the
    machine's, no credentials file, and never the cloud metadata servers."""
    for name in (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_PROFILE",
        "ANTHROPIC_VERTEX_PROJECT_ID",
        "ANTHROPIC_VERTEX_BASE_URL",
        "ANTHROPIC_BEDROCK_BASE_URL",
        "CLOUD_ML_REGION",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_PROFILE",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_BEARER_TOKEN_BEDROCK",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("ANTHROPIC_CONFIG_DIR", raising=False)
    # Where the SDK looks for a profile (~/.config/anthropic): an empty home.
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def _request(text: str = "hello", **fields: Any) -> ChatRequest:
    return ChatRequest(model="claude-test", messages=({"role": "user", "content": text},), **fields)


def _anthropic(**options: Any) -> AnthropicChatModel:
    # Imported here, not at the top: the anthropic SDK's import is seconds of CPU,
    # which every pytest worker would otherwise pay while collecting, running this module or not.
    from registry.providers.anthropic_chat import AnthropicChatModel

    return AnthropicChatModel(**options)


def _run(options: dict[str, Any], request: ChatRequest | None = None, *, stream: bool = False) -> list[StreamItem]:
    """One call (whole, or streamed) to a fresh model, closed afterwards: what it gave."""

    async def scenario() -> list[StreamItem]:
        model = _anthropic(backoff=0.01, max_backoff=0.05, **options)
        try:
            if stream:
                return [item async for item in model.stream(request or _request())]
            return [await model.complete(request or _request())]
        finally:
            await model.aclose()

    return asyncio.run(scenario())


def _reply(options: dict[str, Any], request: ChatRequest | None = None) -> ChatReply:
    return cast(ChatReply, _run(options, request)[-1])


def _failure(options: dict[str, Any], *, stream: bool = False) -> ModelError:
    with pytest.raises(ModelError) as caught:
        _run(options, stream=stream)
    return caught.value


def _refusal(**options: Any) -> str:
    with pytest.raises(ConfigurationError) as caught:
        _anthropic(**options)
    return str(caught.value)


# --- Anthropic's own API -----------------------------------------------------------------------


def test_with_no_settings_the_sdks_environment_names_the_key_and_the_endpoint(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with AnthropicServer([{"content": "from the environment"}], tmp_path) as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-env-0001")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        assert _reply({}).content == "from the environment"
        (entry,) = server.entries()
    assert entry["headers"]["authorization"] == "Bearer sk-ant-from-env-0001"


def test_with_no_key_anywhere_the_model_is_refused_before_any_call() -> None:
    assert _refusal(base_url="http://127.0.0.1:9") == (
        "Claude on anthropic has no credentials: give an API key or set ANTHROPIC_API_KEY"
    )


def test_a_credentials_profile_the_sdk_cannot_read_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path / "nowhere"))
    assert _refusal(base_url="http://127.0.0.1:9").startswith("Claude on anthropic: Config file not found at ")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"platform": "bedrok"},
            "unknown Anthropic platform 'bedrok'; the platforms are anthropic, vertex, bedrock (did you mean 'bedrock'?)",
        ),
        ({"default_timeout": 0}, "the model timeout, reply size cap and default max_tokens must be more than 0"),
        ({"default_max_tokens": 0}, "the model timeout, reply size cap and default max_tokens must be more than 0"),
        ({"max_concurrency": 0}, "max_concurrency must be more than 0, or None for no limit"),
    ],
)
def test_settings_out_of_range_are_refused(options: dict[str, Any], message: str) -> None:
    assert _refusal(api_key="k", **options) == message


# --- Vertex AI ---------------------------------------------------------------------------------


def _vertex(server: AnthropicServer, **options: Any) -> dict[str, Any]:
    settings = {"platform": "vertex", "base_url": server.vertex_url, "access_token": TOKEN}
    return {**settings, "region": "us-east5", "project_id": "my-project", **options}


def test_vertex_calls_the_models_raw_predict_path_with_the_token(tmp_path: Path) -> None:
    with AnthropicServer([{"content": "from Vertex"}], tmp_path) as server:
        assert _reply(_vertex(server)).content == "from Vertex"
        (entry,) = server.entries()
    assert (
        entry["path"] == "/v1/projects/my-project/locations/us-east5/publishers/anthropic/models/claude-test:rawPredict"
    )
    assert entry["headers"]["authorization"] == f"Bearer {TOKEN}"
    # The model is in the path; the API version in the body.
    assert "model" not in entry["body"] and entry["body"]["anthropic_version"] == "2026-10-21"


def test_vertex_streams_from_stream_raw_predict(tmp_path: Path) -> None:
    with AnthropicServer([{"content": "streamed from Vertex"}], tmp_path) as server:
        *deltas, reply = _run(_vertex(server), stream=True)
        (entry,) = server.entries()
    assert entry["path"].endswith("/models/claude-test:streamRawPredict")
    assert "".join(cast(TextDelta, d).text for d in deltas) == cast(ChatReply, reply).content == "streamed from Vertex"


def test_vertex_takes_its_region_and_project_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CLOUD_ML_REGION", "europe-west1")
    monkeypatch.setenv("ANTHROPIC_VERTEX_PROJECT_ID", "env-project")
    with AnthropicServer([{"content": "ok"}], tmp_path) as server:
        _reply({"platform": "vertex", "base_url": server.vertex_url, "access_token": TOKEN})
        (entry,) = server.entries()
    assert entry["path"].startswith("/v1/projects/env-project/locations/europe-west1/")


def test_vertex_without_a_region_or_a_project_is_refused() -> None:
    assert _refusal(platform="vertex", access_token=TOKEN, project_id="p").startswith(
        "Claude on vertex: No region was given."
    )
    assert _refusal(platform="vertex", access_token=TOKEN, region="us-east5") == (
        "Claude on vertex needs a project id: give one or set ANTHROPIC_VERTEX_PROJECT_ID"
    )


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported (find_spec of a dotted name raises
    when its parent package is missing: ``google`` for ``google.auth``)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


@pytest.mark.skipif(_installed("google.auth"), reason="google-auth is installed here")
def test_vertex_without_a_token_names_the_extra_that_brings_googles_credentials() -> None:
    assert _refusal(platform="vertex", region="us-east5", project_id="p") == (
        "Claude on vertex without an access token needs google-auth: pip install 'prompt-registry[vertex]'"
    )


def test_vertex_never_shows_its_token_in_an_error(tmp_path: Path) -> None:
    replies = [{"status": 403, "message": f"token {TOKEN} lacks aiplatform.endpoints.predict"}]
    with AnthropicServer(replies, tmp_path) as server:
        error = _failure(_vertex(server))
    assert (
        str(error) == "the model endpoint answered 403 Forbidden: token [redacted] lacks aiplatform.endpoints.predict"
    )


# --- Bedrock -----------------------------------------------------------------------------------


def _bedrock(server: AnthropicServer, **options: Any) -> dict[str, Any]:
    settings = {"platform": "bedrock", "base_url": server.base_url, "aws_region": "us-west-2"}
    return {**settings, "aws_access_key": ACCESS_KEY, "aws_secret_key": SECRET_KEY, **options}


def test_bedrock_invokes_the_model_signed_with_the_access_key_never_the_secret(tmp_path: Path) -> None:
    with AnthropicServer([{"content": "from Bedrock"}], tmp_path) as server:
        assert _reply(_bedrock(server)).content == "from Bedrock"
        (entry,) = server.entries()
        logged = server.log.read_text(encoding="utf-8")
    assert entry["path"] == "/model/claude-test/invoke"
    assert entry["headers"]["authorization"].startswith(
        f"AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/{entry['headers']['x-amz-date'][:8]}/us-west-2/bedrock/aws4_request"
    )
    assert SECRET_KEY not in logged
    assert {"model", "stream"}.isdisjoint(entry["body"]) and entry["body"]["anthropic_version"] == "2026-10-21"


def test_bedrock_streams_in_aws_event_stream_frames(tmp_path: Path) -> None:
    replies = [{"content": "Looking it up.", "tool_calls": [{"name": "search", "arguments": {"q": "x"}}]}]
    with AnthropicServer(replies, tmp_path) as server:
        *deltas, reply = _run(_bedrock(server), _request(tools=(SEARCH,)), stream=True)
        (entry,) = server.entries()
    assert entry["path"] == "/model/claude-test/invoke-with-response-stream"
    assert "".join(cast(TextDelta, d).text for d in deltas) == "Looking it up."
    assert cast(ChatReply, reply).tool_calls == (ToolCallRequest("toolu_1_0", "search", '{"q": "x"}'),)


def test_a_bedrock_exception_in_the_middle_of_a_stream_ends_it(tmp_path: Path) -> None:
    replies = [
        {
            "content": "partial",
            "stream_error": {"type": "throttlingException", "message": "Too many tokens"},
            "error_after": 3,
        }
    ]
    with AnthropicServer(replies, tmp_path) as server:
        error = _failure(_bedrock(server), stream=True)
    assert (error.reason, error.http_status) == ("status", 429)
    assert str(error) == "the model endpoint's stream ended with an error: throttlingException: Too many tokens"


def test_a_bedrock_stream_that_is_not_event_stream_frames_is_malformed(tmp_path: Path) -> None:
    with AnthropicServer([{"raw": "plain text where frames should be, long enough to read"}], tmp_path) as server:
        error = _failure(_bedrock(server), stream=True)
    assert error.reason == "malformed"
    assert str(error).startswith("the model endpoint's stream is not a Messages API stream: its framing is broken (")


def test_bedrock_errors_in_its_own_shape_are_retried_and_worded(tmp_path: Path) -> None:
    replies = [
        {"status": 503, "message": "Bedrock is unavailable"},
        {"status": 400, "message": "Malformed input request"},
    ]
    with AnthropicServer(replies, tmp_path) as server:
        error = _failure(_bedrock(server))
        assert len(server.requests()) == 2
    assert str(error) == "the model endpoint answered 400 Bad Request after 1 retry: Malformed input request"


def test_bedrock_with_an_api_key_sends_it_as_a_bearer_token(tmp_path: Path) -> None:
    with AnthropicServer([{"content": "ok"}], tmp_path) as server:
        _reply(
            {
                "platform": "bedrock",
                "base_url": server.base_url,
                "aws_region": "us-west-2",
                "api_key": "bedrock-key-0042",
            }
        )
        (entry,) = server.entries()
    assert entry["headers"]["authorization"] == "Bearer bedrock-key-0042"


def test_bedrock_without_credentials_fails_the_call_naming_why(tmp_path: Path) -> None:
    with AnthropicServer([{"content": "never"}], tmp_path) as server:
        error = _failure({"platform": "bedrock", "base_url": server.base_url, "aws_region": "us-west-2"})
        assert server.requests() == []
    assert error.reason == "credentials"
    assert str(error).startswith("Claude on bedrock has no usable credentials: ")


def test_bedrock_without_a_region_or_with_two_kinds_of_credentials_is_refused() -> None:
    assert _refusal(platform="bedrock", aws_access_key=ACCESS_KEY, aws_secret_key=SECRET_KEY).startswith(
        "Claude on bedrock: No AWS region was provided."
    )
    refused = _refusal(platform="bedrock", aws_region="us-west-2", api_key="k", aws_access_key=ACCESS_KEY)
    assert refused.startswith("Claude on bedrock: Cannot specify both `api_key` and AWS credentials")
    assert SECRET_KEY not in _refusal(platform="bedrock", aws_secret_key=SECRET_KEY)


def test_bedrock_never_shows_the_secret_key_in_an_error(tmp_path: Path) -> None:
    replies = [{"status": 403, "message": f"The request signature we calculated does not match ({SECRET_KEY})"}]
    with AnthropicServer(replies, tmp_path) as server:
        error = _failure(_bedrock(server))
    assert SECRET_KEY not in str(error) and "[redacted]" in str(error)
