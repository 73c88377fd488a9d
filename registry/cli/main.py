"""The ``prompt-registry`` command.

Subcommands call the service (or, for ``serve``, start the server) directly;
only ``export --url`` talks to a running registry, over HTTP. Each group of
subcommands is a module of this package that declares its commands beside
their options and handlers (``registry.cli.command``); this module builds the
parser from them, calls the handler, and turns errors into exit codes.

Which library a command reads follows one rule, the same for every command:
``--repo PATH``, else ``REGISTRY_REPO``, else the git checkout that holds the
current directory. Commands that read files rather than releases (``lint``,
``test``, ``new``, and ``render``/``parse`` without ``--release``) fall back
to the current directory when there is no checkout; ``serve`` falls back to
the bundled example (``--example``), and says so; the others stop with a
message saying where they looked.

Exit codes: 0 success; 1 a check failed or the thing asked for does not exist
(a release, a channel, an agent); 2 bad usage or configuration; 3 an internal
error (a bug: reported in one line, never a traceback); 130 interrupted;
141 the reader of the output went away (``| head``), as for a process killed
by SIGPIPE.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from contextlib import ExitStack

from registry.cli import agents, authoring, evals, index, releases, run, serve
from registry.cli.command import Handler
from registry.cli.logs import configure_logging
from registry.errors import ConfigurationError, NotFound, RegistryError
from registry.models import close_matches, did_you_mean, location

# In the order `prompt-registry --help` lists their commands.
GROUPS = (serve, releases, authoring, run, evals, agents, index)

_INTERNAL_ERROR = 3
_INTERRUPTED = 130
_OUTPUT_CLOSED = 141


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="prompt-registry",
        description="A git-native, release-pinned registry of agent prompt definitions."
        " Every option falls back to its environment variable (REGISTRY_REPO, ...).",
    )
    parser.add_argument("--version", action=_Version, nargs=0, help="show program's version number and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in GROUPS:
        group.register(commands)
    return parser


class _Parser(argparse.ArgumentParser):
    """The top-level parser: an option no command takes is refused by that
    command's parser, with a "did you mean" among its own options."""

    def parse_args(self, args: Sequence[str] | None = None, namespace: None = None) -> argparse.Namespace:  # type: ignore[override]
        parsed, unknown = self.parse_known_args(args)
        if unknown:
            command = self._subcommand(parsed)
            message = f"unrecognized arguments: {' '.join(unknown)}"
            option = next((word.split("=", 1)[0] for word in unknown if word.startswith("--")), None)
            if command is not None and option is not None:
                known = [name for action in command._actions for name in action.option_strings]
                hint = did_you_mean(close_matches(option, known))
                message += f"; {hint}" if hint else ""
            (command or self).error(message)
        return parsed

    def _subcommand(self, parsed: argparse.Namespace) -> argparse.ArgumentParser | None:
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                return action.choices.get(getattr(parsed, "command", None) or "")
        return None


class _Version(argparse.Action):
    """``--version``, read from the installed package's metadata only when
    asked: importing importlib.metadata is a tenth of every command's start."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("prompt-registry")
        except PackageNotFoundError:  # running from a checkout that was never installed
            found = "unknown"
        sys.stdout.write(f"{parser.prog} {found}\n")
        parser.exit()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``prompt-registry`` console script."""
    for name in ("stdin", "stdout", "stderr"):
        if getattr(sys, name) is None:
            # Started with that descriptor closed (`>&-`): reading finds
            # nothing and writing goes nowhere, as the caller asked.
            setattr(sys, name, open(os.devnull, "r" if name == "stdin" else "w"))
    try:
        try:
            args = _parser().parse_args(argv)
        except SystemExit as exc:  # --help, --version and usage errors: flushed below like any output
            status = exc.code if isinstance(exc.code, int) else 2
        else:
            handler: Handler = args.handler  # set by the command's group (registry.cli.command)
            configure_logging()
            with ExitStack() as stack:
                status = handler(args, stack)
        # Flushed here, where a closed pipe can still be handled, rather than
        # at interpreter exit, where Python can only print a traceback.
        sys.stdout.flush()
        return status
    except NotFound as exc:
        print(f"prompt-registry: {exc}", file=sys.stderr)
        return 1
    except (ConfigurationError, RegistryError) as exc:
        print(f"prompt-registry: {exc}", file=sys.stderr)
        issues = getattr(exc, "errors", [])
        # The message names the first problem already; the list is for the rest.
        for issue in issues if len(issues) > 1 else []:
            where = location(issue.file, issue.line, issue.column)
            print(f"  {where + ': ' if where else ''}{issue.path or '/'}: {issue.message}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`| head`). Whatever is still buffered has
        # nowhere to go: point stdout at /dev/null so that the final flush
        # at exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return _OUTPUT_CLOSED
    except OSError as exc:  # the machine said no: a full disk, a read-only directory, ...
        print(f"prompt-registry: {f'{exc.filename}: ' if exc.filename else ''}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("prompt-registry: interrupted", file=sys.stderr)
        return _INTERRUPTED
    except Exception as exc:  # a bug: one line, not a traceback, and a distinct exit code
        print(f"prompt-registry: internal error ({type(exc).__name__}: {exc}); please report it", file=sys.stderr)
        return _INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
