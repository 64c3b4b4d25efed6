"""The messages of stream chunks gathered as Arrow columns, one record batch at a time.

A read task gets whole chunks from the streams protocol (``Deliver`` frames: a chunk's first
offset, its number of entries and its bytes). The data plane's ``StreamSections`` (native when
built, :mod:`pumpd.dataplane.stream_sections_ref` otherwise) walks a chunk's entries and decodes
each message's AMQP 1.0 sections straight into the buffers of Arrow's columns, with no Python
object per message; here those buffers become arrays, the offsets a range, and a sub-entry
batch (several messages in one entry, perhaps gzipped) is opened for it. The values are those
of :func:`pumpd.spark.read.streams.amqp10_decode.row_of_amqp10`, message by message. Needs
pyarrow (the ``spark`` extra).
"""

from __future__ import annotations

import struct
import zlib
from array import array
from typing import Any

from ....dataplane import api
from ....dataplane.implementation import StreamSections
from ....dataplane.stream_sections_ref import COLUMNS, MessageDecodeError
from ..arrow import arrow_schema

_SUB_ENTRY = struct.Struct(">BHII")  # type (compression in bits 4-6), count, sizes


class ChunkColumns:
    """Offsets ``start`` to ``end - 1`` of one stream, gathered from its chunks as columns.

    Rows come in offset order without gaps (every message of the range is kept), so the offsets
    are ranges.
    """

    def __init__(self, stream: str, start: int, end: int,
                 sections: api.StreamSections | None = None) -> None:
        self.stream, self.start, self.end = stream, start, end
        self.done = start >= end
        # the decoder: the data plane's (native when built) unless one is given
        self._sections = StreamSections() if sections is None else sections
        self.offsets = array("q")
        self._ready: list[Any] = []  # batches cut early: a column filled up
        self._ready_rows = 0

    def __len__(self) -> int:
        return self._ready_rows + self._sections.rows

    @property
    def next_offset(self) -> int:
        """The offset the next row would have."""
        return max(self.start, self.offsets[-1] + 1 if self.offsets else self.start)

    def add_chunk(self, data: bytes, first: int, entries: int, pos: int = 0) -> None:
        """The messages of one chunk: ``entries`` entries from ``data[pos:]``, the first at
        offset ``first``."""
        offset, left = first, entries
        while left and offset < self.end:
            pos, walked = self._walk(data, pos, offset, left)
            offset += walked
            left -= walked
            if not left or offset >= self.end:
                break
            if self._sections.full:
                self._cut()
            elif struct.unpack_from(">I", data, pos)[0] & 0x80000000:
                pos, offset = self._sub_entries(data, pos, offset)
                left -= 1
        self.done = offset >= self.end

    def _walk(self, data: bytes, pos: int, offset: int, entries: int) -> tuple[int, int]:
        """Up to ``entries`` entries at ``pos``, the first at ``offset``, into the columns."""
        skip = max(0, self.start - offset)
        before = self._sections.rows
        try:
            pos, walked = self._sections.add(data, pos, entries, skip, self.end - offset - skip)
        except MessageDecodeError as exc:
            self._clear()
            where = f"the message at offset {offset + exc.entry}" if exc.entry >= 0 else (
                f"a chunk from offset {offset}")
            raise ValueError(f"pumpd: stream {self.stream!r}: {where}: {exc}") from None
        rows = self._sections.rows - before
        if rows:
            low = max(offset, self.start)
            self.offsets.extend(range(low, low + rows))
        return pos, walked

    def _sub_entries(self, data: bytes, pos: int, offset: int) -> tuple[int, int]:
        """A sub-entry batch at ``pos``: type byte (compression in bits 4-6), record count
        (16 bits), uncompressed and stored sizes (32 bits each), then the stored records.
        Returns the position after it and the offset after its records."""
        if pos + _SUB_ENTRY.size > len(data):
            raise ValueError(f"pumpd: stream {self.stream!r}: a sub-entry batch at offset "
                             f"{offset} is cut short by its chunk's end")
        kind, count, size, length = _SUB_ENTRY.unpack_from(data, pos)
        begin = pos + _SUB_ENTRY.size
        if begin + length > len(data):
            raise ValueError(f"pumpd: stream {self.stream!r}: a sub-entry batch at offset "
                             f"{offset} of {length} bytes runs past its chunk's end")
        stored = data[begin:begin + length]
        compression = (kind & 0x70) >> 4
        if compression == 1:
            stored = _gunzip(stored, size, self.stream, offset)
        elif compression != 0:
            raise ValueError(f"pumpd: stream {self.stream!r}: a sub-entry batch at offset "
                             f"{offset} is compressed with codec {compression}; only none and "
                             "gzip are read")
        p, left = 0, count
        while left and offset < self.end:
            p, walked = self._walk(stored, p, offset, left)
            offset += walked
            left -= walked
            if left and offset < self.end:
                if not self._sections.full:
                    raise ValueError(f"pumpd: stream {self.stream!r}: a sub-entry batch at "
                                     f"offset {offset} holds another one")
                self._cut()
        return begin + length, offset + left

    def _cut(self) -> None:
        """The rows so far put aside as a batch of their own: a column is full."""
        self._ready_rows += self._sections.rows
        self._ready.append(self._batch())

    def _clear(self) -> None:
        self._sections.take()
        self._ready, self._ready_rows = [], 0
        self.offsets = array("q")

    def take(self) -> list[Any]:
        """The rows gathered so far as ``pyarrow.RecordBatch``es (one, or more when a column
        filled up before); starts a new one."""
        out = [*self._ready, self._batch()]
        self._ready, self._ready_rows = [], 0
        return out

    def _batch(self) -> Any:
        import pyarrow as pa

        schema = arrow_schema()
        rows, columns = self._sections.take()
        offsets, self.offsets = self.offsets[:rows], self.offsets[rows:]
        arrays = [_array(schema.field(name).type, rows, bufs)
                  for name, bufs in zip(COLUMNS, columns, strict=True)]
        arrays.append(pa.nulls(rows, pa.string()))  # cluster_id: not kept by the broker
        arrays.append(pa.array(offsets, pa.int64()))
        arrays.append(pa.repeat(pa.scalar(self.stream, pa.string()), rows))
        arrays.append(pa.repeat(pa.scalar(False, pa.bool_()), rows))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _gunzip(stored: bytes, size: int, stream: str, offset: int) -> bytes:
    """A gzipped sub-entry batch, at most the ``size`` bytes it says it holds."""
    d = zlib.decompressobj(wbits=31)
    try:
        out = d.decompress(stored, size)
    except zlib.error as exc:
        raise ValueError(f"pumpd: stream {stream!r}: the sub-entry batch at offset {offset} "
                         f"is not gzip: {exc}") from None
    if len(out) != size or d.unconsumed_tail:
        raise ValueError(f"pumpd: stream {stream!r}: the sub-entry batch at offset {offset} "
                         f"holds more or less than the {size} bytes it says")
    return out


