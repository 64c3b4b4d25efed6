"""The daemon's status, as documents: JSON for ``/api/shovels`` and ``pumpd status``, Prometheus
text for ``/metrics``, and the message rates both show.

The coordinator builds :class:`ShovelView` snapshots from its slots and its supervision
bookkeeping; this module only turns them into output. URIs are always shown redacted (user, host,
port, vhost; never a password).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..config.model import ShovelConfig
from ..engine.status import Counters, State, lag_seconds
from ..version import __version__
from .slots import LEVELS, SlotRecord

# Counters that have a rate (per second) in the status; "msg_per_s" is the published rate.
RATE_FIELDS = ("consumed", "published", "confirmed", "acked", "bytes")
RATE_WINDOW = 5.0  # seconds of samples a rate is computed over
SAMPLE_EVERY = 0.5  # seconds between samples
# The source backlog is read every few seconds: its trend is taken over a longer window.
TREND_WINDOW = 60.0


class RateMeter:
    """Per-second rates of cumulative counters, over the last :data:`RATE_WINDOW` seconds."""

    def __init__(self) -> None:
        self._samples: collections.deque[tuple[float, tuple[int, ...]]] = collections.deque()
        self._backlog: collections.deque[tuple[float, int]] = collections.deque()

    def sample(self, counters: Counters, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if self._samples and now - self._samples[-1][0] < SAMPLE_EVERY:
            return
        self._samples.append((now, tuple(getattr(counters, f) for f in RATE_FIELDS)))
        while len(self._samples) > 2 and now - self._samples[1][0] >= RATE_WINDOW:
            self._samples.popleft()
        backlog = counters.source_backlog
        if backlog < 0:
            self._backlog.clear()  # not known now: a trend across the gap would mean nothing
            return
        self._backlog.append((now, backlog))
        while len(self._backlog) > 2 and now - self._backlog[1][0] >= TREND_WINDOW:
            self._backlog.popleft()

    def backlog_trend(self) -> float | None:
        """How fast the source backlog grows (messages/s; negative: it shrinks), over up to
        :data:`TREND_WINDOW` seconds; None until two readings are known."""
        if len(self._backlog) < 2:
            return None
        (t0, v0), (t1, v1) = self._backlog[0], self._backlog[-1]
        return round((v1 - v0) / (t1 - t0), 1) if t1 > t0 else None

    def rates(self) -> dict[str, float]:
        if len(self._samples) < 2:
            return {f: 0.0 for f in RATE_FIELDS}
        (t0, v0), (t1, v1) = self._samples[0], self._samples[-1]
        dt = t1 - t0
        # max(0, ...): a worker's counters restart from zero when it is replaced mid-window
        rates = {f: round(max(0, b - a) / dt, 1)
                 for f, a, b in zip(RATE_FIELDS, v0, v1, strict=True)}
        trend = self.backlog_trend()
        if trend is not None:
            rates["source_backlog"] = trend
        return rates


def add_counters(a: Counters, b: Counters) -> Counters:
    return a.add(b)


def carry(totals: Counters, last: Counters) -> Counters:
    """Fold a finished process's counters into the totals of its worker position (gauges are
    about the present, so they are not carried)."""
    return totals.carry(last)


@dataclass(frozen=True)
class WorkerView:
    index: int
    pid: int  # the live process, 0 when none runs
    alive: bool
    stopping: bool
    record: SlotRecord
    restarts: int
    last_exit: str | None
    next_start_in: float | None  # seconds until a scheduled (re)start
    heartbeat_age: float | None
    counters: Counters  # every process of this position so far, plus the live one
    rates: dict[str, float] = field(default_factory=dict)
    moving: bool = False  # a live process that reports running or blocked


@dataclass(frozen=True)
class ShovelView:
    name: str
    cfg: ShovelConfig
    origin: str
    removing: bool
    state: State
    reason: str
    since: float
    workers: Sequence[WorkerView]

    @property
    def counters(self) -> Counters:
        total = Counters()
        for w in self.workers:
            total = add_counters(total, w.counters)
        return total

    @property
    def rates(self) -> dict[str, float]:
        return {f: round(sum(w.rates.get(f, 0.0) for w in self.workers), 1) for f in RATE_FIELDS}

    @property
    def backlog_trend(self) -> float | None:
        """Every worker reads the same source queue: the mean of their trends."""
        trends = [w.rates["source_backlog"] for w in self.workers if "source_backlog" in w.rates]
        return round(sum(trends) / len(trends), 1) if trends else None


def iso_time(t: float) -> str | None:
    if t <= 0:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _uris(cfg: ShovelConfig, side: str) -> list[str]:
    endpoint = cfg.source if side == "src" else cfg.destination
    return [b.redacted() for b in endpoint.uris]


def worker_doc(w: WorkerView) -> dict[str, Any]:
    r = w.record
    return {
        "index": w.index,
        "pid": w.pid or None,
        "alive": w.alive,
        "stopping": w.stopping,
        "state": r.state.label,
        "reason": r.reason or None,
        "reason_code": r.reason_code.label,
        "since": r.since or None,
        "timestamp": iso_time(r.since),
        "started": iso_time(r.started),
        "heartbeat_age": None if w.heartbeat_age is None else round(w.heartbeat_age, 3),
        "restarts": w.restarts,
        "last_exit": w.last_exit,
        "next_restart_in": None if w.next_start_in is None else round(w.next_start_in, 2),
        "implementation": r.implementation or None,
        "msg_per_s": w.rates.get("published", 0.0),
        "rates": w.rates,
        "counters": _counters_doc(w.counters),
        **plugin_figures(w.counters, w.rates.get("source_backlog")),
    }


def shovel_doc(v: ShovelView) -> dict[str, Any]:
    """One shovel: the management plugin's shovel-status fields, then pumpd's own."""
    cfg = v.cfg
    src, dest = _uris(cfg, "src"), _uris(cfg, "dest")
    rates = v.rates
    impls = sorted({w.record.implementation for w in v.workers if w.record.implementation})
    return {
        "name": v.name,
        "type": "pumpd",
        "state": v.state.label,
        "reason": v.reason or None,
        "timestamp": iso_time(v.since),
        "since": v.since or None,
        "src_protocol": cfg.source.protocol.value,
        "src_uri": src[0],
        "src_uris": src,
        "src_queue": cfg.queue,
        # an AMQP 1.0 side names an address where an AMQP 0-9-1 one has a queue (as the
        # plugin's status does); null on an AMQP 0-9-1 side
        "src_address": cfg.source.address,
        "dest_protocol": cfg.destination.protocol.value,
        "dest_uri": dest[0],
        "dest_uris": dest,
        "dest_address": cfg.destination.address,
        # null: each message keeps its own exchange / routing key
        "dest_exchange": cfg.publish_exchange,
        "dest_exchange_key": cfg.publish_routing_key,
        "ack_mode": cfg.ack_mode.value,
        "prefetch_count": cfg.prefetch_count,
        "reconnect_delay": cfg.reconnect_delay,
        "source_read_hold_ms": cfg.source_read_hold_ms,
        "stall_timeout": cfg.stall_timeout,
        "undeliverable": {"policy": cfg.undeliverable.policy.value,
                          "unroutable": cfg.undeliverable.unroutable.value,
                          "park_queue": cfg.undeliverable.park_queue},
        "origin": v.origin,
        "removing": v.removing,
        # the plugin 4.x's protected shovels: DELETE / PUT over one need ?force=true
        "internal": cfg.internal,
        "internal_owner": None if cfg.internal_owner is None else {
            "kind": cfg.internal_owner.kind, "name": cfg.internal_owner.name,
            "virtual_host": cfg.internal_owner.virtual_host},
        "workers_configured": cfg.workers,
        # running = a live process that reports running or blocked; alive = any live process
        "workers_running": sum(1 for w in v.workers if w.moving),
        "workers_alive": sum(1 for w in v.workers if w.alive),
        "implementation": ",".join(impls) or None,
        "restarts": sum(w.restarts for w in v.workers),
        "msg_per_s": rates["published"],
        "rates": rates,
        "counters": _counters_doc(v.counters),
        **plugin_figures(v.counters, v.backlog_trend),
        "workers": [worker_doc(w) for w in v.workers],
    }


def _counters_doc(c: Counters) -> dict[str, int]:
    """Totals and gauges; the levels (-1 when unknown) are shown as the plugin's figures."""
    return {k: v for k, v in c.as_dict().items() if k not in LEVELS}


