"""The ``prompt-registry`` command.

Subcommands call the service (or, for ``serve``, start the server) directly;
only ``export --url`` talks to a running registry, over HTTP.

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
import contextlib
import json
import logging
import os
import secrets
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from functools import partial
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from registry.authoring import commands
from registry.authoring.examples import GOLDEN_SUFFIX, report_text, run_examples
from registry.authoring.lint import find_agents_root, lint
from registry.authoring.lintformat import FORMATS, render_report
from registry.cli.logs import configure_logging
from registry.cli.run import add_run_options, agents_serve_command, default_data_dir, index_command, run_command
from registry.cli.terminal import use_colour
from registry.errors import ConfigurationError, NotFound, RegistryError, RegistryUnavailable
from registry.format.bundle import Bundle
from registry.models import location, plural
from registry.settings import DEFAULT_ROOT, Settings, environment_for, redact
from registry.store.checkout import Library, configured_root, existing_directory, find_library
from registry.web.metricsdir import prepare_metrics_directory

if TYPE_CHECKING:
    from registry.serving.service import RegistryService


LIBRARY_HELP = "the prompt library, a git checkout (default: the one holding the current directory) [REGISTRY_REPO]"
_NOT_IN_A_LIBRARY = (
    "no prompt library here: {cwd} is not inside a git checkout; run this inside one, or give --repo PATH"
    " (or REGISTRY_REPO)"
)
_INTERNAL_ERROR = 3
_INTERRUPTED = 130
_OUTPUT_CLOSED = 141


def _add_source_options(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--repo", metavar="PATH", help=LIBRARY_HELP)
    source.add_argument(
        "--worktree", metavar="DIR", help="plain directory served as one release named 'worktree' [REGISTRY_WORKTREE]"
    )
    source.add_argument("--remote", metavar="URL", help="git URL to mirror and serve [REGISTRY_REMOTE]")
    source.add_argument(
        "--example",
        action="store_true",
        help="the bundled example library, as a temporary git repository tagged v1.0.0 and v1.1.0",
    )
    parser.add_argument("--root", help="agents root inside the repository (default ai_gateway/agents) [REGISTRY_ROOT]")
    parser.add_argument(
        "--channels-file", help="channels file on the default branch (default channels.yml) [REGISTRY_CHANNELS_FILE]"
    )
    parser.add_argument(
        "--data-dir", help="where to remember the commit each tag was first seen at [REGISTRY_DATA_DIR]"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prompt-registry",
        description="A git-native, release-pinned registry of agent prompt definitions."
        " Every option falls back to its environment variable (REGISTRY_REPO, ...).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser(
        "serve",
        help="serve a repository (or a directory) over HTTP",
        description="Serve agent definitions over HTTP under gunicorn: the releases of the library"
        " (--repo, REGISTRY_REPO, or the git checkout holding the current directory). Outside any"
        " checkout, and with --example, the bundled example library is served, tagged v1.0.0 and v1.1.0.",
    )
    _add_source_options(serve)
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1) [REGISTRY_HOST]")
    serve.add_argument("--port", type=int, help="port to listen on, 0 for any free one (default 8080) [REGISTRY_PORT]")
    serve.add_argument("--workers", type=int, help="worker processes (default 2) [REGISTRY_WORKERS]")
    serve.add_argument("--threads", type=int, help="threads per gthread worker (default 4) [REGISTRY_THREADS]")
    serve.add_argument(
        "--worker-class",
        choices=("gevent", "gthread"),
        help="gevent: a slow client holds a socket, not a thread (default); gthread: a thread per request"
        " [REGISTRY_WORKER_CLASS]",
    )
    serve.add_argument(
        "--sync-interval", type=float, help="seconds between fetches (default 60) [REGISTRY_SYNC_INTERVAL]"
    )
    serve.add_argument("--webhook-secret", help="secret for POST /v1/hooks/git [REGISTRY_WEBHOOK_SECRET]")
    serve.add_argument("--redis-url", metavar="URL", help="Redis shared by replicas (optional) [REDIS_URL]")
    serve.add_argument(
        "--redis-prefix", help="prefix of Redis keys and channels (default prompt-registry) [REGISTRY_REDIS_PREFIX]"
    )

    releases = commands.add_parser(
        "releases",
        help="list releases and channels",
        description="List the releases, newest first, marking prereleases and the latest release,"
        " with the channels that point to each; then any channel that cannot be resolved.",
    )
    _add_source_options(releases)
    releases.add_argument("--json", action="store_true", help="print the same JSON as GET /v1/releases")

    resolve = commands.add_parser(
        "resolve",
        help="print the release a version, range or channel resolves to",
        description="Print the tag and commit that RELEASE resolves to now: an exact version,"
        " an npm-style range (^1.2, ~1.2.3, >=1.1.0 <2.0.0) or a channel (@production).",
    )
    resolve.add_argument("release", metavar="RELEASE")
    _add_source_options(resolve)
    resolve.add_argument("--json", action="store_true", help="print the resolution as JSON")

    export = commands.add_parser(
        "export",
        help="write a release's agents to a bundle, a client's fallback",
        description="Write every agent and partial of RELEASE, with its tag, commit and digests, to one"
        " JSON file that RegistryClient(bundle=FILE) serves from when the registry is unreachable."
        " From a repository (the source options) or, with --url, from a running registry.",
    )
    export.add_argument("--release", default=None, help="version, range or channel (default: latest)")
    export.add_argument("-o", "--output", required=True, metavar="FILE", help="where to write the bundle")
    _add_source_options(export)
    export.add_argument("--url", help="a running registry to export from, instead of a repository")
    export.add_argument("--token", help="bearer token for --url [REGISTRY_TOKEN]")

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
    _add_source_options(parse)
    parse.add_argument("--release", help="version, range or channel (default: the working tree)")

    render = commands.add_parser(
        "render",
        help="print an agent's rendered messages",
        description="Render USECASE/NAME with inputs and print the messages. Renders the library's"
        " files as they are in the checkout or, with --release, a release of it.",
    )
    render.add_argument("agent", metavar="USECASE/NAME")
    _add_source_options(render)
    render.add_argument("--release", help="version, range or channel (default: the working tree)")
    render.add_argument(
        "--input", action="append", default=[], metavar="KEY=VALUE", help="an input; VALUE is JSON, or else a string"
    )
    render.add_argument("--inputs-file", metavar="FILE", help="a JSON or YAML file of inputs")
    render.add_argument("--format", choices=("text", "json"), default="text")

    run = commands.add_parser(
        "run",
        help="run an agent or a pattern against a chat model",
        description="Run USECASE/NAME of a release (default: the latest) to its outcome against an"
        " OpenAI-compatible model or a scripted one, with the tools and retrievers you bind. The agent"
        " comes from a registry (--registry URL) or a library on this machine (--repo, --example, or the"
        " checkout holding the current directory). Exit 0 when the run completes, 1 when it is blocked,"
        " exhausted or failed, 2 on bad usage.",
    )
    run.add_argument("agent", metavar="USECASE/NAME")
    run.add_argument("--release", help="version, range or channel (default: the latest release)")
    run.add_argument("--registry", metavar="URL", help="fetch from this registry [REGISTRY_URL]")
    run.add_argument("--token", help="bearer token for --registry [REGISTRY_TOKEN]")
    _add_source_options(run)
    run.add_argument(
        "--input", action="append", default=[], metavar="KEY=VALUE", help="an input; VALUE is JSON, or else a string"
    )
    run.add_argument("--inputs-file", metavar="FILE", help="a JSON or YAML file of inputs")
    run.add_argument(
        "--history", metavar="FILE", help="prior turns of the conversation: a JSON list of {role, content}"
    )
    add_run_options(run)
    run.add_argument("--format", choices=("text", "json"), default="text")
    run.add_argument("--trace-file", metavar="FILE", help="also write the run's trace there, as JSON")

    agents = commands.add_parser(
        "agents",
        help="the Agent Protocol service: run agents as tasks, step by step",
        description="Serve the Agent Protocol v1 (/ap/v1/agent/tasks, steps, artifacts) over the executor."
        " See docs/agent-protocol.md.",
    )
    agents_commands = agents.add_subparsers(dest="agents_command", required=True, metavar="COMMAND")
    agents_serve = agents_commands.add_parser(
        "serve",
        help="serve the Agent Protocol over HTTP",
        description="Serve tasks of agents fetched from a registry (--registry URL) or a library on this"
        " machine (--repo, --example, the checkout holding the current directory), run by the executor.",
    )
    agents_serve.add_argument("--registry", metavar="URL", help="fetch agents from this registry [REGISTRY_URL]")
    agents_serve.add_argument("--token", help="bearer token for --registry [REGISTRY_TOKEN]")
    _add_source_options(agents_serve)
    agents_serve.add_argument(
        "--database-url",
        help="sqlite:///PATH or postgresql+psycopg://USER@HOST/DB (default: tasks.db in the data directory)"
        " [REGISTRY_AGENTS_DATABASE_URL]",
    )
    agents_serve.add_argument(
        "--release", help="the release of a task that names none (default: latest) [REGISTRY_AGENTS_RELEASE]"
    )
    agents_serve.add_argument(
        "--require-approval",
        action="append",
        default=[],
        metavar="TOOL",
        help="a tool that waits for the user's decision before it runs (repeatable) [REGISTRY_AGENTS_REQUIRE_APPROVAL]",
    )
    agents_serve.add_argument("--host", help="address to listen on (default 127.0.0.1) [REGISTRY_HOST]")
    agents_serve.add_argument("--port", type=int, help="port (default 8090) [REGISTRY_PORT]")
    agents_serve.add_argument("--workers", type=int, help="worker processes (default 1)")
    agents_serve.add_argument("--threads", type=int, help="threads per worker, one step each (default 8)")
    add_run_options(agents_serve)

    index = commands.add_parser(
        "index",
        help="build a retrieval index of text and Markdown files",
        description="Index DIR's Markdown and text files into a SQLite FTS5 file (BM25 ranking) that"
        " `run --retriever NAME=FILE` binds to rag agents.",
    )
    index.add_argument("directory", metavar="DIR")
    index.add_argument("-o", "--output", required=True, metavar="FILE")
    index.add_argument("--chunk-chars", type=int, default=1500, metavar="N", help="the longest passage (1500)")
    return parser


def _required_library(explicit: str | None, root: str | None) -> Library:
    library = find_library(explicit, root=root)
    if library is None:
        raise ConfigurationError(_NOT_IN_A_LIBRARY.format(cwd=Path.cwd()))
    return library


def _files_library(args: argparse.Namespace) -> Library:
    """The library of a command that reads files, not releases: the
    current directory too when it is in no repository."""
    root = configured_root(args.root)
    if args.path:
        return Library(existing_directory(args.path, "PATH"), root)
    return find_library(args.repo, root=root) or Library(".", root)


def _settings(args: argparse.Namespace, stack: ExitStack, *, release: bool = True, **extra: Any) -> Settings:
    """Settings for a command that reads the store: the releases of the
    library (``release``) or its files."""
    data_dir = args.data_dir
    environment = environment_for("remote", "data_dir", "worktree")
    if (args.remote or environment.get("REGISTRY_REMOTE")) and not (data_dir or environment.get("REGISTRY_DATA_DIR")):
        data_dir = stack.enter_context(_temporary_directory("prompt-registry-mirror-"))
        logging.getLogger("registry").warning(
            "no --data-dir: mirroring into %s (removed at exit), and tag memory will not survive a restart", data_dir
        )
    repo, worktree, remote = args.repo, args.worktree, args.remote
    root = configured_root(args.root)
    if repo is not None:
        repo = _required_library(repo, root).path  # refuses an empty or missing path, naming --repo
    chosen = any((repo, worktree, remote)) or any(
        environment.get(variable, "").strip() for variable in ("REGISTRY_WORKTREE", "REGISTRY_REMOTE")
    )
    found = None if chosen or args.example else find_library(root=root)
    if args.example or (found is None and not chosen and args.command == "serve"):
        # Every other setting is checked before the example is built.
        Settings.from_env(repo="", worktree="", remote="", root=root, channels_file=args.channels_file, **extra)
        repo = _example_repository(stack)
        if args.command == "serve":
            logging.getLogger("registry").info(
                "serving the bundled example library%s: a temporary git repository at %s, tagged v1.0.0 and v1.1.0",
                "" if args.example else " (not inside a git checkout, and no --repo)",
                repo,
            )
    elif not chosen:
        if found is None and release:
            raise ConfigurationError(_NOT_IN_A_LIBRARY.format(cwd=Path.cwd()))
        repo, root = (found.path, found.root) if found else (".", root)
    if not release and repo:
        repo, worktree = None, repo
    # A source given on the command line replaces the other ones' environment
    # variables ("" clears one; None means "not given").
    settings = Settings.from_env(
        repo=repo or ("" if worktree or remote else None),
        worktree=worktree or ("" if repo or remote else None),
        remote=remote or ("" if repo or worktree else None),
        root=root,
        channels_file=args.channels_file,
        data_dir=data_dir,
        **extra,
    )
    if not release and settings.worktree:
        # Says so the way lint does, rather than "agent does not exist".
        find_agents_root(Path(settings.worktree), settings.root)
    return settings


@contextmanager
def _temporary_directory(prefix: str) -> Iterator[str]:
    """A temporary directory, removed when the command ends."""
    directory = tempfile.mkdtemp(prefix=prefix)
    owner = os.getpid()
    try:
        yield directory
    finally:
        # gunicorn's workers are forks of this process that unwind this block
        # too when they exit: only the process that made it removes it.
        if os.getpid() == owner:
            shutil.rmtree(directory, ignore_errors=True)


def _service_opener(settings: Settings) -> Callable[[], AbstractContextManager[RegistryService]]:
    """What an author command opens the service with, once its own arguments are found good."""
    from registry.serving.wiring import open_service

    return partial(open_service, settings)


def _example_repository(stack: ExitStack) -> str:
    """The example repository, in a temporary directory removed afterwards."""
    from registry.store.example import build_example_repository

    return str(build_example_repository(Path(stack.enter_context(_temporary_directory("prompt-registry-example-")))))


def _agents_serve(args: argparse.Namespace, stack: ExitStack) -> int:
    if args.registry is None and not any((args.repo, args.worktree, args.remote, args.example)):
        args.registry = os.environ.get("REGISTRY_URL") or None
    approvals = tuple(args.require_approval) or None
    network = {
        "host": args.host,
        "port": args.port if args.port is not None else (None if "REGISTRY_PORT" in os.environ else 8090),
        "workers": args.workers if args.workers is not None else 1,
        "threads": args.threads if args.threads is not None else 8,
        "agents_database_url": args.database_url,
        "agents_release": args.release,
        "agents_require_approval": approvals,
    }
    library = None if args.registry else _settings(args, stack)
    data_dir = args.data_dir or os.environ.get("REGISTRY_DATA_DIR") or default_data_dir(os.environ)
    settings = Settings.from_env(repo="", worktree="", remote="", data_dir=data_dir, **network)
    _check_port_is_free(settings.host, settings.port)
    return agents_serve_command(args, settings, library)


def _serve(settings: Settings) -> int:
    # Before registry.serving.wiring and .server (which import prometheus_client):
    # metrics from every worker process are added up through this directory.
    prepare_metrics_directory()
    from registry.serving.server import RegistryServer
    from registry.serving.wiring import open_service

    _check_port_is_free(settings.host, settings.port)
    # Open the store once before forking, so that a wrong path fails here
    # with a clear message rather than in every worker (and a new mirror is
    # created once, not raced by the workers).
    with open_service(settings) as service:
        count = len(service.store.releases().releases)
    # The address is logged by gunicorn once it listens ("Listening at"):
    # with --port 0 only it knows the port.
    logging.getLogger("registry").info(
        "serving %s (%s), caching %s",
        settings.source_description,
        plural(count, "release"),
        f"in memory and in Redis at {redact(settings.redis_url)}" if settings.redis_url else "in memory",
    )
    RegistryServer(settings).run()
    return 0


def _worker_class(args: argparse.Namespace) -> str:
    """The worker class ``serve`` will use, read as ``Settings`` reads it."""
    return Settings.from_env(environment_for("worker_class"), worker_class=args.worker_class).worker_class


def _gevent_patched() -> bool:
    from registry.web.geventpatch import patched

    return patched()


def _exec_patched_for_gevent() -> NoReturn:
    """Run this command again in a fresh interpreter that patches the standard
    library for gevent first (``registry.cli.geventmain``): same arguments, same
    environment, same process id, so signals reach gunicorn's master."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "registry.cli.geventmain", *sys.argv[1:]])


