# -- the confirm window --------------------------------------------------------------------------

@cython.final
cdef class ConfirmWindow:
    """Outstanding publishes: sequence number → source delivery tag, and which are settled.

    Same API and behaviour as :class:`pumpd.dataplane.confirm_window_ref.ConfirmWindow`. The ring of tags and the two
    bitmaps (settled: acked or nacked; nacked) have ``capacity`` entries; the bit of a sequence
    number is ``seq & (capacity - 1)``, so a word never straddles the end of the ring. Bits outside
    ``[base, next)`` are always 0: settling only touches that range and advancing clears what it
    passes.
    """

    cdef uint64_t *_tags
    cdef uint64_t *_settled
    cdef uint64_t *_nackbits
    cdef uint64_t _cap
    cdef uint64_t _mask
    cdef uint64_t _base  # oldest unsettled sequence number
    cdef uint64_t _next  # next sequence number to hand out
    cdef uint64_t _unsettled
    cdef uint64_t _nacked_open  # nacked bits not yet passed by the advance
    cdef uint64_t _pending_tag
    cdef uint64_t _pending_count
    cdef readonly unsigned long long confirmed
    cdef readonly unsigned long long nacked
    cdef readonly unsigned long long acked

    def __init__(self, long long capacity=64):
        cdef uint64_t cap = 64
        while <long long>cap < capacity:
            cap *= 2
        self._release()
        self._tags = <uint64_t *>malloc(cap * sizeof(uint64_t))
        self._settled = <uint64_t *>calloc(cap // 64, sizeof(uint64_t))
        self._nackbits = <uint64_t *>calloc(cap // 64, sizeof(uint64_t))
        if self._tags == NULL or self._settled == NULL or self._nackbits == NULL:
            self._release()
            raise MemoryError()
        self._cap = cap
        self._mask = cap - 1
        self._base = 1
        self._next = 1
        self._unsettled = 0
        self._nacked_open = 0
        self._pending_tag = 0
        self._pending_count = 0
        self.confirmed = 0
        self.nacked = 0
        self.acked = 0

    def __dealloc__(self):
        self._release()

    cdef void _release(self) noexcept:
        free(self._tags)
        free(self._settled)
        free(self._nackbits)
        self._tags = NULL
        self._settled = NULL
        self._nackbits = NULL
        self._cap = 0

    @property
    def outstanding(self):
        """Published and not yet settled by the destination."""
        return self._unsettled

    @property
    def pending_acks(self):
        """Settled publishes the next take_ack() will cover."""
        return self._pending_count

    @property
    def next_seq(self):
        return self._next

    @property
    def capacity(self):
        return self._cap

    def add(self, uint64_t delivery_tag):
        """Record the next publish; returns its confirm sequence number."""
        cdef uint64_t seq = self._add(delivery_tag)
        if PUMPD_DEBUG:
            self._check()
        return seq

    def ack(self, uint64_t seq, bint multiple):
        """The destination confirmed ``seq`` (and, with ``multiple``, everything before it)."""
        self._ack(seq, multiple)
        if PUMPD_DEBUG:
            self._check()

    def nack(self, uint64_t seq, bint multiple):
        """The destination refused ``seq`` (and, with ``multiple``, everything unsettled before
        it). Returns the source delivery tags to reject with requeue, oldest first."""
        cdef list rejected = self._nack(seq, multiple)
        if PUMPD_DEBUG:
            self._check()
        return rejected

    def unsettled(self):
        """Sequence numbers published and not yet settled, oldest first."""
        cdef uint64_t s = self._base, pos
        cdef list out = []
        while s < self._next:
            pos = s & self._mask
            if not (self._settled[pos >> 6] >> (pos & 63)) & 1:
                out.append(s)
            s += 1
        return out

    def take_ack(self):
        """The delivery tag for one source ``basic.ack(multiple=true)`` covering every publish
        acked since the last call, or 0 when there is none."""
        return self._take_ack()

    # -- C-level API, used by Relay without Python calls -------------------------------------

    cdef inline uint64_t _add(self, uint64_t tag) except 0:
        if self._next - self._base >= self._cap:
            self._grow()
        cdef uint64_t seq = self._next
        self._tags[seq & self._mask] = tag
        self._next = seq + 1
        self._unsettled += 1
        return seq

    cdef inline void _ack(self, uint64_t seq, bint multiple) noexcept:
        cdef uint64_t last, pos, bit
        if multiple:
            last = seq if seq < self._next else self._next - 1
            if last >= self._base:
                self._settle_range(self._base, last)
        elif self._base <= seq and seq < self._next:
            pos = seq & self._mask
            bit = (<uint64_t>1) << (pos & 63)
            if not (self._settled[pos >> 6] & bit):
                self._settled[pos >> 6] |= bit
                self.confirmed += 1
                self._unsettled -= 1
        self._advance()

    cdef inline uint64_t _take_ack(self) noexcept:
        cdef uint64_t tag = self._pending_tag
        if tag:
            self.acked += self._pending_count
            self._pending_tag = 0
            self._pending_count = 0
        return tag

    cdef list _nack(self, uint64_t seq, bint multiple):
        cdef uint64_t first = self._base if multiple else seq
        cdef uint64_t last = seq if seq < self._next else self._next - 1
        cdef uint64_t s, pos, w, bits, fresh
        cdef unsigned off, n
        cdef int k
        cdef list rejected = []
        if first < self._base:
            first = self._base
        s = first
        while s <= last:
            pos = s & self._mask
            off = pos & 63
            n = 64 - off
            if last - s + 1 < n:
                n = <unsigned>(last - s + 1)
            bits = pumpd_low_bits(n) << off
            w = pos >> 6
            fresh = ~self._settled[w] & bits
            if fresh:
                self._settled[w] |= fresh
                self._nackbits[w] |= fresh
                k = pumpd_popcount64(fresh)
                self._unsettled -= k
                self._nacked_open += k
                self.nacked += k
                while fresh:
                    rejected.append(self._tags[(w << 6) | <uint64_t>pumpd_ctz64(fresh)])
                    fresh &= fresh - 1
            s += n
        self._advance()
        return rejected

    # -- internals -----------------------------------------------------------------------------

    cdef void _settle_range(self, uint64_t first, uint64_t last) noexcept:
        """Mark [first, last] settled by ack, whole words at a time."""
        cdef uint64_t s = first, pos, w, bits
        cdef unsigned off, n, fresh
        while s <= last:
            pos = s & self._mask
            off = pos & 63
            n = 64 - off
            if last - s + 1 < n:
                n = <unsigned>(last - s + 1)
            bits = pumpd_low_bits(n) << off
            w = pos >> 6
            fresh = n - <unsigned>pumpd_popcount64(self._settled[w] & bits)
            self.confirmed += fresh
            self._unsettled -= fresh
            self._settled[w] |= bits
            s += n

    cdef inline void _advance(self) noexcept:
        """Move ``base`` over the settled prefix, a word at a time; record the newest acked tag."""
        cdef uint64_t pos, w, inv, bits, nb, acked_bits
        cdef uint64_t run
        cdef unsigned off
        cdef int k
        while self._base < self._next:
            pos = self._base & self._mask
            off = pos & 63
            w = pos >> 6
            inv = (~self._settled[w]) >> off
            run = <uint64_t>pumpd_ctz64(inv) if inv else 64 - off
            if run > self._next - self._base:
                run = self._next - self._base
            if run == 0:
                return
            bits = pumpd_low_bits(<unsigned>run) << off
            self._settled[w] &= ~bits
            self._base += run
            if self._nacked_open:
                nb = self._nackbits[w] & bits
                if nb:
                    # rare path: the run holds nacked publishes, which the source ack must skip
                    k = pumpd_popcount64(nb)
                    self._nackbits[w] &= ~nb
                    self._nacked_open -= k
                    acked_bits = bits & ~nb
                    if acked_bits:
                        self._pending_tag = self._tags[(w << 6) | <uint64_t>(63 - pumpd_clz64(acked_bits))]
                        self._pending_count += run - k
                    continue
            self._pending_tag = self._tags[(self._base - 1) & self._mask]
            self._pending_count += run

    cdef int _grow(self) except -1:
        cdef uint64_t cap = self._cap * 2
        cdef uint64_t mask = cap - 1
        cdef uint64_t s, old, new
        cdef uint64_t *tags = <uint64_t *>malloc(cap * sizeof(uint64_t))
        cdef uint64_t *settled = <uint64_t *>calloc(cap // 64, sizeof(uint64_t))
        cdef uint64_t *nackbits = <uint64_t *>calloc(cap // 64, sizeof(uint64_t))
        if tags == NULL or settled == NULL or nackbits == NULL:
            free(tags)
            free(settled)
            free(nackbits)
            raise MemoryError()
        s = self._base
        while s < self._next:
            old = s & self._mask
            new = s & mask
            tags[new] = self._tags[old]
            if self._settled[old >> 6] >> (old & 63) & 1:
                settled[new >> 6] |= (<uint64_t>1) << (new & 63)
            if self._nackbits[old >> 6] >> (old & 63) & 1:
                nackbits[new >> 6] |= (<uint64_t>1) << (new & 63)
            s += 1
        self._release()
        self._tags = tags
        self._settled = settled
        self._nackbits = nackbits
        self._cap = cap
        self._mask = mask
        return 0

    cdef int _check(self) except -1:
        """Debug builds: the invariants, with a full scan (never called in a release build)."""
        cdef uint64_t s, pos, w, settled_in = 0, nacked_in = 0, settled_all = 0, nacked_all = 0
        if self._base > self._next or self._next - self._base > self._cap:
            raise AssertionError(f"confirm window: base {self._base} next {self._next} cap {self._cap}")
        for w in range(self._cap // 64):
            settled_all += pumpd_popcount64(self._settled[w])
            nacked_all += pumpd_popcount64(self._nackbits[w])
            if self._nackbits[w] & ~self._settled[w]:
                raise AssertionError(f"confirm window: a nacked bit not settled in word {w}")
        s = self._base
        while s < self._next:
            pos = s & self._mask
            settled_in += self._settled[pos >> 6] >> (pos & 63) & 1
            nacked_in += self._nackbits[pos >> 6] >> (pos & 63) & 1
            s += 1
        if settled_in != settled_all or nacked_in != nacked_all:
            raise AssertionError("confirm window: bits set outside [base, next)")
        if self._next - self._base - settled_in != self._unsettled:
            raise AssertionError(f"confirm window: {self._unsettled} unsettled counted, "
                                 f"{self._next - self._base - settled_in} in the bitmap")
        if nacked_in != self._nacked_open:
            raise AssertionError(f"confirm window: {self._nacked_open} open nacks counted, {nacked_in} in the bitmap")
        return 0
