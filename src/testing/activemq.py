"""Throwaway private ActiveMQ 5 brokers, for tests and benchmarks.

:class:`LocalActiveMQ` runs the broker of Debian's ``activemq`` package (``/usr/share/activemq``;
a JRE 11+ runs it) as a private broker: its own base directory with a generated
``activemq.xml``, its own KahaDB store, its own free ports on 127.0.0.1, its log in a file. It
never reads ``/etc/activemq`` or ``/var/lib/activemq`` and never touches a system broker::

    with LocalActiveMQ() as broker:
        with broker.stomp() as client:
            client.send("work", b"hello")
        assert broker.queue_depth("work") == 1

What the broker has (:func:`~pumpd.testing.activemq_files.activemq_xml` says why):

* a STOMP connector (:attr:`LocalActiveMQ.stomp_port`): the tests' way into the broker, to
  put messages in, take them out and count a queue (:meth:`LocalActiveMQ.queue_depth`, a
  queue browser: nothing is consumed). STOMP is plain text over a socket, so the tests need
  neither a JMX connection (a heavy RMI port and JVM of its own per query) nor a client
  library; :mod:`pumpd.testing.stomp` is that client;
* an AMQP connector (:attr:`LocalActiveMQ.amqp_port`) when the installed ActiveMQ has the
  AMQP transport. **Debian's package does not**: Debian builds ActiveMQ without its
  ``activemq-amqp`` module (it needs Qpid Proton-J, which Debian does not package), and
  such a broker refuses an ``amqp://`` connector ("Transport scheme NOT recognized"). Then
  :attr:`~LocalActiveMQ.amqp_port` is ``None`` and :meth:`~LocalActiveMQ.amqp_url` raises,
  naming the reason. An upstream ActiveMQ 5 distribution (which has it) can be used with
  ``home=``;
* one user (``simpleAuthenticationPlugin``), anonymous access refused unless asked for;
* KahaDB in ``data/kahadb``: a persistent message that the broker acknowledged survives
  :meth:`~LocalActiveMQ.kill` (SIGKILL) and :meth:`~LocalActiveMQ.restart`;
* no JMX, no web console, no OpenWire connector.

The JVM's heap is bounded (256 MB by default). The default JVM options favour a fast start
over peak speed (the C1 compiler only, the serial collector); a benchmark passes
``jvm_options=BENCH_JVM_OPTIONS`` (both compilers, the parallel collector) and a bigger
``memory_limit_mb`` (ActiveMQ blocks producers when a queue's messages fill it).

Starting a broker takes 1.4 to 1.6 s on 2 idle CPUs with the test options (2 to 3.5 s while
other work loads them; two brokers started together, 2.7 s), about a second more with the
benchmark ones; :attr:`~LocalActiveMQ.last_start_seconds` holds the last one. Its JVM then
holds about 110 MB of memory and 30 threads. :meth:`~LocalActiveMQ.stop` (SIGTERM: the
broker's shutdown hook closes the connectors and the store) takes 0.1 to 0.3 s;
:meth:`~LocalActiveMQ.kill` is instant.

Like :class:`~pumpd.testing.localnode.LocalNode`, the broker runs in its own session and
process group (the JVM is its leader), and an :mod:`atexit` hook SIGKILLs every broker still
running at interpreter exit and removes the directories this module created.
"""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .activemq_files import (
    ACTIVEMQ_HOME,
    ActiveMQFiles,
    BrokerSettings,
    activemq_xml,
    has_transport,
)
from .amqp10_endpoint import SASL_HEADER, Amqp10Address, protocol_header_answer
from .node_errors import ActiveMQError
from .ports import LOCALHOST, broker_answers, find_free_port, port_is_free
from .processes import PrivateProcess, tail, wait_leader
from .stomp import StompClient, StompError

if TYPE_CHECKING:
    pass

__all__ = ["ACTIVEMQ_HOME", "BENCH_JVM_OPTIONS", "TEST_JVM_OPTIONS", "ActiveMQError",
           "LocalActiveMQ"]

#: JVM options for tests: a fast start (the C1 compiler only, the serial collector, which
#: also keeps the JVM's threads few on a 2-core machine).
TEST_JVM_OPTIONS: tuple[str, ...] = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
#: JVM options for benchmarks: both JIT compilers and the parallel collector.
BENCH_JVM_OPTIONS: tuple[str, ...] = ("-XX:+UseParallelGC",)

# Brokers created and not yet closed; the atexit hook kills them and removes their directories.
_open_brokers: set[LocalActiveMQ] = set()
_open_lock = threading.Lock()


