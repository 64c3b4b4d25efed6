"""Fixed-layout status slots in shared memory: one per worker, written by that worker only.

The coordinator allocates a block of slots (:class:`SlotTable`, on
:class:`multiprocessing.shared_memory.SharedMemory`); each worker process attaches to the block by
name and writes its state, a heartbeat and its counters into its own slot a few times a second;
the coordinator reads every slot to supervise and to serve status. No message-level traffic ever
crosses the process boundary, only these records.

Block layout (little-endian)::

    offset  size  block header
    0       8     magic  b"PUMPDSL1"
    8       4     layout version (u32)          = LAYOUT_VERSION
    12      4     slot size in bytes (u32)      = SLOT_SIZE
    16      4     number of slots (u32)
    20      44    reserved (zero)
    64      ...   slot 0, slot 1, ... (SLOT_SIZE bytes each)

Slot layout (little-endian, fields at natural alignment)::

    offset  size  slot
    0       8     seq        u64  even when stable, odd while its writer is inside a write
                                  (native byte order, stored and loaded as one aligned 8-byte
                                  word through a "Q" memoryview: struct.pack_into would store
                                  it byte by byte, and a reader could see half an update)
    8       4     crc        u32  CRC-32 of the body bytes [16, 16 + BODY.size)
    12      4     reserved
    16      4     pid        u32  the worker process that wrote the record (0: none yet)
    20      1     state      u8   :class:`pumpd.engine.status.State` value
    21      1     reserved
    22      2     reason     u16  :class:`ReasonCode`
    24      8     since      f64  wall clock (time.time()) when ``state`` was entered
    32      8     heartbeat  f64  time.monotonic() of the last write (CLOCK_MONOTONIC is one
                                  clock for every process of the host, so the coordinator can
                                  compare it with its own)
    40      8     started    f64  wall clock when the worker process started
    48      184   counters   u64 x 23, in the order of COUNTER_FIELDS (the LEVELS store -1,
                                  "unknown / unlimited", as 2**64 - 1)
    232     16    implementation  ASCII, NUL-padded: the data plane ("native" / "reference")
    248     240   reason text     UTF-8, NUL-padded, truncated on a character boundary, redacted
    488     24    reserved (zero): room for more fields within the same slot size

A block's slots are initialised with an empty record when it is created, so every slot always
holds a checksummed record.

Torn reads: a writer bumps ``seq`` to odd, writes the body and its CRC, then bumps ``seq`` to
even. A reader copies ``seq``, the CRC and the body, re-reads ``seq``, and accepts the copy only
if both ``seq`` values are equal and even *and* the CRC matches (the classic seqlock, plus a
checksum). The sequence check alone relies on stores and loads not being reordered, which x86-64
guarantees (TSO) but Python cannot enforce on weakly ordered CPUs; the CRC catches what it could
miss there, so a reader never returns a mixed record on any architecture. Each slot has exactly
one writer at a time: the coordinator before it spawns the worker and after the worker is gone,
the worker in between.
"""

from __future__ import annotations

import enum
import struct
import time
import zlib
from dataclasses import dataclass, field
from multiprocessing import shared_memory

from ..config.uri import redact
from ..engine.status import Counters, State

__all__ = [
    "COUNTER_FIELDS",
    "REASON_BYTES",
    "SLOT_SIZE",
    "ReasonCode",
    "SlotPool",
    "SlotRecord",
    "SlotRef",
    "SlotTable",
    "SlotUnreadable",
    "SlotWriter",
    "SlotsUnavailable",
    "classify_reason",
    "read_slot",
]

MAGIC = b"PUMPDSL1"
# 3: remaining, remaining_unacked, source_backlog; 4: stall_restarts; 5: lag_messages, lag_since_ms
LAYOUT_VERSION = 5
BLOCK_HEADER = struct.Struct("<8sIII44x")  # magic, version, slot size, number of slots
SLOTS_OFFSET = 64
SLOT_SIZE = 512

CRC = struct.Struct("<I")
BODY_OFFSET = 16
IMPLEMENTATION_BYTES = 16
REASON_BYTES = 240
# Counters in slot order. Appending is a layout change: bump LAYOUT_VERSION (tests check that
# this tuple and pumpd.engine.status.Counters agree).
COUNTER_FIELDS = ("consumed", "published", "confirmed", "acked", "nacked", "returned",
                  "redelivered", "reconnects", "in_flight", "buffered", "bytes",
                  "undeliverable_malformed", "undeliverable_too_large", "undeliverable_refused",
                  "undeliverable_unroutable", "parked", "dead_lettered", "stall_restarts",
                  "remaining", "remaining_unacked", "source_backlog", "lag_messages",
                  "lag_since_ms")
