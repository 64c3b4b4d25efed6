# -- StreamSections: stream messages (AMQP 1.0 sections) into Arrow's column buffers -------------
#
# Native twin of pumpd.dataplane.stream_sections_ref.StreamSections, the specification. A chunk's
# entries are walked with pointer arithmetic, each message's sections checked and skipped by
# their sizes, and the values the columns need written straight into per-column C buffers
# (int32 offsets, bytes, one validity byte per row, packed into Arrow's bitmap at take()). No
# Python object is made per message; a value the columns hold only as Python's text of it (a
# list, a map, an array, a string of invalid UTF-8, a key that is not a string) is written by
# the reference's text_at, on the cold path.

from libc.stdint cimport int16_t, int32_t
from libc.math cimport isinf, isnan
from libc.string cimport memset, strlen

cdef extern from "Python.h":
    char *PyOS_double_to_string(double val, char format_code, int precision, int flags,
                                int *ptype) except NULL
    int Py_DTSF_ADD_DOT_0
    void PyMem_Free(void *p)

from pumpd.dataplane import stream_sections_ref as _ssref
from pumpd.dataplane.stream_sections_ref import MessageDecodeError

cdef enum:
    SS_COLUMNS = 16
    SS_BODY = 0
    SS_ROUTING_KEY = 1
    SS_EXCHANGE = 2
    SS_CONTENT_TYPE = 3
    SS_CONTENT_ENCODING = 4
    SS_HEADERS = 5
    SS_DELIVERY_MODE = 6
    SS_PRIORITY = 7
    SS_CORRELATION_ID = 8
    SS_REPLY_TO = 9
    SS_EXPIRATION = 10
    SS_MESSAGE_ID = 11
    SS_TIMESTAMP = 12
    SS_TYPE = 13
    SS_USER_ID = 14
    SS_APP_ID = 15
    SS_COLUMN_TEXT = 0  # as the reference's TEXT_COLUMN, TEXT_HEADER, TEXT_KEY
    SS_HEADER_TEXT = 1
    SS_KEY_TEXT = 2
    SS_MAX_DEPTH = 32
    SS_DEDUP_LINEAR = 32  # keys compared pairwise up to this many, through a dict past it

cdef Py_ssize_t SS_FULL_BYTES = 1 << 30
cdef Py_ssize_t SS_INT32_MAX = 2147483647
cdef long long SS_SECONDS_MIN = -62135596800
cdef long long SS_SECONDS_MAX = 253402300799

assert _ssref.MAX_DEPTH == SS_MAX_DEPTH and _ssref.FULL_BYTES == SS_FULL_BYTES
assert (_ssref.TEXT_COLUMN, _ssref.TEXT_HEADER, _ssref.TEXT_KEY) == (
    SS_COLUMN_TEXT, SS_HEADER_TEXT, SS_KEY_TEXT)
assert _ssref.COLUMNS[SS_HEADERS] == "headers" and _ssref.COLUMNS[SS_TIMESTAMP] == "timestamp"
assert len(_ssref.COLUMNS) == SS_COLUMNS

# the width of a fixed-width type's payload, -1 for a variable one or an unknown code
cdef signed char SS_WIDTH[256]


cdef void _ss_widths() noexcept:
    cdef int c
    for c in range(256):
        SS_WIDTH[c] = -1
    for c in (0x40, 0x41, 0x42, 0x43, 0x44, 0x45):
        SS_WIDTH[c] = 0
    for c in (0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56):
        SS_WIDTH[c] = 1
    for c in (0x60, 0x61):
        SS_WIDTH[c] = 2
    for c in (0x70, 0x71, 0x72, 0x73):
        SS_WIDTH[c] = 4
    for c in (0x80, 0x81, 0x82, 0x83):
        SS_WIDTH[c] = 8
    SS_WIDTH[0x98] = 16


_ss_widths()


cdef inline bint _ss_is_integer(int c) noexcept:
    return (c == 0x43 or c == 0x44 or (0x50 <= c <= 0x55) or c == 0x60 or c == 0x61
            or c == 0x70 or c == 0x71 or c == 0x80 or c == 0x81 or c == 0x83)


cdef inline bint _ss_is_string(int c) noexcept:
    return c == 0xA1 or c == 0xB1 or c == 0xA3 or c == 0xB3


cdef long long _ss_int(const unsigned char *m, int c, Py_ssize_t q, bint *big) noexcept:
    """An integer code's value, its payload at ``m + q``; ``big``: an unsigned one past int64."""
    cdef uint64_t u
    big[0] = False
    if c == 0x43 or c == 0x44:
        return 0
    if c == 0x50 or c == 0x52 or c == 0x53:
        return m[q]
    if c == 0x51 or c == 0x54 or c == 0x55:
        return <signed char>m[q]
    if c == 0x60:
        return pumpd_rd16(m + q)
    if c == 0x61:
        return <int16_t>pumpd_rd16(m + q)
    if c == 0x70:
        return pumpd_rd32(m + q)
    if c == 0x71:
        return <int32_t>pumpd_rd32(m + q)
    if c == 0x81:
        return <int64_t>pumpd_rd64(m + q)
    u = pumpd_rd64(m + q)  # ulong, timestamp
    if u > <uint64_t>0x7FFFFFFFFFFFFFFF:
        big[0] = True
    return <long long>u


