"""``prompt-registry run`` and ``prompt-registry index``, as a user runs
them: the installed command, in a subprocess, against the bundled library,
a real registry process and a real OpenAI-compatible server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run
from tests.support.openai_server import ScriptedModelServer
from tests.support.servers import RegistryProcess, clean_environment

GATED_REPLIES = """\
- agent: support/draft_answer
  content: "Open Settings › Billing and choose Request refund."
- agent: compliance/response_gate
  content: '{"allow": true}'
"""


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("prompt-registry:")]
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture
def replies(tmp_path: Path) -> Path:
    path = tmp_path / "replies.yml"
    path.write_text(GATED_REPLIES, encoding="utf-8")
    return path


def test_run_prints_the_trace_the_outcome_and_the_answer(replies: Path, tmp_path: Path) -> None:
    result = run(
        "run", "support/gated_answer", "--example", "--input", "question=How do I get a refund?",
        "--model", f"scripted:{replies}", "--trace-file", str(tmp_path / "trace.json"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "outcome: completed · support/gated_answer @ v1.1.0" in result.stdout
    assert "└─ gate gate" in result.stdout
    assert result.stdout.rstrip().endswith("Open Settings › Billing and choose Request refund.")
    trace = json.loads((tmp_path / "trace.json").read_text(encoding="utf-8"))
    assert trace["attributes"]["registry.outcome"] == "completed"
    assert "HTTP Request" not in result.stderr


def test_run_as_json_has_outcome_output_release_and_trace(replies: Path) -> None:
    result = run(
        "run", "support/gated_answer", "--example", "--release", "v1.1.0", "--input", "question=refund?",
        "--model", f"scripted:{replies}", "--format", "json",
    )  # fmt: skip
    answer = json.loads(result.stdout)
    assert answer["outcome"] == "completed" and answer["output"].startswith("Open Settings")
    assert answer["release"]["tag"] == "v1.1.0" and len(answer["release"]["commit"]) == 40
    assert answer["trace"]["children"][0]["name"] == "invoke_agent support/gated_answer"


def test_a_blocked_run_exits_1_with_the_gate_text(tmp_path: Path) -> None:
    script = tmp_path / "block.yml"
    script.write_text(
        "- {agent: support/draft_answer, content: 'the password is hunter2'}\n"
        '- {agent: compliance/response_gate, content: \'{"allow": false, "reason": "a secret"}\'}\n',
        encoding="utf-8",
    )
    result = run(
        "run", "support/gated_answer", "--example", "--input", "question=pw?", "--model", f"scripted:{script}",
        "--format", "json",
    )  # fmt: skip
    assert result.returncode == 1
    answer = json.loads(result.stdout)
    assert answer["outcome"] == "blocked" and "hunter2" not in answer["output"]


def test_a_scripted_run_without_mcp_never_imports_the_mcp_openai_or_redis_sdks(replies: Path) -> None:
    # Importing mcp took about a second of every start (BENCHMARKS.md, "Evaluations"),
    # openai another for a scripted model, and redis-py (with the OpenTelemetry SDK) a
    # sixth of it with no Redis configured.
    arguments = ["run", "support/gated_answer", "--example", "--input", "question=refund?"]
    arguments += ["--model", f"scripted:{replies}"]
    probe = (
        "import sys\nfrom registry.cli.main import main\n"
        f"status = main({arguments!r})\n"
        "loaded = {name.split('.')[0] for name in sys.modules}\n"
        "print(status, sorted(loaded & {'mcp', 'mcp_types', 'openai', 'redis'}), file=sys.stderr)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=clean_environment()
    )
    assert result.stderr.splitlines()[-1] == "0 []", result.stderr


def test_the_command_line_starts_without_the_libraries_only_some_commands_use() -> None:
    # Each was a part of every command's start, --version included: together
    # about 0.6 s of imports (lint, the definitions' validators, the client, evals).
    heavy = {"jinja2", "jsonschema", "httpx", "mcp", "openai", "anthropic", "git", "redis", "asyncio"}
    probe = (
        "import sys\nimport registry.cli.main\nfrom registry.cli.main import _parser\n_parser()\n"
        f"print(sorted({{name.split('.')[0] for name in sys.modules}} & set({sorted(heavy)!r})))\n"
        "print(sorted(n for n in sys.modules if n == 'registry.authoring.lint' or n.startswith('registry.evals')))\n"
        "print('importlib.metadata' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=clean_environment()
    )
    assert result.stdout.splitlines() == ["[]", "[]", "False"], result.stdout + result.stderr


def test_a_run_needing_an_unbound_tool_exits_1_naming_it(replies: Path) -> None:
    result = run(
        "run", "assistant/react_text", "--example", "--input", "pipeline_id=4", "--input", "question=why?",
        "--model", f"scripted:{replies}",
    )  # fmt: skip
    assert result.returncode == 1
    assert "outcome: failed" in result.stdout
    assert "no implementation bound for tool job_log, list_jobs" in result.stdout


def test_tools_from_a_python_module_and_an_index_for_rag(tmp_path: Path) -> None:
    (tmp_path / "my_tools.py").write_text(
        "TOOLS = {'list_jobs': lambda pipeline_id: [{'id': 9, 'status': 'failed'}],\n"
        "         'job_log': lambda job_id, lines=100: 'OOM killed'}\n",
        encoding="utf-8",
    )
    (tmp_path / "script.yml").write_text(
        '- content: "Thought: look\\nAction: list_jobs\\nAction Input: {\\"pipeline_id\\": 4}"\n'
        "- when: '^Observation: \\[\\{\"id\": 9'\n"
        "  content: 'Final Answer: job 9 ran out of memory'\n",
        encoding="utf-8",
    )
    result = run(
        "run", "assistant/react_text", "--example", "--input", "pipeline_id=4", "--input", "question=why?",
        "--model", "scripted:script.yml", "--tools", "my_tools:TOOLS", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.rstrip().endswith("job 9 ran out of memory")

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "tokens.md").write_text("# Deploy tokens\n\nRevoke the old token after rotating.\n", encoding="utf-8")
    indexed = run("index", str(docs), "-o", str(tmp_path / "docs.sqlite"))
    assert indexed.returncode == 0 and "1 passage from 1 file" in indexed.stdout
    (tmp_path / "rag.yml").write_text("- when: 'rotate'\n  content: 'Revoke it [1].'\n", encoding="utf-8")
    answered = run(
        "run", "assistant/docs_rag", "--example", "--input", "question=how do I rotate a token?",
        "--model", "scripted:rag.yml", "--retriever", f"product-docs={tmp_path / 'docs.sqlite'}", "--format", "json",
        cwd=tmp_path,
    )  # fmt: skip
    answer = json.loads(answered.stdout)
    assert answer["outcome"] == "completed", answer["error"]
    retrieve = answer["trace"]["children"][0]["children"][0]
    assert (
        retrieve["operation"] == "retrieve"
        and retrieve["attributes"]["registry.passages"][0]["title"] == "Deploy tokens"
    )


def test_run_against_a_registry_process_and_an_openai_compatible_server(tmp_path: Path) -> None:
    replies: list[dict[str, Any]] = [{"content": "A merge train queues merge requests."}]
    with RegistryProcess("--example") as registry, ScriptedModelServer(replies, tmp_path) as model:
        result = run(
            "run", "commit_message/one_line", "--registry", registry.base, "--release", "v1.0.0",
            "--input", "diff=-a = 1\n+a = 2 in merge_train.py",
            "--model", model.base_url, "--model-name", "served-model", "--format", "json",
            env={"OPENAI_API_KEY": "sk-test"},
        )  # fmt: skip
        sent = model.requests()
    answer = json.loads(result.stdout)
    assert (answer["outcome"], answer["output"]) == ("completed", "A merge train queues merge requests.")
    assert answer["release"]["tag"] == "v1.0.0"
    assert sent[0]["model"] == "served-model"
    assert "+a = 2 in merge_train.py" in sent[0]["messages"][-1]["content"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--input", "question"], "--input takes KEY=VALUE"),
        (["--model", "scripted:missing.yml"], "missing.yml does not exist"),
        (["--model", "ftp://x"], "expected an http(s) URL or scripted:FILE"),
        (["--tools", "no_such_module:TOOLS"], "cannot import no_such_module"),
        (["--tools", "json"], "expected package.module:ATTR"),
        (["--mcp", "docs"], "--mcp takes NAME=COMMAND or NAME=URL"),
        (["--retriever", "docs=missing.sqlite"], "missing.sqlite"),
        (["--model-map", "a"], "--model-map takes FROM=TO"),
        (["--timeout", "0"], "--timeout must be more than 0"),
        (["--history", "missing.json"], "cannot read missing.json"),
        (["--registry", "registry:8080"], "expected an http(s) URL"),
    ],
)
def test_bad_usage_exits_2_with_one_line(tmp_path: Path, replies: Path, arguments: list[str], message: str) -> None:
    base = ["run", "chat/minimal", "--example", "--model", f"scripted:{replies}"]
    result = run(*base, *arguments, cwd=tmp_path)
    assert result.returncode == 2
    assert message in one_line_error(result)


def test_a_script_of_replies_with_yaml_problems_exits_2_with_each_problem_on_its_line(tmp_path: Path) -> None:
    script = tmp_path / "replies.yml"
    script.write_text(
        "- content: a\n  content: b\n- content: !!binary aGk=\n  agent: x\n  agent: y\n", encoding="utf-8"
    )
    result = run("run", "chat/minimal", "--example", "--model", f"scripted:{script}", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        f"prompt-registry: {script}:2:3: duplicate key 'content' (first defined on line 1), and 2 more problems",
        f"  {script}:2:3: /0/content: duplicate key 'content' (first defined on line 1)",
        f"  {script}:3:12: /1/content: unsupported YAML tag 'tag:yaml.org,2002:binary'; use plain JSON types",
        f"  {script}:5:3: /1/agent: duplicate key 'agent' (first defined on line 4)",
    ]


def test_an_agent_that_does_not_exist_exits_1(replies: Path) -> None:
    result = run("run", "support/nope", "--example", "--model", f"scripted:{replies}")
    assert result.returncode == 1
    assert "support/nope does not exist" in one_line_error(result)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [(["missing-dir"], "does not exist"), (["."], "nothing to index")],
)
def test_index_refuses_with_one_line(tmp_path: Path, arguments: list[str], message: str) -> None:
    result = run("index", *arguments, "-o", "out.sqlite", cwd=tmp_path)
    assert result.returncode == 2
    assert message in one_line_error(result)


def test_the_python_example_of_the_executor_docs_runs_as_written(tmp_path: Path) -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "executor.md").read_text(encoding="utf-8")
    section = page[page.index("## The Python API") :]
    code = section[
        section.index("```python\n") + len("```python\n") : section.index("```", section.index("```python") + 3)
    ]
    with RegistryProcess("--example") as registry:
        script = tmp_path / "example.py"
        script.write_text(code.replace("http://127.0.0.1:8080", registry.base), encoding="utf-8")
        result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.splitlines()[:2]
    assert first == "completed job 88 (rspec) failed"
    assert second.startswith("v1.1.0 sha256:")


def test_the_summary_counts_a_call_that_got_no_answer(tmp_path: Path) -> None:
    with ScriptedModelServer([{"content": "late", "delay": 5}], tmp_path) as model:
        result = run(
            "run", "commit_message/one_line", "--example", "--input", "diff=+a = 2", "--model", model.base_url,
            "--model-name", "served-model", "--timeout", "0.5",
        )  # fmt: skip
    assert result.returncode == 1
    assert "· 1 model call (0 answered) ·" in result.stdout


def test_a_model_map_that_matches_nothing_is_one_line_on_stderr(replies: Path) -> None:
    result = run(
        "run", "support/gated_answer", "--example", "--input", "question=refund?", "--model", f"scripted:{replies}",
        "--model-map", "gpt4o=llama",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    [line] = [line for line in result.stderr.splitlines() if "gpt4o" in line]
    assert line.endswith(
        "model map gpt4o=llama (--model-map) matched no model the agents of support/gated_answer name"
        " (claude-3-5-haiku-20241022)"
    )


def test_a_run_names_only_the_map_its_agents_do_not_use(replies: Path) -> None:
    result = run(
        "run", "support/gated_answer", "--example", "--input", "question=refund?", "--model", f"scripted:{replies}",
        "--model-map", "claude-3-5-haiku-20241022=smol", "--model-map", "claude-3-5-sonnet-20241022=smol",
        "--format", "json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    [warning] = json.loads(result.stdout)["warnings"]
    assert warning.startswith("model map claude-3-5-sonnet-20241022=smol (--model-map) matched no model")
    assert warning in result.stderr and "haiku-20241022=smol" not in warning
