"""A connection or channel that fails says what the broker said, and no step waits unbounded.

Against a private RabbitMQ node: a user's channel limit (530 at channel.open), a user's and a
vhost's connection limit (530 at connection.open: the broker's words, not the vhost and
permissions guess); against the hostile peer: a connection.close right after open-ok, and a
peer that never answers channel.open, connection.open, the login or confirm.select (the
timeout names the step). Then a shovel and a daemon: the reconnect line is a WARNING naming the
side, the broker and the cause.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import uvloop
from pumpd.config.uri import parse_uri
from pumpd.engine.link import Link, LinkError, open_link
from pumpd.engine.parameters import to_pika_parameters
from pumpd.engine.status import State
from pumpd.testing.hostile import HostilePeer, connection_close, connection_open_ok
from pumpd.testing.localnode import LocalNode

from tests.support.daemon_helpers import Daemon, shovel_def
from tests.support.harness import running, shovel

# Well under the 30 s a refused channel.open used to hang for, with room for a busy machine.
QUICK = 8.0
# A test's own bound on a step that must fail by itself: an unbounded wait fails the test
# instead of hanging it (pytest-timeout cannot interrupt a running uvloop loop).
NEVER = 60.0
CHANNEL_LIMIT_TEXT = ("530 NOT_ALLOWED - number of channels opened for user '{user}' has reached "
                      "the maximum allowed user limit of (0)")
VHOST_GUESS = "access refused"


def _run(coro_factory: object) -> object:
    loop = uvloop.new_event_loop()
    try:
        return loop.run_until_complete(coro_factory())  # type: ignore[operator]
    finally:
        loop.close()


def open_and_fail(uri_text: str) -> tuple[LinkError, float]:
    """Open a link to ``uri_text`` that must fail: the error and how long it took."""

    async def main() -> tuple[LinkError, float]:
        uri = parse_uri(uri_text)
        started = time.monotonic()
        try:
            link = await asyncio.wait_for(
                open_link(uri, to_pika_parameters(uri, client_name="pumpd test")), NEVER)
        except LinkError as exc:
            return exc, time.monotonic() - started
        await link.close()
        raise AssertionError(f"{uri.redacted()} opened")

    result = _run(main)
    assert isinstance(result, tuple)
    return result


@pytest.fixture
def limited_user(node_a: LocalNode, vhost_a: str) -> Iterator[str]:
    """A user with full permissions on ``vhost_a`` (password ``pw``), deleted afterwards."""
    user = f"limited-{uuid.uuid4().hex[:8]}"
    node_a.add_user(user, "pw", vhost_a)
    yield user
    node_a.ctl("delete_user", user)


def test_a_channel_limit_fails_at_channel_open_at_once_with_the_brokers_words(
        node_a: LocalNode, vhost_a: str, limited_user: str) -> None:
    node_a.ctl("set_user_limits", limited_user, '{"max-channels": 0}')
    exc, took = open_and_fail(node_a.uri(vhost_a, limited_user, "pw"))
    text = str(exc)
    assert CHANNEL_LIMIT_TEXT.format(user=limited_user) in text, text
    assert "channel.open" in text and f"127.0.0.1:{node_a.amqp_port}" in text, text
    assert exc.reply_code == 530
    assert took < QUICK, took


def test_a_user_connection_limit_is_quoted_not_guessed(
        node_a: LocalNode, vhost_a: str, limited_user: str) -> None:
    node_a.ctl("set_user_limits", limited_user, '{"max-connections": 0}')
    exc, took = open_and_fail(node_a.uri(vhost_a, limited_user, "pw"))
    text = str(exc)
    # (RabbitMQ's versions differ in the case of "connection refused")
    assert (f"530 NOT_ALLOWED - connection refused for user '{limited_user}': user connection "
            "limit (0) is reached").lower() in text.lower(), text
    assert VHOST_GUESS not in text, text
    assert exc.reply_code == 530
    assert took < QUICK, took


def test_a_vhost_connection_limit_is_quoted_not_guessed(node_a: LocalNode, vhost_a: str) -> None:
    node_a.ctl("set_vhost_limits", "-p", vhost_a, '{"max-connections": 0}')
    exc, took = open_and_fail(node_a.uri(vhost_a))
    text = str(exc)
    assert (f"530 NOT_ALLOWED - access to vhost '{vhost_a}' refused for user 'guest': "
            "connection limit (0) is reached") in text, text
    assert VHOST_GUESS not in text, text
    assert took < QUICK, took


def test_a_missing_vhost_is_quoted_with_the_user_and_vhost_named(node_a: LocalNode) -> None:
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    exc, _took = open_and_fail(node_a.uri(missing))
    text = str(exc)
    # naming them cannot mislead here, and says which user and vhost before the status cuts it
    assert f"access refused to vhost '{missing}' for user 'guest': 530 NOT_ALLOWED - " in text, \
        text


def test_a_wrong_password_is_quoted_with_the_login_hint(node_a: LocalNode, vhost_a: str) -> None:
    exc, _took = open_and_fail(node_a.uri(vhost_a, "guest", "not-the-password"))
    text = str(exc)
    assert (f"authentication refused for user 'guest' (vhost '{vhost_a}'): 403 ACCESS_REFUSED - "
            "Login was refused") in text, text
    assert text.endswith("(wrong username or password?)"), text
    assert "not-the-password" not in text


def test_a_close_right_after_open_ok_is_quoted_at_once() -> None:
    refusal = "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"
    with HostilePeer(instead_of={(10, 40): connection_open_ok() + connection_close(320, refusal)}
                     ) as peer:
        exc, took = open_and_fail(peer.uri())
    text = str(exc)
    assert f"320 {refusal}" in text and "channel.open" in text, text
    assert exc.reply_code == 320
    assert took < QUICK, took


def test_a_channel_open_never_answered_times_out_naming_it() -> None:
    with HostilePeer(instead_of={(20, 10): b""}) as peer:
        exc, took = open_and_fail(peer.uri())  # the default bound
        text = str(exc)
        assert "no answer to channel.open within 10s" in text, text
        assert f"127.0.0.1:{peer.port}" in text, text
        assert 9 < took < 10 + QUICK, took
        exc, took = open_and_fail(peer.uri() + "?connection_timeout=2000")  # the URI's bound
        assert "no answer to channel.open within 2s" in str(exc), str(exc)
        assert took < QUICK, took


@pytest.mark.parametrize(("method", "step"), [
    ((10, 40), "connection.open"),
    ((10, 11), "the login (connection.start-ok)"),
])
def test_a_handshake_step_never_answered_times_out_naming_it(
        method: tuple[int, int], step: str) -> None:
    with HostilePeer(instead_of={method: b""}) as peer:
        exc, took = open_and_fail(peer.uri() + "?connection_timeout=2000")
    text = str(exc)
    assert f"no answer to {step} within 2s" in text, text
    assert took < QUICK, took


@pytest.mark.parametrize(("scheme", "query", "step"), [
    ("amqp", "", "the AMQP protocol header (connection.start)"),
    ("amqps", "&verify=verify_none", "the TLS handshake"),
])
def test_a_peer_that_accepts_and_says_nothing_times_out_naming_the_step(
        scheme: str, query: str, step: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # the kernel accepts; nobody speaks
        port = silent.getsockname()[1]
        exc, took = open_and_fail(
            f"{scheme}://guest:guest@127.0.0.1:{port}/%2F?connection_timeout=2000{query}")
    text = str(exc)
    assert f"no answer to {step} within 2s" in text, text
    assert took < QUICK, took


def test_a_confirm_select_never_answered_times_out_naming_it() -> None:
    with HostilePeer(instead_of={(85, 10): b""}) as peer:
        async def main() -> tuple[str, float]:
            uri = parse_uri(peer.uri() + "?connection_timeout=2000")
            link: Link = await open_link(uri, to_pika_parameters(uri, client_name="pumpd test"))
            started = time.monotonic()
            try:
                await asyncio.wait_for(link.confirm_select(), NEVER)
            except LinkError as exc:
                return str(exc), time.monotonic() - started
            finally:
                link.abort()
            raise AssertionError("confirm.select answered")

        result = _run(main)
    assert isinstance(result, tuple)
    text, took = result
    assert "no answer to confirm.select" in text and "within 2s" in text, text
    assert took < QUICK, took


def test_a_shovel_names_the_side_and_the_brokers_words_when_a_channel_is_refused(
        node_a: LocalNode, vhost_a: str, limited_user: str,
        caplog: pytest.LogCaptureFixture) -> None:
    node_a.ctl("set_user_limits", limited_user, '{"max-channels": 0}')
    s = shovel(sources={"broker": node_a.uri(vhost_a)},
               destinations={"broker": node_a.uri(vhost_a, limited_user, "pw")},
               queue="q", reconnect_delay=1)
    caplog.set_level("WARNING", logger="pumpd.pump")
    started = time.monotonic()
    with running(s) as pumps:
        pumps.wait_for(lambda: "reconnecting in" in (pumps.status().reason or ""), QUICK * 2,
                       "a failed attempt")
        took = time.monotonic() - started
        reason = pumps.status().reason or ""
        assert pumps.status().state == State.STARTING
    assert took < QUICK, (took, reason)
    assert reason.startswith("destination: "), reason
    assert CHANNEL_LIMIT_TEXT.format(user=limited_user) in reason, reason
    assert f"{limited_user}@127.0.0.1:{node_a.amqp_port}" in reason, reason
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("destination: " in w and "530 NOT_ALLOWED" in w for w in warnings), warnings


def test_the_daemon_logs_a_refused_channel_as_a_warning_with_its_cause(
        pumpd_daemon: Any, node_a: LocalNode, vhost_a: str, limited_user: str) -> None:
    node_a.ctl("set_user_limits", limited_user, '{"max-channels": 0}')
    src = node_a.uri(vhost_a)
    dst = node_a.uri(vhost_a, limited_user, "pw")
    d: Daemon = pumpd_daemon({"limited": shovel_def(src, "q", dst, "out")})

    def warned() -> list[dict[str, object]]:
        return [e for e in d.log_events() if e.get("level") == "warning"
                and "530 NOT_ALLOWED - number of channels" in str(e.get("message"))]

    d.wait_for(warned, 30, "the WARNING line")
    line = str(warned()[0]["message"])
    assert "shovel limited: starting (destination: " in line, line
    assert (f"connection to amqp://{limited_user}@127.0.0.1:{node_a.amqp_port}/" in line
            and "closed by the broker: 530 NOT_ALLOWED" in line
            and "(at channel.open); reconnecting in " in line), line  # as README's Logs shows
    assert "pw@" not in json.dumps(warned())
