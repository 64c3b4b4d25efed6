"""The systemd notify socket: a path socket, and no socket at all."""

from __future__ import annotations

import os
import socket
import tempfile
import time

from pumpd.daemon.notify import Notifier


class Listener:
    """A datagram socket in systemd's place: each message is a list of ``KEY=VALUE`` lines."""

    def __init__(self, address: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + address[1:] if address.startswith("@") else address)
        self.received: list[list[str]] = []

    def next_with(self, key: str, timeout: float) -> list[str]:
        """Read messages until one has a line ``key`` (or ``key=...``); return that one."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {key} within {timeout}s; received {self.received}")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            lines = data.decode().split("\n")
            self.received.append(lines)
            if any(line == key or line.startswith(f"{key}=") for line in lines):
                return lines


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

