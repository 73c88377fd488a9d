"""Loading definitions from a tree: files to validated, compiled agents.

A ``ReleaseCatalog`` loads the agents of one tree (one commit): which agents
it holds, and each one read, validated and compiled on request. Nothing in a
tree ever changes, so what it loads is cached by commit and path and never
invalidated (see ``registry.serving.cache``); a broken file loads as its error, and
never affects any other file or release.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import cached_property
from typing import Any

from registry.errors import AgentNotFound, InvalidDefinition, RegistryError, summarize
from registry.format.composite import AgentFacts, composite_facts, leaf_facts
from registry.format.composite_graph import Checked, CompositeGraph
from registry.format.definition import (
    NAME_PATTERN,
    CompiledAgent,
    compile_definition,
    definition_digest,
    locator,
)
from registry.format.safeyaml import YamlDocument, YamlError, YamlLimits, parse_yaml
from registry.format.spec import AgentSpec
from registry.format.tree import Tree
from registry.models import WORKTREE_TAG, Issue, Release, close_matches, did_you_mean, encode_json
from registry.rendering import TemplateEnvironment, TemplateNotFound

log = logging.getLogger(__name__)

DEFINITION_SUFFIX = ".yml"


class LoadedAgent:
    """A valid definition at one commit, with its digest.

    Its templates are compiled the first time something renders it: an agent
    rebuilt from a shared-cache record is served by ``GET`` without ever
    compiling, and its JSON is encoded once, not per request.
    """

    def __init__(
        self,
        *,
        usecase: str,
        name: str,
        path: str,
        digest: str,
        definition: dict[str, Any],
        partials: Mapping[str, str],
        compiled: CompiledAgent | None = None,
        compile: Callable[[], CompiledAgent] | None = None,
        graph: Mapping[str, Any] | None = None,
    ) -> None:
        if compiled is None and compile is None:
            raise ValueError("give the compiled agent or a way to compile it")
        self.usecase = usecase
        self.name = name
        self.path = path
        self.digest = digest
        self.definition = definition
        self.partials = partials
        """The text of every partial its templates can include: what a client
        needs, with the definition, to render it exactly as the server does."""
        self.graph = graph
        """A composite's graph (None for a leaf): ``max_llm_calls`` (the worst
        case), ``depth``, ``nodes`` (every agent it can run, itself first,
        each with its ``kind`` and the ``digest`` a GET of it answers) and
        ``edges`` (``from`` a composite ``to`` an agent, by ``call``)."""
        self._compiled = compiled
        self._compile = compile
        self._lock = threading.Lock()
        self._answer_json: bytes | None = None
        self._member_json: bytes | None = None

    @property
    def title(self) -> str:
        return str(self.definition["name"])

    @cached_property
    def spec(self) -> AgentSpec:
        """The definition's typed views (read without compiling its templates)."""
        return AgentSpec.of(self.definition)

    @property
    def compiled(self) -> CompiledAgent:
        """The definition with its templates compiled."""
        compiled = self._compiled
        if compiled is None:
            with self._lock:
                if self._compiled is None:
                    assert self._compile is not None
                    self._compiled = self._compile()
                    self._compile = None  # the catalog it closes over may go now
                compiled = self._compiled
        return compiled

    @property
    def answer_json(self) -> bytes:
        """The agent's members of a definition answer, encoded once:
        ``"usecase":...,"name":...,"path":...,"digest":...,"definition":{...},
        "partials":{...}`` (the definition in its file's key order), and a
        composite's ``"graph":{...}``."""
        if self._answer_json is None:
            members = self._members()
            if self.graph is not None:
                members["graph"] = self.graph
            self._answer_json = encode_json(members)[1:-1]
        return self._answer_json

    @property
    def member_json(self) -> bytes:
        """As ``answer_json`` but never with a graph: the agent as a member of
        a composite's answer, whose own graph already holds every node and
        call (nested graphs would repeat them, level after level)."""
        if self.graph is None:
            return self.answer_json
        if self._member_json is None:
            self._member_json = encode_json(self._members())[1:-1]
        return self._member_json

    def _members(self) -> dict[str, Any]:
        return {
            "usecase": self.usecase,
            "name": self.name,
            "path": self.path,
            "digest": self.digest,
            "definition": self.definition,
            "partials": dict(self.partials),
        }


