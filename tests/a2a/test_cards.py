"""Agent Cards over a real registry (a git repository served in process):
what each card says and pins, and the cache per release commit."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.types import AgentCard
from google.protobuf.json_format import MessageToDict

from registry.a2a.cards import AGENT_EXTENSION, RELEASE_EXTENSION, CardFacts, CardOptions, agent_card, service_card
from registry.a2a.mapping import struct_plain
from registry.client import RegistryClient
from tests.conftest import LibraryRepo
from tests.support.a2a_schema import check_against_spec
from tests.support.executor_fixtures import REACT, leaf, registry_client

BASE = "https://agents.example"
OPEN = CardOptions(push_notifications=True, secured=False)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def library(repo: LibraryRepo) -> LibraryRepo:
    described = REACT.replace("type: react\n", "description: Looks words up.\ntype: react\n")
    return repo.release(
        "v1.0.0",
        {"a/react.yml": described, "s/draft.yml": leaf("drafter", "Draft: {{ question }}", question="string")},
    )


@pytest.fixture
def client(library: LibraryRepo) -> Iterator[RegistryClient]:
    with registry_client(library.path) as found:
        yield found


def test_each_valid_agent_has_facts_pinning_its_release_and_an_invalid_one_none(
    library: LibraryRepo, client: RegistryClient
) -> None:
    library.release("v1.1.0", {"s/broken.yml": "name: [unclosed"})
    release = CardFacts(client, "latest").current()
    assert (release.tag, release.commit) == ("v1.1.0", library.git("rev-parse", "v1.1.0^{commit}"))
    assert [facts.agent for facts in release.agents] == ["a/react", "s/draft"]
    react = release.find("a", "react")
    assert react is not None
    served = client.get("a", "react", release="v1.1.0")
    assert (react.tag, react.commit, react.digest) == ("v1.1.0", served.commit, served.digest)
    assert (react.title, react.description) == ("ReAct helper", "Looks words up.")
    assert react.input_schema == {
        "type": "object",
        "required": ["question"],
        "properties": {"question": {"type": "string"}},
    }
    assert release.find("s", "broken") is None


def test_the_release_is_asked_for_again_only_once_its_pointer_is_stale(
    library: LibraryRepo, client: RegistryClient
) -> None:
    clock = Clock()
    facts = CardFacts(client, "latest", pointer_seconds=10, clock=clock)
    first = facts.current()
    library.release("v1.1.0", {"s/other.yml": leaf("other", "{{ question }}", question="string")})
    clock.now += 5
    assert facts.current() is first
    clock.now += 6
    moved = facts.current()
    assert moved.tag == "v1.1.0" and [a.agent for a in moved.agents] == ["a/react", "s/draft", "s/other"]
    clock.now += 11
    assert facts.current() is moved  # the same commit: built once


def test_an_agent_card_says_who_it_is_what_it_pins_and_where_to_reach_it(client: RegistryClient) -> None:
    react = CardFacts(client, "^1").current().find("a", "react")
    assert react is not None
    card = agent_card(react, BASE, OPEN)
    check_against_spec(agent_card_to_dict(card), AgentCard)
    assert (card.name, card.description, card.version) == ("ReAct helper", "Looks words up.", "v1.0.0")
    assert [(i.url, i.protocol_binding, i.protocol_version) for i in card.supported_interfaces] == [
        (f"{BASE}/a2a/agents/a/react/jsonrpc", "JSONRPC", "1.0"),
        (f"{BASE}/a2a/agents/a/react/rest", "HTTP+JSON", "1.0"),
        (f"{BASE}/a2a/agents/a/react/jsonrpc", "JSONRPC", "0.3"),
        (f"{BASE}/a2a/agents/a/react/rest", "HTTP+JSON", "0.3"),
    ]
    assert card.capabilities.streaming and card.capabilities.push_notifications
    [extension] = card.capabilities.extensions
    assert extension.uri == AGENT_EXTENSION
    params = struct_plain(extension.params)
    assert params["agent"] == "a/react" and params["digest"] == react.digest
    assert params["release"] == {"requested": "^1", "tag": "v1.0.0", "commit": react.commit}
    assert params["input_schema"]["required"] == ["question"]
    assert [skill.id for skill in card.skills] == ["a/react"]
    assert not card.security_requirements


def test_a_card_answers_clients_of_a2a_0_3_too(client: RegistryClient) -> None:
    react = CardFacts(client, "latest").current().find("a", "react")
    assert react is not None
    shown = agent_card_to_dict(agent_card(react, BASE, OPEN))
    assert (shown["url"], shown["preferredTransport"], shown["protocolVersion"]) == (
        f"{BASE}/a2a/agents/a/react/jsonrpc",
        "JSONRPC",
        "0.3",
    )


def test_the_service_card_lists_the_agents_as_skills_with_their_schemas_and_cards(client: RegistryClient) -> None:
    release = CardFacts(client, "latest").current()
    card = service_card(release, BASE, CardOptions(push_notifications=False, secured=True))
    check_against_spec(agent_card_to_dict(card), AgentCard)
    assert [(s.id, s.name) for s in card.skills] == [("a/react", "ReAct helper"), ("s/draft", "drafter")]
    assert card.supported_interfaces[0].url == f"{BASE}/a2a/jsonrpc"
    assert not card.capabilities.push_notifications
    [extension] = card.capabilities.extensions
    assert extension.uri == RELEASE_EXTENSION
    params = struct_plain(extension.params)
    assert params["release"]["commit"] == release.commit
    assert params["agents"]["s/draft"]["card"] == f"{BASE}/a2a/agents/s/draft/.well-known/agent-card.json"
    assert MessageToDict(card)["securitySchemes"] == {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}}
    assert MessageToDict(card)["securityRequirements"] == [{"schemes": {"bearer": {}}}]
