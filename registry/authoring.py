"""Everyday author commands: ``new`` scaffolds a definition, ``render`` prints
what the model will receive."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from registry.definition import SCHEMA_FILE
from registry.errors import ConfigurationError, InvalidRequest
from registry.examples import format_messages
from registry.lint import find_agents_root
from registry.loading import DEFINITION_SUFFIX, check_agent_name
from registry.safeyaml import YamlError, parse_yaml
from registry.settings import Settings

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
    """Write ``<root>/<usecase>/<name>.yml``; refuse to overwrite."""
    usecase, name = split_agent(agent)
    base = Path(path)
    agents_root = find_agents_root(base, root) if root or (base / "ai_gateway").exists() else "ai_gateway/agents"
    target = base / agents_root / usecase / f"{name}{DEFINITION_SUFFIX}"
    if target.exists():
        raise ConfigurationError(f"{target} already exists")
    schema = base / LIBRARY_SCHEMA
    if not schema.exists():
        schema.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(SCHEMA_FILE, schema)
        print(f"wrote {schema} (the definition format's JSON Schema, for editors)")
    relative_schema = os.path.relpath(schema, target.parent).replace(os.sep, "/")
    title = f"{usecase.replace('_', ' ').capitalize()}: {name.replace('_', ' ')}"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(
        _TEMPLATE.format(schema=relative_schema, usecase=usecase, name=name, title=json.dumps(title)), encoding="utf-8"
    )
    print(f"wrote {target}")
    return 0


def split_agent(agent: str) -> tuple[str, str]:
    usecase, slash, name = agent.partition("/")
    if not slash:
        raise InvalidRequest(f"give the agent as USECASE/NAME, not {agent!r}")
    check_agent_name(usecase, name)
    return usecase, name


def parse_inputs(pairs: list[str], inputs_file: str | None) -> dict[str, Any]:
    """Inputs from ``--inputs-file`` (JSON or YAML), then each ``KEY=VALUE``
    (VALUE read as JSON when it is JSON, else as a string)."""
    inputs: dict[str, Any] = {}
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
    return inputs


def render_command(
    agent: str, settings: Settings, *, release: str | None, inputs: dict[str, Any], as_json: bool
) -> int:
    from registry.app import build_service

    usecase, name = split_agent(agent)
    service = build_service(settings)
    try:
        answer = service.render(usecase, name, inputs, release=release)
    finally:
        service.close()
    if as_json:
        body = {
            "release": answer.resolution.as_dict(),
            "usecase": usecase,
            "name": name,
            "digest": answer.agent.digest,
            "messages": answer.prompt.as_dicts(),
            "model": answer.prompt.model,
            "params": answer.prompt.params,
        }
        print(json.dumps(body, indent=2, ensure_ascii=False))
        return 0
    release_tag = answer.resolution.release.tag
    print(f"# {usecase}/{name} at {release_tag} ({answer.agent.digest[:19]})")
    sys.stdout.write(format_messages(answer.prompt))
    return 0