BODY = struct.Struct(f"<IBxHddd{len(COUNTER_FIELDS)}Q{IMPLEMENTATION_BYTES}s{REASON_BYTES}s")
assert BODY_OFFSET + BODY.size <= SLOT_SIZE
HEARTBEAT_AT = 16  # the heartbeat's offset within BODY: a heartbeat alone patches these 8 bytes
HEARTBEAT = struct.Struct("<d")
# Gauges and levels (-1: unknown, stored as the largest u64): the counters type's own rules.
LEVELS = Counters.LEVELS
GAUGES = Counters.GAUGES
_U64 = 0xFFFFFFFFFFFFFFFF

# Readers retry this many times while a write is in progress, then give up: a writer killed in
# the middle of a write leaves ``seq`` odd for good, and the coordinator must not spin on it.
READ_ATTEMPTS = 2000


class ReasonCode(enum.IntEnum):
    """Why a slot is in its state, as a stable number (the text beside it says more)."""

    NONE = 0
    SHUTDOWN = 1  # stopped on request (SIGTERM, reload, removal, restart)
    DELETE_AFTER = 2  # terminated by design: its delete_after (or _duration) limit was reached
    GAVE_UP = 3  # terminated by design: a failure with reconnect_delay 0
    RECONNECTING = 4  # starting again after a failure, within the worker
    OTHER = 5  # a reason the worker gave that matches none of the above
    UNDELIVERABLE = 6  # terminated by design: an undeliverable message under the stop policy
    CRASHED = 10  # written by the coordinator: the worker process exited unexpectedly
    HUNG = 11  # written by the coordinator: killed after missing its heartbeat
    SPAWN_FAILED = 12  # written by the coordinator: the process could not be started

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", "-")


def classify_reason(state: State, reason: str | None) -> ReasonCode:
    """The code for a reason text from :class:`pumpd.engine.pump.Pump` (which reports text only)."""
    if not reason:
        return ReasonCode.NONE
    if state == State.TERMINATED:
        if reason == "shutdown":
            return ReasonCode.SHUTDOWN
        if reason.startswith(("delete-after reached", "delete-after-duration reached")):
            return ReasonCode.DELETE_AFTER
        if "not reconnecting" in reason:
            return ReasonCode.GAVE_UP
        if reason.startswith("undeliverable message"):
            return ReasonCode.UNDELIVERABLE
    elif ("reconnecting in" in reason or "reconnecting now" in reason
          or "restarting the session" in reason):  # the last: a stalled session
        return ReasonCode.RECONNECTING
    return ReasonCode.OTHER


def _fixed_text(text: str, size: int) -> bytes:
    """UTF-8, cut to ``size`` bytes without splitting a character."""
    raw = text.encode("utf-8")
    if len(raw) <= size:
        return raw
    return raw[:size].decode("utf-8", errors="ignore").encode("utf-8")


@dataclass(frozen=True)
class SlotRecord:
    """One worker's report, as stored in its slot."""

    pid: int = 0
    state: State = State.STARTING
    reason_code: ReasonCode = ReasonCode.NONE
    reason: str = ""
    since: float = 0.0
    heartbeat: float = 0.0
    started: float = 0.0
    counters: Counters = field(default_factory=Counters)
    implementation: str = ""

    def pack(self) -> bytes:
        c = self.counters
        return BODY.pack(
            self.pid & 0xFFFFFFFF,
            int(self.state),
            int(self.reason_code),
            self.since,
            self.heartbeat,
            self.started,
            *((_U64 if getattr(c, name) < 0 else getattr(c, name) & _U64)
              if name in LEVELS else max(0, getattr(c, name)) & _U64
              for name in COUNTER_FIELDS),
            self.implementation.encode("ascii", errors="replace")[:IMPLEMENTATION_BYTES],
            _fixed_text(redact(self.reason), REASON_BYTES),
        )

    @classmethod
    def unpack(cls, body: bytes) -> SlotRecord:
        pid, state, code, since, heartbeat, started, *rest = BODY.unpack(body)
        n = len(COUNTER_FIELDS)
        counters = Counters(**{name: -1 if name in LEVELS and value == _U64 else value
                                 for name, value in zip(COUNTER_FIELDS, rest[:n], strict=True)})
        impl, reason = rest[n], rest[n + 1]
        try:
            reason_code = ReasonCode(code)
        except ValueError:  # written by a newer pumpd: keep the record readable
            reason_code = ReasonCode.OTHER
        try:
            st = State(state)
        except ValueError:
            st = State.STARTING
        return cls(
            pid=pid,
            state=st,
            reason_code=reason_code,
            reason=reason.rstrip(b"\0").decode("utf-8", errors="replace"),
            since=since,
            heartbeat=heartbeat,
            started=started,
            counters=counters,
            implementation=impl.rstrip(b"\0").decode("ascii", errors="replace"),
        )


