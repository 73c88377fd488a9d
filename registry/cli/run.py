"""``prompt-registry run`` and ``prompt-registry index``: the executor from
the command line.

``run`` fetches its agent through ``registry.client``: from a registry over
HTTP (``--registry URL``), or from a library on this machine, served in
process to the same client (``--repo``, ``--example``, the checkout holding
the current directory). Exit codes: 0 ``completed``; 1 ``blocked``,
``exhausted``, ``failed``, or an agent or release that does not exist; 2
bad usage or configuration (main's mapping of ``ConfigurationError``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from registry.authoring.commands import parse_inputs
from registry.errors import ConfigurationError
from registry.models import plural
from registry.settings import Settings

if TYPE_CHECKING:
    from registry.client import RegistryClient
    from registry.executor.chat import ChatModel
    from registry.executor.executor import Executor, RunResult
    from registry.executor.retrieval import Retriever
    from registry.executor.tools import ToolProvider

SCRIPTED = "scripted:"


def add_run_options(run: argparse.ArgumentParser) -> None:
    """The executor's options, shared by ``run`` and (later) ``agents serve``."""
    model = run.add_argument_group("model")
    model.add_argument(
        "--model",
        metavar="URL|scripted:FILE",
        help="an OpenAI-compatible Chat Completions base URL (default: OPENAI_BASE_URL, else OpenAI's),"
        " or scripted:FILE, replies listed in YAML",
    )
    model.add_argument("--api-key", help="the endpoint's key (default: OPENAI_API_KEY)")
    model.add_argument("--model-name", help="send this model name for every call, whatever the definitions say")
    model.add_argument(
        "--model-map",
        action="append",
        default=[],
        metavar="FROM=TO",
        help="send TO where a definition names model FROM (repeatable)",
    )
    model.add_argument("--model-retries", type=int, default=3, metavar="N", help="retries on 429 and 5xx (default 3)")
    bound = run.add_argument_group("tools and retrievers")
    bound.add_argument(
        "--tools", action="append", default=[], metavar="MOD:ATTR", help="a mapping of tool names to Python callables"
    )
    bound.add_argument(
        "--mcp",
        action="append",
        default=[],
        metavar="NAME=CMD_OR_URL",
        help="an MCP server's tools: a command run over stdio, or a streamable HTTP URL (repeatable)",
    )
    bound.add_argument(
        "--retriever",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="bind the retriever NAME (a definition's rag.retriever) to an index made by `prompt-registry index`",
    )
    bound.add_argument("--tool-timeout", type=float, default=30.0, metavar="S", help="seconds per tool call (30)")
    bound.add_argument("--timeout", type=float, metavar="S", help="seconds the whole run may take")


# The executor's modules (and openai, mcp) are imported by the functions
# that use them: every other command, `serve` first, starts without them.


def model_from(args: argparse.Namespace, environ: Mapping[str, str]) -> ChatModel:
    """The model the options name: scripted, or an OpenAI-compatible endpoint."""
    from registry.executor import OpenAIChatModel, ScriptedModel

    target = args.model or environ.get("OPENAI_BASE_URL") or None
    if target and target.startswith(SCRIPTED):
        return ScriptedModel.from_file(target[len(SCRIPTED) :])
    if target and not target.startswith(("http://", "https://")):
        raise ConfigurationError(f"--model {target!r}: expected an http(s) URL or scripted:FILE")
    if args.model_retries < 0:
        raise ConfigurationError("--model-retries must be 0 or more")
    return OpenAIChatModel(
        base_url=target, api_key=args.api_key or environ.get("OPENAI_API_KEY") or None, max_retries=args.model_retries
    )


