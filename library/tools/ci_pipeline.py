"""Tools for the approval example of docs/agent-protocol.md and the eval
cases of assistant/react_text: a CI system that knows two pipelines,
answered from memory.

    prompt-registry agents serve --example \\
      --model scripted:library/replies/react_text_approval.yml \\
      --tools library.tools.ci_pipeline:TOOLS --require-approval job_log

``--tools MODULE:ATTR`` imports ``MODULE`` from the current directory (run
it from the repository's root) and binds each name of the mapping ``ATTR``
to its callable, which gets the model's arguments as keyword arguments.
"""

from __future__ import annotations

from typing import Any

_JOBS: dict[int, list[dict[str, Any]]] = {
    1234: [{"id": 87, "name": "build", "status": "success"}, {"id": 88, "name": "rspec", "status": "failed"}],
    1240: [{"id": 90, "name": "build", "status": "success"}, {"id": 91, "name": "lint", "status": "failed"}],
}
_LOGS: dict[int, str] = {
    87: "Compiling 312 files...\nBuild finished in 41 s",
    88: "Running 4,210 examples...\n"
    + "".join(f"example {n} passed\n" for n in range(1, 61))
    + "Killed (exit code 137)",
    90: "Compiling 312 files...\nBuild finished in 40 s",
    91: "Inspecting 212 files\napp/models/cart.rb:12:121: Layout/LineLength: Line is too long. [131/120]\n"
    + "212 files inspected, 1 offense detected",
}


def list_jobs(pipeline_id: int) -> list[dict[str, Any]]:
    """The jobs of a pipeline with their status."""
    return _JOBS.get(pipeline_id, [])


def job_log(job_id: int, lines: int = 100) -> str:
    """The last ``lines`` lines of one job's log."""
    return "\n".join(_LOGS.get(job_id, f"no job {job_id}").splitlines()[-lines:])


TOOLS = {"list_jobs": list_jobs, "job_log": job_log}
