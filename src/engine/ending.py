"""How a session ends: its :class:`Outcome`, :class:`SessionEnded`, and a failed connection's
end in words."""

from __future__ import annotations

import enum

# Reply codes with which a destination refuses one message by closing its channel or connection
# while forwarding (a user_id that is not the connection's user, a message over max_message_size,
# a frame it cannot parse): the same message would be refused again on the next session.
MESSAGE_REFUSAL_CODES = frozenset({406, 501, 502, 505})
# What a source broker says when a delivery stayed unacknowledged longer than its consumer_timeout.
CONSUMER_TIMEOUT_TEXT = "delivery acknowledgement"


class Outcome(enum.Enum):
    """How one session ended, as far as the pump's next step goes."""

    STOPPED = "stopped"  # told to stop (or delete_after_duration passed): terminate
    LIMIT = "limit"  # the delivery limit is reached: terminate
    TERMINAL = "terminal"  # the undeliverable policy stopped the shovel: terminate
    CAREFUL_DONE = "careful-done"  # a careful session forwarded its part: go on at once
    HANDLED = "handled"  # a refused message was handled by the policy: reconnect at once
    STALLED = "stalled"  # moved nothing for stall_timeout (stall.py): reconnect at once
    FAILED = "failed"  # a connection failed: reconnect, after a delay when the round is over
    STANDBY = "standby"  # another connection holds the position's lease: ask again later
    RELEASED = "released"  # the group's gate took the position away: settled, standing by


class SessionEnded(Exception):
    """Why a session stopped forwarding (a failure; carries a human-readable reason).

    :param side: "source" or "destination" when one connection failed
    :param reply_code: the broker's reply code when it closed the channel or connection
    :param unsettled: messages published and not yet confirmed when it happened
    :param terminal: the shovel must stop (an undeliverable message under the ``stop`` policy)
    :param handled: the failure was a refused message that the policy has dealt with: reconnect
        at once, it is not a failure of the shovel
    :param stalled: the pump found the session stalled (``stall.py``): ``side`` does not answer,
        so its connection is dropped rather than closed politely; reconnect at once
    """

    def __init__(self, reason: str, *, side: str | None = None, reply_code: int | None = None,
                 unsettled: int = 0, terminal: bool = False, handled: bool = False,
                 stalled: bool = False) -> None:
        super().__init__(reason)
        self.side = side
        self.reply_code = reply_code
        self.unsettled = unsettled
        self.terminal = terminal
        self.handled = handled
        self.stalled = stalled

    @property
    def refused_message(self) -> bool:
        """The destination closed on a message (see MESSAGE_REFUSAL_CODES) with some in flight."""
        return (self.side == "destination" and self.reply_code in MESSAGE_REFUSAL_CODES
                and self.unsettled > 0)


def connection_ended(side: str, exc: BaseException, unsettled: int) -> SessionEnded:
    """A session's end by one connection's failure, in words that say which side and why."""
    code = getattr(exc, "reply_code", None)
    text = str(exc)
    if side == "source" and code == 406 and CONSUMER_TIMEOUT_TEXT in text:
        text += (" (consumer timeout: the source broker's consumer_timeout passed while "
                 "messages waited for the destination; they are redelivered)")
    return SessionEnded(f"{side}: {text}", side=side, reply_code=code, unsettled=unsettled)