def _array(kind: Any, rows: int, bufs: tuple[Any, ...]) -> Any:
    """One column from its buffers (see ``StreamSections.take``)."""
    import pyarrow as pa

    nulls, valid, *rest = bufs
    validity = None if valid is None else pa.py_buffer(valid)
    if pa.types.is_map(kind):
        offsets, key_offsets, keys, value_offsets, values = rest
        n = (len(key_offsets) >> 2) - 1
        entries = pa.StructArray.from_arrays(
            [_strings(pa.string(), n, key_offsets, keys),
             _strings(pa.string(), n, value_offsets, values)],
            fields=[kind.key_field, kind.item_field])
        return pa.Array.from_buffers(kind, rows, [validity, pa.py_buffer(offsets)],
                                     null_count=nulls, children=[entries])
    if pa.types.is_string(kind) or pa.types.is_binary(kind):
        return pa.Array.from_buffers(kind, rows, [validity, pa.py_buffer(rest[0]),
                                                  pa.py_buffer(rest[1])], null_count=nulls)
    return pa.Array.from_buffers(kind, rows, [validity, pa.py_buffer(rest[0])],
                                 null_count=nulls)


def _strings(kind: Any, n: int, offsets: bytes, data: bytes) -> Any:
    import pyarrow as pa

    return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(offsets), pa.py_buffer(data)],
                                 null_count=0)
