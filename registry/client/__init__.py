"""The gateway's client for prompt-registry.

    from registry.client import RegistryClient

    client = RegistryClient("http://registry:8080", release="^1.2", bundle="prompts-v1.2.0.json")
    agent = client.get("chat", "minimal")
    prompt = agent.render(question="...")
    prompt.as_dicts()   # [{"role": ..., "content": ...}]
    prompt.placeholders # the {name}s left for the agent loop (registry.rendering.placeholders)

Importing it imports none of the server's dependencies (Flask, Redis,
GitPython) nor its serving modules. It shares with the server what makes a
local render the server's render: ``rendering``, ``format.parsers``
(output parsers), ``format.definition``, ``format.inputbudget`` (the input
budget), ``format.bundle`` and ``format.versions`` (ranges match as the
server matches them), ``models`` and ``errors``
(tests/test_layering.py holds it to that). See docs/client.md.
"""

from registry.client.agent import Agent, Source
from registry.client.aio import AsyncRegistryClient
from registry.client.core import Catalog, Releases, RetryPolicy
from registry.client.sync import RegistryClient
from registry.errors import (
    AgentNotFound,
    InvalidBundle,
    InvalidDefinition,
    InvalidInputs,
    InvalidRequest,
    NotFound,
    RegistryError,
    RegistryUnavailable,
    ReleaseNotFound,
    RenderError,
    Unauthorized,
)
from registry.format.bundle import Bundle
from registry.format.parsers import FinalAnswer, ParseError, ParseResult, ToolCall
from registry.models import Message, Placeholder, Prompt, Release, Resolution

__all__ = [
    "Agent",
    "AgentNotFound",
    "AsyncRegistryClient",
    "Bundle",
    "FinalAnswer",
    "InvalidBundle",
    "InvalidDefinition",
    "InvalidInputs",
    "InvalidRequest",
    "Message",
    "NotFound",
    "ParseError",
    "ParseResult",
    "Placeholder",
    "Prompt",
    "RegistryClient",
    "RegistryError",
    "RegistryUnavailable",
    "Release",
    "ReleaseNotFound",
    "Catalog",
    "Releases",
    "Resolution",
    "RenderError",
    "RetryPolicy",
    "Source",
    "ToolCall",
    "Unauthorized",
]
