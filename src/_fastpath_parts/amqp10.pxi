# -- AMQP 1.0: transfer frames written in bulk; a session's transfers and dispositions scanned --
#
# Same API, behaviour and error messages as pumpd.dataplane.amqp10_frames_ref, the specification
# (its head_error / field_error / field_type_error build the messages here too, on the cold
# path). Writing: a message's frames are encoded straight into one C buffer, no Python object
# per message. Scanning: frames are walked with pointer arithmetic in the bytes read off the
# socket (only a frame cut by the end of a read is copied, to the carry-over buffer); a
# transfer's fields are read into a C struct, and a whole message costs its payload's bytes
# and its tuple (a multi-frame one is gathered in a C buffer first).

from pumpd.dataplane import amqp10_frames_ref as _a10
from pumpd.dataplane.amqp10_frames_ref import FramingError as Amqp10FramingError

cdef enum:
    A10_HEAD = 8  # size(4) doff(1) type(1) channel(2)
    A10_TRANSFER = 0x14
    A10_DISPOSITION = 0x15
    A10_NULL = 0x40
    A10_TRUE = 0x41
    A10_FALSE = 0x42
    A10_UINT0 = 0x43
    A10_LIST0 = 0x45
    A10_UBYTE = 0x50
    A10_SMALLUINT = 0x52
    A10_SMALLULONG = 0x53
    A10_BOOLEAN = 0x56
    A10_UINT = 0x70
    A10_ULONG = 0x80
    A10_VBIN8 = 0xA0
    A10_SYM8 = 0xA3
    A10_VBIN32 = 0xB0
    A10_SYM32 = 0xB3
    A10_LIST8 = 0xC0
    A10_LIST32 = 0xD0
    # field kinds, as the reference's K_*
    A10_K_UINT = 0
    A10_K_BOOL = 1
    A10_K_UBYTE = 2
    A10_K_BINARY = 3
    A10_K_STATE = 4
    A10_MAX_FIELDS = 11
    # transfer fields by index
    A10_T_HANDLE = 0
    A10_T_DELIVERY_ID = 1
    A10_T_TAG = 2
    A10_T_SETTLED = 4
    A10_T_MORE = 5
    A10_T_ABORTED = 9
    A10_MAX_TAG = 32
    A10_SHRINK = 1 << 22  # a buffer grown past this is given back once emptied

cdef int[11] A10_TRANSFER_KINDS
cdef int[6] A10_DISPOSITION_KINDS
for _index, _kind in enumerate(_a10.TRANSFER_KINDS):
    A10_TRANSFER_KINDS[_index] = _kind
for _index, _kind in enumerate(_a10.DISPOSITION_KINDS):
    A10_DISPOSITION_KINDS[_index] = _kind
del _index, _kind

# The C constants above are the reference's too: refuse to load if they drift.
if ((_a10.TRANSFER, _a10.DISPOSITION, _a10.FRAME_HEADER_SIZE, _a10.MAX_DELIVERY_TAG,
     _a10.K_UINT, _a10.K_BOOL, _a10.K_UBYTE, _a10.K_BINARY, _a10.K_STATE,
     len(_a10.TRANSFER_KINDS), len(_a10.DISPOSITION_KINDS), _a10.PROTOCOL_HEADER,
     _a10.TRANSFER_FIELDS[A10_T_DELIVERY_ID], _a10.TRANSFER_FIELDS[A10_T_TAG],
     _a10.TRANSFER_FIELDS[A10_T_SETTLED], _a10.TRANSFER_FIELDS[A10_T_MORE],
     _a10.TRANSFER_FIELDS[A10_T_ABORTED])
        != (A10_TRANSFER, A10_DISPOSITION, A10_HEAD, A10_MAX_TAG, A10_K_UINT, A10_K_BOOL,
            A10_K_UBYTE, A10_K_BINARY, A10_K_STATE, A10_MAX_FIELDS, 6, -1, "delivery-id",
            "delivery-tag", "settled", "more", "aborted")):
    raise ImportError("pumpd._fastpath disagrees with pumpd.dataplane.amqp10_frames_ref")

