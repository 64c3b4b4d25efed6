"""When a crashed worker position starts again: exponential backoff with jitter, reset after a
stable run; and what its slot says meanwhile."""

from __future__ import annotations

import logging
import random
import time

from ..engine.status import State
from .observation import read_slot
from .positions import Position, Shovel
from .slots import ReasonCode, SlotPool, SlotRecord

log = logging.getLogger("pumpd.coordinator")

RESTART_BASE = 0.5  # first restart delay after a crash, doubled per consecutive crash...
RESTART_CAP = 30.0  # ...up to this
STABLE_AFTER = 30.0  # a worker that ran this long before crashing starts the backoff afresh


def backoff(rng: random.Random, failures: int) -> float:
    """Exponential, capped, with "equal jitter": half fixed, half random, so that workers
    crashing together (a broker restart) do not come back in lockstep."""
    ceiling = min(RESTART_CAP, RESTART_BASE * 2.0 ** min(failures - 1, 30))
    return ceiling / 2 + rng.uniform(0, ceiling / 2)


def schedule_restart(pool: SlotPool, rng: random.Random, s: Shovel, w: Position, what: str,
                     code: ReasonCode, now: float) -> None:
    """``w`` crashed (``what`` says how): its next start, and its slot saying so."""
    if w.spawned_at and now - w.spawned_at >= STABLE_AFTER:
        w.failures = 0
    w.failures += 1
    delay = backoff(rng, w.failures)
    w.restarts += 1
    w.start_at, w.last_exit, w.process = now + delay, what, None
    reason = f"{what}; restarting in {delay:.1f}s"
    pool.write(w.slot, SlotRecord(state=State.STARTING, reason_code=code, reason=reason,
                                  since=time.time(), heartbeat=now,
                                  implementation=w.record.implementation))
    read_slot(pool, w)
    log.warning("worker %s#%d (pid %d) %s; restart %d in %.1fs", s.name, w.index, w.pid,
                what, w.restarts, delay,
                extra={"event": "crash", "shovel": s.name, "worker": w.index, "exit": what,
                       "restarts": w.restarts, "delay": round(delay, 2)})
