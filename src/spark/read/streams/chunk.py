"""The messages of stream chunks gathered as Arrow columns, one record batch at a time.

A read task gets whole chunks from the streams protocol (``Deliver`` frames: a chunk's first
offset, its number of entries and its bytes). Decoding every message into a Python row and
then turning rows into columns cost most of a task's time; here the loop over a chunk's messages
does the least a message needs: find its data section (the body, AMQP 1.0's ``00 53 75``), look
the bytes before it up in a table of prefixes already decoded, and keep the body, the offset and
the prefix's number. Messages of a stream mostly repeat their exchange, routing key and
properties byte for byte, so the table is small; the metadata columns are built once per distinct
prefix and spread over the rows with Arrow's ``take``. A message that does not fit (a new
prefix, an amqp-value body, several data sections) is decoded fully by
:func:`pumpd.spark.read.streams.amqp10_decode.row_of_amqp10`; a prefix is remembered only when that full decode ends
exactly where its one data section begins (:func:`pumpd.spark.read.streams.amqp10_decode.cacheable_prefix`), so an
identical prefix always decodes the same way. Needs pyarrow (the ``spark`` extra).
"""

from __future__ import annotations

import struct
import zlib
from array import array
from typing import Any

from ..arrow import arrow_schema
from .amqp10_decode import DATA_SECTION, cacheable_prefix, row_of_amqp10

_U32 = struct.Struct(">I").unpack_from
# distinct prefixes remembered per task; past that, new ones are decoded every time
PREFIXES_MAX = 4096
# the metadata columns: a row's fields 1 to 16 (routing_key ... cluster_id)
_META = slice(1, 17)