# The symbolic descriptors this scanner knows, as tables of (length, code, name) entries.
cdef bytes A10_PERFORMATIVE_SYMBOLS = b"".join(
    bytes((len(k), v)) + k for k, v in _a10.PERFORMATIVES.items())
cdef bytes A10_STATE_SYMBOLS = b"".join(
    bytes((len(k), v)) + k for k, v in _a10.DELIVERY_STATES.items())
cdef uint64_t A10_STATE_CODES[4]  # a bit per delivery state's descriptor code (static: zeroed)
for _code in _a10.DELIVERY_STATE_CODES:
    A10_STATE_CODES[_code >> 6] |= (<uint64_t>1) << (_code & 63)
del _code


ctypedef struct A10Fields:
    uint32_t v[11]  # A10_MAX_FIELDS
    unsigned present  # bit i: field i is there (neither null nor past the list's count)
    Py_ssize_t end  # the position after the list


cdef inline int a10_uint(unsigned char *o, uint32_t v) noexcept:
    """``v`` as an AMQP uint in its shortest form at ``o``; the bytes written."""
    if v == 0:
        o[0] = A10_UINT0
        return 1
    if v < 256:
        o[0] = A10_SMALLUINT
        o[1] = <unsigned char>v
        return 2
    o[0] = A10_UINT
    pumpd_wr32(o + 1, v)
    return 5


cdef int a10_symbol(const unsigned char *s, Py_ssize_t n, bytes table) noexcept:
    """The code ``table`` gives the symbol ``s[:n]`` (entries: length, code, name), or -1."""
    cdef const unsigned char *t = <const unsigned char *>PyBytes_AS_STRING(table)
    cdef Py_ssize_t pos = 0, size = PyBytes_GET_SIZE(table)
    while pos < size:
        if t[pos] == n and memcmp(t + pos + 2, s, <size_t>n) == 0:
            return t[pos + 1]
        pos += 2 + t[pos]
    return -1


cdef int a10_descriptor(const unsigned char *p, Py_ssize_t pos, Py_ssize_t end, bytes symbols,
                        Py_ssize_t *after) noexcept:
    """The descriptor at ``p[pos]``: AMQP's own descriptor code (-1 for another one), the
    position after it in ``after`` (-1 when it does not end by ``end``). As the reference's
    ``_descriptor``."""
    cdef unsigned code
    cdef Py_ssize_t width, n, start
    cdef uint64_t v
    after[0] = -1
    if pos >= end:
        return -1
    code = p[pos]
    if code == A10_SMALLULONG:
        if pos + 2 > end:
            return -1
        after[0] = pos + 2
        return p[pos + 1]
    if code == A10_ULONG:
        if pos + 9 > end:
            return -1
        after[0] = pos + 9
        v = pumpd_rd64(p + pos + 1)
        return <int>v if v <= 0xFF else -1
    if code == A10_SYM8 or code == A10_SYM32:
        width = 1 if code == A10_SYM8 else 4
        if pos + 1 + width > end:
            return -1
        start = pos + 1 + width
        n = p[pos + 1] if width == 1 else <Py_ssize_t>pumpd_rd32(p + pos + 1)
        if n > end - start:
            return -1
        after[0] = start + n
        return a10_symbol(p + start, n, symbols)
    after[0] = pos
    return -1


cdef Py_ssize_t a10_list_end(const unsigned char *p, Py_ssize_t pos, Py_ssize_t end) noexcept:
    """As the reference's ``_list_end``."""
    cdef unsigned code
    cdef Py_ssize_t size, least, after
    if pos >= end:
        return -1
    code = p[pos]
    if code == A10_LIST0:
        return pos + 1
    if code == A10_LIST8:
        if pos + 2 > end:
            return -1
        size = p[pos + 1]
        after = pos + 2 + size
        least = 1
    elif code == A10_LIST32:
        if pos + 5 > end:
            return -1
        size = <Py_ssize_t>pumpd_rd32(p + pos + 1)
        after = pos + 5 + size
        least = 4
    else:
        return 0
    if size < least:
        return 0
    return after if after <= end else -1


