# cython: language_level=3
"""The native data plane: ``ConfirmWindow`` and ``Relay`` in C, same API and behaviour as the
pure-Python reference (:mod:`pumpd.dataplane.confirms`, :mod:`pumpd.dataplane.relay_ref`), which is the specification.

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

The cdef declarations live here, not in a ``.pxd``: with ``src/`` mapped as the package directory
Cython does not pick one up. Where this module sits among pumpd's layers:
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
from pumpd.dataplane import received as _received
from pumpd.dataplane.frames import FrameError, UnparseableProperties

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    #ifndef PUMPD_DEBUG
    #define PUMPD_DEBUG 0
    #endif

    static inline int pumpd_ctz64(uint64_t x) { return __builtin_ctzll(x); }
    static inline int pumpd_clz64(uint64_t x) { return __builtin_clzll(x); }
    static inline int pumpd_popcount64(uint64_t x) { return __builtin_popcountll(x); }
    /* the n lowest bits set, 0 <= n <= 64 */
    static inline uint64_t pumpd_low_bits(unsigned n) {
        return n >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << n) - 1);
    }

    /* AMQP is big-endian. */
    static inline uint16_t pumpd_rd16(const unsigned char *p) {
        return (uint16_t)(((unsigned)p[0] << 8) | p[1]);
    }
    static inline uint32_t pumpd_rd32(const unsigned char *p) {
        return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
    }
    static inline uint64_t pumpd_rd64(const unsigned char *p) {
        return ((uint64_t)pumpd_rd32(p) << 32) | pumpd_rd32(p + 4);
    }
    static inline void pumpd_wr16(unsigned char *p, uint16_t v) {
        p[0] = (unsigned char)(v >> 8); p[1] = (unsigned char)v;
    }
    static inline void pumpd_wr32(unsigned char *p, uint32_t v) {
        p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16);
        p[2] = (unsigned char)(v >> 8); p[3] = (unsigned char)v;
    }
    static inline void pumpd_wr64(unsigned char *p, uint64_t v) {
        pumpd_wr32(p, (uint32_t)(v >> 32)); pumpd_wr32(p + 4, (uint32_t)v);
    }
    """
    int PUMPD_DEBUG
    int pumpd_ctz64(uint64_t x) nogil
    int pumpd_clz64(uint64_t x) nogil
    int pumpd_popcount64(uint64_t x) nogil
    uint64_t pumpd_low_bits(unsigned n) nogil
    uint16_t pumpd_rd16(const unsigned char *p) nogil
    uint32_t pumpd_rd32(const unsigned char *p) nogil
    uint64_t pumpd_rd64(const unsigned char *p) nogil
    void pumpd_wr16(unsigned char *p, uint16_t v) nogil
    void pumpd_wr32(unsigned char *p, uint32_t v) nogil
    void pumpd_wr64(unsigned char *p, uint64_t v) nogil

DEBUG_BUILD = bool(PUMPD_DEBUG)

# Wire constants, as in pumpd.dataplane.frames (checked against it below, at import).
cdef enum:
    FRAME_METHOD = 1
    FRAME_HEADER = 2
    FRAME_BODY = 3
    FRAME_END = 0xCE
    FRAME_HEAD = 7  # type(1) channel(2) size(4)
    FRAME_HEARTBEAT = 8
    # bit t set: frame type t is AMQP 0-9-1's (method, header, body, heartbeat)
    FRAME_TYPE_BITS = (1 << 1) | (1 << 2) | (1 << 3) | (1 << 8)
    CLASS_BASIC = 60
    BASIC_PUBLISH = 40
    BASIC_RETURN = 50
    BASIC_DELIVER = 60
    BASIC_ACK = 80
    BASIC_NACK = 120
    ACK_MODE_NO_ACK = 0
    ACK_MODE_ON_PUBLISH = 1
    ACK_MODE_ON_CONFIRM = 2
    N_PROPERTIES = 14
    ACK_FRAME_SIZE = 21  # 7 + class, method (4) + tag (8) + bits (1) + end
    # states of a content assembler
    IDLE = 0
    HEADER = 1
    BODY = 2
    # property wire kinds
    KIND_SHORTSTR = 0
    KIND_TABLE = 1
    KIND_OCTET = 2
    KIND_U64 = 3
    HEADERS_INDEX = 2
    HEADERS_FLAG = 1 << (15 - 2)
    # field value sizes beyond the fixed ones (FIELD_SIZE)
    FIELD_LONG = -1  # u32 length + that many bytes
    FIELD_UNKNOWN = -2
    # what _write_header returns besides 0 (and -1, an exception)
    UNDELIVERABLE = -2  # _und_reason says why
    PAUSED = 2  # _source_frame: taken, and the relay paused after it
    PYTHON_EDIT = -3  # the rare case left to frames.edit_properties
    # a new header entry: key length (1), x-shovelled (11), 'A', u32, 'F', then the hop table
    FORWARD_ENTRY_EXTRA = 1 + 11 + 1 + 4 + 1
    TIMESTAMP_ENTRY = 1 + 21 + 1 + 8

# Property wire kinds by index, from frames.PROPERTY_KINDS ("s", "t", "o", "q").
cdef int[14] PROPERTY_KIND
for _index, _kind in enumerate(_frames.PROPERTY_KINDS):
    PROPERTY_KIND[_index] = "stoq".index(_kind)
del _index, _kind

# Field value sizes by type octet, from frames.FIELD_SIZES (RabbitMQ's rabbit_binary_parser).
cdef int[256] FIELD_SIZE
for _index in range(256):
    FIELD_SIZE[_index] = FIELD_UNKNOWN
for _index, _size in _frames.FIELD_SIZES.items():
    FIELD_SIZE[_index] = FIELD_LONG if _size == _frames.LONG else _size
del _index, _size
cdef const unsigned char *FORWARD_KEY = b"x-shovelled"
cdef const unsigned char *TIMESTAMP_KEY = b"x-shovelled-timestamp"

# The C constants above are the wire's and pumpd.dataplane.frames' too: refuse to load if they drift.
if (
    len(_frames.PROPERTY_KINDS) != N_PROPERTIES
    or _frames.HEADERS_INDEX != HEADERS_INDEX
    or (_frames.FRAME_METHOD, _frames.FRAME_HEADER, _frames.FRAME_BODY, _frames.FRAME_END,
        _frames.FRAME_HEADER_SIZE, _frames.CLASS_BASIC, _frames.BASIC_PUBLISH,
        _frames.BASIC_RETURN, _frames.BASIC_DELIVER, _frames.BASIC_ACK, _frames.BASIC_NACK,
        _frames.ACK_MODE_NO_ACK, _frames.ACK_MODE_ON_PUBLISH, _frames.ACK_MODE_ON_CONFIRM)
    != (FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_END, FRAME_HEAD, CLASS_BASIC,
        BASIC_PUBLISH, BASIC_RETURN, BASIC_DELIVER, BASIC_ACK, BASIC_NACK, ACK_MODE_NO_ACK,
        ACK_MODE_ON_PUBLISH, ACK_MODE_ON_CONFIRM)
):
    raise ImportError("pumpd._fastpath disagrees with pumpd.dataplane.frames on the wire constants")

cdef Py_ssize_t DEFAULT_FRAME_MAX = _received.DEFAULT_FRAME_MAX
cdef uint64_t MAX_BODY_SIZE = _received.MAX_BODY_SIZE


cdef inline Py_ssize_t payload_limit(long long frame_max) noexcept:
    """The largest frame payload allowed on a connection of ``frame_max`` (0: the default)."""
    return (frame_max if frame_max else DEFAULT_FRAME_MAX) - (FRAME_HEAD + 1)


cdef inline int check_head(const unsigned char *h, Py_ssize_t payload_max) except -1:
    """The 7-byte frame header at ``h``: a known type, a size within the limit. Two C
    comparisons per frame; the message is built by ``received.check_frame_head`` (cold path)."""
    cdef unsigned t = h[0]
    if t > 8 or not ((FRAME_TYPE_BITS >> t) & 1) or <Py_ssize_t>pumpd_rd32(h + 3) > payload_max:
        _received.check_frame_head(t, pumpd_rd16(h + 1), pumpd_rd32(h + 3),
                                 payload_max + FRAME_HEAD + 1)
        raise AssertionError("check_frame_head passed a frame check_head refused")
    return 0


cdef inline int check_body_size(uint64_t body_size, uint64_t limit) except -1:
    if body_size > limit:
        _received.check_body_size(body_size, limit)
    return 0


cdef tuple return_fields(const unsigned char *p, Py_ssize_t size, bint make):
    """The basic.return whose payload (class and method ids first) is ``p[:size]``: every length
    checked against ``size``; with ``make``, (reply_code, reply_text, exchange, routing_key)
    as bytes, else None."""
    cdef Py_ssize_t pos = 6, k
    cdef Py_ssize_t starts[3]
    if size < 6:
        raise FrameError("basic.return truncated")
    for k in range(3):
        if pos >= size or pos + 1 + p[pos] > size:
            raise FrameError("basic.return truncated")
        starts[k] = pos
        pos += 1 + p[pos]
    if not make:
        return None
    return (pumpd_rd16(p + 4),
            PyBytes_FromStringAndSize(<const char *>p + starts[0] + 1, p[starts[0]]),
            PyBytes_FromStringAndSize(<const char *>p + starts[1] + 1, p[starts[1]]),
            PyBytes_FromStringAndSize(<const char *>p + starts[2] + 1, p[starts[2]]))


# -- growable byte buffers -----------------------------------------------------------------------

ctypedef struct Buf:
    unsigned char *data
    Py_ssize_t len
    Py_ssize_t cap


cdef int buf_grow(Buf *b, Py_ssize_t extra) except -1:
    cdef Py_ssize_t want = b.len + extra
    cdef Py_ssize_t cap = b.cap * 2
    if cap < want:
        cap = want
    if cap < 4096:
        cap = 4096
    cdef unsigned char *p = <unsigned char *>realloc(b.data, <size_t>cap)
    if p == NULL:
        raise MemoryError()
    b.data = p
    b.cap = cap
    return 0


cdef inline int buf_reserve(Buf *b, Py_ssize_t extra) except -1:
    """Room for ``extra`` more bytes; the buffer only grows."""
    if b.len + extra > b.cap:
        return buf_grow(b, extra)
    return 0