cdef enum:  # what a size check reads, for its error message (built only when it fails)
    SS_A_VALUE
    SS_A_CHAR
    SS_A_UUID
    SS_FIXED      # type 0x..
    SS_SIZE       # the size of type 0x..
    SS_SIZED      # type 0x.. of n bytes
    SS_HEAD       # the size and count of type 0x..
    SS_CTOR       # an array's constructor


cdef inline int _ss_short(Py_ssize_t p, Py_ssize_t end, Py_ssize_t want, int what,
                          int code) except -1:
    if p + want > end:
        _ss_short_error(p, end, want, what, code)
    return 0


cdef int _ss_short_error(Py_ssize_t p, Py_ssize_t end, Py_ssize_t want, int what,
                         int code) except -1:
    cdef str name
    if what == SS_A_VALUE:
        name = "a value"
    elif what == SS_A_CHAR:
        name = "a char"
    elif what == SS_A_UUID:
        name = "a uuid"
    elif what == SS_FIXED:
        name = f"type 0x{code:02x}"
    elif what == SS_SIZE:
        name = f"the size of type 0x{code:02x}"
    elif what == SS_SIZED:
        name = f"type 0x{code:02x} of {want} bytes"
    elif what == SS_HEAD:
        name = f"the size and count of type 0x{code:02x}"
    else:
        name = "an array's constructor"
    raise MessageDecodeError(f"{name} at byte {p} needs {want} bytes, "
                             f"{end - p if end > p else 0} left")


cdef Py_ssize_t _ss_skip(const unsigned char *m, Py_ssize_t p, Py_ssize_t end,
                         int depth) except -1:
    """The position after the value at ``p``, checked as the reference's value_at checks it."""
    _ss_short(p, end, 1, SS_A_VALUE, 0)
    return _ss_skip_payload(m, m[p], p, p + 1, end, depth)


cdef Py_ssize_t _ss_skip_payload(const unsigned char *m, int c, Py_ssize_t p, Py_ssize_t q,
                                 Py_ssize_t end, int depth) except -1:
    cdef int w = SS_WIDTH[c]
    cdef uint32_t n
    if c == 0x00:
        if depth >= SS_MAX_DEPTH:
            raise MessageDecodeError(f"values nested more than {SS_MAX_DEPTH} deep at byte {p}")
        q = _ss_skip(m, q, end, depth + 1)
        return _ss_skip(m, q, end, depth + 1)
    if w >= 0:
        if w:
            _ss_short(q, end, w, SS_A_CHAR if c == 0x73 else (
                SS_A_UUID if c == 0x98 else SS_FIXED), c)
        if c == 0x73:
            n = pumpd_rd32(m + q)
            if n > 0x10FFFF or 0xD800 <= n < 0xE000:
                raise MessageDecodeError(f"char 0x{n:x} at byte {p} is no Unicode scalar value")
        return q + w
    if c == 0xA0 or c == 0xA1 or c == 0xA3:
        _ss_short(q, end, 1, SS_SIZE, c)
        n = m[q]
        q += 1
        _ss_short(q, end, n, SS_SIZED, c)
        return q + n
    if c == 0xB0 or c == 0xB1 or c == 0xB3:
        _ss_short(q, end, 4, SS_SIZE, c)
        n = pumpd_rd32(m + q)
        q += 4
        _ss_short(q, end, n, SS_SIZED, c)
        return q + n
    if c == 0xC0 or c == 0xC1 or c == 0xD0 or c == 0xD1 or c == 0xE0 or c == 0xF0:
        if depth >= SS_MAX_DEPTH:
            raise MessageDecodeError(f"values nested more than {SS_MAX_DEPTH} deep at byte {p}")
        return _ss_skip_compound(m, q, end, c, depth + 1)
    raise MessageDecodeError(f"AMQP 1.0 type code 0x{c:02x} at byte {p}")


cdef Py_ssize_t _ss_compound(const unsigned char *m, Py_ssize_t p, Py_ssize_t end, int c,
                             Py_ssize_t *stop, uint32_t *count) except -1:
    """A compound's size and count at ``p`` checked; returns where its elements begin."""
    cdef bint wide = c == 0xD0 or c == 0xD1 or c == 0xF0
    cdef Py_ssize_t width = 4 if wide else 1
    cdef uint32_t size
    _ss_short(p, end, 2 * width, SS_HEAD, c)
    size = pumpd_rd32(m + p) if wide else m[p]
    count[0] = pumpd_rd32(m + p + 4) if wide else m[p + 1]
    if size < width:
        raise MessageDecodeError(f"type 0x{c:02x} at byte {p - 1} of size {size}, less than "
                                 "its count")
    _ss_short(p + width, end, size, SS_SIZED, c)
    if count[0] > size:
        raise MessageDecodeError(f"type 0x{c:02x} at byte {p - 1}: {count[0]} elements in "
                                 f"{size} bytes")
    stop[0] = p + width + size
    return p + 2 * width


