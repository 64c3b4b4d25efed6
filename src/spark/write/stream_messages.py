"""Rows as AMQP 1.0 messages for a stream, each already framed as a PUBLISH frame's entry.

A row is the AMQP 0-9-1 message the queue writer would publish for it (its properties and
headers from the columns, the exchange ``""`` and the routing key of a publish to the stream
through the default exchange), in the AMQP 1.0 form the broker stores such a publish in a
stream (:mod:`pumpd.streams.amqp091_form`: RabbitMQ 3.x's form, or from 3.13 on its message
container's): a row reads back alike whichever writer put it in the stream.

Everything but the body is the same for every row of a write without per-row columns, so it is
encoded once: such a row costs its publishing id, its length, a cached head that ends with the
data section's own head, and its body. A row with per-row columns is mapped whole, with its
encoded head cached by the row's properties.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from ...dataplane.properties import encode_properties, encode_rows
from ...streams.amqp091_form import UnstorableMessage, data_section_head, head_of

_DATA32 = data_section_head(256)[:-4]  # a data section of more than 255 bytes, before its size
_ENTRY = struct.Struct(">QI")  # publishing id, message length
# distinct property lists whose heads are kept (per-row columns, repeated values)
HEAD_CACHE = 4096


class RowRefused(ValueError):
    """A row a stream cannot store (see :class:`pumpd.streams.amqp091_form.UnstorableMessage`);
    ``row`` is its index in the rows given."""

    def __init__(self, row: int, why: str) -> None:
        super().__init__(why)
        self.row = row


class StreamMessages:
    """The entries (publishing id, length, message) of the rows of one write.

    :param routing_key: the x-routing-key of a row without its own (a stream write gives the
        stream's name unless the option routingKey is set)
    :param properties: the basic properties every row has (``delivery_mode`` for persistent)
    :param container: the broker stores the container form
        (:func:`pumpd.streams.amqp091_form.stores_container_form`)
    """

    def __init__(self, routing_key: str, properties: Mapping[str, Any] | None = None,
                 container: bool = False) -> None:
        self._stored_head = head_of(container)
        self.routing_key = routing_key.encode()
        self.properties = dict(properties or {})
        self._heads: dict[tuple[bytes, bytes], bytes] = {}
        head = self.head(encode_properties(self.properties), self.routing_key)
        # the head followed by each short body's data-section head, by the body's length
        self._short = [head + data_section_head(n) for n in range(256)]
        self._long = head + _DATA32
        self._head_size = len(head)

    def head(self, properties: bytes, routing_key: bytes) -> bytes:
        """The encoded message up to its body's data section, for raw 0-9-1 ``properties``.

        :raises UnstorableMessage: naming the property a stream cannot store
        """
        key = (properties, routing_key)
        got = self._heads.get(key)
        if got is None:
            got = self._stored_head(b"", routing_key, properties)
            if len(self._heads) >= HEAD_CACHE:
                self._heads.clear()
            self._heads[key] = got
        return got

    def entries(self, first_id: int, bodies: Sequence[bytes]) -> list[bytes]:
        """``bodies[i]`` with publishing id ``first_id + i``, every other part the write's."""
        pack, short, long_head, size = _ENTRY.pack, self._short, self._long, self._head_size
        out = []
        pid = first_id
        for b in bodies:
            n = len(b)
            if n < 256:
                out.append(pack(pid, size + 5 + n) + short[n] + b)
            else:
                out.append(pack(pid, size + 8 + n) + long_head + n.to_bytes(4, "big") + b)
            pid += 1
        return out

    def entries_of_rows(self, first_id: int, bodies: Sequence[bytes],
                        columns: Mapping[str, Sequence[Any]],
                        ids: Sequence[bytes] | None = None,
                        routing_keys: Sequence[str | None] | None = None) -> list[bytes]:
        """Rows with per-row properties (``columns``: a basic property's name -> a value per
        row, None keeping the write's), message ids and routing keys.

        :raises RowRefused: naming the row and the field the mapping cannot carry
        """
        raws = encode_rows(len(bodies), self.properties, columns, ids)
        pack = _ENTRY.pack
        out = []
        for i, b in enumerate(bodies):
            rk = routing_keys[i] if routing_keys is not None else None
            try:
                head = self.head(raws[i], self.routing_key if rk is None else rk.encode())
            except UnstorableMessage as exc:
                raise RowRefused(i, f"a stream cannot store it: {exc}") from None
            n = len(b)
            data = data_section_head(n)
            out.append(pack(first_id + i, len(head) + len(data) + n) + head + data + b)
        return out