cdef inline bint a10_kind_allows(int kind, unsigned code) noexcept:
    if kind == A10_K_UINT:
        return code == A10_UINT0 or code == A10_SMALLUINT or code == A10_UINT
    if kind == A10_K_BOOL:
        return code == A10_TRUE or code == A10_FALSE or code == A10_BOOLEAN
    if kind == A10_K_UBYTE:
        return code == A10_UBYTE
    if kind == A10_K_BINARY:
        return code == A10_VBIN8 or code == A10_VBIN32
    return code == 0x00


cdef Py_ssize_t a10_field_value(const unsigned char *p, Py_ssize_t pos, Py_ssize_t end, int kind,
                                unsigned code, uint32_t *value) noexcept:
    """As the reference's ``_field_value``: the value in ``value``; the position after it, -1
    past ``end``, 0 for a value its type does not allow."""
    cdef unsigned v
    cdef Py_ssize_t width, n, after
    cdef int state
    if code == A10_UINT0 or code == A10_TRUE or code == A10_FALSE:
        value[0] = 1 if code == A10_TRUE else 0
        return pos + 1
    if code == A10_SMALLUINT or code == A10_UBYTE or code == A10_BOOLEAN:
        if pos + 2 > end:
            return -1
        v = p[pos + 1]
        if v > 1 and code != A10_SMALLUINT:
            return 0
        value[0] = v
        return pos + 2
    if code == A10_UINT:
        if pos + 5 > end:
            return -1
        value[0] = pumpd_rd32(p + pos + 1)
        return pos + 5
    if kind == A10_K_BINARY:
        width = 1 if code == A10_VBIN8 else 4
        if pos + 1 + width > end:
            return -1
        n = p[pos + 1] if width == 1 else <Py_ssize_t>pumpd_rd32(p + pos + 1)
        if n > end - (pos + 1 + width):
            return -1
        value[0] = <uint32_t>n
        return pos + 1 + width + n
    state = a10_descriptor(p, pos + 1, end, A10_STATE_SYMBOLS, &after)
    if after < 0:
        return -1
    if state < 0 or not ((A10_STATE_CODES[state >> 6] >> (state & 63)) & 1):
        return 0
    value[0] = <uint32_t>state
    return a10_list_end(p, after, end)


cdef int a10_fields(const unsigned char *p, Py_ssize_t pos, Py_ssize_t end, int performative,
                    int channel, A10Fields *f) except -1:
    """The fields of the transfer or disposition whose list is at ``p[pos]`` in the frame
    ``p[:end]``, checked as the reference's ``_fields`` checks them."""
    cdef const int *kinds = A10_TRANSFER_KINDS
    cdef Py_ssize_t nkinds = A10_MAX_FIELDS
    cdef Py_ssize_t list_at = pos, list_end, size, least, after
    cdef uint64_t count
    cdef Py_ssize_t index
    cdef unsigned code
    f.present = 0
    if performative == A10_DISPOSITION:
        kinds = A10_DISPOSITION_KINDS
        nkinds = 6
    if pos >= end:
        raise Amqp10FramingError(_a10.field_error(
            performative, channel, f"the frame ends at offset {list_at} before its list"))
    code = p[pos]
    if code == A10_LIST0:
        f.end = pos + 1
        return 0
    if code == A10_LIST8:
        if pos + 3 > end:
            raise Amqp10FramingError(_a10.field_error(
                performative, channel, f"its list8 at offset {list_at} is cut short"))
        size = p[pos + 1]
        count = p[pos + 2]
        list_end = pos + 2 + size
        pos += 3
        least = 1
    elif code == A10_LIST32:
        if pos + 9 > end:
            raise Amqp10FramingError(_a10.field_error(
                performative, channel, f"its list32 at offset {list_at} is cut short"))
        size = <Py_ssize_t>pumpd_rd32(p + pos + 1)
        count = pumpd_rd32(p + pos + 5)
        list_end = pos + 5 + size
        pos += 9
        least = 4
    else:
        raise Amqp10FramingError(_a10.field_error(
            performative, channel, f"type code 0x{code:02x} at offset {list_at}, not a list"))
    if size < least or list_end > end:
        raise Amqp10FramingError(_a10.field_error(
            performative, channel, f"its list of {size} bytes at offset {list_at} does not fit "
            f"the frame's {end} bytes"))
    if count > <uint64_t>nkinds:
        raise Amqp10FramingError(_a10.field_error(
            performative, channel, f"its list has {count} fields, more than the {nkinds} it "
            "defines"))
    for index in range(<Py_ssize_t>count):
        if pos >= list_end:
            raise Amqp10FramingError(_a10.field_error(
                performative, channel, f"its list ends at offset {list_end} before field "
                f"{index + 1} of {count}"))
        code = p[pos]
        if code == A10_NULL:
            pos += 1
            continue
        if not a10_kind_allows(kinds[index], code):
            raise Amqp10FramingError(_a10.field_type_error(performative, channel, index, code,
                                                           pos))
        after = a10_field_value(p, pos, list_end, kinds[index], code, &f.v[index])
        if after <= 0:
            a10_field_fault(performative, channel, index, kinds[index], pos, after)
        f.present |= (<unsigned>1) << index
        pos = after
    if pos != list_end:
        raise Amqp10FramingError(_a10.field_error(
            performative, channel, f"its list has {list_end - pos} bytes after its {count} "
            "fields"))
    f.end = list_end
    return 0


