"""The prompt-registry command: serve starts a real gunicorn process."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from registry.settings import BUNDLED_LIBRARY
from tests.conftest import LibraryRepo, schema_says
from tests.support.servers import RegistryProcess

CLI = str(Path(sys.executable).parent / "prompt-registry")
GUNICORN = str(Path(sys.executable).parent / "gunicorn")
REPOSITORY = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _clean_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}


def _get(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:  # a deadline for a hung server, not a measurement
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@contextmanager
def _serving(
    *args: str,
    env: dict[str, str] | None = None,
    command: list[str] | None = None,
    port: int | None = None,
    cwd: Path = REPOSITORY,
) -> Iterator[str]:
    """Run ``prompt-registry serve`` (or ``command``, which listens on ``port``)
    in ``cwd`` until the block ends; stopped by PID with SIGTERM."""
    server = RegistryProcess(*args, env=env, command=command, port=port, cwd=cwd)
    try:
        with server:
            yield server.base
    finally:
        _OUTPUT[server.base] = server.output


# What each server printed, by base URL, once it has stopped.
_OUTPUT: dict[str, str] = {}


def test_serve_outside_any_checkout_serves_the_tagged_example_and_says_so(tmp_path: Path) -> None:
    with _serving(cwd=tmp_path) as base:
        status, releases = _get(base + "/v1/releases")
        assert status == 200
        assert [r["tag"] for r in releases["releases"]] == ["v1.1.0", "v1.0.0"]
        assert releases["channels"]["production"]["tag"] == "v1.1.0"
        status, listing = _get(base + "/v1/agents?release=v1.1.0")
        assert status == 200
        assert all(agent["valid"] for agent in listing["agents"])
        assert ("chat", "minimal") in {(a["usecase"], a["name"]) for a in listing["agents"]}
    assert "serving the bundled example library (not inside a git checkout" in _OUTPUT[base]
    example = re.search(r"temporary git repository at (\S+),", _OUTPUT[base])
    assert example and not Path(example.group(1)).exists(), "the example repository is removed at exit"


def test_serve_inside_a_checkout_serves_it_not_the_example(released_repo: LibraryRepo) -> None:
    inside = released_repo.path / "ai_gateway"
    with _serving(cwd=inside) as base:
        assert _get(base + "/v1/releases")[1]["latest"] == "v1.1.0"
    assert "example" not in _OUTPUT[base]


def test_serve_example_serves_the_example_even_inside_a_checkout(released_repo: LibraryRepo) -> None:
    with _serving("--example", cwd=released_repo.path) as base:
        assert _get(base + "/v1/releases")[1]["latest"] == "v1.1.0"
        assert _get(base + "/v1/agents/assistant/react_json?release=v1.0.0")[0] == 404
        assert _get(base + "/v1/agents/assistant/react_json?release=v1.1.0")[0] == 200


def test_port_zero_listens_on_a_free_port_and_says_which(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [CLI, "serve", "--example", "--port", "0", "--workers", "1"],
        env=_clean_environment(),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        for line in process.stdout:
            listening = re.search(r"Listening at: (http://127\.0\.0\.1:(\d+))", line)
            if listening:
                break
        assert listening and int(listening.group(2)) != 0
        assert _get(listening.group(1) + "/healthz") == (200, {"status": "ok"})
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=20)


def test_serve_a_repository_by_release(released_repo: LibraryRepo) -> None:
    with _serving("--repo", str(released_repo.path)) as base:
        status, agent = _get(base + "/v1/agents/chat/minimal?release=v1.0.0")
        assert status == 200
        assert agent["release"]["tag"] == "v1.0.0"
        status, problem = _get(base + "/v1/agents/chat/minimal?release=HEAD~1")
        assert status == 400 and problem["type"] == "/problems/invalid-request"


def test_environment_variables_configure_serve(released_repo: LibraryRepo) -> None:
    with _serving(env={**_clean_environment(), "REGISTRY_REPO": str(released_repo.path)}) as base:
        assert _get(base + "/v1/releases")[1]["latest"] == "v1.1.0"


def test_serve_stops_gracefully_on_sigterm(tmp_path: Path) -> None:
    port = _free_port()
    process = subprocess.Popen(
        [CLI, "serve", "--port", str(port), "--workers", "1"],
        env=_clean_environment(),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == 0


def test_serve_a_path_that_is_not_a_repository_fails_clearly(tmp_path: Path) -> None:
    result = subprocess.run(
        # --port 0: the port is checked first, and 8080 may be taken on the machine running the tests
        [CLI, "serve", "--repo", str(tmp_path), "--port", "0"],
        env=_clean_environment(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "is not a git repository" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_configuration_fails_clearly() -> None:
    result = subprocess.run(
        [CLI, "serve"],
        env={**_clean_environment(), "REGISTRY_PORT": "eighty"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "REGISTRY_PORT" in result.stderr


def test_a_chunked_body_over_the_limit_is_refused_not_truncated(released_repo: LibraryRepo) -> None:
    import http.client

    environment = {**_clean_environment(), "REGISTRY_MAX_REQUEST_BYTES": "1000"}
    with _serving("--repo", str(released_repo.path), env=environment) as base:
        host, port = base.removeprefix("http://").split(":")

        def post_chunked(body: bytes) -> tuple[int, dict[str, Any]]:
            connection = http.client.HTTPConnection(host, int(port), timeout=10)
            try:
                connection.request(
                    "POST",
                    "/v1/agents/chat/minimal/render?release=v1.0.0",
                    body=iter([body[:500], body[500:]]),
                    headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"},
                    encode_chunked=True,
                )
                response = connection.getresponse()
                return response.status, json.loads(response.read())
            finally:
                connection.close()

        valid = b'{"inputs": {"question": "Why?"}}'
        status, problem = post_chunked(valid + b" " * 5000)
        assert status == 413 and problem["type"] == "/problems/payload-too-large"
        status, answer = post_chunked(valid + b" " * 600)
        assert status == 200 and answer["messages"][1]["content"] == "Question: Why?"


def _cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, *args], env=env or _clean_environment(), cwd=cwd, capture_output=True, text=True, timeout=60
    )


def _with_channels(repo: LibraryRepo) -> LibraryRepo:
    repo.write("channels.yml", "production: v1.0.0\ncanary: ^2.0.0-0\nbroken: v9.0.0\n", under_agents=False)
    repo.commit("channels")
    return repo


def test_releases_lists_tags_with_marks_and_channels(released_repo: LibraryRepo) -> None:
    result = _cli("releases", "--repo", str(_with_channels(released_repo).path))
    assert result.returncode == 0, result.stderr
    lines = [line.split() for line in result.stdout.splitlines()]
    assert [line[0] for line in lines] == ["v2.0.0-rc.1", "v1.1.0", "v1.0.0"]
    assert lines[0][2:] == ["prerelease", "@canary"]
    assert lines[1][2:] == ["latest"]
    assert lines[2][2:] == ["@production"]
    assert "@broken: channel 'broken' points to 'v9.0.0', which matches no release" in result.stderr


def test_releases_json_is_the_api_shape(released_repo: LibraryRepo) -> None:
    result = _cli("releases", "--json", "--repo", str(released_repo.path))
    body = json.loads(result.stdout)
    assert body["latest"] == "v1.1.0" and body["channels"] == {}
    assert [r["tag"] for r in body["releases"]] == ["v2.0.0-rc.1", "v1.1.0", "v1.0.0"]


def test_resolve_prints_the_tag_and_commit_of_a_range_or_channel(released_repo: LibraryRepo) -> None:
    repo = _with_channels(released_repo)
    result = _cli("resolve", "^1.0", "--repo", str(repo.path))
    assert result.stdout.split() == ["v1.1.0", repo.git("rev-parse", "v1.1.0^{commit}")]
    resolution = json.loads(_cli("resolve", "@canary", "--json", "--repo", str(repo.path)).stdout)
    assert (resolution["tag"], resolution["channel"], resolution["requested"]) == ("v2.0.0-rc.1", "canary", "@canary")


def test_resolve_exits_1_when_nothing_matches_and_2_when_the_release_is_malformed(released_repo: LibraryRepo) -> None:
    missing = _cli("resolve", "^7", "--repo", str(released_repo.path))
    assert missing.returncode == 1 and "no release matches '^7'" in missing.stderr
    malformed = _cli("resolve", "HEAD~1", "--repo", str(released_repo.path))
    assert malformed.returncode == 2 and "is not a release" in malformed.stderr
    assert "Traceback" not in missing.stderr + malformed.stderr


def test_releases_and_resolve_work_against_a_remote(released_repo: LibraryRepo, tmp_path: Path) -> None:
    bare = tmp_path / "remote.git"
    released_repo.git("clone", "-q", "--bare", str(released_repo.path), str(bare))
    listed = _cli("releases", "--remote", bare.as_uri(), "--data-dir", str(tmp_path / "data"))
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()] == ["v2.0.0-rc.1", "v1.1.0", "v1.0.0"]
    resolved = _cli("resolve", "^1", "--remote", bare.as_uri())
    assert resolved.stdout.split()[0] == "v1.1.0"


def test_an_unreachable_remote_fails_the_cli_clearly(tmp_path: Path) -> None:
    result = _cli("releases", "--remote", (tmp_path / "missing.git").as_uri(), "--data-dir", str(tmp_path / "d"))
    assert result.returncode == 2 and "failed" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("options", "environment", "pollers"),
    [
        # Two of four threads may wait; the third poll is answered at once.
        (("--worker-class", "gthread", "--threads", "4"), {}, 3),
        # Three of six gevent connections may wait; the fourth is answered at once.
        ((), {"REGISTRY_CONNECTIONS": "6"}, 4),
    ],
    ids=["gthread", "gevent"],
)
def test_long_polls_wait_on_at_most_half_a_worker_and_leave_the_rest_for_other_requests(
    released_repo: LibraryRepo, options: tuple[str, ...], environment: dict[str, str], pollers: int
) -> None:
    import threading

    with _serving("--repo", str(released_repo.path), *options, env={**_clean_environment(), **environment}) as base:
        etag = urllib.request.urlopen(base + "/v1/releases", timeout=5).headers["ETag"]
        outcomes: list[int] = []

        def long_poll() -> None:
            request = urllib.request.Request(
                base + "/v1/releases", headers={"If-None-Match": etag, "Prefer": "wait=20"}
            )
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    outcomes.append(response.status)
            except urllib.error.HTTPError as error:
                outcomes.append(error.code)

        threads = [threading.Thread(target=long_poll) for _ in range(pollers)]
        for thread in threads:
            thread.start()
        time.sleep(1.0)
        # Ordinary requests are still served while the others wait.
        assert _get(base + "/healthz") == (200, {"status": "ok"})
        assert _get(base + "/v1/agents/chat/minimal?release=v1.0.0")[0] == 200
        released_repo.tag("v1.7.0")
        for thread in threads:
            thread.join(timeout=30)
        assert sorted(outcomes) == [200] * (pollers - 1) + [304]


def _metric_total(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_metrics_add_up_every_worker_and_access_logs_are_json() -> None:
    with _serving("--worktree", str(BUNDLED_LIBRARY), "--workers", "2", "--threads", "2") as base:
        for _ in range(30):
            assert _get(base + "/v1/agents/chat/minimal?release=worktree")[0] == 200
        assert _get(base + '/v1/agents/chat/mi%22ni%0Amal?release="x"')[0] == 400
        with urllib.request.urlopen(base + "/metrics", timeout=5) as response:
            text = response.read().decode()
    route = "/v1/agents/<usecase>/<name>"
    assert _metric_total(text, "prompt_registry_http_requests_total", route=route, status="200") == 30
    assert _metric_total(text, "prompt_registry_http_request_duration_seconds_count", route=route) == 31
    entries = [json.loads(line) for line in _OUTPUT[base].splitlines() if line.startswith('{"time"')]
    served = [e for e in entries if e["path"] == "/v1/agents/chat/minimal"]
    assert len(served) == 30 and all(e["status"] == 200 and e["method"] == "GET" for e in served)
    assert {"time", "remote_addr", "query", "bytes", "duration_ms", "user_agent"} <= set(served[0])
    # A quote and a newline in the request stay inside one JSON string.
    hostile = [e for e in entries if e["status"] == 400]
    assert hostile[0]["path"] == '/v1/agents/chat/mi"ni\nmal' and hostile[0]["query"] == 'release="x"'


def test_gunicorn_conf_runs_the_registry_directly(released_repo: LibraryRepo) -> None:
    port = _free_port()
    environment = {**_clean_environment(), "REGISTRY_REPO": str(released_repo.path), "REGISTRY_PORT": str(port)}
    command = [GUNICORN, "-c", "gunicorn.conf.py", "registry.app:create_app()"]
    with _serving(command=command, env=environment, port=port) as base:
        assert _get(base + "/v1/releases")[1]["latest"] == "v1.1.0"
        with urllib.request.urlopen(base + "/metrics", timeout=5) as response:
            assert "prompt_registry_http_requests_total" in response.read().decode()
    assert '"path": "/v1/releases"' in _OUTPUT[base]


def test_serve_with_a_redis_fills_it(released_repo: LibraryRepo, redis_url: str) -> None:
    import redis

    with _serving("--repo", str(released_repo.path), "--redis-url", redis_url, "--redis-prefix", "cli-test") as base:
        assert _get(base + "/v1/agents/chat/minimal?release=v1.0.0")[0] == 200
        with redis.Redis.from_url(redis_url) as direct:
            assert [k.decode().split(":")[0] for k in direct.keys("*")] == ["cli-test"]
    assert f"in Redis at {redis_url}" in _OUTPUT[base]


def _tagged_v1_to_v2(repo: LibraryRepo) -> LibraryRepo:
    """v1.0.0, v1.1.0 and v2.0.0, each a real change."""
    repo.release("v1.0.0", {"support/triage.yml": MINIMAL_TRIAGE})
    repo.release("v1.1.0", {"support/summary.yml": MINIMAL_TRIAGE.replace("Triage", "Summary")})
    repo.release("v2.0.0", {"support/triage.yml": MINIMAL_TRIAGE.replace("ticket", "case")})
    return repo


MINIMAL_TRIAGE = """\
name: Triage a ticket
prompt_templates:
  system: Sort the ticket.
  user: "{{ ticket }}"
