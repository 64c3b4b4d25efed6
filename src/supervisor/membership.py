"""The coordinator's side of a group of daemons (docs: groups.md): its
membership on the coordination broker, the even spread of positions it steers its worker
processes by, one set of definitions, and what the status shows of the group.

- **Membership**: a :class:`~pumpd.group.members.Group` on the coordinator's event loop. Its
  record names this member (:func:`member_id`), its host, pid, HTTP endpoint, the positions it
  holds (those whose slot says running or blocked: they hold their lease) and a hash of its
  shovel definitions (:func:`definitions_hash`).
- **Spread**: every tick, :meth:`Membership.steer` computes the preferred member of every
  position (:func:`pumpd.group.spread.assign` over the view's member ids, sticky to what
  the members' records say each runs, in the order it took them) and, with the
  hysteresis of :class:`~pumpd.group.handover.Handover`, whether this member may try each
  position's lease now and whether it should hand a running one over; the answers go to the
  worker processes over their control pipes (``("gate", ...)``, only when they change), where
  each position's :class:`~pumpd.supervisor.worker.SteeredGate` gives them to its pump. A handover is
  the pump's own release: stop consuming, publish, confirm, ack, close, stand by; never a kill.
- **Free or held**: a position counts as free when no member's record lists it (this member's
  own from its slots). The leases live on each position's *source* broker, not on the
  coordination broker: probing them would need a connection to every source broker and a
  passive declare per position every few seconds, for an answer the records already give
  within a poll or two. The records can be stale by that much; ``grace`` is longer, and the
  lease fences whatever the records say (a member that tries a held lease gets 405 and stands
  by).
- **No coordination broker**: a ``cluster`` clause without ``coordination_uri`` runs on the
  leases alone (no :class:`Membership`): every member tries every position, whoever takes a
  lease first keeps it; exactly once still holds, the spread does not. The daemon does not
  guess a coordination broker (say the first shovel's source): a reload that removes that
  shovel would move the whole group's membership elsewhere; naming it is one line.
- **Its own thread**: the group's broker requests run on a thread of their own with a uvloop
  event loop (the engine's links need uvloop: their stream is attached to a libuv transport;
  the coordinator's loop is asyncio's own). The coordinator only reads the group's view (an
  immutable value, replaced whole) and replaces this member's record (one attribute
  assignment): nothing else crosses the threads.
- **Definitions**: a group takes its shovels from the configuration file only: run-time PUT
  and DELETE are refused (:func:`refusal`), the same file on every member, reloaded on each.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import orjson

from ..config.cluster import coordination_heartbeat
from ..config.model import ClusterConfig
from ..engine.lease import LeaseSpec
from ..engine.queue_names import lease_queue
from ..group.handover import Handover
from ..group.members import Group
from ..group.spread import PositionKey, assign
from ..group.view import GroupView, MemberInfo
from .pauses import MarkersOnLoop, Pauses
from .positions import Position, Shovel, WorkerProcess
from .slots import SlotRef
from .worker import PositionSpec

__all__ = ["Membership", "definitions_hash", "join", "member_id", "position_spec", "refusal"]

log = logging.getLogger("pumpd.group")

Send = Callable[[WorkerProcess, tuple[object, ...]], bool]


def member_id(state_path: str) -> str:
    """This daemon's member id: its host name and 8 hex digits of its state file's absolute
    path (stable across restarts; two daemons of one host have two state files)."""
    digest = hashlib.sha256(os.path.abspath(state_path).encode()).hexdigest()[:8]
    return f"{socket.gethostname()}-{digest}"


def definitions_hash(shovels: Iterable[Shovel]) -> str:
    """16 hex digits of SHA-256 over the configuration file's shovels as written (with their
    effective worker counts): equal on members whose files agree."""
    doc = sorted((s.name, s.definition.cfg.workers, s.definition.definition)
                 for s in shovels if s.definition.origin == "config" and not s.removing)
    return hashlib.sha256(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def refusal(cluster: str, state_path: str) -> str:
    """Why a run-time change of the shovels is refused in a group."""
    return (f"this daemon is member {member_id(state_path)!r} of group {cluster!r}: shovels "
            "come from the configuration file, the same on every member; edit it on every "
            "member and reload (SIGHUP / systemctl reload pumpd)")


class Options(Protocol):
    """What :func:`position_spec` needs of the daemon's options."""

    @property
    def cluster(self) -> ClusterConfig | None: ...

    @property
    def drain_timeout(self) -> float: ...

    @property
    def state_path(self) -> str: ...