cdef int a10_field_fault(int performative, int channel, Py_ssize_t index, int kind,
                         Py_ssize_t pos, Py_ssize_t after) except -1:
    names = _a10.TRANSFER_FIELDS if performative == A10_TRANSFER else _a10.DISPOSITION_FIELDS
    problem = "does not fit its list" if after < 0 else f"is no valid {_a10.KIND_NAMES[kind]}"
    raise Amqp10FramingError(_a10.field_error(
        performative, channel, f"field {names[index]} at offset {pos} {problem}"))


cdef inline bint a10_has(A10Fields *f, int index) noexcept:
    return (f.present >> index) & 1


@cython.final
cdef class TransferWriter:
    """Native twin of :class:`pumpd.dataplane.amqp10_frames_ref.TransferWriter`."""

    cdef readonly int channel
    cdef readonly uint32_t handle
    cdef readonly uint32_t max_frame_size
    cdef readonly unsigned long long frames
    cdef unsigned char _handle[5]
    cdef int _handle_len
    cdef Buf _out

    def __init__(self, long long channel, long long handle, long long max_frame_size):
        if not 0 <= channel <= 0xFFFF:
            raise ValueError(f"channel {channel} is not a ushort (0..65535)")
        if not 0 <= handle <= 0xFFFFFFFF:
            raise ValueError(f"handle {handle} is not a uint (0..4294967295)")
        if not _a10.MIN_MAX_FRAME_SIZE <= max_frame_size <= _a10.MAX_MAX_FRAME_SIZE:
            raise ValueError(f"max_frame_size {max_frame_size} is not within "
                             f"{_a10.MIN_MAX_FRAME_SIZE}..{_a10.MAX_MAX_FRAME_SIZE}")
        self.channel = <int>channel
        self.handle = <uint32_t>handle
        self.max_frame_size = <uint32_t>max_frame_size
        self._handle_len = a10_uint(self._handle, self.handle)

    def __dealloc__(self):
        buf_free(&self._out)

    @property
    def buffered(self):
        return self._out.len

    def add(self, unsigned long long delivery_id, payload, bint settled):
        self._add_obj(delivery_id, payload, settled)

    def add_many(self, unsigned long long first_delivery_id, payloads, bint settled):
        cdef unsigned long long frames = self.frames
        cdef Py_ssize_t i, n
        if isinstance(payloads, list):
            n = len(<list>payloads)
            for i in range(n):
                self._add_obj(first_delivery_id + <unsigned long long>i, (<list>payloads)[i],
                              settled)
        else:
            for i, payload in enumerate(payloads):
                self._add_obj(first_delivery_id + <unsigned long long>i, payload, settled)
        return self.frames - frames

    cdef int _add_obj(self, unsigned long long delivery_id, object payload,
                      bint settled) except -1:
        cdef Py_buffer view
        if PyBytes_CheckExact(payload):
            return self._add(<uint32_t>delivery_id,
                             <const unsigned char *>PyBytes_AS_STRING(payload),
                             PyBytes_GET_SIZE(payload), settled)
        PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE)
        try:
            return self._add(<uint32_t>delivery_id, <const unsigned char *>view.buf, view.len,
                             settled)
        finally:
            PyBuffer_Release(&view)

    cdef int _add(self, uint32_t did, const unsigned char *data, Py_ssize_t n,
                  bint settled) except -1:
        """One message's frames, as the reference's ``_add`` writes them."""
        cdef unsigned char fields[24]
        cdef unsigned char flag = A10_TRUE if settled else A10_FALSE
        cdef Py_ssize_t k, room = <Py_ssize_t>self.max_frame_size - A10_HEAD, pos = 0, chunk
        cdef Py_ssize_t size
        cdef bint last
        cdef unsigned char *o
        memcpy(fields, self._handle, <size_t>self._handle_len)
        k = self._handle_len
        k += a10_uint(fields + k, did)
        fields[k] = A10_VBIN8
        fields[k + 1] = 4
        pumpd_wr32(fields + k + 2, did)
        fields[k + 6] = A10_UINT0
        fields[k + 7] = flag
        k += 8
        while True:
            chunk = n - pos
            last = chunk <= room - 6 - k
            if not last:
                chunk = room - 7 - k
            size = A10_HEAD + 6 + k + (0 if last else 1) + chunk
            buf_reserve(&self._out, size)
            o = self._out.data + self._out.len
            pumpd_wr32(o, <uint32_t>size)
            o[4] = 2
            o[5] = 0
            pumpd_wr16(o + 6, <uint16_t>self.channel)
            o[8] = 0x00
            o[9] = A10_SMALLULONG
            o[10] = A10_TRANSFER
            o[11] = A10_LIST8
            o[12] = <unsigned char>(k + (1 if last else 2))
            o[13] = 5 if last else 6
            memcpy(o + 14, fields, <size_t>k)
            o += 14 + k
            if not last:
                o[0] = A10_TRUE
                o += 1
            if chunk:
                memcpy(o, data + pos, <size_t>chunk)
            if PUMPD_DEBUG and (size > <Py_ssize_t>self.max_frame_size
                                or o + chunk != self._out.data + self._out.len + size):
                raise AssertionError(f"transfer frame of {size} bytes, max-frame-size "
                                     f"{self.max_frame_size}")
            self._out.len += size
            self.frames += 1
            pos += chunk
            if last:
                return 0
            # continuation frames: handle, no delivery-id, tag or message-format; settled
            k = self._handle_len
            fields[k] = A10_NULL
            fields[k + 1] = A10_NULL
            fields[k + 2] = A10_NULL
            fields[k + 3] = flag
            k += 4

    def take(self):
        out = bytes_of(&self._out)
        self._out.len = 0
        if self._out.cap > A10_SHRINK:
            buf_free(&self._out)
        return out


