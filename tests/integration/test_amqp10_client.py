"""pumpd's AMQP 1.0 client against a real RabbitMQ node (the ``rabbitmq_amqp1_0`` plugin on the
AMQP port, and on a TLS port): messages through a queue in both settle modes with the credit
bound held, delivery numbers past 2^16, a message in many frames, TLS, a stream read from the
offset a filter names, and the broker's refusals as clean errors naming their step.

The node is this module's own until the shared fixtures start nodes with the plugin."""

from __future__ import annotations

import asyncio
import os
import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pumpd.amqp10.connection import Connection, connect
from pumpd.amqp10.errors import Amqp10Error
from pumpd.amqp10.link import Receiver, Sender
from pumpd.amqp10.message import Message, decode_message, encode_message
from pumpd.amqp10.performatives import Accepted
from pumpd.testing.localnode import LocalNode

from tests.support.amqp10_peer import run_on
from tests.support.amqp_helpers import blocking_connection
from tests.support.tls_helpers import make_certs, server_listener

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("amqp10-certs"))


@pytest.fixture(scope="module")
def node(certs: Path) -> Iterator[LocalNode]:
    """A node that speaks AMQP 1.0 on its AMQP port, and on its TLS port."""
    tls = server_listener(certs, require_client_cert=False)
    with LocalNode(plugins=["rabbitmq_amqp1_0"], tls=tls) as n:
        yield n


@pytest.fixture
def vhost(node: LocalNode) -> Iterator[str]:
    name = f"amqp10-{uuid.uuid4().hex[:8]}"
    node.add_vhost(name)
    yield name
    node.delete_vhost(name)


def _queue(node: LocalNode, vhost: str) -> str:
    name = f"q-{uuid.uuid4().hex[:6]}"
    with blocking_connection(node.uri(vhost)) as c:
        c.channel().queue_declare(name)
    return name


def _depth(node: LocalNode, vhost: str, queue: str) -> int:
    with blocking_connection(node.uri(vhost)) as c:
        return int(c.channel().queue_declare(queue, passive=True).method.message_count)


async def _open(node: LocalNode, vhost: str, **kw: Any) -> Connection:
    kw.setdefault("password", "guest")
    kw.setdefault("port", node.amqp_port)
    return await connect(host="127.0.0.1", sasl="plain", username="guest",
                         hostname=f"vhost:{vhost}", container_id="pumpd-test",
                         step_timeout=30, **kw)


def _payload(i: int, size: int = 64) -> bytes:
    return encode_message(Message(body=[b"%08d" % i + bytes(size - 8)]))


def _body(payload: bytes) -> bytes:
    body = decode_message(payload).body
    assert len(body) == 1
    return bytes(body[0])


async def _send_all(sender: Sender, payloads: list[bytes], *, settled: bool) -> list[int]:
    """Send every payload within the credit, waiting for more when none is left."""
    more = asyncio.Event()
    sender.on_credit(more.set)
    numbers: list[int] = []
    while len(numbers) < len(payloads):
        if sender.credit == 0:
            more.clear()
            await asyncio.wait_for(more.wait(), 30)
            continue
        for _ in range(min(sender.credit, len(payloads) - len(numbers), 1000)):
            numbers.append(sender.send(payloads[len(numbers)], settled=settled))
        await asyncio.sleep(0)
    return numbers


async def _until(predicate: Any, timeout: float = 120.0) -> None:
    async def wait() -> None:
        while not predicate():
            await asyncio.sleep(0.01)
    await asyncio.wait_for(wait(), timeout)


def _accepted(sender: Sender) -> list[tuple[int, int]]:
    ranges: list[tuple[int, int]] = []

    def on_disposition(first: int, last: int, state: Any) -> None:
        assert isinstance(state, Accepted), state
        ranges.append((first, last))

    sender.on_disposition(on_disposition)
    return ranges


class _Consumer:
    """Takes deliveries and settles them a few loop iterations late, in ranges (as a pump
    does), noting the most that were ever unsettled."""

    def __init__(self, receiver: Receiver, settle: bool) -> None:
        self.receiver = receiver
        self.bodies: list[bytes] = []
        self.numbers: list[int] = []
        self.most_unsettled = 0
        self._first_unsettled: int | None = None
        self._settle = settle
        receiver.on_transfer(self.on_transfer)

    def on_transfer(self, delivery: int, payload: bytes, settled: bool) -> None:
        assert settled is not self._settle
        self.numbers.append(delivery)
        self.bodies.append(_body(payload))
        self.most_unsettled = max(self.most_unsettled, self.receiver.unsettled)
        if self._settle and self._first_unsettled is None:
            self._first_unsettled = delivery
            asyncio.get_running_loop().call_later(0.002, self.settle)

    def settle(self) -> None:
        assert self._first_unsettled is not None
        self.receiver.settle(self._first_unsettled, self.numbers[-1], Accepted())
        self._first_unsettled = None


