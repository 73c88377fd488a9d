"""Shared by the tests of task and step requests: a library (a leaf, a ReAct
agent, a chain that runs it, a RAG agent), Agent Protocol services over it,
and one over it with an executor built with given options."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from flask import Flask
from flask.testing import FlaskClient

from registry.client import RegistryClient
from registry.executor import Executor, ScriptedModel
from registry.protocol.app import create_app
from registry.serving.app import create_app as create_registry_app
from registry.settings import Settings
from tests.conftest import LibraryRepo
from tests.support.executor_fixtures import REACT, leaf
from tests.support.protocol_service import Service

ASKS = """\
name: Asks
inputs: {type: object, required: [question], properties: {question: {type: string}}}
pattern:
  kind: chain
  steps:
    - {id: ask, agent: a/react, inputs: {question: "{{ inputs.question }}"}}
"""
RAG = """\
name: Docs
type: rag
model: {name: test-model}
rag: {retriever: product-docs}
prompt_templates:
  user: "{{ question }} {% for p in passages %}{{ p.text }}{% endfor %}"
inputs: {type: object, required: [question, passages], properties: {question: {type: string}, passages: {type: array}}}
"""


def release_library(repo: LibraryRepo) -> LibraryRepo:
    """``repo`` with v1.0.0: s/draft, s/two, a/react, a/asks and d/docs."""
    return repo.release(
        "v1.0.0",
        {
            "s/draft.yml": leaf("drafter", "Draft: {{ question }}", question="string"),
            "s/two.yml": leaf("two", "{{ pipeline }}: {{ question }}", pipeline="string", question="string"),
            "a/react.yml": REACT,
            "a/asks.yml": ASKS,
            "d/docs.yml": RAG,
        },
    )


@contextmanager
def services_over(library: LibraryRepo, tmp_path: Path) -> Iterator[Any]:
    """``services(replies, **options)``: Agent Protocol services over ``library``; closed at the end."""
    made: list[Service] = []

    def make(replies: list[dict[str, Any]], **options: Any) -> FlaskClient:
        service = Service(library, tmp_path / f"data{len(made)}", replies, **options)
        made.append(service)
        return service.http()

    yield make
    for service in made:
        service.close()


def no_tasks(http: FlaskClient) -> bool:
    """Whether the service holds no task."""
    return bool(http.get("/ap/v1/agent/tasks").get_json()["pagination"]["total_items"] == 0)


@contextmanager
def service_app(library: LibraryRepo, data: Path, replies: list[dict[str, Any]], **options: Any) -> Iterator[Flask]:
    """The service over ``library`` with an executor built with ``options``."""
    registry_app = create_registry_app(Settings(repo=str(library.path)))
    client = RegistryClient("http://registry.test", transport=httpx.WSGITransport(app=registry_app), timeout=30)
    executor = Executor(model=ScriptedModel.from_replies(replies, source="the test"), registry=client, **options)
    app = create_app(Settings(data_dir=str(data)), executor=executor, registry=client)
    try:
        yield app
    finally:
        app.extensions["agent_protocol.close"]()
        executor.close()
        client.close()
        registry_app.extensions["prompt_registry.service"].close()
