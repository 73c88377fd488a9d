"""Everyday author commands: ``new`` scaffolds a definition, ``render`` prints
what the model will receive, ``diff`` shows what changed and ``check-release``
gates a release.

A command that reads releases is given a way to open the service
(``ServiceOpener``: the CLI passes ``registry.serving.wiring.open_service``
bound to its settings) rather than building one, and opens it only once its
own arguments are found good.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from registry.authoring.agentsroot import find_agents_root
from registry.authoring.colour import diff_lines, paint
from registry.errors import ConfigurationError, InvalidInputs, InvalidRequest, ReleaseNotFound, summarize
from registry.format.definition import SCHEMA_FILE, CompiledAgent, check_agent_name
from registry.format.diff import Bump, LibraryDiff, classify, diff_catalogs
from registry.format.loading import DEFINITION_SUFFIX, ReleaseCatalog
from registry.format.parsers import ParseError
from registry.format.safeyaml import YamlError, YamlLimits, parse_yaml
from registry.format.versions import parse_version
from registry.models import WORKTREE_TAG, Issue, Release, location, plural
from registry.settings import DEFAULT_ROOT
from registry.store.releases import ReleaseIndex
from registry.store.worktree import open_worktree_catalog

if TYPE_CHECKING:
    from registry.serving.service import RegistryService

    ServiceOpener = Callable[[], AbstractContextManager[RegistryService]]

# Where `new` keeps a copy of the schema in a library checkout, so that
# editors validate offline against the version the library is written for.
LIBRARY_SCHEMA = "schemas/agent-definition.v1.schema.json"

_TEMPLATE = """\
# yaml-language-server: $schema={schema}
# {usecase}/{name}: see docs/definition-format.md of prompt-registry.
name: {title}
model:
  name: your-model-name
  params:
    temperature: 0.2
prompt_templates:
  system: |
    You are a concise assistant. Answer only what is asked.
  user: |
    {{{{ question }}}}
inputs:
  type: object
  required: [question]
  additionalProperties: false
  properties:
    question:
      type: string
      minLength: 1
      description: What the user asked.
