"""Bundles: every agent and partial of one release, in one verifiable file.

A gateway ships a bundle so that it can render prompts even when it has never
reached the registry. ``prompt-registry export`` writes one (from a
repository or from a running server's ``GET /v1/bundle``); the client reads
it. Shared by both sides, so it imports nothing of the server's.

The file is JSON::

    {"format": "prompt-registry-bundle/1",
     "release": {"tag", "version", "commit", "content_id"},
     "agents": [{"usecase", "name", "path", "digest", "source"}],
     "invalid": [{"usecase", "name", "path", "detail", "errors"}],
     "partials": {"<path>": "<text>"},
     "integrity": "sha256:<hex>"}

Two checks guard it. ``integrity`` covers the canonical encoding of all the
other members, so a truncated or edited file is refused when it is opened.
Each agent's ``digest`` is the registry's own digest of its definition file
and the partials it reaches: before an agent is first used, its source is
parsed and compiled again and the digest recomputed, exactly as the server
computed it, so a bundle cannot hand the client content its release never
had (short of someone recomputing every digest: a bundle is not signed).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from registry.errors import AgentNotFound, InvalidBundle, InvalidDefinition
from registry.format.definition import CompiledAgent, compile_definition, definition_digest
from registry.format.safeyaml import YamlError, YamlLimits, parse_yaml
from registry.models import Issue, Release, shorten
from registry.rendering import TemplateEnvironment

BUNDLE_FORMAT = "prompt-registry-bundle/1"

# The server refused anything larger than its configured limit when it built
# the bundle; reading back, any size the server may have allowed is fine.
_READ_LIMITS = YamlLimits(max_bytes=64 * 1024 * 1024)


@dataclass(frozen=True)
class BundledAgent:
    """One valid agent of a bundle, verified against its digest."""

    usecase: str
    name: str
    path: str
    digest: str
    compiled: CompiledAgent
    partials: Mapping[str, str]
    """The partials its templates can reach, by path."""
    reaches: tuple[str, ...] = ()
    """A composite's: every agent it can run, as ``usecase/name``, sorted."""


@dataclass(frozen=True)
class BundleRelease:
    """The release a bundle holds."""

    tag: str
    version: str | None
    commit: str
    content_id: str

    def as_release(self) -> Release:
        return Release(tag=self.tag, version=self.version, commit=self.commit)


def encode_bundle(
    release: BundleRelease,
    *,
    agents: Iterable[tuple[str, str, str, str, bytes]],
    invalid: Iterable[tuple[str, str, str, InvalidDefinition]],
    partials: Mapping[str, str],
) -> bytes:
    """A bundle file's bytes. ``agents`` are ``(usecase, name, path, digest,
    source)``; ``invalid`` are ``(usecase, name, path, error)``. Equal
    content always gives equal bytes."""
    content: dict[str, Any] = {
        "format": BUNDLE_FORMAT,
        "release": {
            "tag": release.tag,
            "version": release.version,
            "commit": release.commit,
            "content_id": release.content_id,
        },
        "agents": [
            {"usecase": u, "name": n, "path": p, "digest": d, "source": s.decode("utf-8")}
            for u, n, p, d, s in sorted(agents)
        ],
        "invalid": [
            {"usecase": u, "name": n, "path": p, "detail": e.detail, "errors": [i.as_dict() for i in e.errors]}
            for u, n, p, e in sorted(invalid, key=lambda entry: entry[:3])
        ],
        "partials": dict(sorted(partials.items())),
    }
    content["integrity"] = _integrity(content)
    return json.dumps(content, ensure_ascii=False, indent=1).encode("utf-8") + b"\n"


