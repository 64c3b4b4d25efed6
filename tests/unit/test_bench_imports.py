"""Every benchmark script imports: a name moved or renamed in ``src/`` (or in a sibling script)
must not leave ``make bench`` broken. A script needing an extra this environment lacks (the
``bench`` extra: aio-pika, matplotlib) is skipped for that reason alone."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = sorted(p.stem for p in BENCH.glob("*.py"))


@pytest.fixture
def bench_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # A script run as ``python bench/x.py`` has bench/ first on its path and imports its
    # siblings as top-level modules; the test gives it the same path, for this test only.
    monkeypatch.syspath_prepend(BENCH)


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_benchmark_script_imports(script: str, bench_on_path: None) -> None:
    try:
        importlib.import_module(script)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] in {"pumpd", *SCRIPTS}:
            raise
        pytest.skip(f"needs {exc.name} (the bench extra)")


def test_there_are_scripts_to_import() -> None:
    assert len(SCRIPTS) > 10
