"""How long a Spark write's task tries again to connect to a broker that is away (the option
connectWaitMs): what counts as passing, how the waits grow, and that anything else fails the
attempt at once. No Spark, no broker: the connect calls are functions that fail on cue."""

from __future__ import annotations

import time
from typing import Any

import pytest
from pumpd.engine.link_errors import LinkError
from pumpd.spark.read.streams.wire import StreamsConnectError, StreamsError
from pumpd.spark.write import partition
from pumpd.spark.write.partition import patiently
from pumpd.spark.write.stream_partition import StreamPartitionPublisher
from pumpd.spark.write.write_options import parse_options
from pumpd.streams.codes import STREAM_NOT_AVAILABLE

URI = "amqp://guest@127.0.0.1:5672/%2F"


@pytest.mark.parametrize("value,wait", [(None, 60.0), ("0", 0.0), ("1500", 1.5),
                                        ("3600000", 3600.0)])
def test_connect_wait_is_read_in_milliseconds(value: str | None, wait: float) -> None:
    options = {"uri": URI, **({"connectWaitMs": value} if value is not None else {})}
    assert parse_options(options).connect_wait == wait


@pytest.mark.parametrize("value", ["-1", "3600001", "soon"])
def test_a_bad_connect_wait_is_refused_by_name(value: str) -> None:
    with pytest.raises(ValueError, match="pumpd option connectWaitMs"):
        parse_options({"uri": URI, "connectWaitMs": value})


class _Flaky:
    """Fails with ``errors`` in turn, then answers "connected"."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "connected"


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits between tries, recorded instead of slept."""
    waits: list[float] = []
    monkeypatch.setattr(partition.time, "sleep", waits.append)
    return waits


def test_a_passing_failure_is_tried_again_with_growing_waits(sleeps: list[float]) -> None:
    flaky = _Flaky(*(ConnectionRefusedError("refused") for _ in range(7)))
    assert patiently(flaky, 60, lambda e: True, "partition 0") == "connected"
    assert flaky.calls == 8
    assert sleeps == [0.25, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0]


def test_any_other_failure_fails_at_once(sleeps: list[float]) -> None:
    flaky = _Flaky(ValueError("wrong password"))
    with pytest.raises(ValueError, match="wrong password"):
        patiently(flaky, 60, lambda e: not isinstance(e, ValueError), "partition 0")
    assert flaky.calls == 1 and sleeps == []


def test_no_wait_left_raises_the_last_failure() -> None:
    flaky = _Flaky(*(ConnectionRefusedError(f"refused {i}") for i in range(100)))
    began = time.monotonic()
    with pytest.raises(ConnectionRefusedError, match="refused"):
        patiently(flaky, 0.6, lambda e: True, "partition 0")
    assert 0.5 <= time.monotonic() - began < 5
    assert 2 <= flaky.calls < 100


@pytest.mark.parametrize("error,passes", [
    (LinkError("connect failed: connection refused"), True),
    (LinkError("connection closed: 320 CONNECTION_FORCED - shutdown", reply_code=320), True),
    (OSError("network unreachable"), True),
    (LinkError("authentication refused for user 'guest' (vhost '/'): 403 ACCESS_REFUSED",
               reply_code=403), False),
    (LinkError("authentication refused for user 'guest' (vhost '/'): the connection ended "
               "during the login, no reason given"), False),
    (LinkError("access refused to vhost 'v' for user 'u': 530 NOT_ALLOWED", reply_code=530),
     False),
    (LinkError("channel closed: 404 NOT_FOUND - no exchange 'x'", reply_code=404), False),
])
def test_the_queue_write_waits_for_a_connection_not_for_a_refusal(error: BaseException,
                                                                   passes: bool) -> None:
    assert partition._no_connection(error) is passes


@pytest.mark.parametrize("error,passes", [
    (StreamsConnectError("127.0.0.1:5552: connection refused"), True),
    (TimeoutError("no answer"), True),
    (StreamsError("cannot declare a publisher (STREAM_NOT_AVAILABLE)", STREAM_NOT_AVAILABLE),
     True),
    (StreamsError("authentication refused (AUTHENTICATION_FAILURE)", 8), False),
    (StreamsError("cannot declare a publisher (STREAM_DOES_NOT_EXIST)", 2), False),
    (StreamsError("a frame this client cannot use"), False),
])
def test_the_stream_write_waits_for_a_connection_or_a_leader(error: Any, passes: bool) -> None:
    assert StreamPartitionPublisher._transient(error) is passes
