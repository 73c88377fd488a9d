"""The author's commands: ``lint``, ``new``, ``test``, ``diff``,
``check-release``, ``parse`` and ``render``, each declared beside its handler.

``lint``, ``new`` and ``test`` read a library's files (the current directory
too when it is in no checkout); ``diff`` and ``check-release`` need a
checkout; ``parse`` and ``render`` read the files, or a release with
``--release``. The work itself is ``registry.authoring``'s.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack
from typing import TYPE_CHECKING

from registry.authoring.lintformat import FORMATS, render_report
from registry.cli.sources import (
    LIBRARY_HELP,
    add_source_options,
    command_settings,
    files_library,
    required_library,
    service_opener,
)
from registry.cli.terminal import use_colour
from registry.errors import ConfigurationError
from registry.settings import DEFAULT_ROOT, Settings
from registry.store.checkout import configured_root

if TYPE_CHECKING:
    from registry.cli.command import Commands


def register(commands: Commands) -> None:
    for add in (_add_lint, _add_new, _add_test, _add_diff, _add_check_release, _add_parse, _add_render):
        add(commands)


def _add_lint(commands: Commands) -> None:
    lint = commands.add_parser(
        "lint",
        help="check a library checkout; exit 1 on any error",
        description="Check every definition and partial of a library checkout as the registry would"
        " serve it, plus what is probably a mistake (unused inputs and partials, computed includes,"
        " files outside the layout). Exit 1 when there is an error, 0 otherwise.",
    )
    lint.add_argument("path", nargs="?", help="the library (the same as --repo PATH)")
    lint.add_argument("--repo", metavar="PATH", help=LIBRARY_HELP)
    lint.add_argument("--root", help=f"agents root inside the library (default {DEFAULT_ROOT}) [REGISTRY_ROOT]")
    lint.add_argument("--format", choices=FORMATS, default="text", help="text (default), json, junit or codequality")
    lint.add_argument("-o", "--output", metavar="FILE", help="write the report here instead of stdout")
    lint.set_defaults(handler=_lint)


def _lint(args: argparse.Namespace, stack: ExitStack) -> int:
    progress = _progress if sys.stderr.isatty() else None
    library = files_library(args)
    from registry.authoring.lint import lint

    report = lint(library.path, root=library.root, progress=progress)
    if progress is not None:
        print("\r\033[K", end="", file=sys.stderr)
    colour = args.output is None and use_colour(sys.stdout)
    text = render_report(report, args.format, colour=colour)
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as exc:
            raise ConfigurationError(f"cannot write {args.output}: {exc.strerror or exc}") from exc
        print(render_report(report, "text").splitlines()[-1])
    else:
        sys.stdout.write(text)
    return 1 if report.errors else 0


def _progress(done: int, total: int) -> None:
    if done == total or done % 25 == 0:
        print(f"\rlinting {done}/{total} definitions", end="", file=sys.stderr, flush=True)


def _add_new(commands: Commands) -> None:
    new = commands.add_parser(
        "new",
        help="scaffold a valid definition",
        description="Write <root>/USECASE/NAME.yml: a valid definition to edit, with a header that points"
        " YAML editors at the definition's JSON Schema.",
    )
    new.add_argument("agent", metavar="USECASE/NAME")
    new.add_argument("path", nargs="?", help="the library (the same as --repo PATH)")
    new.add_argument("--repo", metavar="PATH", help=LIBRARY_HELP)
    new.add_argument("--root", help=f"agents root inside the library (default {DEFAULT_ROOT}) [REGISTRY_ROOT]")
    new.set_defaults(handler=_new)


def _new(args: argparse.Namespace, stack: ExitStack) -> int:
    library = files_library(args)
    from registry.authoring.commands import scaffold

    return scaffold(args.agent, library.path, root=library.root)


def _add_test(commands: Commands) -> None:
    test = commands.add_parser(
        "test",
        help="check every definition's examples; exit 1 on a failure",
        description="Render the examples of every definition in a library checkout and check their"
        " expectations (contains, not_contains, matches) and golden files.",
    )
    test.add_argument("path", nargs="?", help="the library (the same as --repo PATH)")
    test.add_argument("--repo", metavar="PATH", help=LIBRARY_HELP)
    test.add_argument("--root", help=f"agents root inside the library (default {DEFAULT_ROOT}) [REGISTRY_ROOT]")
    test.add_argument("--update", action="store_true", help="write golden files that are missing or differ")
    test.set_defaults(handler=_test)


def _test(args: argparse.Namespace, stack: ExitStack) -> int:
    library = files_library(args)
    from registry.authoring.examples import report_text, run_examples

    report = run_examples(library.path, root=library.root, update=args.update)
    sys.stdout.write(report_text(report, colour=use_colour(sys.stdout)))
    return 1 if report.failed else 0


def _add_diff(commands: Commands) -> None:
    diff = commands.add_parser(
        "diff",
        help="what changed between two versions of the library",
        description="Agents added, removed and changed between FROM and TO; for a changed agent, the"
        " fields that changed, a diff of each template and partial, and of what the model receives for"
        " each example. Each ref is a release (v1.2.0, ^1.2, @channel, latest), a branch, tag or commit,"
        " or 'worktree' for the checkout's files.",
    )
    diff.add_argument("source", metavar="FROM")
    diff.add_argument("target", metavar="TO")
    diff.add_argument("--repo", metavar="PATH", help=LIBRARY_HELP)
    diff.add_argument("--root", help=f"agents root (default {DEFAULT_ROOT}) [REGISTRY_ROOT]")
    diff.add_argument("--format", choices=("text", "json"), default="text")
    diff.set_defaults(handler=_diff)


def _diff(args: argparse.Namespace, stack: ExitStack) -> int:
    path, settings = _checkout(args)
    from registry.authoring.commands import diff_command

    return diff_command(
        path,
        service_opener(settings),
        args.source,
        args.target,
        as_json=args.format == "json",
        colour=use_colour(sys.stdout),
    )


def _add_check_release(commands: Commands) -> None:
    check = commands.add_parser(
        "check-release",
        help="check NEXT_VERSION is an honest release; exit 1 if not",
        description="Compare the working tree (or --ref) with the highest release below NEXT_VERSION (or"
        " --against) and classify the change: removing an agent or input, adding a required input or"
        " narrowing an input's type is major; adding an agent or an optional input is minor; any other"
        " change is patch. With no release below it, NEXT_VERSION is the first release: everything is"
        " added. Exit 1 when any definition is invalid (the registry would not serve it), when"
        " NEXT_VERSION is smaller than the change, or when an existing tag's content would change.",
    )
    check.add_argument("next_version", metavar="NEXT_VERSION")
    check.add_argument(
        "--against", metavar="RELEASE", help="the release to compare with (default: the highest below NEXT_VERSION)"
    )
    check.add_argument("--ref", default="worktree", help="what is being released (default: worktree)")
    check.add_argument("--repo", metavar="PATH", help=LIBRARY_HELP)
    check.add_argument("--root", help=f"agents root (default {DEFAULT_ROOT}) [REGISTRY_ROOT]")
    check.set_defaults(handler=_check_release)


def _check_release(args: argparse.Namespace, stack: ExitStack) -> int:
    path, settings = _checkout(args)
    from registry.authoring.commands import check_release_command

    return check_release_command(path, service_opener(settings), args.next_version, against=args.against, ref=args.ref)


def _checkout(args: argparse.Namespace) -> tuple[str, Settings]:
    """The checkout ``diff`` and ``check-release`` compare versions of, and
    the settings its service opens with."""
    library = required_library(args.repo, configured_root(args.root))
    return library.path, Settings.from_env(repo=library.path, worktree="", remote="", root=library.root)


def _add_parse(commands: Commands) -> None:
    parse = commands.add_parser(
        "parse",
        help="parse a model reply with an agent's output parser",
        description="Print what the agent's output parser makes of a model reply: a tool call, a final"
        " answer, or a parse error with the observation to send back (then exit 1). The same result as"
        " POST .../parse and the client's agent.parse.",
    )
    parse.add_argument("agent", metavar="USECASE/NAME")
    reply = parse.add_mutually_exclusive_group(required=True)
    reply.add_argument("--reply-file", metavar="FILE", help="the model's reply ('-' for stdin)")
    # The first name of --reply-file, kept so that existing scripts work.
    reply.add_argument("--output-file", dest="deprecated_reply_file", metavar="FILE", help=argparse.SUPPRESS)
    add_source_options(parse)
    parse.add_argument("--release", help="version, range or channel (default: the working tree)")
    parse.set_defaults(handler=_parse)


def _parse(args: argparse.Namespace, stack: ExitStack) -> int:
    settings = command_settings(args, stack, release=bool(args.release))
    if args.deprecated_reply_file:
        print("prompt-registry: --output-file is deprecated; use --reply-file", file=sys.stderr)
    reply = args.reply_file or args.deprecated_reply_file
    from registry.authoring.commands import parse_command

    return parse_command(args.agent, service_opener(settings), reply, release=args.release)


def _add_render(commands: Commands) -> None:
    render = commands.add_parser(
        "render",
        help="print an agent's rendered messages",
        description="Render USECASE/NAME with inputs and print the messages. Renders the library's"
        " files as they are in the checkout or, with --release, a release of it.",
    )
    render.add_argument("agent", metavar="USECASE/NAME")
    add_source_options(render)
    render.add_argument("--release", help="version, range or channel (default: the working tree)")
    render.add_argument(
        "--input", action="append", default=[], metavar="KEY=VALUE", help="an input; VALUE is JSON, or else a string"
    )
    render.add_argument("--inputs-file", metavar="FILE", help="a JSON or YAML file of inputs")
    render.add_argument("--format", choices=("text", "json"), default="text")
    render.set_defaults(handler=_render)


def _render(args: argparse.Namespace, stack: ExitStack) -> int:
    from registry.authoring.commands import parse_inputs, render_command

    return render_command(
        args.agent,
        service_opener(command_settings(args, stack, release=bool(args.release))),
        release=args.release,
        inputs=parse_inputs(args.input, args.inputs_file),
        as_json=args.format == "json",
    )
