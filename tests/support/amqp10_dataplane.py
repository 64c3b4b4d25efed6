"""The AMQP 1.0 client's tests once per data plane implementation: ``client_dataplane`` puts the
client's frame scanner, transfer writer and disposition encoder on the reference or the native
one (the client picks pumpd's implementation when its modules are imported)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pumpd.amqp10 import connection, session
from pumpd.dataplane import amqp10_frames_ref

from tests.support.impls import IMPLEMENTATIONS, native


@pytest.fixture(params=IMPLEMENTATIONS)
def client_dataplane(request: pytest.FixtureRequest,
                     monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    impl = native() if request.param == "native" else amqp10_frames_ref
    monkeypatch.setattr(connection, "FrameScannerImpl", impl.FrameScanner)
    monkeypatch.setattr(session, "TransferWriterImpl", impl.TransferWriter)
    monkeypatch.setattr(session, "disposition_frame", impl.encode_disposition)
    yield str(request.param)
