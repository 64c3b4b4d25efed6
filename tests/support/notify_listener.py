"""A datagram socket in systemd's place, for the tests of the daemon's notify messages."""

from __future__ import annotations

import socket
import time


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