def _check_port_is_free(host: str, port: int) -> None:
    """Refuse a port in use now, in one line, rather than let gunicorn retry
    for seconds and exit 1. (Port 0 is always free.)"""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn binds
            probe.bind((host.strip("[]"), port))
    except OSError as exc:
        raise ConfigurationError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc} (--port 0 picks a free port)"
        ) from exc


def _releases(service: RegistryService, *, as_json: bool) -> int:
    overview = service.releases()
    if as_json:
        print(json.dumps(overview.as_dict(), indent=2))
        return 0
    channels = overview.channels.describe(overview.index)
    latest = overview.index.latest
    if not overview.index.releases:
        print("no releases: tag a commit with a version such as v1.0.0")
    pointing: dict[str, list[str]] = {}
    for name, entry in channels.items():
        if "tag" in entry:
            pointing.setdefault(entry["tag"], []).append("@" + name)
    width = max((len(r.tag) for r in overview.index.releases), default=3)
    for release in overview.index.releases:
        marks = [*pointing.get(release.tag, [])]
        if latest is not None and release.tag == latest.tag:
            marks.insert(0, "latest")
        if release.prerelease:
            marks.insert(0, "prerelease")
        print(f"{release.tag:<{width}}  {release.commit[:12]}  {' '.join(marks)}".rstrip())
    for name, entry in channels.items():
        if "error" in entry:
            print(f"@{name}: {entry['error']}", file=sys.stderr)
    for problem in overview.channels.problems:
        where = f"{problem.file}:{problem.line}" if problem.line else str(problem.file)
        print(f"{where}: {problem.message}", file=sys.stderr)
    return 0


