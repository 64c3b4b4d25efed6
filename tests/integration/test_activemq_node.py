"""Tests of pumpd.testing.activemq (private ActiveMQ brokers) and of the ``activemq`` fixtures.

A pair of tests is ordered: the first leaves the session's broker killed, the second checks that
the fixture restarts it. Run alone, the second one passes trivially."""

from __future__ import annotations

from pathlib import Path

import pytest
from pumpd.testing import LocalActiveMQ
from pumpd.testing.activemq import ActiveMQError
from pumpd.testing.activemq_files import ACTIVEMQ_HOME, has_transport
from pumpd.testing.amqp10_endpoint import SASL_HEADER, protocol_header_answer
from pumpd.testing.ports import broker_answers
from pumpd.testing.stomp import StompError

from tests.support.listening_sockets import listening_sockets

# The ports of a default ActiveMQ (OpenWire, AMQP, STOMP, MQTT, WebSockets, the web console,
# JMX's RMI registry): a private broker must take none of them.
ACTIVEMQ_DEFAULT_PORTS = {61616, 5672, 61613, 1883, 61614, 8161, 1099}
NO_AMQP = "Debian's activemq has no AMQP transport (activemq-amqp is left out of its build)"


def test_broker_listens_only_on_its_own_loopback_ports(activemq: LocalActiveMQ) -> None:
    assert activemq.pid is not None
    expected = {("127.0.0.1", p) for p in (activemq.stomp_port, activemq.amqp_port)
                if p is not None}
    assert listening_sockets(activemq.pid) == expected
    assert not {port for _, port in expected} & ACTIVEMQ_DEFAULT_PORTS
    cmdline = Path("/proc", str(activemq.pid), "cmdline").read_bytes().split(b"\0")
    assert b"-Xmx256m" in cmdline
    assert activemq.last_start_seconds is not None and activemq.last_start_seconds > 0


def test_send_take_and_count_over_stomp(activemq: LocalActiveMQ, activemq_queue: str) -> None:
    with activemq.stomp() as client:
        for i in range(20):
            client.send(activemq_queue, f"m{i}".encode(), {"i": str(i), "odd:key": "a\nb"})
    assert activemq.queue_depth(activemq_queue) == 20
    assert activemq.queue_depth(activemq_queue) == 20  # a browse consumes nothing

    with activemq.stomp() as client:
        got = client.take(activemq_queue, 5)

    assert [m.body for m in got] == [f"m{i}".encode() for i in range(5)]
    assert [m.headers["i"] for m in got] == [str(i) for i in range(5)]
    assert got[0].headers["odd:key"] == "a\nb"
    assert got[0].headers["persistent"] == "true"
    assert activemq.queue_depth(activemq_queue) == 15


def test_a_body_with_nul_bytes_round_trips(activemq: LocalActiveMQ, activemq_queue: str) -> None:
    body = bytes(range(256)) * 4
    with activemq.stomp() as client:
        client.send(activemq_queue, body)
        [got] = client.take(activemq_queue, 1)
    assert got.body == body


def test_count_includes_messages_delivered_and_not_acknowledged(
    activemq: LocalActiveMQ, activemq_queue: str
) -> None:
    with activemq.stomp() as client:
        for i in range(3):
            client.send(activemq_queue, f"m{i}".encode())
    with activemq.stomp() as holder:
        holder.subscribe(activemq_queue, headers={"activemq.prefetchSize": "1"})
        holder.receive()
        assert activemq.queue_depth(activemq_queue) == 3
    # the holder closed without an ack: its message is back in the queue
    assert activemq.queue_depth(activemq_queue) == 3


# ActiveMQ refuses a login with an ERROR frame ("... password is invalid") and closes the
# connection; now and then the close overtakes the frame, and the refusal comes without reason
REFUSED = r"STOMP login as .* refused: (.*password is invalid|the broker closed the connection)"


def test_logins_need_the_password(activemq: LocalActiveMQ) -> None:
    with pytest.raises(StompError, match=REFUSED):
        activemq.stomp(password="wrong")
    with pytest.raises(StompError, match=REFUSED):
        activemq.stomp(anonymous=True)
    with pytest.raises(StompError, match=REFUSED):
        activemq.stomp(user="nobody", password=activemq.password)