cdef inline int buf_append(Buf *b, const unsigned char *p, Py_ssize_t n) except -1:
    if b.len + n > b.cap:
        buf_grow(b, n)
    memcpy(b.data + b.len, p, <size_t>n)
    b.len += n
    return 0


cdef inline void write_ack_frame(unsigned char *o, uint16_t channel, uint16_t method,
                                 uint64_t tag, unsigned char bits) noexcept:
    o[0] = FRAME_METHOD
    pumpd_wr16(o + 1, channel)
    pumpd_wr32(o + 3, 13)
    pumpd_wr16(o + 7, CLASS_BASIC)
    pumpd_wr16(o + 9, method)
    pumpd_wr64(o + 11, tag)
    o[19] = bits
    o[20] = FRAME_END


cdef inline void buf_free(Buf *b) noexcept:
    free(b.data)
    b.data = NULL
    b.len = 0
    b.cap = 0


cdef object bytes_of(Buf *b):
    """The buffer's bytes as a new ``bytes`` (the shared empty one when there are none)."""
    if b.len == 0:
        return b""
    return PyBytes_FromStringAndSize(<char *>b.data, b.len)


# -- the confirm window --------------------------------------------------------------------------

@cython.final
cdef class ConfirmWindow:
    """Outstanding publishes: sequence number → source delivery tag, and which are settled.

    Same API and behaviour as :class:`pumpd.dataplane.confirms.ConfirmWindow`. The ring of tags and the two
    bitmaps (settled: acked or nacked; nacked) have ``capacity`` entries; the bit of a sequence
    number is ``seq & (capacity - 1)``, so a word never straddles the end of the ring. Bits outside
    ``[base, next)`` are always 0: settling only touches that range and advancing clears what it
    passes.
    """

    cdef uint64_t *_tags
    cdef uint64_t *_settled
    cdef uint64_t *_nackbits
    cdef uint64_t _cap
    cdef uint64_t _mask
    cdef uint64_t _base  # oldest unsettled sequence number
    cdef uint64_t _next  # next sequence number to hand out
    cdef uint64_t _unsettled
    cdef uint64_t _nacked_open  # nacked bits not yet passed by the advance
    cdef uint64_t _pending_tag
    cdef uint64_t _pending_count
    cdef readonly unsigned long long confirmed
    cdef readonly unsigned long long nacked
    cdef readonly unsigned long long acked

    def __init__(self, long long capacity=64):
        cdef uint64_t cap = 64
        while <long long>cap < capacity:
            cap *= 2
        self._release()
        self._tags = <uint64_t *>malloc(cap * sizeof(uint64_t))
        self._settled = <uint64_t *>calloc(cap // 64, sizeof(uint64_t))
        self._nackbits = <uint64_t *>calloc(cap // 64, sizeof(uint64_t))
        if self._tags == NULL or self._settled == NULL or self._nackbits == NULL:
            self._release()
            raise MemoryError()
        self._cap = cap
        self._mask = cap - 1
        self._base = 1
        self._next = 1
        self._unsettled = 0
        self._nacked_open = 0
        self._pending_tag = 0
        self._pending_count = 0
        self.confirmed = 0
        self.nacked = 0
        self.acked = 0

    def __dealloc__(self):
        self._release()

    cdef void _release(self) noexcept:
        free(self._tags)
        free(self._settled)
        free(self._nackbits)
        self._tags = NULL
        self._settled = NULL
        self._nackbits = NULL
        self._cap = 0

    @property
    def outstanding(self):
        """Published and not yet settled by the destination."""
        return self._unsettled

    @property
    def pending_acks(self):
        """Settled publishes the next take_ack() will cover."""
        return self._pending_count

    @property
    def next_seq(self):
        return self._next

    @property
    def capacity(self):
        return self._cap

    def add(self, uint64_t delivery_tag):
        """Record the next publish; returns its confirm sequence number."""
        cdef uint64_t seq = self._add(delivery_tag)
        if PUMPD_DEBUG:
            self._check()
        return seq

    def ack(self, uint64_t seq, bint multiple):
        """The destination confirmed ``seq`` (and, with ``multiple``, everything before it)."""
        self._ack(seq, multiple)
        if PUMPD_DEBUG:
            self._check()

    def nack(self, uint64_t seq, bint multiple):
        """The destination refused ``seq`` (and, with ``multiple``, everything unsettled before
        it). Returns the source delivery tags to reject with requeue, oldest first."""
        cdef list rejected = self._nack(seq, multiple)
        if PUMPD_DEBUG:
            self._check()
        return rejected

    def take_ack(self):
        """The delivery tag for one source ``basic.ack(multiple=true)`` covering every publish
        acked since the last call, or 0 when there is none."""
        return self._take_ack()

    # -- C-level API, used by Relay without Python calls -------------------------------------

    cdef inline uint64_t _add(self, uint64_t tag) except 0:
        if self._next - self._base >= self._cap:
            self._grow()
        cdef uint64_t seq = self._next
        self._tags[seq & self._mask] = tag
        self._next = seq + 1
        self._unsettled += 1
        return seq

    cdef inline void _ack(self, uint64_t seq, bint multiple) noexcept:
        cdef uint64_t last, pos, bit
        if multiple:
            last = seq if seq < self._next else self._next - 1
            if last >= self._base:
                self._settle_range(self._base, last)
        elif self._base <= seq and seq < self._next:
            pos = seq & self._mask
            bit = (<uint64_t>1) << (pos & 63)
            if not (self._settled[pos >> 6] & bit):
                self._settled[pos >> 6] |= bit
                self.confirmed += 1
                self._unsettled -= 1
        self._advance()

    cdef inline uint64_t _take_ack(self) noexcept:
        cdef uint64_t tag = self._pending_tag
        if tag:
            self.acked += self._pending_count
            self._pending_tag = 0
            self._pending_count = 0
        return tag

    cdef list _nack(self, uint64_t seq, bint multiple):
        cdef uint64_t first = self._base if multiple else seq
        cdef uint64_t last = seq if seq < self._next else self._next - 1
        cdef uint64_t s, pos, w, bits, fresh
        cdef unsigned off, n
        cdef int k
        cdef list rejected = []
        if first < self._base:
            first = self._base
        s = first
        while s <= last:
            pos = s & self._mask
            off = pos & 63
            n = 64 - off
            if last - s + 1 < n:
                n = <unsigned>(last - s + 1)
            bits = pumpd_low_bits(n) << off
            w = pos >> 6
            fresh = ~self._settled[w] & bits
            if fresh:
                self._settled[w] |= fresh
                self._nackbits[w] |= fresh
                k = pumpd_popcount64(fresh)
                self._unsettled -= k
                self._nacked_open += k
                self.nacked += k
                while fresh:
                    rejected.append(self._tags[(w << 6) | <uint64_t>pumpd_ctz64(fresh)])
                    fresh &= fresh - 1
            s += n
        self._advance()
        return rejected

    # -- internals -----------------------------------------------------------------------------

    cdef void _settle_range(self, uint64_t first, uint64_t last) noexcept:
        """Mark [first, last] settled by ack, whole words at a time."""
        cdef uint64_t s = first, pos, w, bits
        cdef unsigned off, n, fresh
        while s <= last:
            pos = s & self._mask
            off = pos & 63
            n = 64 - off
            if last - s + 1 < n:
                n = <unsigned>(last - s + 1)
            bits = pumpd_low_bits(n) << off
            w = pos >> 6
            fresh = n - <unsigned>pumpd_popcount64(self._settled[w] & bits)
            self.confirmed += fresh
            self._unsettled -= fresh
            self._settled[w] |= bits
            s += n

    cdef inline void _advance(self) noexcept:
        """Move ``base`` over the settled prefix, a word at a time; record the newest acked tag."""
        cdef uint64_t pos, w, inv, bits, nb, acked_bits
        cdef uint64_t run
        cdef unsigned off
        cdef int k
        while self._base < self._next:
            pos = self._base & self._mask
            off = pos & 63
            w = pos >> 6
            inv = (~self._settled[w]) >> off
            run = <uint64_t>pumpd_ctz64(inv) if inv else 64 - off
            if run > self._next - self._base:
                run = self._next - self._base
            if run == 0:
                return
            bits = pumpd_low_bits(<unsigned>run) << off
            self._settled[w] &= ~bits
            self._base += run
            if self._nacked_open:
                nb = self._nackbits[w] & bits
                if nb:
                    # rare path: the run holds nacked publishes, which the source ack must skip
                    k = pumpd_popcount64(nb)
                    self._nackbits[w] &= ~nb
                    self._nacked_open -= k
                    acked_bits = bits & ~nb
                    if acked_bits:
                        self._pending_tag = self._tags[(w << 6) | <uint64_t>(63 - pumpd_clz64(acked_bits))]
                        self._pending_count += run - k
                    continue
            self._pending_tag = self._tags[(self._base - 1) & self._mask]
            self._pending_count += run

    cdef int _grow(self) except -1:
        cdef uint64_t cap = self._cap * 2
        cdef uint64_t mask = cap - 1
        cdef uint64_t s, old, new
        cdef uint64_t *tags = <uint64_t *>malloc(cap * sizeof(uint64_t))
        cdef uint64_t *settled = <uint64_t *>calloc(cap // 64, sizeof(uint64_t))
        cdef uint64_t *nackbits = <uint64_t *>calloc(cap // 64, sizeof(uint64_t))
        if tags == NULL or settled == NULL or nackbits == NULL:
            free(tags)
            free(settled)
            free(nackbits)
            raise MemoryError()
        s = self._base
        while s < self._next:
            old = s & self._mask
            new = s & mask
            tags[new] = self._tags[old]
            if self._settled[old >> 6] >> (old & 63) & 1:
                settled[new >> 6] |= (<uint64_t>1) << (new & 63)
            if self._nackbits[old >> 6] >> (old & 63) & 1:
                nackbits[new >> 6] |= (<uint64_t>1) << (new & 63)
            s += 1
        self._release()
        self._tags = tags
        self._settled = settled
        self._nackbits = nackbits
        self._cap = cap
        self._mask = mask
        return 0

    cdef int _check(self) except -1:
        """Debug builds: the invariants, with a full scan (never called in a release build)."""
        cdef uint64_t s, pos, w, settled_in = 0, nacked_in = 0, settled_all = 0, nacked_all = 0
        if self._base > self._next or self._next - self._base > self._cap:
            raise AssertionError(f"confirm window: base {self._base} next {self._next} cap {self._cap}")
        for w in range(self._cap // 64):
            settled_all += pumpd_popcount64(self._settled[w])
            nacked_all += pumpd_popcount64(self._nackbits[w])
            if self._nackbits[w] & ~self._settled[w]:
                raise AssertionError(f"confirm window: a nacked bit not settled in word {w}")
        s = self._base
        while s < self._next:
            pos = s & self._mask
            settled_in += self._settled[pos >> 6] >> (pos & 63) & 1
            nacked_in += self._nackbits[pos >> 6] >> (pos & 63) & 1
            s += 1
        if settled_in != settled_all or nacked_in != nacked_all:
            raise AssertionError("confirm window: bits set outside [base, next)")
        if self._next - self._base - settled_in != self._unsettled:
            raise AssertionError(f"confirm window: {self._unsettled} unsettled counted, "
                                 f"{self._next - self._base - settled_in} in the bitmap")
        if nacked_in != self._nacked_open:
            raise AssertionError(f"confirm window: {self._nacked_open} open nacks counted, {nacked_in} in the bitmap")
        return 0


# -- the relay -----------------------------------------------------------------------------------

@cython.final
cdef class Relay:
    """One session's data plane: same API and behaviour as :class:`pumpd.dataplane.relay_ref.Relay`.

    :raises ValueError: for a destination frame_max below 4096 or an unknown ack mode (as the
        reference); also, where the reference would only fail later, per message, or misbehave:
        a channel outside 0..65535, a fixed exchange or routing key longer than 255 bytes, a
        property override index outside 0..13, a negative limit
    """

    cdef uint16_t _src_ch
    cdef uint16_t _dst_ch
    cdef Py_ssize_t _body_max
    cdef int _ack_mode
    cdef unsigned char _mandatory
    cdef unsigned long long _limit
    cdef ConfirmWindow _window
    # publish fields: fixed ones pre-encoded as short strings
    cdef bint _ex_fixed
    cdef bint _rk_fixed
    cdef unsigned char[256] _ex
    cdef unsigned char[256] _rk
    # property overrides, pre-encoded values by index (kept alive by _ovr_keep)
    cdef dict _ovr_dict
    cdef tuple _ovr_keep
    cdef bint _has_ovr
    cdef unsigned _ovr_flags
    cdef Py_ssize_t _ovr_total
    cdef const unsigned char *_ovr_ptr[14]
    cdef Py_ssize_t[14] _ovr_len
    # header edits: this hop's encoded table (kept alive by _fwd_keep), the timestamp header
    cdef object _fwd_keep
    cdef const unsigned char *_fwd
    cdef Py_ssize_t _fwd_len
    cdef bint _ts
    cdef int64_t _now  # the clock, read once per feed call that needs it (-1: not yet)
    cdef bint _edits  # overrides, forward or timestamp header: the properties are parsed
    cdef Py_ssize_t _frame_max  # 0: no limit
    cdef Py_ssize_t _src_payload_max  # the largest frame payload received on each connection
    cdef Py_ssize_t _dst_payload_max
    cdef uint64_t _max_body  # the largest body a content header may announce
    # undeliverable messages and keep_last
    cdef bint _keep_last
    cdef object _last  # keep_last: the last message published
    cdef bint _undeliv  # the message being received is undeliverable
    cdef object _und_reason
    cdef bint _paused
    cdef object _und  # while paused: the message that caused the pause
    # hold_returns: a basic.return pauses the destination side after its content
    cdef bint _hold_returns
    cdef bint _dst_paused
    cdef Buf _dst_kept  # destination bytes received while paused, unscanned
    cdef object _returned  # while the destination side is paused: the returned message
    cdef object _ret_fields  # (reply_code, reply_text, exchange, routing_key) of the return
    cdef object _ret_props
    cdef list _ret_body
    cdef Buf _kept  # source bytes received while paused, unscanned
    cdef Buf _cur_props  # the current message's properties as received (when copied)
    cdef Buf _cur_body  # and its body
    cdef unsigned char[256] _cur_ex  # its exchange and routing key as delivered
    cdef unsigned char[256] _cur_rk
    cdef bint _copy_names  # at every delivery: they are not in the publish frame, or keep_last
    # buffers
    cdef Buf _src_carry  # an incomplete frame at the end of the last source read
    cdef Buf _dst_carry
    cdef Buf _pub  # publish frames: complete messages, then maybe one unfinished message
    cdef Py_ssize_t _complete  # bytes of _pub holding complete messages
    cdef Buf _src_out  # ack / nack frames for the source channel
    cdef Buf _pass  # the frames for pika of the current feed call
    # the message being assembled on the source channel
    cdef int _src_state
    cdef bint _held  # past the limit: parsed and dropped, not published
    cdef bint _hold_rest  # hold_rest(): every later delivery is held
    cdef bint _body_plain  # the body goes to the publish buffer only (not held, not copied)
    cdef bint _cur_redelivered
    cdef uint64_t _cur_tag
    cdef uint64_t _cur_size
    cdef uint64_t _remaining  # body bytes still to come
    cdef uint64_t _out_left  # bytes still to fill in the current output body frame
    # the content of a basic.return on the destination channel (counted and dropped)
    cdef int _ret_state
    cdef uint64_t _ret_remaining
    # on_publish: newest delivery tag encoded and not yet acked
    cdef uint64_t _last_tag
    cdef unsigned long long _buffered
    cdef unsigned long long _acked_on_publish
    cdef uint64_t _pub_ack_tag  # on_publish: the newest published tag not yet acked
    cdef unsigned long long _pub_ack_count
    cdef readonly unsigned long long consumed
    cdef readonly unsigned long long published
    cdef readonly unsigned long long redelivered
    cdef readonly unsigned long long returned
    cdef readonly unsigned long long bytes
    cdef readonly unsigned long long undeliverable

    def __init__(
        self,
        *,
        source_channel,
        dest_channel,
        dest_frame_max,
        ack_mode,
        exchange=None,
        routing_key=None,
        property_overrides=None,
        forward_hop=None,
        timestamp_header=False,
        window=0,
        mandatory=True,
        limit=0,
        keep_last=False,
        hold_returns=False,
        source_frame_max=0,
        max_body_size=MAX_BODY_SIZE,
    ):
        cdef Py_ssize_t i
        if dest_frame_max and dest_frame_max < 4096:
            raise ValueError(f"destination frame_max {dest_frame_max} is below AMQP's 4096")
        if source_frame_max and source_frame_max < 4096:
            raise ValueError(f"source frame_max {source_frame_max} is below AMQP's 4096")
        if max_body_size < 0:
            raise ValueError(f"max_body_size {max_body_size} is negative")
        self._src_payload_max = payload_limit(source_frame_max)
        self._dst_payload_max = payload_limit(dest_frame_max)
        self._max_body = max_body_size
        if ack_mode not in (ACK_MODE_NO_ACK, ACK_MODE_ON_PUBLISH, ACK_MODE_ON_CONFIRM):
            raise ValueError(f"unknown ack mode {ack_mode}")
        for name, channel in (("source_channel", source_channel), ("dest_channel", dest_channel)):
            if not 0 <= channel <= 0xFFFF:
                raise ValueError(f"{name} {channel} is not a channel number")
        self._src_ch = source_channel
        self._dst_ch = dest_channel
        self._body_max = (dest_frame_max or 131072) - (FRAME_HEAD + 1)
        self._ack_mode = ack_mode
        self._mandatory = 1 if mandatory else 0
        if limit < 0:
            raise ValueError(f"limit {limit} is negative")
        self._limit = limit
        self._window = ConfirmWindow(window or 64)
        self._ex_fixed = exchange is not None
        if self._ex_fixed:
            _short_string(self._ex, exchange, "exchange")
        self._rk_fixed = routing_key is not None
        if self._rk_fixed:
            _short_string(self._rk, routing_key, "routing key")
        overrides = dict(property_overrides or {})
        self._ovr_dict = overrides
        self._has_ovr = bool(overrides)
        self._ovr_flags = 0
        self._ovr_total = 0
        for i in range(N_PROPERTIES):
            self._ovr_ptr[i] = NULL
            self._ovr_len[i] = 0
        keep = []
        for index, encoded in overrides.items():
            if not 0 <= index < N_PROPERTIES:
                raise ValueError(f"property override index {index} is not one of the 14 basic properties")
            i = index
            value = bytes(encoded)
            keep.append(value)
            self._ovr_ptr[i] = <const unsigned char *>PyBytes_AS_STRING(value)
            self._ovr_len[i] = len(value)
            self._ovr_flags |= 1u << (15 - i)
        self._ovr_total = sum(len(v) for v in keep)
        self._ovr_keep = tuple(keep)
        self._fwd_keep = None if forward_hop is None else bytes(forward_hop)
        self._fwd = NULL
        self._fwd_len = 0
        if self._fwd_keep is not None:
            if len(self._fwd_keep) < 4 or len(self._fwd_keep) != 4 + _frames._U32.unpack_from(self._fwd_keep, 0)[0]:
                raise ValueError("forward_hop is not an encoded field table")
            self._fwd = <const unsigned char *>PyBytes_AS_STRING(self._fwd_keep)
            self._fwd_len = len(self._fwd_keep)
        self._ts = bool(timestamp_header)
        self._now = -1
        self._edits = self._has_ovr or self._fwd != NULL or self._ts
        self._frame_max = dest_frame_max
        self._keep_last = bool(keep_last)
        self._hold_returns = bool(hold_returns)
        self._dst_paused = 0
        self._dst_kept.len = 0
        self._returned = None
        self._ret_fields = None
        self._ret_props = b""
        self._ret_body = []
        self._copy_names = self._ex_fixed or self._rk_fixed or self._keep_last
        self._last = None
        self._undeliv = 0
        self._und_reason = None
        self._paused = 0
        self._und = None
        self._kept.len = 0
        self._cur_props.len = 0
        self._cur_body.len = 0
        self._body_plain = 1
        self.undeliverable = 0
        self._src_carry.len = 0
        self._dst_carry.len = 0
        self._pub.len = 0
        self._complete = 0
        self._src_out.len = 0
        self._pass.len = 0
        self._src_state = IDLE
        self._hold_rest = 0
        self._ret_state = IDLE
        self._last_tag = 0
        self._buffered = 0
        self._acked_on_publish = 0
        self._pub_ack_tag = 0
        self._pub_ack_count = 0
        self.consumed = 0
        self.published = 0
        self.redelivered = 0
        self.returned = 0
        self.bytes = 0

    def __dealloc__(self):
        buf_free(&self._src_carry)
        buf_free(&self._dst_carry)
        buf_free(&self._pub)
        buf_free(&self._src_out)
        buf_free(&self._pass)
        buf_free(&self._kept)
        buf_free(&self._dst_kept)
        buf_free(&self._cur_props)
        buf_free(&self._cur_body)

    # -- counters -------------------------------------------------------------------------------

    @property
    def confirmed(self):
        return self._window.confirmed

    @property
    def nacked(self):
        return self._window.nacked

    @property
    def acked(self):
        return self._window.acked + self._acked_on_publish

    @property
    def in_flight(self):
        """Published and not yet settled by the destination (on_confirm only)."""
        return self._window._unsettled

    @property
    def buffered(self):
        """Messages encoded for the destination and not yet taken (held while blocked)."""
        return self._buffered

    @property
    def limit_reached(self):
        return self._limit != 0 and self.consumed >= self._limit

    @property
    def pending_acks(self):
        """Source messages the next take_source_output() ack will cover."""
        if self._ack_mode == ACK_MODE_ON_PUBLISH:
            return self._pub_ack_count
        return self._window._pending_count

    def has_source_output(self):
        return self._src_out.len != 0 or self._window._pending_count != 0 or self._pub_ack_tag != 0

    def has_output(self):
        return self._complete != 0 or self.has_source_output()

    # -- source side ----------------------------------------------------------------------------

    def feed_source(self, data):
        """Scan bytes read from the source connection; returns the bytes meant for pika. While
        paused, the bytes are kept unscanned and nothing is returned."""
        return self._feed_object(data, True)

    @property
    def paused(self):
        """An undeliverable message stopped the scan; see take_undeliverable()."""
        return bool(self._paused)

    @property
    def last_message(self):
        """keep_last: the last message published, as take_undeliverable() describes one."""
        return self._last

    def take_undeliverable(self):
        """(delivery_tag, redelivered, exchange, routing_key, raw properties as received, body,
        reason) of the message that caused the pause; None when not paused. The engine settles
        its delivery tag at the source before resume()."""
        return self._und

    def hold_rest(self):
        """From now on hold every delivery: parsed, never published nor acked, so the source
        requeues it when the session closes (the stop policy)."""
        self._hold_rest = 1

    def resume(self):
        """Leave the pause and scan the bytes kept meanwhile (which may pause again); returns
        the bytes meant for pika, as feed_source() does."""
        if not self._paused:
            return b""
        self._paused = 0
        self._und = None
        kept = bytes_of(&self._kept)
        self._kept.len = 0
        return self._feed_object(kept, True)

    def take_publishes(self):
        """All publish frames encoded since the last call, as one buffer to write. In on_publish
        mode this also queues the source ack covering them."""
        cdef Py_ssize_t n = self._complete
        cdef Py_ssize_t tail
        if n:
            data = PyBytes_FromStringAndSize(<char *>self._pub.data, n)
            tail = self._pub.len - n
            if tail:  # the frames of a message still being received
                memmove(self._pub.data, self._pub.data + n, <size_t>tail)
            self._pub.len = tail
            self._complete = 0
        else:
            data = b""
        self.published += self._buffered
        if self._ack_mode == ACK_MODE_ON_PUBLISH and self._last_tag:
            self._pub_ack_tag = self._last_tag
            self._pub_ack_count += self._buffered
            self._last_tag = 0
        self._buffered = 0
        if PUMPD_DEBUG:
            self._check()
        return data

    def take_source_output(self):
        """Ack / nack frames for the source channel, in the order they must be sent: nacks
        first, then one multiple ack covering everything settled (or published) since the last
        call. Calling it less often coalesces acks further."""
        cdef uint64_t tag = self._window._take_ack()
        if self._pub_ack_tag:
            tag = self._pub_ack_tag
            self._acked_on_publish += self._pub_ack_count
            self._pub_ack_tag = 0
            self._pub_ack_count = 0
        if tag:
            buf_reserve(&self._src_out, ACK_FRAME_SIZE)
            write_ack_frame(self._src_out.data + self._src_out.len, self._src_ch, BASIC_ACK, tag, 1)
            self._src_out.len += ACK_FRAME_SIZE
        data = bytes_of(&self._src_out)
        self._src_out.len = 0
        return data

    # -- destination side -----------------------------------------------------------------------

    @property
    def destination_paused(self):
        """hold_returns: a returned message stopped the destination scan; see take_returned()."""
        return bool(self._dst_paused)

    def take_returned(self):
        """(reply_code, reply_text, exchange, routing_key, raw properties, body) of the returned
        message that paused the destination side; None when not paused."""
        return self._returned

    def resume_destination(self):
        """Leave the destination pause and scan the bytes kept meanwhile (which may pause
        again); returns the bytes meant for pika, as feed_destination() does."""
        if not self._dst_paused:
            return b""
        self._dst_paused = 0
        self._returned = None
        kept = bytes_of(&self._dst_kept)
        self._dst_kept.len = 0
        return self._feed_object(kept, False)

    def feed_destination(self, data):
        """Scan bytes read from the destination connection; returns the bytes meant for pika."""
        return self._feed_object(data, False)

    # -- framing --------------------------------------------------------------------------------

    cdef object _feed_object(self, object data, bint source):
        """:meth:`_feed` on what a transport handed over: bytes without a copy, or any buffer."""
        cdef Py_buffer view
        if PyBytes_CheckExact(data):
            return self._feed(<const unsigned char *>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), source)
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            return self._feed(<const unsigned char *>view.buf, view.len, source)
        finally:
            PyBuffer_Release(&view)

    cdef object _feed(self, const unsigned char *data, Py_ssize_t n, bint source):
        """Complete the carried-over frame from ``data``, then scan ``data`` in place; keep an
        incomplete last frame for the next call. Returns the passthrough bytes."""
        cdef Buf *carry = &self._src_carry if source else &self._dst_carry
        cdef Py_ssize_t pos = 0, k, frame_len
        cdef uint64_t tag
        cdef bint held
        if source and self._paused:
            buf_append(&self._kept, data, n)
            return b""
        if not source and self._dst_paused:
            buf_append(&self._dst_kept, data, n)
            return b""
        self._pass.len = 0
        self._now = -1
        try:
            if carry.len:
                if carry.len < FRAME_HEAD:
                    k = min(FRAME_HEAD - carry.len, n)
                    buf_append(carry, data, k)
                    pos = k
                if carry.len >= FRAME_HEAD:
                    check_head(carry.data,
                               self._src_payload_max if source else self._dst_payload_max)
                    frame_len = FRAME_HEAD + <Py_ssize_t>pumpd_rd32(carry.data + 3) + 1
                    k = min(frame_len - carry.len, n - pos)
                    buf_append(carry, data + pos, k)
                    pos += k
                    if carry.len == frame_len:
                        self._scan(carry.data, carry.len, source)
                        carry.len = 0
            if carry.len == 0:
                held = self._paused if source else self._dst_paused
                if not held:
                    pos += self._scan(data + pos, n - pos, source)
                    held = self._paused if source else self._dst_paused
                if pos < n:
                    # paused: what follows the undeliverable (or returned) message waits for
                    # resume() (or resume_destination())
                    buf_append((&self._kept if source else &self._dst_kept) if held else carry,
                               data + pos, n - pos)
        except BaseException:
            if source:
                # Never hand out part of a message: drop the frames of the unfinished one.
                self._pub.len = self._complete
                self._src_state = IDLE
                self._undeliv = 0
            raise
        if PUMPD_DEBUG:
            self._check()
        return bytes_of(&self._pass)

    cdef Py_ssize_t _scan(self, const unsigned char *buf, Py_ssize_t n, bint source) except -1:
        """Handle every complete frame in ``buf``; returns the bytes used."""
        cdef Py_ssize_t pos = 0, size, end
        cdef Py_ssize_t payload_max = self._src_payload_max if source else self._dst_payload_max
        cdef uint16_t channel
        cdef int taken
        while n - pos >= FRAME_HEAD:
            check_head(buf + pos, payload_max)  # before waiting for the rest of the frame
            size = <Py_ssize_t>pumpd_rd32(buf + pos + 3)
            end = pos + FRAME_HEAD + size
            if end >= n:
                break
            channel = pumpd_rd16(buf + pos + 1)
            if buf[end] != FRAME_END:
                raise FrameError(f"frame end octet missing on channel {channel}")
            taken = 0
            if source:
                if channel == self._src_ch:
                    taken = self._source_frame(buf[pos], buf + pos + FRAME_HEAD, size)
                    if taken == PAUSED:
                        return end + 1
            elif channel == self._dst_ch:
                taken = self._dest_frame(buf[pos], buf + pos + FRAME_HEAD, size)
                if taken == PAUSED:
                    return end + 1
            if not taken:
                buf_append(&self._pass, buf + pos, end + 1 - pos)
            pos = end + 1
        return pos

    cdef inline int _source_frame(self, int ftype, const unsigned char *p, Py_ssize_t size) except -1:
        """One frame of the source channel (payload ``p``); 1 if it is the relay's, 0 for pika."""
        if self._src_state == IDLE:
            if ftype != FRAME_METHOD:
                return 0
            if size < 4:
                raise FrameError(f"method frame of {size} bytes")
            if pumpd_rd16(p) != CLASS_BASIC or pumpd_rd16(p + 2) != BASIC_DELIVER:
                return 0
            self._on_deliver(p, size)
            return 1
        if self._src_state == HEADER:
            if ftype != FRAME_HEADER:
                raise FrameError(f"expected a content header after basic.deliver, got frame type {ftype}")
            if size < 12:
                raise FrameError(f"content header of {size} bytes")
            return 1 + self._on_header(p, size)
        if ftype != FRAME_BODY:
            raise FrameError(f"expected a body frame, got frame type {ftype}")
        if <uint64_t>size > self._remaining:
            raise FrameError("body frames longer than the content header's body size")
        if self._body_plain:
            self._write_body(p, size)
        elif not self._held:
            if not self._undeliv:
                self._write_body(p, size)
            buf_append(&self._cur_body, p, size)
        self._remaining -= <uint64_t>size
        if self._remaining == 0:
            return 1 + self._on_delivery()
        return 1

    cdef int _on_deliver(self, const unsigned char *p, Py_ssize_t size) except -1:
        """basic.deliver: note the tag, and write the basic.publish frame unless held."""
        cdef Py_ssize_t pos = 5, ex_pos, rk_pos, frame_size
        cdef const unsigned char *ex
        cdef const unsigned char *rk
        cdef unsigned char *o
        if size < 5 or size < pos + p[4] + 10:
            raise FrameError("basic.deliver truncated")
        pos += p[4]  # consumer tag
        self._cur_tag = pumpd_rd64(p + pos)
        self._cur_redelivered = p[pos + 8] & 1
        ex_pos = pos + 9
        rk_pos = ex_pos + 1 + p[ex_pos]
        if rk_pos >= size or rk_pos + 1 + p[rk_pos] > size:
            raise FrameError("basic.deliver truncated")
        self._src_state = HEADER
        self._held = self._hold_rest or (self._limit != 0 and self.consumed >= self._limit)
        if self._held:
            return 0  # held unacknowledged: requeued at the source when the session closes
        if self._copy_names:
            # the original names, for an undeliverable or kept message; otherwise they are
            # read back from the basic.publish frame, and only for an undeliverable message
            memcpy(self._cur_ex, p + ex_pos, 1 + p[ex_pos])
            memcpy(self._cur_rk, p + rk_pos, 1 + p[rk_pos])
        ex = p + ex_pos
        if self._ex_fixed:
            ex = &self._ex[0]
        rk = p + rk_pos
        if self._rk_fixed:
            rk = &self._rk[0]
        # class, method (4), ticket (2), exchange, routing key, mandatory bit
        frame_size = 6 + 1 + ex[0] + 1 + rk[0] + 1
        buf_reserve(&self._pub, FRAME_HEAD + frame_size + 1)
        o = self._pub.data + self._pub.len
        o[0] = FRAME_METHOD
        pumpd_wr16(o + 1, self._dst_ch)
        pumpd_wr32(o + 3, <uint32_t>frame_size)
        pumpd_wr16(o + 7, CLASS_BASIC)
        pumpd_wr16(o + 9, BASIC_PUBLISH)
        o[11] = 0
        o[12] = 0
        o += 13
        memcpy(o, ex, 1 + ex[0])
        o += 1 + ex[0]
        memcpy(o, rk, 1 + rk[0])
        o += 1 + rk[0]
        o[0] = self._mandatory
        o[1] = FRAME_END
        self._pub.len += FRAME_HEAD + frame_size + 1
        return 0

    cdef int _on_header(self, const unsigned char *p, Py_ssize_t size) except -1:
        """The content header: write ours (properties forwarded, spliced or rewritten)."""
        cdef uint64_t body_size = pumpd_rd64(p + 4)
        check_body_size(body_size, self._max_body)
        self._cur_size = body_size
        self._remaining = body_size
        self._out_left = 0
        self._body_plain = not (self._held or self._keep_last)
        if not self._held:
            if self._keep_last:
                self._cur_props.len = 0
                buf_append(&self._cur_props, p + 12, size - 12)
                self._cur_body.len = 0
            if self._write_header(body_size, p + 12, size - 12):
                self._set_aside(p + 12, size - 12)
        if body_size == 0:
            return self._on_delivery()
        self._src_state = BODY
        return 0

    cdef int _set_aside(self, const unsigned char *props, Py_ssize_t props_len) except -1:
        """The message being received is undeliverable: drop its basic.publish frame, keep
        its properties and collect its body instead of writing it."""
        cdef const unsigned char *names
        if not self._copy_names:
            names = self._pub.data + self._complete + FRAME_HEAD + 6  # class, method, ticket
            memcpy(self._cur_ex, names, 1 + names[0])
            names += 1 + names[0]
            memcpy(self._cur_rk, names, 1 + names[0])
        self._undeliv = 1
        self._body_plain = 0
        self._pub.len = self._complete
        self._cur_props.len = 0
        buf_append(&self._cur_props, props, props_len)
        self._cur_body.len = 0
        return 0

    cdef inline int _write_header(self, uint64_t body_size, const unsigned char *props,
                                  Py_ssize_t props_len) except -1:
        """Our content header; UNDELIVERABLE (and nothing written) when it cannot be."""
        cdef unsigned char *o
        cdef Py_ssize_t n = props_len
        if self._edits:
            return self._write_header_changed(body_size, props, props_len)
        if self._frame_max and FRAME_HEAD + 12 + props_len + 1 > self._frame_max:
            return self._too_large(FRAME_HEAD + 12 + props_len + 1)
        buf_reserve(&self._pub, FRAME_HEAD + 12 + props_len + 1)
        o = self._pub.data + self._pub.len
        memcpy(o + FRAME_HEAD + 12, props, <size_t>props_len)  # forwarded as they came
        self._finish_header(o, body_size, n)
        return 0

    cdef int _too_large(self, Py_ssize_t header_size) except -1:
        self._und_reason = (f"content header of {header_size} bytes exceeds the destination's "
                            f"frame_max {self._frame_max}")
        return UNDELIVERABLE

    cdef int _unparseable(self, str what) except -1:
        self._und_reason = f"its properties cannot be parsed: {what}"
        return UNDELIVERABLE

    cdef int _write_header_changed(self, uint64_t body_size, const unsigned char *props,
                                   Py_ssize_t props_len) except -1:
        """With property overrides and / or header edits, spliced in C."""
        cdef unsigned char *o
        cdef Py_ssize_t n
        buf_reserve(&self._pub, FRAME_HEAD + 12 + props_len + self._ovr_total + 4
                    + (FORWARD_ENTRY_EXTRA + self._fwd_len if self._fwd != NULL else 0)
                    + (TIMESTAMP_ENTRY if self._ts else 0) + 1)
        o = self._pub.data + self._pub.len
        n = self._splice_properties(props, props_len, o + FRAME_HEAD + 12)
        if n == UNDELIVERABLE:
            return UNDELIVERABLE
        if n == PYTHON_EDIT:
            n = self._edit_in_python(props, props_len)
            if n == UNDELIVERABLE:
                return UNDELIVERABLE
            o = self._pub.data + self._pub.len
        if self._frame_max and FRAME_HEAD + 12 + n + 1 > self._frame_max:
            return self._too_large(FRAME_HEAD + 12 + n + 1)
        self._finish_header(o, body_size, n)
        return 0

    cdef Py_ssize_t _edit_in_python(self, const unsigned char *props,
                                    Py_ssize_t props_len) except -1:
        """The rare edit left to the reference: its properties at ``_pub.len + 19``; returns
        their length, or UNDELIVERABLE."""
        cdef const unsigned char[:] edited
        cdef Py_ssize_t n
        try:
            result = _frames.edit_properties(
                PyBytes_FromStringAndSize(<char *>props, props_len), self._ovr_dict,
                self._fwd_keep, <long long>time(NULL) if self._ts else None)
        except UnparseableProperties as exc:
            return self._unparseable(str(exc))
        edited = result
        n = edited.shape[0]
        buf_reserve(&self._pub, FRAME_HEAD + 12 + n + 1)
        memcpy(self._pub.data + self._pub.len + FRAME_HEAD + 12, &edited[0], <size_t>n)
        return n

    cdef inline void _finish_header(self, unsigned char *o, uint64_t body_size,
                                    Py_ssize_t props_len) noexcept:
        """Frame head and end around the ``props_len`` property bytes already at ``o + 19``."""
        o[0] = FRAME_HEADER
        pumpd_wr16(o + 1, self._dst_ch)
        pumpd_wr32(o + 3, <uint32_t>(12 + props_len))
        pumpd_wr16(o + 7, CLASS_BASIC)
        pumpd_wr16(o + 9, 0)  # weight
        pumpd_wr64(o + 11, body_size)
        o[FRAME_HEAD + 12 + props_len] = FRAME_END
        self._pub.len += FRAME_HEAD + 12 + props_len + 1

    cdef Py_ssize_t _splice_properties(self, const unsigned char *src, Py_ssize_t src_len,
                                       unsigned char *out) except -1:
        """Raw properties with the overrides put in, then the header edits, without decoding
        the other values (the same as ``frames.edit_properties``); returns the length written to
        ``out``, or UNDELIVERABLE / PYTHON_EDIT."""
        cdef unsigned flags, bit, out_flags
        cdef unsigned ovr_flags = self._ovr_flags
        # the properties not copied as they came: overridden, or the headers when edited
        cdef bint edit = self._fwd != NULL or self._ts
        cdef unsigned changed = ovr_flags | (HEADERS_FLAG if edit else 0)
        cdef Py_ssize_t pos = 2, start = 0, end = 0, o = 2, k
        cdef int i, kind
        cdef const unsigned char *table
        cdef Py_ssize_t table_len
        if src_len < 2:
            return self._unparseable("content header without property flags")
        flags = pumpd_rd16(src)
        if flags & 1:
            return self._unparseable("property flag continuation is not used by basic properties")
        out_flags = flags | changed
        for i in range(N_PROPERTIES):
            bit = 1u << (15 - i)
            if flags & bit:
                kind = PROPERTY_KIND[i]
                if kind == KIND_SHORTSTR:
                    end = pos + 1 + (src[pos] if pos < src_len else 0)
                elif kind == KIND_TABLE:
                    end = pos + 4 + (<Py_ssize_t>pumpd_rd32(src + pos) if pos + 4 <= src_len else 0)
                elif kind == KIND_OCTET:
                    end = pos + 1
                else:
                    end = pos + 8
                if end > src_len:
                    return self._unparseable("content header properties truncated")
                start = pos
                pos = end
            if changed & bit:
                if i == HEADERS_INDEX and edit:
                    table = NULL
                    table_len = 0
                    if ovr_flags & bit:
                        table = self._ovr_ptr[i]
                        table_len = self._ovr_len[i]
                    elif flags & bit:
                        table = src + start
                        table_len = end - start
                    k = self._edit_table(table, table_len, out + o)
                    if k < 0:
                        return k
                    o += k
                else:
                    memcpy(out + o, self._ovr_ptr[i], <size_t>self._ovr_len[i])
                    o += self._ovr_len[i]
            elif flags & bit:
                memcpy(out + o, src + start, <size_t>(end - start))
                o += end - start
        pumpd_wr16(out, <uint16_t>out_flags)
        return o

    cdef Py_ssize_t _edit_table(self, const unsigned char *t, Py_ssize_t t_len,
                                unsigned char *out) except -1:
        """The headers table ``t`` (u32 length + entries; NULL: none) with this hop first in
        ``x-shovelled`` and / or ``x-shovelled-timestamp`` set, every other entry copied as it is
        (``frames.edit_headers``). Returns the length written, or UNDELIVERABLE / PYTHON_EDIT."""
        cdef Py_ssize_t o = 4, pos, vpos, size, entry_end, run, end
        cdef bint fwd_done = self._fwd == NULL
        cdef bint ts_done = not self._ts
        cdef uint32_t array_len
        cdef int64_t now = 0
        if self._ts:
            # time() may be a system call (no vDSO clock on some VMs): a second's resolution
            # needs one reading per batch of messages, not one per message
            if self._now < 0:
                self._now = <int64_t>time(NULL)
            now = self._now
        if t != NULL:
            end = t_len  # the property walk made it 4 + the table's length
            pos = run = 4
            while pos < end:
                vpos = pos + 1 + t[pos]
                if vpos >= end:
                    return self._unparseable("headers table truncated")
                size = FIELD_SIZE[t[vpos]]
                if size == FIELD_UNKNOWN:
                    return self._unparseable(f"headers table has an unknown field type 0x{t[vpos]:02x}")
                if size == FIELD_LONG:
                    if vpos + 5 > end:
                        return self._unparseable("headers table truncated")
                    size = 4 + <Py_ssize_t>pumpd_rd32(t + vpos + 1)
                entry_end = vpos + 1 + size
                if entry_end > end:
                    return self._unparseable("headers table truncated")
                if not fwd_done and t[pos] == 11 and memcmp(t + pos + 1, FORWARD_KEY, 11) == 0:
                    if t[vpos] != b'A':
                        return PYTHON_EDIT  # the plugin moves it to x-invalid-headers
                    memcpy(out + o, t + run, <size_t>(vpos - run))
                    o += vpos - run
                    array_len = pumpd_rd32(t + vpos + 1)
                    out[o] = b'A'
                    pumpd_wr32(out + o + 1, <uint32_t>(array_len + 1 + self._fwd_len))
                    out[o + 5] = b'F'
                    memcpy(out + o + 6, self._fwd, <size_t>self._fwd_len)
                    o += 6 + self._fwd_len
                    memcpy(out + o, t + vpos + 5, array_len)
                    o += array_len
                    run = entry_end
                    fwd_done = 1
                elif not ts_done and t[pos] == 21 and memcmp(t + pos + 1, TIMESTAMP_KEY, 21) == 0:
                    memcpy(out + o, t + run, <size_t>(vpos - run))
                    o += vpos - run
                    out[o] = b'l'
                    pumpd_wr64(out + o + 1, <uint64_t>now)
                    o += 9
                    run = entry_end
                    ts_done = 1
                pos = entry_end
            memcpy(out + o, t + run, <size_t>(end - run))
            o += end - run
        if not fwd_done:
            out[o] = 11
            memcpy(out + o + 1, FORWARD_KEY, 11)
            out[o + 12] = b'A'
            pumpd_wr32(out + o + 13, <uint32_t>(1 + self._fwd_len))
            out[o + 17] = b'F'
            memcpy(out + o + 18, self._fwd, <size_t>self._fwd_len)
            o += FORWARD_ENTRY_EXTRA + self._fwd_len
        if not ts_done:
            out[o] = 21
            memcpy(out + o + 1, TIMESTAMP_KEY, 21)
            out[o + 22] = b'l'
            pumpd_wr64(out + o + 23, <uint64_t>now)
            o += TIMESTAMP_ENTRY
        pumpd_wr32(out, <uint32_t>(o - 4))
        return o

    cdef inline int _write_body(self, const unsigned char *p, Py_ssize_t n) except -1:
        """Copy body bytes into body frames of at most ``_body_max`` bytes."""
        cdef uint64_t left = self._remaining  # body bytes not yet written, this chunk included
        cdef uint64_t out_left = self._out_left
        cdef uint64_t k
        cdef unsigned char *o
        buf_reserve(&self._pub, n + (FRAME_HEAD + 1) * (n // self._body_max + 2))
        o = self._pub.data + self._pub.len
        while n > 0:
            if out_left == 0:
                out_left = <uint64_t>self._body_max if left > <uint64_t>self._body_max else left
                o[0] = FRAME_BODY
                pumpd_wr16(o + 1, self._dst_ch)
                pumpd_wr32(o + 3, <uint32_t>out_left)
                o += FRAME_HEAD
            k = <uint64_t>n if <uint64_t>n < out_left else out_left
            memcpy(o, p, <size_t>k)
            o += k
            p += k
            n -= <Py_ssize_t>k
            left -= k
            out_left -= k
            if out_left == 0:
                o[0] = FRAME_END
                o += 1
        self._out_left = out_left
        self._pub.len = o - self._pub.data
        return 0

    cdef inline int _on_delivery(self) except -1:
        """The whole message is in: count it and hand its tag to the ack bookkeeping. Returns 1
        when the relay paused after it (an undeliverable message), else 0."""
        self._src_state = IDLE
        if self._held:
            return 0
        if self._undeliv or self._keep_last:
            return self._on_kept_delivery()
        self._delivered()
        return 0

    cdef inline int _delivered(self) except -1:
        """Count a message whose publish frames are complete and hand its tag to the ack
        bookkeeping."""
        self.consumed += 1
        if self._cur_redelivered:
            self.redelivered += 1
        if self._ack_mode == ACK_MODE_ON_CONFIRM:
            self._window._add(self._cur_tag)
        elif self._ack_mode == ACK_MODE_ON_PUBLISH:
            self._last_tag = self._cur_tag
        self._buffered += 1
        self.bytes += self._cur_size
        self._complete = self._pub.len
        return 0

    cdef int _on_kept_delivery(self) except -1:
        """The rare path of _on_delivery: an undeliverable message pauses the relay; with
        keep_last, the message is kept as a Python tuple."""
        message = (self._cur_tag, bool(self._cur_redelivered),
                   PyBytes_FromStringAndSize(<char *>self._cur_ex + 1, self._cur_ex[0]),
                   PyBytes_FromStringAndSize(<char *>self._cur_rk + 1, self._cur_rk[0]),
                   bytes_of(&self._cur_props), bytes_of(&self._cur_body),
                   self._und_reason if self._undeliv else "")
        self._cur_props.len = 0
        self._cur_body.len = 0
        if self._undeliv:
            self._undeliv = 0
            self._und_reason = None
            self.undeliverable += 1
            self._und = message
            self._paused = 1
            return 1  # the scan stops here
        self._last = message
        self._delivered()
        return 0

    cdef inline int _dest_frame(self, int ftype, const unsigned char *p, Py_ssize_t size) except -1:
        """One frame of the destination channel; 1 if it is the relay's, 0 for pika."""
        cdef int method_id
        cdef list rejected
        cdef uint64_t tag
        if self._ret_state != IDLE:
            # the content of a basic.return: counted, and kept with hold_returns
            if self._ret_state == HEADER:
                if ftype != FRAME_HEADER:
                    raise FrameError("expected a content header after basic.return")
                if size < 12:
                    raise FrameError(f"content header of {size} bytes")
                self._ret_remaining = pumpd_rd64(p + 4)
                check_body_size(self._ret_remaining, self._max_body)
                self._ret_state = BODY if self._ret_remaining else IDLE
                if self._hold_returns:
                    self._ret_props = PyBytes_FromStringAndSize(<char *>p + 12, size - 12)
                    self._ret_body = []
            else:
                if ftype != FRAME_BODY:
                    raise FrameError(f"expected a body frame, got frame type {ftype}")
                if <uint64_t>size > self._ret_remaining:
                    raise FrameError("body frames longer than the content header's body size")
                if self._hold_returns:
                    self._ret_body.append(PyBytes_FromStringAndSize(<char *>p, size))
                self._ret_remaining -= <uint64_t>size
                if self._ret_remaining == 0:
                    self._ret_state = IDLE
            if self._ret_state == IDLE and self._hold_returns:
                self._returned = (*self._ret_fields, self._ret_props, b"".join(self._ret_body))
                self._ret_body = []
                self._dst_paused = 1
                return PAUSED
            return 1
        if ftype != FRAME_METHOD:
            return 0
        if size < 4:
            raise FrameError(f"method frame of {size} bytes")
        if pumpd_rd16(p) != CLASS_BASIC:
            return 0
        method_id = pumpd_rd16(p + 2)
        if method_id == BASIC_ACK:
            if size < 13:
                raise FrameError("basic.ack truncated")
            self._window._ack(pumpd_rd64(p + 4), p[12] & 1)
            return 1
        if method_id == BASIC_NACK:
            if size < 13:
                raise FrameError("basic.nack truncated")
            # Queued before the multiple ack that feed_destination() adds at the end: once the
            # source has the nack, that ack cannot cover the refused tag.
            rejected = self._window._nack(pumpd_rd64(p + 4), p[12] & 1)
            for tag in rejected:
                buf_reserve(&self._src_out, ACK_FRAME_SIZE)
                write_ack_frame(self._src_out.data + self._src_out.len, self._src_ch, BASIC_NACK,
                                tag, 2)  # requeue, not multiple
                self._src_out.len += ACK_FRAME_SIZE
            return 1
        if method_id == BASIC_RETURN:
            fields = return_fields(p, size, self._hold_returns)
            self.returned += 1
            self._ret_state = HEADER
            if self._hold_returns:
                code, text, exchange, routing_key = fields
                self._ret_fields = (code, text.decode("utf-8", "replace"), exchange, routing_key)
            return 1
        return 0

    cdef int _check(self) except -1:
        """Debug builds: the invariants of the buffers and states, and of the window."""
        cdef Buf *bufs[8]
        cdef int i
        bufs[0], bufs[1], bufs[2], bufs[3], bufs[4] = (
            &self._src_carry, &self._dst_carry, &self._pub, &self._src_out, &self._pass)
        bufs[5], bufs[6], bufs[7] = &self._kept, &self._cur_props, &self._cur_body
        for i in range(8):
            if bufs[i].len < 0 or bufs[i].len > bufs[i].cap:
                raise AssertionError(f"relay: buffer {i} length {bufs[i].len} beyond its capacity {bufs[i].cap}")
        if self._complete > self._pub.len:
            raise AssertionError("relay: complete publishes beyond the publish buffer")
        if self._src_state == IDLE and self._complete != self._pub.len:
            raise AssertionError("relay: frames of an unfinished message while idle")
        if self._paused and (self._src_state != IDLE or self._src_carry.len or self._und is None):
            raise AssertionError("relay: paused in the middle of a message or without one")
        if not self._paused and (self._kept.len or self._und is not None):
            raise AssertionError("relay: bytes or a message kept while not paused")
        if self._undeliv and self._pub.len != self._complete:
            raise AssertionError("relay: frames written for an undeliverable message")
        if self._src_carry.len and self._src_carry.len >= FRAME_HEAD and \
                self._src_carry.len >= FRAME_HEAD + <Py_ssize_t>pumpd_rd32(self._src_carry.data + 3) + 1:
            raise AssertionError("relay: a complete frame left in the source carry-over")
        self._window._check()
        return 0


cdef int _short_string(unsigned char *out, value, str what) except -1:
    """Pre-encode a fixed exchange / routing key as an AMQP short string into ``out[256]``."""
    cdef const unsigned char[:] view = value
    cdef Py_ssize_t n = view.shape[0]
    if n > 255:
        raise ValueError(f"{what} longer than 255 bytes: {bytes(value[:40])!r}...")
    out[0] = <unsigned char>n
    if n:
        memcpy(out + 1, &view[0], <size_t>n)
    return 0


# -- the publisher's data plane (issue 11) ------------------------------------------------------
#
# Same API and behaviour as :class:`pumpd.dataplane.publish_ref.PublishPlane`, the specification. Publish
# frames of a whole list of bodies are encoded into one buffer with no Python object per message;
# outstanding confirms are a ring of 64-bit words (bit set: settled) from ``_base``, the oldest
# unsettled sequence number; a confirm advances ``_base`` by counting trailing ones.

cdef enum:
    PUB_RET_IDLE = 0
    PUB_RET_HEADER = 1
    PUB_RET_BODY = 2


@cython.final
cdef class PublishPlane:
    cdef uint16_t _ch
    cdef Py_ssize_t _body_max
    cdef unsigned char _mandatory
    cdef bytes _exchange
    cdef Buf _out
    cdef Buf _carry
    cdef uint64_t *_bits
    cdef uint64_t _cap  # bits in the ring, a power of two >= 64
    cdef uint64_t _base
    cdef uint64_t _next
    cdef uint64_t _unsettled
    cdef list _nacked_seqs
    cdef list _returns
    cdef Py_ssize_t _unattributed
    cdef int _ret_state
    cdef uint64_t _ret_remaining
    cdef tuple _ret_method
    cdef Py_ssize_t _payload_max  # the largest frame payload received
    cdef uint64_t _max_body  # the largest body a returned message's header may announce
    cdef readonly unsigned long long published
    cdef readonly unsigned long long confirmed
    cdef readonly unsigned long long nacked
    cdef readonly unsigned long long returned

    def __init__(self, *, int channel, long long frame_max, bytes exchange=b"",
                 bint mandatory=False, unsigned long long max_body_size=MAX_BODY_SIZE):
        if frame_max and frame_max < 4096:
            raise ValueError(f"frame_max {frame_max} is below AMQP's 4096")
        self._payload_max = payload_limit(frame_max)
        self._max_body = max_body_size
        if len(exchange) > 255:
            raise ValueError("exchange name longer than 255 bytes")
        self._ch = <uint16_t>channel
        self._body_max = (frame_max or 131072) - 8
        self._exchange = exchange
        self._mandatory = 1 if mandatory else 0
        self._cap = 4096
        self._bits = <uint64_t *>calloc(self._cap // 64, sizeof(uint64_t))
        if self._bits == NULL:
            raise MemoryError()
        self._base = 1
        self._next = 1
        self._nacked_seqs = []
        self._returns = []
        self._ret_method = (0, b"", b"", b"")

    def __dealloc__(self):
        buf_free(&self._out)
        buf_free(&self._carry)
        free(self._bits)
        self._bits = NULL

    @property
    def outstanding(self):
        return self._unsettled

    @property
    def next_seq(self):
        return self._next

    cdef inline bint _settled(self, uint64_t s) noexcept:
        cdef uint64_t pos = s & (self._cap - 1)
        return (self._bits[pos >> 6] >> (pos & 63)) & 1

    cdef inline void _set(self, uint64_t s) noexcept:
        cdef uint64_t pos = s & (self._cap - 1)
        self._bits[pos >> 6] |= (<uint64_t>1) << (pos & 63)

    def unconfirmed(self):
        cdef uint64_t s
        cdef list out = []
        for s in range(self._base, self._next):
            if not self._settled(s):
                out.append(s)
        return out

    def take_nacked(self):
        out = self._nacked_seqs
        self._nacked_seqs = []
        return out

    def take_returns(self):
        cdef Py_ssize_t n = len(self._returns) - self._unattributed
        out = self._returns[:n]
        self._returns = self._returns[n:]
        return out

    # -- publishing ---------------------------------------------------------------------------

    cdef int _grow(self) except -1:
        cdef uint64_t cap = self._cap * 2
        cdef uint64_t *bits = <uint64_t *>calloc(cap // 64, sizeof(uint64_t))
        cdef uint64_t s, pos
        if bits == NULL:
            raise MemoryError()
        for s in range(self._base, self._next):
            if self._settled(s):
                pos = s & (cap - 1)
                bits[pos >> 6] |= (<uint64_t>1) << (pos & 63)
        free(self._bits)
        self._bits = bits
        self._cap = cap
        return 0

    cdef int _encode(self, const unsigned char *method, Py_ssize_t mlen,
                     const unsigned char *props, Py_ssize_t plen,
                     const unsigned char *body, Py_ssize_t blen) except -1:
        cdef Py_ssize_t nframes = (blen + self._body_max - 1) // self._body_max
        cdef Py_ssize_t need = mlen + 7 + 12 + plen + 1 + blen + 8 * nframes
        cdef unsigned char *o
        cdef Py_ssize_t off = 0, n
        if self._next - self._base >= self._cap:
            self._grow()
        buf_reserve(&self._out, need)
        o = self._out.data + self._out.len
        memcpy(o, method, <size_t>mlen)
        o += mlen
        o[0] = FRAME_HEADER
        pumpd_wr16(o + 1, self._ch)
        pumpd_wr32(o + 3, <uint32_t>(12 + plen))
        pumpd_wr16(o + 7, CLASS_BASIC)
        pumpd_wr16(o + 9, 0)
        pumpd_wr64(o + 11, <uint64_t>blen)
        memcpy(o + 19, props, <size_t>plen)
        o[19 + plen] = FRAME_END
        o += 20 + plen
        while off < blen:
            n = blen - off
            if n > self._body_max:
                n = self._body_max
            o[0] = FRAME_BODY
            pumpd_wr16(o + 1, self._ch)
            pumpd_wr32(o + 3, <uint32_t>n)
            memcpy(o + 7, body + off, <size_t>n)
            o[7 + n] = FRAME_END
            o += 8 + n
            off += n
        self._out.len += need
        self._next += 1
        self._unsettled += 1
        self.published += 1
        return 0

    cdef bytes _method(self, bytes routing_key):
        if len(routing_key) > 255:
            raise ValueError("routing key longer than 255 bytes")
        cdef Py_ssize_t el = len(self._exchange), rl = len(routing_key)
        cdef Py_ssize_t size = 4 + 2 + 1 + el + 1 + rl + 1
        cdef bytes out = PyBytes_FromStringAndSize(NULL, 7 + size + 1)
        cdef unsigned char *o = <unsigned char *>PyBytes_AS_STRING(out)
        o[0] = FRAME_METHOD
        pumpd_wr16(o + 1, self._ch)
        pumpd_wr32(o + 3, <uint32_t>size)
        pumpd_wr16(o + 7, CLASS_BASIC)
        pumpd_wr16(o + 9, BASIC_PUBLISH)
        pumpd_wr16(o + 11, 0)
        o[13] = <unsigned char>el
        memcpy(o + 14, PyBytes_AS_STRING(self._exchange), <size_t>el)
        o[14 + el] = <unsigned char>rl
        memcpy(o + 15 + el, PyBytes_AS_STRING(routing_key), <size_t>rl)
        o[15 + el + rl] = self._mandatory
        o[16 + el + rl] = FRAME_END
        return out

    cdef int _encode_obj(self, bytes method, bytes properties, object body) except -1:
        cdef Py_buffer view
        if PyBytes_CheckExact(body):
            return self._encode(<const unsigned char *>PyBytes_AS_STRING(method),
                                PyBytes_GET_SIZE(method),
                                <const unsigned char *>PyBytes_AS_STRING(properties),
                                PyBytes_GET_SIZE(properties),
                                <const unsigned char *>PyBytes_AS_STRING(body),
                                PyBytes_GET_SIZE(body))
        PyObject_GetBuffer(body, &view, PyBUF_SIMPLE)
        try:
            return self._encode(<const unsigned char *>PyBytes_AS_STRING(method),
                                PyBytes_GET_SIZE(method),
                                <const unsigned char *>PyBytes_AS_STRING(properties),
                                PyBytes_GET_SIZE(properties),
                                <const unsigned char *>view.buf, view.len)
        finally:
            PyBuffer_Release(&view)

    def publish(self, body, bytes routing_key, bytes properties):
        cdef uint64_t seq = self._next
        self._encode_obj(self._method(routing_key), properties, body)
        return seq

    def publish_many(self, bodies, bytes routing_key, bytes properties):
        cdef uint64_t seq = self._next
        cdef bytes method = self._method(routing_key)
        cdef Py_ssize_t i, n
        if isinstance(bodies, list):
            n = len(<list>bodies)
            for i in range(n):
                self._encode_obj(method, properties, (<list>bodies)[i])
        else:
            for body in bodies:
                self._encode_obj(method, properties, body)
        return seq

    def publish_arrow(self, offsets, data, Py_ssize_t offset, Py_ssize_t count,
                      bytes routing_key, bytes properties, *, bint large=False,
                      bytes properties_tail=None, bytes id_prefix=None,
                      long long id_start=0):
        """Encode ``count`` bodies straight from an Arrow binary column's buffers (``offsets``:
        int32, or int64 with ``large``; ``data``; element ``offset`` first), no per-row Python
        object. With ``id_prefix`` each message's properties are ``properties`` +
        shortstr(id_prefix + decimal(id_start + row)) + ``properties_tail`` (a message_id spliced
        between property bytes encoded once). Returns the first sequence number."""
        cdef uint64_t seq = self._next
        cdef bytes method = self._method(routing_key)
        cdef Py_buffer ov, dv
        cdef bint have_data = data is not None
        cdef const unsigned char *d = NULL
        cdef Py_ssize_t dlen = 0, i, s, e, plen, hl, tl, pl, n
        cdef const int *o32
        cdef const long long *o64
        cdef unsigned char *pbuf = NULL
        cdef const unsigned char *props
        cdef char digits[24]
        if offset < 0 or count < 0:
            raise ValueError("negative offset or count")
        PyObject_GetBuffer(offsets, &ov, PyBUF_SIMPLE)
        if have_data:
            PyObject_GetBuffer(data, &dv, PyBUF_SIMPLE)
            d = <const unsigned char *>dv.buf
            dlen = dv.len
        try:
            if (offset + count + 1) * (8 if large else 4) > ov.len:
                raise ValueError("offsets buffer shorter than offset + count + 1 entries")
            o32 = <const int *>ov.buf
            o64 = <const long long *>ov.buf
            props = <const unsigned char *>PyBytes_AS_STRING(properties)
            plen = PyBytes_GET_SIZE(properties)
            if id_prefix is not None:
                hl = plen
                tl = PyBytes_GET_SIZE(properties_tail) if properties_tail is not None else 0
                pl = PyBytes_GET_SIZE(id_prefix)
                if pl > 230:
                    raise ValueError("id_prefix longer than 230 bytes")
                pbuf = <unsigned char *>malloc(hl + 1 + 255 + tl)
                if pbuf == NULL:
                    raise MemoryError()
                memcpy(pbuf, props, <size_t>hl)
                memcpy(pbuf + hl + 1, PyBytes_AS_STRING(id_prefix), <size_t>pl)
                props = pbuf
            for i in range(offset, offset + count):
                if large:
                    s = <Py_ssize_t>o64[i]
                    e = <Py_ssize_t>o64[i + 1]
                else:
                    s = o32[i]
                    e = o32[i + 1]
                if s < 0 or e < s or e > dlen:
                    raise ValueError(f"offsets out of range at element {i}")
                if pbuf != NULL:
                    n = snprintf(digits, 24, "%lld", id_start + (i - offset))
                    memcpy(pbuf + hl + 1 + pl, digits, <size_t>n)
                    pbuf[hl] = <unsigned char>(pl + n)
                    if tl:
                        memcpy(pbuf + hl + 1 + pl + n, PyBytes_AS_STRING(properties_tail),
                               <size_t>tl)
                    plen = hl + 1 + pl + n + tl
                self._encode(<const unsigned char *>PyBytes_AS_STRING(method),
                             PyBytes_GET_SIZE(method), props, plen, d + s, e - s)
        finally:
            free(pbuf)
            PyBuffer_Release(&ov)
            if have_data:
                PyBuffer_Release(&dv)
        return seq

    def take_output(self):
        out = bytes_of(&self._out)
        self._out.len = 0
        return out

    # -- confirms -----------------------------------------------------------------------------

    def feed(self, bytes data):
        cdef Buf passthrough
        cdef const unsigned char *p
        cdef Py_ssize_t n, pos = 0, end, size
        cdef bint use_carry = self._carry.len > 0
        cdef unsigned char ftype
        cdef uint16_t channel
        passthrough.data = NULL
        passthrough.len = passthrough.cap = 0
        if use_carry:
            buf_append(&self._carry, <const unsigned char *>PyBytes_AS_STRING(data),
                       PyBytes_GET_SIZE(data))
            p = self._carry.data
            n = self._carry.len
        else:
            p = <const unsigned char *>PyBytes_AS_STRING(data)
            n = PyBytes_GET_SIZE(data)
        try:
            while n - pos >= 7:
                check_head(p + pos, self._payload_max)  # before waiting for the rest
                ftype = p[pos]
                channel = pumpd_rd16(p + pos + 1)
                size = pumpd_rd32(p + pos + 3)
                end = pos + 7 + size
                if end >= n:
                    break
                if p[end] != FRAME_END:
                    raise FrameError(f"frame end octet missing on channel {channel}")
                if not (channel == self._ch and self._take(ftype, p, pos + 7, end)):
                    buf_append(&passthrough, p + pos, end + 1 - pos)
                pos = end + 1
            if use_carry:
                memmove(self._carry.data, self._carry.data + pos, <size_t>(n - pos))
                self._carry.len = n - pos
            elif pos < n:
                buf_append(&self._carry, p + pos, n - pos)
            return bytes_of(&passthrough)
        finally:
            buf_free(&passthrough)

    cdef bint _take(self, unsigned char ftype, const unsigned char *p, Py_ssize_t start,
                    Py_ssize_t end) except -1:
        cdef uint16_t class_id, method_id
        cdef uint64_t seq
        cdef bint multiple
        if self._ret_state == PUB_RET_HEADER:
            if ftype != FRAME_HEADER:
                raise FrameError("expected a content header after basic.return")
            if end - start < 12:
                raise FrameError(f"content header of {end - start} bytes")
            self._ret_remaining = pumpd_rd64(p + start + 4)
            check_body_size(self._ret_remaining, self._max_body)
            code, text, exchange, rk = self._ret_method
            self._returns.append((0, code, text, exchange, rk,
                                  PyBytes_FromStringAndSize(<const char *>p + start + 12,
                                                            end - start - 12)))
            self._unattributed += 1
            self.returned += 1
            self._ret_state = PUB_RET_BODY if self._ret_remaining else PUB_RET_IDLE
            return True
        if self._ret_state == PUB_RET_BODY:
            if ftype != FRAME_BODY:
                raise FrameError(f"expected a body frame, got frame type {ftype}")
            if <uint64_t>(end - start) > self._ret_remaining:
                raise FrameError("body frames longer than the content header's body size")
            self._ret_remaining -= <uint64_t>(end - start)
            if self._ret_remaining == 0:
                self._ret_state = PUB_RET_IDLE
            return True
        if ftype != FRAME_METHOD:
            return False
        if end - start < 4:
            raise FrameError(f"method frame of {end - start} bytes")
        class_id = pumpd_rd16(p + start)
        method_id = pumpd_rd16(p + start + 2)
        if class_id != CLASS_BASIC:
            return False
        if method_id == BASIC_ACK or method_id == BASIC_NACK:
            if end - start < 13:
                raise FrameError("basic.ack truncated" if method_id == BASIC_ACK
                                 else "basic.nack truncated")
            seq = pumpd_rd64(p + start + 4)
            multiple = p[start + 12] & 1
            if self._unattributed:
                self._attribute_returns(seq)
            if method_id == BASIC_ACK:
                self._ack(seq, multiple)
            else:
                self._nack(seq, multiple)
            return True
        if method_id == BASIC_RETURN:
            self._ret_method = return_fields(p + start, end - start, True)
            self._ret_state = PUB_RET_HEADER
            return True
        return False

    cdef void _attribute_returns(self, uint64_t seq):
        cdef Py_ssize_t i, k = len(self._returns) - self._unattributed
        for i in range(k, len(self._returns)):
            self._returns[i] = (seq,) + self._returns[i][1:]
        self._unattributed = 0

    cdef void _ack(self, uint64_t seq, bint multiple) noexcept:
        cdef uint64_t first, last, s, pos, bits, w
        cdef unsigned off, n
        if self._next == self._base:
            return
        last = seq if seq < self._next else self._next - 1
        if multiple:
            first = self._base
        elif self._base <= seq < self._next:
            first = seq
        else:
            return
        if last < first:
            return
        s = first
        while s <= last:
            pos = s & (self._cap - 1)
            off = pos & 63
            n = 64 - off
            if <uint64_t>n > last - s + 1:
                n = <unsigned>(last - s + 1)
            bits = pumpd_low_bits(n) << off
            w = pos >> 6
            n = pumpd_popcount64(bits & ~self._bits[w])
            self.confirmed += n
            self._unsettled -= n
            self._bits[w] |= bits
            s += 64 - off if 64 - off <= last - s + 1 else last - s + 1
        self._advance()

    cdef void _nack(self, uint64_t seq, bint multiple):
        cdef uint64_t first, last, s
        if self._next == self._base:
            return
        last = seq if seq < self._next else self._next - 1
        first = self._base if multiple else (seq if seq > self._base else self._base)
        s = first
        while s <= last:
            if not self._settled(s):
                self._set(s)
                self._unsettled -= 1
                self.nacked += 1
                self._nacked_seqs.append(s)
            s += 1
        self._advance()

    cdef void _advance(self) noexcept:
        cdef uint64_t pos, w, inv, run, left
        cdef unsigned off
        while self._base < self._next:
            pos = self._base & (self._cap - 1)
            off = pos & 63
            w = pos >> 6
            inv = (~self._bits[w]) >> off
            run = <uint64_t>pumpd_ctz64(inv) if inv else <uint64_t>(64 - off)
            left = self._next - self._base
            if run > left:
                run = left
            if run == 0:
                return
            # cleared as the base passes, so the ring's next lap starts unsettled
            self._bits[w] &= ~(pumpd_low_bits(<unsigned>run) << off)
            self._base += run
            if off + run < 64:
                return