# The shape of a cache record; bump when it changes, so that records written
# by another version of the registry are misses rather than misread.
_RECORD_VERSION = 3


class ReleaseCatalog:
    """Loads the agents of one tree (one commit).

    The catalog holds no agents itself: the service keeps what it loads in
    its cache tiers, by commit and path. ``encode`` and ``decode`` turn a
    load's outcome into the bytes of a shared-cache record and back.
    """

    def __init__(self, tree: Tree, *, root: str, yaml_limits: YamlLimits) -> None:
        self.tree = tree
        self._root = root
        self.yaml_limits = yaml_limits
        self.environment = TemplateEnvironment(self._partial_source)
        self._agents: list[tuple[str, str, str]] | None = None
        self._composites = CompositeGraph(self._agent_facts, self._agent_references)

    @property
    def commit(self) -> str:
        return self.tree.commit

    def repository_path(self, relative: str) -> str:
        """A path relative to the repository, as shown to users."""
        return f"{self._root}/{relative}" if self._root else relative

    def agent_names(self) -> list[tuple[str, str]]:
        """Every ``(usecase, name)`` with a definition file, sorted; reads the whole tree."""
        return [(usecase, name) for usecase, name, _ in self._agent_paths()]

    def _agent_paths(self) -> list[tuple[str, str, str]]:
        if self._agents is None:
            self._agents = sorted(_agent_paths(self.tree))
        return self._agents

    def load(self, usecase: str, name: str) -> LoadedAgent | InvalidDefinition:
        """Read, validate and compile one agent: the agent, or why it is invalid.

        Raises ``AgentNotFound`` when there is no such file; whatever else
        goes wrong stays this file's problem.
        """
        relative = f"{usecase}/{name}{DEFINITION_SUFFIX}"
        return self._load_isolated(usecase, name, relative)

    def agent_not_found(self, usecase: str, name: str, *, release: Release) -> AgentNotFound:
        """The error for an agent this tree has no definition of: it names
        ``release`` and suggests the agents of the tree with the closest names."""
        where = "in the working tree" if release.tag == WORKTREE_TAG else f"in release {release.tag}"
        suggestions = _close_agents(usecase, name, self.agent_names())
        detail = f"agent {usecase}/{name} does not exist {where}"
        hint = did_you_mean(suggestions)
        if hint:
            detail += f"; {hint}"
            return AgentNotFound(detail, usecase=usecase, name=name, suggestions=suggestions)
        return AgentNotFound(detail, usecase=usecase, name=name)

    def encode(self, result: LoadedAgent | InvalidDefinition) -> bytes:
        """A load's outcome as a shared-cache record."""
        record: dict[str, Any] = {"record": _RECORD_VERSION, "commit": self.commit}
        if isinstance(result, InvalidDefinition):
            record["invalid"] = {"detail": result.detail, "errors": [issue.as_dict() for issue in result.errors]}
        else:
            record.update(
                path=result.path, digest=result.digest, definition=result.definition, partials=dict(result.partials)
            )
            if result.graph is not None:
                record["graph"] = result.graph
        return encode_json(record)

    def decode(self, usecase: str, name: str, data: bytes) -> LoadedAgent | InvalidDefinition | None:
        """The outcome a record holds, or None when it is not a record of this
        catalog's commit in the current format (then the caller loads again)."""
        try:
            record = json.loads(data)
            if record.get("record") != _RECORD_VERSION or record.get("commit") != self.commit:
                return None
            if "invalid" in record:
                invalid = record["invalid"]
                return InvalidDefinition(str(invalid["detail"]), [Issue.from_dict(i) for i in invalid["errors"]])
            definition, partials = record["definition"], record["partials"]
            path, digest = str(record["path"]), str(record["digest"])
            graph = record.get("graph")
            if not isinstance(definition, dict) or not isinstance(partials, dict):
                return None
            if graph is not None and not isinstance(graph, dict):
                return None
        except (ValueError, TypeError, KeyError, AttributeError):
            return None
        return LoadedAgent(
            usecase=usecase,
            name=name,
            path=path,
            digest=digest,
            definition=definition,
            partials=partials,
            compile=lambda: compile_definition(definition, self.environment, file=path),
            graph=graph,
        )

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
                f"{path} could not be loaded", [Issue("unexpected error while loading", file=path, rule="internal")]
            )

    def _agent_references(self) -> list[str]:
        return [f"{usecase}/{name}" for usecase, name in self.agent_names()]

    def _agent_facts(self, agent: str) -> AgentFacts | None:
        """What a composite needs to know of ``agent``, loaded on its own
        (without checking its own references): None when there is no such file."""
        usecase, _, name = agent.partition("/")
        if not (NAME_PATTERN.fullmatch(usecase) and NAME_PATTERN.fullmatch(name)):
            return None
        try:
            loaded = self._load(usecase, name, f"{usecase}/{name}{DEFINITION_SUFFIX}", alone=True)
        except AgentNotFound:
            return None
        except Exception:
            # Whatever breaks this file makes it invalid for whoever references it, never breaks them.
            log.exception("unexpected error while loading %s at %s", agent, self.tree.commit)
            return AgentFacts(invalid="it could not be loaded")
        return _facts(loaded)

    def _load(self, usecase: str, name: str, relative: str, *, alone: bool = False) -> LoadedAgent | InvalidDefinition:
        """Load one file; a composite's references are checked too unless ``alone``."""
        path = self.repository_path(relative)
        try:
            size = self.tree.size(relative)
        except KeyError:
            raise AgentNotFound(
                f"agent {usecase}/{name} does not exist in this release", usecase=usecase, name=name
            ) from None
        if size > self.yaml_limits.max_bytes:
            return InvalidDefinition(
                f"{path} is too large",
                [
                    Issue(
                        f"file is {size} bytes; the limit is {self.yaml_limits.max_bytes} bytes",
                        file=path,
                        rule="file-size",
                    )
                ],
            )
        source = self.tree.read(relative)
        try:
            document = parse_yaml(source, limits=self.yaml_limits)
        except YamlError as exc:
            issues = [_with_file(i, path) for i in exc.issues]
            return InvalidDefinition(summarize(issues) if issues else f"{path} is not a valid YAML definition", issues)
        try:
            compiled = compile_definition(document.value, self.environment, file=path, document=document)
        except InvalidDefinition as exc:
            return exc
        if compiled.pattern is not None:
            return self._load_composite(usecase, name, path, source, compiled, document, alone=alone)
        partials = {name_: self.tree.read(name_) for name_ in compiled.partials}
        digest = definition_digest(
            source,
            partials,
            tree_content_id=self.tree.content_id if compiled.dynamic_includes else None,
        )
        # An include computed at render time may name any template file, so a
        # client rendering such an agent needs all of them.
        texts = self.template_files() if compiled.dynamic_includes else _texts(partials)
        return LoadedAgent(
            usecase=usecase,
            name=name,
            path=path,
            digest=digest,
            definition=compiled.definition,
            partials=texts,
            compiled=compiled,
        )

    def _load_composite(
        self,
        usecase: str,
        name: str,
        path: str,
        source: bytes,
        compiled: CompiledAgent,
        document: YamlDocument,
        *,
        alone: bool,
    ) -> LoadedAgent | InvalidDefinition:
        """A composite: valid when every agent it references, in this
        release, is, and the pattern fits them (``registry.format.composite_graph``).
        Its digest covers the digest of every agent it can run."""
        agent = f"{usecase}/{name}"
        standalone = LoadedAgent(
            usecase=usecase,
            name=name,
            path=path,
            digest=definition_digest(source, {}),
            definition=compiled.definition,
            partials={},
            compiled=compiled,
        )
        if alone:
            return standalone
        self._composites.know(agent, _facts(standalone))
        checked = self._composites.check(agent)
        if checked.problems:
            locate = locator(path, document)
            issues = [locate(p.message, p.path, hint=p.hint, rule=p.rule) for p in checked.problems]
            return InvalidDefinition(summarize(issues), issues)
        digest = self._composite_digest(source, checked)
        return LoadedAgent(
            usecase=usecase,
            name=name,
            path=path,
            digest=digest,
            definition=compiled.definition,
            partials={},
            compiled=compiled,
            graph=self._graph(agent, digest, checked),
        )

    def _composite_digest(self, source: bytes, checked: Checked) -> str:
        """A composite's digest: its own file and the digest of every agent
        it can run, so that equal digests mean the same behaviour."""
        reached = {}
        for other in sorted(checked.reaches):
            facts = self._composites.facts(other)
            reached[f"agent:{other}"] = (facts.digest if facts is not None else "").encode()
        return definition_digest(source, reached)

    def _served_digest(self, agent: str) -> str:
        """The digest a GET of ``agent`` (valid, in this release) answers."""
        facts = self._composites.facts(agent)
        if facts is None or facts.pattern is None:
            return facts.digest if facts is not None else ""
        return self._composite_digest(self.tree.read(f"{agent}{DEFINITION_SUFFIX}"), self._composites.check(agent))

    def _graph(self, agent: str, digest: str, checked: Checked) -> dict[str, Any]:
        """What a composite can run, for its GET answer (``LoadedAgent.graph``)."""
        nodes: list[dict[str, Any]] = []
        edges: list[dict[str, Any]] = []
        for name in (agent, *sorted(checked.reaches)):
            facts = self._composites.facts(name)
            pattern = facts.pattern if facts is not None else None
            nodes.append(
                {
                    "agent": name,
                    "kind": pattern.kind if pattern is not None else "leaf",
                    "digest": digest if name == agent else self._served_digest(name),
                }
            )
            if pattern is not None:
                edges.extend({"from": name, "to": call.agent, "call": call.label} for call in pattern.calls)
        return {"max_llm_calls": checked.calls, "depth": checked.depth, "nodes": nodes, "edges": edges}

    def template_files(self) -> dict[str, str]:
        """Every file under the root that is not a definition and could be
        included (UTF-8, within the size limit), by path: the partials."""
        definitions = {relative for _, _, relative in self._agent_paths()}
        files = {}
        for relative in sorted(self.tree.paths()):
            if relative in definitions or self.tree.size(relative) > self.yaml_limits.max_bytes:
                continue
            try:
                files[relative] = self.tree.read(relative).decode("utf-8")
            except UnicodeDecodeError:
                continue
        return files

    def definition_source(self, usecase: str, name: str) -> bytes:
        """The bytes of a definition file (``KeyError`` when there is none)."""
        return self.tree.read(f"{usecase}/{name}{DEFINITION_SUFFIX}")

    def _partial_source(self, name: str) -> str | None:
        try:
            size = self.tree.size(name)
        except KeyError:
            return None
        if size > self.yaml_limits.max_bytes:
            raise TemplateNotFound(
                name, f"template {name!r} is {size} bytes; the limit is {self.yaml_limits.max_bytes}"
            )
        try:
            return self.tree.read(name).decode("utf-8")
        except UnicodeDecodeError:
            raise TemplateNotFound(name, f"template {name!r} is not UTF-8 text") from None


