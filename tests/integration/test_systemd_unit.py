"""contrib/pumpd.service: systemd accepts it, it names options pumpd has, it waits for the drain,
and its MemoryDenyWriteExecute= holds for the daemon (run under the kernel's equivalent)."""

from __future__ import annotations

import errno
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pumpd.testing.localnode import LocalNode, find_free_port

from tests.support.amqp_helpers import queue_depth
from tests.support.daemon_helpers import Daemon, fill_queue, running_state, shovel_def

UNIT = Path(__file__).resolve().parents[2] / "contrib" / "pumpd.service"


def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    # verify checks that ExecStart's binary exists: point a copy at this environment's pumpd
    pumpd = Path(sys.executable).with_name("pumpd")
    assert pumpd.exists(), pumpd
    copy = tmp_path / "pumpd.service"
    copy.write_text(UNIT.read_text().replace("/usr/local/bin/pumpd", str(pumpd)))
    done = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True,
                          timeout=60)
    complaints = [line for line in (done.stdout + done.stderr).splitlines()
                  if "pumpd.service" in line]
    assert done.returncode == 0 and not complaints, done.stdout + done.stderr


# The kernel's memory-deny-write-execute (Linux 6.3+, inherited by children and kept across
# execve): what systemd's MemoryDenyWriteExecute= enforces with seccomp, checked here without
# systemd. Set, then exec the daemon in the same process.
PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN = 65, 1


MDWE_EXEC = (
    "import ctypes, os, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    f"if libc.prctl({PR_SET_MDWE}, {PR_MDWE_REFUSE_EXEC_GAIN}, 0, 0, 0) != 0:\n"
    "    sys.exit(f'prctl(PR_SET_MDWE): errno {ctypes.get_errno()}')\n"
    "os.execv(sys.argv[1], sys.argv[1:])\n"
)


class MdweDaemon(Daemon):
    def command(self) -> list[str]:
        return [sys.executable, "-c", MDWE_EXEC, *super().command()]


def mdwe_supported() -> bool:
    probe = subprocess.run(
        [sys.executable, "-c",
         "import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); "
         f"r = libc.prctl({PR_SET_MDWE}, {PR_MDWE_REFUSE_EXEC_GAIN}, 0, 0, 0); "
         "sys.exit(0 if r == 0 else ctypes.get_errno())"],
        capture_output=True, timeout=30)
    if probe.returncode in (errno.EINVAL, errno.ENOSYS):
        return False
    assert probe.returncode == 0, probe
    return True


def test_the_daemon_moves_messages_with_memory_deny_write_execute(
    tmp_path: Path, node_a: LocalNode, vhost_a: str
) -> None:
    if not mdwe_supported():
        pytest.skip("this kernel has no PR_SET_MDWE (Linux 6.3+)")
    uri = node_a.uri(vhost_a)
    config: dict[str, Any] = {"s": shovel_def(uri, "in", uri, "out")}
    d = MdweDaemon(tmp_path, config, (), find_free_port())
    try:
        d.start()
        d.wait_for(lambda: running_state(d, "s"), 30, "the shovel running")
        doc = d.shovel("s")
        assert doc is not None and doc["workers"][0]["implementation"] == "native"
        fill_queue(uri, "in", [b"x"] * 100)
        d.wait_for(lambda: queue_depth(uri, "out")[0] == 100, 30, "100 messages moved")
        assert d.stop() == 0
    finally:
        d.kill_everything()

