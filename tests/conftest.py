"""Fixtures: real git repositories built in temporary directories, and apps over them."""

from __future__ import annotations

import compileall
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from registry.serving.app import create_app
from registry.settings import Settings
from tests.support.executor_fixtures import docs_index, example  # noqa: F401  (fixtures for every test module)
from tests.support.postgres_server import postgres_server, postgres_url  # noqa: F401  (fixtures)
from tests.support.redis_server import RedisServer

AGENTS = "ai_gateway/agents"
TESTS = Path(__file__).resolve().parent

# Where tests live says what they need (the markers are declared in setup.cfg):
# a directory or a module under tests/, and the marks each of its tests gets.
MARKS_BY_PLACE: dict[str, tuple[str, ...]] = {
    "integration": ("slow",),
    "browser": ("browser", "slow"),
    "protocol/test_protocol_conformance.py": ("conformance", "slow"),
    "integration/test_protocol_client.py": ("conformance",),
}
POSTGRES_FIXTURES = {"postgres_server", "postgres_url"}

# The modules whose run is longest (their tests' sum, measured with
# --durations=0 on this 2-core machine), started first. pytest-xdist hands a
# worker one module at a time in collection order (with
# --no-loadscope-reorder, set in setup.cfg; by default it puts the modules
# with the most tests first, which are quick unit tests), so a long module
# left for last ran alone on one core while the other sat idle for minutes.
LONGEST_FIRST: tuple[str, ...] = (
    "browser/test_ui_browser.py",
    "integration/test_client_processes.py",
    "integration/test_cli_eval.py",
    "integration/test_models_cli.py",
    "integration/test_cli.py",
    "integration/test_a2a_end_to_end.py",
    "integration/test_runs_postgres.py",
    "evals/test_streaming.py",
    "integration/test_runs_reliability.py",
    "integration/test_server.py",
    "integration/test_a2a_push.py",
    "protocol/test_protocol_conformance.py",
    "integration/test_anthropic_library.py",
    "integration/test_protocol_events.py",
    "integration/test_litellm_chat.py",
    "protocol/test_protocol_library.py",
    "integration/test_executor_library_openai.py",
    "integration/test_mcp_tools.py",
    "integration/test_anthropic_chat.py",
    "protocol/test_protocol.py",
)

_GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.com",
    "GIT_COMMITTER_NAME": "Test Author",
    "GIT_COMMITTER_EMAIL": "author@example.com",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


class LibraryRepo:
    """A real git repository that tests write definitions into, commit and tag."""

    def __init__(self, path: Path, *, init: bool = True) -> None:
        self.path = path
        if init:
            path.mkdir(parents=True, exist_ok=True)
            self.git("init", "-q", "-b", "main")

    def replace_with(self, template: LibraryRepo) -> LibraryRepo:
        """This repository becomes a copy of ``template``: its history, tags and working tree."""
        shutil.rmtree(self.path)
        shutil.copytree(template.path, self.path, symlinks=True)
        return self

    def git(self, *args: str) -> str:
        result = subprocess.run(
            ["git", *args],
            cwd=self.path,
            env={**os.environ, **_GIT_ENV},
            check=True,
            capture_output=True,
            text=True,
        )
        return result.stdout.strip()

    def write(self, relative: str, content: str | bytes, *, under_agents: bool = True) -> Path:
        """Write a file (relative to the agents root unless told otherwise)."""
        target = self.path / (f"{AGENTS}/{relative}" if under_agents else relative)
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            target.write_text(content, encoding="utf-8")
        else:
            target.write_bytes(content)
        return target

    def remove(self, relative: str) -> None:
        (self.path / AGENTS / relative).unlink()

    def commit(self, message: str = "change") -> str:
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")

    def release(self, tag: str, files: Mapping[str, str | bytes], *, annotated: bool = False) -> LibraryRepo:
        """Write files under the agents root, commit them and tag the commit."""
        for relative, content in files.items():
            self.write(relative, content)
        self.commit(f"release {tag}")
        self.tag(tag, annotated=annotated)
        return self

    def tag(self, name: str, *, annotated: bool = False, target: str = "HEAD") -> None:
        if annotated:
            self.git("tag", "-a", name, "-m", f"release {name}", target)
        else:
            self.git("tag", name, target)