def tool_providers(args: argparse.Namespace) -> list[ToolProvider]:
    from registry.executor import PythonTools
    from registry.executor.mcp_tools import McpTools

    # Like `python -m`: a tools module next to where the command runs imports.
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    providers: list[ToolProvider] = [PythonTools.from_reference(reference) for reference in args.tools]
    for spec in args.mcp:
        name, equals, target = spec.partition("=")
        if not equals or not name or not target:
            raise ConfigurationError(f"--mcp takes NAME=COMMAND or NAME=URL, not {spec!r}")
        providers.append(McpTools(name, target))
    return providers


def retrievers(args: argparse.Namespace) -> dict[str, Retriever]:
    from registry.executor import SqliteFtsRetriever

    bound: dict[str, Retriever] = {}
    for spec in args.retriever:
        name, equals, path = spec.partition("=")
        if not equals or not name or not path:
            raise ConfigurationError(f"--retriever takes NAME=FILE, not {spec!r}")
        if name in bound:
            raise ConfigurationError(f"--retriever {name!r} is bound twice")
        bound[name] = SqliteFtsRetriever(path)
    return bound


def model_map(pairs: Sequence[str]) -> dict[str, str]:
    mapped: dict[str, str] = {}
    for pair in pairs:
        source, equals, target = pair.partition("=")
        if not equals or not source or not target:
            raise ConfigurationError(f"--model-map takes FROM=TO, not {pair!r}")
        mapped[source] = target
    return mapped


def run_command(args: argparse.Namespace, stack: ExitStack, local_settings: Callable[[], Settings]) -> int:
    """Run one agent and print its outcome; the exit code follows the outcome."""
    from registry.executor import Executor

    for name, value in (("--timeout", args.timeout), ("--tool-timeout", args.tool_timeout)):
        if value is not None and not 0 < value <= 86400:
            raise ConfigurationError(f"{name} must be more than 0 and at most 86400 seconds")
    inputs = dict(parse_inputs(args.input, args.inputs_file))
    history = _history(args.history) if args.history else []
    client = stack.enter_context(_client(args, local_settings))
    found_retrievers = retrievers(args)
    for retriever in found_retrievers.values():
        stack.callback(retriever.close)  # type: ignore[attr-defined]
    executor = Executor(
        model=model_from(args, os.environ),
        registry=client,
        tools=tool_providers(args),
        retrievers=found_retrievers,
        model_name=args.model_name,
        model_map=model_map(args.model_map),
        tool_timeout=args.tool_timeout,
        run_timeout=args.timeout,
        # One run: a map its agents do not use is a mistake worth a line. A
        # service (agents serve) runs many agents and does not judge so.
        warn_unused_model_map=True,
    )
    result = asyncio.run(_run_once(executor, args.agent, inputs, args.release, history))
    if args.trace_file:
        _write(args.trace_file, json.dumps(result.as_dict()["trace"], ensure_ascii=False, indent=2) + "\n")
    if args.format == "json":
        sys.stdout.write(json.dumps(result.as_dict(), ensure_ascii=False, indent=2) + "\n")
    else:
        sys.stdout.write(_text(result))
    return 0 if result.completed else 1


async def _run_once(
    executor: Executor, agent: str, inputs: dict[str, Any], release: str | None, history: list[dict[str, Any]]
) -> RunResult:
    async with executor:
        return await executor.arun(agent, inputs, release=release, history=history)


def _client(args: argparse.Namespace, local_settings: Callable[[], Settings]) -> RegistryClient:
    import httpx

    from registry.client import RegistryClient

    if args.registry:
        if not args.registry.startswith(("http://", "https://")):
            raise ConfigurationError(f"--registry {args.registry!r}: expected an http(s) URL")
        return RegistryClient(args.registry, token=args.token or os.environ.get("REGISTRY_TOKEN") or None, timeout=10)
    # A library on this machine, served in process to the same client: what
    # runs is exactly what a gateway would fetch. That registry is the
    # operator's own and answers only this process, so it asks no token;
    # REGISTRY_API_TOKENS still guards whatever this process serves over HTTP.
    from dataclasses import replace

    from registry.serving.app import create_app

    app = create_app(replace(local_settings(), api_tokens=(), admin_tokens=()))
    return RegistryClient("http://registry.local", transport=httpx.WSGITransport(app=app), timeout=30)


