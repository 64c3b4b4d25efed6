"""The importers' bounds, in this process: integer literals and binaries are bounded before
anything is allocated, and a stray bracket in a URI is an import error."""

from __future__ import annotations

import pytest
from pumpd.config import limits
from pumpd.importers.erlang.terms import ErlangSyntaxError, parse_term

SHOVEL = """[{rabbitmq_shovel, [{shovels, [{s, [
  {sources, [{broker, "amqp://src"}]},
  {destinations, [{broker, "amqp://dst"}]},
  {queue, <<"q">>}, {prefetch_count, VALUE}]}]}]}]."""


def test_the_bounds_themselves_are_read() -> None:
    assert parse_term("9" * 128 + ".") == int("9" * 128)
    assert parse_term("16#" + "f" * 128 + ".") == 16**128 - 1
    assert parse_term("<<0:8388608>>.") == bytes(limits.MAX_BINARY_BYTES)
    with pytest.raises(ErlangSyntaxError) as info:
        parse_term("<<0:8388616>>.")
    assert (info.value.line, info.value.column) == (1, 3)
    with pytest.raises(ErlangSyntaxError) as info:
        parse_term("\n  " + "1" * 129)
    assert (info.value.line, info.value.column) == (2, 3)


def test_a_stray_bracket_in_a_uri_is_an_import_error_found_by_hypothesis() -> None:
    """urlsplit raised ValueError ("Invalid IPv6 URL") out of the importer."""
    from pumpd.importers.erlang.shovels import import_erlang_config
    from pumpd.importers.import_errors import ConfigImportError

    text = SHOVEL.replace("VALUE", "1").replace('"amqp://src"', '"amqp://[john:x@h/v"')
    try:
        import_erlang_config(text, source="f.config")
    except ConfigImportError as exc:  # refused by the validator, or accepted: never ValueError
        assert str(exc).startswith("f.config")
    text = SHOVEL.replace("VALUE", "1").replace('"amqp://src"', '"[http://src"')
    with pytest.raises(ConfigImportError, match="is not an amqp:// or amqps:// URI"):
        import_erlang_config(text, source="f.config")