"""


def test_every_command_reads_the_checkout_it_runs_in(repo: LibraryRepo, tmp_path: Path) -> None:
    _tagged_v1_to_v2(repo)
    inside = repo.path / "ai_gateway" / "agents" / "support"
    releases = _cli("releases", cwd=inside)
    assert [line.split()[0] for line in releases.stdout.splitlines()] == ["v2.0.0", "v1.1.0", "v1.0.0"]
    assert _cli("resolve", "^1", cwd=inside).stdout.split()[0] == "v1.1.0"
    exported = _cli("export", "--release", "^1", "-o", str(tmp_path / "b.json"), cwd=inside)
    assert exported.returncode == 0, exported.stderr
    assert json.loads((tmp_path / "b.json").read_text())["release"]["tag"] == "v1.1.0"
    assert "2 agents" in exported.stdout
    rendered = _cli("render", "support/triage", "--release", "v1.0.0", "--input", "ticket=T-1", cwd=inside)
    assert rendered.returncode == 0 and "T-1" in rendered.stdout
    assert _cli("diff", "v1.0.0", "v1.1.0", cwd=inside).returncode == 0
    assert _cli("lint", cwd=inside).returncode == 0
    # The same library through --repo and REGISTRY_REPO, from anywhere.
    assert _cli("resolve", "^1", "--repo", str(repo.path), cwd=tmp_path).stdout.split()[0] == "v1.1.0"
    environment = {**_clean_environment(), "REGISTRY_REPO": str(repo.path)}
    assert _cli("resolve", "^1", cwd=tmp_path, env=environment).stdout.split()[0] == "v1.1.0"
    assert _cli("lint", cwd=tmp_path, env=environment).returncode == 0


def test_the_library_option_reads_the_same_in_every_command() -> None:
    for command in ("serve", "releases", "resolve", "export", "lint", "new", "test", "diff", "check-release"):
        text = " ".join(_cli(command, "--help").stdout.split())
        assert "--repo PATH the prompt library, a git checkout (default: the one holding the current directory)" in text
        assert "[REGISTRY_REPO]" in text


def test_outside_a_checkout_release_commands_say_so_in_one_line(tmp_path: Path) -> None:
    for args in (
        ("releases",),
        ("resolve", "^1"),
        ("export", "-o", "x.json"),
        ("diff", "v1.0.0", "v1.1.0"),
        ("check-release", "v1.0.0"),
        ("render", "chat/minimal", "--release", "v1.0.0"),
    ):
        result = _cli(*args, cwd=tmp_path)
        assert result.returncode == 2, args
        assert result.stderr == (
            f"prompt-registry: no prompt library here: {tmp_path} is not inside a git checkout; run this inside"
            " one, or give --repo PATH (or REGISTRY_REPO)\n"
        ), args
    assert not (tmp_path / "x.json").exists()
    for args in (("render", "chat/minimal"), ("parse", "chat/minimal", "--reply-file", "-")):
        result = _cli(*args, cwd=tmp_path)
        assert result.returncode == 2, args
        assert result.stderr.startswith(f"prompt-registry: no prompt library here: no ai_gateway/agents/ in {tmp_path}")


def test_version_and_help_list_every_command() -> None:
    version = _cli("--version")
    assert re.fullmatch(r"prompt-registry \d+\.\d+\.\d+\S*\n", version.stdout)
    listing = _cli("--help", env={**_clean_environment(), "COLUMNS": "80"}).stdout
    commands = listing[listing.index("  COMMAND\n") + len("  COMMAND\n") : listing.index("\noptions:")].splitlines()
    # One line of help per command in 80 columns (argparse puts the help of a
    # name as long as check-release on the line below it, unwrapped).
    names = [line.split()[0] for line in commands if line.startswith("    ") and not line.startswith("     ")]
    assert len(names) == 15 and len(commands) == 16 and commands[names.index("check-release") + 1].startswith(" " * 17)
    for command in ("serve", "releases", "resolve", "export", "lint", "new", "test", "diff", "check-release"):
        assert re.search(rf"^    {re.escape(command)}\s+\S", listing, re.MULTILINE), command
    for command in ("parse", "render", "run", "eval", "index", "agents"):
        assert re.search(rf"^    {command}\s+\S", listing, re.MULTILINE), command


def test_parse_reads_the_reply_from_reply_file_and_the_old_name(tmp_path: Path) -> None:
    reply = tmp_path / "reply.txt"
    reply.write_text("Final Answer: done\n")
    for option in ("--reply-file", "--output-file"):
        result = _cli("parse", "assistant/react_text", option, str(reply), "--release", "v1.1.0", "--example")
        assert result.returncode == 0, result.stderr
        assert "done" in result.stdout
    both = _cli("parse", "assistant/react_text", "--reply-file", str(reply), "--output-file", str(reply))
    assert both.returncode == 2 and "not allowed with" in both.stderr


def test_export_writes_with_the_umask_and_counts_partials_only(tmp_path: Path) -> None:
    target = tmp_path / "bundle.json"
    result = subprocess.run(
        ["sh", "-c", f'umask 022 && exec "{CLI}" export --example -o "{target}"'],
        env=_clean_environment(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert target.stat().st_mode & 0o777 == 0o644
    partials = sorted(path for path in (BUNDLED_LIBRARY / "ai_gateway" / "agents").rglob("*.jinja"))
    assert f", {len(partials)} partials\n" in result.stdout
    bundle = json.loads(target.read_text())
    assert any(".examples/" in path for path in bundle["partials"]), "golden files still travel"


def _commands_for_closed_output(repo: LibraryRepo, tmp_path: Path) -> list[list[str]]:
    reply = tmp_path / "reply.txt"
    reply.write_text("Action: nothing\n")
    return [
        ["--help"],
        ["--version"],
        ["serve", "--help"],
        ["releases"],
        ["releases", "--json"],
        ["resolve", "^1", "--json"],
        ["export", "-o", str(tmp_path / "b.json")],
        ["lint"],
        ["lint", "--format", "json"],
        ["test"],
        ["diff", "v1.0.0", "v2.0.0"],
        ["diff", "v1.0.0", "v2.0.0", "--format", "json"],
        ["check-release", "v3.0.0"],
        ["render", "support/triage", "--input", "ticket=T-1"],
        ["render", "support/triage", "--input", "ticket=T-1", "--format", "json"],
        ["parse", "support/triage", "--reply-file", str(reply)],
        ["new", "support/another"],
        ["resolve", "nothing-like-a-release"],
    ]


def test_no_command_prints_a_traceback_when_its_output_is_closed_early(repo: LibraryRepo, tmp_path: Path) -> None:
    _tagged_v1_to_v2(repo)
    for args in _commands_for_closed_output(repo, tmp_path):
        process = subprocess.Popen(
            [CLI, *args], cwd=repo.path, env=_clean_environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert process.stdout is not None and process.stderr is not None
        process.stdout.close()  # as `| head -0` does: every write fails
        errors = process.stderr.read().decode()
        process.stderr.close()
        status = process.wait(timeout=60)
        assert "Traceback" not in errors and "Exception ignored" not in errors, (args, errors)
        assert status in (0, 1, 2, 141), (args, status, errors)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_on_a_terminal_unless_no_color_is_set_and_not_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    from registry.cli.terminal import use_colour

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert use_colour(_Terminal()) and not use_colour(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "")  # no-color.org: an empty value does not count
    assert use_colour(_Terminal())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_colour(_Terminal())


def test_diff_and_test_are_coloured_on_a_terminal(repo: LibraryRepo) -> None:
    import pty

    _tagged_v1_to_v2(repo)
    for args in (["diff", "v1.0.0", "v2.0.0"], ["test"]):
        output = bytearray()

        def read(fd: int, output: bytearray = output) -> bytes:
            data = os.read(fd, 1024)
            output.extend(data)
            return data

        cwd = os.getcwd()
        os.chdir(repo.path)
        try:
            pty.spawn([CLI, *args], read)
        finally:
            os.chdir(cwd)
        assert b"\x1b[" in output, (args, output)


def _monorepo(tmp_path: Path) -> Path:
    """A repository whose prompt library sits in prompts/, tagged v1.0.0."""
    repo = LibraryRepo(tmp_path / "mono")
    repo.write("prompts/ai_gateway/agents/support/triage.yml", MINIMAL_TRIAGE, under_agents=False)
    repo.write("service/main.py", "print('the rest of the monorepo')\n", under_agents=False)
    repo.commit("library in a subdirectory")
    repo.tag("v1.0.0")
    return repo.path


def test_a_library_in_a_subdirectory_is_read_there_by_every_command(tmp_path: Path) -> None:
    top = _monorepo(tmp_path)
    inside = top / "prompts" / "ai_gateway"
    assert _cli("lint", cwd=inside).returncode == 0
    assert _cli("resolve", "v1.0.0", cwd=inside).returncode == 0
    rendered = _cli("render", "support/triage", "--input", "ticket=T-7", cwd=inside)
    assert rendered.returncode == 0 and "T-7" in rendered.stdout, rendered.stderr
    released = _cli("render", "support/triage", "--release", "v1.0.0", "--input", "ticket=T-8", cwd=inside)
    assert released.returncode == 0 and "T-8" in released.stdout, released.stderr
    created = _cli("new", "support/other", cwd=inside)
    assert created.returncode == 0, created.stderr
    assert (top / "prompts/ai_gateway/agents/support/other.yml").is_file()
    assert (top / "prompts/schemas/agent-definition.v1.schema.json").is_file()
    assert not (top / "ai_gateway").exists() and not (top / "schemas").exists()
    assert "added: support/other" in _cli("diff", "v1.0.0", "worktree", cwd=inside).stdout


def test_a_bare_repository_is_a_library_and_has_no_working_tree(released_repo: LibraryRepo, tmp_path: Path) -> None:
    bare = tmp_path / "bare.git"
    released_repo.git("clone", "-q", "--bare", str(released_repo.path), str(bare))
    assert _cli("resolve", "^1", cwd=bare).stdout.split()[0] == "v1.1.0"
    for args in (("check-release", "v3.0.0"), ("diff", "v1.0.0", "worktree")):
        result = _cli(*args, cwd=bare)
        assert result.returncode == 2, (args, result.stdout)
        assert result.stderr.startswith(f"prompt-registry: no prompt library here: no ai_gateway/agents/ in {bare}")


def test_check_release_refuses_a_release_with_no_definitions_under_the_root(released_repo: LibraryRepo) -> None:
    result = _cli("check-release", "v3.0.0", "--ref", "v1.1.0", "--root", "nope", cwd=released_repo.path)
    assert result.returncode == 1
    assert "FAILED: v1.1.0 has no definitions under nope/: is that the agents root (--root)?" in result.stdout


def test_lint_test_and_new_honour_registry_root(tmp_path: Path) -> None:
    environment = {**_clean_environment(), "REGISTRY_ROOT": "prompts"}
    LibraryRepo(tmp_path / "lib")
    created = _cli("new", "chat/x", cwd=tmp_path / "lib", env=environment)
    assert created.returncode == 0, created.stderr
    assert (tmp_path / "lib/prompts/chat/x.yml").is_file()
    assert _cli("lint", cwd=tmp_path / "lib", env=environment).returncode == 0
    rendered = _cli("render", "chat/x", "--input", "question=q", cwd=tmp_path / "lib", env=environment)
    assert rendered.returncode == 0, rendered.stderr


def test_where_the_library_path_came_from_is_named_when_it_is_wrong(tmp_path: Path) -> None:
    assert _cli("releases", "--repo", "", cwd=tmp_path).stderr == (
        "prompt-registry: --repo is empty: give the path of a prompt library\n"
    )
    environment = {**_clean_environment(), "REGISTRY_REPO": str(tmp_path / "missing")}
    for command in (("releases",), ("lint",), ("render", "a/b")):
        result = _cli(*command, cwd=tmp_path, env=environment)
        assert result.returncode == 2
        assert result.stderr == f"prompt-registry: REGISTRY_REPO '{tmp_path / 'missing'}' is not a directory\n"


def test_render_hints_at_quoting_even_for_a_single_problem(tmp_path: Path) -> None:
    LibraryRepo(tmp_path / "lib")
    assert _cli("new", "support/triage", cwd=tmp_path / "lib").returncode == 0
    result = _cli("render", "support/triage", "--input", "question=5", cwd=tmp_path / "lib")
    assert result.returncode == 2
    assert result.stderr == (
        f"prompt-registry: /question: {schema_says({'type': 'string'}, 5)} (VALUE is read as JSON when it parses as JSON;"
        " to pass the string, say --input 'question=\"5\"') (support/triage at worktree)\n"
    )


def test_closed_standard_streams_and_unwritable_outputs_are_one_line(repo: LibraryRepo, tmp_path: Path) -> None:
    _tagged_v1_to_v2(repo)
    closed = subprocess.run(
        f'"{CLI}" releases >&- && "{CLI}" lint >&- && "{CLI}" parse support/triage --reply-file - <&-',
        shell=True,
        cwd=repo.path,
        env=_clean_environment(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in closed.stderr and "internal error" not in closed.stderr, closed.stderr
    (tmp_path / "taken").mkdir()
    lint_output = _cli("lint", "-o", str(tmp_path / "taken"), cwd=repo.path)
    assert lint_output.returncode == 2
    assert lint_output.stderr.startswith(f"prompt-registry: cannot write {tmp_path / 'taken'}: ")
    exported = _cli("export", "-o", str(tmp_path / "taken"), cwd=repo.path)
    assert exported.returncode == 2 and exported.stderr.startswith("prompt-registry: cannot write ")
    assert not list(tmp_path.glob(".bundle-*")), "the temporary bundle is removed"


def test_serve_refuses_a_port_in_use_and_checks_settings_before_building_the_example(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _cli("serve", "--example", "--port", str(port), cwd=tmp_path)
    assert result.returncode == 2
    assert f"prompt-registry: cannot listen on 127.0.0.1:{port}: " in result.stderr
    assert "(--port 0 picks a free port)" in result.stderr
    negative = _cli("serve", "--example", "--port", "-1", cwd=tmp_path)
    assert negative.returncode == 2 and "example" not in negative.stderr
    assert negative.stderr.endswith("port must be between 0 (any free port) and 65535\n")


def test_parse_output_file_still_works_but_says_it_is_deprecated(tmp_path: Path) -> None:
    reply = tmp_path / "reply.txt"
    reply.write_text("Final Answer: done\n")
    result = _cli("parse", "assistant/react_text", "--output-file", str(reply), "--release", "v1.1.0", "--example")
    assert result.returncode == 0
    assert "prompt-registry: --output-file is deprecated; use --reply-file\n" in result.stderr


def test_a_remote_without_a_data_dir_leaves_no_mirror_behind(released_repo: LibraryRepo, tmp_path: Path) -> None:
    bare = tmp_path / "remote.git"
    released_repo.git("clone", "-q", "--bare", str(released_repo.path), str(bare))
    environment = {**_clean_environment(), "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    assert _cli("releases", "--remote", bare.as_uri(), env=environment).returncode == 0
    assert list((tmp_path / "tmp").iterdir()) == []
