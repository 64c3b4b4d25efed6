"""pumpd's streams-protocol client, without a broker: every ``rabbit_stream.hrl`` response code
and command key has its name and a sentence, an unknown code says so, and a peer that never
answers times out naming the step."""

from __future__ import annotations

import socket

import pytest
from pumpd.spark.read.read_options import parse_read_options
from pumpd.spark.read.streams.protocol import connect
from pumpd.streams.codes import COMMANDS, RESPONSE_CODES, command_name, refusal

# passwords no error may show (long enough that a stray piece of one would be found)
PASSWORD = "str3ams-pass-w0rd"


def test_a_peer_that_never_answers_times_out_naming_the_step() -> None:
    """A listening socket that accepts (the kernel's backlog) and never says a word."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        options = parse_read_options({"uri": f"amqp://guest:{PASSWORD}@127.0.0.1:1/%2F",
                                      "stream": "s", "protocol": "stream",
                                      "streamPort": str(port)})
        with pytest.raises(TimeoutError) as info:
            connect(options, "pumpd test", timeout=0.5)
    msg = str(info.value)
    assert msg == (f"streams protocol 127.0.0.1:{port} (vhost '/'): no answer from the broker "
                   "within 0.5 s (to exchange peer properties)"), msg


def test_every_response_code_of_rabbit_stream_hrl_has_its_name_and_a_sentence() -> None:
    names = {code: c.name for code, c in RESPONSE_CODES.items()}
    assert names == {
        1: "OK", 2: "STREAM_DOES_NOT_EXIST", 3: "SUBSCRIPTION_ID_ALREADY_EXISTS",
        4: "SUBSCRIPTION_ID_DOES_NOT_EXIST", 5: "STREAM_ALREADY_EXISTS",
        6: "STREAM_NOT_AVAILABLE", 7: "SASL_MECHANISM_NOT_SUPPORTED",
        8: "AUTHENTICATION_FAILURE", 9: "SASL_ERROR", 10: "SASL_CHALLENGE",
        11: "SASL_AUTHENTICATION_FAILURE_LOOPBACK", 12: "VIRTUAL_HOST_ACCESS_FAILURE",
        13: "UNKNOWN_FRAME", 14: "FRAME_TOO_LARGE", 15: "INTERNAL_ERROR", 16: "ACCESS_REFUSED",
        17: "PRECONDITION_FAILED", 18: "PUBLISHER_DOES_NOT_EXIST", 19: "NO_OFFSET",
        20: "SASL_CANNOT_CHANGE_MECHANISM", 21: "SASL_CANNOT_CHANGE_USERNAME"}
    assert all(len(c.meaning) > 10 for c in RESPONSE_CODES.values())


def test_command_keys_are_named() -> None:
    assert len(COMMANDS) == 31 and COMMANDS[0x13] == "SASL_AUTHENTICATE"
    assert command_name(0x8007) == "SUBSCRIBE response"
    assert command_name(0x0040) == "unknown command 0x0040"


def test_a_code_pumpd_does_not_know_says_so() -> None:
    assert refusal(99, "read stream 's'", "u") == "cannot read stream 's': code 99 (unknown to pumpd)"

