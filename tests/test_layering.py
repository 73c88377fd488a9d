"""The import layering of registry/: each package imports only what its
docstring says it may (registry/__init__.py and registry/*/__init__.py), and
the client none of the server's dependencies, however indirectly.

Every import counts, those inside functions and under ``TYPE_CHECKING``
too: an import deferred is a dependency all the same.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "registry"

SHARED = ("registry.errors", "registry.models", "registry.settings")
BELOW_SERVING = ("registry.format", "registry.rendering", "registry.store", "registry.agents")

# What each layer may import besides its own modules, as the docstrings say.
# A name allows the module and, for a package, everything in it.
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "registry": (),
    "registry.models": (),
    "registry.errors": ("registry.models",),
    "registry.settings": ("registry.errors", "registry.models"),
    "registry.rendering": ("registry.errors", "registry.models"),
    "registry.agents": ("registry.errors", "registry.models", "registry.format.inputschema"),
    "registry.format": ("registry.errors", "registry.models", "registry.rendering", "registry.agents"),
    "registry.store": ("registry.errors", "registry.models", "registry.settings", "registry.format"),
    "registry.serving": (*SHARED, *BELOW_SERVING),
    "registry.authoring": (
        *SHARED,
        *BELOW_SERVING,
        "registry.serving.service",
        # `prompt-registry test` runs examples with scripted replies through the executor.
        "registry.executor",
        "registry.client",
    ),
    # The server's own renderer, parsers and bundle format, and release
    # ranges resolved as the server resolves them; nothing that reads git,
    # YAML trees or settings (test_client.py checks the same at run time).
    "registry.client": (
        "registry.errors",
        "registry.models",
        "registry.rendering",
        "registry.agents",
        "registry.format.bundle",
        "registry.format.definition",
        "registry.format.inputbudget",  # the input budget, counted as the server counts it
        "registry.store.releases",
    ),
    # The executor fetches what it runs through the client, and shares with
    # it what a definition means; nothing of the server.
    "registry.executor": (
        "registry.errors",
        "registry.models",
        "registry.rendering",
        "registry.agents",
        "registry.format",
        "registry.client",
    ),
    "registry.protocol": (
        *SHARED,
        "registry.executor",
        "registry.client",
        "registry.rendering",
        "registry.format.definition",
        "registry.serving.problems",
        "registry.serving.auth",
        "registry.serving.server",
    ),
    "registry.cli": ("registry",),
    # Entry points: `python -m registry`, and `registry.app:create_app` as
    # deployments name the application.
    "registry.__main__": ("registry.cli.main",),
    "registry.app": ("registry.serving.app",),
}

# Allowed by design although the table says otherwise: the importer, the
# imported module, and why.
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("registry.serving.geventserve", "registry.cli.main"): (
        "an entry point: patches the standard library for gevent, then runs the command line again"
    ),
}

# Never imported by the client, directly or through the modules it imports.
SERVER_DEPENDENCIES = frozenset(
    {"flask", "flask_swagger_ui", "werkzeug", "redis", "git", "gitdb", "gunicorn", "prometheus_client", "gevent"}
)


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


def imports_of(name: str) -> list[Import]:
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
    return list(found)


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


@pytest.mark.parametrize("package", ["registry.client", "registry.executor"])
def test_the_client_and_executor_import_no_server_dependency_however_indirectly(package: str) -> None:
    # Breadth first from the package's modules, remembering who imported
    # whom, so that a failure shows the whole chain. Importing a module runs
    # the __init__ of every package above it, so those count as imported.
    start = [name for name in MODULES if within(name, package)]
    importer: dict[str, str | None] = dict.fromkeys(start)
    pending = list(start)
    reached: list[str] = []
    while pending:
        name = pending.pop(0)
        for found in imports_of(name):
            top = found.imported.split(".")[0]
            if top in SERVER_DEPENDENCIES:
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
    assert not reached, f"{package} imports a server dependency:\n" + "\n".join(reached)
