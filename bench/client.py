"""Client benchmark: what a gateway pays per prompt, against plain Jinja.

Run by hand, from the repository root, with the dev environment:

    .venv/bin/python bench/client.py

(1) Warm path, in process: ``client.get(usecase, name)`` answered from the
    client's cache plus ``agent.render(inputs)``, against the baseline of a
    plain *sandboxed* Jinja render of the same templates (an
    ``ImmutableSandboxedEnvironment`` with ``StrictUndefined``, partials from
    a ``DictLoader``, templates compiled once); plain unsandboxed Jinja is
    shown too. Target (issue 22): at most 1.2x the sandboxed render. Agents:
    two of the bundled library, and ``bench/agents/tools_prompt.yml``, a
    1.3 KB system template with a loop over eight tools (``trim`` and
    ``tojson`` filters, ``loop.index``), the shape of the side-by-side run
    that measured 2.2x.
(1b) Where the time goes, for the tools template: the same render with each
    guarantee added in turn (output and loop guards, filter guards, the
    inputs' budget and schema, the inputs' JSON parity and the cache lookup).
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
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import jinja2
from jinja2 import pass_context
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.make_library import AGENTS_ROOT, _git, small_library  # noqa: E402
from registry.client import RegistryClient  # noqa: E402
from registry.rendering import CompiledTemplate, RenderLimits, TemplateEnvironment, render_messages  # noqa: E402
from registry.rendering.jinja_internals import filter_passes  # noqa: E402
from tests.support.servers import RegistryProcess  # noqa: E402

AGENTS: dict[tuple[str, str], dict[str, Any]] = {
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
AGENTS[("chat", "tools_prompt")] = {
    "question": "Why did pipeline 1234 fail?",
    "user_name": "Sam",
    "context": ["The job log ends with exit code 137.", "The runner has 2 GiB of memory."],
    "tools": [
        {
            "name": f"tool_{i}",
            "description": f"  Finds thing {i} of an issue, a merge request or a pipeline, by its id.  ",
            "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
            "example": f'{{"id": {i}}}',
        }
        for i in range(8)
    ],
}
BENCH_AGENTS = Path(__file__).resolve().parent / "agents"
ROUNDS = 7
BATCH = 2000


def per_call_us(call: Callable[[], object], count: int = BATCH) -> float:
    started = time.perf_counter()
    for _ in range(count):
        call()
    return (time.perf_counter() - started) / count * 1e6


def plain_jinja(
    agent_partials: dict[str, str], templates: dict[str, str], *, sandboxed: bool
) -> Callable[[dict[str, object]], list[str]]:
    loader = jinja2.DictLoader(agent_partials)
    environment = (
        ImmutableSandboxedEnvironment(loader=loader, undefined=jinja2.StrictUndefined)
        if sandboxed
        else jinja2.Environment(loader=loader)
    )
    compiled = [environment.from_string(text) for text in templates.values()]
    return lambda inputs: [template.render(inputs) for template in compiled]


def library_with_bench_agents(repo: Path) -> Path:
    """The bundled library at v1.0.0-v1.2.0, plus this directory's agents at v1.3.0."""
    small_library(repo)
    for source in BENCH_AGENTS.glob("*.yml"):
        shutil.copy(source, repo / AGENTS_ROOT / "chat" / source.name)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "benchmark agents")
    _git(repo, "tag", "-a", "v1.3.0", "-m", "v1.3.0")
    return repo


def get_and_render(client: RegistryClient, usecase: str, name: str, inputs: dict[str, Any]) -> object:
    return client.get(usecase, name).render(inputs)


def warm(client: RegistryClient) -> None:
    print("### Warm get + local render, in process\n")
    print(
        f"Microseconds per call; {ROUNDS} interleaved rounds of {BATCH:,} calls; the ratio is to the sandboxed"
        " render, round by round.\n"
    )
    print("| agent | plain Jinja | sandboxed Jinja | client get + render | ratio, median | every round |")
    print("|---|---:|---:|---:|---:|---|")
    for (usecase, name), inputs in AGENTS.items():
        agent = client.get(usecase, name)
        templates = agent.definition["prompt_templates"]
        plain = plain_jinja(dict(agent.partials), templates, sandboxed=False)
        sandboxed = plain_jinja(dict(agent.partials), templates, sandboxed=True)
        expected = [m.content for m in agent.render(inputs).messages]
        assert expected == plain(inputs) == sandboxed(inputs), "a baseline renders differently"
        rounds: dict[str, list[float]] = {"plain": [], "sandboxed": [], "client": []}
        for _ in range(ROUNDS):
            rounds["plain"].append(per_call_us(partial(plain, inputs)))
            rounds["sandboxed"].append(per_call_us(partial(sandboxed, inputs)))
            rounds["client"].append(per_call_us(partial(get_and_render, client, usecase, name, inputs)))
        ratios = [c / b for c, b in zip(rounds["client"], rounds["sandboxed"], strict=True)]
        print(
            f"| {usecase}/{name} | {statistics.median(rounds['plain']):.1f}"
            f" | {statistics.median(rounds['sandboxed']):.1f} | {statistics.median(rounds['client']):.1f}"
            f" | {statistics.median(ratios):.2f}x | {', '.join(f'{r:.2f}' for r in ratios)} |"
        )


