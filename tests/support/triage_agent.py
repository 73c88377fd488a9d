"""The Python tools and the model script that ``agents serve --example`` runs
the example's CI triage agent with, for the UI's task pages: a model that
asks for a pipeline's jobs and answers from what the tools return."""

from __future__ import annotations

from pathlib import Path

from tests.support.servers import CLI

TOOLS = """\
def list_jobs(pipeline_id):
    return f"jobs of pipeline {pipeline_id}: lint failed, test passed"

def job_log(job_id, lines=100):
    return "E501 line too long"

TOOLS = {"list_jobs": list_jobs, "job_log": job_log}
"""

# The first reply that matches the last message is the one sent: the answers
# to an observation come before the action every task's first message gets.
SCRIPT = """\
- when: "rejected this call: do not read the jobs"
  content: "Final Answer: I did not look at the jobs, as asked."
  repeat: true
- when: "jobs of pipeline 8"
  content: "Final Answer: pipeline 8 failed in its lint job."
  repeat: true
- when: "jobs of pipeline 7"
  content: "Final Answer: pipeline 7 failed in its lint job."
  repeat: true
- when: "^Pipeline 7 failed"
  content: "Thought: which job failed?\\nAction: list_jobs\\nAction Input: {\\"pipeline_id\\": 7}"
  repeat: true
"""


def triage_service_command(directory: Path, port: int) -> list[str]:
    """Write the tools and the script into ``directory`` and give the
    ``agents serve`` command that runs the triage agent from there, with
    ``list_jobs`` waiting for approval."""
    (directory / "browser_tools.py").write_text(TOOLS, encoding="utf-8")
    (directory / "script.yml").write_text(SCRIPT, encoding="utf-8")
    command = [CLI, "agents", "serve", "--example", "--model", "scripted:script.yml", "--tools", "browser_tools:TOOLS"]
    return [*command, "--require-approval", "list_jobs", "--port", str(port), "--data-dir", "data"]
