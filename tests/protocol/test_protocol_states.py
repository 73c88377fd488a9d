"""The state tables of docs/agent-protocol.md are the service's own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from registry.errors import InvalidState
from registry.protocol.states import (
    ACTION_STATES,
    ARTIFACT_STATES,
    NEW,
    STEP_STATES,
    TASK_STATES,
    TRANSITIONS,
    transition,
)

PAGE = Path(__file__).resolve().parents[2] / "docs" / "agent-protocol.md"
STATES = {"task": TASK_STATES, "step": STEP_STATES, "action": ACTION_STATES, "artifact": ARTIFACT_STATES}


def documented() -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    entity = None
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        heading = re.fullmatch(r"### (Task|Step|Action|Artifact)", line)
        if heading:
            entity = heading.group(1).lower()
        elif line.startswith("#"):
            entity = None  # another section: its tables are not state tables
        elif entity and line.startswith("| `"):
            cells = [cell.strip().strip("`") for cell in line.strip("|").split("|")]
            rows.append((entity, *cells))
    return rows


def test_the_docs_tables_list_exactly_the_transitions_the_service_enforces() -> None:
    expected = [(t.entity, t.source, t.event, t.target, t.party, t.endpoint, t.description) for t in TRANSITIONS]
    assert documented() == expected


@pytest.mark.parametrize("entity", sorted(STATES))
def test_every_state_is_reached_by_some_transition(entity: str) -> None:
    reached = {t.target for t in TRANSITIONS if t.entity == entity}
    assert reached == set(STATES[entity])


@pytest.mark.parametrize("entity", sorted(STATES))
def test_every_pair_of_state_and_event_not_in_the_table_is_refused(entity: str) -> None:
    events = {t.event for t in TRANSITIONS if t.entity == entity}
    table = {(t.source, t.event): t.target for t in TRANSITIONS if t.entity == entity}
    for state in (NEW, *STATES[entity]):
        for event in events:
            if (state, event) in table:
                assert transition(entity, state, event).target == table[state, event]
            else:
                with pytest.raises(InvalidState) as refused:
                    transition(entity, state, event)
                assert refused.value.state == state
                assert refused.value.extensions["allowed"] == sorted(e for s, e in table if s == state)
