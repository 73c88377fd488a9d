"""The Agent Protocol service against its own served OpenAPI document,
checked by schemathesis with every check on. No answer may be a 5xx, and
none may contradict the document.

- Each operation gets generated requests, valid and invalid (its examples,
  coverage and fuzzing phases), each call on a task of its own.
- Sequences of operations follow the links schemathesis infers (a task's
  id to its steps and artifacts, a step's id to the step, an upload's id
  to its bytes), each sequence on a fresh service.

Derandomized, with a fixed seed: a run is the same run every time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import hypothesis
import pytest
import schemathesis
import yaml
from schemathesis import Case
from schemathesis.config import SchemathesisConfig

from registry.protocol.app import OPENAPI_FILE
from tests.conftest import LibraryRepo
from tests.support.executor_fixtures import GATE_SCHEMA, GATED, json_leaf, leaf
from tests.support.protocol_service import Service

SEED = 20240611
OPENAPI = "/ap/v1/openapi.json"
TASKS = "/ap/v1/agent/tasks"
COMPOSITE = {"agent": "s/gated", "inputs": {"question": "How?"}}
"""A task of the library's composite: two steps, so it takes a step and stays open."""
ACCEPTED = ["2xx", "3xx", "401", "403", "404", "409", "429", "5xx"]
"""What schemathesis takes for an accepted request (its default)."""

REPLIES: list[dict[str, Any]] = [
    {"agent": "s/draft", "content": "drafted", "repeat": True},
    {"agent": "s/gate", "content": '{"allow": true}', "repeat": True},
]

NO_CONSTANTS = {"constants": {"enabled": False}}
"""No values mined from the code under test: with them, every commit would change the generated cases."""

UPLOAD = {
    "include-operation-id": "uploadAgentTaskArtifacts",
    # schemathesis 4.32.5 judges a multipart body by handing its binary
    # `file` part to jsonschema_rs, which refuses bytes, so a body whose
    # `relative_path` it mutated (to an object, a boolean, null) is taken
    # for valid, and its 400 reported as "schema-violating request
    # accepted" (upstream #3777, #3801). Only that check is off, and only
    # here.
    "checks": {"negative_data_rejection": {"enabled": False}},
}
CREATE_CHECKS = {
    # A well-formed body can still name an agent, release or inputs the
    # library does not have: the documented 422, which no schema in the
    # document can foresee.
    "positive_data_acceptance": {"expected-statuses": [*ACCEPTED, "422"]},
}

CONFIG = SchemathesisConfig.from_dict(
    {
        "seed": SEED,
        "analysis": NO_CONSTANTS,
        "suppress-health-check": ["too_slow", "filter_too_much"],
        "generation": {"mode": "all", "max-examples": 50, "deterministic": True, "database": "none"},
        "checks": {"enabled": True},
        "phases": {"examples": {"enabled": True}, "coverage": {"enabled": True}, "fuzzing": {"enabled": True}},
        # Agent names drawn now and then from the library's, and from ones
        # that must not reach the registry as paths of its own.
        "dictionaries": {"agents": {"values": ["s/draft", "s/gated", "s/missing", "../s", "s/..", "s/\u0100"]}},
        "operations": [
            UPLOAD,
            {
                "include-operation-id": "createAgentTask",
                "checks": CREATE_CHECKS,
                "parameters": {"body.additional_input.agent": {"dictionary": "agents", "probability": 0.5}},
                "generation": {"max-examples": 150},
            },
        ],
    }
)

LINKED_CONFIG = SchemathesisConfig.from_dict(
    {
        "seed": SEED,
        "analysis": NO_CONSTANTS,
        "checks": {"enabled": True},
        "operations": [
            UPLOAD,
            {
                "include-operation-id": "createAgentTask",
                "checks": CREATE_CHECKS,
                # Every task is of the composite (two steps), so that the
                # ids a scenario's answers carry lead to steps and artifacts.
                "parameters": {"body.additional_input": COMPOSITE},
            },
        ],
    }
)

# DBOS's queue threads draw from the global random module (their polling
# jitter) while Hypothesis generates a case, which it takes for a strategy
# using random: they share the process, not the strategy.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Do not use the `random` module inside strategies:hypothesis.errors.HypothesisDeprecationWarning"
)

