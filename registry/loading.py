"""Loading definitions from a tree: files to validated, compiled agents.

A ``ReleaseCatalog`` is everything known about one tree (one commit): which
agents it holds, and each agent loaded on first use and kept. Nothing in a
tree ever changes, so a catalog never needs invalidating; a broken file is
kept as its error, and never affects any other file or release.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass

from jinja2 import TemplateNotFound

from registry.definition import CompiledAgent, compile_definition, definition_digest
from registry.errors import AgentNotFound, InvalidDefinition, InvalidRequest, RegistryError
from registry.models import AgentSummary, Issue, shorten
from registry.rendering import TemplateEnvironment
from registry.safeyaml import YamlError, YamlLimits, parse_yaml
from registry.store import Tree

log = logging.getLogger(__name__)

NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}", re.ASCII)
DEFINITION_SUFFIX = ".yml"


def check_agent_name(usecase: str, name: str) -> None:
    """Raise ``InvalidRequest`` unless both match ``^[a-z0-9][a-z0-9_-]{0,63}$``."""
    for label, value in (("usecase", usecase), ("name", name)):
        if not NAME_PATTERN.fullmatch(value):
            raise InvalidRequest(
                f"{label} {shorten(value)!r} is not valid: use 1 to 64 characters of a-z, 0-9, '_' and '-',"
                " starting with a letter or digit",
                parameter=label,
            )


@dataclass(frozen=True)
class LoadedAgent:
    """A valid definition at one commit, compiled, with its digest."""

    usecase: str
    name: str
    path: str
    digest: str
    compiled: CompiledAgent

    @property
    def title(self) -> str:
        return str(self.compiled.definition["name"])


class ReleaseCatalog:
    """The agents of one tree, loaded lazily and kept."""

    def __init__(self, tree: Tree, *, root: str, yaml_limits: YamlLimits) -> None:
        self.tree = tree
        self._root = root
        self._yaml_limits = yaml_limits
        self.environment = TemplateEnvironment(self._partial_source)
        self._loaded: dict[str, LoadedAgent | InvalidDefinition] = {}
        self._lock = threading.Lock()
        self._agents = sorted(_agent_paths(tree))

    def repository_path(self, relative: str) -> str:
        """A path relative to the repository, as shown to users."""
        return f"{self._root}/{relative}" if self._root else relative

    def get(self, usecase: str, name: str) -> LoadedAgent:
        """The loaded agent; ``AgentNotFound`` or ``InvalidDefinition`` otherwise."""
        relative = f"{usecase}/{name}{DEFINITION_SUFFIX}"
        result = self._loaded.get(relative)
        if result is None:
            with self._lock:
                result = self._loaded.get(relative)
                if result is None:
                    result = self._load_isolated(usecase, name, relative)
                    self._loaded[relative] = result
        if isinstance(result, InvalidDefinition):
            # A fresh exception each time: re-raising one instance would grow
            # its traceback with every request.
            raise InvalidDefinition(result.detail, result.errors, **result.extensions)
        return result

    def summaries(self) -> list[AgentSummary]:
        """A listing entry for every agent, valid or not."""
        out = []
        for usecase, name, relative in self._agents:
            path = self.repository_path(relative)
            try:
                agent = self.get(usecase, name)
            except InvalidDefinition as exc:
                out.append(AgentSummary(usecase, name, path, title=None, valid=False, errors=tuple(exc.errors)))
                continue
            out.append(AgentSummary(usecase, name, path, title=agent.title, valid=True))
        return out

    def _load_isolated(self, usecase: str, name: str, relative: str) -> LoadedAgent | InvalidDefinition:
        """Load one file; whatever goes wrong stays that file's problem.

        Every failure we know of is translated where it enters; this is the
        last line, so that a file that finds a new one can never break the
        listing of its release or any other file.
        """
        try:
            return self._load(usecase, name, relative)
        except RegistryError:
            raise
        except Exception:
            path = self.repository_path(relative)
            log.exception("unexpected error while loading %s at %s", path, self.tree.commit)
            return InvalidDefinition(
                f"{path} could not be loaded", [Issue("unexpected error while loading", file=path)]
            )

    def _load(self, usecase: str, name: str, relative: str) -> LoadedAgent | InvalidDefinition:
        path = self.repository_path(relative)
        try:
            size = self.tree.size(relative)
        except KeyError:
            raise AgentNotFound(
                f"agent {usecase}/{name} does not exist in this release", usecase=usecase, name=name
            ) from None
        if size > self._yaml_limits.max_bytes:
            return InvalidDefinition(
                f"{path} is too large",
                [Issue(f"file is {size} bytes; the limit is {self._yaml_limits.max_bytes} bytes", file=path)],
            )
        source = self.tree.read(relative)
        try:
            document = parse_yaml(source, limits=self._yaml_limits)
        except YamlError as exc:
            issues = [_with_file(i, path) for i in exc.issues]
            return InvalidDefinition(f"{path} is not a valid YAML definition", issues)
        try:
            compiled = compile_definition(document.value, self.environment, file=path, document=document)
        except InvalidDefinition as exc:
            return exc
        partials = {name_: self.tree.read(name_) for name_ in compiled.partials}
        digest = definition_digest(
            source,
            partials,
            tree_content_id=self.tree.content_id if compiled.dynamic_includes else None,
        )
        return LoadedAgent(usecase=usecase, name=name, path=path, digest=digest, compiled=compiled)

    def _partial_source(self, name: str) -> str | None:
        try:
            size = self.tree.size(name)
        except KeyError:
            return None
        if size > self._yaml_limits.max_bytes:
            raise TemplateNotFound(
                name, f"template {name!r} is {size} bytes; the limit is {self._yaml_limits.max_bytes}"
            )
        try:
            return self.tree.read(name).decode("utf-8")
        except UnicodeDecodeError:
            raise TemplateNotFound(name, f"template {name!r} is not UTF-8 text") from None


def _with_file(issue: Issue, path: str) -> Issue:
    return Issue(issue.message, issue.path, path, issue.line, issue.column, issue.hint)


def _agent_paths(tree: Tree) -> list[tuple[str, str, str]]:
    found = []
    for relative in tree.paths():
        parts = relative.split("/")
        if len(parts) != 2 or not parts[1].endswith(DEFINITION_SUFFIX):
            continue
        usecase, name = parts[0], parts[1][: -len(DEFINITION_SUFFIX)]
        if NAME_PATTERN.fullmatch(usecase) and NAME_PATTERN.fullmatch(name):
            found.append((usecase, name, relative))
    return found
