"""Talking to a private node: ``rabbitmqctl`` with its cookie, AMQP URIs, the management API.

:class:`NodeControl` is the part of :class:`pumpd.testing.localnode.LocalNode` that needs only the
node's name, files and ports, not its process.
"""

from __future__ import annotations

import base64
import json
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

from .amqp10_endpoint import Amqp10Address
from .node_errors import LocalNodeError, ManagementHTTPError
from .nodefiles import AMQP10_PLUGIN, NodeFiles, node_environment
from .ports import LOCALHOST

#: The control CLI that talks to a node with the cookie found in ``$HOME``.
CTL = "/usr/lib/rabbitmq/bin/rabbitmqctl"


class NodeControl:
    """rabbitmqctl and the management API of one node, by its name, files and ports (set by
    :class:`~pumpd.testing.localnode.LocalNode`)."""

    #: Full Erlang node name, e.g. ``pumpd-123-0a1b2c3d@localhost``.
    nodename: str
    #: The plugins enabled on the node.
    plugins: tuple[str, ...]
    files: NodeFiles
    amqp_port: int
    dist_port: int
    #: The management HTTP port, or ``None`` without ``rabbitmq_management``.
    management_port: int | None

    def run_ctl(self, args: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str]:
        """``rabbitmqctl -n NODE ARGS...``, whatever its exit status (see :meth:`ctl`)."""
        return subprocess.run(
            [CTL, "-n", self.nodename, *args],
            check=False,
            env=node_environment(self.files, self.nodename, self.dist_port),
            cwd=self.files.base_dir,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def ctl(self, *args: str, timeout: float = 60.0) -> str:
        """Run ``rabbitmqctl -n NODE ARGS...`` against this node and return its stdout.

        :raises LocalNodeError: non-zero exit status (the message has stdout and stderr) or
            timeout.
        """
        try:
            result = self.run_ctl(args, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise LocalNodeError(
                f"rabbitmqctl {' '.join(args)}: timed out after {timeout} s"
            ) from exc
        if result.returncode != 0:
            raise LocalNodeError(
                f"rabbitmqctl -n {self.nodename} {' '.join(args)} exited {result.returncode}:\n"
                f"{result.stderr.strip()}\n{result.stdout.strip()}"
            )
        return result.stdout

    def uri(self, vhost: str = "/", user: str = "guest", password: str = "guest") -> str:
        """An ``amqp://`` URI for this node; the vhost, user and password are percent-encoded."""
        q = urllib.parse.quote
        return (
            f"amqp://{q(user, safe='')}:{q(password, safe='')}@{LOCALHOST}:{self.amqp_port}/"
            f"{q(vhost, safe='')}"
        )

    def amqp10_address(self, vhost: str = "/", user: str = "guest",
                       password: str = "guest") -> Amqp10Address:
        """Where an AMQP 1.0 client reaches ``vhost``: the AMQP port (the plugin tells AMQP 1.0
        from 0-9-1 by the protocol header) and the ``open`` hostname ``vhost:NAME``.

        :raises LocalNodeError: the node runs without ``rabbitmq_amqp1_0``.
        """
        if AMQP10_PLUGIN not in self.plugins:
            raise LocalNodeError(f"{self.nodename} runs without {AMQP10_PLUGIN}: it does not "
                                 "speak AMQP 1.0")
        return Amqp10Address(LOCALHOST, self.amqp_port, user, password, f"vhost:{vhost}")

    def add_vhost(self, vhost: str, *, grant_guest: bool = True) -> None:
        """Create ``vhost``; by default give ``guest`` full permissions on it."""
        self.ctl("add_vhost", vhost)
        if grant_guest:
            self.ctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")

    def delete_vhost(self, vhost: str) -> None:
        """Delete ``vhost`` and everything in it."""
        self.ctl("delete_vhost", vhost)

    def add_user(
        self,
        user: str,
        password: str,
        vhost: str = "/",
        configure: str = ".*",
        write: str = ".*",
        read: str = ".*",
    ) -> None:
        """Create ``user`` with ``password`` and the given permissions on ``vhost``."""
        self.ctl("add_user", user, password)
        self.ctl("set_permissions", "-p", vhost, user, configure, write, read)

    def set_vm_memory_high_watermark(self, fraction: float) -> None:
        """Set the memory alarm threshold (fraction of RAM). ``0`` raises the alarm at once,
        blocking every publishing connection; ``0.4`` (RabbitMQ's default) clears it."""
        self.ctl("set_vm_memory_high_watermark", repr(float(fraction)))

    def management_request(self, method: str, path: str, body: Any = None) -> Any:
        """Call the management HTTP API as guest/guest; returns the decoded JSON (or ``None``).

        :param path: e.g. ``/api/overview``; the caller percent-encodes vhost names
            (``/api/queues/%2F``).
        :param body: sent as JSON when not ``None``.
        :raises ManagementHTTPError: on an HTTP error status.
        """
        if self.management_port is None:
            raise LocalNodeError(f"{self.nodename} runs without rabbitmq_management")
        url = f"http://{LOCALHOST}:{self.management_port}/{path.lstrip('/')}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method.upper())
        request.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            text = exc.read().decode("utf-8", errors="replace")
            raise ManagementHTTPError(method.upper(), url, exc.code, text) from exc
        return json.loads(raw) if raw.strip() else None
