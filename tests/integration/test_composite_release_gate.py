"""Diff and the release gate (``check-release``, the installed CLI in a
subprocess) understand composites: a change of an agent they run changes them,
and removing it makes them invalid."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import LibraryRepo, client_for
from tests.support.composites import COMPOSITES, DRAFT, GATE, LEAVES
from tests.support.servers import CLI, clean_environment


def test_diff_and_the_release_gate_understand_composites(repo: LibraryRepo, tmp_path: Path) -> None:
    repo.release("v1.0.0", {**LEAVES, **COMPOSITES})
    # A changed prompt of an agent the composites run: they change through it.
    repo.release("v1.0.1", {"support/draft_answer.yml": DRAFT.replace("{{ question }}", "Q: {{ question }}")})
    client = client_for(repo)
    diff = client.get("/v1/diff?from=v1.0.0&to=v1.0.1").json
    assert diff is not None
    changed = {change["name"]: change for change in diff["changed"] if change["usecase"] == "support"}
    assert changed["gated"]["through"] == ["support/draft_answer"] and changed["gated"]["fields"] == []
    assert "through" not in changed["draft_answer"]
    # A gate's output contract changed: major, for the gate itself.
    gate = GATE.replace("reason: {type: string}", "reason: {type: string, maxLength: 200}")
    assert gate != GATE
    repo.release("v1.0.2", {"compliance/response_gate.yml": gate})
    release_gate = subprocess.run(
        [CLI, "check-release", "v1.0.3", "--against", "v1.0.1", "--ref", "v1.0.2"],
        cwd=repo.path,
        capture_output=True,
        text=True,
        env=clean_environment(),
        timeout=60,
    )
    assert release_gate.returncode == 1 and "major" in release_gate.stdout
    assert "compliance/response_gate: its output contract changed (output_parser output_schema)" in release_gate.stdout
    # An agent a composite runs removed: the composite becomes invalid, major.
    repo.remove("support/draft_answer.yml")
    repo.commit("remove the draft agent")
    repo.tag("v2.0.0")
    removal = client_for(repo).get("/v1/diff?from=v1.0.2&to=v2.0.0").json
    assert removal is not None
    assert "support/draft_answer" in removal["removed"]
    assert any(change["name"] == "gated" and "to" in change.get("invalid", {}) for change in removal["changed"])
