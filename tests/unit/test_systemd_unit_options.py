"""contrib/pumpd.service runs the daemon with options the daemon has, as a notify service that
waits for the drain."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

from pumpd.cli.dispatch import _run_parser
from pumpd.supervisor.coordinator import DRAIN_GRACE

UNIT = Path(__file__).resolve().parents[2] / "contrib" / "pumpd.service"


def service_section() -> dict[str, list[str]]:
    """The [Service] keys, each with every value it is given (systemd allows repeats)."""
    values: dict[str, list[str]] = {}
    section = None
    for raw in UNIT.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
        elif section == "[Service]":
            key, _, value = line.partition("=")
            values.setdefault(key, []).append(value)
    return values


def test_the_unit_runs_the_daemon_with_options_it_has_and_waits_for_the_drain() -> None:
    service = service_section()
    assert service["Type"] == ["notify"] and service["NotifyAccess"] == ["main"]
    (exec_start,) = service["ExecStart"]
    argv = exec_start.split()
    known = {s for action in _run_parser()._actions for s in action.option_strings}
    assert {a for a in argv if a.startswith("--")} <= known, argv
    assert argv[argv.index("--state-file") + 1].startswith("%S/pumpd/")
    assert service["StateDirectory"] == ["pumpd"]
    drain = float(argv[argv.index("--drain-timeout") + 1])
    stop = float(service["TimeoutStopSec"][0])
    # the coordinator kills a worker still draining DRAIN_GRACE after the drain timeout
    assert stop > drain + DRAIN_GRACE, (stop, drain)
    assert service["KillMode"] == ["mixed"]  # SIGTERM to the coordinator only: it drains
    assert service["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert service["User"] == ["pumpd"]
    # /dev/shm holds the status table: nothing may take it away
    assert "/dev/shm" not in " ".join(v for vs in service.values() for v in vs)
    for key in ("ProtectSystem", "ProtectHome", "NoNewPrivileges", "PrivateTmp",
                "PrivateDevices", "MemoryDenyWriteExecute", "RestrictAddressFamilies"):
        assert key in service, key
    parsed = configparser.ConfigParser(strict=False, interpolation=None)
    parsed.read_string(re.sub(r"^SystemCallFilter=.*$", "", UNIT.read_text(), flags=re.M))
    assert parsed["Install"]["WantedBy"] == "multi-user.target"

