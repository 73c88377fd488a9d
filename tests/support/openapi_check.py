"""A response of the registry's HTTP API checked against the schema its
OpenAPI document declares for that path, method and status, and checked as
a problem response of a given status and type."""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator
from werkzeug.test import TestResponse

from registry.serving.app import openapi_document


def validate_against_openapi(path_template: str, method: str, response: TestResponse) -> None:
    """Check a response body against the schema the OpenAPI document gives it."""
    document = openapi_document()
    operation = document["paths"][path_template][method]
    declared = operation["responses"][str(response.status_code)]
    if "$ref" in declared:
        declared = document["components"]["responses"][declared["$ref"].rsplit("/", 1)[1]]
    content = declared.get("content")
    if content is None:
        assert not response.data
        return
    media_type = response.mimetype
    assert media_type is not None
    assert media_type in content, f"{media_type} not declared for {method} {path_template} {response.status_code}"
    schema = {**content[media_type]["schema"], "components": document["components"]}
    body = response.get_json(force=True) if media_type.endswith("json") else response.get_data(as_text=True)
    Draft202012Validator(schema).validate(body)


def problem(response: TestResponse, status: int, slug: str) -> dict[str, Any]:
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.mimetype == "application/problem+json"
    body: dict[str, Any] = response.get_json(force=True)
    assert body["type"] == f"/problems/{slug}"
    assert body["status"] == status
    assert body["title"] and body["detail"]
    text = response.get_data(as_text=True)
    assert "Traceback" not in text and "/tmp/" not in text and "site-packages" not in text
    return body