def plugin_figures(c: Counters, trend: float | None, now: float | None = None) -> dict[str, Any]:
    """The Shovel plugin's shovel_status figures under its own names, and how far
    behind the shovel is.

    ``remaining`` / ``remaining_unacked``: what delete_after still lets it move / publish
    (``"unlimited"`` without delete_after, as the plugin shows it); ``pending``: held while the
    destination is blocked (pumpd's ``buffered``); ``forwarded``: re-published (``published``);
    ``source_backlog``: messages ready in the source queue at the last reading (null until
    read), ``source_backlog_trend``: its change in messages/s over the last minute (positive:
    the shovel falls behind); ``lag_messages``: messages not yet forwarded (null when not
    known: a stream, a source that counts no backlog, a position that does not forward);
    ``lag_seconds``: the age of the oldest message not yet forwarded, at most (0 when caught
    up, null when not known; ``engine/lag.py``). A shovel's figures are its workers' largest.
    """
    now = time.time() if now is None else now
    return {
        "remaining": "unlimited" if c.remaining < 0 else c.remaining,
        "remaining_unacked": "unlimited" if c.remaining_unacked < 0 else c.remaining_unacked,
        "pending": c.buffered,
        "forwarded": c.published,
        "source_backlog": None if c.source_backlog < 0 else c.source_backlog,
        "source_backlog_trend": trend,
        "lag_messages": None if c.lag_messages < 0 else c.lag_messages,
        "lag_seconds": lag_seconds(c, now),
    }