@pytest.mark.parametrize(("count", "loop"), [(10_000, "asyncio"), (10_000, "uvloop"),
                                             (70_000, "uvloop")],
                         ids=["10k-asyncio", "10k-uvloop", "past-2^16-uvloop"])
def test_messages_sent_and_received_unsettled_with_the_credit_bound_held(
        node: LocalNode, vhost: str, count: int, loop: str) -> None:
    queue = _queue(node, vhost)
    payloads = [_payload(i) for i in range(count)]
    credit = 50

    async def main() -> _Consumer:
        c = await _open(node, vhost)
        s = await c.begin()
        sender = await s.attach_sender(f"/amq/queue/{queue}", name="out")
        accepted = _accepted(sender)
        numbers = await _send_all(sender, payloads, settled=False)
        assert numbers == list(range(count))
        await _until(lambda: sum(b - a + 1 for a, b in accepted) >= count)
        assert sorted(n for a, b in accepted for n in range(a, b + 1)) == numbers
        await sender.detach()
        receiver = await s.attach_receiver(f"/amq/queue/{queue}", name="in", credit=credit)
        consumer = _Consumer(receiver, settle=True)
        await _until(lambda: len(consumer.bodies) == count and receiver.unsettled == 0)
        await asyncio.sleep(0.05)  # the last dispositions out
        await receiver.detach()
        await c.close()
        return consumer

    consumer = run_on(loop, main)
    assert consumer.bodies == [_body(p) for p in payloads]
    assert consumer.numbers == list(range(consumer.numbers[0], consumer.numbers[0] + count))
    assert consumer.most_unsettled <= credit
    assert _depth(node, vhost, queue) == 0


def test_ten_thousand_messages_pre_settled(node: LocalNode, vhost: str) -> None:
    queue = _queue(node, vhost)
    count = 10_000
    payloads = [_payload(i) for i in range(count)]

    async def main() -> _Consumer:
        c = await _open(node, vhost)
        s = await c.begin()
        sender = await s.attach_sender(f"/amq/queue/{queue}", name="out", settled=True)
        accepted = _accepted(sender)
        await _send_all(sender, payloads, settled=True)
        await _until(lambda: _depth(node, vhost, queue) == count)
        assert accepted == []
        receiver = await s.attach_receiver(f"/amq/queue/{queue}", name="in", credit=100,
                                           settle_mode="settled")
        consumer = _Consumer(receiver, settle=False)
        await _until(lambda: len(consumer.bodies) == count)
        await c.close()
        return consumer

    consumer = run_on("uvloop", main)
    assert consumer.bodies == [_body(p) for p in payloads]
    assert consumer.most_unsettled == 0
    assert _depth(node, vhost, queue) == 0


def test_a_message_of_one_mebibyte_in_frames_of_4_kib(node: LocalNode, vhost: str) -> None:
    queue = _queue(node, vhost)
    body = os.urandom(1 << 20)

    async def main() -> bytes:
        c = await _open(node, vhost, max_frame_size=4096)
        assert c.remote_max_frame_size == 4096
        s = await c.begin()
        sender = await s.attach_sender(f"/amq/queue/{queue}", name="out")
        accepted = _accepted(sender)
        await _send_all(sender, [encode_message(Message(body=[body]))], settled=False)
        await _until(lambda: accepted == [(0, 0)])
        receiver = await s.attach_receiver(f"/amq/queue/{queue}", name="in", credit=1)
        got: list[bytes] = []
        receiver.on_transfer(lambda d, payload, settled: got.append(payload))
        await _until(lambda: len(got) == 1)
        receiver.settle(0, 0, Accepted())
        await c.close()
        return got[0]

    assert _body(asyncio.run(main())) == body
    assert _depth(node, vhost, queue) == 0


def test_a_wrong_password_is_a_sasl_error_with_the_outcome_code(node: LocalNode,
                                                                 vhost: str) -> None:
    async def main() -> Amqp10Error:
        with pytest.raises(Amqp10Error) as info:
            await _open(node, vhost, password="not-the-pass-w0rd")
        return info.value

    err = asyncio.run(main())
    assert str(err) == (f"AMQP 1.0 127.0.0.1:{node.amqp_port}: sasl: the peer refused SASL "
                        "PLAIN login with outcome code 1 (auth: authentication failed (wrong "
                        "username or password?))")


def test_a_queue_that_does_not_exist_is_an_attach_error_naming_it(node: LocalNode,
                                                                  vhost: str) -> None:
    async def main() -> tuple[Amqp10Error, BaseException]:
        c = await _open(node, vhost)
        s = await c.begin()
        with pytest.raises(Amqp10Error) as info:
            await s.attach_receiver("/amq/queue/no-such-queue", name="in", credit=1)
        return info.value, await asyncio.wait_for(c.closed, 10)

    err, closed = asyncio.run(main())
    assert (err.step, err.what, err.condition) == \
        ("attach /amq/queue/no-such-queue", "the peer ended the session", "amqp:not-found")
    assert err.description == f"NOT_FOUND - no queue 'no-such-queue' in vhost '{vhost}'"
    assert isinstance(closed, Amqp10Error) and closed.condition == "amqp:not-found"


