"""Lint benchmark: ``prompt-registry lint`` over 5,000 definitions.

Run by hand, from the repository root, with the dev environment:

    .venv/bin/python bench/lint.py

Builds a library of 5,000 definitions (the bundled library's agents copied
across 50 usecases of 100 agents, with its partials; in each usecase ten of
them composites, 500 in all: chains nested five deep, votes, and references
across usecases) in a temporary
directory, then times, in the same run and alternating, the baseline (reading
every file and parsing it with ``yaml.safe_load``, the least any checker
does) and ``registry.authoring.lint.lint``. Target: lint under 30 s on 2 cores.
"""

from __future__ import annotations

import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from registry.authoring.lint import lint  # noqa: E402

BUNDLED = ROOT / "library" / "ai_gateway" / "agents"
ROUNDS = 3


def build(base: Path) -> Path:
    agents = base / "ai_gateway" / "agents"
    shutil.copytree(BUNDLED / "_partials", agents / "_partials")
    # The bundled leaves; its composites name agents of the bundled library,
    # which copies under other names would not find (the composites below do).
    sources = [path for path in sorted(BUNDLED.glob("*/*.yml")) if "pattern" not in yaml.safe_load(path.read_bytes())]
    for usecase in range(50):
        directory = agents / f"usecase_{usecase:02d}"
        directory.mkdir(parents=True)
        for index in range(100):
            source = sources[(usecase * 100 + index) % len(sources)]
            (directory / f"agent_{index:03d}.yml").write_bytes(source.read_bytes())
        (directory / "agent_099.yml").write_text(STEP, encoding="utf-8")
        for depth in range(5):
            inner = "agent_099" if depth == 0 else f"agent_{89 + depth:03d}"
            (directory / f"agent_{90 + depth:03d}.yml").write_text(
                COMPOSITE.format(kind="chain", body=_steps(f"usecase_{usecase:02d}/{inner}")), encoding="utf-8"
            )
        for index in range(95, 99):
            other = f"usecase_{(usecase + 1) % 50:02d}/agent_092"
            question = "{{ inputs.question }}"
            vote = f"  mode: vote\n  n: 3\n  branch: {{agent: {other}, inputs: {{question: '{question}'}}}}\n"
            vote += "  aggregate: {strategy: majority}\n"
            (directory / f"agent_{index:03d}.yml").write_text(
                COMPOSITE.format(kind="parallel", body=vote), encoding="utf-8"
            )
    return base


STEP = """\
name: A step of the composites
inputs: {type: object, properties: {question: {type: string}}, required: [question]}
prompt_templates:
  user: "{{ question }}"
"""
COMPOSITE = """\
name: A composite
inputs: {{type: object, properties: {{question: {{type: string}}}}, required: [question]}}
pattern:
  kind: {kind}
{body}"""


def _steps(inner: str) -> str:
    run = "{{ inputs.question }}"
    return (
        "  steps:\n"
        f"    - {{id: first, agent: {inner}, inputs: {{question: '{run}'}}}}\n"
        "    - {id: second, agent: usecase_00/agent_099, inputs: {question: '{{ steps.first.output }}'}}\n"
    )


def baseline(base: Path) -> None:
    for path in sorted((base / "ai_gateway" / "agents").glob("*/*.yml")):
        yaml.safe_load(path.read_bytes())


def main() -> None:
    print(
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, {platform.platform()}, "
        f"Python {platform.python_version()}"
    )
    with tempfile.TemporaryDirectory() as scratch:
        base = build(Path(scratch))
        times: dict[str, list[float]] = {"baseline": [], "lint": []}
        for _ in range(ROUNDS):
            started = time.perf_counter()
            baseline(base)
            times["baseline"].append(time.perf_counter() - started)
            started = time.perf_counter()
            report = lint(base)
            times["lint"].append(time.perf_counter() - started)
        assert len(report.definitions) == 5000 and report.errors == 0, (len(report.definitions), report.errors)
    plain, linted = statistics.median(times["baseline"]), statistics.median(times["lint"])
    print("\n5,000 definitions (500 composites), every round and the median, seconds\n")
    header = " | ".join(f"round {i + 1}" for i in range(ROUNDS))
    print(f"| | {header} | median |")
    print("|---|" + "---:|" * (ROUNDS + 1))
    for label, key, median in (
        ("read + yaml.safe_load every file (baseline)", "baseline", plain),
        ("prompt-registry lint", "lint", linted),
    ):
        print(f"| {label} | {' | '.join(f'{t:.2f}' for t in times[key])} | {median:.2f} |")
    print(f"\nRatio lint / baseline: {linted / plain:.1f}x; target under 30 s: {'met' if linted < 30 else 'missed'}")


if __name__ == "__main__":
    main()
