"""The HTTP endpoint's methods (:class:`~pumpd.http.server.Api`) on a running coordinator:
status documents, and run-time changes (PUT, DELETE, POST restart) turned into the coordinator's
verbs. The coordinator supervises; this module answers requests."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from typing import Any, Protocol

from ..config.model import ClusterConfig
from ..config.parse import ConfigError
from ..supervisor import confinement, definitions, statefile
from ..supervisor import membership as group_status
from ..supervisor.definitions import ShovelDefinition
from ..supervisor.pauses import Pauses
from ..supervisor.positions import Position, Shovel, shovel_view
from ..supervisor.report import metrics_text, shovel_doc
from ..supervisor.slots import SlotsUnavailable
from ..version import __version__
from .server import Reply, error

log = logging.getLogger("pumpd.coordinator")


class Options(Protocol):
    @property
    def config_path(self) -> str: ...

    @property
    def state_path(self) -> str: ...

    @property
    def default_workers(self) -> int | None: ...

    @property
    def drain_timeout(self) -> float: ...

    @property
    def shovels_per_process(self) -> int: ...

    @property
    def tls_dirs(self) -> tuple[str, ...]: ...

    @property
    def protected_files(self) -> tuple[str, ...]: ...

    @property
    def cluster(self) -> ClusterConfig | None: ...


class Supervisor(Protocol):
    """What these methods need of the coordinator."""

    @property
    def opts(self) -> Options: ...

    shovels: dict[str, Shovel]
    started: float
    stopping: bool
    pauses: Pauses
    membership: group_status.Membership | None

    def block_names(self) -> list[str]: ...

    def process_count(self) -> tuple[int, int]: ...

    def add(self, name: str, definition: ShovelDefinition, now: float) -> Shovel: ...

    def replace(self, s: Shovel, definition: ShovelDefinition, now: float) -> None: ...

    def remove(self, s: Shovel, now: float) -> None: ...

    def restart_worker(self, s: Shovel, w: Position, now: float) -> None: ...

    def runtime_definitions(self) -> Mapping[str, ShovelDefinition]: ...

    def wake_loop(self) -> None: ...


class CoordinatorApi:
    def __init__(self, sup: Supervisor) -> None:
        self.sup = sup

    def overview(self) -> dict[str, Any]:
        from ..dataplane.implementation import IMPLEMENTATION

        sup = self.sup
        positions, processes = sup.process_count()
        return {
            "product": "pumpd",
            "version": __version__,
            "pid": os.getpid(),
            "started": sup.started,
            "uptime": round(time.time() - sup.started, 3),
            "config": os.path.abspath(sup.opts.config_path),
            "state_file": os.path.abspath(sup.opts.state_path),
            "implementation": IMPLEMENTATION,
            "drain_timeout": sup.opts.drain_timeout,
            "stopping": sup.stopping,
            "slot_blocks": sup.block_names(),  # in /dev/shm: for diagnostics
            "shovels": len(sup.shovels),
            "workers": positions,
            "shovels_per_process": sup.opts.shovels_per_process,
            "worker_processes": processes,
        }

    def shovel_list(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        docs = [self._doc(s, now) for s in self.sup.shovels.values()]
        group = self.sup.membership
        return docs if group is None else group.annotate(docs)

    def shovel(self, name: str) -> dict[str, Any] | None:
        s = self.sup.shovels.get(name)
        if s is None:
            return None
        doc = self._doc(s, time.monotonic())
        group = self.sup.membership
        return doc if group is None else group.annotate([doc])[0]

    def _doc(self, s: Shovel, now: float) -> dict[str, Any]:
        """``paused``: asked to pause (its state says whether it has drained yet)."""
        return {**shovel_doc(shovel_view(s, now)), "paused": s.name in self.sup.pauses}

    def cluster(self) -> dict[str, Any] | None:
        """``GET /api/cluster``; None when this daemon is in no group with a coordination
        broker."""
        group = self.sup.membership
        return None if group is None else group.cluster_doc()

    def metrics(self) -> str:
        from ..dataplane.implementation import IMPLEMENTATION

        now = time.monotonic()
        text = metrics_text([shovel_view(s, now) for s in self.sup.shovels.values()],
                            IMPLEMENTATION)
        group = self.sup.membership
        return text if group is None else text + group.metrics()

    def _group_refusal(self) -> Reply | None:
        """A group's shovels come from the configuration file only (supervisor/membership.py)."""
        cluster = self.sup.opts.cluster
        if cluster is None:
            return None
        return error(409, group_status.refusal(cluster.name, self.sup.opts.state_path))

    def _changeable(self, name: str) -> Shovel | Reply:
        """The shovel a restart or DELETE acts on, or the refusal to send instead."""
        if self.sup.stopping:
            return error(503, "pumpd is stopping")
        s = self.sup.shovels.get(name)
        if s is None or s.removing:
            return error(404, f"no shovel {name!r}")
        return s

    def restart(self, name: str) -> Reply:
        sup = self.sup
        s = self._changeable(name)
        if isinstance(s, Reply):
            return s
        now = time.monotonic()
        log.info("shovel %s: restart requested", name, extra={"event": "restart_requested",
                                                                "shovel": name})
        for w in list(s.positions):
            sup.restart_worker(s, w, now)
        sup.wake_loop()
        return Reply(202, shovel_doc(shovel_view(s, now)))

    def pause(self, name: str, paused: bool) -> Reply:
        """``POST /api/shovels/NAME/pause`` (``paused``) or ``/resume``: :mod:`pumpd.supervisor.pauses`.

        202 with the shovel's document when it changes, 200 when it already was so; 500 when
        the state file cannot be read or written (nothing changed)."""
        s = self._changeable(name)
        if isinstance(s, Reply):
            return s
        try:
            changed = self.sup.pauses.request(s, paused)
        except statefile.StateFileError as exc:
            return error(500, str(exc))
        self.sup.wake_loop()
        verb = "paused" if paused else "resumed"
        doc = shovel_doc(shovel_view(s, time.monotonic()))
        doc["paused"] = paused
        doc["note"] = (f"{verb}: " + ("its workers drain what they hold; the rest stays in the "
                                      "source" if paused else "its workers consume again")
                       if changed else f"already {verb}: nothing changed")
        return Reply(202 if changed else 200, doc)

    def put(self, name: str, body: bytes, force: bool = False) -> Reply:
        sup = self.sup
        if sup.stopping:
            return error(503, "pumpd is stopping")
        if (refused := self._group_refusal()) is not None:
            return refused
        existing = sup.shovels.get(name)
        if existing is not None and existing.definition.origin == "config" and \
                not existing.removing:
            return error(409, f"shovel {name!r} is defined in {sup.opts.config_path}: change it "
                              "there and send SIGHUP")
        if existing is not None and not existing.removing and not force:
            refusal = _protected(existing, "replace")
            if refusal is not None:
                return refusal
        try:
            new = definitions.parse_put_body(name, body, sup.opts.default_workers)
            confinement.check(new.cfg, sup.opts.tls_dirs, sup.opts.protected_files)
        except (definitions.BodyNotJson, ConfigError, confinement.Refused) as exc:
            return error(400, str(exc))
        before = dict(sup.runtime_definitions())
        try:  # the daemon's totals, before anything is written
            definitions.check_totals({**{s.name: s.definition for s in sup.shovels.values()
                                           if not s.removing}, name: new},
                                       f"PUT /api/shovels/{name}")
        except ConfigError as exc:
            return error(400, str(exc))
        runtime = {n: d.definition for n, d in before.items()}
        runtime[name] = new.definition
        try:
            statefile.save(sup.opts.state_path, runtime, sup.pauses.names)
        except statefile.StateFileError as exc:
            log.error("shovel %s: PUT refused: %s", name, exc,
                      extra={"event": "state_file_failed", "shovel": name})
            return error(500, str(exc))
        now = time.monotonic()
        try:
            if existing is None:
                s = sup.add(name, new, now)
                status = 201
                log.info("shovel %s: added at run time", name,
                         extra={"event": "added", "shovel": name})
            elif not existing.removing and existing.definition.cfg == new.cfg:
                existing.definition = new
                s, status = existing, 200
            else:
                sup.replace(existing, new, now)
                s, status = existing, 200
                log.info("shovel %s: replaced at run time (restarting)", name,
                         extra={"event": "replaced", "shovel": name})
        except SlotsUnavailable as exc:  # nothing changed: put the state file back as it was
            log.error("shovel %s: PUT refused: %s", name, exc)
            try:
                statefile.save(sup.opts.state_path, {n: d.definition for n, d in before.items()},
                               sup.pauses.names)
            except statefile.StateFileError as save_exc:
                log.error("%s", save_exc)
            return error(503, f"PUT refused: {exc}")
        sup.wake_loop()
        return Reply(status, shovel_doc(shovel_view(s, now)))

    def delete(self, name: str, force: bool = False) -> Reply:
        sup = self.sup
        if (refused := self._group_refusal()) is not None:
            return refused
        s = self._changeable(name)
        if isinstance(s, Reply):
            return s
        if s.definition.origin == "config":
            return error(409, f"shovel {name!r} is defined in {sup.opts.config_path}: remove it "
                              "there and send SIGHUP")
        if not force:
            refusal = _protected(s, "delete")
            if refusal is not None:
                return refusal
        runtime = {n: d.definition for n, d in sup.runtime_definitions().items() if n != name}
        try:
            statefile.save(sup.opts.state_path, runtime, sup.pauses.names - {name})
        except statefile.StateFileError as exc:
            log.error("shovel %s: DELETE refused: %s", name, exc,
                      extra={"event": "state_file_failed", "shovel": name})
            return error(500, str(exc))
        log.info("shovel %s: deleted at run time (draining)", name,
                 extra={"event": "deleted", "shovel": name})
        sup.remove(s, time.monotonic())
        sup.wake_loop()
        return Reply(204)


def _protected(s: Shovel, verb: str) -> Reply | None:
    """The refusal to delete or replace a protected (``"internal": true``) shovel unforced, in
    the plugin's words (rabbit_shovel_util, resource_locked)."""
    cfg = s.definition.cfg
    if not cfg.internal:
        return None
    message = f"cannot {verb} protected shovel {s.name!r}: it was declared as protected"
    if cfg.internal_owner is not None:
        message += f" (owner: {cfg.internal_owner.describe()})"
    return error(409, message + f"; {verb} it with ?force=true")
