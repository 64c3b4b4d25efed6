"""Which partition of a super stream a message goes to, as RabbitMQ's stream clients choose it:
the 32-bit MurmurHash3 (x86) of its routing key, started from 104729, unsigned, modulo the number of
partitions (in the order ``partitions`` lists them)."""

from __future__ import annotations

__all__ = ["HASH_START", "MAX_PARTITIONS", "murmur3_32", "partition"]

#: the value RabbitMQ's stream clients start the hash of a routing key from
HASH_START = 104729
#: the most partitions a super stream is published to over one connection: a publisher id,
#: one per partition, is one byte
MAX_PARTITIONS = 256
_C1, _C2 = 0xCC9E2D51, 0x1B873593
_MASK = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def murmur3_32(data: bytes, start: int = HASH_START) -> int:
    """MurmurHash3's x86 32-bit hash of ``data`` from ``start``, unsigned."""
    h = start & _MASK
    n = len(data)
    whole = n - n % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (_rotl((k * _C1) & _MASK, 15) * _C2) & _MASK
        h = (_rotl(h ^ k, 13) * 5 + 0xE6546B64) & _MASK
    tail = data[whole:]
    if tail:
        k = int.from_bytes(tail, "little")
        k = (_rotl((k * _C1) & _MASK, 15) * _C2) & _MASK
        h ^= k
    h ^= n
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK
    h ^= h >> 16
    return h


def partition(routing_key: bytes, partitions: int) -> int:
    """The index of the partition ``routing_key`` goes to, of ``partitions`` (at least 1)."""
    return murmur3_32(routing_key) % partitions
