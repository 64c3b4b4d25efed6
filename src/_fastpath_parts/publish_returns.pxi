# -- the publisher's data plane: confirms and basic.return on its channel --------------------

cdef bint publish_plane_take(PublishPlane self, unsigned char ftype, const unsigned char *p, Py_ssize_t start,
                             Py_ssize_t end) except -1:
    cdef uint16_t class_id, method_id
    cdef uint64_t seq
    cdef bint multiple
    if self._returning.state != IDLE:
        if self._returning.state == HEADER:
            self._returning.take(ftype, p + start, end - start)
            # recorded at its content header, attributed at the next confirm
            code, text, exchange, rk = self._returning.fields
            self._returns.append((0, code, text, exchange, rk, self._returning.properties))
            self._unattributed += 1
            self.returned += 1
        else:
            self._returning.take(ftype, p + start, end - start)
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
            self._window._ack(seq, multiple)
        else:
            self._nacked_seqs.extend(self._window._nack(seq, multiple))
        return True
    if method_id == BASIC_RETURN:
        self._returning.start(p + start, end - start)
        return True
    return False


cdef void publish_plane_attribute_returns(PublishPlane self, uint64_t seq):
    cdef Py_ssize_t i, k = len(self._returns) - self._unattributed
    for i in range(k, len(self._returns)):
        self._returns[i] = (seq,) + self._returns[i][1:]
    self._unattributed = 0
