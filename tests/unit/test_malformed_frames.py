"""The shared table of malformed frames (tests/support/malformed_frames.py) against every data plane:
the same verdict from the native and the reference implementation, whole or cut into pieces,
and nothing from outside the bad frame in anything a plane returns."""

from __future__ import annotations

import random

import pytest
from pumpd.dataplane import publish_plane_ref
from pumpd.dataplane.frames import ACK_MODE_ON_CONFIRM, FrameError
from pumpd.dataplane.received import FrameGuard
from pumpd.testing.hostile import content_header, frame

from tests.support.impls import IMPLEMENTATIONS, native, relay_class
from tests.support.malformed_frames import (
    CASES,
    CH,
    DELIVER,
    FRAME_MAX,
    MARKER,
    MARKER_TEXT,
    RETURN,
    Case,
    feed,
    make_plane,
    run,
)

pytestmark = pytest.mark.timeout(120)


def _ids(cases: list[Case]) -> list[str]:
    return [c.name for c in cases]


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_verdict_and_nothing_read_outside_the_frame(case: Case, impl: str) -> None:
    verdict, passed, outs = run(case.plane, impl, [case.stream + MARKER], edits=case.edits)
    assert verdict.startswith(case.verdict), verdict
    if verdict == "ok":
        assert passed.endswith(MARKER) and passed.count(MARKER_TEXT) == 8  # handed to pika as is
    else:
        assert MARKER_TEXT not in passed
    assert not any(MARKER_TEXT in out for _kind, out in outs)


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_native_and_reference_agree_however_the_stream_is_cut(case: Case) -> None:
    data = case.stream + MARKER
    rng = random.Random(case.name)
    cuts = [[data], [data[i : i + 1] for i in range(len(data))]]
    for _ in range(3):
        points = sorted(rng.sample(range(1, len(data)), min(4, len(data) - 1)))
        cuts.append([data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)])
    verdicts = {(impl, i): run(case.plane, impl, chunks, edits=case.edits)[0]
                for impl in IMPLEMENTATIONS for i, chunks in enumerate(cuts)}
    assert len(set(verdicts.values())) == 1, verdicts


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("plane", ["source", "destination", "publish"])
def test_an_oversized_frame_is_refused_on_its_header_alone(plane: str, impl: str) -> None:
    """Nothing of it is waited for: the 7 header bytes are enough, fed alone or one by one."""
    head = frame(3, CH, b"", size=FRAME_MAX - 7, end=b"")
    p = make_plane(plane, impl)
    for b in head[:-1]:
        assert feed(p, plane, bytes((b,))) == b""
    with pytest.raises(FrameError, match="a frame of 131073 bytes"):
        feed(p, plane, head[-1:])


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("plane", ["source", "destination", "publish"])
def test_a_frame_of_exactly_frame_max_is_taken(plane: str, impl: str) -> None:
    big = frame(1, 0, bytes(FRAME_MAX - 8))
    p = make_plane(plane, impl)
    assert feed(p, plane, big[:1000]) + feed(p, plane, big[1000:]) == big


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_the_source_limit_is_the_source_connections_frame_max(impl: str) -> None:
    """A relay's two sides have their own frame_max: 4096 on the source refuses a frame the
    destination's 131072 would take."""
    relay = relay_class(impl)(source_channel=CH, dest_channel=CH, dest_frame_max=131072,
                              source_frame_max=4096, ack_mode=ACK_MODE_ON_CONFIRM)
    relay.feed_destination(frame(1, 0, bytes(5000)))
    relay.feed_source(DELIVER + content_header(CH, 5000))
    with pytest.raises(FrameError, match=r"a frame of 5008 bytes .* frame_max 4096"):
        relay.feed_source(frame(3, CH, bytes(5000)))


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("plane", ["source", "publish"])
def test_max_body_size_is_configurable(plane: str, impl: str) -> None:
    if plane == "publish":
        cls = publish_plane_ref.PublishPlane if impl == "reference" else native().PublishPlane
        p = cls(channel=CH, frame_max=FRAME_MAX, max_body_size=100)
        p.feed(RETURN + content_header(CH, 100) + frame(3, CH, bytes(100)))
        with pytest.raises(FrameError, match="a body of 101 bytes, over the limit of 100"):
            p.feed(RETURN + content_header(CH, 101))
    else:
        r = relay_class(impl)(source_channel=CH, dest_channel=CH, dest_frame_max=FRAME_MAX,
                              ack_mode=ACK_MODE_ON_CONFIRM, max_body_size=100)
        r.feed_source(DELIVER + content_header(CH, 100) + frame(3, CH, bytes(100)))
        with pytest.raises(FrameError, match="a body of 101 bytes, over the limit of 100"):
            r.feed_source(DELIVER + content_header(CH, 101))


def test_the_link_guard_walks_frames_without_keeping_them() -> None:
    """What guards a stream pika parses (before a data plane takes it over): frames pass
    untouched, cut anywhere; a header over frame_max or of an unknown type is refused at once;
    the limit is read per frame (connection.tune changes it)."""
    limit = [131072]
    guard = FrameGuard(lambda: limit[0])
    stream = MARKER + frame(8, 0, b"") + frame(1, 0, bytes(5000)) + MARKER
    assert b"".join(guard(stream[i : i + 1]) for i in range(len(stream))) == stream
    limit[0] = 4096
    assert guard(frame(1, 0, bytes(4088))) == frame(1, 0, bytes(4088))
    head = frame(3, 1, b"", size=4089, end=b"")
    guard(head[:6])
    with pytest.raises(FrameError, match=r"a frame of 4097 bytes .* frame_max 4096$"):
        guard(head[6:])
    with pytest.raises(FrameError, match="unknown frame type 9 on channel 0"):
        FrameGuard(lambda: 4096)(frame(9, 0, b""))
    # a broker refusing the protocol version answers with its own header: pika says so
    refusal = b"AMQP\x00\x00\x09\x01"
    assert FrameGuard(lambda: 4096)(refusal) == refusal