def _history(path: str) -> list[dict[str, Any]]:
    try:
        loaded = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise ConfigurationError(f"{path} is not JSON: {exc}") from exc
    if not isinstance(loaded, list) or not all(
        isinstance(turn, dict)
        and turn.get("role") in ("user", "assistant")
        and isinstance(turn.get("content"), str)
        and set(turn) == {"role", "content"}
        for turn in loaded
    ):
        raise ConfigurationError(f"{path} must hold a list of {{role: user|assistant, content: text}} turns")
    return loaded


def _write(path: str, text: str) -> None:
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"cannot write {path}: {exc.strerror or exc}") from exc


def _text(result: RunResult) -> str:
    lines = [
        result.trace.as_text(),
        "",
        f"outcome: {result.outcome} · {result.agent} @ {result.tag} ({result.commit[:12]})"
        f" · {_calls(result)} · {result.seconds:.2f} s",
    ]
    if result.error:
        lines.append(f"reason: {result.error}")
    if result.output is not None:
        lines += ["", result.output]
    return "\n".join(lines) + "\n"


def _calls(result: RunResult) -> str:
    calls = plural(result.llm_calls, "model call")
    return calls if result.llm_replies == result.llm_calls else f"{calls} ({result.llm_replies} answered)"


def index_command(args: argparse.Namespace) -> int:
    from registry.executor import build_index

    if not 200 <= args.chunk_chars <= 20000:
        raise ConfigurationError("--chunk-chars must be between 200 and 20000")
    summary = build_index(args.directory, args.output, chunk_chars=args.chunk_chars)
    print(
        f"wrote {args.output}: {plural(summary.passages, 'passage')} from {plural(summary.files, 'file')}"
        + (f", {plural(len(summary.skipped), 'file')} skipped" if summary.skipped else "")
    )
    for path, why in summary.skipped:
        print(f"  skipped {path}: {why}", file=sys.stderr)
    return 0


def agents_serve_command(args: argparse.Namespace, settings: Settings, library: Settings | None) -> int:
    """``agents serve``: the Agent Protocol service under gunicorn. Its
    options are checked once here, before the workers start, so that a
    mistake is one line now rather than a failure in every worker."""
    from registry.protocol.app import create_app, database_url
    from registry.protocol.server import AgentProtocolServer

    if args.registry and not args.registry.startswith(("http://", "https://")):
        raise ConfigurationError(f"--registry {args.registry!r}: expected an http(s) URL")
    model_from(args, os.environ)
    tool_providers(args)
    for retriever in retrievers(args).values():
        retriever.close()  # type: ignore[attr-defined]
    url = database_url(settings)

    def build() -> Any:
        from registry.executor import Executor

        client = _client(args, lambda: library) if library is not None else _client(args, _no_library)
        executor = Executor(
            model=model_from(args, os.environ),
            registry=client,
            tools=tool_providers(args),
            retrievers=retrievers(args),
            model_name=args.model_name,
            model_map=model_map(args.model_map),
            tool_timeout=args.tool_timeout,
            run_timeout=args.timeout,
            require_approval=settings.agents_require_approval,
        )
        return create_app(settings, executor=executor, registry=client)

    logging.getLogger("registry").info(
        "Agent Protocol service: agents from %s, tasks in %s",
        args.registry or (library.source_description if library is not None else "?"),
        url.split("@")[-1] if "@" in url else url,
    )
    AgentProtocolServer(settings, build).run()
    return 0


def _no_library() -> Settings:
    raise ConfigurationError("give --registry URL, or a library (--repo PATH, --example)")


def default_data_dir(environ: Mapping[str, str]) -> str:
    """Where ``agents serve`` keeps its tasks when told nothing: the XDG data directory."""
    base = environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "prompt-registry", "agents")
