"""Members of a group of real daemons in tests: each with its own files (configuration, state,
token), as if on machines of their own; who runs what and how soon, from their logs."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from pumpd.supervisor.membership import member_id

from tests.support.daemon_helpers import Daemon, _children


def group_member(start_daemon: Callable[..., Daemon], doc: dict[str, Any], name: str,
                 *args: str) -> Daemon:
    """A member (not started) with its own files, named ``name``, on the whole configuration
    ``doc`` (its ``cluster`` clause and its shovels); ``args`` go to its command line."""
    d = start_daemon(doc["shovels"], *args, start=False)
    d.config_path = d.workdir / f"{name}.json"
    d.state_path = d.workdir / f"{name}.runtime.json"
    d.token_path = d.workdir / f"{name}.runtime.token"
    d.config_path.write_text(json.dumps(doc))
    return d


def member_ident(d: Daemon) -> str:
    """The member id the group knows ``d`` by (it hashes the path of its state file)."""
    return member_id(str(d.state_path))


def process_tree(d: Daemon) -> list[int]:
    """The daemon's coordinator and every process it started (workers, resource tracker)."""
    pids = [d.pid]
    for pid in pids:
        pids.extend(p for p in _children(pid) if p not in pids)
    return pids


def freeze(pids: list[int]) -> None:
    """SIGSTOP each process: a member that hangs (a long GC pause, a VM paused) and may wake."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)


def wake(pids: list[int]) -> None:
    """SIGCONT each process still there."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def log_time(event: dict[str, Any]) -> float:
    """When a JSON log line was written, as a wall-clock timestamp."""
    when = datetime.strptime(event["time"], "%Y-%m-%dT%H:%M:%S.%fZ")
    return when.replace(tzinfo=timezone.utc).timestamp()


def taken_over_after(faulted: float, others: list[Daemon], shovels: list[str]) -> float:
    """Seconds from ``faulted`` (wall clock) until the last of ``shovels`` was running on one
    of ``others``, from their logs (the broker's lists, read with rabbitmqctl, take seconds
    each on a loaded machine: too coarse for the time)."""
    running = [(e["shovel"], log_time(e)) for d in others for e in d.log_events()
               if e.get("shovel") in shovels and e["message"].endswith(": running")]
    firsts = [min((t for s, t in running if s == name and t >= faulted), default=None)
              for name in shovels]
    assert None not in firsts, f"not running after the fault: {shovels}, {firsts}"
    return max(t for t in firsts if t is not None) - faulted


def iso(at: float) -> str:
    """A wall-clock time as the daemons' JSON log writes it."""
    return datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
