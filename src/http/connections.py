"""The HTTP endpoint's connection table: at most ``capacity`` connections open at once, counted
from the moment each is accepted (before its TLS handshake), and room made for a newcomer by
closing the connection least worth keeping.

What a connection is worth is its :class:`Stage`:

- ``WAITING``: in its TLS handshake, still sending its request, or lingering after a refusal. It
  holds a slot and has given the server nothing to answer: the first to go, oldest first, except
  one with a request on its way in (its whole head has arrived and is not read yet, or its
  first bytes wait in its socket), which is never closed to make room. Without that, a burst of
  new connections accepted before any was read would make room of each other, the client with
  the token among them; with it, each connection admitted is read once at least. Bytes that
  follow others (a slow client's next header byte) do not count: a trickle would keep its
  sender.
- ``SERVING``: taking the answer to a whole request that needed no token (the status page, or
  what ``--http-open-reads`` / ``--metrics-open`` open): goes only when none is waiting, oldest
  first.
- ``TRUSTED``: its request presented the token and was admitted: never closed to make room.

A newcomer that finds no connection to close is answered 503 and closed: when every slot holds a
trusted request or a request on its way in.

So clients without the token, however many idle or slow connections they hold (slowloris: one
header byte every few seconds), cannot keep a client with the token, nor one reading what the
configuration opens, from its answer: each newcomer takes the slot of the oldest connection that
has not sent a whole request. Every connection closed to make room is counted (``evicted``) and
said in a WARNING line, at most one per ``LOG_INTERVAL`` with the count since the last one.
"""

from __future__ import annotations

import asyncio
import enum
import fcntl
import logging
import struct
import termios
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import SupportsIndex

log = logging.getLogger("pumpd.http")

LOG_INTERVAL = 60.0  # seconds between two lines about connections closed to make room


class Stage(enum.IntEnum):
    """How much a connection is worth keeping; the lowest goes first."""

    WAITING = 0
    SERVING = 1
    TRUSTED = 2


class RequestReader(asyncio.StreamReader):
    """The stream of one connection, noting when a whole request head (its blank line) has
    arrived, before the handler has read it."""

    fed = False  # some bytes have arrived
    head_arrived = False
    _tail = b""  # the last bytes fed, for a blank line split across two chunks

    def feed_data(self, data: Iterable[SupportsIndex]) -> None:
        self.fed = True
        if not self.head_arrived:
            chunk = self._tail + bytes(data)
            self.head_arrived = b"\r\n\r\n" in chunk
            self._tail = chunk[-3:]
        super().feed_data(data)


@dataclass(eq=False)
class Connection:
    """One accepted connection: its number in the table, the task serving it, its stage."""

    ident: int
    task: asyncio.Task[None] | None = field(repr=False)
    fd: int = -1  # its socket, to see whether bytes wait to be read; -1: unknown
    reader: RequestReader | None = field(default=None, repr=False)
    stage: Stage = Stage.WAITING
    head_read: bool = False  # the handler has read its request head
    evicted: bool = False  # closed to make room: its task was cancelled for it

    def arriving(self) -> bool:
        """Whether a request is on its way in, not yet read: its whole head has been received,
        or its first bytes wait in its socket."""
        if self.head_read or self.reader is None:
            return False
        return self.reader.head_arrived or (not self.reader.fed and _bytes_waiting(self.fd))


class ConnectionTable:
    """The connections the endpoint holds, in the order they were accepted."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"a connection table needs room for one at least, got {capacity}")
        self.capacity = capacity
        self.evicted = 0  # connections closed to make room, in all
        self._open: dict[int, Connection] = {}  # insertion order: the order of acceptance
        self._next_id = 0
        self._unlogged = 0  # evictions not yet said in a log line
        self._last_log: float | None = None

    def __len__(self) -> int:
        return len(self._open)

    def admit(self, task: asyncio.Task[None] | None, fd: int = -1,
              reader: RequestReader | None = None) -> Connection | None:
        """A slot for a newly accepted connection served by ``task`` on socket ``fd``, made by
        evicting the connection least worth keeping when the table is full (see the module);
        None when none may be closed."""
        if len(self._open) >= self.capacity:
            victim = self._victim()
            if victim is None:
                return None
            self._evict(victim)
        conn = Connection(self._next_id, task, fd=fd, reader=reader)
        self._next_id += 1
        self._open[conn.ident] = conn
        return conn

    def release(self, conn: Connection) -> None:
        """``conn`` is done with its slot (answered, gone, or evicted already)."""
        self._open.pop(conn.ident, None)

    def _victim(self) -> int | None:
        serving: int | None = None
        for conn_id, conn in self._open.items():  # oldest first
            if conn.stage == Stage.WAITING and not conn.arriving():
                return conn_id
            if conn.stage == Stage.SERVING and serving is None:
                serving = conn_id
        return serving

    def _evict(self, conn_id: int) -> None:
        conn = self._open.pop(conn_id)
        conn.evicted = True
        if conn.task is not None:
            # Cancelled rather than its transport aborted: a TLS handshake under way unwinds
            # (and closes its socket) only through its task.
            conn.task.cancel()
        self.evicted += 1
        self._unlogged += 1
        now = time.monotonic()
        if self._last_log is None or now - self._last_log >= LOG_INTERVAL:
            log.warning("HTTP endpoint full (%d connections): closed %d connection(s) that had "
                        "not sent a whole request, or were answering one without the token, to "
                        "make room for new ones (%d in all); clients are holding connections "
                        "open idle or sending slowly", self.capacity, self._unlogged,
                        self.evicted)
            self._unlogged, self._last_log = 0, now


def _bytes_waiting(fd: int) -> bool:
    """Whether socket ``fd`` has received bytes not yet read (``FIONREAD``)."""
    if fd < 0:
        return False
    try:
        count: int = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
    except OSError:
        return False
    return count > 0
