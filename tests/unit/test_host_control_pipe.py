"""A host that reads no control message is killed after the send's timeout, not waited for."""

from __future__ import annotations

import os
import signal
import time

import pytest


def test_a_host_that_reads_no_control_message_is_killed_not_waited_for(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stopped host's pipe fills up: the coordinator's send gives up after the timeout and
    kills the host instead of blocking its own loop (supervision, HTTP) with it."""
    import asyncio
    import multiprocessing
    from typing import NoReturn

    from pumpd.supervisor import hosting
    from pumpd.supervisor.slots import SlotPool

    monkeypatch.setattr(hosting, "SEND_TIMEOUT", 0.5)

    def no_position(*_: object) -> NoReturn:
        raise AssertionError("the host is started with no position")

    async def scenario() -> tuple[float, str | None, int | None, int]:
        pool = SlotPool()
        workers = hosting.WorkerProcesses(multiprocessing.get_context("spawn"), pool, 10, "text",
                                          "warning", lambda: None)
        try:
            host = workers._spawn(10, [], no_position, time.monotonic())
            assert isinstance(host, hosting.WorkerProcess), host
            assert workers.processes == [host]
            os.kill(host.pid, signal.SIGSTOP)
            began, sent = time.monotonic(), 0
            while workers.send(host, ("padding", b"x" * 65536)):
                sent += 1
                assert sent < 10_000, "the pipe never filled"
            waited = time.monotonic() - began
            host.process.join(10)
            return waited, host.kill_reason, host.process.exitcode, sent
        finally:
            workers.kill_all()
            pool.close()

    waited, reason, exitcode, sent = asyncio.run(scenario())
    assert sent >= 1  # the pipe took messages until it was full
    assert reason == "its control pipe took no message for 0.5s", reason
    assert exitcode == -signal.SIGKILL
    assert waited < 3, waited  # the full pipe cost one send the timeout (twice at most)

