"""``prompt-registry agents serve``: the Agent Protocol service, under
gunicorn with uvicorn's workers, over the executor (``registry.protocol``); ``prompt-registry
agents worker``: a process that only runs tasks (a DBOS worker), beside
servers that share its database.

Its agents come from a registry (``--registry URL``, ``REGISTRY_URL``) or a
library on this machine; its tasks are kept in a database (SQLite in the
data directory by default). The executor's options are ``run``'s.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Mapping
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from registry.cli.run import (
    add_run_options,
    default_registry,
    model_from,
    model_map,
    registry_client,
    retrievers,
    tool_providers,
)
from registry.cli.serve import check_port_is_free
from registry.cli.sources import add_source_options, command_settings
from registry.errors import ConfigurationError
from registry.settings import Settings

if TYPE_CHECKING:
    from registry.cli.command import Commands


def register(commands: Commands) -> None:
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
    _add_shared_options(agents_serve)
    agents_serve.add_argument("--host", help="address to listen on (default 127.0.0.1) [REGISTRY_HOST]")
    agents_serve.add_argument("--port", type=int, help="port (default 8090) [REGISTRY_PORT]")
    agents_serve.add_argument("--workers", type=int, help="worker processes (default 1)")
    agents_serve.add_argument("--threads", type=int, help="threads per worker, one request each (default 8)")
    agents_serve.add_argument(
        "--no-worker",
        action="store_true",
        help="serve requests only: tasks run in `prompt-registry agents worker` processes on the same database",
    )
    _add_concurrency(agents_serve)
    add_run_options(agents_serve)
    agents_serve.set_defaults(handler=_agents_serve)
    agents_worker = agents_commands.add_parser(
        "worker",
        help="run tasks without serving HTTP",
        description="Run the tasks of Agent Protocol and A2A services that share its database (--database-url):"
        " a DBOS worker, with the executor's options of `prompt-registry run`. See docs/agent-protocol.md.",
    )
    _add_shared_options(agents_worker)
    _add_concurrency(agents_worker)
    add_run_options(agents_worker)
    agents_worker.set_defaults(handler=_agents_worker)


def _add_shared_options(parser: argparse.ArgumentParser) -> None:
    """What a server and a worker both need: where agents and tasks are, and what runs them."""
    parser.add_argument("--registry", metavar="URL", help="fetch agents from this registry [REGISTRY_URL]")
    parser.add_argument("--token", help="bearer token for --registry [REGISTRY_TOKEN]")
    add_source_options(parser)
    parser.add_argument(
        "--database-url",
        help="sqlite:///PATH or postgresql+psycopg://USER@HOST/DB (default: tasks.db in the data directory)"
        " [REGISTRY_AGENTS_DATABASE_URL]",
    )
    parser.add_argument(
        "--release", help="the release of a task that names none (default: latest) [REGISTRY_AGENTS_RELEASE]"
    )
    parser.add_argument(
        "--require-approval",
        action="append",
        default=[],
        metavar="TOOL",
        help="a tool that waits for the user's decision before it runs (repeatable) [REGISTRY_AGENTS_REQUIRE_APPROVAL]",
    )
    parser.add_argument(
        "--allow-push-to",
        action="append",
        default=[],
        metavar="CIDR",
        help="a network push notifications may reach although it is loopback, private or link-local"
        " (10.1.0.0/16, fd00::/8, 127.0.0.1; repeatable) [REGISTRY_AGENTS_ALLOW_PUSH_TO]",
    )


def _add_concurrency(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--concurrency",
        type=int,
        help="tasks each worker process runs at once (default 8) [REGISTRY_AGENTS_CONCURRENCY]",
    )


def _agents_serve(args: argparse.Namespace, stack: ExitStack) -> int:
    network = {
        "host": args.host,
        "port": args.port if args.port is not None else (None if "REGISTRY_PORT" in os.environ else 8090),
        "workers": args.workers if args.workers is not None else 1,
        "threads": args.threads if args.threads is not None else 8,
        "agents_worker": not args.no_worker,
    }
    settings, library = _settings(args, stack, network)
    check_port_is_free(settings.host, settings.port)
    return agents_serve_command(args, settings, library)


def _agents_worker(args: argparse.Namespace, stack: ExitStack) -> int:
    settings, library = _settings(args, stack, {"agents_worker": True})
    return agents_worker_command(args, settings, library)


def _settings(args: argparse.Namespace, stack: ExitStack, extra: Mapping[str, Any]) -> tuple[Settings, Settings | None]:
    default_registry(args)
    options = {
        "agents_database_url": args.database_url,
        "agents_release": args.release,
        "agents_require_approval": tuple(args.require_approval) or None,
        "agents_allow_push_to": tuple(args.allow_push_to) or None,
        "agents_concurrency": args.concurrency,
        **extra,
    }
    library = None if args.registry else command_settings(args, stack)
    data_dir = args.data_dir or os.environ.get("REGISTRY_DATA_DIR") or default_data_dir(os.environ)
    return Settings.from_env(repo="", worktree="", remote="", data_dir=data_dir, **options), library


def agents_serve_command(args: argparse.Namespace, settings: Settings, library: Settings | None) -> int:
    """``agents serve``: the Agent Protocol service under gunicorn. Its
    options are checked once here, before the workers start, so that a
    mistake is one line now rather than a failure in every worker."""
    from registry.protocol.app import create_app, database_url
    from registry.protocol.asgi import create_asgi_app, event_hub
    from registry.protocol.server import AgentProtocolServer

    _check_options(args)
    url = database_url(settings)

    def build() -> Any:
        from registry.a2a.pushnotifier import PushNotifier
        from registry.a2a.pushrequests import StoredPushConfigs
        from registry.a2a.routes import a2a_routes
        from registry.protocol.store import TaskStore

        executor, client = _executor(args, settings, library)
        store = TaskStore(url)
        # Told of every change this process makes to a task, from before its worker takes the first one.
        notifier = PushNotifier(store, allowed=settings.push_networks)
        try:
            flask_app = create_app(settings, executor=executor, registry=client, store=store, listeners=[notifier])
        except BaseException:
            notifier.close(drain_seconds=0)
            raise
        service = flask_app.extensions["agent_protocol.service"]
        push = StoredPushConfigs(store, allowed=settings.push_networks, on_set=notifier.snapshot)
        # A2A (its cards, JSON-RPC and HTTP+JSON) over the same tasks, before
        # the Flask routes; its streams and the Agent Protocol's share one hub.
        hub = event_hub(flask_app, settings)
        routes = a2a_routes(service, client, settings, hub=hub, push_configs=push)
        return create_asgi_app(flask_app, settings, routes=routes, hub=hub)

    logging.getLogger("registry").info(
        "Agent Protocol service: agents from %s, tasks in %s",
        args.registry or (library.source_description if library is not None else "?"),
        _shown(url),
    )
    AgentProtocolServer(settings, build).run()
    return 0


def agents_worker_command(args: argparse.Namespace, settings: Settings, library: Settings | None) -> int:
    """``agents worker``: run tasks from the database's queue until SIGTERM or SIGINT."""
    import signal
    import threading

    from registry.a2a.pushnotifier import PushNotifier
    from registry.protocol.app import database_url
    from registry.protocol.service import TaskService
    from registry.protocol.store import TaskStore
    from registry.runs.engine import RunEngine

    _check_options(args)
    url = database_url(settings)
    executor, client = _executor(args, settings, library)
    store = TaskStore(url)
    engine = RunEngine(url, worker=True, concurrency=settings.agents_concurrency)
    # The changes this worker's steps make are notified from here (closed with the service).
    notifier = PushNotifier(store, allowed=settings.push_networks)
    service = TaskService(
        store,
        executor,
        client,
        engine,
        max_artifact_bytes=settings.agents_max_artifact_bytes,
        listeners=[notifier],
    )
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    service.start()
    logging.getLogger("registry").info(
        "worker %s: tasks in %s, %d at once", engine.worker_id, _shown(url), settings.agents_concurrency
    )
    try:
        stop.wait()
    finally:
        # A segment still running goes back on the queue once this process is gone.
        service.close()
        store.close()
        executor.close()
        client.close()
    return 0


def _check_options(args: argparse.Namespace) -> None:
    """The executor's options, checked once before any worker starts."""
    if args.registry and not args.registry.startswith(("http://", "https://")):
        raise ConfigurationError(f"--registry {args.registry!r}: expected an http(s) URL")
    model_from(args, os.environ)
    tool_providers(args)
    for retriever in retrievers(args).values():
        retriever.close()  # type: ignore[attr-defined]


def _executor(args: argparse.Namespace, settings: Settings, library: Settings | None) -> tuple[Any, Any]:
    from registry.executor import Executor

    client = registry_client(args, lambda: library) if library is not None else registry_client(args, _no_library)
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
    return executor, client


def _shown(url: str) -> str:
    return url.split("@")[-1] if "@" in url else url


def _no_library() -> Settings:
    raise ConfigurationError("give --registry URL, or a library (--repo PATH, --example)")


def default_data_dir(environ: Mapping[str, str]) -> str:
    """Where ``agents serve`` keeps its tasks when told nothing: the XDG data directory."""
    base = environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "prompt-registry", "agents")