cdef Py_ssize_t _ss_array_ctor(const unsigned char *m, Py_ssize_t q, Py_ssize_t stop, int depth,
                               Py_ssize_t *ctor_at) except -1:
    """An array's element constructor at ``q`` (a descriptor skipped); returns the position
    after it, ``ctor_at`` where its code is."""
    _ss_short(q, stop, 1, SS_CTOR, 0)
    if m[q] == 0x00:
        q = _ss_skip(m, q + 1, stop, depth)
        _ss_short(q, stop, 1, SS_CTOR, 0)
    ctor_at[0] = q
    if m[q] == 0x00:
        raise MessageDecodeError(f"an array's constructor at byte {q} is described twice")
    return q + 1


cdef Py_ssize_t _ss_skip_compound(const unsigned char *m, Py_ssize_t p, Py_ssize_t end, int c,
                                  int depth) except -1:
    cdef Py_ssize_t stop, q, ctor_at
    cdef uint32_t count, i
    cdef int ctor, w
    q = _ss_compound(m, p, end, c, &stop, &count)
    if c == 0xE0 or c == 0xF0:
        q = _ss_array_ctor(m, q, stop, depth, &ctor_at)
        ctor = m[ctor_at]
        w = SS_WIDTH[ctor]
        if w >= 0 and ctor != 0x73:  # fixed width: all elements at once
            if q + <Py_ssize_t>w * count > stop:  # named as the first element cut short
                q += (stop - q) // w * w
                _ss_short(q, stop, w, SS_A_UUID if ctor == 0x98 else SS_FIXED, ctor)
            return stop
        for i in range(count):
            q = _ss_skip_payload(m, ctor, ctor_at, q, stop, depth)
        return stop
    for i in range(count):
        q = _ss_skip(m, q, stop, depth)
    if (c == 0xC1 or c == 0xD1) and count % 2:
        raise MessageDecodeError(f"a map at byte {p - 1} of {count} elements, an odd count")
    return stop


cdef Py_ssize_t _ss_undescribed(const unsigned char *m, Py_ssize_t p, Py_ssize_t end) except -1:
    """Where the value at ``p`` (checked already) has its own type code, past descriptors."""
    while m[p] == 0x00:
        p = _ss_skip(m, p + 1, end, 0)
    return p


cdef int _ss_float(Buf *out, const unsigned char *m, int c, Py_ssize_t q, int how) except -1:
    """A float or double as Python's ``repr`` writes it (its ``str``), or as JSON does (NaN,
    Infinity, -Infinity) for a header."""
    cdef uint32_t bits32
    cdef uint64_t bits64
    cdef float f
    cdef double d
    cdef char *text
    if c == 0x72:
        bits32 = pumpd_rd32(m + q)
        memcpy(&f, &bits32, 4)
        d = f
    else:
        bits64 = pumpd_rd64(m + q)
        memcpy(&d, &bits64, 8)
    if isnan(d):
        if how == SS_HEADER_TEXT:
            return buf_append(out, <const unsigned char *>b"NaN", 3)
        return buf_append(out, <const unsigned char *>b"nan", 3)
    if isinf(d):
        if how == SS_HEADER_TEXT:
            if d > 0:
                return buf_append(out, <const unsigned char *>b"Infinity", 8)
            return buf_append(out, <const unsigned char *>b"-Infinity", 9)
        if d > 0:
            return buf_append(out, <const unsigned char *>b"inf", 3)
        return buf_append(out, <const unsigned char *>b"-inf", 4)
    text = PyOS_double_to_string(d, b'r', 0, Py_DTSF_ADD_DOT_0, NULL)
    try:
        buf_append(out, <const unsigned char *>text, <Py_ssize_t>strlen(text))
    finally:
        PyMem_Free(text)
    return 0


cdef bint _ss_utf8(const unsigned char *s, Py_ssize_t n) noexcept:
    """Whether ``s`` is UTF-8 as Python's strict decoder has it (no surrogates, no overlong
    forms, nothing past U+10FFFF)."""
    cdef Py_ssize_t i = 0
    cdef unsigned char a, b
    while i < n:
        a = s[i]
        if a < 0x80:
            i += 1
            continue
        if a < 0xC2 or a > 0xF4:
            return False
        if a < 0xE0:
            if i + 1 >= n or (s[i + 1] & 0xC0) != 0x80:
                return False
            i += 2
            continue
        if i + 1 >= n:
            return False
        b = s[i + 1]
        if (b & 0xC0) != 0x80:
            return False
        if a < 0xF0:
            if (a == 0xE0 and b < 0xA0) or (a == 0xED and b > 0x9F):
                return False
            if i + 2 >= n or (s[i + 2] & 0xC0) != 0x80:
                return False
            i += 3
            continue
        if (a == 0xF0 and b < 0x90) or (a == 0xF4 and b > 0x8F):
            return False
        if i + 3 >= n or (s[i + 2] & 0xC0) != 0x80 or (s[i + 3] & 0xC0) != 0x80:
            return False
        i += 4
    return True


