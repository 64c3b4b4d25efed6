# -- the relay: the content header written for the destination, properties and headers spliced

cdef int relay_set_aside(Relay self, const unsigned char *props, Py_ssize_t props_len) except -1:
    """The message being received is undeliverable: drop its basic.publish frame, keep
    its properties and collect its body instead of writing it."""
    cdef const unsigned char *names
    if not self._copy_names:
        names = self._pub.data + self._complete + FRAME_HEAD + 6  # class, method, ticket
        memcpy(self._cur_ex, names, 1 + names[0])
        names += 1 + names[0]
        memcpy(self._cur_rk, names, 1 + names[0])
    self._undeliv = 1
    self._body_plain = 0
    self._pub.len = self._complete
    self._cur_props.len = 0
    buf_append(&self._cur_props, props, props_len)
    self._cur_body.len = 0
    return 0


cdef inline int relay_write_header(Relay self, uint64_t body_size, const unsigned char *props,
                                   Py_ssize_t props_len) except -1:
    """Our content header; UNDELIVERABLE (and nothing written) when it cannot be."""
    cdef unsigned char *o
    cdef Py_ssize_t n = props_len
    if self._edits:
        return relay_write_header_changed(self, body_size, props, props_len)
    if self._frame_max and FRAME_HEAD + 12 + props_len + 1 > self._frame_max:
        return relay_too_large(self, FRAME_HEAD + 12 + props_len + 1)
    buf_reserve(&self._pub, FRAME_HEAD + 12 + props_len + 1)
    o = self._pub.data + self._pub.len
    memcpy(o + FRAME_HEAD + 12, props, <size_t>props_len)  # forwarded as they came
    relay_finish_header(self, o, body_size, n)
    return 0


cdef int relay_too_large(Relay self, Py_ssize_t header_size) except -1:
    self._und_reason = (f"content header of {header_size} bytes exceeds the destination's "
                        f"frame_max {self._frame_max}")
    return UNDELIVERABLE


cdef int relay_unparseable(Relay self, str what) except -1:
    self._und_reason = f"its properties cannot be parsed: {what}"
    return UNDELIVERABLE


cdef int relay_write_header_changed(Relay self, uint64_t body_size, const unsigned char *props,
                                    Py_ssize_t props_len) except -1:
    """With property overrides and / or header edits, spliced in C."""
    cdef unsigned char *o
    cdef Py_ssize_t n
    buf_reserve(&self._pub, FRAME_HEAD + 12 + props_len + self._ovr_total + 4
                + (FORWARD_ENTRY_EXTRA + self._fwd_len if self._fwd != NULL else 0)
                + (TIMESTAMP_ENTRY if self._ts else 0) + 1)
    o = self._pub.data + self._pub.len
    n = relay_splice_properties(self, props, props_len, o + FRAME_HEAD + 12)
    if n == UNDELIVERABLE:
        return UNDELIVERABLE
    if n == PYTHON_EDIT:
        n = relay_edit_in_python(self, props, props_len)
        if n == UNDELIVERABLE:
            return UNDELIVERABLE
        o = self._pub.data + self._pub.len
    if self._frame_max and FRAME_HEAD + 12 + n + 1 > self._frame_max:
        return relay_too_large(self, FRAME_HEAD + 12 + n + 1)
    relay_finish_header(self, o, body_size, n)
    return 0


cdef Py_ssize_t relay_edit_in_python(Relay self, const unsigned char *props,
                                     Py_ssize_t props_len) except -1:
    """The rare edit left to the reference: its properties at ``_pub.len + 19``; returns
    their length, or UNDELIVERABLE."""
    cdef const unsigned char[:] edited
    cdef Py_ssize_t n
    try:
        result = _frames.edit_properties(
            PyBytes_FromStringAndSize(<char *>props, props_len), self._ovr_dict,
            self._fwd_keep, <long long>time(NULL) if self._ts else None)
    except UnparseableProperties as exc:
        return relay_unparseable(self, str(exc))
    edited = result
    n = edited.shape[0]
    buf_reserve(&self._pub, FRAME_HEAD + 12 + n + 1)
    memcpy(self._pub.data + self._pub.len + FRAME_HEAD + 12, &edited[0], <size_t>n)
    return n