def _unguarded(filters: dict[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    """The registry's filters without their guards (each guard wraps Jinja's
    own filter, reachable as ``__wrapped__``), taking the context as the
    guards do."""

    def plain(guarded: Callable[..., Any]) -> Callable[..., Any]:
        original: Callable[..., Any] | None = getattr(guarded, "__wrapped__", None)
        if original is None:
            return guarded
        passes = filter_passes(original)
        if passes == "context":
            return original
        if passes == "eval_context":
            return pass_context(lambda c, *a, **k: original(c.eval_ctx, *a, **k))
        if passes == "environment":
            return pass_context(lambda c, *a, **k: original(c.environment, *a, **k))
        return pass_context(lambda c, *a, **k: original(*a, **k))

    return {name: plain(f) for name, f in filters.items()}


def guarantees(client: RegistryClient) -> None:
    usecase, name = "chat", "tools_prompt"
    inputs = AGENTS[(usecase, name)]
    agent = client.get(usecase, name)
    compiled = agent.compiled
    templates = agent.definition["prompt_templates"]
    sandboxed = plain_jinja(dict(agent.partials), templates, sandboxed=True)
    without_filter_guards = TemplateEnvironment(agent.partials.get)
    without_filter_guards.filters = _unguarded(without_filter_guards.filters)
    output_guarded = [
        (role, CompiledTemplate(without_filter_guards, text, name=role)) for role, text in templates.items()
    ]
    limits = RenderLimits()
    steps: dict[str, Callable[[], object]] = {
        "plain sandboxed Jinja (the baseline)": lambda: sandboxed(inputs),
        "+ output and loop guards (counted output, iterations, clock)": lambda: render_messages(
            output_guarded, inputs, limits=limits
        ),
        "+ filter guards (sizes estimated before, checked after)": lambda: render_messages(
            compiled.templates, inputs, limits=limits
        ),
        "+ the inputs' budget and `inputs` schema (the server's render)": lambda: compiled.render(
            inputs, limits=limits
        ),
        "+ the inputs' JSON parity, the cache lookup (client get + render)": lambda: client.get(usecase, name).render(
            inputs
        ),
    }
    for step in steps.values():
        assert [m.content for m in client.get(usecase, name).render(inputs).messages] == [
            m if isinstance(m, str) else m.content for m in _messages(step())
        ], "a step renders differently"
    rounds: dict[str, list[float]] = {label: [] for label in steps}
    for _ in range(ROUNDS):
        for label, step in steps.items():
            rounds[label].append(per_call_us(step))
    print(f"\n### Where a render of {usecase}/{name} spends its time\n")
    print("Microseconds per render, each guarantee added to the line above; every round.\n")
    print("| | median | vs baseline | added | every round |")
    print("|---|---:|---:|---:|---|")
    baseline = rounds[next(iter(steps))]
    previous = baseline
    for label, values in rounds.items():
        ratio = statistics.median(v / b for v, b in zip(values, baseline, strict=True))
        added = statistics.median(v - p for v, p in zip(values, previous, strict=True))
        cells = ", ".join(f"{v:.1f}" for v in values)
        print(f"| {label} | {statistics.median(values):.1f} | {ratio:.2f}x | {added:+.1f} | {cells} |")
        previous = values


def _messages(result: object) -> list[Any]:
    if isinstance(result, list):
        return result
    if isinstance(result, tuple):
        return list(result)
    return list(result.messages)  # type: ignore[attr-defined]


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
        repo = library_with_bench_agents(Path(scratch) / "library")
        with RegistryProcess("--repo", str(repo)) as server:
            with RegistryClient(server.base, release="v1.3.0") as client:
                warm(client)
                guarantees(client)
            cold(server.base)
    construction()


if __name__ == "__main__":
    main()
