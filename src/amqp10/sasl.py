"""The client's side of AMQP 1.0's SASL layer (§5.3): ANONYMOUS, PLAIN and EXTERNAL.

:class:`SaslExchange` is the exchange as a small state machine, without I/O: the peer's
sasl-mechanisms gets our sasl-init, its sasl-outcome ends the exchange. A mechanism the peer does
not offer, a challenge (none of the three has one) and an outcome other than ``ok`` fail with an
:class:`~pumpd.amqp10.errors.Amqp10Error` of step ``sasl`` that names the mechanism and the
outcome code; the password is never part of an error.
"""

from __future__ import annotations

from typing import Any

from .errors import Amqp10Error
from .performatives import SaslChallenge, SaslInit, SaslMechanisms, SaslOutcome
from .values import Array, Symbol

__all__ = ["MECHANISMS", "OUTCOME_CODES", "SaslExchange", "initial_response"]

#: the ``sasl`` argument of :func:`~pumpd.amqp10.connection.connect` -> the mechanism's name
#: ("none": no SASL layer, the AMQP header straight away)
MECHANISMS = {"anonymous": "ANONYMOUS", "plain": "PLAIN", "external": "EXTERNAL"}

#: sasl-code (§5.3.3.6) -> what it means
OUTCOME_CODES = {
    0: "ok",
    1: "auth: authentication failed (wrong username or password?)",
    2: "sys: the peer's system error",
    3: "sys-perm: the peer's permanent system error",
    4: "sys-temp: the peer's transient system error",
}


def initial_response(sasl: str, username: str | None, password: str | None) -> bytes:
    """The sasl-init's initial-response for ``sasl`` ("anonymous", "plain", "external"):
    PLAIN sends an empty authorization identity, then the username and the password (RFC 4616);
    EXTERNAL an empty authorization identity (the TLS client certificate says who we are);
    ANONYMOUS nothing."""
    if sasl == "plain":
        if username is None or password is None:
            raise ValueError("SASL PLAIN needs a username and a password")
        user, pw = username.encode(), password.encode()
        if b"\0" in user or b"\0" in pw:
            raise ValueError("SASL PLAIN: a username or password may not contain NUL")
        return b"\0" + user + b"\0" + pw
    if sasl in ("anonymous", "external"):
        return b""
    raise ValueError(f"SASL mechanism {sasl!r}: expected one of {sorted(MECHANISMS)} or 'none'")


def _offered(frame: SaslMechanisms) -> list[str]:
    """The mechanisms' names the peer offers (one symbol, or an array of them)."""
    offered: Any = frame.sasl_server_mechanisms
    if isinstance(offered, Array):
        offered = offered.items
    if isinstance(offered, (str, bytes)):
        offered = [offered]
    if not isinstance(offered, (list, tuple)):
        return []
    return [m.decode("ascii", "replace") if isinstance(m, bytes) else str(m) for m in offered]


class SaslExchange:
    """One SASL exchange; :meth:`on_frame` takes each SASL frame the peer sends and returns the
    frame to send back (or None); :attr:`done` once the outcome was ``ok``.

    :param sasl: "anonymous", "plain" or "external"
    :param hostname: sasl-init's hostname (the DNS name the client connected to), or None
    :param peer: host:port, for the errors
    """

    def __init__(self, sasl: str, username: str | None, password: str | None,
                 hostname: str | None, peer: str) -> None:
        self.mechanism = MECHANISMS.get(sasl, "")
        self._response = initial_response(sasl, username, password)  # raises on a bad sasl
        self._hostname = hostname
        self._peer = peer
        self._sent_init = False
        self.done = False

    def _error(self, what: str) -> Amqp10Error:
        return Amqp10Error("sasl", what, peer=self._peer)

    def on_frame(self, frame: Any) -> SaslInit | None:
        """The peer's next SASL frame; returns what to send, or None.

        :raises Amqp10Error: step "sasl": the mechanism is not offered, the peer refused us, or
            it sent a frame out of turn
        """
        if isinstance(frame, SaslMechanisms) and not self._sent_init:
            offered = _offered(frame)
            if self.mechanism not in offered:
                raise self._error(f"the peer does not offer SASL mechanism {self.mechanism} "
                                  f"(it offers {', '.join(offered) or 'none'})")
            self._sent_init = True
            return SaslInit(mechanism=Symbol(self.mechanism), initial_response=self._response,
                            hostname=self._hostname)
        if isinstance(frame, SaslOutcome) and self._sent_init:
            code = int(frame.code)
            if code != 0:
                meaning = OUTCOME_CODES.get(code, "an undefined code")
                raise self._error(f"the peer refused SASL {self.mechanism} login with outcome "
                                  f"code {code} ({meaning})")
            self.done = True
            return None
        if isinstance(frame, SaslChallenge):
            raise self._error(f"the peer sent a sasl-challenge, which SASL {self.mechanism} "
                              "does not have")
        raise self._error(f"unexpected {type(frame).__name__} "
                          f"{'after' if self._sent_init else 'before'} our sasl-init")