cdef inline void relay_finish_header(Relay self, unsigned char *o, uint64_t body_size,
                                     Py_ssize_t props_len) noexcept:
    """Frame head and end around the ``props_len`` property bytes already at ``o + 19``."""
    o[0] = FRAME_HEADER
    pumpd_wr16(o + 1, self._dst_ch)
    pumpd_wr32(o + 3, <uint32_t>(12 + props_len))
    pumpd_wr16(o + 7, CLASS_BASIC)
    pumpd_wr16(o + 9, 0)  # weight
    pumpd_wr64(o + 11, body_size)
    o[FRAME_HEAD + 12 + props_len] = FRAME_END
    self._pub.len += FRAME_HEAD + 12 + props_len + 1


cdef Py_ssize_t relay_splice_properties(Relay self, const unsigned char *src, Py_ssize_t src_len,
                                        unsigned char *out) except -1:
    """Raw properties with the overrides put in, then the header edits, without decoding
    the other values (the same as ``frames.edit_properties``); returns the length written to
    ``out``, or UNDELIVERABLE / PYTHON_EDIT."""
    cdef unsigned flags, bit, out_flags
    cdef unsigned ovr_flags = self._ovr_flags
    # the properties not copied as they came: overridden, or the headers when edited
    cdef bint edit = self._fwd != NULL or self._ts
    cdef unsigned changed = ovr_flags | (HEADERS_FLAG if edit else 0)
    cdef Py_ssize_t pos = 2, start = 0, end = 0, o = 2, k
    cdef int i, kind
    cdef const unsigned char *table
    cdef Py_ssize_t table_len
    if src_len < 2:
        return relay_unparseable(self, "content header without property flags")
    flags = pumpd_rd16(src)
    if flags & 1:
        return relay_unparseable(self, "property flag continuation is not used by basic properties")
    out_flags = flags | changed
    for i in range(N_PROPERTIES):
        bit = 1u << (15 - i)
        if flags & bit:
            kind = PROPERTY_KIND[i]
            if kind == KIND_SHORTSTR:
                end = pos + 1 + (src[pos] if pos < src_len else 0)
            elif kind == KIND_TABLE:
                end = pos + 4 + (<Py_ssize_t>pumpd_rd32(src + pos) if pos + 4 <= src_len else 0)
            elif kind == KIND_OCTET:
                end = pos + 1
            else:
                end = pos + 8
            if end > src_len:
                return relay_unparseable(self, "content header properties truncated")
            start = pos
            pos = end
        if changed & bit:
            if i == HEADERS_INDEX and edit:
                table = NULL
                table_len = 0
                if ovr_flags & bit:
                    table = self._ovr_ptr[i]
                    table_len = self._ovr_len[i]
                elif flags & bit:
                    table = src + start
                    table_len = end - start
                k = relay_edit_table(self, table, table_len, out + o)
                if k < 0:
                    return k
                o += k
            else:
                memcpy(out + o, self._ovr_ptr[i], <size_t>self._ovr_len[i])
                o += self._ovr_len[i]
        elif flags & bit:
            memcpy(out + o, src + start, <size_t>(end - start))
            o += end - start
    pumpd_wr16(out, <uint16_t>out_flags)
    return o


