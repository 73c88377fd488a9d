"""``prompt-registry run``: the executor from the command line, and the
executor's options and bindings that ``agents serve`` shares.

``run`` fetches its agent through ``registry.client``: from a registry over
HTTP (``--registry URL``), or from a library on this machine, served in
process to the same client (``--repo``, ``--example``, the checkout holding
the current directory). Exit codes: 0 ``completed``; 1 ``blocked``,
``exhausted``, ``failed``, or an agent or release that does not exist; 2
bad usage or configuration (main's mapping of ``ConfigurationError``).
``--stream`` prints the answer as it arrives, then the trace and outcome;
with ``--format jsonl``, every event of the run, one JSON object a line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from registry.cli.sources import add_source_options, command_settings
from registry.errors import ConfigurationError
from registry.models import plural
from registry.settings import Settings

if TYPE_CHECKING:
    from registry.cli.command import Commands
    from registry.client import RegistryClient
    from registry.executor.executor import Executor, RunResult
    from registry.executor.retrieval import Retriever
    from registry.executor.tools import ToolProvider
    from registry.providers.chat import ChatModel

SCRIPTED = "scripted:"


def register(commands: Commands) -> None:
    run = commands.add_parser(
        "run",
        help="run an agent or a pattern against a chat model",
        description="Run USECASE/NAME of a release (default: the latest) to its outcome against the models"
        " its definitions name (each model.provider bound by --models FILE, else openai and anthropic from"
        " their SDKs' environment), one OpenAI-compatible endpoint (--model URL) or a scripted model,"
        " with the tools and retrievers you bind. The agent"
        " comes from a registry (--registry URL) or a library on this machine (--repo, --example, or the"
        " checkout holding the current directory). Exit 0 when the run completes, 1 when it is blocked,"
        " exhausted or failed, 2 on bad usage.",
    )
    run.add_argument("agent", metavar="USECASE/NAME")
    run.add_argument("--release", help="version, range or channel (default: the latest release)")
    run.add_argument("--registry", metavar="URL", help="fetch from this registry [REGISTRY_URL]")
    run.add_argument("--token", help="bearer token for --registry [REGISTRY_TOKEN]")
    add_source_options(run)
    run.add_argument(
        "--input", action="append", default=[], metavar="KEY=VALUE", help="an input; VALUE is JSON, or else a string"
    )
    run.add_argument("--inputs-file", metavar="FILE", help="a JSON or YAML file of inputs")
    run.add_argument(
        "--history", metavar="FILE", help="prior turns of the conversation: a JSON list of {role, content}"
    )
    add_run_options(run)
    run.add_argument(
        "--stream",
        action="store_true",
        help="print the answer as it arrives, then the trace and outcome; with --format jsonl, every event",
    )
    run.add_argument(
        "--format", choices=("text", "json", "jsonl"), default="text", help="jsonl: one event a line (with --stream)"
    )
    run.add_argument("--trace-file", metavar="FILE", help="also write the run's trace there, as JSON")
    run.set_defaults(handler=_run)


def _run(args: argparse.Namespace, stack: ExitStack) -> int:
    default_registry(args)
    return run_command(args, stack, lambda: command_settings(args, stack))


def default_registry(args: argparse.Namespace) -> None:
    """With no library named, agents come from ``REGISTRY_URL`` when it is set."""
    if args.registry is None and not any((args.repo, args.worktree, args.remote, args.example)):
        args.registry = os.environ.get("REGISTRY_URL") or None


def add_run_options(run: argparse.ArgumentParser) -> None:
    """The executor's options, shared by ``run`` and ``agents serve``."""
    model = run.add_argument_group("model")
    model.add_argument(
        "--models",
        metavar="FILE",
        help="a models file binding each provider definitions name (model.provider) to an adapter, with"
        " routes [REGISTRY_MODELS]; default: openai and anthropic, from their SDKs' environment"
        " (OPENAI_API_KEY, OPENAI_BASE_URL, ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL)",
    )
    model.add_argument(
        "--model",
        metavar="URL|scripted:FILE",
        help="instead of --models: send every call to this OpenAI-compatible Chat Completions base URL,"
        " whatever provider the definitions name, or answer with scripted:FILE, replies listed in YAML",
    )
    model.add_argument(
        "--api-key", help="the key of --model URL, or of the default openai binding (default: OPENAI_API_KEY)"
    )
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