# Each scenario on a fresh service, whose DBOS worker takes ~2 s to launch
# and stop: 30 scenarios of up to 10 linked calls each.
STATEFUL = hypothesis.settings(
    max_examples=30,
    stateful_step_count=10,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[
        hypothesis.HealthCheck.too_slow,
        hypothesis.HealthCheck.filter_too_much,
        # One service for every example of a test, on purpose (made per test, not per module).
        hypothesis.HealthCheck.function_scoped_fixture,
    ],
)


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> LibraryRepo:
    return LibraryRepo(tmp_path_factory.mktemp("protocol-conformance") / "library").release(
        "v1.0.0",
        {
            "s/draft.yml": leaf("drafter", "Draft: {{ question }}", question="string"),
            "s/gate.yml": json_leaf("gate", "Check: {{ reply }}", GATE_SCHEMA, reply="string"),
            "s/gated.yml": GATED,
        },
    )


@pytest.fixture(scope="module")
def new_service(library: LibraryRepo, tmp_path_factory: pytest.TempPathFactory) -> Callable[[], Service]:
    """Makes a service over the library with a database of its own (the caller closes it)."""

    def make() -> Service:
        return Service(library, tmp_path_factory.mktemp("data"), REPLIES)

    return make


# Per test, not per module: a process runs one DBOS worker, so a test that
# makes services of its own must not find this one still open.
@pytest.fixture
def service(new_service: Callable[[], Service]) -> Iterator[Service]:
    made = new_service()
    yield made
    made.close()


def document() -> dict[str, Any]:
    """Our OpenAPI document, read afresh from the file the service serves."""
    loaded: dict[str, Any] = yaml.safe_load(OPENAPI_FILE.read_text(encoding="utf-8"))
    return loaded


# Loaded when the module is collected, from the very document the service
# serves (test_the_document_checked_is_the_one_served), and a copy of its
# own: schemathesis writes into the dict it loads (inlined responses, the
# links it infers). Each call goes to the fixture's app.
# schemathesis.pytest.from_fixture, which would load it from the app, fails
# on pytest 9.2: it sets Node._nodeid, which is gone.
schema = schemathesis.openapi.from_dict(document(), config=CONFIG)


def test_the_document_checked_is_the_one_served(service: Service) -> None:
    served = service.http().get(OPENAPI)
    assert served.status_code == 200 and served.mimetype == "application/json"
    assert served.get_json() == document()


@schema.parametrize()
@hypothesis.settings(suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture])
def test_every_operation_answers_generated_requests_as_the_document_says(case: Case[Any], service: Service) -> None:
    if case.path_parameters and "task_id" in case.path_parameters:
        # Any string is a valid task_id, and hardly any names a task: the
        # call would stop at a 404 before the logic under test. A task of
        # its own, just created, takes steps, files and a cancel.
        case.path_parameters["task_id"] = new_task(service)
    case.call_and_validate(app=service.app)


def new_task(service: Service) -> str:
    created = service.http().post(TASKS, json={"additional_input": COMPOSITE})
    assert created.status_code == 200, created.get_json()
    task_id: str = created.get_json()["task_id"]
    return task_id


class Dispatcher:
    """The WSGI app schemathesis calls: whichever service is current."""

    def __init__(self, service: Service) -> None:
        self.service = service

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        answer: Iterable[bytes] = self.service.app(environ, start_response)
        return answer


def test_sequences_of_linked_operations_answer_as_the_document_says(new_service: Callable[[], Service]) -> None:
    make = new_service
    dispatcher = Dispatcher(make())
    linked = schemathesis.openapi.from_wsgi(OPENAPI, dispatcher, config=LINKED_CONFIG)

    class EachScenarioOnAFreshService(linked.as_state_machine()):  # type: ignore[misc]  # a class made at run time
        """A scenario sees only what its own requests did, so a failing
        one replays, and shrinks, the same way every time."""

        def setup(self) -> None:
            dispatcher.service.close()
            dispatcher.service = make()

    try:
        EachScenarioOnAFreshService.run(settings=STATEFUL)
    finally:
        dispatcher.service.close()
