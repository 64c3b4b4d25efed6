"""Why a connection's reading is paused: a set of reasons (write pressure, a full buffer, the
session's hold), each added and dropped on its own, the transport reading while none is left."""

from __future__ import annotations

from typing import Any

__all__ = ["ReadHolds"]


class ReadHolds:
    """The reasons reading is paused for, and the transport told when the first comes or the
    last goes."""

    def __init__(self) -> None:
        self._reasons: set[str] = set()

    def __bool__(self) -> bool:
        return bool(self._reasons)

    def hold(self, transport: Any, paused: bool, reason: str) -> bool:
        """Add ``reason`` (``paused``) or drop it, and pause or resume ``transport`` (an asyncio
        transport, or None) when that changes whether any reason is left. Returns True when
        reading resumed."""
        was = bool(self._reasons)
        if paused:
            self._reasons.add(reason)
        else:
            self._reasons.discard(reason)
        now = bool(self._reasons)
        if now == was or transport is None or transport.is_closing():
            return False
        if now:
            transport.pause_reading()
            return False
        transport.resume_reading()
        return True
