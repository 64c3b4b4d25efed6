# -- the relay, source side: basic.deliver, its content header and body, settled deliveries ---

cdef inline int relay_source_frame(Relay self, int ftype, const unsigned char *p, Py_ssize_t size) except -1:
    """One frame of the source channel (payload ``p``); 1 if it is the relay's, 0 for pika."""
    if self._src_state == IDLE:
        if ftype != FRAME_METHOD:
            return 0
        if size < 4:
            raise FrameError(f"method frame of {size} bytes")
        if pumpd_rd16(p) != CLASS_BASIC or pumpd_rd16(p + 2) != BASIC_DELIVER:
            return 0
        relay_on_deliver(self, p, size)
        return 1
    if self._src_state == HEADER:
        if ftype != FRAME_HEADER:
            raise FrameError(f"expected a content header after basic.deliver, got frame type {ftype}")
        if size < 12:
            raise FrameError(f"content header of {size} bytes")
        return 1 + relay_on_header(self, p, size)
    if ftype != FRAME_BODY:
        raise FrameError(f"expected a body frame, got frame type {ftype}")
    if <uint64_t>size > self._remaining:
        raise FrameError("body frames longer than the content header's body size")
    if self._body_plain:
        relay_write_body(self, p, size)
    elif not self._held:
        if not self._undeliv:
            relay_write_body(self, p, size)
        buf_append(&self._cur_body, p, size)
    self._remaining -= <uint64_t>size
    if self._remaining == 0:
        return 1 + relay_on_delivery(self)
    return 1


cdef int relay_on_deliver(Relay self, const unsigned char *p, Py_ssize_t size) except -1:
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


cdef int relay_on_header(Relay self, const unsigned char *p, Py_ssize_t size) except -1:
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
        if relay_write_header(self, body_size, p + 12, size - 12):
            relay_set_aside(self, p + 12, size - 12)
    if body_size == 0:
        return relay_on_delivery(self)
    self._src_state = BODY
    return 0


cdef inline int relay_write_body(Relay self, const unsigned char *p, Py_ssize_t n) except -1:
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


cdef inline int relay_on_delivery(Relay self) except -1:
    """The whole message is in: count it and hand its tag to the ack bookkeeping. Returns 1
    when the relay paused after it (an undeliverable message), else 0."""
    self._src_state = IDLE
    if self._held:
        return 0
    if self._undeliv or self._keep_last:
        return relay_on_kept_delivery(self)
    relay_delivered(self)
    return 0


cdef inline int relay_delivered(Relay self) except -1:
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


cdef int relay_on_kept_delivery(Relay self) except -1:
    """The rare path of _on_delivery: an undeliverable message pauses the relay; with
    keep_last, the message is kept as a Delivered."""
    message = Delivered(self._cur_tag, bool(self._cur_redelivered),
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
    relay_delivered(self)
    return 0