MINIMAL = """\
name: Minimal agent
prompt_templates:
  system: You are helpful.
  user: "Question: {{ question }}"
"""

WITH_RULES = """\
name: Agent with shared rules
prompt_templates:
  system: |
    Be brief.
    {% include '_partials/rules.jinja' %}
  user: "{{ question }}"
inputs:
  type: object
  required: [question, rules]
  additionalProperties: false
  properties:
    question: {type: string, minLength: 1}
    rules: {type: array, items: {type: string}}
"""


class BuiltRepos:
    """Repositories built once per pytest worker by a function of an empty
    ``LibraryRepo``, and copied into each test's own repository: a copy is a
    few file writes, where building one again is a git process per commit and tag."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._built: dict[Callable[[LibraryRepo], LibraryRepo], LibraryRepo] = {}

    def copy(self, build: Callable[[LibraryRepo], LibraryRepo], repo: LibraryRepo) -> LibraryRepo:
        """``repo`` (replaced) as ``build`` leaves an empty repository."""
        template = self._built.get(build)
        if template is None:
            name = f"{build.__module__}.{build.__qualname__}".replace("<", "").replace(">", "")
            template = self._built[build] = build(LibraryRepo(self._root / name / "library"))
        return repo.replace_with(template)


@pytest.fixture(scope="session")
def built_repos(tmp_path_factory: pytest.TempPathFactory) -> BuiltRepos:
    return BuiltRepos(tmp_path_factory.mktemp("built-repos"))


@pytest.fixture
def repo(tmp_path: Path) -> LibraryRepo:
    """An empty repository."""
    return LibraryRepo(tmp_path / "library")


@pytest.fixture
def released_repo(repo: LibraryRepo, built_repos: BuiltRepos) -> LibraryRepo:
    """A repository with releases v1.0.0, v1.1.0 (annotated), v2.0.0-rc.1 and a non-release tag."""
    return built_repos.copy(release_three, repo)


def release_three(repo: LibraryRepo) -> LibraryRepo:
    """``released_repo``'s releases, in ``repo``."""
    repo.write("chat/minimal.yml", MINIMAL)
    repo.write(
        "_partials/rules.jinja",
        "Rules:\n{% for rule in rules %}- {{ rule }}\n{% endfor %}",
    )
    repo.commit("first release")
    repo.tag("v1.0.0")
    repo.write("chat/with_rules.yml", WITH_RULES)
    repo.commit("add with_rules")
    repo.tag("v1.1.0", annotated=True)
    repo.write("chat/minimal.yml", MINIMAL.replace("You are helpful.", "You are very helpful."))
    repo.commit("prerelease wording")
    repo.tag("v2.0.0-rc.1")
    repo.tag("not-a-release")
    return repo


def make_app(settings: Settings) -> Flask:
    app = create_app(settings)
    app.config["TESTING"] = True
    return app


def client_for(repo: LibraryRepo, **settings: Any) -> FlaskClient:
    """A test client of an app serving ``repo``."""
    return make_app(Settings(repo=str(repo.path), **settings)).test_client()


@pytest.fixture
def app(released_repo: LibraryRepo) -> Iterator[Flask]:
    application = make_app(Settings(repo=str(released_repo.path)))
    yield application
    application.extensions["prompt_registry.service"].close()


