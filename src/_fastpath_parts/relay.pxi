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
    cdef ReturnAssembler _returning  # the content of a basic.return on the destination channel
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
        relay_set_edits(self, property_overrides, forward_hop, timestamp_header)
        self._frame_max = dest_frame_max
        # every other field starts as Cython makes a new object: 0, NULL buffers, None
        self._keep_last = bool(keep_last)
        self._hold_returns = bool(hold_returns)
        self._returning = ReturnAssembler(self._max_body, self._hold_returns, self._hold_returns)
        self._copy_names = self._ex_fixed or self._rk_fixed or self._keep_last
        self._body_plain = 1

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
        return relay_feed_object(self, data, True)

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
        return relay_feed_object(self, kept, True)

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
            relay_check(self)
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
        return relay_feed_object(self, kept, False)

    def feed_destination(self, data):
        """Scan bytes read from the destination connection; returns the bytes meant for pika."""
        return relay_feed_object(self, data, False)


cdef int relay_set_edits(Relay self, object property_overrides, object forward_hop,
                         object timestamp_header) except -1:
    """The edits to every content header: property overrides pre-encoded by index, this
    hop's forward table, the timestamp header."""
    cdef Py_ssize_t i
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
    return 0
