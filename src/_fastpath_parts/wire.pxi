# -- the wire: C helpers, AMQP constants checked against pumpd.dataplane.frames, frame checks --

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
