# -- the publisher's data plane: confirms and basic.return on its channel --------------------

cdef bint publish_plane_take(PublishPlane self, unsigned char ftype, const unsigned char *p, Py_ssize_t start,
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
            publish_plane_attribute_returns(self, seq)
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


cdef void publish_plane_attribute_returns(PublishPlane self, uint64_t seq):
    cdef Py_ssize_t i, k = len(self._returns) - self._unattributed
    for i in range(k, len(self._returns)):
        self._returns[i] = (seq,) + self._returns[i][1:]
    self._unattributed = 0