def _default_java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.access(os.path.join(java_home, "bin", "java"), os.X_OK):
        return os.path.join(java_home, "bin", "java")
    return shutil.which("java") or "java"


class LocalActiveMQ(PrivateProcess):
    """A throwaway ActiveMQ broker with its own ports, store and configuration.

    Creating the object picks the ports and names but starts nothing; call :meth:`start` or use
    it as a context manager (``with LocalActiveMQ() as broker:`` starts it and, on exit, stops
    it and removes its directories).

    :param name: the broker's name (also in its directory's name); unique by default.
    :param base_dir: where configuration, data and log go; a fresh temporary directory
        (removed by :meth:`close`) by default. A given directory is never removed.
    :param home: the ActiveMQ installation (``bin/activemq.jar``, ``lib/``): Debian's by
        default; an upstream distribution's directory brings the AMQP transport.
    :param user: the one user, with ``password``; SASL PLAIN and STOMP logins use them.
    :param anonymous: whether connections without credentials are let in.
    :param heap_mb: the JVM's maximum heap (``-Xmx``).
    :param jvm_options: further JVM options (:data:`TEST_JVM_OPTIONS` by default).
    :param memory_limit_mb: the broker's memory limit for messages in flight; producers are
        blocked above it.
    :param amqp_transformer: how the AMQP connector stores AMQP messages: ``native`` (their
        encoded sections as they came: properties, application properties and annotations come
        back to an AMQP consumer unchanged) or ``jms`` (mapped onto JMS messages).
    :param start_timeout: seconds :meth:`start` waits for the broker to answer.
    """

    def __init__(
        self,
        *,
        name: str | None = None,
        base_dir: str | os.PathLike[str] | None = None,
        home: str | os.PathLike[str] = ACTIVEMQ_HOME,
        user: str = "pumpd",
        password: str = "pumpd-secret",
        anonymous: bool = False,
        heap_mb: int = 256,
        jvm_options: Sequence[str] = TEST_JVM_OPTIONS,
        memory_limit_mb: int = 64,
        amqp_transformer: str = "native",
        start_timeout: float = 60.0,
        java: str | None = None,
    ) -> None:
        if heap_mb < 64:
            raise ActiveMQError(f"heap_mb={heap_mb}: ActiveMQ needs at least 64 MB of heap")
        if not 1 <= memory_limit_mb < heap_mb:
            raise ActiveMQError(f"memory_limit_mb={memory_limit_mb}: must be at least 1 and "
                                f"below heap_mb={heap_mb}")
        self.name = name or f"pumpd-amq-{os.getpid()}-{secrets.token_hex(4)}"
        self.home = Path(home)
        self.user = user
        self.password = password
        self.anonymous = anonymous
        self.heap_mb = heap_mb
        self.jvm_options: tuple[str, ...] = tuple(jvm_options)
        self.memory_limit_mb = memory_limit_mb
        self.amqp_transformer = amqp_transformer
        self.start_timeout = start_timeout
        self.java = java or _default_java()
        self._owns_dir = base_dir is None
        if base_dir is None:
            self.base_dir = Path(tempfile.mkdtemp(prefix=f"{self.name}-"))
        else:
            self.base_dir = Path(base_dir)
        #: Its configuration, data and log files.
        self.files = ActiveMQFiles.under(self.base_dir)
        #: Whether the installation at ``home`` has the AMQP transport (Debian's has not).
        self.has_amqp = has_transport(self.home, "amqp")
        self.stomp_port = 0
        #: The AMQP 1.0 port, or ``None`` when the installation has no AMQP transport.
        self.amqp_port: int | None = None
        self._pick_ports()
        self._proc: subprocess.Popen[bytes] | None = None
        self._closed = False
        #: Seconds the last successful :meth:`start` took (from the JVM's launch until the
        #: broker answered a STOMP login, and the AMQP header if it has AMQP).
        self.last_start_seconds: float | None = None
        with _open_lock:
            _open_brokers.add(self)

    # ------------------------------------------------------------------------------- ports

    @property
    def pid(self) -> int | None:
        """PID of the JVM (also the process group id), or ``None`` if not started."""
        return self._proc.pid if self._proc is not None else None

    def _pick_ports(self) -> None:
        self.stomp_port = find_free_port()
        self.amqp_port = find_free_port() if self.has_amqp else None

    def _ports(self) -> list[int]:
        return [p for p in (self.stomp_port, self.amqp_port) if p is not None]

    def _settings(self) -> BrokerSettings:
        return BrokerSettings(
            broker_name=self.name, files=self.files, stomp_port=self.stomp_port,
            amqp_port=self.amqp_port, amqp_transformer=self.amqp_transformer, user=self.user,
            password=self.password, anonymous=self.anonymous,
            memory_limit_mb=self.memory_limit_mb,
        )

    def command(self) -> list[str]:
        """The command line that runs the broker (the JVM, in the foreground)."""
        f = self.files
        return [
            self.java,
            f"-Xmx{self.heap_mb}m",
            f"-Xms{min(64, self.heap_mb)}m",
            *self.jvm_options,
            f"-Djava.io.tmpdir={f.tmp_dir}",
            f"-Dlog4j.configuration=file:{f.log4j_file}",
            f"-Dactivemq.home={self.home}",
            f"-Dactivemq.base={f.base_dir}",
            f"-Dactivemq.conf={f.base_dir}",
            f"-Dactivemq.data={f.data_dir}",
            f"-Dactivemq.classpath={f.base_dir}",
            "-jar", str(self.home / "bin" / "activemq.jar"),
            "start", f"xbean:file:{f.config_file}",
        ]

    # --------------------------------------------------------------------------- lifecycle

    def start(self) -> LocalActiveMQ:
        """Start the broker and wait until it answers; returns ``self``.

        On the first start, if another process took a picked port in the meantime, new ports
        are picked and the start is retried (twice at most). Later starts (:meth:`restart`)
        keep the ports and the store.

        :raises ActiveMQError: ActiveMQ or Java is missing, or the broker died or did not
            answer within ``start_timeout``; the message quotes the end of its log.
        """
        if self._closed:
            raise ActiveMQError(f"ActiveMQ broker {self.name} was closed")
        if self.is_running():
            raise ActiveMQError(f"ActiveMQ broker {self.name} is already running")
        jar = self.home / "bin" / "activemq.jar"
        if not jar.is_file():
            raise ActiveMQError(f"{jar} not found; install Debian's activemq package "
                                "(apt-get install --no-install-recommends activemq)")
        if shutil.which(self.java) is None:
            raise ActiveMQError(f"no Java runtime at {self.java!r}; ActiveMQ 5.17 needs a JRE "
                                "11 or newer (apt-get install default-jre-headless)")
        first_start = not self.files.kahadb_dir.exists()
        attempts = 3 if first_start else 1
        for attempt in range(attempts):
            busy = [p for p in self._ports() if not port_is_free(p)]
            if busy:
                if first_start and attempt + 1 < attempts:
                    self._pick_ports()
                    continue
                raise ActiveMQError(f"ActiveMQ broker {self.name}: port(s) {busy} already "
                                    "in use")
            try:
                self._start_once()
                return self
            except _PortClash:
                if not first_start or attempt + 1 >= attempts:
                    raise
                self._pick_ports()
        raise AssertionError("unreachable")

    def _start_once(self) -> None:
        self.files.write(activemq_xml(self._settings()))
        began = time.monotonic()
        with self.files.log_file.open("ab") as log:
            log.write(f"\n=== pumpd.activemq: starting {self.name} ===\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                self.command(),
                cwd=self.base_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            self._await_startup(began + self.start_timeout)
        except BaseException:
            self._kill_group()
            raise
        self.last_start_seconds = time.monotonic() - began

    def _await_startup(self, deadline: float) -> None:
        """Wait until the connectors accept connections (they open once the store is loaded,
        at the end of the broker's start), the AMQP one answers the AMQP 1.0 SASL header, and
        a STOMP login succeeds."""
        for port in self._ports():
            while not broker_answers(LOCALHOST, port, timeout=0.5):
                self._check_alive()
                if time.monotonic() > deadline:
                    raise self._startup_error(f"port {port} did not open")
                time.sleep(0.05)
        if self.amqp_port is not None:
            answer = protocol_header_answer(LOCALHOST, self.amqp_port, SASL_HEADER)
            if answer != SASL_HEADER:
                raise self._startup_error(f"the AMQP port answered the AMQP 1.0 SASL header "
                                          f"with {answer!r}")
        while True:
            self._check_alive()
            try:
                self.stomp(timeout=max(0.5, min(5.0, deadline - time.monotonic()))).close()
                return
            except (OSError, StompError) as exc:
                if time.monotonic() > deadline:
                    raise self._startup_error(f"no STOMP login: {exc}") from exc
                time.sleep(0.1)

    def _check_alive(self) -> None:
        assert self._proc is not None
        if self._proc.poll() is not None:
            logs = self._log_tail()
            msg = (f"ActiveMQ broker {self.name} exited with status {self._proc.returncode} "
                   "while starting")
            if "Address already in use" in logs:
                raise _PortClash(f"{msg}; a port was taken:\n{logs}")
            raise ActiveMQError(f"{msg}:\n{logs}")

    def _startup_error(self, what: str) -> ActiveMQError:
        return ActiveMQError(
            f"ActiveMQ broker {self.name} did not start within {self.start_timeout:.0f} s "
            f"({what}):\n{self._log_tail()}"
        )

    def _log_tail(self) -> str:
        return f"--- {self.files.log_file} ---\n{tail(self.files.log_file, lines=60)}"

    def answers(self, timeout: float = 1.0) -> bool:
        """Whether the broker's STOMP port accepts TCP connections."""
        return broker_answers(LOCALHOST, self.stomp_port, timeout)

    def ensure_running(self, fresh_on_failure: bool = False) -> LocalActiveMQ:
        """Restart the broker (same ports and store) unless it is running and answers.

        :param fresh_on_failure: when the restart fails, move the store aside
            (``data.broken-N``, kept for a look) and start the broker empty, so that one
            broken store does not fail every later test that shares the broker.
        """
        if self.is_running() and self.answers():
            return self
        try:
            return self.restart()
        except ActiveMQError:
            if not fresh_on_failure:
                raise
            self._kill_group()
            self._proc = None
            n = len(list(self.base_dir.glob("data.broken-*")))
            self.files.data_dir.rename(self.files.data_dir.with_name(f"data.broken-{n}"))
            return self.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the broker cleanly (SIGTERM: its shutdown hook closes the connectors and the
        store), or SIGKILL it if it has not exited within ``timeout`` seconds."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            try:
                os.kill(self._proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            wait_leader(self._proc, timeout)
        self._kill_group()

    def _forget(self) -> None:
        with _open_lock:
            _open_brokers.discard(self)

    # ----------------------------------------------------------------------------- clients

    def amqp_address(self, user: str | None = None, password: str | None = None, *,
                     anonymous: bool = False) -> Amqp10Address:
        """The AMQP 1.0 listener and an identity: the broker's user by default, another
        ``user``/``password`` (e.g. a wrong one), or SASL ANONYMOUS with ``anonymous``.

        :raises ActiveMQError: the installation has no AMQP transport (Debian's).
        """
        if self.amqp_port is None:
            raise ActiveMQError(
                f"the ActiveMQ at {self.home} has no AMQP transport (no jar registers "
                "org/apache/activemq/transport/amqp): Debian builds ActiveMQ without its "
                "activemq-amqp module; use an upstream ActiveMQ 5 distribution (home=...)"
            )
        if anonymous:
            return Amqp10Address(LOCALHOST, self.amqp_port, None, None)
        return Amqp10Address(LOCALHOST, self.amqp_port, self.user if user is None else user,
                             self.password if password is None else password)

    def amqp_url(self, user: str | None = None, password: str | None = None) -> str:
        """``amqp://user:password@127.0.0.1:PORT`` (the broker's user by default).

        :raises ActiveMQError: the installation has no AMQP transport (Debian's).
        """
        return self.amqp_address(user, password).url()

    def stomp(self, user: str | None = None, password: str | None = None, *,
              anonymous: bool = False, timeout: float = 10.0) -> StompClient:
        """A logged-in STOMP connection (the broker's user by default); close it after use.

        :raises StompError: the login was refused.
        """
        if anonymous:
            return StompClient(LOCALHOST, self.stomp_port, None, None, timeout=timeout)
        return StompClient(LOCALHOST, self.stomp_port, self.user if user is None else user,
                           self.password if password is None else password, timeout=timeout)

    def queue_depth(self, queue: str) -> int:
        """How many messages ``queue`` holds (ready, or delivered and not yet acknowledged),
        counted with a STOMP queue browser; nothing is consumed."""
        with self.stomp() as client:
            return client.browse_count(queue)

    # ---------------------------------------------------------------------- context manager

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        return (f"<LocalActiveMQ {self.name} stomp={self.stomp_port} amqp={self.amqp_port} "
                f"{state}>")


class _PortClash(ActiveMQError):
    """The broker died at start because a picked port was taken (retried with new ports)."""


@atexit.register
def _kill_open_brokers() -> None:
    """SIGKILL brokers still open at interpreter exit and remove their temporary dirs."""
    with _open_lock:
        brokers = list(_open_brokers)
    for broker in brokers:
        try:
            broker.kill()
        finally:
            broker._closed = True
            if broker._owns_dir:
                shutil.rmtree(broker.base_dir, ignore_errors=True)
