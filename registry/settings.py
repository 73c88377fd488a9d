"""Configuration: the environment, read once into one frozen ``Settings``.

Every option has one row in ``_OPTIONS``: its field, environment variable,
parser and default. The CLI passes its flags as overrides, so a flag and its
variable can never disagree about meaning. Nothing reads ``os.environ`` at
import time.

    variable                        default             meaning
    REGISTRY_REPO                   (none)              git repository to serve
    REGISTRY_WORKTREE               (none)              plain directory to serve as release "worktree"
    REGISTRY_REMOTE                 (none)              git URL to mirror into the data directory and serve
    REGISTRY_SYNC_INTERVAL          60                  seconds between fetches from the remote
    REGISTRY_SYNC_FAILING_LIMIT     600                 seconds of failing fetches before /readyz is 503 (0: never)
    REGISTRY_WEBHOOK_SECRET         (none)              enables POST /v1/hooks/git with this secret
    REGISTRY_ROOT                   ai_gateway/agents   agents root inside the repository or directory
    REGISTRY_CHANNELS_FILE          channels.yml        channels file at the root of the default branch
    REGISTRY_DATA_DIR               (none)              where the registry keeps state (first-seen tag commits)
    REGISTRY_HOST                   127.0.0.1           address to listen on
    REGISTRY_PORT                   8080                port to listen on (0: any free port)
    REGISTRY_WORKERS                2                   server worker processes
    REGISTRY_THREADS                4                   threads per worker (gthread workers)
    REGISTRY_WORKER_CLASS           gevent              gevent (a slow client costs a socket) or gthread
    REGISTRY_CONNECTIONS            1000                connections per worker (gevent workers)
    REGISTRY_BODY_SECONDS           10                  longest a client may take to send a request body
    REGISTRY_KEEPALIVE              5                   seconds an idle kept-alive connection stays open (gevent:
                                                        also the longest a client may take over its headers)
    REGISTRY_MAX_DEFINITION_BYTES   262144              largest definition or partial file
    REGISTRY_MAX_RENDER_BYTES       1048576             largest rendered output
    REGISTRY_MAX_RENDER_SECONDS     2                   longest a render may run
    REGISTRY_MAX_REQUEST_BYTES      1048576             largest request body
    REGISTRY_LOG_LEVEL              info                log level
    REGISTRY_ACCESS_LOG             true                one JSON line per request on stdout
    REDIS_URL                       (none)              Redis shared by replicas (redis://, rediss://, unix://)
    REGISTRY_REDIS_PREFIX           prompt-registry     prefix of every Redis key and channel
    REGISTRY_REDIS_TIMEOUT          0.05                seconds before a Redis call is given up
    REGISTRY_CACHE_ENTRIES          4096                definitions kept in each worker's memory
    REGISTRY_CACHE_MAX_AGE          10                  HTTP max-age for answers to a range, latest or channel
    REGISTRY_API_TOKENS             (none)              comma-separated bearer tokens required for /v1
    REGISTRY_ADMIN_TOKENS           (none)              comma-separated bearer tokens for /v1/admin
    REGISTRY_TOKEN                  (none)              bearer token ``export --url`` sends to a registry
    REGISTRY_AGENTS_DATABASE_URL    (none)              the Agent Protocol service's database (sqlite:///..., or
                                                        postgresql+psycopg://... shared by replicas); default:
                                                        tasks.db in the data directory
    REGISTRY_AGENTS_RELEASE         latest              release of a task that names none
    REGISTRY_AGENTS_MAX_ARTIFACT_BYTES 10485760         largest artifact a client may upload
    REGISTRY_AGENTS_REQUIRE_APPROVAL (none)             comma-separated tools that wait for the user's decision
    REGISTRY_AGENTS_URL             (none)              the Agent Protocol service the UI shows tasks of
    REGISTRY_AGENTS_ALLOW_PUSH_TO   (none)              comma-separated networks (CIDR: 10.1.0.0/16, fd00::/8,
                                                        127.0.0.1) that push notifications may reach although
                                                        they are loopback, private, link-local or reserved
    REGISTRY_UI_SECRET              (random per start)  signs the UI's session cookie and keys the encryption of
                                                        the token in it; give one to several replicas
    REGISTRY_UI_SECURE_COOKIE       false               send the session cookie over HTTPS only

With neither a repository nor a worktree, ``create_app`` serves the bundled
``library/`` as a worktree; the CLI chooses its library by its own rule
(``registry.cli.main``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from ipaddress import IPv4Network, IPv6Network, ip_network
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from registry.errors import ConfigurationError

# registry/library links to the checkout's library/ and is a copy of it in a
# wheel (package data): the same path either way.
# Where a library keeps its definitions, unless told otherwise (REGISTRY_ROOT).
DEFAULT_ROOT = "ai_gateway/agents"
BUNDLED_LIBRARY = Path(__file__).resolve().parent / "library"
_LOG_LEVELS = ("debug", "info", "warning", "error")
_WORKER_CLASSES = ("gevent", "gthread")
_REDIS_PREFIX_SHAPE = re.compile(r"[A-Za-z0-9_.:-]{1,64}", re.ASCII)
_MIN_TOKEN_LENGTH = 16
_ROOT_SHAPE = re.compile(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*", re.ASCII)


@dataclass(frozen=True)
class Settings:
    """Everything configurable, validated."""

    repo: str | None = None
    worktree: str | None = None
    remote: str | None = None
    sync_interval: float = 60.0
    sync_failing_limit: float = 600.0
    webhook_secret: str | None = field(default=None, repr=False)
    root: str = DEFAULT_ROOT
    channels_file: str = "channels.yml"
    data_dir: str | None = None
    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 2
    threads: int = 4
    worker_class: str = "gevent"
    connections: int = 1000
    body_seconds: float = 10.0
    keepalive: int = 5
    max_definition_bytes: int = 256 * 1024
    max_render_bytes: int = 1024 * 1024
    max_render_seconds: float = 2.0
    max_request_bytes: int = 1024 * 1024
    log_level: str = "info"
    access_log: bool = True
    redis_url: str | None = field(default=None, repr=False)
    redis_prefix: str = "prompt-registry"
    redis_timeout: float = 0.05
    cache_entries: int = 4096
    cache_max_age: int = 10
    api_tokens: tuple[str, ...] = field(default=(), repr=False)
    admin_tokens: tuple[str, ...] = field(default=(), repr=False)
    token: str | None = field(default=None, repr=False)
    agents_database_url: str | None = field(default=None, repr=False)
    agents_release: str = "latest"
    agents_max_artifact_bytes: int = 10 * 1024 * 1024
    agents_require_approval: tuple[str, ...] = ()
    agents_url: str | None = None
    agents_worker: bool = True
    """Whether this process runs tasks (a DBOS worker) besides serving them."""
    agents_concurrency: int = 8
    """Tasks a worker process runs at once."""
    agents_step_wait: float = 10.0
    """Seconds a background task's ``POST .../steps`` waits for a step to end."""
    agents_allow_push_to: tuple[str, ...] = ()
    # Live task events (GET .../tasks/{task_id}/events): a comment to each
    # subscriber this often, the store read this often for every watched
    # task, and at most this many entries waiting for a subscriber that reads
    # slower than they come before it is dropped (it resumes with Last-Event-ID).
    agents_events_heartbeat: float = 15.0
    agents_events_poll: float = 0.05
    agents_events_buffer: int = 256
    ui_secret: str | None = field(default=None, repr=False)
    ui_secure_cookie: bool = False

    def __post_init__(self) -> None:
        # The one place the root is normalised: stores take it as given.
        object.__setattr__(self, "root", self.root.strip("/"))
        self._check_source()
        self._check_serving()
        self._check_cache()
        self._check_agents()

    def _check_source(self) -> None:
        """What is served, from where, and how often it is fetched."""
        if not _ROOT_SHAPE.fullmatch(self.channels_file) or ".." in self.channels_file.split("/"):
            raise ConfigurationError(f"channels file {self.channels_file!r} must be a relative path in the repository")
        if sum(bool(source) for source in (self.repo, self.worktree, self.remote)) > 1:
            raise ConfigurationError("give one of a repository, a remote or a worktree")
        if self.remote and not self.data_dir:
            raise ConfigurationError("a remote needs a data directory to keep its mirror in (--data-dir)")
        if not 1 <= self.sync_interval <= 86400:
            raise ConfigurationError("sync interval must be between 1 and 86400 seconds")
        if not (self.sync_failing_limit == 0 or 1 <= self.sync_failing_limit <= 30 * 86400):
            raise ConfigurationError("the sync failing limit must be 0 (never) or between 1 s and 30 days")
        if not _ROOT_SHAPE.fullmatch(self.root) or ".." in self.root.split("/"):
            raise ConfigurationError(f"root {self.root!r} must be a relative path inside the repository")

    def _check_serving(self) -> None:
        """The HTTP server's workers, bounds and logging."""
        if self.worker_class not in _WORKER_CLASSES:
            raise ConfigurationError(f"worker class must be one of {', '.join(_WORKER_CLASSES)}")
        if not 0 < self.body_seconds <= 300:
            raise ConfigurationError("body_seconds must be more than 0 and at most 300")
        if not 1 <= self.keepalive <= 3600:
            raise ConfigurationError("keepalive must be a whole number of seconds between 1 and 3600")
        for name in (
            "workers",
            "threads",
            "connections",
            "max_definition_bytes",
            "max_render_bytes",
            "max_request_bytes",
            "agents_max_artifact_bytes",
            "agents_concurrency",
        ):
            if getattr(self, name) < 1:
                raise ConfigurationError(f"{name} must be a positive number")
        if not 0 < self.max_render_seconds <= 60:
            raise ConfigurationError("max_render_seconds must be more than 0 and at most 60")
        if not 0 <= self.port <= 65535:
            raise ConfigurationError("port must be between 0 (any free port) and 65535")
        if self.log_level not in _LOG_LEVELS:
            raise ConfigurationError(f"log level must be one of {', '.join(_LOG_LEVELS)}")

    def _check_cache(self) -> None:
        """Redis and the cache tiers."""
        if self.redis_url is not None:
            _check_redis_url(self.redis_url)
        if not _REDIS_PREFIX_SHAPE.fullmatch(self.redis_prefix):
            raise ConfigurationError("the Redis prefix must be 1 to 64 characters of A-Z, a-z, 0-9, '_', '.', ':', '-'")
        if not 0.001 <= self.redis_timeout <= 5:
            raise ConfigurationError("the Redis timeout must be between 0.001 and 5 seconds")
        if self.cache_entries < 1:
            raise ConfigurationError("cache_entries must be a positive number")
        if not 0 <= self.cache_max_age <= 86400:
            raise ConfigurationError("cache_max_age must be between 0 and 86400 seconds")

    def _check_agents(self) -> None:
        """The Agent Protocol service's database, and the tokens of both services."""
        if self.agents_database_url is not None and not self.agents_database_url.startswith(
            ("sqlite:///", "postgresql://", "postgresql+psycopg://")
        ):
            raise ConfigurationError(
                "the agents database URL must be sqlite:///PATH or postgresql+psycopg://USER@HOST/DB,"
                f" not {redact(self.agents_database_url)!r}"
            )
        # Written as ipaddress writes them, so that 127.0.0.1 reads 127.0.0.1/32 everywhere.
        object.__setattr__(self, "agents_allow_push_to", tuple(str(n) for n in self.push_networks))
        if not 0.1 <= self.agents_events_heartbeat <= 300:
            raise ConfigurationError("the task events' heartbeat must be between 0.1 and 300 seconds")
        if not 0.01 <= self.agents_events_poll <= 10:
            raise ConfigurationError("the task events' poll interval must be between 0.01 and 10 seconds")
        if not 1 <= self.agents_events_buffer <= 100_000:
            raise ConfigurationError("the task events' buffer must hold between 1 and 100000 entries")
        for kind, tokens in (("API", self.api_tokens), ("admin", self.admin_tokens)):
            if any(len(token) < _MIN_TOKEN_LENGTH for token in tokens):
                raise ConfigurationError(f"every {kind} token must be at least {_MIN_TOKEN_LENGTH} characters long")

    @property
    def push_networks(self) -> tuple[IPv4Network | IPv6Network, ...]:
        """The networks of ``agents_allow_push_to``, which push notifications
        may reach although their addresses are not public."""
        networks = []
        for text in self.agents_allow_push_to:
            try:
                networks.append(ip_network(text.strip(), strict=True))
            except ValueError as exc:
                raise ConfigurationError(
                    f"allow-push-to {text!r} is not a network (10.1.0.0/16, fd00::/8, 127.0.0.1): {exc}"
                ) from None
        return tuple(networks)

    @property
    def source_description(self) -> str:
        """What is served, for logs and the startup line."""
        if self.repo:
            return f"git repository {self.repo}"
        if self.remote:
            return f"mirror of {redact(self.remote)}"
        return f"worktree {self.served_worktree}"

    @property
    def served_worktree(self) -> str:
        """The directory served when no repository is given."""
        return self.worktree or str(BUNDLED_LIBRARY)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Settings from environment variables, then ``overrides`` (None means "not given")."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for field_name, variable, parse in _OPTIONS:
            raw = environ.get(variable)
            if raw is not None and raw != "":
                try:
                    values[field_name] = parse(raw)
                except ValueError as exc:
                    raise ConfigurationError(f"{variable}={raw!r}: {exc}") from exc
        values.update({k: v for k, v in overrides.items() if v is not None})
        known = {f.name for f in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ConfigurationError(f"unknown settings: {', '.join(sorted(unknown))}")
        return cls(**values)


def environment_for(*names: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment variables of the named settings that are set, as
    they are set: for a command that must look at a few settings before
    ``Settings.from_env`` reads and checks them all."""
    environ = os.environ if environ is None else environ
    variables = {variable for field_name, variable, _ in _OPTIONS if field_name in names}
    return {variable: environ[variable] for variable in sorted(variables) if variable in environ}


SENTINEL_SCHEME = "redis+sentinel://"


def parse_sentinel_url(url: str) -> tuple[list[tuple[str, int]], str, str | None, int]:
    """Sentinel addresses, service name, password and database of a
    ``redis+sentinel://`` URL; ``ValueError`` when it is not one."""
    rest = url[len(SENTINEL_SCHEME) :]
    netloc, _, path = rest.partition("/")
    credentials, _, hosts = netloc.rpartition("@")
    password = unquote(credentials.partition(":")[2]) or None if credentials else None
    sentinels = []
    for host in hosts.split(","):
        name, _, port = host.rpartition(":")
        if not name or not port.isdigit():
            raise ValueError("each Sentinel is host:port")
        sentinels.append((name.strip("[]"), int(port)))
    parts = [part for part in path.split("/") if part]
    if not parts or len(parts) > 2 or (len(parts) == 2 and not parts[1].isdigit()):
        raise ValueError("the path is /<service name>[/<database number>]")
    return sentinels, unquote(parts[0]), password, int(parts[1]) if len(parts) == 2 else 0


def redact(url: str) -> str:
    """``url`` without its password or token (``https://***@host/...``)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<remote>"
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, f"***@{host}", parts.path, parts.query, parts.fragment))


def _check_redis_url(url: str) -> None:
    if url.startswith(SENTINEL_SCHEME):
        try:
            parse_sentinel_url(url)
        except ValueError as exc:
            raise ConfigurationError(f"the Redis Sentinel URL is malformed: {exc}") from None
    elif not url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigurationError("the Redis URL must start with redis://, rediss://, unix:// or redis+sentinel://")


def _text(raw: str) -> str:
    return raw.strip()


def _flag(raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true or false")


def _names(raw: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in raw.split(",") if name.strip())


def _tokens(raw: str) -> tuple[str, ...]:
    return tuple(token.strip() for token in raw.split(",") if token.strip())


_OPTIONS: tuple[tuple[str, str, Callable[[str], Any]], ...] = (
    ("repo", "REGISTRY_REPO", _text),
    ("worktree", "REGISTRY_WORKTREE", _text),
    ("remote", "REGISTRY_REMOTE", _text),
    ("sync_interval", "REGISTRY_SYNC_INTERVAL", float),
    ("sync_failing_limit", "REGISTRY_SYNC_FAILING_LIMIT", float),
    ("webhook_secret", "REGISTRY_WEBHOOK_SECRET", lambda raw: raw),
    ("root", "REGISTRY_ROOT", _text),
    ("channels_file", "REGISTRY_CHANNELS_FILE", _text),
    ("data_dir", "REGISTRY_DATA_DIR", _text),
    ("host", "REGISTRY_HOST", _text),
    ("port", "REGISTRY_PORT", int),
    ("workers", "REGISTRY_WORKERS", int),
    ("threads", "REGISTRY_THREADS", int),
    ("worker_class", "REGISTRY_WORKER_CLASS", lambda raw: raw.strip().lower()),
    ("connections", "REGISTRY_CONNECTIONS", int),
    ("body_seconds", "REGISTRY_BODY_SECONDS", float),
    ("keepalive", "REGISTRY_KEEPALIVE", int),
    ("max_definition_bytes", "REGISTRY_MAX_DEFINITION_BYTES", int),
    ("max_render_bytes", "REGISTRY_MAX_RENDER_BYTES", int),
    ("max_render_seconds", "REGISTRY_MAX_RENDER_SECONDS", float),
    ("max_request_bytes", "REGISTRY_MAX_REQUEST_BYTES", int),
    ("log_level", "REGISTRY_LOG_LEVEL", lambda raw: raw.strip().lower()),
    ("access_log", "REGISTRY_ACCESS_LOG", _flag),
    ("redis_url", "REDIS_URL", _text),
    ("redis_prefix", "REGISTRY_REDIS_PREFIX", _text),
    ("redis_timeout", "REGISTRY_REDIS_TIMEOUT", float),
    ("cache_entries", "REGISTRY_CACHE_ENTRIES", int),
    ("cache_max_age", "REGISTRY_CACHE_MAX_AGE", int),
    ("api_tokens", "REGISTRY_API_TOKENS", _tokens),
    ("admin_tokens", "REGISTRY_ADMIN_TOKENS", _tokens),
    ("token", "REGISTRY_TOKEN", lambda raw: raw),
    ("agents_database_url", "REGISTRY_AGENTS_DATABASE_URL", _text),
    ("agents_release", "REGISTRY_AGENTS_RELEASE", _text),
    ("agents_max_artifact_bytes", "REGISTRY_AGENTS_MAX_ARTIFACT_BYTES", int),
    ("agents_require_approval", "REGISTRY_AGENTS_REQUIRE_APPROVAL", lambda raw: _names(raw)),
    ("agents_url", "REGISTRY_AGENTS_URL", _text),
    ("agents_concurrency", "REGISTRY_AGENTS_CONCURRENCY", int),
    ("agents_allow_push_to", "REGISTRY_AGENTS_ALLOW_PUSH_TO", lambda raw: _names(raw)),
    ("agents_events_heartbeat", "REGISTRY_AGENTS_EVENTS_HEARTBEAT", float),
    ("agents_events_poll", "REGISTRY_AGENTS_EVENTS_POLL", float),
    ("agents_events_buffer", "REGISTRY_AGENTS_EVENTS_BUFFER", int),
    ("ui_secret", "REGISTRY_UI_SECRET", lambda raw: raw),
    ("ui_secure_cookie", "REGISTRY_UI_SECURE_COOKIE", _flag),
)
