"""Which eval files an evaluation runs: those of the agents named, or every
one of head, or (``--changed``) those whose agent or file changed.

The unit is an eval file (a dataset), not an agent: its agent is what its
header says (``agent:``, else its path), so a file may evaluate another
agent than its path names, and two files the same agent. Head's files are
evaluated; base's file of the same path is its counterpart (a dataset only
base has is not run: it has nothing on head to compare with).

With ``--changed`` a dataset is evaluated when its agent's digest differs
between the sides (a composite's digest covers every agent it can run, so
a change to any of them counts), when its file differs (git blob ids), or
when base has no such file; and when its agent is missing or invalid on
head, so that the gate reports it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from registry.errors import ConfigurationError
from registry.evals.sides import Side
from registry.models import close_matches, did_you_mean, plural

DEFINITION_CHANGED = "definition changed"
EVAL_FILE_CHANGED = "eval file changed"
NEW_EVAL_FILE = "new eval file"


@dataclass(frozen=True)
class Planned:
    """One eval file to evaluate."""

    dataset: str
    """Its path under the evals root: ``support/triage.yml``."""
    agent: str
    """The agent it evaluates, as head's file says."""
    selected: tuple[str, ...] = ()
    """Why ``--changed`` picked it."""


def plan(head: Side, base: Side | None, *, agents: Sequence[str] = (), changed: bool = False) -> list[Planned]:
    """The eval files to evaluate, in path order. Raises ``ConfigurationError``
    (with "did you mean") for a named agent that is not an agent of either
    side, or has no eval file on head."""
    head_files = head.files()
    base_files = base.files() if base is not None else {}
    found = [Planned(relative, _agent_of(head, relative)) for relative in head_files]
    if agents:
        _check_named(agents, found, head, base)
        found = [item for item in found if item.agent in agents]
    if not changed or base is None:
        return found
    picked = []
    for item in found:
        reasons = []
        if item.dataset not in base_files:
            reasons.append(NEW_EVAL_FILE)
        elif base_files[item.dataset] != head_files[item.dataset]:
            reasons.append(EVAL_FILE_CHANGED)
        digest = head.digest(item.agent)
        # An agent invalid on head is picked whatever base has: it is what the gate must report.
        if digest is None or digest != base.digest(item.agent):
            reasons.insert(0, DEFINITION_CHANGED)
        if reasons:
            picked.append(Planned(item.dataset, item.agent, tuple(reasons)))
    return picked


def _agent_of(side: Side, relative: str) -> str:
    """The agent an eval file evaluates: its header's, else the one its path names."""
    agent = side.header(relative).agent
    return agent if agent is not None else relative[: -len(".yml")]


def _check_named(agents: Sequence[str], found: list[Planned], head: Side, base: Side | None) -> None:
    evaluated = {item.agent for item in found}
    for agent in agents:
        if agent in evaluated:
            continue
        sides = [side for side in (head, base) if side is not None]
        known = {f"{usecase}/{name}" for side in sides for usecase, name in side.catalog.agent_names()}
        if agent in known:
            raise ConfigurationError(
                f"{agent} has no eval file {head.where} (expected {head.eval_file(agent + '.yml')}); agents with one:"
                f" {', '.join(sorted(evaluated)[:5]) or 'none'}{' ...' if len(evaluated) > 5 else ''}"
            )
        hint = did_you_mean(close_matches(agent, evaluated | known))
        counted = f"{plural(len(evaluated), 'agent')} with an eval file {head.where}"
        raise ConfigurationError(f"{agent} is not an agent of this library{f'; {hint}' if hint else ''} ({counted})")