class SlotUnreadable(Exception):
    """No consistent copy of a slot could be taken (its writer died mid-write, or never stops)."""


def seq_word(buf: memoryview) -> memoryview:
    """The slot's ``seq`` as a one-item native u64 view: one aligned 8-byte load or store."""
    return buf[0:8].cast("Q")


def read_slot(buf: memoryview, attempts: int = READ_ATTEMPTS) -> SlotRecord:
    """A consistent copy of the slot in ``buf`` (exactly SLOT_SIZE bytes).

    :raises SlotUnreadable: after ``attempts`` tries without a stable, checksummed copy.
    """
    end = BODY_OFFSET + BODY.size
    with seq_word(buf) as seq:
        for attempt in range(attempts):
            before = seq[0]
            if before & 1 == 0:
                crc = CRC.unpack_from(buf, 8)[0]
                body = bytes(buf[BODY_OFFSET:end])
                after = seq[0]
                if before == after and zlib.crc32(body) == crc:
                    return SlotRecord.unpack(body)
            if attempt % 64 == 63:
                time.sleep(0)  # let the writer finish (it may share this CPU)
    raise SlotUnreadable("the slot stayed inconsistent (its writer may have died mid-write)")


class SlotWriter:
    """Writes whole records into one slot. Only one writer per slot may exist at a time."""

    def __init__(self, buf: memoryview) -> None:
        self._buf = buf
        self._seq = seq_word(buf)

    def write(self, record: SlotRecord) -> None:
        self.write_body(record.pack())

    def write_body(self, body: bytes | bytearray) -> None:
        """Write a record already packed (:meth:`SlotRecord.pack`, perhaps patched in place)."""
        buf = self._buf
        # Continue from the slot's own count rather than a private one: the slot changes hands
        # (coordinator, worker, coordinator again). A writer killed mid-write leaves it odd.
        seq = self._seq[0]
        seq += seq & 1
        self._seq[0] = (seq + 1) & 0xFFFFFFFFFFFFFFFF  # odd: readers keep away
        buf[BODY_OFFSET:BODY_OFFSET + len(body)] = body
        CRC.pack_into(buf, 8, zlib.crc32(body))
        self._seq[0] = (seq + 2) & 0xFFFFFFFFFFFFFFFF  # even again: the record is complete

    def release(self) -> None:
        self._seq.release()


@dataclass(frozen=True)
class SlotRef:
    """Where a slot is: the shared-memory block's name and the slot's index in it (picklable)."""

    block: str
    index: int