# The executor's modules (and asyncio, openai, mcp) are imported by the
# functions that use them: every other command, `serve` first, starts without them.


def model_from(args: argparse.Namespace, environ: Mapping[str, str]) -> ChatModel:
    """The model the options name: scripted, one OpenAI-compatible endpoint
    (``--model``), or the bindings of a models file (``--models``,
    ``REGISTRY_MODELS``), else of the SDKs' environment, routed per call."""
    from registry.executor import ScriptedModel
    from registry.providers.modelsfile import ModelsFile, load_models_file
    from registry.providers.router import RoutingChatModel

    if args.model_retries < 0:
        raise ConfigurationError("--model-retries must be 0 or more")
    if args.models and args.model:
        raise ConfigurationError(
            "give --models FILE (each definition's provider, bound in the file) or --model URL|scripted:FILE"
            " (every call to one model), not both"
        )
    target = args.model
    if target and target.startswith(SCRIPTED):
        return ScriptedModel.from_file(target[len(SCRIPTED) :])
    if target:
        if not target.startswith(("http://", "https://")):
            raise ConfigurationError(f"--model {target!r}: expected an http(s) URL or scripted:FILE")
        # Here, not above: the openai SDK's import is about a second of a
        # scripted run's start, and only this branch needs it.
        from registry.executor import OpenAIChatModel

        return OpenAIChatModel(
            base_url=target,
            api_key=args.api_key or environ.get("OPENAI_API_KEY") or None,
            max_retries=args.model_retries,
        )
    path = args.models or environ.get("REGISTRY_MODELS") or None
    if path and args.api_key:
        raise ConfigurationError("--api-key is not for a models file, which names each key's variable (api_key_env)")
    models = load_models_file(path) if path else ModelsFile.from_environment(environ)
    keys = {**environ, "OPENAI_API_KEY": args.api_key} if args.api_key else environ
    return RoutingChatModel(models, environ=keys, max_retries=args.model_retries)


def tool_providers(args: argparse.Namespace) -> list[ToolProvider]:
    from registry.executor import PythonTools

    # Like `python -m`: a tools module next to where the command runs imports.
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    providers: list[ToolProvider] = [PythonTools.from_reference(reference) for reference in args.tools]
    for spec in args.mcp:
        name, equals, target = spec.partition("=")
        if not equals or not name or not target:
            raise ConfigurationError(f"--mcp takes NAME=COMMAND or NAME=URL, not {spec!r}")
        # Only with --mcp: importing the MCP SDK is most of a second of every
        # `run` and `eval` start (bench/evals.py), and most never use it.
        from registry.executor.mcp_tools import McpTools

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


def check_timeouts(args: argparse.Namespace) -> None:
    """``--timeout`` and ``--tool-timeout`` (of ``add_run_options``) are in range."""
    for name, value in (("--timeout", args.timeout), ("--tool-timeout", args.tool_timeout)):
        if value is not None and not 0 < value <= 86400:
            raise ConfigurationError(f"{name} must be more than 0 and at most 86400 seconds")


def build_executor(
    args: argparse.Namespace,
    stack: ExitStack,
    *,
    model: ChatModel,
    registry: Callable[[], RegistryClient] | None = None,
    warn_unused_model_map: bool = False,
) -> Executor:
    """An executor with the tools, retrievers and model names of
    ``add_run_options`` (their timeouts checked by ``check_timeouts``);
    ``stack`` closes the retrievers. ``registry`` opens the agents' registry
    once every option is found good: a mistyped option costs no library
    (``--example`` builds a repository first)."""
    from registry.executor import Executor

    found_retrievers = retrievers(args)
    for retriever in found_retrievers.values():
        stack.callback(retriever.close)  # type: ignore[attr-defined]
    tools, mapped = tool_providers(args), model_map(args.model_map)
    return Executor(
        model=model,
        registry=registry() if registry is not None else None,
        tools=tools,
        retrievers=found_retrievers,
        model_name=args.model_name,
        model_map=mapped,
        tool_timeout=args.tool_timeout,
        run_timeout=args.timeout,
        warn_unused_model_map=warn_unused_model_map,
    )