def summary_doc(shovels: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Where a migration stands, over every shovel: built from the shovel documents
    (as :func:`shovel_doc` writes them), so ``pumpd status`` can make it from ``/api/shovels``.

    ``states``: how many shovels are in each state (only the states some shovel is in);
    ``source_backlog``: messages ready in the source queues, summed over the
    ``source_backlog_known`` shovels that have read theirs (null when none has);
    ``msg_per_s``: messages re-published per second, all shovels together;
    ``seconds_to_empty``: source_backlog / msg_per_s, null when either is unknown or the rate
    is 0 (0 once every backlog is known to be 0). Producers still publishing to the source make
    it optimistic: the per-shovel ``source_backlog_trend`` shows that.
    """
    states = {s.label: 0 for s in State}
    backlog, known, rate = 0, 0, 0.0
    for doc in shovels:
        states[doc["state"]] = states.get(doc["state"], 0) + 1
        if doc.get("source_backlog") is not None:
            backlog += doc["source_backlog"]
            known += 1
        rate += doc.get("msg_per_s") or 0.0
    total: int | None = backlog if known else None
    if total == 0 and known == len(shovels):
        seconds: float | None = 0.0
    elif total is not None and rate > 0:
        seconds = round(total / rate, 1)
    else:
        seconds = None
    return {
        "shovels": len(shovels),
        "states": {label: n for label, n in states.items() if n},
        "source_backlog": total,
        "source_backlog_known": known,
        "msg_per_s": round(rate, 1),
        "seconds_to_empty": seconds,
    }


# ------------------------------------------------------------------------------- Prometheus

# (name, help, source) for per-worker series; source is a counter field or a callable key.
COUNTER_METRICS = (
    ("pumpd_messages_consumed_total", "Deliveries taken from the source queue.", "consumed"),
    ("pumpd_messages_published_total", "Messages re-published to the destination.", "published"),
    ("pumpd_messages_confirmed_total", "Publisher confirms (acks) from the destination.",
     "confirmed"),
    ("pumpd_messages_acked_total", "Source messages acknowledged.", "acked"),
    ("pumpd_messages_nacked_total", "Publisher nacks from the destination.", "nacked"),
    ("pumpd_messages_returned_total", "Messages returned unroutable by the destination.",
     "returned"),
    ("pumpd_messages_redelivered_total", "Deliveries flagged redelivered by the source.",
     "redelivered"),
    ("pumpd_reconnects_total", "Sessions that failed and were started again in the worker.",
     "reconnects"),
    ("pumpd_stall_restarts_total",
     "Sessions restarted because they were stalled (a source backlog and nothing moving, or "
     "no confirm with messages outstanding, for stall_timeout).", "stall_restarts"),
    ("pumpd_published_bytes_total", "Message body bytes re-published.", "bytes"),
    ("pumpd_messages_parked_total", "Undeliverable messages published to the park queue.",
     "parked"),
    ("pumpd_messages_dead_lettered_total",
     "Undeliverable messages rejected to the source queue's dead-letter exchange.",
     "dead_lettered"),
)
# pumpd_messages_undeliverable_total{reason=...}: one series per reason, from these counters.
UNDELIVERABLE_REASONS = ("malformed", "too_large", "refused", "unroutable")
GAUGE_METRICS = (
    ("pumpd_messages_in_flight", "Published and not yet confirmed.", "in_flight"),
    ("pumpd_messages_buffered", "Received and held while the destination is blocked.",
     "buffered"),
)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**labels: str | int) -> str:
    return "{" + ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items()) + "}"


def _num(value: float) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)


def metrics_text(views: Iterable[ShovelView], implementation: str,
                 now: float | None = None) -> str:
    """Prometheus text exposition format 0.0.4 (``now``: the wall clock the lag is measured
    at, time.time() by default)."""
    views = list(views)
    now = time.time() if now is None else now
    out: list[str] = []

    def family(name: str, kind: str, help_text: str,
               samples: Iterable[tuple[str, float]]) -> None:
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} {kind}")
        out.extend(f"{name}{labels} {_num(value)}" for labels, value in samples)

    family("pumpd_info", "gauge", "pumpd version and data plane implementation.",
           [(_labels(version=__version__, implementation=implementation), 1)])
    family("pumpd_shovel_state", "gauge",
           "1 for the state each shovel is in (starting, running, blocked, terminated, "
           "standby, paused).",
           [(_labels(shovel=v.name, state=s.label), int(v.state == s))
            for v in views for s in State])
    family("pumpd_shovel_workers", "gauge", "Worker processes configured for each shovel.",
           [(_labels(shovel=v.name), v.cfg.workers) for v in views])
    workers = [(v, w) for v in views for w in v.workers]

    def per_worker(value: Any) -> list[tuple[str, float]]:
        return [(_labels(shovel=v.name, worker=w.index), value(w)) for v, w in workers]

    family("pumpd_worker_state", "gauge",
           "1 for the state each worker is in (starting, running, blocked, terminated, "
           "standby, paused).",
           [(_labels(shovel=v.name, worker=w.index, state=s.label), int(w.record.state == s))
            for v, w in workers for s in State])
    family("pumpd_worker_up", "gauge", "1 while the worker process is alive.",
           per_worker(lambda w: int(w.alive)))
    family("pumpd_worker_restarts_total", "counter", "Times the worker process was replaced.",
           per_worker(lambda w: w.restarts))
    family("pumpd_worker_state_since_timestamp_seconds", "gauge",
           "Unix time the worker entered its current state.",
           per_worker(lambda w: float(w.record.since)))
    family("pumpd_worker_heartbeat_age_seconds", "gauge",
           "Seconds since the worker's last heartbeat (absent while no process runs).",
           [(_labels(shovel=v.name, worker=w.index), round(w.heartbeat_age, 3))
            for v, w in workers if w.heartbeat_age is not None])
    for name, help_text, key in COUNTER_METRICS:
        family(name, "counter", help_text, per_worker(lambda w, k=key: getattr(w.counters, k)))
    family("pumpd_messages_undeliverable_total", "counter",
           "Messages pumpd could not forward, handled by the undeliverable policy, by reason "
           "(malformed properties, header too large for the destination, refused by the "
           "destination, unroutable).",
           [(_labels(shovel=v.name, worker=w.index, reason=r),
             getattr(w.counters, f"undeliverable_{r}"))
            for v, w in workers for r in UNDELIVERABLE_REASONS])
    for name, help_text, key in GAUGE_METRICS:
        family(name, "gauge", help_text, per_worker(lambda w, k=key: getattr(w.counters, k)))
    family("pumpd_source_queue_messages", "gauge",
           "Messages ready in the source queue at the worker's last reading (absent until read).",
           [(_labels(shovel=v.name, worker=w.index), w.counters.source_backlog)
            for v, w in workers if w.counters.source_backlog >= 0])
    family("pumpd_lag_messages", "gauge",
           "Messages not yet forwarded: the source backlog as last read plus those received "
           "and not yet confirmed (absent when not known: a stream source, a source that "
           "counts no backlog, a worker that does not forward).",
           [(_labels(shovel=v.name, worker=w.index), w.counters.lag_messages)
            for v, w in workers if w.counters.lag_messages >= 0])
    lags = [(v, w, lag_seconds(w.counters, now)) for v, w in workers]
    family("pumpd_lag_seconds", "gauge",
           "Age of the oldest message not yet forwarded, at most: 0 while caught up (absent "
           "when not known).",
           [(_labels(shovel=v.name, worker=w.index), lag) for v, w, lag in lags
            if lag is not None])
    return "\n".join(out) + "\n"
