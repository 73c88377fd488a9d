"""The import layering of registry/: each package imports only what its
docstring says it may (registry/__init__.py and registry/*/__init__.py), the
client none of the server's dependencies, however indirectly, and the Agent
Protocol service nothing of the registry's store and service.

Every import counts, those inside functions and under ``TYPE_CHECKING``
too: an import deferred is a dependency all the same.
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "registry"

SHARED = ("registry.errors", "registry.models", "registry.settings")
BELOW_SERVING = ("registry.format", "registry.rendering", "registry.store")

# What each layer may import besides its own modules, as the docstrings say.
# A name allows the module and, for a package, everything in it.
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "registry": (),
    "registry.models": (),
    "registry.errors": ("registry.models",),
    "registry.settings": ("registry.errors", "registry.models"),
    "registry.rendering": ("registry.errors", "registry.models"),
    "registry.format": ("registry.errors", "registry.models", "registry.rendering"),
    "registry.store": ("registry.errors", "registry.models", "registry.settings", "registry.format"),
    # What both HTTP servers share: nothing of git, Redis or either service.
    "registry.web": SHARED,
    "registry.serving": (
        *SHARED,
        *BELOW_SERVING,
        "registry.web",
        # The UI's agent page lists the agent's eval cases, read-only, as lint
        # reads them: the file's values and its streaming reader, which load
        # nothing of the executor, the client or the runner (checked below).
        "registry.evals.dataset",
        "registry.evals.reading",
    ),
    "registry.authoring": (
        *SHARED,
        *BELOW_SERVING,
        "registry.serving.service",
        # `prompt-registry test` runs examples with scripted replies through the executor.
        "registry.executor",
        "registry.client",
        # lint warns about model.params a definition's provider does not take.
        "registry.providers.params",
        # lint checks eval files.
        "registry.evals",
    ),
    # Eval datasets and assertions, and the eval runner and its reports:
    # agents run through the executor on releases read as the service reads
    # them (the service is handed in, typed by what it does: the UI lists
    # eval cases, so the HTTP layer sits above this package).
    "registry.evals": (
        *SHARED,
        *BELOW_SERVING,
        "registry.executor",
        "registry.client",
        "registry.providers",
    ),
    # The server's own renderer, parsers and bundle format, and release
    # ranges matched as the server matches them; nothing that reads git,
    # YAML trees or settings (test_client.py checks the same at run time).
    "registry.client": (
        "registry.errors",
        "registry.models",
        "registry.rendering",
        "registry.format.bundle",
        "registry.format.definition",
        "registry.format.inputbudget",  # the input budget, counted as the server counts it
        "registry.format.parsers",
        "registry.format.versions",
    ),
    # The providers' adapters: the SDKs, and the YAML reader for the models file.
    "registry.providers": (
        "registry.errors",
        "registry.models",
        "registry.format.safeyaml",
        "registry.client.retry_after",
    ),
    # The executor fetches what it runs through the client, and shares with
    # it what a definition means; nothing of the server.
    "registry.executor": (
        "registry.errors",
        "registry.models",
        "registry.rendering",
        "registry.format",
        "registry.client",
        "registry.providers",
    ),
    # Durable runs on DBOS: they call the service's step, never import it.
    "registry.runs": ("registry.errors", "registry.settings"),
    "registry.protocol": (
        *SHARED,
        "registry.runs",
        "registry.executor",
        "registry.client",
        "registry.rendering",
        "registry.format.definition",
        "registry.format.spec",
        "registry.format.safeyaml",
        "registry.web",
    ),
    # A2A over the Agent Protocol service's tasks: its cards describe the
    # agents the client fetches; tokens are the ones both services take;
    # Retry-After read as every HTTP caller reads it.
    "registry.a2a": (
        *SHARED,
        "registry.protocol",
        "registry.client",
        "registry.format.definition",
        "registry.format.spec",
        "registry.web.auth",
    ),
    "registry.cli": ("registry",),
    # Entry points: `python -m registry`, and `registry.app:create_app` as
    # deployments name the application.
    "registry.__main__": ("registry.cli.main",),
    "registry.app": ("registry.serving.app",),
}

# Allowed by design although the table says otherwise: the importer, the
# imported module, and why.
EXCEPTIONS: dict[tuple[str, str], str] = {}

# Never imported by the client, directly or through the modules it imports.
SERVER_DEPENDENCIES = frozenset(
    {"flask", "flask_swagger_ui", "werkzeug", "redis", "git", "gitdb", "gunicorn", "prometheus_client", "gevent"}
)

# Never loaded by the Agent Protocol service (``prompt-registry agents
# serve``), directly or through the modules it imports: the registry's store
# and service, and what only they need. What the client may import of the
# store (it resolves release ranges as the server does) is the client's.
NOT_FOR_THE_PROTOCOL = frozenset({"git", "gitdb", "redis", "flask_swagger_ui"})
REGISTRY_ONLY = ("registry.serving", "registry.store")


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int

    def where(self) -> str:
        return f"{MODULES[self.importer].relative_to(PACKAGE.parent)}:{self.line}"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


MODULES = modules()


def is_package(name: str) -> bool:
    return MODULES.get(name, Path()).name == "__init__.py"


@functools.cache  # parsed once: each test walks every module, most of them several times
def imports_of(name: str) -> tuple[Import, ...]:
    """Every import in the module, at any depth, as absolute module names;
    ``from package import module`` names the module."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    package = name if is_package(name) else name.rpartition(".")[0]
    found: dict[Import, None] = {}  # in order, once: `from x import a, b` is one import of x
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found[Import(name, alias.name, node.lineno)] = None
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found[Import(name, submodule if submodule in MODULES else base, node.lineno)] = None
    return tuple(found)