def run_command(args: argparse.Namespace, stack: ExitStack, local_settings: Callable[[], Settings]) -> int:
    """Run one agent and print its outcome; the exit code follows the outcome."""
    import asyncio

    check_timeouts(args)
    _check_stream_format(args)
    from registry.authoring.commands import parse_inputs

    inputs = dict(parse_inputs(args.input, args.inputs_file))
    history = _history(args.history) if args.history else []
    model = model_from(args, os.environ)
    # One run: a map its agents do not use is a mistake worth a line. A
    # service (agents serve) runs many agents and does not judge so.
    executor = build_executor(
        args,
        stack,
        model=model,
        registry=lambda: stack.enter_context(registry_client(args, local_settings)),
        warn_unused_model_map=True,
    )
    printed = False
    if args.stream:
        streamed = _stream_once(executor, args.agent, inputs, args.release, history, jsonl=args.format == "jsonl")
        result, printed = asyncio.run(streamed)
    else:
        result = asyncio.run(_run_once(executor, args.agent, inputs, args.release, history))
    if args.trace_file:
        _write(args.trace_file, json.dumps(result.as_dict()["trace"], ensure_ascii=False, indent=2) + "\n")
    if args.format == "json":
        sys.stdout.write(json.dumps(result.as_dict(), ensure_ascii=False, indent=2) + "\n")
    elif args.format == "text":
        # Streamed, the answer is printed already: the rest follows it.
        sys.stdout.write(("\n\n" if printed else "") + _text(result, answer=not args.stream))
    return 0 if result.completed else 1


def _check_stream_format(args: argparse.Namespace) -> None:
    if args.stream and args.format == "json":
        raise ConfigurationError("--stream prints the run as it happens: use --format text or jsonl, not json")
    if args.format == "jsonl" and not args.stream:
        raise ConfigurationError("--format jsonl prints the events of a streamed run: add --stream")


async def _run_once(
    executor: Executor, agent: str, inputs: dict[str, Any], release: str | None, history: list[dict[str, Any]]
) -> RunResult:
    async with executor:
        return await executor.arun(agent, inputs, release=release, history=history)


async def _stream_once(
    executor: Executor,
    agent: str,
    inputs: dict[str, Any],
    release: str | None,
    history: list[dict[str, Any]],
    *,
    jsonl: bool,
) -> tuple[RunResult, bool]:
    """Run ``agent``, printing each event (jsonl) or the answer's text as it
    comes; the result, and whether any text was printed."""
    from registry.executor.events import OutcomeEvent, TextEvent

    result, printed = None, False
    async with executor:
        async for event in executor.astream(agent, inputs, release=release, history=history):
            if jsonl:
                sys.stdout.write(json.dumps(event.as_dict(), ensure_ascii=False) + "\n")
            elif isinstance(event, TextEvent):
                sys.stdout.write(event.text)
                printed = True
            sys.stdout.flush()
            if isinstance(event, OutcomeEvent):
                result = event.result
    assert result is not None  # a stream's last event is its outcome
    return result, printed


def registry_client(args: argparse.Namespace, local_settings: Callable[[], Settings]) -> RegistryClient:
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


def _text(result: RunResult, *, answer: bool = True) -> str:
    lines = [
        result.trace.as_text(),
        "",
        f"outcome: {result.outcome} · {result.agent} @ {result.tag} ({result.commit[:12]})"
        f" · {_calls(result)} · {result.seconds:.2f} s",
    ]
    if result.error:
        lines.append(f"reason: {result.error}")
    if answer and result.output is not None:
        lines += ["", result.output]
    return "\n".join(lines) + "\n"


def _calls(result: RunResult) -> str:
    calls = plural(result.llm_calls, "model call")
    return calls if result.llm_replies == result.llm_calls else f"{calls} ({result.llm_replies} answered)"
