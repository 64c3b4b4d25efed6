# -- the publisher's data plane -------------------------------------------------------------------
#
# Same API and behaviour as :class:`pumpd.dataplane.publish_plane_ref.PublishPlane`, the specification. Publish
# frames of a whole list of bodies are encoded into one buffer with no Python object per message;
# outstanding confirms are the relay's ConfirmWindow (its C-level methods, no Python call), each
# publish recorded with its own sequence number as its tag, so a nack hands back the numbers.

@cython.final
cdef class PublishPlane:
    cdef uint16_t _ch
    cdef Py_ssize_t _body_max
    cdef unsigned char _mandatory
    cdef bytes _exchange
    cdef Buf _out
    cdef Buf _carry
    cdef ConfirmWindow _window
    cdef list _nacked_seqs
    cdef list _returns
    cdef Py_ssize_t _unattributed
    cdef ReturnAssembler _returning  # the content of a basic.return; its properties kept
    cdef Py_ssize_t _payload_max  # the largest frame payload received
    cdef readonly unsigned long long published
    cdef readonly unsigned long long returned

    def __init__(self, *, int channel, long long frame_max, bytes exchange=b"",
                 bint mandatory=False, unsigned long long max_body_size=MAX_BODY_SIZE):
        if frame_max and frame_max < 4096:
            raise ValueError(f"frame_max {frame_max} is below AMQP's 4096")
        self._payload_max = payload_limit(frame_max)
        self._returning = ReturnAssembler(max_body_size, True, False)
        if len(exchange) > 255:
            raise ValueError("exchange name longer than 255 bytes")
        self._ch = <uint16_t>channel
        self._body_max = (frame_max or 131072) - 8
        self._exchange = exchange
        self._mandatory = 1 if mandatory else 0
        self._window = ConfirmWindow(4096)
        self._nacked_seqs = []
        self._returns = []

    def __dealloc__(self):
        buf_free(&self._out)
        buf_free(&self._carry)

    @property
    def outstanding(self):
        return self._window._unsettled

    @property
    def next_seq(self):
        return self._window._next

    @property
    def confirmed(self):
        return self._window.confirmed

    @property
    def nacked(self):
        return self._window.nacked

    def unconfirmed(self):
        return self._window.unsettled()

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

    cdef int _encode(self, const unsigned char *method, Py_ssize_t mlen,
                     const unsigned char *props, Py_ssize_t plen,
                     const unsigned char *body, Py_ssize_t blen) except -1:
        cdef Py_ssize_t nframes = (blen + self._body_max - 1) // self._body_max
        cdef Py_ssize_t need = mlen + 7 + 12 + plen + 1 + blen + 8 * nframes
        cdef unsigned char *o
        cdef Py_ssize_t off = 0, n
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
        self._window._add(self._window._next)
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
        cdef uint64_t seq = self._window._next
        self._encode_obj(self._method(routing_key), properties, body)
        return seq

    def publish_many(self, bodies, bytes routing_key, bytes properties):
        cdef uint64_t seq = self._window._next
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
        cdef uint64_t seq = self._window._next
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
                if not (channel == self._ch and publish_plane_take(self, ftype, p, pos + 7, end)):
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
