"""A new user's first screen: the package installed from a wheel (not in
place) serves the example, and every command of the README's API screen
works exactly as written against it."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.ports import free_port
from tests.support.servers import REPOSITORY, RegistryProcess, clean_environment

README = REPOSITORY / "README.md"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package built into a wheel and installed into a directory of its own."""
    work = tmp_path_factory.mktemp("wheel")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "-w", str(work / "dist"), str(REPOSITORY)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = (work / "dist").glob("prompt_registry-*.whl")
    target = work / "site"
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True, timeout=300)
    return target


@pytest.fixture(scope="module")
def example_from_wheel(installed: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryProcess]:
    """``prompt-registry serve`` from the wheel, in a directory that is no checkout."""
    environment = {**clean_environment(), "PYTHONPATH": str(installed)}
    cwd = tmp_path_factory.mktemp("elsewhere")
    where = subprocess.run(
        [sys.executable, "-c", "import registry; print(registry.__file__)"],
        env=environment,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.startswith(str(installed)), "the test must run the installed copy, not the checkout"
    port = free_port()
    command = [sys.executable, "-m", "registry", "serve", "--port", str(port), "--workers", "1"]
    with RegistryProcess(env=environment, cwd=cwd, command=command, port=port) as server:
        yield server
    assert "serving the bundled example library (not inside a git checkout" in server.output


def _readme_api_commands() -> list[list[str]]:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## The API in one screen") :]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert block
    lines = block.group(1).replace("\\\n", " ").splitlines()
    return [shlex.split(line) for line in lines if line.startswith("curl ")]


def _run_curl(arguments: list[str], base: str) -> tuple[int, bytes, str]:
    """What ``curl`` would do with the README's flags (-s -i -X -H -d)."""
    method, headers, data, url = None, {}, None, None
    words = iter(arguments[1:])
    for word in words:
        if word == "-X":
            method = next(words)
        elif word == "-H":
            name, _, value = next(words).partition(":")
            headers[name.strip()] = value.strip()
        elif word == "-d":
            data = next(words).encode()
        elif word.startswith("-"):
            assert set(word[1:]) <= {"s", "i"}, f"the test does not know curl's {word}"
        else:
            url = word
    assert url and url.startswith("localhost:8080"), url
    request = urllib.request.Request(
        base + url.removeprefix("localhost:8080"), data=data, headers=headers, method=method
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read(), response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as error:
        return error.code, error.read(), error.headers.get("Content-Type", "")


def test_the_wheel_serves_the_tagged_example_outside_any_checkout(example_from_wheel: RegistryProcess) -> None:
    with urllib.request.urlopen(example_from_wheel.base + "/v1/releases", timeout=10) as response:
        releases = json.loads(response.read())
    assert [r["tag"] for r in releases["releases"]] == ["v1.1.0", "v1.0.0"]
    # Served from the wheel's package data, schemas and OpenAPI document included.
    for path in ("/v1/agents?release=v1.1.0", "/openapi.json", "/problems/invalid-inputs"):
        with urllib.request.urlopen(example_from_wheel.base + path, timeout=10) as response:
            assert response.status == 200


def test_every_command_of_the_readme_api_screen_works_as_written(example_from_wheel: RegistryProcess) -> None:
    commands = _readme_api_commands()
    assert len(commands) >= 10
    outcomes = []
    for command in commands:
        status, body, content_type = _run_curl(command, example_from_wheel.base)
        outcomes.append((status, command))
        if "If-None-Match" in " ".join(command):
            assert status == 304 and body == b"", command
        elif status == 404:
            # The README's one problem example: an agent v1.0.0 does not have.
            problem = json.loads(body)
            assert content_type == "application/problem+json"
            assert problem["type"] == "/problems/agent-not-found", problem
        else:
            assert status == 200, (command, status, body[:300])
    assert sum(status == 404 for status, _ in outcomes) == 1
    assert sum(status == 304 for status, _ in outcomes) == 1


def test_the_readme_names_the_commands_that_ci_runs() -> None:
    text = README.read_text(encoding="utf-8")
    ci = (REPOSITORY / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert ci in text
    assert ".venv/bin/pip install . && .venv/bin/prompt-registry serve --example" in text
    assert os.access(REPOSITORY / ".ci" / "run", os.R_OK)


def _declared_closure() -> set[str]:
    """Every distribution that installing prompt-registry (no extras) brings."""
    from importlib import metadata

    from packaging.requirements import Requirement

    def normal(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    seen: set[str] = set()
    pending: list[tuple[str, frozenset[str]]] = [("prompt-registry", frozenset())]
    while pending:
        name, extras = pending.pop()
        for text in metadata.requires(name) or []:
            requirement = Requirement(text)
            markers = requirement.marker
            if markers is not None and not any(markers.evaluate({"extra": extra}) for extra in extras or {""}):
                continue
            key = (normal(requirement.name), frozenset(requirement.extras))
            if key[0] + repr(sorted(key[1])) not in seen:
                seen.add(key[0] + repr(sorted(key[1])))
                seen.add(key[0])
                pending.append((requirement.name, key[1]))
    return {entry for entry in seen if "[" not in entry}


def test_the_serving_process_imports_only_what_the_package_declares() -> None:
    # What `prompt-registry serve` loads: the patched entry point, the app,
    # gunicorn's gevent worker, the CLI. A plain `pip install .` once failed
    # to start because gunicorn's gevent worker needs `packaging`, which only
    # the test extras had installed.
    probe = (
        "import sys, registry.cli.geventmain, registry.cli.main, registry.serving.app, registry.serving.server, registry.store.example;"
        " import gunicorn.workers.ggevent;"
        " print('\\n'.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    # What the interpreter loads before any import of ours (site's .pth hooks).
    bare = subprocess.run(
        [sys.executable, "-c", "import sys; print('\\n'.join({m.split('.')[0] for m in sys.modules}))"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    from importlib import metadata

    owners = metadata.packages_distributions()
    imported = {
        re.sub(r"[-_.]+", "-", distribution).lower()
        for module in set(result.stdout.split()) - set(bare.stdout.split())
        for distribution in owners.get(module, [])
    }
    undeclared = imported - _declared_closure() - {"prompt-registry"} - OPTIONAL_IMPORTS
    assert undeclared == set(), f"imported but not installed by `pip install .`: {sorted(undeclared)}"


# Imported by our dependencies only when installed (an ImportError is
# handled), and installed here by the test extras: never needed to serve.
OPTIONAL_IMPORTS = {
    "opentelemetry-sdk",  # redis's observability uses the SDK when it finds one (tests/executor/test_otel.py needs it)
    "opentelemetry-semantic-conventions",  # the SDK's resource attributes
    "psutil",  # the SDK's process resource detector; tests/integration/test_server.py needs it
    "pygments",  # httpx's command line (httpx._main), imported when its extras are present
    "rich",  # the same, brought here by schemathesis (tests/protocol/test_protocol_conformance.py)
}


def test_the_readme_run_command_works_as_written_and_prints_what_it_shows() -> None:
    text = README.read_text(encoding="utf-8")
    command = re.search(r"```sh\n(\.venv/bin/prompt-registry run .*?)```", text, re.DOTALL)
    shown = re.search(r"```text\n(run support/gated_answer .*?)```", text, re.DOTALL)
    assert command and shown
    words = shlex.split(command.group(1).replace("\\\n", " "))
    cli = str(Path(sys.executable).parent / "prompt-registry")
    result = subprocess.run(
        [cli, *words[1:]], cwd=REPOSITORY, env=clean_environment(), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr

    def steady(output: str) -> list[str]:
        return [re.sub(r"\(\d+ ms\)|\d+\.\d+ s", "", line) for line in output.strip().splitlines()]

    assert steady(result.stdout) == steady(shown.group(1))


def test_the_readme_layout_lists_every_subpackage() -> None:
    text = README.read_text(encoding="utf-8")
    layout = text[text.index("## Layout") :]
    packages = sorted(p.parent.name for p in (REPOSITORY / "registry").glob("*/__init__.py"))
    assert [name for name in packages if f"\n  {name}/" not in layout] == []


def test_the_readme_says_where_agents_serve_keeps_its_tasks() -> None:
    from registry.cli.agents import default_data_dir

    home = os.path.expanduser("~")
    where = default_data_dir({}).replace(home, "~", 1) + "/tasks.db"
    assert f"`{where}`" in README.read_text(encoding="utf-8")


def test_the_authoring_walkthrough_renders_the_agent_new_scaffolds(tmp_path: Path) -> None:
    # docs/authoring.md, steps 1 and 2, as written.
    text = (REPOSITORY / "docs" / "authoring.md").read_text(encoding="utf-8")
    walkthrough = text[text.index("## From a new agent to a tagged release") :]
    commands = re.findall(r"`(prompt-registry (?:new|render)[^`]*)`", re.sub(r"\s*\n\s*", " ", walkthrough))
    assert [c.split()[1] for c in commands[:2]] == ["new", "render"], commands
    cli = str(Path(sys.executable).parent / "prompt-registry")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    for command in commands[:2]:
        result = subprocess.run(
            [cli, *shlex.split(command)[1:]],
            cwd=tmp_path,
            env=clean_environment(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, (command, result.stderr)
    assert "I cannot log in" in result.stdout