def test_a_persistent_message_survives_kill_and_restart(
    activemq: LocalActiveMQ, activemq_queue: str
) -> None:
    with activemq.stomp() as client:
        client.send(activemq_queue, b"kept", {"n": "1"}, persistent=True)
        client.send(activemq_queue, b"lost", persistent=False)
    assert activemq.queue_depth(activemq_queue) == 2
    stomp_port = activemq.stomp_port

    activemq.kill()

    assert not activemq.is_running()
    assert not broker_answers("127.0.0.1", stomp_port, timeout=0.5)
    activemq.restart()
    assert activemq.stomp_port == stomp_port
    # the non-persistent message was only in the killed JVM's memory
    assert activemq.queue_depth(activemq_queue) == 1
    with activemq.stomp() as client:
        [got] = client.take(activemq_queue, 1)
    assert (got.body, got.headers["n"]) == (b"kept", "1")


def test_stop_is_clean_and_keeps_the_store(activemq: LocalActiveMQ, activemq_queue: str) -> None:
    with activemq.stomp() as client:
        client.send(activemq_queue, b"one")
    log_before = activemq.files.log_file.stat().st_size

    activemq.stop()

    assert not activemq.is_running()
    with activemq.files.log_file.open("rb") as log:
        log.seek(log_before)
        stopped = log.read().decode("utf-8", "replace")
    assert "is shutting down" in stopped and "is shutdown" in stopped, stopped[-2000:]
    activemq.start()
    assert activemq.queue_depth(activemq_queue) == 1


def test_two_brokers_run_at_once_apart(activemq: LocalActiveMQ, activemq_queue: str,
                                        tmp_path: Path) -> None:
    with LocalActiveMQ(base_dir=tmp_path / "second", user="other", password="p2") as second:
        assert second.stomp_port != activemq.stomp_port
        assert second.files.kahadb_dir.parent.parent == tmp_path / "second"
        with second.stomp() as client:
            client.send(activemq_queue, b"in the second")
        with pytest.raises(StompError):
            second.stomp(user=activemq.user, password=activemq.password)

        assert second.queue_depth(activemq_queue) == 1
        assert activemq.queue_depth(activemq_queue) == 0
    assert not second.is_running()
    assert (tmp_path / "second").is_dir()  # a given base_dir is kept


def test_a_start_failure_quotes_the_log(tmp_path: Path) -> None:
    broker = LocalActiveMQ(base_dir=tmp_path, jvm_options=["-XX:+NoSuchOptionAnywhere"])
    try:
        with pytest.raises(ActiveMQError, match=r"(?s)exited with status.*NoSuchOptionAnywhere"):
            broker.start()
        assert not broker.is_running()
    finally:
        broker.close()


@pytest.mark.skipif(not has_transport(ACTIVEMQ_HOME, "amqp"), reason=NO_AMQP)
def test_amqp_listener_answers_the_sasl_header(activemq: LocalActiveMQ) -> None:
    assert activemq.amqp_port is not None
    assert protocol_header_answer("127.0.0.1", activemq.amqp_port) == SASL_HEADER
    address = activemq.amqp_address()
    assert (address.user, address.password) == (activemq.user, activemq.password)
    assert activemq.amqp_url() == address.url()


def test_amqp_url_names_a_missing_transport(activemq: LocalActiveMQ) -> None:
    if activemq.has_amqp:
        pytest.skip("this ActiveMQ has the AMQP transport")
    assert activemq.amqp_port is None
    with pytest.raises(ActiveMQError, match=r"no AMQP transport.*activemq-amqp"):
        activemq.amqp_url()


def test_fixture_pair_1_kill_the_session_broker(activemq: LocalActiveMQ) -> None:
    activemq.kill()
    assert not activemq.is_running()


def test_fixture_pair_2_broker_is_running_again(activemq: LocalActiveMQ) -> None:
    assert activemq.is_running() and activemq.answers()
    with activemq.stomp() as client:
        client.send("fixture-pair", b"x", persistent=False)
