"""A private node's processes: its process group, killed whole, and its log files' tails."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from .ports import port_is_free

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["PrivateProcess", "group_members", "kill_group", "tail", "wait_leader"]


def tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a text file, or a note that it does not exist."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 16384))
            data = f.read().decode("utf-8", errors="replace")
    except OSError as exc:
        return f"<{path}: {exc.strerror}>"
    return "\n".join(data.splitlines()[-lines:])


def group_members(pgid: int) -> list[int]:
    """PIDs of the processes in process group ``pgid`` that still hold resources (Linux /proc).

    A zombie whose threads have all exited no longer holds files or ports and is left out; a
    multi-threaded process like ``beam.smp`` can show its main thread as a zombie while its
    other threads are still tearing down (and still hold its sockets), so that one counts.
    """
    members: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path("/proc", entry, "stat").read_text()
        except OSError:
            continue
        # Fields after the parenthesised command name: state(3) ppid(4) pgrp(5) ...
        # num_threads(20); index = field number - 3.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) < 18 or int(fields[2]) != pgid:
            continue
        if fields[0] in ("Z", "X") and int(fields[17]) <= 1:
            continue
        members.append(int(entry))
    return members


def wait_leader(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """Wait until the server script exits, *without reaping it*; True if it did.

    Not reaping keeps its PID (the process group id) reserved, so :func:`kill_group` can
    never signal an unrelated group that reused the number.
    """
    if proc.returncode is not None:
        return True
    deadline = time.monotonic() + timeout
    while True:
        try:
            info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        if info is not None and info.si_pid != 0:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def kill_group(proc: subprocess.Popen[bytes], ports: Sequence[int]) -> None:
    """SIGKILL every process in the group ``proc`` leads, wait until ``ports`` are free, then
    reap ``proc`` (the node's server script)."""
    if proc.returncode is None:
        # The group leader is unreaped (alive or zombie), so its PID, which is the group id,
        # cannot have been reused: the signal reaches only this node's processes.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        # Orphaned members (e.g. beam.smp after the script died) stay in the group. Wait
        # until they are gone and the node's listeners are closed, so that a restart()
        # right after finds its ports free.
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if group_members(proc.pid):
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            elif all(port_is_free(p) for p in ports):
                break
            time.sleep(0.02)
        proc.wait()


class PrivateProcess:
    """The life of a private broker's process group, shared by the test brokers: running or
    not, killed whole, restarted on the same ports and data, closed with its directories.

    A subclass starts the process (:meth:`start`, setting ``_proc``), stops it cleanly
    (:meth:`stop`), names its ports (:meth:`_ports`) and drops itself from its registry of
    open brokers (:meth:`_forget`).
    """

    _proc: subprocess.Popen[bytes] | None
    _closed: bool
    _owns_dir: bool
    base_dir: Path

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self, timeout: float = 30.0) -> None:
        raise NotImplementedError

    def _ports(self) -> list[int]:
        raise NotImplementedError

    def _forget(self) -> None:
        raise NotImplementedError

    def is_running(self) -> bool:
        """Whether the process started by this object is still alive."""
        return self._proc is not None and self._proc.poll() is None

    def _kill_group(self) -> None:
        if self._proc is not None:
            kill_group(self._proc, self._ports())

    def kill(self) -> None:
        """SIGKILL the whole process group (an unclean crash), leaving no orphan."""
        self._kill_group()

    def restart(self) -> Self:
        """Stop it if it runs, then start it again with the same ports and data."""
        if self.is_running():
            self.stop()
        self._proc = None
        return self.start()

    def close(self, graceful: bool = True) -> None:
        """Stop it and remove the directories this object created. Idempotent.

        :param graceful: :meth:`stop` it, or :meth:`kill` it (instant; fine when the data
            is thrown away anyway).
        """
        if self._closed:
            return
        try:
            if graceful:
                self.stop()
            else:
                self.kill()
        finally:
            self._closed = True
            self._forget()
            if self._owns_dir:
                shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        if not self.is_running():
            self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
