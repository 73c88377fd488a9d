"""The agent cards' facts from a real registry process: when the registry
goes away, the cards last built are served; with none built, the error says so."""

from __future__ import annotations

import pytest

from registry.a2a.cards import CardFacts
from registry.client import RegistryClient, RegistryUnavailable
from tests.conftest import LibraryRepo
from tests.support.executor_fixtures import REACT
from tests.support.registry_client import QUICK_RETRIES
from tests.support.servers import RegistryProcess


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_cards_last_built_are_served_while_the_registry_is_away(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"a/react.yml": REACT})
    clock = Clock()
    with RegistryProcess("--repo", str(repo.path)) as registry:
        client = RegistryClient(registry.base, retries=QUICK_RETRIES)
        facts = CardFacts(client, "latest", pointer_seconds=10, clock=clock)
        built = facts.current()
    clock.now += 11
    assert facts.current() is built
    with pytest.raises(RegistryUnavailable):
        CardFacts(client, "latest", clock=clock).current()
    client.close()