class Upstream:
    """A bare 'remote' repository, and a working clone that pushes to it."""

    def __init__(self, tmp_path: Path) -> None:
        self.work = LibraryRepo(tmp_path / "work")
        self.bare = tmp_path / "upstream.git"
        self.work.git("init", "-q", "--bare", "-b", "main", str(self.bare))
        self.work.git("remote", "add", "origin", str(self.bare))
        self.url = self.bare.as_uri()

    def publish(self, tag: str, files: dict[str, str]) -> None:
        self.work.release(tag, files)
        self.work.git("push", "-q", "--force", "origin", "main", "--tags")


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    remote = Upstream(tmp_path)
    remote.publish("v1.2.0", {"chat/minimal.yml": MINIMAL})
    return remote


@pytest.fixture
def make_mirror_app(tmp_path: Path) -> Iterator[Callable[..., Flask]]:
    apps: list[Flask] = []

    def build(url: str, **settings: object) -> Flask:
        defaults: dict[str, object] = {"data_dir": str(tmp_path / f"data{len(apps)}"), "sync_interval": 3600}
        app = make_app(Settings(remote=url, **{**defaults, **settings}))  # type: ignore[arg-type]
        apps.append(app)
        return app

    yield build
    for app in apps:
        app.extensions["prompt_registry.service"].close()


def eventually(check: Callable[[], object], *, seconds: float = 15.0) -> None:
    """Wait until ``check()`` holds; fail after ``seconds`` (a deadline, not a measurement)."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.05)


@pytest.fixture(scope="session")
def shared_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One real redis-server for the session, stopped by PID at the end."""
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(shared_redis: RedisServer) -> str:
    """The shared redis-server's URL, emptied for this test."""
    with shared_redis.client() as client:
        client.flushall()
    return shared_redis.url


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test's own, to kill and restart."""
    server = RedisServer(tmp_path / "redis").start()
    yield server
    server.stop()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def schema_says(schema: dict[str, Any], instance: Any) -> str:
    """jsonschema's own words for the first error of ``instance``: the
    registry passes them on, and a test compares with them rather than
    copying them, since any release the pins allow may word them anew."""
    from jsonschema import Draft202012Validator

    return str(next(Draft202012Validator(schema).iter_errors(instance)).message)


def pytest_configure(config: pytest.Config) -> None:
    """Where Python writes no bytecode (PYTHONDONTWRITEBYTECODE), each of the
    hundreds of processes the tests start (the command, servers, scripted
    models) would compile the package from source again: a third of a
    command's start. The first process of a run (not an xdist worker)
    compiles it once, where Python itself would have put it."""
    if sys.dont_write_bytecode and not hasattr(config, "workerinput"):
        for package in (TESTS.parent / "registry", TESTS):
            compileall.compile_dir(package, quiet=1)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker more than the cores. A test here waits on the
    processes it starts for about a third of its time (593 s busy of 843 s,
    measured per test on 2 cores), and the extra worker fills those waits:
    the whole suite took 371 s with three workers, 439 s with two."""
    return (os.cpu_count() or 1) + 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by where it lives, and by the PostgreSQL it asks for;
    then order the modules longest first (``LONGEST_FIRST``, then the others
    marked slow, then the rest), each module's tests in their own order."""
    _mark_by_place(items)
    items.sort(key=_module_rank)


def _module_rank(item: pytest.Item) -> tuple[int, int]:
    relative = item.path.relative_to(TESTS).as_posix()
    if relative in LONGEST_FIRST:
        return (0, LONGEST_FIRST.index(relative))
    slow = any(relative == place or relative.startswith(f"{place}/") for place in ("integration", "browser"))
    return (1, 0) if slow else (2, 0)


def _mark_by_place(items: list[pytest.Item]) -> None:
    for item in items:
        relative = item.path.relative_to(TESTS).as_posix()
        for place, marks in MARKS_BY_PLACE.items():
            if relative == place or relative.startswith(f"{place}/"):
                for mark in marks:
                    item.add_marker(mark)
        if POSTGRES_FIXTURES & set(getattr(item, "fixturenames", ())) or item.get_closest_marker("postgres"):
            item.add_marker("postgres")
            item.add_marker("slow")
