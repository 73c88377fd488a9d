"""The example library's replayed evaluation, end to end, as on a fresh machine.

Run by hand, from the repository root, with the dev environment:

    .venv/bin/python bench/example_eval.py

Each round runs, as their own processes and alternating, with an empty home
and data directories (nothing cached from a round before):

- the baseline: ``prompt-registry run support/gated_answer --example
  --model scripted:library/replies/gated_answer.yml``, the README's first
  run: the command's start, the example repository built, one chain run;
- the measured: ``prompt-registry eval --example --base v1.0.0 --head v1.1.0
  --replay library/replays/example.yml``, the README's evaluation (eight
  eval files, 28 cases, 47 runs on two releases, answered from the replay).

Target (issue 31): the evaluation under 5 s end to end. Every round is
printed, with the ratio to the baseline of the same round.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = str(Path(sys.executable).parent / "prompt-registry")
ROUNDS = 7
TARGET_SECONDS = 5.0

BASELINE = [
    "run", "support/gated_answer", "--example", "--input", "question=How do I change my e-mail address?",
    "--model", "scripted:library/replies/gated_answer.yml",
]  # fmt: skip
EVALUATION = ["eval", "--example", "--base", "v1.0.0", "--head", "v1.1.0", "--replay", "library/replays/example.yml"]


def timed(arguments: list[str], expected: int) -> float:
    """Seconds for one run of the command, in a fresh home; checks its exit code."""
    with tempfile.TemporaryDirectory(prefix="bench-home-") as home:
        environment = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("REGISTRY_", "OPENAI_", "ANTHROPIC_"))},
            "HOME": home,
            "XDG_DATA_HOME": f"{home}/data",
            "XDG_CACHE_HOME": f"{home}/cache",
        }
        started = time.perf_counter()
        done = subprocess.run([CLI, *arguments], cwd=ROOT, env=environment, capture_output=True, text=True)
        seconds = time.perf_counter() - started
    if done.returncode != expected:
        raise SystemExit(f"{arguments[0]} exited {done.returncode}, not {expected}: {done.stderr.strip()[:500]}")
    return seconds


def main() -> None:
    print(f"python {platform.python_version()} · {os.cpu_count()} cores · load {os.getloadavg()[0]:.2f}")
    timed(EVALUATION, expected=1)  # a first run warms the disk cache of the package's files, as an install does
    rows = []
    for number in range(1, ROUNDS + 1):
        baseline = timed(BASELINE, expected=0)
        evaluation = timed(EVALUATION, expected=1)  # the example's gate fails on its planted regression
        rows.append((baseline, evaluation))
        print(f"round {number}: run {baseline:.2f} s · eval {evaluation:.2f} s · {evaluation / baseline:.2f}x the run")
    evaluations = [evaluation for _, evaluation in rows]
    ratios = [evaluation / baseline for baseline, evaluation in rows]
    print(
        f"eval median {statistics.median(evaluations):.2f} s (max {max(evaluations):.2f} s; target under"
        f" {TARGET_SECONDS:.0f} s) · median {statistics.median(ratios):.2f}x the run"
        f" · load {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
