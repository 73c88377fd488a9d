"""Worker processes (real ones, spawned) sharing one
data directory agree on the commit each tag was first seen at."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

from registry.store.tagmemory import FileTagMemory


def _remember_in_process(directory: str, tag: str, commit: str) -> str:
    return FileTagMemory(directory).remember({tag: commit, "shared": commit})["shared"]


def test_worker_processes_sharing_a_data_dir_agree_on_first_seen_commits(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    arguments = [(str(tmp_path), f"v{i}.0.0", f"{i:040x}") for i in range(6)]
    with context.Pool(3) as pool:
        shared = pool.starmap(_remember_in_process, arguments)
    assert len(set(shared)) == 1
    stored = json.loads((tmp_path / "tags.json").read_text())["tags"]
    assert set(stored) == {"shared", *(f"v{i}.0.0" for i in range(6))}
