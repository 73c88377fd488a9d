"""``prompt-registry eval``: a library's eval files run on two sides (a
base and a head release, or the working tree), compared, and gated.

The library is found as every command finds it (``--repo``, ``--example``,
the checkout holding the current directory); the model, tools and
retrievers are bound as ``run`` binds them (``registry.cli.run``; with
``--example``, the example's own fill in those not given:
``registry.cli.example_bindings``), and
``--record``, ``--replay`` and ``--cache`` wrap that model
(``registry.providers.recording``, ``registry.providers.chatcache``). The
work is ``registry.evals``': sides, plan, runner, gate and reports.

Exit codes: 0 the gate passes; 1 it does not (``--fail-on``: a regression,
a failure, a case that could not be judged on head, an eval file of which
nothing ran on head); 2 bad usage or configuration, in one line.
"""

from __future__ import annotations

import argparse
import os
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from registry.cli.evalreports import report_targets, write_reports
from registry.cli.example_bindings import bind_example
from registry.cli.run import add_run_options, build_executor, check_timeouts, model_from
from registry.cli.sources import add_source_options, command_settings, service_opener
from registry.errors import ConfigurationError, InvalidRequest

if TYPE_CHECKING:
    from registry.cli.command import Commands
    from registry.evals.plan import Planned
    from registry.evals.results import EvalRun
    from registry.evals.runner import RunOptions
    from registry.evals.sides import Side
    from registry.executor import Executor
    from registry.providers.chat import ChatModel
    from registry.settings import Settings

FORMATS = ("text", "markdown", "junit", "json", "html")
"""The report formats, as ``registry.evals.reports.RENDERERS`` names them
(named here so that ``--help`` imports no report)."""
FAIL_ON = ("regression", "failure", "never")
"""What ``--fail-on`` takes: ``registry.evals.gate.FAIL_ON``, named here so
that every command's start does not import the evals package."""
MAX_CONCURRENCY = 256


def register(commands: Commands) -> None:
    evaluate = commands.add_parser(
        "eval",
        help="run eval cases on two releases, compare, gate",
        description="Run the cases of the library's eval files (ai_gateway/evals/<usecase>/<name>.yml) on"
        " --head and, with --base, on base too, each side resolved once and pinned; compare them case by case"
        " and gate on --fail-on. A REF is a release, range or channel, or 'worktree' (the files on disk,"
        " uncommitted changes included). Exit 0 when the gate passes, 1 when it does not, 2 on bad usage.",
    )
    evaluate.add_argument("agents", nargs="*", metavar="USECASE/NAME", help="only the eval files of these agents")
    evaluate.add_argument("--head", metavar="REF", default="worktree", help="what is evaluated (default: worktree)")
    evaluate.add_argument("--base", metavar="REF", help="what head is compared with (default: nothing)")
    evaluate.add_argument(
        "--changed", action="store_true", help="only agents whose digest or eval file differs between the sides"
    )
    add_source_options(evaluate)
    runs = evaluate.add_argument_group("runs")
    runs.add_argument("--repeat", type=int, metavar="N", help="runs of every case (default: as its file says)")
    runs.add_argument("--concurrency", type=int, default=8, metavar="N", help="cases in flight at once (default 8)")
    runs.add_argument("--limit", type=int, metavar="N", help="read at most N cases of each eval file")
    runs.add_argument("--trace-dir", metavar="DIR", help="write each run's trace there, as <trace id>.json")
    add_run_options(evaluate)
    exchanges = evaluate.add_argument_group("recorded model exchanges")
    once = exchanges.add_mutually_exclusive_group()
    once.add_argument("--record", metavar="FILE", help="write every model exchange to FILE (YAML, reviewable)")
    once.add_argument("--replay", metavar="FILE", help="answer every model call from FILE, with no model at all")
    exchanges.add_argument("--cache", metavar="DIR", help="reuse replies to identical requests across runs")
    report = evaluate.add_argument_group("report and gate")
    report.add_argument(
        "--format",
        choices=FORMATS,
        default="text",
        help="text (default; colour on a terminal), markdown (a merge request note), junit (XML for CI"
        " test reports), json (everything) or html (one self-contained page with word diffs)",
    )
    report.add_argument("-o", "--output", metavar="FILE", help="write the report here instead of stdout")
    report.add_argument(
        "--report",
        action="append",
        metavar="FORMAT=FILE",
        help="write one more report of the same run, in FORMAT, to FILE (repeatable: --report junit=eval.xml)",
    )
    report.add_argument(
        "--fail-on", choices=FAIL_ON, default="regression", help="what fails the gate (default: regression)"
    )
    report.add_argument(
        "--tolerance", type=float, default=0.0, metavar="X", help="pass-rate fall allowed, 0 to 1 (default 0)"
    )
    evaluate.set_defaults(handler=_eval)


