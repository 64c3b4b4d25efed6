"""What :class:`pumpd.Publisher` raises and reports: :class:`PublishError`, whose lists name
messages by their confirm sequence numbers, and :class:`ReturnedMessage`."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ReturnedMessage:
    """An unroutable ``mandatory`` message the broker sent back (``basic.return``).

    ``seq`` is attributed from the broker's next confirm (see :mod:`pumpd.dataplane.publish_plane_ref`);
    ``message_id`` comes from the returned message itself and identifies it exactly.
    """

    seq: int
    reply_code: int
    reply_text: str
    exchange: str
    routing_key: str
    message_id: str | None


@dataclass
class PublishError(Exception):
    """Some messages were not confirmed. ``confirmed`` counts those that were (since the
    publisher opened); the lists hold confirm sequence numbers, oldest first. ``published`` is
    the last sequence number sent: when a lost connection or a timeout cut a call short, the
    messages of that call after it were never published."""

    reason: str
    nacked: list[int] = field(default_factory=list)
    returned: list[ReturnedMessage] = field(default_factory=list)
    unconfirmed: list[int] = field(default_factory=list)
    message_ids: dict[int, str] = field(default_factory=dict)
    confirmed: int = 0
    published: int = 0  # the last sequence number sent: what a call had after it was not

    def __post_init__(self) -> None:
        super().__init__(self.reason)

    def __str__(self) -> str:
        parts = [self.reason]
        for name, seqs in (("nacked", self.nacked), ("unconfirmed", self.unconfirmed)):
            if seqs:
                parts.append(f"{len(seqs)} {name} (seq {seq_ranges(seqs)})")
        if self.returned:
            parts.append(f"{len(self.returned)} returned unroutable "
                         f"(seq {seq_ranges([r.seq for r in self.returned])})")
        return "; ".join(parts)


def seq_ranges(seqs: list[int], limit: int = 6) -> str:
    out: list[str] = []
    start = prev = seqs[0]
    for s in [*seqs[1:], -1]:
        if s == prev + 1:
            prev = s
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = s
    return ", ".join(out[:limit]) + (", ..." if len(out) > limit else "")
