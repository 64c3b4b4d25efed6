"""The coordinator's reading of the slots: each position's last report, its rates, and each
shovel's state as a whole (logged when it changes)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from ..engine.status import State
from . import lifecycle
from .positions import Position, Shovel
from .report import SAMPLE_EVERY
from .slots import SlotPool, SlotUnreadable

log = logging.getLogger("pumpd.coordinator")


def read_slot(pool: SlotPool, w: Position) -> None:
    """Refresh ``w.record`` from its slot, if written since the last read."""
    try:
        seq = pool.seq(w.slot)
        if seq == w.seen_seq:
            return  # not written since the last read: idle shovels cost no unpacking
        lifecycle.observed(w, pool.read(w.slot), seq)
    except SlotUnreadable:
        pass  # keep the last good copy; a dead writer's slot is rewritten at its restart


def observe(pool: SlotPool, shovels: Iterable[Shovel], now: float) -> None:
    """Read every slot, sample the rates, log each shovel's state changes."""
    for s in shovels:
        for w in s.positions:
            read_slot(pool, w)
            if now - w.sampled_at >= SAMPLE_EVERY:
                lifecycle.sampled(w, now)
        state, reason = aggregate(s)
        if (state, reason) != (s.state, s.reason):
            s.since = max((w.record.since for w in s.positions if w.record.state == state),
                          default=time.time()) or time.time()
            s.state, s.reason = state, reason
            moving = sum(1 for w in s.positions if w.moving)
            # "is", not ":" as in the workers' own lines: this is the shovel as a whole
            log.info("shovel %s is %s%s (%d/%d workers running)", s.name, state.label,
                     f": {reason}" if reason else "", moving, s.definition.cfg.workers,
                     extra={"event": "state", "shovel": s.name, "state": state.label,
                            "reason": reason or None})


def aggregate(s: Shovel) -> tuple[State, str]:
    """A shovel's state from its workers': blocked if any is, else running if any is, else
    starting if any is, else paused if any is, else standby if any is (another member of the
    group runs them), else terminated."""
    records = [w.record for w in s.positions]
    if not records:
        return State.TERMINATED, "removed" if s.removing else "shutdown"
    states = {r.state for r in records}
    for state in (State.BLOCKED, State.RUNNING, State.STARTING, State.PAUSED, State.STANDBY,
                  State.TERMINATED):
        if state in states:
            reasons = [r.reason for r in records if r.state == state and r.reason]
            if state in (State.BLOCKED, State.RUNNING):
                # Moving messages, but not with every worker: say which are not, and why.
                idle = [w for w in s.positions if not w.moving]
                if not idle:
                    return state, ""
                w = idle[0]
                why = w.record.reason or w.record.state.label
                if w.process is None:
                    why = f"not running: {w.last_exit or why}"
                return state, (f"{len(s.positions) - len(idle)}/{len(s.positions)} workers "
                               f"running; worker {w.index} {w.record.state.label}: {why}")
            return state, reasons[0] if reasons else ""
    raise AssertionError("unreachable")