"""


def scaffold(agent: str, path: str, *, root: str | None) -> int:
    """Write ``<root>/<usecase>/<name>.yml``, creating the agents root of a
    new library; refuse to overwrite."""
    usecase, name = split_agent(agent)
    base = Path(path)
    agents_root = (root or DEFAULT_ROOT).strip("/")
    target = base / agents_root / usecase / f"{name}{DEFINITION_SUFFIX}"
    if target.exists():
        raise ConfigurationError(f"{target} already exists")
    # The schema goes beside the library's ai_gateway/, which may sit in a
    # subdirectory of the repository (prompts/ai_gateway/agents).
    library = base / agents_root.removesuffix(DEFAULT_ROOT) if agents_root.endswith(DEFAULT_ROOT) else base
    schema = library / LIBRARY_SCHEMA
    relative_schema = os.path.relpath(schema, target.parent).replace(os.sep, "/")
    title = f"{usecase.replace('_', ' ').capitalize()}: {name.replace('_', ' ')}"
    try:
        if not schema.exists():
            schema.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(SCHEMA_FILE, schema)
            print(f"wrote {schema} (the definition format's JSON Schema, for editors)")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(
            _TEMPLATE.format(schema=relative_schema, usecase=usecase, name=name, title=json.dumps(title)),
            encoding="utf-8",
        )
    except OSError as exc:
        raise ConfigurationError(f"cannot write {exc.filename or target}: {exc.strerror or exc}") from exc
    print(f"wrote {target}")
    return 0


def split_agent(agent: str) -> tuple[str, str]:
    usecase, slash, name = agent.partition("/")
    if not slash:
        raise InvalidRequest(f"give the agent as USECASE/NAME, not {agent!r}")
    check_agent_name(usecase, name)
    return usecase, name


class CommandLineInputs(dict[str, Any]):
    """Inputs given on the command line. ``read_as_json`` keeps, by key, the
    text of each ``--input`` VALUE that was read as JSON other than a string
    (``text=5`` is the number 5), so that a schema wanting a string can be
    answered with a hint at quoting."""

    def __init__(self) -> None:
        super().__init__()
        self.read_as_json: dict[str, str] = {}


def parse_inputs(pairs: list[str], inputs_file: str | None) -> CommandLineInputs:
    """Inputs from ``--inputs-file`` (JSON or YAML), then each ``KEY=VALUE``
    (VALUE read as JSON when it is JSON, else as a string)."""
    inputs = CommandLineInputs()
    if inputs_file:
        try:
            data = Path(inputs_file).read_bytes()
        except OSError as exc:
            raise ConfigurationError(f"cannot read {inputs_file}: {exc.strerror or exc}") from exc
        try:
            loaded = parse_yaml(data).value  # YAML is a superset of JSON
        except YamlError as exc:
            raise ConfigurationError(f"{inputs_file} is not JSON or YAML: {exc}") from exc
        if not isinstance(loaded, dict):
            raise ConfigurationError(f"{inputs_file} must hold a mapping of inputs")
        inputs.update(loaded)
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key:
            raise ConfigurationError(f"--input takes KEY=VALUE, not {pair!r}")
        try:
            inputs[key] = json.loads(value)
        except ValueError:
            inputs[key] = value
        if isinstance(inputs[key], str):
            inputs.read_as_json.pop(key, None)
        else:
            inputs.read_as_json[key] = value
    return inputs


def render_command(
    agent: str, open_service: ServiceOpener, *, release: str | None, inputs: dict[str, Any], as_json: bool
) -> int:
    usecase, name = split_agent(agent)
    with open_service() as service:
        found = service.get_agent(usecase, name, release=release)
        plain = dict(inputs)  # validated and rendered as the plain mapping a request would give
        try:
            answer = service.render_answer(found, plain)
        except InvalidInputs as exc:
            if not isinstance(inputs, CommandLineInputs) or not inputs.read_as_json:
                raise
            issues = _with_quoting_hints(exc.errors, found.agent.compiled, plain, inputs.read_as_json)
            raise InvalidInputs(summarize(issues), issues, agent=exc.agent, release=exc.release) from exc
    if as_json:
        # The body POST .../render answers.
        print(json.dumps(answer.as_dict(), indent=2, ensure_ascii=False))
        return 0
    release_tag = answer.resolution.release.tag
    print(f"# {usecase}/{name} at {release_tag} ({answer.agent.digest[:19]})")
    prompt = answer.prompt
    if prompt.placeholders:
        left = ", ".join(f"{{{p.name}}} ({prompt.messages[p.message].role})" for p in prompt.placeholders)
        print(f"# placeholders left for the agent loop: {left}")
    sys.stdout.write(prompt.as_text())
    return 0


def _with_quoting_hints(
    issues: list[Issue], compiled: CompiledAgent, inputs: dict[str, Any], read_as_json: dict[str, str]
) -> list[Issue]:
    """``issues``, where one is about an ``--input`` that was read as JSON but
    whose text the schema would take as a string, saying how to pass the string."""
    hinted = []
    for issue in issues:
        key = _top_level_key(issue.path)
        if key in read_as_json and _accepts_string(compiled, inputs, key, read_as_json[key]):
            quoted = shlex.quote(f"{key}={json.dumps(read_as_json[key], ensure_ascii=False)}")
            hint = f"VALUE is read as JSON when it parses as JSON; to pass the string, say --input {quoted}"
            issue = replace(issue, message=f"{issue.message} ({hint})")
        hinted.append(issue)
    return hinted


def _top_level_key(pointer: str) -> str | None:
    """The key a JSON Pointer of one segment names (``/a~1b`` is ``a/b``)."""
    if not pointer.startswith("/") or "/" in pointer[1:]:
        return None
    return pointer[1:].replace("~1", "/").replace("~0", "~")


def _accepts_string(compiled: CompiledAgent, inputs: dict[str, Any], key: str, text: str) -> bool:
    """Whether the schema finds nothing wrong at ``key`` when its value is the string ``text``."""
    if compiled.inputs is None:
        return False
    pointer = "/" + key.replace("~", "~0").replace("/", "~1")
    trial = compiled.inputs.issues({**inputs, key: text})
    return not any(i.path == pointer or i.path.startswith(pointer + "/") for i in trial)


def parse_command(agent: str, open_service: ServiceOpener, output_file: str, *, release: str | None) -> int:
    usecase, name = split_agent(agent)
    try:
        output = sys.stdin.read() if output_file == "-" else Path(output_file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"cannot read {output_file}: {exc}") from exc
    with open_service() as service:
        result = service.parse(usecase, name, output, release=release).result
    print(json.dumps(result.as_dict(), indent=2, ensure_ascii=False))
    return 1 if isinstance(result, ParseError) else 0


# -- diff and check-release -------------------------------------------------------


def _open_ref(service: RegistryService, path: str, ref: str) -> tuple[Release, ReleaseCatalog]:
    """A side of a comparison: ``worktree`` (the checkout's files), a release
    (version, range, channel, latest), or a branch, tag or commit."""
    if ref == WORKTREE_TAG:
        # A bare repository, or a wrong --root, has no files to compare: say
        # so rather than report every agent removed.
        find_agents_root(Path(path), service.store.root)
        catalog = open_worktree_catalog(Path(path), service.store.root, YamlLimits())
        return Release(tag=WORKTREE_TAG, version=None, commit=catalog.commit), catalog
    try:
        release = service.resolve(ref).release
    except (InvalidRequest, ReleaseNotFound) as not_a_release:
        revision = getattr(service.store, "revision", None)
        if revision is None:
            raise
        try:
            # All-digit commit ids also read as versions (1234567 is >=1234567.0.0).
            release = revision(ref)
        except ReleaseNotFound:
            if isinstance(not_a_release, ReleaseNotFound) and not ref.isdigit():
                raise not_a_release from None  # a range that matches nothing says so
            raise
    return release, service.catalog(release)


def diff_command(
    path: str, open_service: ServiceOpener, source: str, target: str, *, as_json: bool, colour: bool = False
) -> int:
    with open_service() as service:
        before, after = _open_ref(service, path, source), _open_ref(service, path, target)
        diff = diff_catalogs(before[0], before[1], after[0], after[1])
    if as_json:
        print(json.dumps(diff.as_dict(), indent=2, ensure_ascii=False))
    else:
        sys.stdout.write(diff_text(diff, colour=colour))
    return 0


def diff_text(diff: LibraryDiff, *, colour: bool = False) -> str:
    """The diff for people; with ``colour``, ANSI colours: headers bold,
    added lines and agents green, removed ones red."""
    source = "nothing" if diff.source is None else f"{diff.source.tag} ({diff.source.commit[:12]})"
    target = f"{diff.target.tag} ({diff.target.commit[:12]})"
    lines = [paint(f"diff {source} .. {target}", "bold", colour=colour)]
    for change in diff.changes:
        if change.status != "changed":
            lines.append(paint(f"{change.status}: {change.agent}", change.status, colour=colour))
            continue
        detail = ", ".join([*change.fields, *(f"changed through {agent}" for agent in change.through)])
        lines.append(paint(f"changed: {change.agent}{f' ({detail})' if detail else ''}", "bold", colour=colour))
        for side, problems in change.invalid.items():
            lines.extend(paint(f"  invalid in {side}: {problem}", "removed", colour=colour) for problem in problems)
        for text in [*change.templates.values(), *change.partials.values()]:
            lines.extend("  " + line for line in diff_lines(text, colour=colour))
        for name, text in change.examples.items():
            lines.append(paint(f"  what the model receives for example {name!r}:", "bold", colour=colour))
            lines.extend("    " + line for line in diff_lines(text, colour=colour))
    lines.append(f"{plural(diff.unchanged, 'agent')} unchanged")
    return "\n".join(lines) + "\n"


def check_release_command(
    path: str, open_service: ServiceOpener, next_version: str, *, against: str | None, ref: str
) -> int:
    """Print whether releasing ``ref`` as ``next_version`` is honest, and why;
    1 when it is not: too small a bump, a moved tag, or any definition the
    registry would refuse to serve."""
    if parse_version(next_version) is None:
        raise InvalidRequest(f"{next_version!r} is not a SemVer version such as v1.4.0")
    with open_service() as service:
        root = service.store.root
        index = service.store.releases()
        current, current_catalog = _open_ref(service, path, ref)
        previous = service.resolve(against).release if against else _previous_release(index, next_version, current)
        before = service.catalog(previous) if previous is not None else None
        diff = diff_catalogs(previous, before, current, current_catalog)
        failures = _immutability_failures(service, index, next_version, current, current_catalog)
    if not current_catalog.agent_names():
        failures.append(f"{current.tag} has no definitions under {root}/: is that the agents root (--root)?")
    needed, reasons = classify(diff)
    if previous is None:
        print(f"{next_version}: the first release; every agent is added")
    else:
        planned = required_bump(previous.tag, next_version)
        print(f"{previous.tag} -> {next_version}: a {planned} release; the changes require {_article(needed)}")
        if planned == "none":
            failures.append(f"{next_version} is not higher than {previous.tag}")
        elif _ORDER_OF[planned] < _ORDER_OF[needed]:
            failures.append(f"{next_version} is a {planned} release, but the changes require a {needed} release")
    for reason in reasons:
        print(f"  {reason.bump:<6} {reason.agent}: {reason.why}")
    if diff.invalid:
        print("invalid definitions (run prompt-registry lint):")
        for file, issues in diff.invalid.items():
            for issue in issues:
                where = location(issue.file or file, issue.line, issue.column)
                print(f"  {where}: {issue.message}")
        count = len(diff.invalid)
        failures.append(
            f"{plural(count, 'definition')} {'is' if count == 1 else 'are'} invalid;"
            f" the registry would not serve {'it' if count == 1 else 'them'}"
        )
    for failure in failures:
        print(f"FAILED: {failure}")
    if not failures:
        print("ok")
    return 1 if failures else 0


_ORDER_OF = {"none": 0, "patch": 1, "minor": 2, "major": 3}


def _previous_release(index: ReleaseIndex, next_version: str, current: Release) -> Release | None:
    """The release to compare ``current`` with: the highest below
    ``next_version`` (so that a tag pipeline, where the new tag exists
    already, compares with the one before it). When none is below: nothing
    (a first release) if there is no release at all or ``current`` is the
    tag ``next_version`` itself, else the highest release, which
    ``next_version`` then fails to exceed."""
    planned = parse_version(next_version)
    for release in index.releases:  # newest first
        version = parse_version(release.tag)
        if version is not None and planned is not None and version < planned:
            return release
    if not index.releases or _names_version(current.tag, next_version):
        return None
    return index.releases[0]


def _names_version(tag: str, version: str) -> bool:
    return tag.removeprefix("v") == version.removeprefix("v")


def _article(bump: str) -> str:
    return "no release" if bump == "none" else f"a {bump} release"


def _immutability_failures(
    service: RegistryService, index: ReleaseIndex, next_version: str, current: Release, catalog: ReleaseCatalog
) -> list[str]:
    """Tags never change: the planned tag must not exist with other content,
    and no existing tag may have moved."""
    failures = [
        f"tag {r.tag} was moved from {r.commit[:12]} to {r.moved_to[:12]}" for r in index.releases if r.moved_to
    ]
    existing = next((r for r in index.releases if _names_version(r.tag, next_version)), None)
    if existing is not None:
        same = diff_catalogs(existing, service.catalog(existing), current, catalog).changes == []
        if not same:
            failures.append(f"tag {existing.tag} already exists with other content; a released tag never changes")
    return failures


def required_bump(previous: str, following: str) -> Bump:
    """The bump from version ``previous`` to ``following`` (``none`` when not higher)."""
    old, new = parse_version(previous), parse_version(following)
    if old is None or new is None or not new > old:
        return "none"
    a, b = old.semver, new.semver
    if b.major > a.major:
        return "major"
    if b.minor > a.minor:
        return "minor"
    return "patch"
