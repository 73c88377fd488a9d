"""Scaling benchmark: a warm request's cost against the size of the library.

Run by hand, from the repository root, with the dev environment:

    .venv/bin/python bench/scaling.py              # about 2 minutes
    .venv/bin/python bench/scaling.py --rounds 3 --calls 1000   # a quick look

Builds real git repositories with ``git fast-import`` (annotated release
tags, one commit per tag, one agent edited per tag, the way a library moves):

  tags-10        100 agents at 10 tags: the baseline of every ratio
  tags-1000      100 agents at 1,000 tags
  tags-10000     100 agents at 10,000 tags, refs packed (as a clone has them)
  loose-10000    the same with 10,000 loose refs (as a pushed-to bare repository
                 has them until ``git gc``)
  settling       loose-10000 while ``refs/tags`` changed under 2 s ago (the
                 store then also compares its entries; see GitStore._refs_state)
  agents-50000   50,000 agents (500 usecases x 100) at 10 tags

Each library is served by its own application in this process; Flask's test
client sends a warm ``GET`` by exact tag (the oldest), a warm ``GET`` by range
(``^1.0``, whose answer is the newest tag) and a warm render, the same agent
in every library. Rounds go through every library in turn, so that the
machine's drift falls on all; every round is printed, and the ratio of each
library to ``tags-10`` is the median of the rounds' ratios. Target (issue 22):
the largest within 10% of the smallest.

Then "seen promptly": a new tag is created with ``git tag`` and the first
request naming it is timed, which includes listing the tags again.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.make_library import _IDENTITY, agent_path, agent_text  # noqa: E402
from registry.serving.app import create_app  # noqa: E402
from registry.settings import Settings  # noqa: E402

AGENT = ("usecase_000", "agent_005")
RENDER_BODY = {"inputs": {"question": "How do I pin a release?", "context": ["one", "two"]}}


def build(repo: Path, *, agents: int, tags: int, packed: bool) -> Path:
    """``agents`` agents (100 per usecase) at ``tags`` annotated tags v1.0.0 ... v1.<tags-1>.0."""
    repo.mkdir(parents=True)
    env = {**os.environ, **_IDENTITY}
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True, env=env)
    per_usecase = min(agents, 100)
    everyone = [divmod(i, per_usecase) for i in range(agents)]
    stream: list[bytes] = []

    def data(text: str) -> None:
        payload = text.encode()
        stream.append(b"data %d\n" % len(payload) + payload + b"\n")

    for release in range(tags):
        when = 1_700_000_000 + release * 60
        stream.append(b"commit refs/heads/main\nmark :%d\n" % (release + 1))
        stream.append(b"committer bench <bench@example.invalid> %d +0000\n" % when)
        data(f"release 1.{release}.0\n")
        # The first commit writes every agent; each later one edits one agent
        # other than the one measured, so that every tag holds the same answer.
        edited = everyone if release == 0 else [everyone[1 + (release % (agents - 1))]]
        for usecase, name in edited:
            stream.append(f"M 100644 inline {agent_path(usecase, name)}\n".encode())
            data(agent_text(usecase, name, release if release == 0 or (usecase, name) != (0, 5) else 0))
        stream.append(b"\n")
        stream.append(f"tag v1.{release}.0\nfrom :{release + 1}\n".encode())
        stream.append(b"tagger bench <bench@example.invalid> %d +0000\n" % when)
        data(f"v1.{release}.0\n")
    subprocess.run(["git", "-C", str(repo), "fast-import", "--quiet"], input=b"".join(stream), check=True, env=env)
    if packed:
        subprocess.run(["git", "-C", str(repo), "pack-refs", "--all"], check=True)
    return repo


class Library:
    """One library, its application, and the requests timed against it."""

    def __init__(self, label: str, repo: Path, *, settling: bool = False) -> None:
        self.label = label
        self.repo = repo
        self.settling = settling
        self.client = create_app(Settings(repo=str(repo))).test_client()
        usecase, name = AGENT
        self.requests: dict[str, Callable[[], object]] = {
            "GET exact": self._get(f"/v1/agents/{usecase}/{name}?release=v1.0.0"),
            "GET range": self._get(f"/v1/agents/{usecase}/{name}?release=%5E1.0"),
            "render": self._render(f"/v1/agents/{usecase}/{name}/render?release=v1.0.0"),
        }
        for request in self.requests.values():
            request()  # warm: loaded, compiled, resolved

    def _get(self, url: str) -> Callable[[], object]:
        def get() -> object:
            response = self.client.get(url)
            assert response.status_code == 200, response.get_data(as_text=True)
            return response

        return get

    def _render(self, url: str) -> Callable[[], object]:
        def render() -> object:
            response = self.client.post(url, json=RENDER_BODY)
            assert response.status_code == 200, response.get_data(as_text=True)
            return response

        return render

    def time_per_call(self, request: str, calls: int) -> float:
        if self.settling:
            # A change to refs/tags "now": the store compares the directory's
            # entries (every 100 ms at most) for the next 2 s, this batch included.
            os.utime(self.repo / ".git" / "refs" / "tags", None)
            self.requests[request]()  # the change itself: every tag listed again, once
        call = self.requests[request]
        started = time.perf_counter()
        for _ in range(calls):
            call()
        return (time.perf_counter() - started) / calls * 1e6

    def first_request_at_a_new_tag(self, tag: str) -> float:
        """Milliseconds for the first GET naming a tag made just before it."""
        env = {**os.environ, **_IDENTITY}
        subprocess.run(["git", "-C", str(self.repo), "tag", "-a", "-m", tag, tag, "main"], check=True, env=env)
        usecase, name = AGENT
        started = time.perf_counter()
        response = self.client.get(f"/v1/agents/{usecase}/{name}?release={tag}")
        elapsed = (time.perf_counter() - started) * 1e3
        assert response.status_code == 200, response.get_data(as_text=True)
        return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=2000, help="calls per library, request and round")
    args = parser.parse_args()
    print(
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, {platform.platform()}; "
        f"Python {platform.python_version()}\n"
    )
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        started = time.perf_counter()
        libraries = [
            Library("tags-10", build(work / "tags-10", agents=100, tags=10, packed=True)),
            Library("tags-1000", build(work / "tags-1000", agents=100, tags=1000, packed=True)),
            Library("tags-10000", build(work / "tags-10000", agents=100, tags=10_000, packed=True)),
            Library("loose-10000", build(work / "loose-10000", agents=100, tags=10_000, packed=False)),
            # Its own copy: its changes to refs/tags must not make loose-10000 settle too.
            Library("settling", build(work / "settling", agents=100, tags=10_000, packed=False), settling=True),
            Library("agents-50000", build(work / "agents-50000", agents=50_000, tags=10, packed=True)),
        ]
        print(f"Libraries built and warmed in {time.perf_counter() - started:.0f} s.\n")
        baseline = libraries[0]
        for request in baseline.requests:
            samples: dict[str, list[float]] = {library.label: [] for library in libraries}
            for _ in range(args.rounds):
                for library in libraries:
                    samples[library.label].append(library.time_per_call(request, args.calls))
            print(f"### {request}\n")
            print(f"Microseconds per request, {args.calls:,} requests per library per round.\n")
            headings = " | ".join(f"round {i + 1}" for i in range(args.rounds))
            print(f"| library | {headings} | median | vs tags-10 |")
            print("|---|" + "---:|" * (args.rounds + 2))
            for library in libraries:
                rounds = samples[library.label]
                ratio = statistics.median(r / b for r, b in zip(rounds, samples[baseline.label], strict=True))
                cells = " | ".join(f"{value:.0f}" for value in rounds)
                print(f"| {library.label} | {cells} | {statistics.median(rounds):.0f} | {ratio:.3f}x |")
            print()
        print("### First request naming a tag created just before it\n")
        print("Milliseconds, three new tags in turn (the listing of every tag is redone once per change).\n")
        print("| library | tag 1 | tag 2 | tag 3 |")
        print("|---|---:|---:|---:|")
        for library in libraries:
            if library.settling:
                continue
            times = [library.first_request_at_a_new_tag(f"v2.{i}.0") for i in range(3)]
            print(f"| {library.label} | " + " | ".join(f"{t:.1f}" for t in times) + " |")


if __name__ == "__main__":
    main()
