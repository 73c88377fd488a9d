"""Client benchmark: what a gateway pays per prompt, against plain Jinja.

Run by hand, from the repository root, with the dev environment:

    .venv/bin/python bench/client.py

(1) Warm path, in process: ``client.get(usecase, name)`` answered from the
    client's cache plus ``agent.render(inputs)``, against the baseline of
    rendering the same templates with plain Jinja (a default ``Environment``,
    partials from a ``DictLoader``, templates compiled once). Target: at most
    1.2x. The client also times its parts: the cache lookup alone, and the
    render alone.
(2) Cold fetch: a new client's first ``get`` from a registry server on
    loopback (gunicorn, one worker), against the baseline of a bare
    ``httpx.Client().get`` of the same URL (a new connection too), which
    moves the same bytes.
(3) Construction: making a ``RegistryClient`` (``http://`` and ``https://``),
    against ``httpx.Client()`` with its defaults (which loads a certificate
    bundle each time) and ``httpx.Client(verify=False)`` (which loads none);
    and the first client of a fresh process, which also imports httpx's
    HTTP layer.

Rounds are interleaved (baseline, client, baseline, ...) and the medians of
the rounds reported, so that the machine's drift falls on both.
"""

from __future__ import annotations

import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import jinja2

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.make_library import small_library  # noqa: E402
from registry.client import RegistryClient  # noqa: E402
from tests.servers import RegistryProcess  # noqa: E402

AGENTS = {
    ("explain_code", "snippet"): {
        "code": "def add(a, b):\n    return a + b\n",
        "language": "python",
        "file_path": "src/calc.py",
        "audience": "intermediate",
    },
    ("chat", "minimal"): {
        "question": "How do I pin a release?",
        "tools": [
            {"name": f"tool_{i}", "description": f"Does thing {i} to an issue.", "example": f"tool_{i}(42)"}
            for i in range(8)
        ],
    },
}
ROUNDS = 7
BATCH = 2000


def per_call_us(call: Callable[[], object], count: int = BATCH) -> float:
    started = time.perf_counter()
    for _ in range(count):
        call()
    return (time.perf_counter() - started) / count * 1e6


def plain_jinja(agent_partials: dict[str, str], templates: dict[str, str]) -> Callable[[dict[str, object]], list[str]]:
    environment = jinja2.Environment(loader=jinja2.DictLoader(agent_partials))
    compiled = [environment.from_string(text) for text in templates.values()]
    return lambda inputs: [template.render(inputs) for template in compiled]


def warm(client: RegistryClient) -> None:
    print("### Warm get + local render, in process\n")
    print(f"Microseconds per call, median of {ROUNDS} interleaved rounds of {BATCH:,} calls.\n")
    print("| agent | plain Jinja | client get + render | ratio | of which get | of which render |")
    print("|---|---:|---:|---:|---:|---:|")
    for (usecase, name), inputs in AGENTS.items():
        agent = client.get(usecase, name)
        baseline = plain_jinja(dict(agent.partials), agent.definition["prompt_templates"])
        assert [m.content for m in agent.render(inputs).messages] == baseline(inputs), "baseline renders differently"
        rounds: dict[str, list[float]] = {"plain": [], "client": [], "get": [], "render": []}
        for _ in range(ROUNDS):
            rounds["plain"].append(per_call_us(lambda b=baseline, i=inputs: b(i)))
            rounds["client"].append(per_call_us(lambda u=usecase, n=name, i=inputs: client.get(u, n).render(i)))
            rounds["get"].append(per_call_us(lambda u=usecase, n=name: client.get(u, n)))
            rounds["render"].append(per_call_us(lambda a=agent, i=inputs: a.render(i)))
        plain, full = statistics.median(rounds["plain"]), statistics.median(rounds["client"])
        ratio = statistics.median(c / p for c, p in zip(rounds["client"], rounds["plain"], strict=True))
        print(
            f"| {usecase}/{name} | {plain:.1f} | {full:.1f} | {ratio:.2f}x "
            f"| {statistics.median(rounds['get']):.2f} | {statistics.median(rounds['render']):.1f} |"
        )


