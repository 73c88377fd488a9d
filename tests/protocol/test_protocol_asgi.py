"""The ASGI application ``agents serve`` runs (``registry.protocol.asgi``),
through Starlette's test client: the Flask routes behind it, the routes of
another package mounted before them, and the hub they share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from registry.protocol.asgi import create_asgi_app, event_hub
from tests.conftest import LibraryRepo
from tests.support.executor_fixtures import leaf
from tests.support.protocol_service import Service


@pytest.fixture
def service(repo: LibraryRepo, tmp_path: Path) -> Iterator[Service]:
    library = repo.release("v1.0.0", {"s/draft.yml": leaf("drafter", "Draft: {{ question }}", question="string")})
    made = Service(library, tmp_path / "data", [{"content": "Use Settings."}])
    yield made
    made.executor.close()
    made.client.close()
    made.registry_app.extensions["prompt_registry.service"].close()


def test_another_package_s_routes_come_first_and_share_the_hub_and_the_flask_routes_answer_behind(
    service: Service,
) -> None:
    hub = event_hub(service.app, service.settings)

    async def subscribers(request: Request) -> JSONResponse:
        return JSONResponse({"same hub": request.app.state.event_hub is hub, "subscribers": hub.subscribers})

    app = create_asgi_app(service.app, service.settings, routes=[Route("/a2a/hub", subscribers)], hub=hub)
    with TestClient(app) as client:  # its lifespan runs the hub, and closes the service at the end
        assert client.get("/a2a/hub").json() == {"same hub": True, "subscribers": 0}
        created = client.post(
            "/ap/v1/agent/tasks", json={"additional_input": {"agent": "s/draft", "inputs": {"question": "q"}}}
        )
        task = created.json()["task_id"]
        last = client.post(f"/ap/v1/agent/tasks/{task}/steps")
        assert (last.status_code, last.json()["output"], last.json()["worker"] is not None) == (
            200,
            "Use Settings.",
            True,
        )
        with client.stream("GET", f"/ap/v1/agent/tasks/{task}/events") as events:
            lines = [line for line in events.iter_lines() if line.startswith("event:")]
        assert lines[-3:] == ["event: step", "event: state", "event: outcome"]
        assert client.head(f"/ap/v1/agent/tasks/{task}/events").status_code == 200
        assert client.get("/a2a/hub").json()["subscribers"] == 0
        missing = client.get("/ap/v1/agent/tasks/nope/events")
        assert missing.status_code == 404 and missing.json()["message"] == "no task 'nope'"
        assert client.get("/ap/v1/agent/nowhere").json()["type"] == "/problems/not-found"