class Bundle:
    """A bundle file, opened and checked for integrity; agents are verified
    against their digests the first time they are used."""

    def __init__(self, data: bytes, *, origin: str = "bundle") -> None:
        self.origin = origin
        content = _decode(data, origin)
        try:
            release = content["release"]
            self.release = BundleRelease(
                tag=_text(release["tag"]),
                version=None if release["version"] is None else _text(release["version"]),
                commit=_text(release["commit"]),
                content_id=_text(release["content_id"]),
            )
            self._sources = {
                (_text(a["usecase"]), _text(a["name"])): (_text(a["path"]), _text(a["digest"]), _text(a["source"]))
                for a in content["agents"]
            }
            self._invalid = {
                (_text(i["usecase"]), _text(i["name"])): (_text(i["detail"]), [Issue.from_dict(e) for e in i["errors"]])
                for i in content["invalid"]
            }
            self.partials: dict[str, str] = {_text(k): _text(v) for k, v in content["partials"].items()}
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise InvalidBundle(f"{origin} does not have the shape of a {BUNDLE_FORMAT} file") from exc
        self._verified: dict[tuple[str, str], BundledAgent] = {}
        self._compiled: dict[tuple[str, str], CompiledAgent] = {}
        """Each agent parsed and compiled once, for composites that reach it."""
        self._lock = threading.Lock()
        self._environment = TemplateEnvironment(self.partials.get)

    @property
    def label(self) -> str:
        """How messages name the bundle: ``the bundle <path>``, or ``the
        bundle`` when it was not read from a file."""
        return "the bundle" if self.origin == "bundle" else f"the bundle {self.origin}"

    @classmethod
    def open(cls, path: str | Path) -> Bundle:
        """Read and check the bundle file at ``path``."""
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise InvalidBundle(f"cannot read the bundle {path}: {exc.strerror or exc}") from exc
        return cls(data, origin=str(path))

    def agent_names(self) -> list[tuple[str, str]]:
        """Every ``(usecase, name)`` in the bundle, valid or not, sorted."""
        return sorted({*self._sources, *self._invalid})

    def agent(self, usecase: str, name: str) -> BundledAgent:
        """The agent, verified against its digest.

        Raises ``AgentNotFound``, ``InvalidDefinition`` (the release has it,
        invalid) or ``InvalidBundle`` (its content does not match its digest).
        """
        key = (usecase, name)
        verified = self._verified.get(key)
        if verified is not None:
            return verified
        if key in self._invalid:
            # A fresh exception each time: re-raising one instance would grow its traceback.
            detail, errors = self._invalid[key]
            raise InvalidDefinition(detail, errors, agent=f"{usecase}/{name}", release=self.release.tag)
        if key not in self._sources:
            raise AgentNotFound(
                f"agent {usecase}/{name} is not in the bundle of {self.release.tag}", usecase=usecase, name=name
            )
        with self._lock:
            if key not in self._verified:
                self._verified[key] = self._verify(usecase, name, *self._sources[key])
            return self._verified[key]

    def verify_all(self) -> int:
        """Verify every valid agent now; the number verified."""
        for usecase, name in self._sources:
            self.agent(usecase, name)
        return len(self._sources)

    def _verify(self, usecase: str, name: str, path: str, digest: str, text: str) -> BundledAgent:
        source = text.encode("utf-8")
        mismatch = InvalidBundle(f"{usecase}/{name} in {self.origin} does not match its digest {shorten(digest)}")
        compiled = self._compile((usecase, name), path, text, mismatch)
        if compiled.pattern is not None:
            actual, reaches = self._composite_digest(source, compiled, mismatch)
            if actual != digest:
                raise mismatch
            return BundledAgent(usecase, name, path, digest, compiled, {}, reaches)
        reached = {p: self.partials[p].encode("utf-8") for p in compiled.partials}
        dynamic = compiled.dynamic_includes
        actual = definition_digest(source, reached, tree_content_id=self.release.content_id if dynamic else None)
        if actual != digest:
            raise mismatch
        partials = self.partials if dynamic else {p: self.partials[p] for p in compiled.partials}
        return BundledAgent(usecase, name, path, digest, compiled, partials)

    def _compile(self, key: tuple[str, str], path: str, text: str, mismatch: InvalidBundle) -> CompiledAgent:
        """An agent's source parsed and compiled, once per bundle; ``mismatch``
        when it is not a valid definition (the server would not have sent it)."""
        compiled = self._compiled.get(key)
        if compiled is None:
            try:
                document = parse_yaml(text.encode("utf-8"), limits=_READ_LIMITS)
                compiled = compile_definition(document.value, self._environment, file=path, document=document)
            except (YamlError, InvalidDefinition) as exc:
                raise mismatch from exc
            self._compiled[key] = compiled
        return compiled

    def _composite_digest(
        self, source: bytes, compiled: CompiledAgent, mismatch: InvalidBundle
    ) -> tuple[str, tuple[str, ...]]:
        """A composite's digest as the server computes it (``ReleaseCatalog``):
        its file and the digest of every agent it can run, a nested
        composite's being its own file's; and those agents. Every agent it
        reaches must be in the bundle; a leaf is verified on the way. Called
        under the lock."""
        assert compiled.pattern is not None
        reached: dict[str, bytes] = {}
        pending = [call.agent for call in compiled.pattern.calls]
        while pending:  # iterative, and each agent once: a damaged bundle may hold a cycle
            agent = pending.pop()
            if f"agent:{agent}" in reached:
                continue
            usecase, _, name = agent.partition("/")
            key = (usecase, name)
            if key not in self._sources:
                raise InvalidBundle(f"{mismatch.detail}: it runs {agent}, which the bundle does not hold")
            path, digest, text = self._sources[key]
            other = self._compile(key, path, text, mismatch)
            if other.pattern is None:
                if key not in self._verified:
                    self._verified[key] = self._verify(usecase, name, path, digest, text)
                reached[f"agent:{agent}"] = digest.encode()
            else:
                reached[f"agent:{agent}"] = definition_digest(text.encode("utf-8"), {}).encode()
                pending.extend(call.agent for call in other.pattern.calls)
        reaches = tuple(sorted(key.removeprefix("agent:") for key in reached))
        return definition_digest(source, reached), reaches


def _decode(data: bytes, origin: str) -> dict[str, Any]:
    try:
        content = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise InvalidBundle(f"{origin} is not a JSON bundle (truncated or damaged?)") from exc
    if not isinstance(content, dict) or content.get("format") != BUNDLE_FORMAT:
        found = content.get("format") if isinstance(content, dict) else None
        raise InvalidBundle(f"{origin} is not a {BUNDLE_FORMAT} file (format: {shorten(repr(found), 60)})")
    claimed = content.pop("integrity", None)
    if claimed != _integrity(content):
        raise InvalidBundle(f"{origin} fails its integrity check: its content was changed or damaged")
    return content


def _integrity(content: Mapping[str, Any]) -> str:
    canonical = json.dumps(content, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value