def cold(base: str) -> None:
    print("\n### Cold fetch from a server on loopback\n")
    print("Milliseconds; 50 new clients each, median and p90.\n")
    print("| | median | p90 |")
    print("|---|---:|---:|")
    url = f"{base}/v1/agents/explain_code/snippet?release=v1.2.0"
    samples: dict[str, list[float]] = {"bare": [], "client": [], "client + first render": []}
    inputs = AGENTS[("explain_code", "snippet")]
    for _ in range(50):
        with httpx.Client() as bare:  # like the client: a new connection, the client built beforehand
            started = time.perf_counter()
            bare.get(url).raise_for_status()
            samples["bare"].append((time.perf_counter() - started) * 1e3)
        with RegistryClient(base, release="v1.2.0") as client:
            started = time.perf_counter()
            agent = client.get("explain_code", "snippet")
            samples["client"].append((time.perf_counter() - started) * 1e3)
            agent.render(inputs)  # compiles the templates: the first render's extra cost
            samples["client + first render"].append((time.perf_counter() - started) * 1e3)
    for label, values in [("bare httpx GET of the same URL", samples["bare"])] + [
        (f"RegistryClient: {k}", v) for k, v in samples.items() if k != "bare"
    ]:
        ordered = sorted(values)
        print(f"| {label} | {statistics.median(ordered):.2f} | {ordered[int(len(ordered) * 0.9)]:.2f} |")


def construction() -> None:
    print("\n### Making a client\n")
    count = 200
    print(f"Microseconds per construction (and close), {ROUNDS} interleaved rounds of {count}; every round.\n")
    makers: dict[str, Callable[[], object]] = {
        "httpx.Client() (defaults)": lambda: httpx.Client(),
        "httpx.Client(verify=False)": lambda: httpx.Client(verify=False),
        "RegistryClient, http://": lambda: RegistryClient("http://registry:8080", release="^1.2"),
        "RegistryClient, https://": lambda: RegistryClient("https://registry.example", release="^1.2"),
    }
    rounds: dict[str, list[float]] = {label: [] for label in makers}
    for make in makers.values():
        make().close()  # type: ignore[attr-defined]  # imports done, shared context built
    for _ in range(ROUNDS):
        for label, make in makers.items():
            started = time.perf_counter()
            for _ in range(count):
                make().close()  # type: ignore[attr-defined]
            rounds[label].append((time.perf_counter() - started) / count * 1e6)
    print("| | " + " | ".join(f"round {i + 1}" for i in range(ROUNDS)) + " | median |")
    print("|---|" + "---:|" * (ROUNDS + 1))
    for label, values in rounds.items():
        cells = " | ".join(f"{value:.0f}" for value in values)
        print(f"| {label} | {cells} | {statistics.median(values):.0f} |")
    program = (
        "import time\n"
        "from registry.client import RegistryClient\n"
        "started = time.perf_counter()\n"
        "RegistryClient({url!r}).close()\n"
        "print((time.perf_counter() - started) * 1e3)\n"
    )
    print("\nThe first client of a fresh process (after importing registry.client), milliseconds, 5 processes:\n")
    print("| | each process |")
    print("|---|---|")
    for url in ("http://registry:8080", "https://registry.example"):
        firsts = [
            float(
                subprocess.run(
                    [sys.executable, "-c", program.format(url=url)],
                    capture_output=True,
                    text=True,
                    check=True,
                    cwd=ROOT,
                ).stdout
            )
            for _ in range(5)
        ]
        print(f"| RegistryClient, {url.split(':')[0]}:// | " + ", ".join(f"{value:.1f}" for value in firsts) + " |")


def main() -> None:
    print(
        f"Machine: {platform.processor() or platform.machine()}, {platform.platform()}; "
        f"Python {platform.python_version()}, Jinja {jinja2.__version__}, httpx {httpx.__version__}\n"
    )
    with tempfile.TemporaryDirectory() as scratch:
        repo = small_library(Path(scratch) / "library")
        with RegistryProcess("--repo", str(repo)) as server:
            with RegistryClient(server.base, release="v1.2.0") as client:
                warm(client)
            cold(server.base)
    construction()


if __name__ == "__main__":
    main()
