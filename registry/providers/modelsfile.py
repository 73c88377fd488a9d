"""The operator's models file: which provider adapter serves each
``model.provider`` a definition names, and the routes that send some
definitions' models elsewhere (``--models FILE``, ``REGISTRY_MODELS``)::

    providers:
      anthropic: {kind: anthropic, api_key_env: ANTHROPIC_API_KEY, max_concurrency: 8}
      openai: {kind: openai, api_key_env: OPENAI_API_KEY}
      local: {kind: openai_compatible, base_url: http://127.0.0.1:8000/v1, server: llama.cpp}
    routes:                      # the first that matches wins
      - match: {provider: anthropic, name: "claude-3-5-haiku*"}
        use: {provider: local, name: smollm2}
    default: openai              # for definitions that name no provider (default: openai)

The file is checked whole when it is loaded, and every problem is reported
with its file, line and column (``ConfigurationError.errors``), unknown keys
and kinds with a "did you mean". Its JSON Schema is published as
``schemas/models.v1.schema.json``, for editors; this module is what the
runtime trusts, and a test keeps the two in agreement.

Keys are named, never written: ``api_key_env`` names the environment
variable that holds a key, and the key is read only when an adapter is
built (``registry.providers.router``), so that the file can be committed
and shown.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

from registry.errors import ConfigurationError, summarize
from registry.format.safeyaml import JsonPath, YamlDocument, YamlLimits, kind_of, located_issue, read_yaml_file
from registry.models import Issue, close_matches, did_you_mean, location, shorten
from registry.providers import openai_request
from registry.providers.params import KINDS, WELL_KNOWN, ProviderKind

DEFAULT_PROVIDER = "openai"
"""The provider of a definition that names none, when the file sets no ``default:``."""

SERVERS = openai_request.SERVERS
"""The OpenAI-compatible servers whose differences the adapter knows (``server:``)."""

COMMON_KEYS = ("kind", "base_url", "max_concurrency", "timeout", "max_retries")
KIND_KEYS: Mapping[ProviderKind, tuple[str, ...]] = {
    "openai": ("api_key_env",),
    "azure_openai": ("api_key_env", "api_version", "deployment"),
    "openai_compatible": ("api_key_env", "server"),
    "anthropic": ("api_key_env",),
    # Vertex and Bedrock authenticate with Google's and AWS's own credentials, not a key.
    "anthropic_vertex": ("region", "project_id"),
    "anthropic_bedrock": ("aws_region",),
    "litellm": ("api_key_env", "provider"),
}
"""The keys each kind takes besides ``COMMON_KEYS``."""
REQUIRED_KEYS: Mapping[ProviderKind, tuple[str, ...]] = {
    "azure_openai": ("base_url", "api_version"),
    "openai_compatible": ("base_url",),
    "litellm": ("provider",),
}

USUAL_KEY_ENV: Mapping[ProviderKind, str] = {
    "openai": "OPENAI_API_KEY",
    "azure_openai": "AZURE_OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
}
"""Where each vendor's SDK looks for its key: a binding that names no
``api_key_env`` reads the key from there."""

_FILE_KEYS = ("providers", "routes", "default")
_ROUTE_KEYS = ("match", "use")
_TARGET_KEYS = ("provider", "name")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MAX_TIMEOUT = 86400
_MAX_RETRIES = 20
_MAX_NAME = 100
# Models files are short; these limits only bound a runaway one.
_LIMITS = YamlLimits(max_bytes=1024 * 1024)


@dataclass(frozen=True)
class Binding:
    """One provider of the models file: the adapter that serves it and its settings."""

    name: str
    """What definitions name in ``model.provider``."""
    kind: ProviderKind
    where: str = ""
    """Where it is written (``models.yml:4:3``), for messages."""
    key_env: str | None = None
    """The environment variable holding its API key (``api_key_env``, else
    the SDK's usual one); None: it uses no key."""
    key_required: bool = False
    """Whether a call needs the key: when the file names the variable, and
    for a vendor's own endpoint (no ``base_url``), which always asks for one."""
    base_url: str | None = None
    max_concurrency: int | None = None
    """Calls in flight at once through it; None: no limit of ours."""
    timeout: float | None = None
    """Seconds per call when the definition gives none; None: the adapter's default."""
    max_retries: int | None = None
    """Retries on 429 and 5xx; None: the command's ``--model-retries``."""
    api_version: str | None = None
    deployment: str | None = None
    region: str | None = None
    project_id: str | None = None
    aws_region: str | None = None
    server: str | None = None
    """``openai_compatible``: which server it is (``llama.cpp``, ``vllm``...)."""
    library_provider: str | None = None
    """``litellm``: LiteLLM's name for the provider (``mistral``, ``gemini``, ``bedrock``...)."""


@dataclass(frozen=True)
class Route:
    """A rule sending the calls of matching definitions to another binding or model name."""

    index: int
    where: str
    match_provider: str | None = None
    match_name: str | None = None
    """A glob (``fnmatch``, case-sensitive) on the model name."""
    use_provider: str | None = None
    use_name: str | None = None

    def matches(self, provider: str, model: str) -> bool:
        if self.match_provider is not None and self.match_provider != provider:
            return False
        return self.match_name is None or fnmatch.fnmatchcase(model, self.match_name)

    @property
    def written(self) -> str:
        """The route as a trace records it: ``routes[0]: anthropic/claude-3-5-haiku* -> local/smollm2``."""
        source = f"{self.match_provider or '*'}/{self.match_name or '*'}"
        target = f"{self.use_provider or '(same)'}/{self.use_name or '(same)'}"
        return f"routes[{self.index}]: {source} -> {target}"


@dataclass(frozen=True)
class Target:
    """Where one call goes: the binding, the model name sent, and the route that chose them."""

    binding: Binding
    model: str
    route: Route | None = None


@dataclass(frozen=True)
class ModelsFile:
    """The bindings of a models file, or those bound without one (``from_environment``)."""

    source: str
    """The file, or ``the environment`` for the bindings of ``from_environment``."""
    providers: Mapping[str, Binding]
    routes: tuple[Route, ...] = ()
    default: str | None = None
    """The provider of definitions that name none; None: ``openai``."""

    @property
    def default_provider(self) -> str:
        return self.default or DEFAULT_PROVIDER

    def target(self, provider: str | None, model: str) -> Target | None:
        """Where a call for ``provider`` (None: the default) and ``model`` goes;
        None when no binding serves it."""
        requested = provider or self.default_provider
        for route in self.routes:
            if route.matches(requested, model):
                binding = self.providers.get(route.use_provider or requested)
                return Target(binding, route.use_name or model, route) if binding is not None else None
        binding = self.providers.get(requested)
        return Target(binding, model) if binding is not None else None

    def binding_for(self, provider: str | None) -> Binding | str | None:
        """What serves every call for ``provider``, whatever its model: its
        binding; a problem (why nothing can); or None when it depends on
        the model name (a route with a ``name`` glob may send it somewhere)."""
        requested = provider or self.default_provider
        for route in self.routes:
            if route.match_provider in (None, requested):
                if route.match_name is not None:
                    return None
                return self.providers.get(route.use_provider or requested) or self.unbound(provider)
        return self.providers.get(requested) or self.unbound(provider)

    def unbound(self, provider: str | None) -> str:
        """Why calls for ``provider`` (None: the default) have no binding, naming the options that give one."""
        requested = provider or self.default_provider
        bound = ", ".join(sorted(self.providers)) or "none"
        subject = (
            f"model.provider {requested!r}"
            if provider
            else f"no model.provider, and the default provider {requested!r}"
        )
        return (
            f"{subject} is not bound (bound: {bound}): bind it in a models file"
            f" (--models FILE or REGISTRY_MODELS), or send every call to one endpoint with --model URL"
        )

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> ModelsFile:
        """The bindings without a models file: ``openai`` and ``anthropic``,
        each where its SDK looks by default (``OPENAI_BASE_URL``,
        ``OPENAI_API_KEY``; ``ANTHROPIC_BASE_URL``, ``ANTHROPIC_API_KEY``)."""
        providers: dict[str, Binding] = {}
        for name, base_env in (("openai", "OPENAI_BASE_URL"), ("anthropic", "ANTHROPIC_BASE_URL")):
            kind = cast("ProviderKind", name)
            base_url = environ.get(base_env) or None
            providers[name] = Binding(
                name,
                kind,
                where="bound from the environment, without a models file",
                key_env=USUAL_KEY_ENV[kind],
                key_required=base_url is None,
                base_url=base_url,
            )
        return cls("the environment", providers)


def load_models_file(path: str | Path) -> ModelsFile:
    """The models file at ``path``. Raises ``ConfigurationError`` naming
    every problem, each with its line (``errors``), the first in its message."""
    document = read_yaml_file(path, what="models file", when_empty="it needs a `providers:` mapping", limits=_LIMITS)
    return _Loader(str(path), document).models_file()


class _Loader:
    """Checks a models file, collecting every problem with where it is."""

    def __init__(self, source: str, document: YamlDocument) -> None:
        self._source = source
        self._document = document
        self._issues: list[Issue] = []

    def models_file(self) -> ModelsFile:
        value = self._document.value
        if not isinstance(value, dict):
            self.problem(f"a models file is a mapping with a `providers:` mapping, not {kind_of(value)}", ())
            raise self._error()
        self.check_keys(value, (), _FILE_KEYS)
        providers = self._providers(value.get("providers"))
        # References are checked against every name written, so that one
        # provider's mistake is not also reported at each route using it.
        names = sorted(map(str, value["providers"])) if isinstance(value.get("providers"), dict) else []
        routes = self._routes(value.get("routes", []), names)
        default = self._reference(value["default"], ("default",), names) if "default" in value else None
        if self._issues:
            raise self._error()
        return ModelsFile(self._source, providers, routes, default)

    def problem(self, message: str, path: JsonPath, *, key: str | None = None) -> None:
        """Record a problem at ``path``, or at its ``key`` (the line of the key itself)."""
        self._issues.append(
            located_issue(message, self._document, path, file=self._source, key=key, rule="models-file")
        )

    def check_keys(self, value: Mapping[str, Any], path: JsonPath, known: Sequence[str], *, what: str = "") -> None:
        for key in value:
            if key not in known:
                hint = did_you_mean(close_matches(str(key), known)) or _kind_of_key(str(key))
                self.problem(f"unknown key {shorten(key, 60)!r}{what}" + (f"; {hint}" if hint else ""), path, key=key)

    def _error(self) -> ConfigurationError:
        issues = sorted(self._issues, key=lambda issue: (issue.line or 0, issue.column or 0))
        return ConfigurationError(summarize(issues), errors=issues)

    def _where(self, path: JsonPath) -> str:
        position = self._document.position(path, key=True)
        return location(self._source, position.line if position else None, position.column if position else None)

    # --- providers ---------------------------------------------------------------------------

    def _providers(self, value: Any) -> dict[str, Binding]:
        if value is None:
            self.problem("a models file needs a `providers:` mapping of names to bindings", ())
            return {}
        if not isinstance(value, dict) or not value:
            what = "an empty mapping" if value == {} else kind_of(value)
            self.problem(f"`providers:` must be a mapping of names to bindings, not {what}", ("providers",))
            return {}
        bindings: dict[str, Binding] = {}
        for name, spec in value.items():
            if not 0 < len(str(name)) <= _MAX_NAME:
                # As long as a definition's model.provider may be.
                self.problem(f"a provider's name is 1 to {_MAX_NAME} characters long", ("providers",), key=name)
                continue
            binding = self._binding(str(name), spec, ("providers", name))
            if binding is not None:
                bindings[str(name)] = binding
        return bindings

    def _binding(self, name: str, value: Any, path: JsonPath) -> Binding | None:
        if not isinstance(value, dict):
            self.problem(f"the provider {name!r} must be a mapping with a `kind:`, not {kind_of(value)}", path)
            return None
        kind = self._kind(value, path)
        if kind is None:
            return None
        before = len(self._issues)
        self.check_keys(value, path, COMMON_KEYS + KIND_KEYS[kind], what=f" for kind {kind}")
        for required in REQUIRED_KEYS.get(kind, ()):
            if required not in value:
                self.problem(f"a provider of kind {kind} needs `{required}:`", path)
        texts = {key: self._text(value, path, key) for key in _TEXT_KEYS if key in value and key in KIND_KEYS[kind]}
        key_env = self._key_env(value, path)
        base_url = self._url(value, path)
        max_concurrency = self._integer(value, path, "max_concurrency", 1, 10_000)
        max_retries = self._integer(value, path, "max_retries", 0, _MAX_RETRIES)
        timeout = self._seconds(value, path)
        server = self._choice(value, path, "server", SERVERS)
        if len(self._issues) > before:
            return None
        return Binding(
            name,
            kind,
            where=self._where(path),
            key_env=key_env or USUAL_KEY_ENV.get(kind),
            key_required=key_env is not None or (kind in USUAL_KEY_ENV and base_url is None),
            base_url=base_url,
            max_concurrency=max_concurrency,
            timeout=timeout,
            max_retries=max_retries,
            api_version=texts.get("api_version"),
            deployment=texts.get("deployment"),
            region=texts.get("region"),
            project_id=texts.get("project_id"),
            aws_region=texts.get("aws_region"),
            server=server,
            library_provider=texts.get("provider"),
        )

    def _kind(self, value: Mapping[str, Any], path: JsonPath) -> ProviderKind | None:
        kind = value.get("kind")
        if kind is None:
            self.problem(f"a provider needs a `kind:`, one of {', '.join(KINDS)}", path)
            return None
        if kind in KINDS:
            return cast("ProviderKind", kind)
        if not isinstance(kind, str):
            self.problem(f"kind must be one of {', '.join(KINDS)}, not {kind_of(kind)}", path + ("kind",))
            return None
        # A server's or platform's name is a common slip: say which kind serves it.
        known = WELL_KNOWN.get(kind.lower())
        if known is not None:
            hint = f"did you mean {known!r}" + (f" with `server: {kind}`?" if known == "openai_compatible" else "?")
        else:
            hint = did_you_mean(close_matches(kind, KINDS)) or f"the kinds are {', '.join(KINDS)}"
        self.problem(f"unknown kind {shorten(kind, 60)!r}; {hint}", path + ("kind",))
        return None

    def _text(self, value: Mapping[str, Any], path: JsonPath, key: str) -> str | None:
        found = value[key]
        if not isinstance(found, str) or not found.strip():
            self.problem(f"{key} must be a non-empty string, not {kind_of(found)}", path + (key,))
            return None
        return found

    def _key_env(self, value: Mapping[str, Any], path: JsonPath) -> str | None:
        if "api_key_env" not in value:
            return None
        found = value["api_key_env"]
        if not isinstance(found, str) or not _ENV_NAME.fullmatch(found):
            # Never quoted: what is written there may be the key itself.
            self.problem(
                "api_key_env names the environment variable that holds the key (LIKE_THIS),"
                " not the key itself; what is written there is not a variable name",
                path + ("api_key_env",),
            )
            return None
        return found

    def _url(self, value: Mapping[str, Any], path: JsonPath) -> str | None:
        if "base_url" not in value:
            return None
        found = value["base_url"]
        parts = urlsplit(found) if isinstance(found, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
            self.problem("base_url must be an http(s) URL", path + ("base_url",))
            return None
        if parts.username is not None or parts.password is not None:
            # Never quoted either: the URL carries a credential.
            self.problem("base_url must not carry credentials; name the key with api_key_env", path + ("base_url",))
            return None
        return cast("str", found)

    def _integer(self, value: Mapping[str, Any], path: JsonPath, key: str, low: int, high: int) -> int | None:
        if key not in value:
            return None
        found = value[key]
        if isinstance(found, bool) or not isinstance(found, int) or not low <= found <= high:
            self.problem(f"{key} must be an integer from {low} to {high}, not {shorten(found, 40)}", path + (key,))
            return None
        return found

    def _seconds(self, value: Mapping[str, Any], path: JsonPath) -> float | None:
        if "timeout" not in value:
            return None
        found = value["timeout"]
        if isinstance(found, bool) or not isinstance(found, (int, float)) or not 0 < found <= _MAX_TIMEOUT:
            self.problem(
                f"timeout must be seconds, more than 0 and at most {_MAX_TIMEOUT}, not {shorten(found, 40)}",
                path + ("timeout",),
            )
            return None
        return float(found)

    def _choice(self, value: Mapping[str, Any], path: JsonPath, key: str, choices: Sequence[str]) -> str | None:
        if key not in value:
            return None
        found = value[key]
        if found in choices:
            return cast("str", found)
        hint = did_you_mean(close_matches(str(found), choices)) if isinstance(found, str) else None
        self.problem(
            f"{key} must be one of {', '.join(choices)}, not {shorten(found, 40)!r}" + (f"; {hint}" if hint else ""),
            path + (key,),
        )
        return None

    # --- routes and the default ----------------------------------------------------------------

    def _routes(self, value: Any, providers: Sequence[str]) -> tuple[Route, ...]:
        if not isinstance(value, list):
            self.problem(f"`routes:` must be a list of {{match, use}} rules, not {kind_of(value)}", ("routes",))
            return ()
        routes: list[Route] = []
        for index, item in enumerate(value):
            path: JsonPath = ("routes", index)
            if not isinstance(item, dict):
                self.problem(f"a route must be a mapping with `match:` and `use:`, not {kind_of(item)}", path)
                continue
            self.check_keys(item, path, _ROUTE_KEYS)
            match = self._target(item, path, "match")
            use = self._target(item, path, "use")
            if match is None or use is None:
                continue
            if "provider" in use:
                self._reference(use["provider"], path + ("use", "provider"), providers)
            routes.append(
                Route(
                    index,
                    self._where(path),
                    match_provider=match.get("provider"),
                    match_name=match.get("name"),
                    use_provider=use.get("provider"),
                    use_name=use.get("name"),
                )
            )
        return tuple(routes)

    def _target(self, route: Mapping[str, Any], path: JsonPath, key: str) -> dict[str, str] | None:
        value = route.get(key)
        if value is None:
            self.problem(f"a route needs `{key}:` with a provider, a name or both", path)
            return None
        if not isinstance(value, dict) or not value:
            what = "an empty mapping" if value == {} else kind_of(value)
            self.problem(f"`{key}:` must be a mapping with a provider, a name or both, not {what}", path, key=key)
            return None
        self.check_keys(value, path + (key,), _TARGET_KEYS)
        found: dict[str, str] = {}
        for part in _TARGET_KEYS:
            if part in value:
                if not isinstance(value[part], str) or not value[part]:
                    self.problem(
                        f"{key}.{part} must be a non-empty string, not {kind_of(value[part])}", path + (key, part)
                    )
                    return None
                found[part] = value[part]
        return found if found else None

    def _reference(self, name: Any, path: JsonPath, providers: Sequence[str]) -> str | None:
        """``name``, written at ``path`` (``use.provider``, ``default``): a provider of the file."""
        if not isinstance(name, str) or not name:
            self.problem(f"{path[-1]} must name a provider of `providers:`, not {kind_of(name)}", path)
            return None
        if providers and name not in providers:
            hint = did_you_mean(close_matches(name, providers))
            self.problem(
                f"{shorten(name, 60)!r} is not a provider of this file ({', '.join(providers)})"
                + (f"; {hint}" if hint else ""),
                path,
            )
            return None
        return name


_TEXT_KEYS = ("api_version", "deployment", "region", "project_id", "aws_region", "provider")


def _kind_of_key(key: str) -> str | None:
    """``region is a key of kind anthropic_vertex``, for a key another kind takes."""
    kinds = [kind for kind, keys in KIND_KEYS.items() if key in keys]
    return f"{key} is a key of kind {' and '.join(kinds)}" if kinds else None
