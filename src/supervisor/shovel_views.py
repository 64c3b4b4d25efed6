"""The report's snapshot of one supervised shovel: :class:`~pumpd.supervisor.report.ShovelView` built
from the coordinator's bookkeeping and the last slot reads, for ``/api/shovels``, ``/metrics`` and
``pumpd status``."""

from __future__ import annotations

from .positions import Shovel
from .report import RATE_FIELDS, ShovelView, WorkerView


def shovel_view(s: Shovel, now: float) -> ShovelView:
    workers = []
    for w in sorted(s.workers, key=lambda w: w.index):
        live = w.live_record()
        workers.append(WorkerView(
            index=w.index,
            pid=w.pid if w.process is not None else 0,
            alive=w.process is not None,
            stopping=w.stop_sent_at is not None,
            record=w.record,
            restarts=w.restarts,
            last_exit=w.last_exit,
            next_start_in=(max(0.0, w.start_at - now)
                           if w.process is None and w.start_at is not None else None),
            heartbeat_age=now - w.record.heartbeat if live else None,
            counters=w.counters(),
            # A rate is over the last few seconds; a worker that stopped moving moves
            # nothing now, so it shows 0 rather than a trailing average.
            rates=w.meter.rates() if w.moving else {f: 0.0 for f in RATE_FIELDS},
            moving=w.moving,
        ))
    return ShovelView(name=s.name, cfg=s.definition.cfg, origin=s.definition.origin,
                      removing=s.removing, state=s.state, reason=s.reason, since=s.since,
                      workers=workers)