def position_spec(opts: Options, s: Shovel, w: Position, *, steered: bool,
                  paused: bool) -> PositionSpec:
    """What a position's worker needs: whether its shovel is paused, and in a group its lease,
    whether the group steers it, and the member id in its connections' names (the brokers'
    lists say which member runs what)."""
    cluster = opts.cluster
    if cluster is None:
        return PositionSpec(shovel=s.definition.cfg, index=w.index, slot=w.slot,
                            drain_timeout=opts.drain_timeout, paused=paused)
    return PositionSpec(shovel=s.definition.cfg, index=w.index, slot=w.slot,
                        drain_timeout=opts.drain_timeout, paused=paused,
                        lease=LeaseSpec(lease_queue(cluster.name, s.name, w.index),
                                        cluster.lease_retry, cluster.name),
                        steered_grace=cluster.grace if steered else None,
                        member=member_id(opts.state_path))


def join(opts: Options, http: tuple[str, int] | None, tls: bool, pauses: Pauses,
         shovels: Callable[[], Mapping[str, Shovel]]) -> Membership | None:
    """This daemon's membership, started (its own thread); None outside a group or in a group
    without a coordination broker (the leases alone).

    :param http: the address the HTTP endpoint listens on (None: --http off)
    :param tls: whether it serves https
    :param pauses: the daemon's paused shovels: in a group they follow the group's markers
        (``supervisor/pauses.py``) for the shovels that ``shovels()`` names
    """
    cluster = opts.cluster
    if cluster is None or cluster.coordination_uri is None:
        return None
    endpoint = None if http is None else f"{'https' if tls else 'http'}://{http[0]}:{http[1]}"
    me = MemberInfo(member_id(opts.state_path), socket.gethostname(), os.getpid(), endpoint,
                    started=time.time())
    membership = Membership(cluster, me)
    membership.start()
    membership.pauses = pauses
    pauses.attach(MarkersOnLoop(membership.group, membership.loop), shovels)
    log.info("group %s: member %s, coordination broker %s", cluster.name, me.id,
             cluster.coordination_uri.redacted(), extra={"event": "group_join"})
    return membership


