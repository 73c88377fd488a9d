"""An agent whose tools an MCP server (its own process) serves: they bind by
name, and the server's death is an observation the model reads."""

from __future__ import annotations

from registry.executor import COMPLETED
from tests.conftest import LibraryRepo
from tests.support.executor_fixtures import executor_for

MCP_AGENT = """\
name: MCP user
type: tool_calling
max_iterations: 4
model: {name: test-model}
tools:
  - {name: add, description: Adds., parameters: {type: object, required: [a, b], properties: {a: {type: integer}, b: {type: integer}}}}
  - {name: die, description: Stops the server., parameters: {type: object}}
prompt_templates:
  user: "{{ question }}"
inputs: {type: object, required: [question], properties: {question: {type: string}}}
"""


def test_tools_of_an_mcp_server_bind_by_name_and_its_death_is_an_observation(repo: LibraryRepo) -> None:
    from registry.executor.mcp_tools import McpTools
    from tests.support.mcp_commands import STDIO

    repo.release("v1.0.0", {"tools/mcp.yml": MCP_AGENT})
    replies = [
        {"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}]},
        {"when": "^5$", "tool_calls": [{"name": "die", "arguments": {}}]},
        {"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 1}}]},
        {"when": "is not running", "content": "The tool server is down; 2 + 3 = 5."},
    ]
    with executor_for(repo.path, replies, tools=[McpTools("calc", STDIO)]) as executor:
        result = executor.run("tools/mcp", {"question": "2 + 3?"})
    statuses = [t.attributes["registry.tool.status"] for t in result.trace.spans("execute_tool")]
    assert (result.outcome, result.output) == (COMPLETED, "The tool server is down; 2 + 3 = 5."), result.trace.as_text()
    assert statuses == ["ok", "error", "error"]
    # The death was seen, not waited out: a call left hanging would have ended in the tool's timeout.
    assert "exited with status 3" in result.trace.spans("execute_tool")[2].attributes["registry.tool.output"]
