"""``prompt-registry serve``: the registry over HTTP under gunicorn.

With gevent workers (the default) the command runs itself again in an
interpreter patched for gevent first (``_gevent_patched``,
``_exec_patched_for_gevent``). ``check_port_is_free`` is shared with
``agents serve``.
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import socket
import sys
from contextlib import ExitStack
from typing import TYPE_CHECKING, NoReturn

from registry.cli.sources import add_source_options, command_settings
from registry.errors import ConfigurationError
from registry.models import plural
from registry.settings import Settings, environment_for, redact
from registry.web.metricsdir import prepare_metrics_directory

if TYPE_CHECKING:
    from registry.cli.command import Commands


def register(commands: Commands) -> None:
    serve = commands.add_parser(
        "serve",
        help="serve a repository (or a directory) over HTTP",
        description="Serve agent definitions over HTTP under gunicorn: the releases of the library"
        " (--repo, REGISTRY_REPO, or the git checkout holding the current directory). Outside any"
        " checkout, and with --example, the bundled example library is served, tagged v1.0.0 and v1.1.0.",
    )
    add_source_options(serve)
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
    serve.set_defaults(handler=serve_command)


def serve_command(args: argparse.Namespace, stack: ExitStack) -> int:
    if _worker_class(args) == "gevent" and not _gevent_patched():
        # Before anything is built: the fresh interpreter builds its own.
        _exec_patched_for_gevent()
    settings = command_settings(
        args,
        stack,
        serve_example=True,
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


def _serve(settings: Settings) -> int:
    # Before registry.serving.wiring and .server (which import prometheus_client):
    # metrics from every worker process are added up through this directory.
    prepare_metrics_directory()
    from registry.serving.server import RegistryServer
    from registry.serving.wiring import open_service

    check_port_is_free(settings.host, settings.port)
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


def check_port_is_free(host: str, port: int) -> None:
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
