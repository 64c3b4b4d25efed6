"""The service manager's notification protocol (``sd_notify``), spoken directly: one datagram of
``KEY=VALUE`` lines to the unix socket named by ``NOTIFY_SOCKET`` (``@`` starts an abstract
name). Without ``NOTIFY_SOCKET`` (not under systemd's ``Type=notify``) every call does nothing.
"""

from __future__ import annotations

import logging
import os
import socket
import time

log = logging.getLogger("pumpd.notify")

SEND_TIMEOUT = 1.0  # a service manager reads at once; never stall the supervision loop longer


class Notifier:
    """Sends to the socket named at construction; ``NOTIFY_SOCKET`` is then removed from the
    environment, so that worker processes (spawned later) never speak for the daemon."""

    def __init__(self, address: str | None = None) -> None:
        if address is None:
            address = os.environ.pop("NOTIFY_SOCKET", None)
        self.address = "\0" + address[1:] if address and address.startswith("@") else address
        self._sock: socket.socket | None = None
        self._failed = False

    @property
    def enabled(self) -> bool:
        return bool(self.address)

    def send(self, *lines: str) -> None:
        if not self.address:
            return
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                self._sock.settimeout(SEND_TIMEOUT)
            self._sock.sendto("\n".join(lines).encode(), self.address)
        except OSError as exc:
            if not self._failed:  # once: the daemon works on without its service manager
                log.warning("cannot notify the service manager at %s: %s",
                            self.address.replace("\0", "@"), exc)
            self._failed = True

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def monotonic_usec() -> str:
    """``MONOTONIC_USEC=`` for ``RELOADING=1``: CLOCK_MONOTONIC, as systemd reads it."""
    return f"MONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}"