def encode_disposition(long long channel, bint role, unsigned long long first,
                       unsigned long long last, bint settled, int state_code):
    """Native twin of :func:`pumpd.dataplane.amqp10_frames_ref.encode_disposition`."""
    cdef unsigned char o[40]
    cdef Py_ssize_t k = 14
    cdef uint32_t f = <uint32_t>first, l = <uint32_t>last
    if not 0 <= channel <= 0xFFFF:
        raise ValueError(f"channel {channel} is not a ushort (0..65535)")
    if state_code not in _a10.STATE_CODES_WRITTEN:
        raise ValueError(f"state_code 0x{state_code:02x} is not one of accepted (0x24), "
                         "rejected (0x25), released (0x26), modified (0x27) or 0 (none)")
    o[k] = A10_TRUE if role else A10_FALSE
    k += 1
    k += a10_uint(o + k, f)
    if l == f:
        o[k] = A10_NULL
        k += 1
    else:
        k += a10_uint(o + k, l)
    o[k] = A10_TRUE if settled else A10_FALSE
    k += 1
    o[13] = 4
    if state_code:
        o[k] = 0x00
        o[k + 1] = A10_SMALLULONG
        o[k + 2] = <unsigned char>state_code
        o[k + 3] = A10_LIST0
        k += 4
        o[13] = 5
    pumpd_wr32(o, <uint32_t>k)
    o[4] = 2
    o[5] = 0
    pumpd_wr16(o + 6, <uint16_t>channel)
    o[8] = 0x00
    o[9] = A10_SMALLULONG
    o[10] = A10_DISPOSITION
    o[11] = A10_LIST8
    o[12] = <unsigned char>(k - 13)
    return PyBytes_FromStringAndSize(<const char *>o, k)


