# -- the relay: carried-over frames and the scan of each read (the per-frame hot loop) --------
#
# Module-level functions on a Relay, not methods: Cython allows no `include` inside a class
# body, and a cdef function taking a typed Relay compiles to the same direct C call.

cdef object relay_feed_object(Relay self, object data, bint source):
    """:meth:`_feed` on what a transport handed over: bytes without a copy, or any buffer."""
    cdef Py_buffer view
    if PyBytes_CheckExact(data):
        return relay_feed(self, <const unsigned char *>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), source)
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        return relay_feed(self, <const unsigned char *>view.buf, view.len, source)
    finally:
        PyBuffer_Release(&view)


cdef object relay_feed(Relay self, const unsigned char *data, Py_ssize_t n, bint source):
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
                    relay_scan(self, carry.data, carry.len, source)
                    carry.len = 0
        if carry.len == 0:
            held = self._paused if source else self._dst_paused
            if not held:
                pos += relay_scan(self, data + pos, n - pos, source)
                held = self._paused if source else self._dst_paused
            if pos < n:
                # paused: what follows the undeliverable (or returned) message waits for
                # resume() (or resume_destination())
                buf_append((&self._kept if source else &self._dst_kept) if held else carry,
                           data + pos, n - pos)
    except BaseException:
        # The frame that failed is never scanned again (the connection is closing): keeping it
        # would leave a complete frame in the carry-over, which no later call may find.
        carry.len = 0
        if source:
            # Never hand out part of a message: drop the frames of the unfinished one.
            self._pub.len = self._complete
            self._src_state = IDLE
            self._undeliv = 0
        raise
    if PUMPD_DEBUG:
        relay_check(self)
    return bytes_of(&self._pass)


cdef Py_ssize_t relay_scan(Relay self, const unsigned char *buf, Py_ssize_t n, bint source) except -1:
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
                taken = relay_source_frame(self, buf[pos], buf + pos + FRAME_HEAD, size)
                if taken == PAUSED:
                    return end + 1
        elif channel == self._dst_ch:
            taken = relay_dest_frame(self, buf[pos], buf + pos + FRAME_HEAD, size)
            if taken == PAUSED:
                return end + 1
        if not taken:
            buf_append(&self._pass, buf + pos, end + 1 - pos)
        pos = end + 1
    return pos
