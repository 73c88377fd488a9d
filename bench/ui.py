"""UI benchmark: what a page of the web UI costs to make, warm, on the
bundled library, against the JSON API answer the page is made from.

Run by hand, from the repository root, with the dev environment:

    .venv/bin/python bench/ui.py

Each page is requested in process (Flask's test client, no socket), warm
(every page once first), ROUNDS rounds of BATCH requests, interleaved with
the baseline: the API request that reads the same data (GET /v1/releases
for the releases page, GET /v1/agents for the agents page, GET
/v1/agents/<usecase>/<name> for an agent page, GET /v1/diff for the diff).
Target: each page well under 100 ms; every round is reported.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from registry.serving.app import create_app  # noqa: E402
from registry.settings import Settings  # noqa: E402
from registry.store.example import build_example_repository  # noqa: E402

ROUNDS = 5
BATCH = 20
LEAF = "agents/explain_code/snippet?release=v1.1.0"
COMPOSITE = "agents/support/routed_answer?release=v1.1.0"
PAGES = [
    ("releases", "/ui/", "/v1/releases"),
    ("agents of v1.1.0", "/ui/agents?release=v1.1.0", "/v1/agents?release=v1.1.0"),
    ("agent (leaf, playground)", f"/ui/{LEAF}", f"/v1/{LEAF}"),
    ("agent (composite, graph)", f"/ui/{COMPOSITE}", f"/v1/{COMPOSITE}"),
    ("diff v1.0.0 → v1.1.0", "/ui/diff?from=v1.0.0&to=v1.1.0", "/v1/diff?from=v1.0.0&to=v1.1.0"),
]


def timed(client: object, url: str) -> float:
    started = time.perf_counter()
    for _ in range(BATCH):
        response = client.get(url)  # type: ignore[attr-defined]
        assert response.status_code == 200, (url, response.status_code)
    return (time.perf_counter() - started) / BATCH


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        app = create_app(Settings(repo=str(build_example_repository(Path(directory) / "repo"))))
        client = app.test_client()
        for _, page, api in PAGES:
            client.get(page)
            client.get(api)
        print("| page | rounds (ms per page) | median | API answer, median | ratio |")
        print("|---|---|---|---|---|")
        for label, page, api in PAGES:
            pages, answers = [], []
            for _ in range(ROUNDS):
                answers.append(timed(client, api))
                pages.append(timed(client, page))
            rounds = ", ".join(f"{p * 1000:.1f}" for p in pages)
            page_ms, api_ms = statistics.median(pages) * 1000, statistics.median(answers) * 1000
            print(f"| {label} | {rounds} | {page_ms:.1f} ms | {api_ms:.2f} ms | {page_ms / api_ms:.1f}x |")
        app.extensions["prompt_registry.service"].close()


if __name__ == "__main__":
    main()
