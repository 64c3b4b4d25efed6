"""Paused shovels: ``pumpd pause NAME`` / ``POST /api/shovels/NAME/pause``.

Pausing is per shovel, every position of it: the coordinator tells each running position's
worker process (``("pause", slot)`` on its control pipe, :mod:`pumpd.supervisor.worker`), whose pump
cancels its consumer, publishes and confirms what it holds, acks it, and then waits in state
``paused`` holding no connection; a position started while its shovel is paused (a new worker
process, a restart, a reload) starts paused (``PositionSpec.paused``) and never connects.
Everything else stays in the source. Resuming sends ``("resume", slot)``: the pump consumes again.

Which shovels are paused is kept in the state file (:func:`pumpd.supervisor.statefile.save`),
written from this memory before the answer, so a restarted daemon starts them paused. A change
asked here that cannot be written (the file unreadable, or not valid JSON) is refused and changes
nothing; one that a group's markers keep applies all the same (below).
A reload keeps pauses (they are by name); a shovel removed (DELETE, or gone from the file at a
reload) is no longer paused.

In a group (``--cluster``), a pause is group-wide through markers on the coordination broker
(:class:`PauseMarkers`, which :class:`pumpd.group.members.Group` is): a pause or resume asked of
one member sets or clears the marker, and every member polls the markers every
:data:`MARKER_POLL` seconds and pauses or resumes its own positions to match. The markers are
the group's word: a member that starts with a pause in its state file that the group has since
resumed resumes it at its first poll. A change asked here that could not be written to the
markers yet (the coordination broker unreachable) is tried again at every poll, and until then
this member keeps it whatever the markers say. Removing a shovel leaves its marker (the others
may still run it until their own reload): ``pumpd resume`` clears it.

Wiring (the coordinator, once it has joined its group): ``pauses.attach(MarkersOnLoop(group,
group_loop), lambda: coordinator.shovels)``, and ``await pauses.close()`` before leaving it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any, Protocol, TypeVar

from . import statefile
from .definitions import ShovelDefinition
from .positions import Shovel, WorkerProcess

log = logging.getLogger("pumpd.coordinator")

MARKER_POLL = 3.0  # seconds between two reads of the group's markers

T = TypeVar("T")


class PauseMarkers(Protocol):
    """The group's paused markers (:class:`pumpd.group.members.Group` has these methods)."""

    async def pause(self, shovel: str) -> None: ...

    async def resume(self, shovel: str) -> None: ...

    async def paused(self, shovels: Iterable[str]) -> frozenset[str]: ...


class MarkersOnLoop:
    """:class:`PauseMarkers` whose requests run on another thread's event loop: the group's
    (``supervisor/membership.py`` runs the group on a uvloop thread of its own, the engine's links
    need it), awaited from the coordinator's loop."""

    def __init__(self, markers: PauseMarkers, loop: asyncio.AbstractEventLoop) -> None:
        self.markers = markers
        self.loop = loop

    async def _on_loop(self, request: Coroutine[Any, Any, T]) -> T:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(request, self.loop))

    async def pause(self, shovel: str) -> None:
        await self._on_loop(self.markers.pause(shovel))

    async def resume(self, shovel: str) -> None:
        await self._on_loop(self.markers.resume(shovel))

    async def paused(self, shovels: Iterable[str]) -> frozenset[str]:
        return await self._on_loop(self.markers.paused(list(shovels)))


class Control(Protocol):
    """How a control message reaches a worker process (:class:`pumpd.supervisor.hosting.WorkerProcesses`)."""

    def send(self, proc: WorkerProcess, msg: tuple[object, ...]) -> bool: ...