cdef int _ss_decimal(Buf *out, long long v, bint big, uint64_t u) except -1:
    cdef char tmp[24]
    cdef int k = 24
    cdef uint64_t x
    cdef bint neg = False
    if big:
        x = u
    elif v < 0:
        neg = True
        x = <uint64_t>(-(v + 1)) + 1
    else:
        x = <uint64_t>v
    while True:
        k -= 1
        tmp[k] = <char>(48 + x % 10)
        x //= 10
        if x == 0:
            break
    if neg:
        k -= 1
        tmp[k] = b'-'
    return buf_append(out, <const unsigned char *>tmp + k, 24 - k)


ctypedef struct SsPair:
    Py_ssize_t key_at   # in the keys scratch buffer
    Py_ssize_t key_len
    Py_ssize_t value_at  # in the message
    bint dropped


cdef class StreamSections:
    """Native twin of :class:`pumpd.dataplane.stream_sections_ref.StreamSections`."""

    cdef Buf _offsets[SS_COLUMNS]  # int32 little-endian: text columns, headers' entries
    cdef Buf _data[SS_COLUMNS]     # bytes; number columns' values
    cdef Buf _valid[SS_COLUMNS]    # one byte a row
    cdef Py_ssize_t _nulls[SS_COLUMNS]
    cdef Buf _key_offsets
    cdef Buf _keys
    cdef Buf _value_offsets
    cdef Buf _values
    cdef Buf _scratch               # a message's header keys
    cdef SsPair *_pairs
    cdef Py_ssize_t _pairs_cap
    cdef Py_ssize_t _rows
    cdef Py_ssize_t _entries        # header entries so far
    # the message being decoded, for the reference's text_at on the cold path
    cdef const unsigned char *_m
    cdef Py_ssize_t _n
    cdef object _message

    def __cinit__(self):
        self._clear()

    def __dealloc__(self):
        cdef int i
        for i in range(SS_COLUMNS):
            buf_free(&self._offsets[i])
            buf_free(&self._data[i])
            buf_free(&self._valid[i])
        buf_free(&self._key_offsets)
        buf_free(&self._keys)
        buf_free(&self._value_offsets)
        buf_free(&self._values)
        buf_free(&self._scratch)
        free(self._pairs)

    cdef int _clear(self) except -1:
        cdef int i
        for i in range(SS_COLUMNS):
            self._offsets[i].len = 0
            self._data[i].len = 0
            self._valid[i].len = 0
            self._nulls[i] = 0
            _ss_le32(&self._offsets[i], 0)
        self._key_offsets.len = 0
        self._keys.len = 0
        self._value_offsets.len = 0
        self._values.len = 0
        _ss_le32(&self._key_offsets, 0)
        _ss_le32(&self._value_offsets, 0)
        self._rows = 0
        self._entries = 0
        return 0

    @property
    def rows(self):
        return self._rows

    @property
    def full(self):
        return self._full()

    cdef bint _full(self) noexcept:
        cdef int i
        for i in range(SS_COLUMNS):
            if self._data[i].len >= SS_FULL_BYTES:
                return True
        return self._keys.len >= SS_FULL_BYTES or self._values.len >= SS_FULL_BYTES

    def add(self, bytes data, Py_ssize_t pos, Py_ssize_t entries, Py_ssize_t skip,
            Py_ssize_t most):
        cdef const unsigned char *d = <const unsigned char *>PyBytes_AS_STRING(data)
        cdef Py_ssize_t end = PyBytes_GET_SIZE(data), walked = 0, taken = 0
        cdef uint32_t size
        if pos < 0 or pos > end:
            raise ValueError(f"position {pos} outside a chunk of {end} bytes")
        try:
            while walked < entries and taken < most:
                if pos + 4 > end:
                    raise MessageDecodeError(f"an entry's size at byte {pos} of a chunk of "
                                             f"{end} bytes", walked)
                size = pumpd_rd32(d + pos)
                if size & 0x80000000:
                    break
                if pos + 4 + <Py_ssize_t>size > end:
                    raise MessageDecodeError(f"an entry of {size} bytes at byte {pos} runs past "
                                             f"the chunk's end ({end} bytes)", walked)
                if walked >= skip:
                    if self._rows and self._full():
                        break
                    self._m = d + pos + 4
                    self._n = size
                    self._message = None
                    try:
                        self._row()
                    except MessageDecodeError as exc:
                        raise MessageDecodeError(str(exc), walked) from None
                    finally:
                        self._message = None
                        self._m = NULL
                    taken += 1
                pos += 4 + size
                walked += 1
        except BaseException:
            self._clear()
            raise
        return pos, walked

    cdef object _message_bytes(self):
        if self._message is None:
            self._message = PyBytes_FromStringAndSize(<const char *>self._m, self._n)
        return self._message

    cdef int _row(self) except -1:
        cdef const unsigned char *m = self._m
        cdef Py_ssize_t n = self._n, p = 0, at, q, stop, i, k
        cdef Py_ssize_t header_at = -1, props_at = -1, ann_at = -1, app_at = -1, value_at = -1
        cdef Py_ssize_t ann[5]
        cdef Py_ssize_t props[10]
        cdef Py_ssize_t durable = -1, header_priority = -1, type_at = -1, app_id_at = -1
        cdef Py_ssize_t mode_at, priority_at
        cdef uint32_t count, j, length
        cdef int code, c
        cdef bint body = False, is_null
        cdef long long v
        cdef Buf *out
        for i in range(5):
            ann[i] = -1
        for i in range(10):
            props[i] = -1
        # the sections: checked whole, the data sections written as they come
        while p < n:
            if p + 3 > n or m[p] != 0x00 or m[p + 1] != 0x53:
                raise MessageDecodeError(f"no section descriptor at byte {p}")
            code = m[p + 2]
            at = p + 3
            p = _ss_skip(m, at, n, 0)
            if code == 0x75:
                q = _ss_undescribed(m, at, n)
                c = m[q]
                if c == 0xA0:
                    buf_append(&self._data[SS_BODY], m + q + 2, m[q + 1])
                elif c == 0xB0:
                    buf_append(&self._data[SS_BODY], m + q + 5, pumpd_rd32(m + q + 1))
                else:
                    raise MessageDecodeError(f"a data section at byte {at} holds type "
                                             f"0x{c:02x}, not a binary")
                body = True
            elif code == 0x70:
                header_at = at
            elif code == 0x72:
                ann_at = at
            elif code == 0x73:
                props_at = at
            elif code == 0x74:
                app_at = at
            elif code == 0x77:
                value_at = at
        if header_at >= 0:
            q = self._list(header_at, &count, "header")
            if count > 0:
                durable = q
            if count > 1:
                header_priority = _ss_skip(m, q, n, 0)
        if props_at >= 0:
            q = self._list(props_at, &count, "properties")
            for j in range(min(count, 10)):
                props[j] = q
                q = _ss_skip(m, q, n, 0)
        if ann_at >= 0:
            q = self._map(ann_at, &count, "message annotations")
            for j in range(0, count, 2):
                k = _ss_undescribed(m, q, n)
                q = _ss_skip(m, q, n, 0)
                i = _ss_annotation(m, k)
                if i >= 0:
                    ann[i] = q
                q = _ss_skip(m, q, n, 0)
        # the body: data sections, else the amqp-value
        if not body and value_at >= 0:
            q = _ss_undescribed(m, value_at, n)
            c = m[q]
            if c == 0xA0:
                buf_append(&self._data[SS_BODY], m + q + 2, m[q + 1])
            elif c == 0xB0:
                buf_append(&self._data[SS_BODY], m + q + 5, pumpd_rd32(m + q + 1))
            else:
                self._text(&self._data[SS_BODY], q, SS_COLUMN_TEXT, &is_null)
                if is_null:  # the text of null is None, as Python has it
                    buf_append(&self._data[SS_BODY], <const unsigned char *>b"None", 4)
        self._end_text(SS_BODY, False)
        self._text_column(SS_ROUTING_KEY, ann[0])
        self._text_column(SS_EXCHANGE, ann[1])
        self._text_column(SS_CONTENT_TYPE, props[6])
        self._text_column(SS_CONTENT_ENCODING, props[7])
        if app_at >= 0:
            self._headers(app_at, &type_at, &app_id_at)
        else:
            self._no_headers()
        mode_at = ann[3]
        if mode_at >= 0 and m[_ss_undescribed(m, mode_at, n)] == 0x40:
            mode_at = -1
        if mode_at >= 0:
            self._int_column(SS_DELIVERY_MODE, mode_at, "the delivery mode")
        elif durable >= 0 and self._truthy(durable):
            _ss_le32(&self._data[SS_DELIVERY_MODE], 2)
            _ss_byte(&self._valid[SS_DELIVERY_MODE], 1)
        else:
            self._int_column(SS_DELIVERY_MODE, -1, "")
        priority_at = ann[2] if ann[2] >= 0 else header_priority
        self._int_column(SS_PRIORITY, priority_at, "the priority")
        self._text_column(SS_CORRELATION_ID, props[5])
        self._text_column(SS_REPLY_TO, props[4])
        self._text_column(SS_EXPIRATION, ann[4])
        self._text_column(SS_MESSAGE_ID, props[0])
        self._timestamp(props[9])
        self._text_column(SS_TYPE, type_at)
        self._text_column(SS_USER_ID, props[1])
        self._text_column(SS_APP_ID, app_id_at)
        self._rows += 1
        return 0

    cdef Py_ssize_t _list(self, Py_ssize_t at, uint32_t *count, str what) except -1:
        """Where a list section's elements begin (``count`` of them; null: none)."""
        cdef Py_ssize_t q = _ss_undescribed(self._m, at, self._n), stop
        cdef int c = self._m[q]
        if c == 0x40 or c == 0x45:
            count[0] = 0
            return q + 1
        if c != 0xC0 and c != 0xD0:
            raise MessageDecodeError(f"the {what} section at byte {at} is not a list")
        return _ss_compound(self._m, q + 1, self._n, c, &stop, count)

    cdef Py_ssize_t _map(self, Py_ssize_t at, uint32_t *count, str what) except -1:
        """Where a map section's keys and values begin (``count`` of both; null or an empty
        list or array: none)."""
        cdef Py_ssize_t q = _ss_undescribed(self._m, at, self._n), stop
        cdef int c = self._m[q]
        if c == 0x40 or c == 0x45:
            count[0] = 0
            return q + 1
        if c == 0xC0 or c == 0xD0 or c == 0xE0 or c == 0xF0:
            _ss_compound(self._m, q + 1, self._n, c, &stop, count)
            if count[0] == 0:
                return q + 1
        if c != 0xC1 and c != 0xD1:
            raise MessageDecodeError(f"the {what} section at byte {at} is not a map")
        return _ss_compound(self._m, q + 1, self._n, c, &stop, count)

    cdef int _end_text(self, int col, bint null) except -1:
        """A text column's row done (null or its bytes written)."""
        cdef unsigned char valid = 0 if null else 1
        if self._data[col].len > SS_INT32_MAX:
            raise MessageDecodeError("a batch's column past 2 GiB")
        _ss_le32(&self._offsets[col], <uint32_t>self._data[col].len)
        _ss_byte(&self._valid[col], valid)
        if null:
            self._nulls[col] += 1
        return 0

    cdef int _text_column(self, int col, Py_ssize_t at) except -1:
        cdef bint is_null = True
        if at >= 0:
            self._text(&self._data[col], at, SS_COLUMN_TEXT, &is_null)
        return self._end_text(col, is_null)

    cdef int _text(self, Buf *out, Py_ssize_t p, int how, bint *is_null) except -1:
        """The text of the value at ``p`` written to ``out`` as a column (None: null), a header
        value or a header key has it."""
        cdef const unsigned char *m = self._m
        cdef int c, i
        cdef Py_ssize_t q, size
        cdef uint32_t ch
        cdef unsigned char tmp[32]
        cdef long long v
        cdef bint big
        is_null[0] = False
        p = _ss_undescribed(m, p, self._n)
        c = m[p]
        q = p + 1
        if c == 0x40:
            if how == SS_COLUMN_TEXT:
                is_null[0] = True
                return 0
            if how == SS_HEADER_TEXT:
                return buf_append(out, <const unsigned char *>b"null", 4)
            return buf_append(out, <const unsigned char *>b"None", 4)
        if c == 0x41 or c == 0x42 or c == 0x56:
            if (c == 0x41) or (c == 0x56 and m[q] == 1):
                if how == SS_HEADER_TEXT:
                    return buf_append(out, <const unsigned char *>b"true", 4)
                return buf_append(out, <const unsigned char *>b"True", 4)
            if how == SS_HEADER_TEXT:
                return buf_append(out, <const unsigned char *>b"false", 5)
            return buf_append(out, <const unsigned char *>b"False", 5)
        if _ss_is_integer(c):
            v = _ss_int(m, c, q, &big)
            return _ss_decimal(out, v, big, pumpd_rd64(m + q) if big else 0)
        if c == 0xA0 or c == 0xA1 or c == 0xA3 or c == 0xB0 or c == 0xB1 or c == 0xB3:
            if c >= 0xB0:
                size = pumpd_rd32(m + q)
                q += 4
            else:
                size = m[q]
                q += 1
            if (how != SS_KEY_TEXT or _ss_is_string(c)) and _ss_utf8(m + q, size):
                return buf_append(out, m + q, size)
        elif c == 0x72 or c == 0x82:
            return _ss_float(out, m, c, q, how)
        elif c == 0x98:
            for i in range(16):
                tmp[2 * i] = b"0123456789abcdef"[m[q + i] >> 4]
                tmp[2 * i + 1] = b"0123456789abcdef"[m[q + i] & 15]
            return buf_append(out, tmp, 32)
        elif c == 0x73:
            ch = pumpd_rd32(m + q)  # a scalar value: checked by _ss_skip
            if ch < 0x80:
                tmp[0] = <unsigned char>ch
                return buf_append(out, tmp, 1)
            if ch < 0x800:
                tmp[0] = <unsigned char>(0xC0 | (ch >> 6))
                tmp[1] = <unsigned char>(0x80 | (ch & 0x3F))
                return buf_append(out, tmp, 2)
            if ch < 0x10000:
                tmp[0] = <unsigned char>(0xE0 | (ch >> 12))
                tmp[1] = <unsigned char>(0x80 | ((ch >> 6) & 0x3F))
                tmp[2] = <unsigned char>(0x80 | (ch & 0x3F))
                return buf_append(out, tmp, 3)
            tmp[0] = <unsigned char>(0xF0 | (ch >> 18))
            tmp[1] = <unsigned char>(0x80 | ((ch >> 12) & 0x3F))
            tmp[2] = <unsigned char>(0x80 | ((ch >> 6) & 0x3F))
            tmp[3] = <unsigned char>(0x80 | (ch & 0x3F))
            return buf_append(out, tmp, 4)
        return self._text_by_reference(out, p, how, is_null)

    cdef int _text_by_reference(self, Buf *out, Py_ssize_t p, int how,
                                bint *is_null) except -1:
        cdef object text = _ssref.text_at(self._message_bytes(), p, how)
        cdef bytes encoded
        if text is None:
            is_null[0] = True
            return 0
        encoded = (<str>text).encode("utf-8")
        return buf_append(out, <const unsigned char *>PyBytes_AS_STRING(encoded),
                          PyBytes_GET_SIZE(encoded))

    cdef bint _truthy(self, Py_ssize_t p) except -1:
        cdef const unsigned char *m = self._m
        cdef int c
        cdef bint big
        p = _ss_undescribed(m, p, self._n)
        c = m[p]
        if c == 0x40 or c == 0x42:
            return False
        if c == 0x41:
            return True
        if c == 0x56:
            return m[p + 1] == 1
        if _ss_is_integer(c):
            return _ss_int(m, c, p + 1, &big) != 0 or big
        return _ssref.truthy_at(self._message_bytes(), p)

    cdef int _int_column(self, int col, Py_ssize_t at, str what) except -1:
        """A 32-bit number column's row: the integer at ``at`` (-1 or null: null)."""
        cdef const unsigned char *m = self._m
        cdef long long v = 0
        cdef bint big = False
        cdef int c
        cdef unsigned char valid = 0
        if at >= 0:
            at = _ss_undescribed(m, at, self._n)
            c = m[at]
            if c != 0x40:
                if _ss_is_integer(c):
                    v = _ss_int(m, c, at + 1, &big)
                if not _ss_is_integer(c) or big or v < -2147483648 or v > 2147483647:
                    raise MessageDecodeError(
                        f"{what} is {_ssref.value_at(self._message_bytes(), at, self._n)[0]!r}, "
                        "not a 32-bit integer")
                valid = 1
        _ss_le32(&self._data[col], <uint32_t><int32_t>v)
        _ss_byte(&self._valid[col], valid)
        if not valid:
            self._nulls[col] += 1
        return 0

    cdef int _timestamp(self, Py_ssize_t at) except -1:
        """``creation_time`` (milliseconds) in whole seconds, as microseconds."""
        cdef const unsigned char *m = self._m
        cdef long long v = 0, seconds = 0
        cdef bint big = False
        cdef int c
        cdef unsigned char valid = 0
        if at >= 0:
            at = _ss_undescribed(m, at, self._n)
            c = m[at]
            if c != 0x40:
                if _ss_is_integer(c):
                    v = _ss_int(m, c, at + 1, &big)
                elif c == 0x41 or c == 0x42 or c == 0x56:
                    v = 1 if c == 0x41 or (c == 0x56 and m[at + 1] == 1) else 0
                else:
                    raise MessageDecodeError(
                        f"the creation time is "
                        f"{_ssref.value_at(self._message_bytes(), at, self._n)[0]!r}, "
                        "not a timestamp")
                seconds = v // 1000
                if v < 0 and v % 1000:
                    seconds -= 1
                if big or seconds < SS_SECONDS_MIN or seconds > SS_SECONDS_MAX:
                    raise MessageDecodeError(
                        f"the creation time {_ssref.value_at(self._message_bytes(), at, self._n)[0]}"
                        " is out of the years 1 to 9999")
                valid = 1
        _ss_le64(&self._data[SS_TIMESTAMP], <uint64_t>(seconds * 1000000))
        _ss_byte(&self._valid[SS_TIMESTAMP], valid)
        if not valid:
            self._nulls[SS_TIMESTAMP] += 1
        return 0

    cdef int _no_headers(self) except -1:
        cdef unsigned char valid = 0
        _ss_le32(&self._offsets[SS_HEADERS], <uint32_t>self._entries)
        _ss_byte(&self._valid[SS_HEADERS], valid)
        self._nulls[SS_HEADERS] += 1
        return 0

    cdef int _headers(self, Py_ssize_t at, Py_ssize_t *type_at,
                      Py_ssize_t *app_id_at) except -1:
        """The application properties: a key repeated keeps its first place and its last value;
        ``x-basic-type`` and ``x-basic-app-id`` taken out for their columns."""
        cdef const unsigned char *m = self._m
        cdef uint32_t count, j
        cdef Py_ssize_t q, pairs = 0, i, k, kept = 0
        cdef SsPair *pair
        cdef bint is_null
        cdef dict seen
        q = self._map(at, &count, "application properties")
        self._scratch.len = 0
        if count // 2 > self._pairs_cap:
            self._pairs = <SsPair *>_ss_grow(self._pairs, count // 2)
            self._pairs_cap = count // 2
        for j in range(0, count, 2):
            pair = &self._pairs[pairs]
            pair.key_at = self._scratch.len
            self._text(&self._scratch, q, SS_KEY_TEXT, &is_null)
            pair.key_len = self._scratch.len - pair.key_at
            q = _ss_skip(m, q, self._n, 0)
            pair.value_at = q
            pair.dropped = False
            q = _ss_skip(m, q, self._n, 0)
            pairs += 1
        if pairs <= SS_DEDUP_LINEAR:
            for i in range(1, pairs):
                for k in range(i):
                    if (not self._pairs[k].dropped
                            and self._pairs[k].key_len == self._pairs[i].key_len
                            and memcmp(self._scratch.data + self._pairs[k].key_at,
                                       self._scratch.data + self._pairs[i].key_at,
                                       <size_t>self._pairs[i].key_len) == 0):
                        self._pairs[k].value_at = self._pairs[i].value_at
                        self._pairs[i].dropped = True
                        break
        else:
            seen = {}
            for i in range(pairs):
                key = PyBytes_FromStringAndSize(
                    <const char *>self._scratch.data + self._pairs[i].key_at,
                    self._pairs[i].key_len)
                k = seen.setdefault(key, i)
                if k != i:
                    self._pairs[k].value_at = self._pairs[i].value_at
                    self._pairs[i].dropped = True
        for i in range(pairs):
            pair = &self._pairs[i]
            if pair.dropped:
                continue
            if pair.key_len == 12 and memcmp(self._scratch.data + pair.key_at,
                                             b"x-basic-type", 12) == 0:
                type_at[0] = pair.value_at
                continue
            if pair.key_len == 14 and memcmp(self._scratch.data + pair.key_at,
                                             b"x-basic-app-id", 14) == 0:
                app_id_at[0] = pair.value_at
                continue
            buf_append(&self._keys, self._scratch.data + pair.key_at, pair.key_len)
            self._text(&self._values, pair.value_at, SS_HEADER_TEXT, &is_null)
            if self._keys.len > SS_INT32_MAX or self._values.len > SS_INT32_MAX:
                raise MessageDecodeError("a batch's column past 2 GiB")
            _ss_le32(&self._key_offsets, <uint32_t>self._keys.len)
            _ss_le32(&self._value_offsets, <uint32_t>self._values.len)
            kept += 1
        if not kept:
            return self._no_headers()
        self._entries += kept
        _ss_le32(&self._offsets[SS_HEADERS], <uint32_t>self._entries)
        _ss_byte(&self._valid[SS_HEADERS], 1)
        return 0

    def take(self):
        cdef list out = []
        cdef int col
        cdef tuple head
        for col in range(SS_COLUMNS):
            head = (self._nulls[col], _ss_bitmap(&self._valid[col], self._rows)
                    if self._nulls[col] else None)
            if col == SS_HEADERS:
                out.append(head + (bytes_of(&self._offsets[col]), bytes_of(&self._key_offsets),
                                   bytes_of(&self._keys), bytes_of(&self._value_offsets),
                                   bytes_of(&self._values)))
            elif col == SS_DELIVERY_MODE or col == SS_PRIORITY or col == SS_TIMESTAMP:
                out.append(head + (bytes_of(&self._data[col]),))
            else:
                out.append(head + (bytes_of(&self._offsets[col]), bytes_of(&self._data[col])))
        rows = self._rows
        self._clear()
        return rows, out


cdef void *_ss_grow(void *p, Py_ssize_t n) except NULL:
    cdef void *q = realloc(p, <size_t>n * sizeof(SsPair))
    if q == NULL:
        raise MemoryError()
    return q


cdef inline int _ss_le32(Buf *b, uint32_t v) except -1:
    cdef unsigned char *o
    if b.len + 4 > b.cap:
        buf_grow(b, 4)
    o = b.data + b.len
    o[0] = <unsigned char>v
    o[1] = <unsigned char>(v >> 8)
    o[2] = <unsigned char>(v >> 16)
    o[3] = <unsigned char>(v >> 24)
    b.len += 4
    return 0


cdef inline int _ss_byte(Buf *b, unsigned char v) except -1:
    if b.len + 1 > b.cap:
        buf_grow(b, 1)
    b.data[b.len] = v
    b.len += 1
    return 0


cdef inline int _ss_le64(Buf *b, uint64_t v) except -1:
    _ss_le32(b, <uint32_t>v)
    return _ss_le32(b, <uint32_t>(v >> 32))


cdef bytes _ss_bitmap(Buf *valid, Py_ssize_t rows):
    """One validity byte a row packed into Arrow's bitmap, least significant bit first."""
    cdef bytes out = PyBytes_FromStringAndSize(NULL, (rows + 7) // 8)
    cdef unsigned char *o = <unsigned char *>PyBytes_AS_STRING(out)
    cdef Py_ssize_t i
    memset(o, 0, <size_t>((rows + 7) // 8))
    for i in range(rows):
        if valid.data[i]:
            o[i >> 3] |= <unsigned char>(1 << (i & 7))
    return out


cdef int _ss_annotation(const unsigned char *m, Py_ssize_t k) noexcept:
    """Which annotation the key at ``k`` names (a string or symbol): 0 x-routing-key,
    1 x-exchange, 2 x-basic-priority, 3 x-basic-delivery-mode, 4 x-basic-expiration; -1
    another."""
    cdef int c = m[k]
    cdef Py_ssize_t n
    cdef const unsigned char *s
    if c == 0xA1 or c == 0xA3:
        n = m[k + 1]
        s = m + k + 2
    elif c == 0xB1 or c == 0xB3:
        n = pumpd_rd32(m + k + 1)
        s = m + k + 5
    else:
        return -1
    if n == 13 and memcmp(s, b"x-routing-key", 13) == 0:
        return 0
    if n == 10 and memcmp(s, b"x-exchange", 10) == 0:
        return 1
    if n == 16 and memcmp(s, b"x-basic-priority", 16) == 0:
        return 2
    if n == 21 and memcmp(s, b"x-basic-delivery-mode", 21) == 0:
        return 3
    if n == 18 and memcmp(s, b"x-basic-expiration", 18) == 0:
        return 4
    return -1
