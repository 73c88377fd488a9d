"""Two processes filling one reply cache directory at once (two evals run
with the same ``--cache``): each writes the same entries the other reads
and writes, and neither ever reads half an entry, nor leaves one (written
in place, with no rename, entries are read half written here in most runs)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from registry.providers.chat import ChatReply
from tests.support.cache_writer import is_whole
from tests.support.openai_server import REPOSITORY

SIZE = 1_000_000
ROUNDS = 4
ASKS = 50


def test_two_processes_filling_one_cache_directory_never_read_or_leave_half_an_entry(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    writers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.support.cache_writer", "--directory", str(directory), "--name", name]
            + ["--processes", "2", "--rounds", str(ROUNDS), "--asks", str(ASKS), "--size", str(SIZE)],
            cwd=REPOSITORY,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    summaries = []
    for writer in writers:
        out, _ = writer.communicate(timeout=300)
        assert writer.returncode == 0
        summaries.append(json.loads(out))
    for summary in summaries:
        assert summary["warnings"] == []
        assert summary["not_whole"] == 0
        # A round per request, then the first request again, read back whole from the cache.
        assert summary["cache"] + summary["model"] == (ROUNDS + 1) * ASKS
        assert summary["model"] <= ROUNDS * ASKS and summary["cache"] >= ASKS
    entries = sorted(directory.glob("*/*"))
    assert [entry.name for entry in entries if entry.name.startswith(".")] == []  # no temporary file left
    assert len(entries) == ROUNDS * ASKS
    for entry in entries:
        stored = json.loads(entry.read_text())
        assert is_whole(ChatReply.from_dict(stored["reply"]), SIZE)