def _resolve(service: RegistryService, release: str, *, as_json: bool) -> int:
    resolution = service.resolve(release)
    if as_json:
        print(json.dumps(resolution.as_dict(), indent=2))
    else:
        print(f"{resolution.release.tag}\t{resolution.release.commit}")
    return 0


def _lint(args: argparse.Namespace) -> int:
    progress = _progress if sys.stderr.isatty() else None
    library = _files_library(args)
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


def _download_bundle(url: str, release: str | None, token: str | None) -> bytes:
    import httpx

    # Only this setting: a server's settings in the environment are no
    # business of a download.
    token = Settings.from_env(environment_for("token"), token=token or None).token
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    params = {"release": release} if release else {}
    try:
        response = httpx.get(url.rstrip("/") + "/v1/bundle", params=params, headers=headers, timeout=60)
    except httpx.HTTPError as exc:
        raise RegistryUnavailable(f"cannot reach {url}: {exc}") from exc
    if response.status_code != 200:
        from registry.client.core import error_from_problem

        raise error_from_problem(response)
    return response.content


def _write_bundle(data: bytes, output: str) -> int:
    bundle = Bundle(data, origin="the exported bundle")
    verified = bundle.verify_all()  # what a client would check, before anyone ships it
    # Written beside the target and renamed: a reader never sees half a bundle.
    directory = os.path.dirname(os.path.abspath(output))
    temporary = None
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".bundle-", delete=False) as handle:
            temporary = handle.name
            handle.write(data)
        # A temporary file is private (0600); the bundle gets the mode any
        # new file of this process would get.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)
        os.replace(temporary, output)
    except OSError as exc:
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        raise ConfigurationError(f"cannot write {output}: {exc.strerror or exc}") from exc
    release = bundle.release
    invalid = len(bundle.agent_names()) - verified
    # Golden files travel in the bundle (a template may include any file),
    # but they are not partials.
    partials = sum(1 for path in bundle.partials if not any(p.endswith(GOLDEN_SUFFIX) for p in path.split("/")[:-1]))
    print(
        f"wrote {output}: {release.tag} ({release.commit[:12]}), {plural(verified, 'agent')}"
        f"{f' (and {invalid} invalid)' if invalid else ''}, {plural(partials, 'partial')}"
    )
    return 0


