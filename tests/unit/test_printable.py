"""Text from outside is escaped before it is printed: every control and format character."""

from __future__ import annotations

from pumpd.cli.client import printable


def test_printable_escapes_every_control_and_format_character() -> None:
    assert printable("plain text, ünïcode") == "plain text, ünïcode"
    assert printable("a\x1b]0;title\x07b\r\n\t") == "a\\x1b]0;title\\x07b\\x0d\\x0a\\x09"
    assert printable("x\u202ey\u200bz\x9b") == "x\\u202ey\\u200bz\\x9b"

