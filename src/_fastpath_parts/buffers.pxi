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
