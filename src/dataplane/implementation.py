"""The data plane implementation pumpd runs on: the native extension when it is built, the
pure-Python reference otherwise (with a warning, and ``IMPLEMENTATION`` says which).

``PUMPD_IMPLEMENTATION=reference`` forces the reference, e.g. to compare the two. Both keep the
contract in :mod:`pumpd.dataplane.api`; the assignments under ``TYPE_CHECKING`` below make mypy
check each class of both against its Protocol (the native ones through ``src/_fastpath.pyi``).

This is the one place a layer above ``dataplane`` reaches the native extension: ``_fastpath``
is the C twin of this package's references and reads the wire constants from
:mod:`pumpd.dataplane.frames` and :mod:`~pumpd.dataplane.received` (docs/architecture.md).
"""

from __future__ import annotations

import os
import warnings
from typing import TYPE_CHECKING

from . import (
    amqp10_frames_ref,
    api,
    confirm_window_ref,
    delivery_reader_ref,
    publish_plane_ref,
    relay_ref,
    stream_sections_ref,
)

if TYPE_CHECKING:
    from .. import _fastpath

    ConfirmWindow = confirm_window_ref.ConfirmWindow
    Relay = relay_ref.Relay
    PublishPlane = publish_plane_ref.PublishPlane
    DeliveryReader = delivery_reader_ref.DeliveryReader
    TransferWriter = amqp10_frames_ref.TransferWriter
    FrameScanner = amqp10_frames_ref.FrameScanner
    encode_disposition = amqp10_frames_ref.encode_disposition
    StreamSections = stream_sections_ref.StreamSections
    IMPLEMENTATION: str

    # The contract, checked for both implementations.
    _reference_window: type[api.ConfirmWindow] = confirm_window_ref.ConfirmWindow
    _reference_relay: type[api.Relay] = relay_ref.Relay
    _reference_plane: type[api.PublishPlane] = publish_plane_ref.PublishPlane
    _reference_plane_class: api.PublishPlaneClass = publish_plane_ref.PublishPlane
    _native_window: type[api.ConfirmWindow] = _fastpath.ConfirmWindow
    _native_relay: type[api.Relay] = _fastpath.Relay
    _native_plane: type[api.PublishPlane] = _fastpath.PublishPlane
    _native_plane_class: api.PublishPlaneClass = _fastpath.PublishPlane
    _reference_reader: type[api.DeliveryReader] = delivery_reader_ref.DeliveryReader
    _reference_reader_class: api.DeliveryReaderClass = delivery_reader_ref.DeliveryReader
    _native_reader: type[api.DeliveryReader] = _fastpath.DeliveryReader
    _native_reader_class: api.DeliveryReaderClass = _fastpath.DeliveryReader
    _reference_writer: type[api.TransferWriter] = amqp10_frames_ref.TransferWriter
    _reference_writer_class: api.TransferWriterClass = amqp10_frames_ref.TransferWriter
    _native_writer: type[api.TransferWriter] = _fastpath.TransferWriter
    _native_writer_class: api.TransferWriterClass = _fastpath.TransferWriter
    _reference_scanner: type[api.FrameScanner] = amqp10_frames_ref.FrameScanner
    _reference_scanner_class: api.FrameScannerClass = amqp10_frames_ref.FrameScanner
    _native_scanner: type[api.FrameScanner] = _fastpath.FrameScanner
    _native_scanner_class: api.FrameScannerClass = _fastpath.FrameScanner
    _reference_disposition: api.EncodeDisposition = amqp10_frames_ref.encode_disposition
    _native_disposition: api.EncodeDisposition = _fastpath.encode_disposition
    _reference_sections: type[api.StreamSections] = stream_sections_ref.StreamSections
    _native_sections: type[api.StreamSections] = _fastpath.StreamSections
else:
    if os.environ.get("PUMPD_IMPLEMENTATION", "native") == "reference":
        ConfirmWindow, Relay, IMPLEMENTATION = confirm_window_ref.ConfirmWindow, relay_ref.Relay, "reference"
        PublishPlane, DeliveryReader = publish_plane_ref.PublishPlane, delivery_reader_ref.DeliveryReader
        TransferWriter, FrameScanner, encode_disposition = (
            amqp10_frames_ref.TransferWriter,
            amqp10_frames_ref.FrameScanner,
            amqp10_frames_ref.encode_disposition,
        )
        StreamSections = stream_sections_ref.StreamSections
    else:
        try:
            from .._fastpath import (
                ConfirmWindow,
                DeliveryReader,
                FrameScanner,
                PublishPlane,
                Relay,
                StreamSections,
                TransferWriter,
                encode_disposition,
            )

            IMPLEMENTATION = "native"
        except ImportError as exc:
            warnings.warn(
                f"pumpd's native extension is not built ({exc}); running on the slower "
                "pure-Python reference. Build it with `pip install -e .` or `make build`.",
                RuntimeWarning,
                stacklevel=2,
            )
            ConfirmWindow, Relay, IMPLEMENTATION = (
                confirm_window_ref.ConfirmWindow,
                relay_ref.Relay,
                "reference",
            )
            PublishPlane, DeliveryReader = publish_plane_ref.PublishPlane, delivery_reader_ref.DeliveryReader
            TransferWriter, FrameScanner, encode_disposition = (
                amqp10_frames_ref.TransferWriter,
                amqp10_frames_ref.FrameScanner,
                amqp10_frames_ref.encode_disposition,
            )
            StreamSections = stream_sections_ref.StreamSections


def publish_plane_class(name: str | None) -> tuple[api.PublishPlaneClass, str]:
    """The publish plane a Publisher asked for by ``name`` (``native``, ``reference``, or None
    for the one pumpd runs on) and which it is.

    :raises ValueError: for another name
    :raises ImportError: for ``native`` when the extension is not built
    """
    if name is None:
        return PublishPlane, IMPLEMENTATION
    if name == "reference":
        return publish_plane_ref.PublishPlane, "reference"
    if name == "native":
        from .._fastpath import PublishPlane as native

        return native, "native"
    raise ValueError(f"implementation must be native or reference, not {name!r}")


__all__ = ["IMPLEMENTATION", "ConfirmWindow", "DeliveryReader", "FrameScanner", "PublishPlane",
           "Relay", "StreamSections", "TransferWriter", "encode_disposition", "publish_plane_class"]
