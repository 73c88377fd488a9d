"""The ``prompt-registry`` command.

Subcommands call the service (or, for ``serve``, start the server) directly;
the CLI never talks to a registry over HTTP.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from registry.app import open_store
from registry.errors import ConfigurationError, RegistryError
from registry.settings import Settings


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prompt-registry",
        description="A git-native, release-pinned registry of agent prompt definitions.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser(
        "serve",
        help="serve a repository (or a directory) over HTTP",
        description="Serve agent definitions over HTTP under gunicorn. With neither --repo nor"
        " --worktree, the bundled library/ is served as the release 'worktree'."
        " Every option falls back to its environment variable (REGISTRY_REPO, ...).",
    )
    source = serve.add_mutually_exclusive_group()
    source.add_argument("--repo", metavar="PATH", help="git repository whose release tags are served [REGISTRY_REPO]")
    source.add_argument(
        "--worktree", metavar="DIR", help="plain directory served as one release named 'worktree' [REGISTRY_WORKTREE]"
    )
    serve.add_argument("--root", help="agents root inside the repository (default ai_gateway/agents) [REGISTRY_ROOT]")
    serve.add_argument(
        "--channels-file", help="channels file on the default branch (default channels.yml) [REGISTRY_CHANNELS_FILE]"
    )
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1) [REGISTRY_HOST]")
    serve.add_argument("--port", type=int, help="port to listen on (default 8080) [REGISTRY_PORT]")
    serve.add_argument("--workers", type=int, help="worker processes (default 2) [REGISTRY_WORKERS]")
    serve.add_argument("--threads", type=int, help="threads per worker (default 4) [REGISTRY_THREADS]")
    return parser


def _serve(settings: Settings) -> int:
    from registry.server import RegistryServer

    # Open the store once before forking, so that a wrong path fails here
    # with a clear message rather than in every worker.
    store = open_store(settings)
    try:
        count = len(store.releases().releases)
    finally:
        store.close()
    logging.getLogger("registry").info(
        "serving %s (%d release%s) on http://%s:%d",
        settings.source_description,
        count,
        "" if count == 1 else "s",
        settings.host,
        settings.port,
    )
    RegistryServer(settings).run()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``prompt-registry`` console script."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "serve":
            # A source given on the command line replaces the other one's
            # environment variable ("" clears it; None means "not given").
            settings = Settings.from_env(
                repo=args.repo if args.repo else ("" if args.worktree else None),
                worktree=args.worktree if args.worktree else ("" if args.repo else None),
                root=args.root,
                channels_file=args.channels_file,
                host=args.host,
                port=args.port,
                workers=args.workers,
                threads=args.threads,
            )
            return _serve(settings)
    except (ConfigurationError, RegistryError) as exc:
        print(f"prompt-registry: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