class Pauses:
    """The paused shovels' names, kept in the state file, and the verbs that apply them.

    ``runtime`` gives the shovels added at run time, as the daemon runs them: the state file is
    written whole, from memory, at every change.
    """

    def __init__(self, state_path: str, control: Control,
                 runtime: Callable[[], Mapping[str, ShovelDefinition]]) -> None:
        self.state_path = state_path
        self.control = control
        self.runtime = runtime
        try:
            self.names: set[str] = set(statefile.load_paused(state_path))
        except statefile.StateFileError as exc:
            log.error("%s: no shovel starts paused", exc)
            self.names = set()
        self._markers: PauseMarkers | None = None
        self._unmarked: dict[str, bool] = {}  # a change asked here, not on the markers yet
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()  # a change asked here: write it to the markers now
        self._poll_error = ""

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def request(self, s: Shovel, paused: bool) -> bool:
        """``POST .../pause`` or ``.../resume``: pause or resume ``s`` as :meth:`set` does, and
        tell a group's markers; False when it already was so.

        :raises statefile.StateFileError: when the state file cannot be read or written (then
            nothing has changed; logged here)
        """
        try:
            changed = self.set(s, paused, "requested")
        except statefile.StateFileError as exc:
            log.error("shovel %s: not %s: %s", s.name, "paused" if paused else "resumed", exc)
            raise
        self._unmarked[s.name] = paused  # for a group's markers (nothing reads it without one)
        self.wake_poll()
        return changed

    def set(self, s: Shovel, paused: bool, why: str, *, kept_elsewhere: bool = False) -> bool:
        """Pause or resume every position of ``s``; False when it already was so.

        :param kept_elsewhere: the change is kept by someone else too (a group's markers): when
            the state file cannot be written it still applies, and the file catches up at the
            next change that can be written.
        :raises statefile.StateFileError: when the state file cannot be read or written and the
            change is kept nowhere else (then nothing has changed)
        """
        if (s.name in self.names) == paused:
            return False
        after = self.names | {s.name} if paused else self.names - {s.name}
        try:
            self._save(after)
        except statefile.StateFileError as exc:
            if not kept_elsewhere:
                raise
            log.error("shovel %s: %s group-wide; the group's markers keep it, the state file "
                      "does not yet: %s", s.name, "paused" if paused else "resumed", exc,
                      extra={"event": "state_file_failed", "shovel": s.name})
        self.names = after
        verb = "pause" if paused else "resume"
        for w in s.positions:
            if w.runner is not None and w.stop_sent_at is None:
                self.control.send(w.runner, (verb, w.slot))  # else it starts as it should
        log.info("shovel %s: %s (%s)", s.name, "pausing" if paused else "resuming", why,
                 extra={"event": verb, "shovel": s.name, "why": why})
        return True

    def _save(self, paused: Iterable[str]) -> None:
        statefile.save(self.state_path,
                       {n: d.definition for n, d in self.runtime().items()}, paused)

    def forget(self, name: str) -> None:
        """A shovel removed is no longer paused (in this member's state file, when it can be
        written; else at the next change that is)."""
        self._unmarked.pop(name, None)
        if name in self.names:
            self.names.discard(name)
            try:
                self._save(self.names)
            except statefile.StateFileError as exc:
                log.error("shovel %s: removed, but its pause stays in the state file: %s",
                          name, exc)

    # -- a group's markers ------------------------------------------------------------------

    def attach(self, markers: PauseMarkers, shovels: Callable[[], Mapping[str, Shovel]],
               interval: float = MARKER_POLL) -> None:
        """In a group: follow ``markers`` (polled every ``interval`` seconds, on the running
        event loop) for every shovel ``shovels()`` names, and write this member's changes there."""
        self._markers = markers
        self._task = asyncio.create_task(self._follow(markers, shovels, interval),
                                         name="pumpd pause markers")

    def wake_poll(self) -> None:
        if self._task is not None:
            self._wake.set()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def _follow(self, markers: PauseMarkers,
                      shovels: Callable[[], Mapping[str, Shovel]], interval: float) -> None:
        while True:
            try:
                await self.sync(markers, shovels())
                self._poll_error = ""
            except Exception as exc:  # LinkError, the broker's refusal: say it once, go on
                text = f"{type(exc).__name__}: {exc}"
                if text != self._poll_error:
                    log.warning("the group's pause markers cannot be read or written: %s "
                                "(pauses asked here are kept; retrying)", text,
                                extra={"event": "pause_markers_failed"})
                self._poll_error = text
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), interval)
            except asyncio.TimeoutError:
                pass

    async def sync(self, markers: PauseMarkers, shovels: Mapping[str, Shovel]) -> None:
        """Write the changes asked here to the markers, then follow the markers."""
        for name, paused in list(self._unmarked.items()):
            await (markers.pause(name) if paused else markers.resume(name))
            if self._unmarked.get(name) == paused:  # not asked otherwise meanwhile
                del self._unmarked[name]
        marked = await markers.paused(list(shovels))
        for name, s in list(shovels.items()):
            if name in self._unmarked or s.removing:
                continue  # asked here since the read: this member's word stands
            self.set(s, name in marked, "group-wide", kept_elsewhere=True)
