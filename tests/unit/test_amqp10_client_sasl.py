"""The client's SASL exchange without I/O: the initial responses, the mechanism check, and the
outcome codes as errors naming step "sasl" (never the password)."""

from __future__ import annotations

import pytest
from pumpd.amqp10.errors import Amqp10Error
from pumpd.amqp10.performatives import SaslChallenge, SaslInit, SaslMechanisms, SaslOutcome
from pumpd.amqp10.sasl import SaslExchange, initial_response
from pumpd.amqp10.values import Symbol, UByte

PASSWORD = "s3cret-pass-w0rd"


def test_plain_sends_an_empty_authorization_identity_then_user_and_password() -> None:
    assert initial_response("plain", "guest", "pw") == b"\0guest\0pw"
    assert initial_response("external", None, None) == b""
    assert initial_response("anonymous", "ignored", None) == b""


@pytest.mark.parametrize(("sasl", "user", "password", "match"), [
    ("plain", None, "pw", "needs a username and a password"),
    ("plain", "a\0b", "pw", "may not contain NUL"),
    ("kerberos", None, None, "expected one of"),
])
def test_bad_arguments_are_refused(sasl: str, user: str | None, password: str | None,
                                   match: str) -> None:
    with pytest.raises(ValueError, match=match):
        initial_response(sasl, user, password)


def test_an_exchange_answers_the_mechanisms_and_ends_on_ok() -> None:
    ex = SaslExchange("plain", "guest", PASSWORD, "broker.example", "h:1")
    init = ex.on_frame(SaslMechanisms([Symbol("AMQPLAIN"), Symbol("PLAIN")]))
    assert init == SaslInit(Symbol("PLAIN"), b"\0guest\0" + PASSWORD.encode(), "broker.example")
    assert not ex.done
    assert ex.on_frame(SaslOutcome(UByte(0))) is None
    assert ex.done


@pytest.mark.parametrize(("frame", "match"), [
    (SaslMechanisms([Symbol("EXTERNAL")]),
     "the peer does not offer SASL mechanism PLAIN \\(it offers EXTERNAL\\)"),
    (SaslOutcome(UByte(0)), "unexpected SaslOutcome before our sasl-init"),
])
def test_frames_out_of_turn_fail_naming_sasl(frame: object, match: str) -> None:
    ex = SaslExchange("plain", "guest", PASSWORD, None, "h:1")
    with pytest.raises(Amqp10Error, match=match) as info:
        ex.on_frame(frame)
    assert info.value.step == "sasl"


@pytest.mark.parametrize(("code", "meaning"), [
    (1, "auth: authentication failed"), (2, "sys:"), (3, "sys-perm"), (4, "sys-temp"),
    (9, "an undefined code"),
])
def test_an_outcome_other_than_ok_names_its_code(code: int, meaning: str) -> None:
    ex = SaslExchange("plain", "guest", PASSWORD, None, "h:1")
    ex.on_frame(SaslMechanisms([Symbol("PLAIN")]))
    with pytest.raises(Amqp10Error) as info:
        ex.on_frame(SaslOutcome(UByte(code)))
    msg = str(info.value)
    assert info.value.step == "sasl"
    assert f"AMQP 1.0 h:1: sasl: the peer refused SASL PLAIN login with outcome code {code} (" \
           f"{meaning}" in msg, msg
    assert PASSWORD not in msg


def test_a_challenge_is_refused() -> None:
    ex = SaslExchange("anonymous", None, None, None, "h:1")
    ex.on_frame(SaslMechanisms([Symbol("ANONYMOUS")]))
    with pytest.raises(Amqp10Error, match="sasl-challenge, which SASL ANONYMOUS does not have"):
        ex.on_frame(SaslChallenge(b"?"))
