"""The fault run's check of what a destination holds (``bench/stream_faults.py``): duplicates,
missing, unexpected and reordered messages are each counted, and only the exact sequence passes
for a stream source."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def stream_faults(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(BENCH)  # as ``python bench/stream_faults.py`` has it
    return importlib.import_module("stream_faults")


def test_the_exact_sequence_passes(stream_faults: ModuleType) -> None:
    got = stream_faults.check(list(range(5)), 5)
    assert got == {"stored": 5, "duplicates": 0, "missing": 0, "unexpected": 0,
                   "out_of_order": 0, "exact": True}


@pytest.mark.parametrize(("stored", "counts"), [
    ([0, 1, 1, 2, 3, 4], {"duplicates": 1}),
    ([0, 1, 3, 4], {"missing": 1}),
    ([0, 2, 1, 3, 4], {"out_of_order": 1}),
    ([0, 1, 2, 3, 4, -1, 7], {"unexpected": 2}),
    ([0, 1, 2, 0, 1, 2, 3, 4], {"duplicates": 3}),
])
def test_each_fault_is_counted(stream_faults: ModuleType, stored: list[int],
                               counts: dict[str, int]) -> None:
    got = stream_faults.check(stored, 5)
    assert not got["exact"]
    for key in ("duplicates", "missing", "unexpected", "out_of_order"):
        assert got[key] == counts.get(key, 0), key


def test_a_body_names_its_sequence_number(stream_faults: ModuleType) -> None:
    body = stream_faults.body_of(64)(123)
    assert len(body) == 64 and stream_faults.sequence_of(body) == 123
    assert stream_faults.sequence_of(b"not one of ours") == -1