def layer_of(name: str) -> str:
    """The entry of ``MAY_IMPORT`` the module falls under: the longest that contains it."""
    layers = [layer for layer in MAY_IMPORT if within(name, layer) and (layer != "registry" or name == "registry")]
    return max(layers, key=len)


def within(name: str, scope: str) -> bool:
    return name == scope or name.startswith(scope + ".")


def forbidden(found: Import) -> bool:
    if not within(found.imported, "registry"):
        return False
    layer = layer_of(found.importer)
    if is_package(layer) and layer != "registry" and within(found.imported, layer):
        return False
    if any(within(found.imported, allowed) for allowed in MAY_IMPORT[layer]):
        return False
    return (found.importer, found.imported) not in EXCEPTIONS


def violations() -> list[Import]:
    return [found for name in MODULES for found in imports_of(name) if forbidden(found)]


def test_every_module_falls_under_a_layer_of_its_own_package() -> None:
    for name in MODULES:
        layer = layer_of(name)
        assert layer != "registry" or name == "registry", f"{name} has no entry in MAY_IMPORT: add its package"


def test_each_package_imports_only_what_its_docstring_allows() -> None:
    found = violations()
    described = [
        f"{v.where()}: {v.importer} imports {v.imported}; {layer_of(v.importer)} may import only "
        f"{', '.join(MAY_IMPORT[layer_of(v.importer)]) or 'nothing of the registry'}"
        for v in found
    ]
    assert not described, "\n".join(described)


def test_every_exception_is_still_needed() -> None:
    current = {(i.importer, i.imported) for name in MODULES for i in imports_of(name)}
    gone = sorted(set(EXCEPTIONS) - current)
    assert not gone, f"no longer imported, so remove from EXCEPTIONS in {Path(__file__).name}: {gone}"


def reached_from(package: str, unwanted: Callable[[str], bool]) -> list[str]:
    """Every import of an ``unwanted`` module by ``package``'s modules or the
    modules they import, however indirectly, each with its chain of importers.

    Breadth first from the package's modules, remembering who imported
    whom, so that a failure shows the whole chain. Importing a module runs
    the __init__ of every package above it, so those count as imported."""
    start = [name for name in MODULES if within(name, package)]
    importer: dict[str, str | None] = dict.fromkeys(start)
    pending = list(start)
    reached: list[str] = []
    while pending:
        name = pending.pop(0)
        for found in imports_of(name):
            if unwanted(found.imported):
                chain = [name]
                while (previous := importer[chain[-1]]) is not None:
                    chain.append(previous)
                reached.append(f"{found.where()}: {found.imported}, through {' <- '.join(chain)}")
            parts = found.imported.split(".")
            for depth in range(1, len(parts) + 1):
                module = ".".join(parts[:depth])
                if module in MODULES and module not in importer:
                    importer[module] = name
                    pending.append(module)
    return reached