class Membership:
    """See the module docstring."""

    def __init__(self, cluster: ClusterConfig, me: MemberInfo) -> None:
        assert cluster.coordination_uri is not None
        self.cluster = cluster
        self.group = Group([cluster.coordination_uri], cluster.name, me,
                           poll_interval=cluster.poll_interval,
                           info_interval=cluster.poll_interval)
        self.handover = Handover(settle=cluster.settle, grace=cluster.grace)
        # what each slot's pump was last told, and which start of which position it was: a
        # position started again (even in the same worker process) has a fresh gate
        self._sent: dict[SlotRef, tuple[PositionKey, int, float, bool, bool]] = {}
        self._known: set[PositionKey] = set()
        self._running_since: dict[PositionKey, float] = {}  # this member's, since first seen
        self._defs_key: tuple[int, ...] = ()
        self._joining = False  # the group's start asked of its thread (at the first steer)
        import uvloop

        self.loop = uvloop.new_event_loop()  # the group's thread's
        self._thread = threading.Thread(target=self._run, name=f"pumpd group {cluster.name}",
                                        daemon=True)
        self.pauses: Pauses | None = None  # following the group's pause markers, once joined

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    async def close(self) -> None:
        """Leave the group (its connection closes) and end the thread."""
        if self.pauses is not None:
            await self.pauses.close()
        if not self._thread.is_alive():
            return
        left = asyncio.run_coroutine_threadsafe(self.group.close(), self.loop)
        try:
            await asyncio.wait_for(asyncio.wrap_future(left), 10)
        except Exception as exc:  # leaving is best effort: the connection ends with the process
            log.warning("group %s: leaving: %s", self.cluster.name, exc)
        self.loop.call_soon_threadsafe(self.loop.stop)
        await asyncio.to_thread(self._thread.join, 10)

    def steer(self, now: float, shovels: Iterable[Shovel], send: Send) -> None:
        """Tell this member's record what it holds, and each worker process its positions'
        answers (may take, should release) where they changed."""
        shovels = [s for s in shovels if not s.removing]
        self._note_definitions(shovels)
        positions = {PositionKey(s.name, w.index): w for s in shovels for w in s.positions}
        mine = {k for k, w in positions.items() if w.moving}
        for gone in self._running_since.keys() - mine:
            del self._running_since[gone]
        for k in mine:
            self._running_since.setdefault(k, now)
        # oldest first: the sticky spread keeps what a member took first
        taken = sorted(mine, key=lambda k: (self._running_since[k], k))
        self.group.set_positions(taken)
        view = self.group.view
        me = view.me if view.joined else None
        ids = view.ids() if me is not None else frozenset()
        # sticky: who runs what, from the records (this member's own from its slots, fresher
        # than its record): a healthy member keeps its positions when another leaves or joins
        held = {**view.held(), view.me: tuple(taken)}
        preferred = assign(ids, positions, held)
        self.handover.see_members(now, ids)
        others = held_by_others(view)
        self.handover.forget(self._known - positions.keys())
        self._known = set(positions)
        batches: dict[WorkerProcess, dict[SlotRef, tuple[bool, bool]]] = {}
        for k, w in positions.items():
            self.handover.see_free(now, k, k not in mine and k not in others)
            if w.runner is None:
                continue
            take = self.handover.may_take(now, k, preferred.get(k), me)
            release = k in mine and self.handover.should_release(now, preferred.get(k), me)
            told = (k, w.pid, w.spawned_at, take, release)
            if self._sent.get(w.slot) == told:
                continue
            if release:
                log.info("group %s: handing %s#%d over to member %s", self.cluster.name,
                         k.shovel, k.worker, preferred.get(k),
                         extra={"event": "handover", "shovel": k.shovel, "worker": k.worker,
                                "to": preferred.get(k)})
            self._sent[w.slot] = told
            batches.setdefault(w.runner, {})[w.slot] = (take, release)
        for proc, answers in batches.items():
            send(proc, ("gate", answers))

    def _note_definitions(self, shovels: list[Shovel]) -> None:
        key = tuple(id(s.definition) for s in shovels)
        if key != self._defs_key:
            self._defs_key = key
            self.group.set_definitions(definitions_hash(shovels))
        if not self._joining:
            # the group joins once the shovels are known: its connection's heartbeat follows
            # their sources' (read once, as the rest of the group; a reload does not change it)
            self._joining = True
            assert self.cluster.coordination_uri is not None
            self.group.heartbeat = coordination_heartbeat(
                self.cluster.coordination_uri,
                (b for s in shovels for b in s.definition.cfg.source.brokers))
            self.loop.call_soon_threadsafe(self.group.start)

    # -------------------------------------------------------------------------- status

    def holders(self) -> dict[PositionKey, str]:
        """The member each position runs on, from the records (this member's included)."""
        view = self.group.view
        out = {p: view.me for p in self.group.me.positions}
        for m in view.members:
            if m.info is not None and m.info.id != view.me:
                out.update((p, m.info.id) for p in m.info.positions)
        return out

    def annotate(self, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each worker of ``docs`` (``/api/shovels``) with its ``holder`` (the member running
        it, None when none is seen) and ``standby`` (the other members)."""
        holders = self.holders()
        ids = sorted(self.group.view.ids() | {self.group.me.id})
        for doc in docs:
            for w in doc.get("workers", []):
                holder = holders.get(PositionKey(doc["name"], w["index"]))
                w["holder"] = holder
                w["standby"] = [m for m in ids if m != holder]
        return docs

    def cluster_doc(self) -> dict[str, Any]:
        """``GET /api/cluster``: the group as this member sees it."""
        view, group = self.group.view, self.group
        members = [member_doc(m.slot, m.info) for m in view.members if m.info is not None]
        digests = {m["definitions"] for m in members}
        uri = self.cluster.coordination_uri
        return {"cluster": self.cluster.name, "me": view.me, "joined": view.joined,
                "coordination_uri": uri.redacted() if uri is not None else None,
                "error": group.last_error, "members": members,
                "definitions_agree": len(digests) <= 1,
                "settle": self.cluster.settle, "grace": self.cluster.grace}

    def metrics(self) -> str:
        """``pumpd_position_held{shovel,worker,member}``: 1 for each position a member's record
        lists (from this member's view)."""
        lines = ["# HELP pumpd_position_held 1 for the member that runs a position of the group "
                 "(from the members' records).", "# TYPE pumpd_position_held gauge"]
        for (shovel, worker), member in sorted(self.holders().items()):
            lines.append(f'pumpd_position_held{{shovel="{_escape(shovel)}",worker="{worker}",'
                         f'member="{_escape(member)}"}} 1')
        return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    """A Prometheus label value: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def held_by_others(view: GroupView) -> Mapping[PositionKey, str]:
    """The positions other members' records list, with the member."""
    return {p: m.info.id for m in view.members
            if m.info is not None and m.info.id != view.me for p in m.info.positions}


def member_doc(slot: int, info: MemberInfo) -> dict[str, Any]:
    return {"id": info.id, "slot": slot, "host": info.host, "pid": info.pid,
            "endpoint": info.endpoint, "started": info.started,
            "positions": [[p.shovel, p.worker] for p in info.positions],
            "held": len(info.positions), "definitions": info.definitions}
