"""The Spark writer's Arrow path encodes what the row path encodes, on both data planes, with
binary and large binary columns."""

from __future__ import annotations

from typing import Any

import pytest
from pumpd.dataplane.properties import encode_properties
from pumpd.dataplane.publish_plane_ref import PublishPlane as RefPlane

from tests.support.impls import native


def _plane(impl: str) -> Any:
    cls = RefPlane if impl == "reference" else native().PublishPlane
    return cls(channel=1, frame_max=4096, exchange=b"x", mandatory=False)


@pytest.mark.parametrize("large", [False, True])
def test_publish_arrow_encodes_what_publish_encodes(impl: str, large: bool) -> None:
    import pyarrow as pa

    bodies = [b"", b"a", bytes(range(256)) * 20, b"\x00" * 4089, b"tail"]
    col = pa.array([b"skip", *bodies], pa.large_binary() if large else pa.binary()).slice(1)
    head = encode_properties({"content_type": "t", "delivery_mode": 2})
    tail = encode_properties({"app_id": "a"})[2:]
    plain, by_row = _plane(impl), _plane(impl)
    _validity, offsets, data = col.buffers()
    assert plain.publish_arrow(offsets, data, col.offset, len(col), b"rk", head, large=large) == 1
    for b in bodies:
        by_row.publish(b, b"rk", head)
    assert plain.take_output() == by_row.take_output()
    # deterministic ids: the id spliced between head and tail, counted from id_start
    flags = int.from_bytes(head[:2], "big") | (1 << (15 - 8)) | (1 << (15 - 12))
    spliced_head = flags.to_bytes(2, "big") + head[2:]
    plain.publish_arrow(offsets, data, col.offset + 1, 3, b"rk", spliced_head, large=large,
                        properties_tail=tail, id_prefix=b"w:0:3:", id_start=41)
    for i, b in enumerate(bodies[1:4]):
        props = encode_properties({"content_type": "t", "delivery_mode": 2, "app_id": "a",
                                   "message_id": f"w:0:3:{41 + i}"})
        by_row.publish(b, b"rk", props)
    assert plain.take_output() == by_row.take_output()
    assert plain.next_seq == by_row.next_seq == 9
    with pytest.raises(ValueError):
        plain.publish_arrow(offsets, data, col.offset, len(col) + 1, b"rk", head, large=large)