def _version() -> str:
    try:
        return version("prompt-registry")
    except PackageNotFoundError:  # running from a checkout that was never installed
        return "unknown"


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
            configure_logging()
            with ExitStack() as stack:
                status = _run(args, stack)
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


def _run(args: argparse.Namespace, stack: ExitStack) -> int:
    if args.command == "serve":
        if _worker_class(args) == "gevent" and not _gevent_patched():
            # Before anything is built: the fresh interpreter builds its own.
            _exec_patched_for_gevent()
        settings = _settings(
            args,
            stack,
            host=args.host,
            port=args.port,
            workers=args.workers,
            threads=args.threads,
            worker_class=args.worker_class,
            sync_interval=args.sync_interval,
            webhook_secret=args.webhook_secret,
            redis_url=args.redis_url,
            redis_prefix=args.redis_prefix,
            # One secret for every worker's UI sessions (each builds its own app).
            ui_secret=None if os.environ.get("REGISTRY_UI_SECRET") else secrets.token_urlsafe(32),
        )
        return _serve(settings)
    if args.command == "export" and args.url:
        return _write_bundle(_download_bundle(args.url, args.release, args.token), args.output)
    if args.command == "lint":
        return _lint(args)
    if args.command == "index":
        return index_command(args)
    if args.command == "run":
        if args.registry is None and not any((args.repo, args.worktree, args.remote, args.example)):
            args.registry = os.environ.get("REGISTRY_URL") or None
        return run_command(args, stack, lambda: _settings(args, stack))
    if args.command == "agents":
        return _agents_serve(args, stack)
    if args.command == "test":
        library = _files_library(args)
        report = run_examples(library.path, root=library.root, update=args.update)
        sys.stdout.write(report_text(report, colour=use_colour(sys.stdout)))
        return 1 if report.failed else 0
    if args.command in ("diff", "check-release"):
        library = _required_library(args.repo, configured_root(args.root))
        settings = Settings.from_env(repo=library.path, worktree="", remote="", root=library.root)
        if args.command == "diff":
            return commands.diff_command(
                library.path,
                _service_opener(settings),
                args.source,
                args.target,
                as_json=args.format == "json",
                colour=use_colour(sys.stdout),
            )
        return commands.check_release_command(
            library.path, _service_opener(settings), args.next_version, against=args.against, ref=args.ref
        )
    if args.command == "new":
        library = _files_library(args)
        return commands.scaffold(args.agent, library.path, root=library.root)
    if args.command == "parse":
        settings = _settings(args, stack, release=bool(args.release))
        if args.deprecated_reply_file:
            print("prompt-registry: --output-file is deprecated; use --reply-file", file=sys.stderr)
        reply = args.reply_file or args.deprecated_reply_file
        return commands.parse_command(args.agent, _service_opener(settings), reply, release=args.release)
    if args.command == "render":
        return commands.render_command(
            args.agent,
            _service_opener(_settings(args, stack, release=bool(args.release))),
            release=args.release,
            inputs=commands.parse_inputs(args.input, args.inputs_file),
            as_json=args.format == "json",
        )
    from registry.serving.wiring import open_service

    with open_service(_settings(args, stack)) as service:
        if service.syncer is not None and not service.syncer.sync_now():
            print(f"prompt-registry: {service.syncer.status().last_error}", file=sys.stderr)
            if not service.store.releases().releases:
                return 2
        if args.command == "releases":
            return _releases(service, as_json=args.json)
        if args.command == "export":
            return _write_bundle(service.export_bundle(args.release)[1], args.output)
        return _resolve(service, args.release, as_json=args.json)


if __name__ == "__main__":
    sys.exit(main())
