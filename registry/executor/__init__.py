"""The reference executor: runs any agent and any pattern of a pinned
release against the models its definitions name (``registry.providers``).

    from registry.client import RegistryClient
    from registry.executor import Executor, OpenAIChatModel

    with Executor(registry=RegistryClient("http://registry:8080", release="^1.2"),
                  model=OpenAIChatModel(base_url="http://vllm:8000/v1", api_key=None)) as executor:
        result = executor.run("support/gated_answer", {"question": "How do I get a refund?"})
    print(result.outcome, result.output)

Modules, one concern each: ``scripted`` (a model answering from a script;
the model interface and the providers' adapters are ``registry.providers``),
``tools`` (binding and calling tools), ``mcp_tools`` (tools from MCP servers), ``retrieval`` (retrievers
and the embedded SQLite FTS5 index), ``runtime`` (what a run shares:
context, budget, outcomes), ``leaves`` (the loop per agent type),
``runtime_placeholders`` (what it fills a prompt's placeholders with),
``patterns`` (composites), ``trace`` and ``otel`` (what a run did),
``events`` and ``streaming`` (a streamed run's events, and how its answer's
text is held until it is sure), ``sources`` (the registry clients it
fetches agents from, as protocols), ``executor`` (the public entry and
``RunResult``). See docs/executor.md.

May import: ``registry.client`` (agents are fetched through it and nothing
else), ``registry.format`` (definitions, inputs schemas, composites,
output parsers), ``registry.rendering``, ``registry.errors`` and
``registry.models``, and ``registry.providers`` (the models it calls);
never the server (``serving``, ``store``, ``authoring``) nor its
dependencies: a gateway runs agents with the client's dependencies, the
providers' SDKs and, for MCP tools, ``mcp``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from registry.executor.executor import Executor, RunResult
from registry.executor.retrieval import Passage, Retriever, SqliteFtsRetriever, build_index
from registry.executor.runtime import BLOCKED, COMPLETED, EXHAUSTED, FAILED, OUTCOMES
from registry.executor.scripted import ScriptedModel
from registry.executor.sources import AgentSource, AsyncAgentSource
from registry.executor.tools import PythonTools, ToolBox, ToolProvider, ToolResult, UnboundTools
from registry.executor.trace import Span, Trace
from registry.providers import ChatModel, ChatReply, ChatRequest, ToolCallRequest, Usage

if TYPE_CHECKING:
    from registry.providers.openai_chat import OpenAIChatModel


def __getattr__(name: str) -> Any:
    """``OpenAIChatModel``, with the ``openai`` SDK imported on first use (as
    ``registry.providers`` does): every command and every gateway that runs
    no OpenAI model is spared the SDK's import, about a second."""
    if name != "OpenAIChatModel":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return importlib.import_module("registry.providers.openai_chat").OpenAIChatModel


__all__ = [
    "BLOCKED",
    "COMPLETED",
    "EXHAUSTED",
    "FAILED",
    "OUTCOMES",
    "AgentSource",
    "AsyncAgentSource",
    "ChatModel",
    "ChatReply",
    "ChatRequest",
    "Executor",
    "OpenAIChatModel",
    "Passage",
    "PythonTools",
    "Retriever",
    "RunResult",
    "ScriptedModel",
    "Span",
    "SqliteFtsRetriever",
    "ToolBox",
    "ToolCallRequest",
    "ToolProvider",
    "ToolResult",
    "Trace",
    "Usage",
    "UnboundTools",
    "build_index",
]