class SlotTable:
    """One shared-memory block of ``capacity`` slots.

    The coordinator creates it (:meth:`create`) and unlinks it at exit; a worker attaches by name
    (:meth:`attach`) and only closes it.
    """

    def __init__(self, shm: shared_memory.SharedMemory, capacity: int, owner: bool) -> None:
        self._shm = shm
        self.capacity = capacity
        self.owner = owner
        self._views: list[memoryview] = []
        self._writers: list[SlotWriter] = []

    @property
    def name(self) -> str:
        return self._shm.name

    @classmethod
    def create(cls, capacity: int) -> SlotTable:
        size = SLOTS_OFFSET + capacity * SLOT_SIZE
        shm = shared_memory.SharedMemory(create=True, size=size)
        buf = shm.buf
        assert buf is not None
        buf[:size] = bytes(size)  # POSIX shm starts zeroed; be explicit about it anyway
        BLOCK_HEADER.pack_into(buf, 0, MAGIC, LAYOUT_VERSION, SLOT_SIZE, capacity)
        for i in range(capacity):
            start = SLOTS_OFFSET + i * SLOT_SIZE
            with buf[start:start + SLOT_SIZE] as view:
                writer = SlotWriter(view)
                writer.write(SlotRecord())
                writer.release()
        return cls(shm, capacity, owner=True)

    @classmethod
    def attach(cls, name: str) -> SlotTable:
        """Attach to a block created by :meth:`create` (in another process).

        :raises ValueError: when the block is not a pumpd slot block of this layout version.
        """
        # A spawned worker shares the coordinator's resource tracker, so the registration that
        # SharedMemory makes here is a no-op there and the block is not unlinked when we exit.
        shm = shared_memory.SharedMemory(name=name)
        buf = shm.buf
        assert buf is not None
        magic, version, slot_size, capacity = BLOCK_HEADER.unpack_from(buf, 0)
        if magic != MAGIC or version != LAYOUT_VERSION or slot_size != SLOT_SIZE:
            shm.close()
            raise ValueError(f"shared memory {name!r} is not a pumpd slot block of layout "
                             f"version {LAYOUT_VERSION} (magic {magic!r}, version {version})")
        return cls(shm, capacity, owner=False)

    def view(self, index: int) -> memoryview:
        if not 0 <= index < self.capacity:
            raise IndexError(f"slot {index} out of range 0..{self.capacity - 1}")
        buf = self._shm.buf
        assert buf is not None
        start = SLOTS_OFFSET + index * SLOT_SIZE
        mv = buf[start:start + SLOT_SIZE]
        self._views.append(mv)  # released in close(): the block cannot close while exported
        return mv

    def writer(self, index: int) -> SlotWriter:
        writer = SlotWriter(self.view(index))
        self._writers.append(writer)
        return writer

    def seq(self, index: int) -> int:
        """The slot's write count: unchanged means the record is the one read last time."""
        buf = self._shm.buf
        assert buf is not None
        start = SLOTS_OFFSET + index * SLOT_SIZE
        with buf[start:start + 8] as mv, seq_word(mv) as word:
            return int(word[0])

    def read(self, index: int) -> SlotRecord:
        buf = self._shm.buf
        assert buf is not None
        start = SLOTS_OFFSET + index * SLOT_SIZE
        with buf[start:start + SLOT_SIZE] as mv:
            return read_slot(mv)

    def close(self) -> None:
        # every export of the block must be released first, or SharedMemory.close() refuses
        for writer in self._writers:
            writer.release()
        self._writers.clear()
        for mv in self._views:
            mv.release()
        self._views.clear()
        self._shm.close()
        if self.owner:
            try:
                self._shm.unlink()
            except FileNotFoundError:
                pass


class SlotsUnavailable(Exception):
    """No slot can be had: a new shared-memory block cannot be created (``/dev/shm`` full, too
    many open files, ...). Nothing was allocated."""


class SlotPool:
    """The coordinator's slots: blocks of ``block_size`` slots, a new block when all are taken.

    Slots are reused after :meth:`free`; a block is never shrunk while pumpd runs.
    """

    def __init__(self, block_size: int = 256) -> None:
        self.block_size = block_size
        self._tables: dict[str, SlotTable] = {}
        self._free: list[SlotRef] = []
        self._writers: dict[SlotRef, SlotWriter] = {}

    @property
    def block_names(self) -> list[str]:
        return list(self._tables)

    def allocate(self) -> SlotRef:
        if not self._free:
            table = SlotTable.create(self.block_size)
            self._tables[table.name] = table
            # reversed: pop() hands out low indexes first, which reads better in listings
            self._free = [SlotRef(table.name, i) for i in reversed(range(table.capacity))]
        return self._free.pop()

    def reserve(self, n: int) -> list[SlotRef]:
        """``n`` slots at once, or none: what a reload or a PUT needs before it changes anything.

        :raises SlotsUnavailable: when they cannot all be had (those taken are given back).
        """
        taken: list[SlotRef] = []
        try:
            for _ in range(n):
                taken.append(self.allocate())
        except (OSError, ValueError, MemoryError) as exc:
            for ref in reversed(taken):
                self.free(ref)
            raise SlotsUnavailable(f"cannot allocate {n} status slot(s) in shared memory: "
                                   f"{type(exc).__name__}: {exc}") from None
        return taken

    def free(self, ref: SlotRef) -> None:
        self._free.append(ref)  # its writer (a view on the block) stays for the next owner

    def read(self, ref: SlotRef) -> SlotRecord:
        return self._tables[ref.block].read(ref.index)

    def seq(self, ref: SlotRef) -> int:
        return self._tables[ref.block].seq(ref.index)

    def write(self, ref: SlotRef, record: SlotRecord) -> None:
        """Write as the coordinator: only while no worker process owns the slot."""
        writer = self._writers.get(ref)
        if writer is None:
            writer = self._writers[ref] = self._tables[ref.block].writer(ref.index)
        writer.write(record)

    def close(self) -> None:
        self._writers.clear()
        for table in self._tables.values():
            table.close()
        self._tables.clear()
        self._free.clear()

