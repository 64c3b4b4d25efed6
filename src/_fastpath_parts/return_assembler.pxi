# -- the content of a basic.return: one assembler for the relay and the publish plane ----------

@cython.final
cdef class ReturnAssembler:
    """A ``basic.return`` on one channel, then its content header and body frames, which must
    follow it there. Same behaviour as :class:`pumpd.dataplane.return_assembler_ref.ReturnAssembler`.
    ``keep_properties`` / ``keep_body``: what is kept of the content (the relay keeps both with
    hold_returns; the publish plane keeps the properties, for the message id)."""

    cdef int state  # IDLE, HEADER (expecting the content header), BODY
    cdef uint64_t remaining  # body bytes still to come
    cdef uint64_t max_body  # the largest body a content header may announce
    cdef bint keep_properties
    cdef bint keep_body
    cdef tuple fields  # (reply_code, reply_text, exchange, routing_key), bytes; None unless kept
    cdef object properties
    cdef list body

    def __cinit__(self, uint64_t max_body, bint keep_properties, bint keep_body):
        self.max_body = max_body
        self.keep_properties = keep_properties
        self.keep_body = keep_body
        self.properties = b""
        self.body = []

    cdef int start(self, const unsigned char *p, Py_ssize_t size) except -1:
        """The basic.return method (payload ``p``, class and method ids first)."""
        self.fields = return_fields(p, size, self.keep_properties or self.keep_body)
        self.state = HEADER
        return 0

    cdef int take(self, int ftype, const unsigned char *p, Py_ssize_t size) except -1:
        """A frame of the channel while a return's content is due (``state != IDLE``); 1 when
        it completes the returned message, else 0."""
        if self.state == HEADER:
            if ftype != FRAME_HEADER:
                raise FrameError("expected a content header after basic.return")
            if size < 12:
                raise FrameError(f"content header of {size} bytes")
            self.remaining = pumpd_rd64(p + 4)
            check_body_size(self.remaining, self.max_body)
            self.state = BODY if self.remaining else IDLE
            if self.keep_properties:
                self.properties = PyBytes_FromStringAndSize(<char *>p + 12, size - 12)
            if self.keep_body:
                self.body = []
        else:
            if ftype != FRAME_BODY:
                raise FrameError(f"expected a body frame, got frame type {ftype}")
            if <uint64_t>size > self.remaining:
                raise FrameError("body frames longer than the content header's body size")
            if self.keep_body:
                self.body.append(PyBytes_FromStringAndSize(<char *>p, size))
            self.remaining -= <uint64_t>size
            if self.remaining == 0:
                self.state = IDLE
        return self.state == IDLE

    cdef object take_body(self):
        """The kept body of the message just completed, joined."""
        body = b"".join(self.body)
        self.body = []
        return body
