"""A dataset of 100,000 cases is read one case at a time: its memory is
bounded by a case, not by the file, and a ``limit`` reads only what it needs."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from registry.evals import open_eval_file
from registry.evals.reading import EvalFile

CASES = 100_000
HELD = 2_000


def _write_dataset(path: Path, cases: int) -> Path:
    with path.open("w", encoding="utf-8") as out:
        out.write("agent: support/triage\ndefaults:\n  expect: [{contains: refund}, {outcome: completed}]\ncases:\n")
        for index in range(cases):
            out.write(f"  - {{id: case-{index}}}\n")
    return path


def _peak(read: Callable[[], object]) -> int:
    """The most memory allocated at once while ``read`` runs, in bytes."""
    tracemalloc.start()
    try:
        read()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow  # reads 100,000 cases under tracemalloc: seconds, tens of them on a busy machine
def test_a_dataset_of_100000_cases_is_read_in_memory_bounded_by_a_case(tmp_path: Path) -> None:
    dataset = _write_dataset(tmp_path / "triage.yml", CASES)
    sample = _write_dataset(tmp_path / "sample.yml", HELD)
    counted: list[int] = []
    held: list[object] = []

    def stream() -> None:
        with open_eval_file(dataset) as eval_file:
            counted.append(sum(1 for _ in eval_file.cases()))

    def hold() -> None:
        with open_eval_file(sample) as eval_file:
            held.extend(eval_file.cases())

    holding = _peak(hold)
    streaming = _peak(stream)
    assert counted == [CASES] and len(held) == HELD
    # Holding every case would take about CASES / HELD times what holding the
    # sample took. Streaming them takes a small part of that: what grows with
    # the file is only the ids seen so far, kept to find duplicates.
    holding_all = holding * CASES // HELD
    assert streaming < holding_all / 10, (streaming, holding_all)


def test_a_limit_reads_only_the_start_of_the_file(tmp_path: Path) -> None:
    dataset = _write_dataset(tmp_path / "triage.yml", 20_000)
    with dataset.open("rb") as stream:
        cases = list(EvalFile(stream, source=str(dataset)).cases(limit=10))
        read = stream.tell()
    assert [case.id for case in cases] == [f"case-{index}" for index in range(10)]
    assert read < dataset.stat().st_size / 20
