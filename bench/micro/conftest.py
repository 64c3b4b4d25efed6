"""Micro-benchmarks of the data plane: a per-message table after pytest-benchmark's own.

Each benchmark records how many messages one timed call handles (``extra_info["messages"]``);
the summary divides min / median / mean by it. Not part of the test suite (``testpaths`` is
``tests``): run ``python -m pytest bench/micro -q --benchmark-only``.
"""

from __future__ import annotations

from typing import Any

import pytest


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: Any) -> None:
    session = getattr(terminalreporter.config, "_benchmarksession", None)
    rows = [b for b in getattr(session, "benchmarks", []) if b.extra_info.get("messages")]
    if not rows:
        return
    tr = terminalreporter
    tr.write_sep("-", "per message (ns): timed call / messages in it")
    tr.write_line(f"{'benchmark':<62} {'min':>9} {'median':>9} {'mean':>9}")
    for b in sorted(rows, key=lambda b: (b.group or "", b.name)):
        n = b.extra_info["messages"]
        s = b.stats
        tr.write_line(
            f"{b.name:<62} {s.min / n * 1e9:>9.1f} {s.median / n * 1e9:>9.1f} "
            f"{s.mean / n * 1e9:>9.1f}"
        )
