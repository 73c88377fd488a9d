"""What the registry's rendering policy costs, against plain Jinja in the same run.

Run by hand:  .venv/bin/python bench/render_overhead.py
Prints, for a few bundled agents, the time per render of:
  - plain Jinja (Environment, default settings)          - the baseline
  - Jinja's ImmutableSandboxedEnvironment + StrictUndefined
  - the registry (sandbox + resource guards + input validation)
and the cold cost of loading one definition (YAML, schema, compile, includes)
and the whole bundled library.
"""

from __future__ import annotations

import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import jinja2
import jinja2.sandbox

from registry.serving.wiring import build_service
from registry.settings import BUNDLED_LIBRARY, Settings

TOOLS = [
    {"name": f"tool_{i}", "description": "Looks something up in the project. " * 3, "example": f"use tool_{i}"}
    for i in range(8)
]
ROUNDS = 7
CASES: dict[tuple[str, str], dict[str, Any]] = {
    ("chat", "minimal"): {"tools": TOOLS},
    ("explain_code", "snippet"): {"language": "python", "code": "def add(a, b):\n    return a + b\n" * 20},
}


def render_all(templates: list[jinja2.Template], variables: Mapping[str, object]) -> list[str]:
    return [template.render(variables) for template in templates]


def per_call(function: Callable[[], object], *, seconds: float = 1.0) -> float:
    """Median microseconds per call over several timed batches."""
    batch = 1
    while True:
        start = time.perf_counter()
        for _ in range(batch):
            function()
        if time.perf_counter() - start > 0.05:
            break
        batch *= 2
    samples: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(samples) < 5:
        start = time.perf_counter()
        for _ in range(batch):
            function()
        samples.append((time.perf_counter() - start) / batch * 1e6)
    return statistics.median(samples)


def tagged_copy_of_library(directory: str) -> str:
    """The bundled library committed to a fresh git repository and tagged v1.0.0."""
    shutil.copytree(BUNDLED_LIBRARY, directory, dirs_exist_ok=True)
    env = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "bench"], ["tag", "v1.0.0"]):
        subprocess.run(["git", *command], cwd=directory, env=env, check=True)
    return directory


def main() -> None:
    print(f"python {platform.python_version()}, jinja2 {jinja2.__version__}, {platform.machine()}")
    with tempfile.TemporaryDirectory() as directory:
        for label, settings in (
            ("git repository, release v1.0.0", Settings(repo=tagged_copy_of_library(directory))),
            ("worktree (bundled library)", Settings()),
        ):
            print(f"\n{label}")
            compare(settings)


def compare(settings: Settings) -> None:
    service = build_service(settings)
    loader = jinja2.FileSystemLoader(str(BUNDLED_LIBRARY / "ai_gateway" / "agents"))
    plain_env = jinja2.Environment(loader=loader)
    sandbox_env = jinja2.sandbox.ImmutableSandboxedEnvironment(loader=loader, undefined=jinja2.StrictUndefined)
    print(f"{'agent':28} {'plain':>9} {'sandbox':>9} {'registry':>9} {'registry/plain':>15}")
    for (usecase, name), inputs in CASES.items():
        agent = service.get_agent(usecase, name).agent
        sources = list(agent.compiled.definition["prompt_templates"].values())
        plain = [plain_env.from_string(s) for s in sources]
        sandboxed = [sandbox_env.from_string(s) for s in sources]
        variables = {**inputs, "audience": "intermediate"}
        candidates: dict[str, Callable[[], object]] = {
            "plain": partial(render_all, plain, variables),
            "sandbox": partial(render_all, sandboxed, variables),
            "registry": partial(service.render, usecase, name, inputs),
        }
        # Interleaved rounds, median of each: this machine's neighbours make
        # any single timing swing by a third.
        rounds: dict[str, list[float]] = {label: [] for label in candidates}
        for _ in range(ROUNDS):
            for label, function in candidates.items():
                rounds[label].append(per_call(function, seconds=0.3))
        plain_us, sandbox_us, registry_us = (statistics.median(rounds[label]) for label in candidates)
        print(
            f"{usecase + '/' + name:28} {plain_us:8.1f}u {sandbox_us:8.1f}u {registry_us:8.1f}u"
            f" {registry_us / plain_us:14.2f}x"
        )
    start = time.perf_counter()
    fresh = build_service(settings)
    fresh.get_agent("explain_code", "snippet")
    one_ms = (time.perf_counter() - start) * 1e3
    start = time.perf_counter()
    listing = build_service(settings).list_agents()
    all_ms = (time.perf_counter() - start) * 1e3
    print(f"cold load of one definition (new service): {one_ms:.1f} ms")
    print(f"cold load of the whole library ({len(listing.agents)} agents): {all_ms:.1f} ms")


if __name__ == "__main__":
    main()