def _eval(args: argparse.Namespace, stack: ExitStack) -> int:
    import asyncio

    from registry.evals.plan import plan
    from registry.evals.sides import open_side

    options = run_options(args)
    reports = report_targets(args, FORMATS)
    for agent in args.agents:
        _check_agent(agent)
    if args.changed and not args.base:
        raise ConfigurationError("--changed compares two sides: give --base REF too")
    settings = command_settings(args, stack)
    service = stack.enter_context(service_opener(settings)())
    directory = _working_tree(settings) if "worktree" in (args.head, args.base) else None
    head = open_side("head", args.head, service, directory=directory)
    base = open_side("base", args.base, service, directory=directory) if args.base else None
    planned = plan(head, base, agents=args.agents, changed=args.changed)
    bind_example(args, stack)
    executor = build_executor(args, stack, model=eval_model(args))
    result = asyncio.run(_evaluate(executor, options, head, base, planned, changed=args.changed))
    write_reports(reports, result)
    return 0 if result.gate.passed else 1


def run_options(args: argparse.Namespace) -> RunOptions:
    """The runner's options, each checked (``ConfigurationError`` naming the option)."""
    from registry.evals.runner import RunOptions

    check_timeouts(args)
    if not 1 <= args.concurrency <= MAX_CONCURRENCY:
        raise ConfigurationError(f"--concurrency must be from 1 to {MAX_CONCURRENCY}")
    from registry.evals.dataset import MAX_REPEAT

    if args.repeat is not None and not 1 <= args.repeat <= MAX_REPEAT:
        raise ConfigurationError(f"--repeat must be from 1 to {MAX_REPEAT}")
    if args.limit is not None and args.limit < 1:
        raise ConfigurationError("--limit must be 1 or more")
    if not 0 <= args.tolerance <= 1:
        raise ConfigurationError("--tolerance is a fall in pass rate from 0 to 1 (0.05: five points)")
    trace_dir = Path(args.trace_dir) if args.trace_dir else None
    if trace_dir is not None:
        try:
            trace_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigurationError(f"--trace-dir {args.trace_dir}: {exc.strerror or exc}") from exc
    return RunOptions(
        concurrency=args.concurrency,
        repeat=args.repeat,
        limit=args.limit,
        fail_on=args.fail_on,
        tolerance=args.tolerance,
        trace_dir=trace_dir,
    )


def _check_agent(agent: str) -> None:
    usecase, slash, name = agent.partition("/")
    if not slash:
        raise ConfigurationError(f"{agent!r} is not an agent: name one as usecase/name")
    from registry.format.definition import check_agent_name  # Jinja and jsonschema: for this command only

    try:
        check_agent_name(usecase, name)
    except InvalidRequest as exc:
        raise ConfigurationError(f"{agent!r} is not an agent: {exc.detail}") from exc


def eval_model(args: argparse.Namespace) -> ChatModel:
    """The model ``run`` would use (``--model``, ``--models``...), else the
    replay file; then cached and recorded as asked."""
    from registry.providers import CachingChatModel, RecordingChatModel, ReplayChatModel

    if args.replay:
        given = [name for name, value in (("--model", args.model), ("--models", args.models)) if value]
        if given or args.cache:
            extra = ", ".join([*given, *(["--cache"] if args.cache else [])])
            raise ConfigurationError(f"--replay answers every call from its file, with no model: drop {extra}")
        model: ChatModel = ReplayChatModel(args.replay)
    else:
        model = model_from(args, os.environ)
        if args.cache:
            model = CachingChatModel(model, args.cache)
    if args.record:
        model = RecordingChatModel(model, args.record)
    return model


def _working_tree(settings: Settings) -> Path:
    """The library's files on disk, for a side that is ``worktree``."""
    from registry.authoring.agentsroot import find_agents_root

    directory = settings.repo or settings.worktree
    if not directory:
        raise ConfigurationError("worktree: this library is a remote's mirror, with no working tree; name a release")
    find_agents_root(Path(directory), settings.root)  # says so if there are no files, as lint does
    return Path(directory)


async def _evaluate(
    executor: Executor, options: RunOptions, head: Side, base: Side | None, planned: list[Planned], *, changed: bool
) -> EvalRun:
    from registry.evals.runner import EvalRunner

    async with executor:  # closing it closes the model: a recording is written then
        return await EvalRunner(executor, options).run(head, base, planned, changed=changed)
