# -- DeliveryReader: a consumer's deliveries as tuples, everything else for pika ------------------


cdef class DeliveryReader:
    """Native twin of :class:`pumpd.dataplane.delivery_reader_ref.DeliveryReader` (the
    specification): frames walked with pointer arithmetic, one tuple and two or three ``bytes``
    made per delivery (a body in one frame is sliced straight from the input), the frames for
    pika copied into one buffer."""

    cdef readonly int channel
    cdef readonly long long frame_max
    cdef readonly uint64_t max_body_size
    cdef readonly long long delivered
    cdef readonly long long pending_bytes
    cdef Py_ssize_t _payload_max
    cdef bytes _carry
    cdef list _ready
    cdef int _want
    cdef object _tag
    cdef bint _redelivered
    cdef bytes _exchange
    cdef bytes _routing_key
    cdef bytes _properties
    cdef uint64_t _size
    cdef uint64_t _got
    cdef list _body
    cdef Buf _passed

    def __cinit__(self, int channel, long long frame_max=0, max_body_size=None):
        self.channel = channel
        self.frame_max = frame_max
        self.max_body_size = MAX_BODY_SIZE if max_body_size is None else max_body_size
        self._payload_max = payload_limit(frame_max)
        self._carry = b""
        self._ready = []
        self._want = IDLE
        self._body = []

    def __dealloc__(self):
        buf_free(&self._passed)

    @property
    def pending(self):
        return len(self._ready)

    def feed(self, bytes data):
        cdef bytes buf = self._carry + data if self._carry else data
        cdef const unsigned char *p = <const unsigned char *>PyBytes_AS_STRING(buf)
        cdef Py_ssize_t n = PyBytes_GET_SIZE(buf), pos = 0, size, end
        self._passed.len = 0
        while n - pos >= FRAME_HEAD:
            check_head(p + pos, self._payload_max)
            size = pumpd_rd32(p + pos + 3)
            end = pos + FRAME_HEAD + size
            if end >= n:
                break
            if p[end] != FRAME_END:
                raise FrameError(f"frame end octet missing on channel {pumpd_rd16(p + pos + 1)}")
            if pumpd_rd16(p + pos + 1) != self.channel or not self._take(
                    buf, p[pos], pos + FRAME_HEAD, end):
                buf_append(&self._passed, p + pos, end + 1 - pos)
            pos = end + 1
        self._carry = buf[pos:] if pos < n else b""
        return bytes_of(&self._passed)

    cdef bint _take(self, bytes buf, int ftype, Py_ssize_t start, Py_ssize_t end) except -1:
        cdef const unsigned char *p = <const unsigned char *>PyBytes_AS_STRING(buf)
        cdef Py_ssize_t pos, k, size = end - start
        cdef Py_ssize_t starts[2]
        if self._want == IDLE:
            if ftype != FRAME_METHOD:
                return False
            if size < 4:
                raise FrameError(f"method frame of {size} bytes")
            if pumpd_rd16(p + start) != CLASS_BASIC or pumpd_rd16(p + start + 2) != BASIC_DELIVER:
                return False
            # consumer tag, then tag (8), redelivered (1), exchange, routing key
            pos = start + 4
            if pos >= end or pos + 1 + p[pos] > end:
                raise FrameError("basic.deliver truncated")
            pos += 1 + p[pos]
            if end - pos < 10:
                raise FrameError("basic.deliver truncated")
            self._tag = pumpd_rd64(p + pos)
            self._redelivered = p[pos + 8] & 1
            pos += 9
            for k in range(2):
                if pos >= end or pos + 1 + p[pos] > end:
                    raise FrameError("basic.deliver truncated")
                starts[k] = pos
                pos += 1 + p[pos]
            self._exchange = PyBytes_FromStringAndSize(<const char *>p + starts[0] + 1,
                                                       p[starts[0]])
            self._routing_key = PyBytes_FromStringAndSize(<const char *>p + starts[1] + 1,
                                                          p[starts[1]])
            self._want = HEADER
            return True
        if self._want == HEADER:
            if ftype != FRAME_HEADER:
                raise FrameError(f"basic.deliver on channel {self.channel} without its content "
                                 f"header (frame type {ftype})")
            if size < 12:
                raise FrameError(f"content header of {size} bytes")
            self._size = pumpd_rd64(p + start + 4)
            check_body_size(self._size, self.max_body_size)
            self._properties = PyBytes_FromStringAndSize(<const char *>p + start + 12, size - 12)
            self._got = 0
            self._body = []
            if self._size == 0:
                self._done(b"")
            else:
                self._want = BODY
            return True
        if ftype != FRAME_BODY:
            raise FrameError(f"a message on channel {self.channel} cut short: {self._got} of "
                             f"{self._size} body bytes, then frame type {ftype}")
        self._got += <uint64_t>size
        if self._got > self._size:
            raise FrameError(f"body frames on channel {self.channel} carry {self._got} bytes, "
                             f"more than the {self._size} its header announced")
        chunk = PyBytes_FromStringAndSize(<const char *>p + start, size)
        if self._got == self._size:
            if self._body:
                self._body.append(chunk)
                self._done(b"".join(self._body))
            else:
                self._done(chunk)
        else:
            self._body.append(chunk)
        return True

    cdef int _done(self, bytes body) except -1:
        self._ready.append((self._tag, self._redelivered, self._exchange, self._routing_key,
                            self._properties, body))
        self.delivered += 1
        self.pending_bytes += PyBytes_GET_SIZE(body)
        self._want = IDLE
        self._body = []
        return 0

    def take(self, Py_ssize_t most, long long max_bytes=0):
        cdef Py_ssize_t n = min(most, len(self._ready)), i
        cdef long long taken = 0
        cdef tuple d
        cdef list batch
        for i in range(n):
            d = <tuple>self._ready[i]
            taken += PyBytes_GET_SIZE(<bytes>d[5])
            if max_bytes and taken >= max_bytes:
                n = i + 1
                break
        batch = self._ready[:n]
        del self._ready[:n]
        self.pending_bytes -= taken
        return batch

    def clear(self):
        self._ready = []
        self.pending_bytes = 0
        self._carry = b""
        self._want = IDLE
        self._body = []