def is_server_dependency(module: str) -> bool:
    return module.split(".")[0] in SERVER_DEPENDENCIES


def is_not_for_the_protocol(module: str) -> bool:
    if module.split(".")[0] in NOT_FOR_THE_PROTOCOL:
        return True
    if not any(within(module, package) for package in REGISTRY_ONLY):
        return False
    # The client's modules, and the packages that hold them (their __init__ runs first).
    return not any(within(module, allowed) or within(allowed, module) for allowed in MAY_IMPORT["registry.client"])


@pytest.mark.parametrize("package", ["registry.client", "registry.executor"])
def test_the_client_and_executor_import_no_server_dependency_however_indirectly(package: str) -> None:
    reached = reached_from(package, is_server_dependency)
    assert not reached, f"{package} imports a server dependency:\n" + "\n".join(reached)


def test_the_agent_protocol_service_imports_nothing_of_the_registrys_store_or_service() -> None:
    reached = reached_from("registry.protocol", is_not_for_the_protocol)
    assert not reached, "registry.protocol imports what only the registry needs:\n" + "\n".join(reached)


@pytest.mark.slow  # imports every module of the protocol in a fresh interpreter
def test_starting_the_agent_protocol_service_loads_no_git_redis_or_swagger_ui() -> None:
    # What `prompt-registry agents serve` builds its server from; the
    # migrations are scripts Alembic runs, not modules to import.
    modules = [
        name
        for name in MODULES
        if within(name, "registry.protocol") and not within(name, "registry.protocol.migrations")
    ]
    program = f"import sys, {', '.join(modules)}\nprint('\\n'.join(sorted(sys.modules)))\n"
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=60)
    loaded = [module for module in result.stdout.split() if is_not_for_the_protocol(module)]
    assert loaded == []


@pytest.mark.slow  # imports the server's application in a fresh interpreter
def test_the_registry_server_loads_no_executor_client_or_provider() -> None:
    # It reads eval files (the UI lists an agent's cases) through
    # registry.evals, whose runner runs agents: reading must not bring that in.
    program = "import sys, registry.serving.app\nprint('\\n'.join(sorted(sys.modules)))\n"
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=60)
    running = ("registry.executor", "registry.client", "registry.providers", "registry.evals.runner")
    loaded = [module for module in result.stdout.split() if any(within(module, p) for p in running)]
    assert loaded == []


def test_only_the_rendering_package_imports_jinja() -> None:
    # Everything else asks registry.rendering, which quarantines Jinja's
    # private names and owns every reading of a template's syntax tree.
    found = [
        f"{i.where()}: {i.imported}"
        for name in MODULES
        if not within(name, "registry.rendering")
        for i in imports_of(name)
        if within(i.imported, "jinja2")
    ]
    assert not found, "import Jinja through registry.rendering:\n" + "\n".join(found)


def package_of(module: str) -> str:
    """The package one level below ``registry`` (or the top-level module) a module belongs to."""
    return ".".join(module.split(".")[:2])


def test_no_two_packages_import_each_other_however_indirectly() -> None:
    edges: dict[str, set[str]] = {}
    for name in MODULES:
        for i in imports_of(name):
            if within(i.imported, "registry") and package_of(i.imported) != package_of(name):
                edges.setdefault(package_of(name), set()).add(package_of(i.imported))

    def reaches(start: str, goal: str) -> bool:
        seen, pending = {start}, [start]
        while pending:
            for following in edges.get(pending.pop(), ()):
                if following == goal:
                    return True
                if following not in seen:
                    seen.add(following)
                    pending.append(following)
        return False

    cycles = sorted(f"{a} -> {b} -> ... -> {a}" for a in edges for b in edges[a] if reaches(b, a))
    assert not cycles, "packages in an import cycle:\n" + "\n".join(cycles)