class ChunkColumns:
    """Offsets ``start`` to ``end - 1`` of one stream, gathered from its chunks as columns.

    Rows come in offset order without gaps (every message of the range is kept), so the offsets
    are ranges; which metadata a row has is kept as runs (``_runs``: the row where a run begins,
    the metadata's index), since consecutive messages mostly share it.
    """

    def __init__(self, stream: str, start: int, end: int) -> None:
        self.stream, self.start, self.end = stream, start, end
        self.done = start >= end
        self._known: dict[bytes, tuple[Any, ...]] = {}  # prefix -> its metadata columns
        # the last prefix seen, with the data section's descriptor: (bytes, its index)
        self._head: tuple[bytes, int] = (b"", -1)
        self._clear()

    def _clear(self) -> None:
        self.bodies: list[bytes] = []
        self.offsets = array("q")
        self._runs: list[tuple[int, int]] = []
        self._metas: list[tuple[Any, ...]] = []
        self._index: dict[bytes, int] = {}  # prefix -> index in self._metas (this batch)
        self._head = (b"", -1)

    def __len__(self) -> int:
        return len(self.bodies)

    @property
    def next_offset(self) -> int:
        """The offset the next row would have."""
        return max(self.start, self.offsets[-1] + 1 if self.offsets else self.start)

    def add_chunk(self, data: bytes, first: int, entries: int, pos: int = 0) -> None:
        """The messages of one chunk: ``entries`` entries from ``data[pos:]``, the first at
        offset ``first``."""
        offset, start, end = first, self.start, self.end
        bodies = self.bodies
        append, startswith = bodies.append, data.startswith
        head, ix = self._head
        skip = len(head)
        low = max(first, start)
        for _ in range(entries):
            if offset >= end:
                break
            size = _U32(data, pos)[0]
            if size & 0x80000000:  # a sub-entry batch: several messages, perhaps compressed
                pos, offset = self._sub_entries(data, pos, offset)
                head, ix = self._head
                skip = len(head)
                continue
            pos += 4
            stop = pos + size
            if offset >= start:
                if ix >= 0 and startswith(head, pos):
                    i = pos + skip  # the body's type code
                    code = data[i]
                    if code == 0xA0:
                        b, n = i + 2, data[i + 1]
                    elif code == 0xB0:
                        b, n = i + 5, _U32(data, i + 1)[0]
                    else:
                        b, n = -1, 0
                    if b + n == stop:
                        append(data[b:stop])
                        pos = stop
                        offset += 1
                        continue
                self.add(data[pos:stop])
                head, ix = self._head
                skip = len(head)
            pos = stop
            offset += 1
        if offset > low:
            self.offsets.extend(range(low, offset))
        self.done = offset >= end

    def _sub_entries(self, data: bytes, pos: int, offset: int) -> tuple[int, int]:
        """A sub-entry batch at ``pos``: type byte (compression in bits 4-6), record count
        (16 bits), uncompressed and stored sizes (32 bits each), then the stored records."""
        kind = data[pos]
        count, _, length = struct.unpack_from(">HII", data, pos + 1)
        begin = pos + 11
        stored = data[begin:begin + length]
        compression = (kind & 0x70) >> 4
        if compression == 1:
            stored = zlib.decompress(stored, wbits=31)  # gzip
        elif compression != 0:
            raise ValueError(f"pumpd: stream {self.stream!r}: a sub-entry batch at offset "
                             f"{offset} is compressed with codec {compression}; only none and "
                             "gzip are read")
        p = 0
        for _ in range(count):
            size = _U32(stored, p)[0]
            if self.start <= offset < self.end:
                self.add(stored[p + 4:p + 4 + size])
            p += 4 + size
            offset += 1
        return begin + length, offset

    def add(self, raw: bytes) -> None:
        """One message, the slow way: its prefix looked up, else a full decode. Its offset is
        the next of the range (the caller keeps the offsets)."""
        i = raw.find(DATA_SECTION)
        prefix = raw[:i] if i >= 0 else None
        meta = None if prefix is None else self._known.get(prefix)
        row = row_of_amqp10(raw, 0, self.stream)
        ix = -1
        if meta is None:
            meta = row[_META]
            if (prefix is not None and len(self._known) < PREFIXES_MAX
                    and cacheable_prefix(raw, i)):
                self._known[prefix] = meta
        if prefix is not None and prefix in self._known:
            ix = self._index.get(prefix, -1)
            if ix < 0:
                ix = self._index[prefix] = len(self._metas)
                self._metas.append(meta)
            self._head = (prefix + DATA_SECTION, ix)
        else:  # a one-off: its own metadata
            ix = len(self._metas)
            self._metas.append(meta)
            self._head = (b"", -1)
        if not self._runs or self._runs[-1][1] != ix:
            self._runs.append((len(self.bodies), ix))
        self.bodies.append(row[0])

    def take(self) -> Any:
        """The rows gathered so far as one ``pyarrow.RecordBatch``; starts a new one."""
        import pyarrow as pa

        schema = arrow_schema()
        n = len(self.bodies)
        which = None
        if len(self._metas) > 1:
            idx = array("i")
            bounds = [r for r, _ in self._runs[1:]] + [n]
            for (row, ix), stop in zip(self._runs, bounds, strict=True):
                idx.extend([ix] * (stop - row))
            which = pa.array(idx, pa.int32())
        arrays = [pa.array(self.bodies, pa.binary())]
        for c, field in enumerate(list(schema)[_META]):
            arrays.append(_column([m[c] for m in self._metas], field.type, which, n))
        arrays.append(pa.array(self.offsets, pa.int64()))
        arrays.append(pa.repeat(pa.scalar(self.stream, pa.string()), n))
        arrays.append(pa.repeat(pa.scalar(False, pa.bool_()), n))
        self._clear()
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _column(values: list[Any], kind: Any, which: Any, n: int) -> Any:
    """One metadata column of ``n`` rows: ``values`` (one per distinct metadata) spread by
    ``which`` (the rows' indices into ``values``; None: one metadata for every row)."""
    import pyarrow as pa

    if pa.types.is_map(kind):  # Arrow maps from (key, value) lists
        values = [None if v is None else list(v.items()) for v in values]
    first = values[0]
    if which is None or all(v == first for v in values):
        if first is None:
            return pa.nulls(n, kind)
        if not pa.types.is_map(kind):
            return pa.repeat(pa.scalar(first, kind), n)
        which = pa.repeat(pa.scalar(0, pa.int32()), n)
    return pa.array(values, type=kind).take(which)
