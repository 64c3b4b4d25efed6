"""A pump's pause switch: whether it may forward, and the events its loops wait on.

``halt`` is set while no session may forward (the pump is stopping or paused): a running
session drains on it, and the reconnect and standby delays end on it. ``wake`` tells a paused
pump that it was resumed or stopped. Both are the pump's own; :meth:`PauseSwitch.pause` and
:meth:`PauseSwitch.resume` run on its event loop.
"""

from __future__ import annotations

import asyncio


class PauseSwitch:
    """Paused or not, and the two events of the module docstring.

    :param paused: start paused (the pump connects only once resumed)
    """

    def __init__(self, *, paused: bool = False) -> None:
        self.paused = paused
        self.halt = asyncio.Event()
        self.wake = asyncio.Event()
        self._stop: asyncio.Event | None = None  # the pump's stop, once it runs
        if paused:
            self.halt.set()

    def pause(self) -> bool:
        """Pause; False when already paused."""
        if self.paused:
            return False
        self.paused = True
        self.halt.set()
        return True

    def resume(self) -> bool:
        """Resume; False when not paused. A stopping pump stays halted."""
        if not self.paused:
            return False
        self.paused = False
        if self._stop is None or not self._stop.is_set():
            self.halt.clear()
        self.wake.set()
        return True

    def follow(self, stop: asyncio.Event) -> asyncio.Task[None]:
        """A task beside the pump's run: ``stop`` halts sessions as a pause does, and wakes a
        paused pump."""
        self._stop = stop

        async def follow() -> None:
            await stop.wait()
            self.halt.set()
            self.wake.set()

        return asyncio.create_task(follow())

    async def wait_resumed(self, stop: asyncio.Event) -> None:
        """Return once resumed, or stopped."""
        while self.paused and not stop.is_set():
            self.wake.clear()
            await self.wake.wait()
