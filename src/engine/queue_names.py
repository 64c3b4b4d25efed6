"""The names of the queues pumpd declares on a broker for its own bookkeeping, and the one rule
that keeps each within AMQP's 255 bytes without letting two of them meet.

Every such name is a fixed head (``pumpd.<kind>.`` and, in a group, the cluster's name), one
variable part (a shovel name, up to 512 bytes, or a member slot) and an optional fixed tail (a
lease's worker index). When the whole name fits in 255 bytes of UTF-8 it is spelled out. When it
does not, the variable part is cut at a character boundary and followed by ``~`` and the first
16 hex digits of the SHA-256 of the whole variable part, so that

- two shovels whose names share a long beginning still get two queues (truncation alone would
  give them one: two stream shovels would share one stored position and the second would skip
  the first one's messages);
- every daemon, of any version with this rule, computes the same name for the same shovel;
- the name still starts with what an operator recognises in ``rabbitmqctl list_queues``.

A ``~`` cannot make a long name meet a short one: a short name is spelled out whole, a long one
is exactly 255 bytes or ends in the hash and the tail.
"""

from __future__ import annotations

import hashlib

__all__ = ["HASH_CHARS", "LEASE_PREFIX", "MAX_QUEUE_NAME", "info_queue", "lease_queue",
           "member_queue", "paused_queue", "producer_reference", "queue_name",
           "stream_position_queue"]

MAX_QUEUE_NAME = 255  # bytes of UTF-8: a queue name is an AMQP shortstr
HASH_CHARS = 16  # hex digits of SHA-256 that stand for a variable part too long to spell out
LEASE_PREFIX = "pumpd.lease"


def queue_name(head: str, variable: str, tail: str = "") -> str:
    """``head + variable + tail``, or, when that exceeds 255 bytes, the variable part cut and
    followed by ``~`` and 16 hex digits of its SHA-256 (see the module docstring).

    :raises ValueError: when ``head`` and ``tail`` alone leave no room for the hash (a fixed
        part is pumpd's own and short: this is a programming error, never a user's input)
    """
    name = f"{head}{variable}{tail}"
    if len(name.encode()) <= MAX_QUEUE_NAME:
        return name
    room = MAX_QUEUE_NAME - len(head.encode()) - len(tail.encode()) - 1 - HASH_CHARS
    if room < 0:
        raise ValueError(f"queue name head {head!r} and tail {tail!r} leave no room for a hash")
    digest = hashlib.sha256(variable.encode()).hexdigest()[:HASH_CHARS]
    cut = variable.encode()[:room].decode("utf-8", "ignore")
    return f"{head}{cut}~{digest}{tail}"


def lease_queue(cluster: str, shovel: str, index: int) -> str:
    """``pumpd.lease.<cluster>.<shovel>.<index>``: the exclusive queue of one position's lease."""
    return queue_name(f"{LEASE_PREFIX}.{cluster}.", shovel, f".{index}")


def producer_reference(group: str | None, shovel: str, index: int) -> str:
    """``pumpd.producer.<group>.<shovel>.<index>`` (no group: ``pumpd.producer.<shovel>.<index>``):
    a stream destination's named producer, the same on every member of a group and after
    every restart (the streams protocol bounds a reference to 255 bytes, as a queue name)."""
    head = f"pumpd.producer.{group}." if group else "pumpd.producer."
    return queue_name(head, shovel, f".{index}")


def stream_position_queue(shovel: str) -> str:
    """``pumpd.stream-position.<shovel>``: where a stream shovel records its position."""
    return queue_name("pumpd.stream-position.", shovel)


def member_queue(cluster: str, slot: int) -> str:
    """``pumpd.member.<cluster>.<slot>``: the exclusive queue a member of a group holds."""
    return queue_name(f"pumpd.member.{cluster}.", str(slot))


def info_queue(cluster: str, slot: int) -> str:
    """``pumpd.member-info.<cluster>.<slot>``: the record where a member says who it is."""
    return queue_name(f"pumpd.member-info.{cluster}.", str(slot))


def paused_queue(cluster: str, shovel: str) -> str:
    """``pumpd.paused.<cluster>.<shovel>``: the marker of a shovel paused in a whole group."""
    return queue_name(f"pumpd.paused.{cluster}.", shovel)
