# cython: language_level=3
"""The native data plane: ``ConfirmWindow`` and ``Relay`` in C, same API and behaviour as the
pure-Python reference (:mod:`pumpd.dataplane.confirm_window_ref`, :mod:`pumpd.dataplane.relay_ref`), which is the specification.

What makes it fast, compared with the reference:

- frames are parsed with pointer arithmetic straight from the bytes read off the socket, and
  ``basic.publish`` + content header + body frames are encoded straight into one C buffer that
  grows in place; no Python object is made per message (except with ``keep_last``, and for an
  undeliverable message);
- a message is *streamed*: its publish method frame is written when ``basic.deliver`` arrives,
  the content header when the header arrives, and each body frame's bytes are copied once, from
  the input to the publish buffer, re-chunked at the destination frame size on the way. Only a
  frame cut by the end of a read is copied to the carry-over buffer first. The publish buffer
  therefore may end with the frames of one unfinished message; ``take_publishes`` hands out only
  the complete ones (``_complete`` marks where they end);
- the confirm window is a ring of delivery tags and two bitmaps (settled, nacked) of 64-bit
  words; advancing the confirmed prefix is a count of trailing ones per word;
- forward and timestamp headers are spliced into the content header's bytes in C: the headers
  table is walked only to find its keys, each value skipped by its type's size, and every entry
  the user wrote is copied as it came. The one rare case the plugin handles by moving a value to
  ``x-invalid-headers`` (an ``x-shovelled`` that is not an array) is left to the reference's
  :func:`pumpd.dataplane.frames.edit_properties`.

Invariant checks are compiled in only with ``PUMPD_DEBUG=1`` (see ``setup.py``); in a release
build ``if PUMPD_DEBUG:`` is a constant 0 and the C compiler drops them.

The source is this file and the parts it includes, one per class or job
(``_fastpath_parts/*.pxi``, textually included as asyncpg's ``protocol.pyx`` includes
``coreproto.pyx``): still one extension, one C module, so every call between the parts is a
direct C call. Cython allows no ``include`` inside a class body, so the Relay's framing, source,
header and destination code are module-level ``cdef`` functions taking the Relay. The cdef
declarations live in these files, not in a ``.pxd``: with ``src/`` mapped as the package
directory Cython does not pick one up. Where this module sits among pumpd's layers:
docs/architecture.md.
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport int64_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.stdio cimport snprintf
from libc.string cimport memcmp, memcpy, memmove
from libc.time cimport time

from pumpd.dataplane import frames as _frames
from pumpd.dataplane.api import Delivered, Returned
from pumpd.dataplane import received as _received
from pumpd.dataplane.frames import FrameError, UnparseableProperties

include "_fastpath_parts/wire.pxi"
include "_fastpath_parts/buffers.pxi"
include "_fastpath_parts/confirm_window.pxi"
include "_fastpath_parts/return_assembler.pxi"
include "_fastpath_parts/relay.pxi"
include "_fastpath_parts/relay_framing.pxi"
include "_fastpath_parts/relay_source.pxi"
include "_fastpath_parts/relay_headers.pxi"
include "_fastpath_parts/relay_destination.pxi"
include "_fastpath_parts/delivery_reader.pxi"
include "_fastpath_parts/publish_plane.pxi"
include "_fastpath_parts/publish_returns.pxi"
include "_fastpath_parts/amqp10.pxi"
include "_fastpath_parts/stream_sections.pxi"
