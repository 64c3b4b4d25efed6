# -- the relay, destination side: confirms and basic.return; the debug-build invariants -------

cdef inline int relay_dest_frame(Relay self, int ftype, const unsigned char *p, Py_ssize_t size) except -1:
    """One frame of the destination channel; 1 if it is the relay's, 0 for pika."""
    cdef int method_id
    cdef list rejected
    cdef uint64_t tag
    if self._returning.state != IDLE:
        # the content of a basic.return: counted, and kept with hold_returns
        if self._returning.take(ftype, p, size) and self._hold_returns:
            code, text, exchange, routing_key = self._returning.fields
            self._returned = Returned(code, text.decode("utf-8", "replace"), exchange,
                                      routing_key, self._returning.properties,
                                      self._returning.take_body())
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
        self._returning.start(p, size)
        self.returned += 1
        return 1
    return 0


cdef int relay_check(Relay self) except -1:
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
