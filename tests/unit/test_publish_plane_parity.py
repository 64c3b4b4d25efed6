"""The native publish plane writes the reference plane's frames, frame for frame."""

from __future__ import annotations

import itertools
import random
import struct

from pumpd.dataplane.properties import encode_properties
from pumpd.dataplane.publish_plane_ref import PublishPlane as RefPlane

from tests.support.impls import native


def _ack(seq: int, multiple: bool, nack: bool = False) -> bytes:
    return struct.pack(">BHIHHQB", 1, 1, 13, 60, 120 if nack else 80, seq, int(multiple)) + b"\xce"


def test_native_plane_matches_the_reference_frame_for_frame() -> None:
    rng = random.Random(11)
    planes = [RefPlane(channel=1, frame_max=4096, exchange=b"x", mandatory=True),
              native().PublishPlane(channel=1, frame_max=4096, exchange=b"x", mandatory=True)]
    props = encode_properties({"message_id": "m", "headers": {"f": 0.5, "i": -3}})
    bodies = [bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 4088, 4089, 9000])))
              for _ in range(40)]
    for _ in range(60):  # past one 64-bit word and around the ring
        outs = [(p.publish_many(bodies, b"rk", props), p.take_output()) for p in planes]
        assert outs[0] == outs[1]
    # confirms in odd orders, cut at arbitrary byte positions
    stream = b"".join([_ack(30, True), _ack(35, False), _ack(33, False, nack=True),
                       _ack(100, False), _ack(64, True), _ack(70, True, nack=True),
                       struct.pack(">BHI", 8, 0, 0) + b"\xce", _ack(2000, True)])
    cut = [0, 5, 22, 23, 60, 61, len(stream)]
    results = []
    for p in planes:
        passed = b"".join(p.feed(stream[a:b]) for a, b in itertools.pairwise(cut))
        results.append((passed, p.outstanding, p.confirmed, p.nacked, p.take_nacked(),
                        p.unconfirmed()[:5], p.next_seq))
    assert results[0] == results[1]
    assert results[0][0] == struct.pack(">BHI", 8, 0, 0) + b"\xce"  # the heartbeat, for pika
    assert results[0][4] == [33, *range(65, 71)]