@cython.final
cdef class FrameScanner:
    """Native twin of :class:`pumpd.dataplane.amqp10_frames_ref.FrameScanner`."""

    cdef readonly int channel
    cdef uint32_t _max_frame_size
    cdef unsigned long long _max_message_size
    cdef readonly unsigned long long transfer_frames
    cdef readonly unsigned long long deliveries
    cdef readonly unsigned long long aborted
    cdef Buf _carry
    cdef list _transfers
    cdef list _dispositions
    cdef list _other
    # the delivery in progress (a more=true transfer seen): its handle, delivery-id, whether
    # any of its frames said settled, the payload so far (its size counted in _size)
    cdef bint _in_delivery
    cdef uint32_t _handle
    cdef uint32_t _delivery_id
    cdef bint _settled
    cdef unsigned long long _size
    cdef Buf _partial

    def __init__(self, long long max_frame_size, long long channel,
                 long long max_message_size=0):
        if not A10_HEAD <= max_frame_size <= _a10.MAX_MAX_FRAME_SIZE:
            raise ValueError(f"max_frame_size {max_frame_size} is not within "
                             f"{A10_HEAD}..{_a10.MAX_MAX_FRAME_SIZE}")
        if not 0 <= channel <= 0xFFFF:
            raise ValueError(f"channel {channel} is not a ushort (0..65535)")
        if max_message_size < 0:
            raise ValueError(f"max_message_size {max_message_size} is negative")
        self._max_frame_size = <uint32_t>max_frame_size
        self.channel = <int>channel
        self._max_message_size = <unsigned long long>max_message_size
        self._transfers = []
        self._dispositions = []
        self._other = []

    def __dealloc__(self):
        buf_free(&self._carry)
        buf_free(&self._partial)

    @property
    def max_frame_size(self):
        return self._max_frame_size

    @max_frame_size.setter
    def max_frame_size(self, long long value):
        if not A10_HEAD <= value <= _a10.MAX_MAX_FRAME_SIZE:
            raise ValueError(f"max_frame_size {value} is not within "
                             f"{A10_HEAD}..{_a10.MAX_MAX_FRAME_SIZE}")
        self._max_frame_size = <uint32_t>value

    @property
    def max_message_size(self):
        return self._max_message_size

    @max_message_size.setter
    def max_message_size(self, long long value):
        if value < 0:
            raise ValueError(f"max_message_size {value} is negative")
        self._max_message_size = <unsigned long long>value

    @property
    def pending(self):
        return len(self._transfers)

    @property
    def in_delivery(self):
        return self._in_delivery

    def feed(self, data):
        cdef Py_buffer view
        if PyBytes_CheckExact(data):
            self._feed(<const unsigned char *>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))
            return
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            self._feed(<const unsigned char *>view.buf, view.len)
        finally:
            PyBuffer_Release(&view)

    cdef int _feed(self, const unsigned char *data, Py_ssize_t n) except -1:
        """Complete the carried-over frame from ``data``, then scan ``data`` in place; keep an
        incomplete last frame for the next call."""
        cdef Buf *carry = &self._carry
        cdef Py_ssize_t pos = 0, k, frame_len
        try:
            if carry.len:
                if carry.len < A10_HEAD:
                    k = min(A10_HEAD - carry.len, n)
                    buf_append(carry, data, k)
                    pos = k
                if carry.len >= A10_HEAD:
                    frame_len = self._head(carry.data)
                    k = min(frame_len - carry.len, n - pos)
                    buf_append(carry, data + pos, k)
                    pos += k
                    if carry.len == frame_len:
                        self._frame(carry.data, frame_len)
                        carry.len = 0
            if carry.len == 0:
                pos += self._scan(data + pos, n - pos)
                if pos < n:
                    buf_append(carry, data + pos, n - pos)
        except BaseException:
            # the connection closes: nothing here is scanned again
            carry.len = 0
            self._end_delivery()
            raise
        if carry.len == 0 and carry.cap > A10_SHRINK:
            buf_free(carry)
        if PUMPD_DEBUG:
            self._check()
        return 0

    cdef int _check(self) except -1:
        """The scanner's invariants (debug builds only)."""
        # no whole frame or protocol header is ever left in the carry-over
        if self._carry.len >= A10_HEAD and (
                memcmp(self._carry.data, b"AMQP", 4) == 0
                or self._carry.len >= <Py_ssize_t>pumpd_rd32(self._carry.data)):
            raise AssertionError(f"a whole frame left in the carry-over ({self._carry.len} bytes)")
        if self._partial.len != <Py_ssize_t>self._size and self._in_delivery:
            raise AssertionError(f"delivery payload of {self._partial.len} bytes, counted "
                                 f"{self._size}")
        if not self._in_delivery and (self._partial.len or self._size):
            raise AssertionError("payload kept with no delivery in progress")
        return 0

    cdef Py_ssize_t _scan(self, const unsigned char *buf, Py_ssize_t n) except -1:
        """Handle every whole frame in ``buf``; the bytes used."""
        cdef Py_ssize_t pos = 0, frame_len
        while n - pos >= A10_HEAD:
            frame_len = self._head(buf + pos)  # before waiting for the rest of the frame
            if n - pos < frame_len:
                break
            self._frame(buf + pos, frame_len)
            pos += frame_len
        return pos

    cdef Py_ssize_t _head(self, const unsigned char *h) except -1:
        """The length of the frame (or protocol header) whose first 8 bytes are at ``h``,
        checked by its header alone."""
        cdef uint32_t size
        if h[0] == 0x41 and memcmp(h, b"AMQP", 4) == 0:
            return A10_HEAD
        size = pumpd_rd32(h)
        if size < A10_HEAD or size > self._max_frame_size or h[4] < 2 or <uint32_t>h[4] * 4 > size:
            raise Amqp10FramingError(_a10.head_error(size, h[4], h[5], pumpd_rd16(h + 6),
                                                     self._max_frame_size))
        return size

    cdef int _frame(self, const unsigned char *p, Py_ssize_t end) except -1:
        """The whole frame ``p[:end]``."""
        cdef Py_ssize_t body, after = -1
        cdef int performative = -1
        cdef uint16_t channel
        if p[0] == 0x41 and memcmp(p, b"AMQP", 4) == 0:
            self._other.append((-1, 0, PyBytes_FromStringAndSize(<const char *>p, A10_HEAD)))
            return 0
        body = <Py_ssize_t>p[4] * 4
        channel = pumpd_rd16(p + 6)
        if p[5] == 0 and channel == self.channel and body < end and p[body] == 0x00:
            performative = a10_descriptor(p, body + 1, end, A10_PERFORMATIVE_SYMBOLS, &after)
        if performative == A10_TRANSFER and after > 0:
            return self._transfer(p, after, end)
        if performative == A10_DISPOSITION and after > 0:
            return self._disposition(p, after, end)
        self._other.append((p[5], channel,
                            PyBytes_FromStringAndSize(<const char *>p + body, end - body)))
        return 0

    cdef int _transfer(self, const unsigned char *p, Py_ssize_t pos, Py_ssize_t end) except -1:
        cdef A10Fields f
        cdef uint32_t handle
        cdef unsigned long long size
        cdef object payload
        self.transfer_frames += 1
        a10_fields(p, pos, end, A10_TRANSFER, self.channel, &f)
        if not a10_has(&f, A10_T_HANDLE):
            raise Amqp10FramingError(_a10.field_error(A10_TRANSFER, self.channel,
                                                      "handle is missing"))
        handle = f.v[A10_T_HANDLE]
        if not self._in_delivery:
            if not a10_has(&f, A10_T_DELIVERY_ID):
                raise Amqp10FramingError(_a10.field_error(
                    A10_TRANSFER, self.channel, f"delivery-id missing on handle {handle}'s "
                    "first transfer of a delivery"))
            if not a10_has(&f, A10_T_TAG):
                raise Amqp10FramingError(_a10.field_error(
                    A10_TRANSFER, self.channel, f"delivery-tag missing on handle {handle}'s "
                    "first transfer of a delivery"))
            self._delivery_id = f.v[A10_T_DELIVERY_ID]
            self._settled = False
            self._partial.len = 0
            self._size = 0
        else:
            if handle != self._handle:
                raise Amqp10FramingError(_a10.field_error(
                    A10_TRANSFER, self.channel, f"handle {handle} while delivery "
                    f"{self._delivery_id} on handle {self._handle} is unfinished"))
            if a10_has(&f, A10_T_DELIVERY_ID) and f.v[A10_T_DELIVERY_ID] != self._delivery_id:
                raise Amqp10FramingError(_a10.field_error(
                    A10_TRANSFER, self.channel, f"delivery-id {f.v[A10_T_DELIVERY_ID]} "
                    f"continues delivery {self._delivery_id}"))
        if a10_has(&f, A10_T_TAG) and f.v[A10_T_TAG] > A10_MAX_TAG:
            raise Amqp10FramingError(_a10.field_error(
                A10_TRANSFER, self.channel, f"delivery-tag of {f.v[A10_T_TAG]} bytes, over "
                f"{A10_MAX_TAG}"))
        if a10_has(&f, A10_T_ABORTED) and f.v[A10_T_ABORTED]:
            self.aborted += 1
            self._end_delivery()
            return 0
        if a10_has(&f, A10_T_SETTLED) and f.v[A10_T_SETTLED]:
            self._settled = True
        size = self._size + <unsigned long long>(end - f.end)
        if self._max_message_size and size > self._max_message_size:
            raise Amqp10FramingError(_a10.field_error(
                A10_TRANSFER, self.channel, f"delivery {self._delivery_id} on handle {handle} "
                f"reaches {size} bytes, over max-message-size {self._max_message_size}"))
        self._size = size
        if a10_has(&f, A10_T_MORE) and f.v[A10_T_MORE]:
            self._handle = handle
            self._in_delivery = True
            buf_append(&self._partial, p + f.end, end - f.end)
            return 0
        if self._partial.len:
            buf_append(&self._partial, p + f.end, end - f.end)
            payload = bytes_of(&self._partial)
        else:
            payload = PyBytes_FromStringAndSize(<const char *>p + f.end, end - f.end)
        self._transfers.append((handle, self._delivery_id, self._settled, payload))
        self.deliveries += 1
        self._end_delivery()
        return 0

    cdef void _end_delivery(self) noexcept:
        self._in_delivery = False
        self._partial.len = 0
        self._size = 0
        if self._partial.cap > A10_SHRINK:
            buf_free(&self._partial)

    cdef int _disposition(self, const unsigned char *p, Py_ssize_t pos,
                          Py_ssize_t end) except -1:
        cdef A10Fields f
        cdef bint role, settled
        a10_fields(p, pos, end, A10_DISPOSITION, self.channel, &f)
        if not a10_has(&f, 0):
            raise Amqp10FramingError(_a10.field_error(A10_DISPOSITION, self.channel,
                                                      "role is missing"))
        if not a10_has(&f, 1):
            raise Amqp10FramingError(_a10.field_error(A10_DISPOSITION, self.channel,
                                                      "first is missing"))
        if f.end != end:
            raise Amqp10FramingError(_a10.field_error(A10_DISPOSITION, self.channel,
                                                      f"{end - f.end} bytes follow its list"))
        role = f.v[0] != 0
        settled = a10_has(&f, 3) and f.v[3] != 0
        self._dispositions.append((role, f.v[1], f.v[2] if a10_has(&f, 2) else f.v[1],
                                   settled, f.v[4] if a10_has(&f, 4) else 0))
        return 0

    def take_transfers(self, Py_ssize_t most):
        cdef Py_ssize_t n = min(max(most, 0), len(self._transfers))
        cdef list batch = self._transfers[:n]
        del self._transfers[:n]
        return batch

    def take_dispositions(self):
        cdef list batch = self._dispositions
        self._dispositions = []
        return batch

    def take_other(self):
        cdef list batch = self._other
        self._other = []
        return batch
