"""The systemd notify socket: a path socket, and no socket at all."""

from __future__ import annotations

import os
import tempfile

from pumpd.supervisor.sd_notify import Notifier

from tests.support.notify_listener import Listener


def test_a_path_socket_and_no_socket() -> None:
    with tempfile.TemporaryDirectory(prefix="pumpd-notify-") as tmp:
        path = os.path.join(tmp, "notify")
        lst = Listener(path)
        try:
            n = Notifier(path)
            n.send("READY=1", "STATUS=ok")
            assert lst.next_with("READY", 5) == ["READY=1", "STATUS=ok"]
            n.close()
        finally:
            lst.sock.close()
    quiet = Notifier("")  # NOTIFY_SOCKET unset or empty: nothing is sent, nothing fails
    assert not quiet.enabled
    quiet.send("READY=1")

