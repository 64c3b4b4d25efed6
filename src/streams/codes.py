"""The streams protocol's command keys and response codes by name, as RabbitMQ's
``rabbit_stream.hrl`` (``rabbitmq_stream_common``) defines them, each code with a sentence; and
:func:`refusal`, a refused request in words.

Every error of pumpd's streams clients (the Spark reader's and the engine's publisher) names the code the broker gave by its name and says what
it means, so that no answer is passed on as a bare number or under another code's meaning.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

# command keys, the request's (a response sets the high bit, RESPONSE_BIT)
COMMANDS: dict[int, str] = {
    0x0001: "DECLARE_PUBLISHER",
    0x0002: "PUBLISH",
    0x0003: "PUBLISH_CONFIRM",
    0x0004: "PUBLISH_ERROR",
    0x0005: "QUERY_PUBLISHER_SEQUENCE",
    0x0006: "DELETE_PUBLISHER",
    0x0007: "SUBSCRIBE",
    0x0008: "DELIVER",
    0x0009: "CREDIT",
    0x000A: "STORE_OFFSET",
    0x000B: "QUERY_OFFSET",
    0x000C: "UNSUBSCRIBE",
    0x000D: "CREATE_STREAM",
    0x000E: "DELETE_STREAM",
    0x000F: "METADATA",
    0x0010: "METADATA_UPDATE",
    0x0011: "PEER_PROPERTIES",
    0x0012: "SASL_HANDSHAKE",
    0x0013: "SASL_AUTHENTICATE",
    0x0014: "TUNE",
    0x0015: "OPEN",
    0x0016: "CLOSE",
    0x0017: "HEARTBEAT",
    0x0018: "ROUTE",
    0x0019: "PARTITIONS",
    0x001A: "CONSUMER_UPDATE",
    0x001B: "EXCHANGE_COMMAND_VERSIONS",
    0x001C: "STREAM_STATS",
    0x001D: "CREATE_SUPER_STREAM",
    0x001E: "DELETE_SUPER_STREAM",
    0x001F: "RESOLVE_OFFSET_SPEC",
}
RESPONSE_BIT = 0x8000
_KEY = {name: key for key, name in COMMANDS.items()}
# the commands pumpd's clients send or read
DECLARE_PUBLISHER = _KEY["DECLARE_PUBLISHER"]
PUBLISH = _KEY["PUBLISH"]
PUBLISH_CONFIRM = _KEY["PUBLISH_CONFIRM"]
PUBLISH_ERROR = _KEY["PUBLISH_ERROR"]
QUERY_PUBLISHER_SEQUENCE = _KEY["QUERY_PUBLISHER_SEQUENCE"]
DELETE_PUBLISHER = _KEY["DELETE_PUBLISHER"]
METADATA = _KEY["METADATA"]
METADATA_UPDATE = _KEY["METADATA_UPDATE"]
SUBSCRIBE = _KEY["SUBSCRIBE"]
DELIVER = _KEY["DELIVER"]
CREDIT = _KEY["CREDIT"]
UNSUBSCRIBE = _KEY["UNSUBSCRIBE"]
PEER_PROPERTIES = _KEY["PEER_PROPERTIES"]
SASL_HANDSHAKE = _KEY["SASL_HANDSHAKE"]
SASL_AUTHENTICATE = _KEY["SASL_AUTHENTICATE"]
TUNE = _KEY["TUNE"]
OPEN = _KEY["OPEN"]
CLOSE = _KEY["CLOSE"]
HEARTBEAT = _KEY["HEARTBEAT"]
PARTITIONS = _KEY["PARTITIONS"]


def command_name(key: int) -> str:
    """A frame's key in words: the command's name, ``response`` when the high bit is set."""
    name = COMMANDS.get(key & ~RESPONSE_BIT, f"unknown command 0x{key & ~RESPONSE_BIT:04x}")
    return f"{name} response" if key & RESPONSE_BIT else name


# Whom an error code refuses, which decides how its error begins: the credentials ("login":
# authentication refused for user U), the user's rights to the step ("user": user U may not
# STEP), or the request itself ("request": cannot STEP).
Refuses = Literal["login", "user", "request"]


class ResponseCode(NamedTuple):
    name: str  # as rabbit_stream.hrl spells it, without RESPONSE_ / RESPONSE_CODE_
    meaning: str  # what it means, or what to check, in a sentence
    refuses: Refuses


OK = 1
STREAM_NOT_AVAILABLE = 6  # a stream without a leader for now: asked again, it may have one
RESPONSE_CODES: dict[int, ResponseCode] = {
    OK: ResponseCode("OK", "the request succeeded", "request"),
    2: ResponseCode("STREAM_DOES_NOT_EXIST", "it does not exist in the vhost", "request"),
    3: ResponseCode("SUBSCRIPTION_ID_ALREADY_EXISTS",
                    "the connection already has a subscription with that id", "request"),
    4: ResponseCode("SUBSCRIPTION_ID_DOES_NOT_EXIST",
                    "the connection has no subscription with that id", "request"),
    5: ResponseCode("STREAM_ALREADY_EXISTS", "a stream of that name exists already", "request"),
    STREAM_NOT_AVAILABLE: ResponseCode("STREAM_NOT_AVAILABLE",
                    "the stream has no member ready on this node (no replica here, or it is "
                    "starting or electing a leader)", "request"),
    7: ResponseCode("SASL_MECHANISM_NOT_SUPPORTED",
                    "the broker does not offer that SASL mechanism (its auth_mechanisms)",
                    "request"),
    8: ResponseCode("AUTHENTICATION_FAILURE", "wrong username or password?", "login"),
    9: ResponseCode("SASL_ERROR", "the broker could not read the SASL response", "request"),
    10: ResponseCode("SASL_CHALLENGE",
                     "the broker asks for another SASL step, which PLAIN does not have",
                     "request"),
    11: ResponseCode("SASL_AUTHENTICATION_FAILURE_LOOPBACK",
                     "this user may log in from localhost only (the broker's loopback_users)",
                     "login"),
    12: ResponseCode("VIRTUAL_HOST_ACCESS_FAILURE",
                     "does the vhost exist, and does the user have permissions on it?", "user"),
    13: ResponseCode("UNKNOWN_FRAME",
                     "the broker did not recognise a frame (a command or version it does not "
                     "know)", "request"),
    14: ResponseCode("FRAME_TOO_LARGE", "a frame was larger than the broker allows", "request"),
    15: ResponseCode("INTERNAL_ERROR",
                     "the broker failed while handling the request (its log says why)",
                     "request"),
    16: ResponseCode("ACCESS_REFUSED",
                     "the user's permissions on the vhost (configure, write, read) do not "
                     "allow it", "user"),
    17: ResponseCode("PRECONDITION_FAILED",
                     "the target is not of the kind or in the state the request needs",
                     "request"),
    18: ResponseCode("PUBLISHER_DOES_NOT_EXIST",
                     "the connection has no publisher with that id", "request"),
    19: ResponseCode("NO_OFFSET", "no offset is stored under that reference", "request"),
    20: ResponseCode("SASL_CANNOT_CHANGE_MECHANISM",
                     "a new authentication must use the connection's first SASL mechanism",
                     "login"),
    21: ResponseCode("SASL_CANNOT_CHANGE_USERNAME",
                     "a new authentication must use the connection's first username", "login"),
}


def code_name(code: int) -> str:
    """``NAME: meaning`` of a response code, or that pumpd does not know it."""
    known = RESPONSE_CODES.get(code)
    return f"code {code} (unknown to pumpd)" if known is None else f"{known.name}: {known.meaning}"


def refusal(code: int, step: str, username: str) -> str:
    """The broker's error ``code`` to the request that was to ``step`` (words: ``read stream
    's'``), as ``user 'u' may not read stream 's' (ACCESS_REFUSED): meaning``."""
    known = RESPONSE_CODES.get(code)
    if known is None:
        return f"cannot {step}: code {code} (unknown to pumpd)"
    head = {"login": f"authentication refused for user {username!r}",
            "user": f"user {username!r} may not {step}",
            "request": f"cannot {step}"}[known.refuses]
    return f"{head} ({known.name}): {known.meaning}"
