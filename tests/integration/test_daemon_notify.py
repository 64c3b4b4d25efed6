"""The service manager's notifications (systemd ``Type=notify``): a real daemon sends its
datagrams to a unix socket the test binds, as systemd would."""

from __future__ import annotations

import os
import secrets
import signal
import time
from collections.abc import Iterator

import pytest
from pumpd.testing.localnode import LocalNode, find_free_port

from tests.support.daemon_helpers import running_state, shovel_def
from tests.support.notify_listener import Listener


@pytest.fixture
def listener(monkeypatch: pytest.MonkeyPatch) -> Iterator[Listener]:
    """An abstract-namespace socket (``@name``, as systemd names its own), in NOTIFY_SOCKET for
    the daemons the test starts."""
    address = f"@pumpd-test-notify-{os.getpid()}-{secrets.token_hex(4)}"
    lst = Listener(address)
    monkeypatch.setenv("NOTIFY_SOCKET", address)
    yield lst
    lst.sock.close()


def test_ready_after_every_first_attempt_reload_and_stop(
    pumpd_daemon, listener: Listener, node_a: LocalNode, vhost_a: str
) -> None:
    uri = node_a.uri(vhost_a)
    # nothing listens there: that shovel's first attempt fails, and must not hold readiness back
    down = f"amqp://guest:guest@127.0.0.1:{find_free_port()}/%2F"
    d = pumpd_daemon({"up": shovel_def(uri, "up-in", uri, "up-out"),
                      "down": shovel_def(down, "down-in", uri, "down-out")})

    ready = listener.next_with("READY", 60)
    assert "READY=1" in ready
    assert running_state(d, "up")  # the first attempt succeeded...
    down_doc = d.shovel("down")
    assert down_doc is not None and down_doc["state"] == "starting"
    assert "reconnecting" in down_doc["workers"][0]["reason"]  # ...and this one failed
    status = [line for msg in listener.received for line in msg if line.startswith("STATUS=")]
    assert "STATUS=2 shovels: 1 running, 1 starting" in status, status

    d.signal(signal.SIGHUP)
    reloading = listener.next_with("RELOADING", 30)
    assert "RELOADING=1" in reloading
    (usec,) = [line for line in reloading if line.startswith("MONOTONIC_USEC=")]
    # CLOCK_MONOTONIC is shared by the processes of one machine: the daemon's stamp is recent
    now = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert 0 <= now - int(usec.split("=", 1)[1]) < 30_000_000
    assert "READY=1" in listener.next_with("READY", 30)

    d.signal(signal.SIGTERM)
    assert "STOPPING=1" in listener.next_with("STOPPING", 30)
    assert d.wait_exit(60) == 0
    assert not any("READY=1" in msg for msg in listener.received[
        next(i for i, m in enumerate(listener.received) if "STOPPING=1" in m):])