def _facts(loaded: LoadedAgent | InvalidDefinition) -> AgentFacts:
    if isinstance(loaded, InvalidDefinition):
        return AgentFacts(invalid=loaded.detail)
    compiled = loaded.compiled
    if compiled.pattern is not None:
        return composite_facts(loaded.definition, compiled.pattern, loaded.digest)
    return leaf_facts(loaded.definition, compiled.variables, loaded.digest)


def _texts(files: Mapping[str, bytes]) -> dict[str, str]:
    # Partials that compiled are UTF-8 text: the loader refuses anything else.
    return {name: data.decode("utf-8") for name, data in files.items()}


def _with_file(issue: Issue, path: str) -> Issue:
    return replace(issue, file=path)


def _close_agents(usecase: str, name: str, agents: list[tuple[str, str]]) -> list[str]:
    """The agents most like ``usecase/name``, best first, as ``usecase/name``:
    close in both usecase and name, then of the same name in another usecase.

    The usecase and the name are matched each on its own: compared whole,
    ``support/xyz`` would look like ``support/abc`` for the usecase alone.
    """
    usecases = close_matches(usecase, sorted({u for u, _ in agents}))
    found: list[str] = []
    for close_usecase in usecases:
        names = close_matches(name, [n for u, n in agents if u == close_usecase])
        found.extend(f"{close_usecase}/{close_name}" for close_name in names)
    found.extend(f"{u}/{n}" for u, n in agents if n == name and u not in usecases)
    return found[:3]


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