cdef Py_ssize_t relay_edit_table(Relay self, const unsigned char *t, Py_ssize_t t_len,
                                 unsigned char *out) except -1:
    """The headers table ``t`` (u32 length + entries; NULL: none) with this hop first in
    ``x-shovelled`` and / or ``x-shovelled-timestamp`` set, every other entry copied as it is
    (``frames.edit_headers``). Returns the length written, or UNDELIVERABLE / PYTHON_EDIT."""
    cdef Py_ssize_t o = 4, pos, vpos, entry_end, run, end
    cdef bint fwd_done = self._fwd == NULL
    cdef bint ts_done = not self._ts
    cdef uint32_t array_len
    cdef int64_t now = 0
    if self._ts:
        # time() may be a system call (no vDSO clock on some VMs): a second's resolution
        # needs one reading per batch of messages, not one per message
        if self._now < 0:
            self._now = <int64_t>time(NULL)
        now = self._now
    if t != NULL:
        end = t_len  # the property walk made it 4 + the table's length
        pos = run = 4
        while pos < end:
            vpos = pos + 1 + t[pos]
            entry_end = table_entry_end(self, t, vpos, end)
            if entry_end < 0:
                return entry_end  # UNDELIVERABLE
            if not fwd_done and t[pos] == 11 and memcmp(t + pos + 1, FORWARD_KEY, 11) == 0:
                if t[vpos] != b'A':
                    return PYTHON_EDIT  # the plugin moves it to x-invalid-headers
                memcpy(out + o, t + run, <size_t>(vpos - run))
                o += vpos - run
                array_len = pumpd_rd32(t + vpos + 1)
                out[o] = b'A'
                pumpd_wr32(out + o + 1, <uint32_t>(array_len + 1 + self._fwd_len))
                out[o + 5] = b'F'
                memcpy(out + o + 6, self._fwd, <size_t>self._fwd_len)
                o += 6 + self._fwd_len
                memcpy(out + o, t + vpos + 5, array_len)
                o += array_len
                run = entry_end
                fwd_done = 1
            elif not ts_done and t[pos] == 21 and memcmp(t + pos + 1, TIMESTAMP_KEY, 21) == 0:
                memcpy(out + o, t + run, <size_t>(vpos - run))
                o += vpos - run
                out[o] = b'l'
                pumpd_wr64(out + o + 1, <uint64_t>now)
                o += 9
                run = entry_end
                ts_done = 1
            pos = entry_end
        memcpy(out + o, t + run, <size_t>(end - run))
        o += end - run
    if not fwd_done:
        o = append_forward_entry(self, out, o)
    if not ts_done:
        out[o] = 21
        memcpy(out + o + 1, TIMESTAMP_KEY, 21)
        out[o + 22] = b'l'
        pumpd_wr64(out + o + 23, <uint64_t>now)
        o += TIMESTAMP_ENTRY
    pumpd_wr32(out, <uint32_t>(o - 4))
    return o


cdef inline Py_ssize_t table_entry_end(Relay self, const unsigned char *t, Py_ssize_t vpos,
                                       Py_ssize_t end) except -1:
    """Where the headers-table entry whose value starts at ``vpos`` ends, each length checked
    against ``end``; UNDELIVERABLE when it does not fit or its type is unknown."""
    cdef Py_ssize_t size
    if vpos >= end:
        return relay_unparseable(self, "headers table truncated")
    size = FIELD_SIZE[t[vpos]]
    if size == FIELD_UNKNOWN:
        return relay_unparseable(self, f"headers table has an unknown field type 0x{t[vpos]:02x}")
    if size == FIELD_LONG:
        if vpos + 5 > end:
            return relay_unparseable(self, "headers table truncated")
        size = 4 + <Py_ssize_t>pumpd_rd32(t + vpos + 1)
    if vpos + 1 + size > end:
        return relay_unparseable(self, "headers table truncated")
    return vpos + 1 + size


cdef inline Py_ssize_t append_forward_entry(Relay self, unsigned char *out, Py_ssize_t o) noexcept:
    """A new ``x-shovelled`` entry holding only this hop, at ``out + o``; returns the end."""
    out[o] = 11
    memcpy(out + o + 1, FORWARD_KEY, 11)
    out[o + 12] = b'A'
    pumpd_wr32(out + o + 13, <uint32_t>(1 + self._fwd_len))
    out[o + 17] = b'F'
    memcpy(out + o + 18, self._fwd, <size_t>self._fwd_len)
    return o + FORWARD_ENTRY_EXTRA + self._fwd_len
