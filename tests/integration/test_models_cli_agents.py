"""``prompt-registry agents serve --models FILE``: the Agent Protocol
service runs each task's agents through the providers the models file
binds, as ``run`` does."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LibraryRepo
from tests.support.models_library import LIBRARY, agents_serve, environment, model_servers, post


def test_a_task_runs_each_member_at_the_server_its_provider_is_bound_to(repo: LibraryRepo, tmp_path: Path) -> None:
    repo.release("v1.0.0", LIBRARY)
    with model_servers(
        tmp_path,
        local=[{"content": "Open Settings, then Profile."}],
        gateway=[{"content": '{"allow": true}'}],
    ) as servers:
        (tmp_path / "models.yml").write_text(
            "providers:\n"
            f"  vllm: {{kind: openai_compatible, base_url: '{servers['local'].base_url}'}}\n"
            f"  anthropic: {{kind: openai_compatible, base_url: '{servers['gateway'].base_url}'}}\n",
            encoding="utf-8",
        )
        with agents_serve("--repo", str(repo.path), "--models", "models.yml", cwd=tmp_path, env=environment()) as base:
            task = post(
                base, "/ap/v1/agent/tasks", {"additional_input": {"agent": "s/gated", "inputs": {"question": "?"}}}
            )
            steps = [post(base, f"/ap/v1/agent/tasks/{task['task_id']}/steps", {}) for _ in range(2)]
        local, gateway = servers["local"].requests(), servers["gateway"].requests()
    last = steps[-1]
    assert (last["is_last"], last["additional_output"]["outcome"]) == (True, "completed"), last
    assert last["output"] == "Open Settings, then Profile."
    assert [request["model"] for request in local] == ["draft-model"]
    assert [request["model"] for request in gateway] == ["claude-3-5-haiku-20241022"]
