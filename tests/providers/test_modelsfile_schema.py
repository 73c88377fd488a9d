"""The models file's published JSON Schema (schemas/models.v1.schema.json)
says what the loader accepts: the same kinds, the same keys per kind, and
the same verdict on files good and bad."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from registry.errors import ConfigurationError
from registry.providers.modelsfile import COMMON_KEYS, KIND_KEYS, REQUIRED_KEYS, load_models_file
from registry.providers.params import KINDS

REPOSITORY = Path(__file__).resolve().parents[2]
SCHEMA_FILE = REPOSITORY / "schemas" / "models.v1.schema.json"
SCHEMA: dict[str, Any] = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)

GOOD = [
    "providers:\n  openai: {kind: openai}\n",
    "providers:\n  a: {kind: anthropic, api_key_env: MY_KEY, max_concurrency: 2, timeout: 1.5, max_retries: 0}\n",
    "providers:\n  l: {kind: openai_compatible, base_url: 'http://127.0.0.1:8000/v1', server: vllm}\n"
    "routes:\n  - {match: {provider: anthropic, name: 'claude*'}, use: {provider: l, name: qwen}}\n"
    "  - {match: {name: 'gpt-*'}, use: {name: gpt-4o-mini}}\n"
    "default: l\n",
    "providers:\n  v: {kind: anthropic_vertex, region: us-east5, project_id: p}\n"
    "  b: {kind: anthropic_bedrock, aws_region: us-west-2}\n"
    "  z: {kind: azure_openai, base_url: 'https://r.openai.azure.com', api_version: '2024-10-21', deployment: d}\n"
    "  m: {kind: litellm, provider: mistral, api_key_env: MISTRAL_API_KEY}\n",
]
BAD = [
    "providers:\n  x: {kind: openia}\n",
    "providers:\n  x: {base_url: 'http://h'}\n",
    "providers:\n  x: {kind: openai, base_ur: 'http://h'}\n",
    "providers:\n  x: {kind: openai, server: vllm}\n",
    "providers:\n  x: {kind: anthropic_bedrock, api_key_env: K}\n",
    "providers:\n  x: {kind: openai_compatible}\n",
    "providers:\n  x: {kind: azure_openai, base_url: 'https://h'}\n",
    "providers:\n  x: {kind: litellm}\n",
    "providers:\n  x: {kind: openai, api_key_env: sk-abc}\n",
    "providers:\n  x: {kind: openai, base_url: 'http://u:p@h/v1'}\n",
    "providers:\n  x: {kind: openai, base_url: 'ftp://h'}\n",
    "providers:\n  x: {kind: openai, max_concurrency: 0}\n",
    "providers:\n  x: {kind: openai, max_retries: -1}\n",
    "providers:\n  x: {kind: openai, timeout: 0}\n",
    "providers:\n  x: {kind: openai_compatible, base_url: 'http://h', server: llamacpp}\n",
    "providers: {}\n",
    "routes: []\n",
    "providers:\n  x: {kind: openai}\nroutes:\n  - {match: {}, use: {provider: x}}\n",
    "providers:\n  x: {kind: openai}\nroutes:\n  - {match: {name: a}}\n",
    "providers:\n  x: {kind: openai}\nroutes:\n  - {match: {nme: a}, use: {provider: x}}\n",
    "providers:\n  x: {kind: openai}\nextra: 1\n",
]


def _loader_accepts(tmp_path: Path, text: str) -> bool:
    path = tmp_path / "models.yml"
    path.write_text(text, encoding="utf-8")
    try:
        load_models_file(path)
    except ConfigurationError:
        return False
    return True


def test_the_schema_is_a_valid_draft_2020_12_schema_shipped_with_the_package() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert (REPOSITORY / "registry" / "schemas" / SCHEMA_FILE.name).is_file()


def test_the_schema_has_the_kinds_and_keys_of_the_loader() -> None:
    defs = SCHEMA["$defs"]
    assert defs["binding"]["properties"]["kind"]["enum"] == list(KINDS)
    for kind in KINDS:
        branch = defs[f"binding_{kind}"]
        assert set(branch["properties"]) == set(COMMON_KEYS + KIND_KEYS[kind]), kind
        assert set(branch["required"]) == {"kind", *REQUIRED_KEYS.get(kind, ())}, kind
        assert branch["additionalProperties"] is False


@pytest.mark.parametrize("text", GOOD)
def test_a_good_file_is_accepted_by_both(tmp_path: Path, text: str) -> None:
    assert VALIDATOR.is_valid(yaml.safe_load(text))
    assert _loader_accepts(tmp_path, text)


@pytest.mark.parametrize("text", BAD)
def test_a_bad_file_is_refused_by_both(tmp_path: Path, text: str) -> None:
    assert not VALIDATOR.is_valid(yaml.safe_load(text))
    assert not _loader_accepts(tmp_path, text)


def test_the_models_file_of_the_docs_is_valid(tmp_path: Path) -> None:
    page = (REPOSITORY / "docs" / "executor.md").read_text(encoding="utf-8")
    section = page[page.index("## Providers and the models file") :]
    example = re.search(r"```yaml\n(.*?)```", section, re.DOTALL)
    assert example is not None
    assert VALIDATOR.is_valid(yaml.safe_load(example.group(1)))
    assert _loader_accepts(tmp_path, example.group(1))