def test_a_vhost_the_user_may_not_use_closes_the_connection_with_the_brokers_error(
        node: LocalNode) -> None:
    async def main() -> Amqp10Error:
        c = await _open(node, "no-such-vhost")
        with pytest.raises(Amqp10Error) as info:
            await c.begin()
        assert c.closed.done()
        return info.value

    err = asyncio.run(main())
    assert (err.step, err.what, err.condition) == \
        ("begin", "the peer closed the connection", "amqp:unauthorized-access")
    assert "guest" in (err.description or "")


def _trusting(certs: Path, ca: str) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(certs / f"{ca}.pem"))
    context.load_cert_chain(str(certs / "client.pem"), str(certs / "client.key"))
    return context


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_messages_over_tls(node: LocalNode, vhost: str, certs: Path, loop: str) -> None:
    queue = _queue(node, vhost)
    payloads = [_payload(i, size=2000) for i in range(500)]

    async def main() -> list[bytes]:
        assert node.tls_port is not None
        c = await _open(node, vhost, port=node.tls_port, ssl=_trusting(certs, "ca"),
                        max_frame_size=1024)
        s = await c.begin()
        sender = await s.attach_sender(f"/amq/queue/{queue}", name="out")
        accepted = _accepted(sender)
        await _send_all(sender, payloads, settled=False)
        await _until(lambda: sum(b - a + 1 for a, b in accepted) == len(payloads))
        receiver = await s.attach_receiver(f"/amq/queue/{queue}", name="in", credit=20)
        consumer = _Consumer(receiver, settle=True)
        await _until(lambda: len(consumer.bodies) == len(payloads) and receiver.unsettled == 0)
        await asyncio.sleep(0.05)
        await c.close()
        return consumer.bodies

    assert run_on(loop, main) == [_body(p) for p in payloads]
    assert _depth(node, vhost, queue) == 0


def test_a_server_certificate_the_client_does_not_trust_is_a_tls_error(
        node: LocalNode, vhost: str, certs: Path) -> None:
    async def main() -> Amqp10Error:
        assert node.tls_port is not None
        with pytest.raises(Amqp10Error) as info:
            await _open(node, vhost, port=node.tls_port, ssl=_trusting(certs, "other-ca"))
        return info.value

    err = run_on("uvloop", main)
    assert err.step == "tls" and "CERTIFICATE_VERIFY_FAILED" in err.what, err


@pytest.mark.parametrize(("spec", "first"), [("first", 0), (60, 60)])
def test_a_stream_read_from_the_offset_its_filter_names(node: LocalNode, vhost: str,
                                                        spec: Any, first: int) -> None:
    stream = f"s-{uuid.uuid4().hex[:6]}"
    with blocking_connection(node.uri(vhost)) as conn:
        conn.channel().queue_declare(stream, durable=True,
                                     arguments={"x-queue-type": "stream"})
    payloads = [_payload(i) for i in range(100)]

    async def main() -> list[bytes]:
        c = await _open(node, vhost)
        s = await c.begin()
        sender = await s.attach_sender(f"/amq/queue/{stream}", name="out")
        accepted = _accepted(sender)
        await _send_all(sender, payloads, settled=False)
        await _until(lambda: sum(b - a + 1 for a, b in accepted) == len(payloads))
        receiver = await s.attach_receiver(f"/amq/queue/{stream}", name="in", credit=10,
                                           filters={"rabbitmq:stream-offset-spec": spec})
        got: list[bytes] = []

        def on_transfer(delivery: int, payload: bytes, settled: bool) -> None:
            got.append(payload)
            receiver.settle(delivery, delivery, Accepted())

        receiver.on_transfer(on_transfer)
        await _until(lambda: len(got) >= 100 - first)
        await asyncio.sleep(0.2)  # nothing more comes
        await c.close()
        return got

    got = run_on("uvloop", main)
    # RabbitMQ 3.10 re-encodes what precedes the body (and names the offset in a message
    # annotation): the body section comes as sent
    assert len(got) == 100 - first
    assert all(g.endswith(p) for g, p in zip(got, payloads[first:], strict=True))


def test_connections_closed_by_the_broker_set_closed_with_its_error(node: LocalNode,
                                                                    vhost: str) -> None:
    queue = _queue(node, vhost)

    async def main() -> BaseException:
        c = await _open(node, vhost)
        s = await c.begin()
        await s.attach_receiver(f"/amq/queue/{queue}", name="in", credit=5)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, node.ctl, "close_all_connections", "-p", vhost,
                                   "test says bye")
        return await asyncio.wait_for(c.closed, 30)

    cause = run_on("uvloop", main)
    # RabbitMQ 3.10 ends the AMQP 1.0 session when its 0-9-1 connection inside is closed
    assert isinstance(cause, Amqp10Error)
    assert (cause.step, cause.what, cause.condition) == \
        ("session", "the peer ended the session", "amqp:internal-error")
    assert "server_initiated_close,320" in (cause.description or "")
