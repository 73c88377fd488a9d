"""Builds the adapter that serves one binding of the models file.

Each kind's adapter module is imported when a binding of that kind is
first used, not before: ``import registry.providers`` loads no SDK, a
command that runs only local models never imports Anthropic's, and a kind
whose optional library is missing (``litellm``) says how to install it
rather than failing at import.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from registry.errors import ConfigurationError
from registry.providers.chat import ChatModel
from registry.providers.modelsfile import Binding
from registry.providers.params import ProviderKind

_OPENAI = ("registry.providers.openai_chat", "OpenAIChatModel")
_ANTHROPIC = ("registry.providers.anthropic_chat", "AnthropicChatModel")
_LITELLM = ("registry.providers.litellm_chat", "LiteLLMChatModel")

ADAPTERS: Mapping[ProviderKind, tuple[str, str]] = {
    "openai": _OPENAI,
    "azure_openai": _OPENAI,
    "openai_compatible": _OPENAI,
    "anthropic": _ANTHROPIC,
    "anthropic_vertex": _ANTHROPIC,
    "anthropic_bedrock": _ANTHROPIC,
    "litellm": _LITELLM,
}
"""The module and class of each kind's adapter."""

EXTRA = "pip install 'prompt-registry[providers]'"
"""What installs the optional multi-provider library of kind ``litellm``."""
_OPTIONAL = {"litellm": EXTRA}
_SDKS = {"openai", "httpx2", "anthropic", "litellm"}


def build_adapter(binding: Binding, *, api_key: str | None, max_retries: int) -> ChatModel:
    """The adapter serving ``binding``, given its key (read by the caller
    from ``binding.key_env``) and the retries of bindings that set none.
    Raises ``ConfigurationError`` when its adapter cannot be built: its
    library is not installed, or the adapter refuses a setting."""
    module_name, class_name = ADAPTERS[binding.kind]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise _not_installed(binding, exc, module_name) from exc
    adapter_class: Callable[..., ChatModel] = getattr(module, class_name)
    retries = binding.max_retries if binding.max_retries is not None else max_retries
    return adapter_class(**_KEYWORDS[binding.kind](binding, api_key, retries))


def _not_installed(binding: Binding, exc: ModuleNotFoundError, module_name: str) -> Exception:
    """The error for an adapter that cannot be imported: its library is
    missing (a ``ConfigurationError`` saying how to install it), or the
    import failed for another reason (``exc`` itself, a bug)."""
    missing = exc.name or ""
    subject = f"the provider {binding.name!r} ({binding.where}) is of kind {binding.kind}"
    if missing == module_name:
        return ConfigurationError(f"{subject}, which this installation has no adapter for")
    if missing.partition(".")[0] not in _SDKS:
        return exc
    hint = _OPTIONAL.get(binding.kind, "reinstall prompt-registry, which depends on it")
    return ConfigurationError(f"{subject}, whose library {missing} is not installed: {hint}")


def _common(binding: Binding, max_retries: int) -> dict[str, Any]:
    options: dict[str, Any] = {"max_retries": max_retries}
    if binding.timeout is not None:
        options["default_timeout"] = binding.timeout
    return options


def _openai(binding: Binding, api_key: str | None, max_retries: int) -> dict[str, Any]:
    options = {"base_url": binding.base_url, "api_key": api_key, "kind": binding.kind, **_common(binding, max_retries)}
    if binding.kind == "openai_compatible" and binding.server is not None:
        options["server"] = binding.server
    return options


def _azure(binding: Binding, api_key: str | None, max_retries: int) -> dict[str, Any]:
    return {
        **_openai(binding, api_key, max_retries),
        "api_version": binding.api_version,
        "azure_deployment": binding.deployment,
    }


def _anthropic(binding: Binding, api_key: str | None, max_retries: int) -> dict[str, Any]:
    platform = {"anthropic": "anthropic", "anthropic_vertex": "vertex", "anthropic_bedrock": "bedrock"}[binding.kind]
    options: dict[str, Any] = {"platform": platform, "base_url": binding.base_url, **_common(binding, max_retries)}
    if platform == "anthropic":
        options["api_key"] = api_key
    elif platform == "vertex":
        options.update(region=binding.region, project_id=binding.project_id)
    else:
        options["aws_region"] = binding.aws_region
    return options


def _litellm(binding: Binding, api_key: str | None, max_retries: int) -> dict[str, Any]:
    return {
        "provider": binding.library_provider,
        "base_url": binding.base_url,
        "api_key": api_key,
        **_common(binding, max_retries),
    }


_KEYWORDS: Mapping[ProviderKind, Callable[[Binding, str | None, int], dict[str, Any]]] = {
    "openai": _openai,
    "azure_openai": _azure,
    "openai_compatible": _openai,
    "anthropic": _anthropic,
    "anthropic_vertex": _anthropic,
    "anthropic_bedrock": _anthropic,
    "litellm": _litellm,
}
