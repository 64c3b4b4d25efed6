"""The unit lane's rule, enforced: a test here runs in this process only. Starting a process (a
broker, a daemon, a JVM, a ``pumpd`` command, openssl) fails the test: it belongs in
``tests/integration``. The broker, proxy and daemon fixtures are not defined for this lane.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PROCESS_EVENTS = frozenset({"subprocess.Popen", "os.posix_spawn", "os.exec", "os.fork",
                            "os.spawn", "os.system"})
LANE = Path(__file__).parent
_running: list[str] = []


def _refuse_processes(event: str, args: tuple[object, ...]) -> None:
    if _running and event in PROCESS_EVENTS:
        raise RuntimeError(f"{_running[-1]} starts a process ({event}): it belongs in "
                           "tests/integration")


# An audit hook cannot be removed: it acts only while a test of this lane runs.
sys.addaudithook(_refuse_processes)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    # A hook of a conftest sees every item of the session: only this lane's are watched.
    if not item.path.is_relative_to(LANE):
        yield
        return
    _running.append(item.nodeid)
    try:
        yield
    finally:
        _running.pop()
