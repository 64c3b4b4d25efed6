"""Property tests of what parses user input: the Erlang-term importer, the JSON
validator (file, dynamic form, PUT bodies), the URI parser and the Spark declarations option.
Whatever they are given, they answer with their own error type and nothing else: no
RecursionError, no ValueError of int(), no TypeError, no KeyError.

Example counts come from ``tests/support/hypothesis_profiles.py`` (``HYPOTHESIS_PROFILE=thorough`` for
10,000 per property).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from pumpd.cli.import_commands import decode_utf8
from pumpd.config.clauses import STATIC_ALL
from pumpd.config.dynamic import DYNAMIC_ALL
from pumpd.config.parse import ConfigError, parse_config, parse_document
from pumpd.config.uri import URIError, parse_uri
from pumpd.importers.definitions_export import import_definitions
from pumpd.importers.erlang.shovels import import_erlang_config
from pumpd.importers.import_errors import ConfigImportError
from pumpd.spark.write.write_options import parse_options
from pumpd.supervisor.definitions import parse_put_body

DATA = Path(__file__).resolve().parents[1] / "data"
ERLANG_SAMPLES = [(DATA / name).read_text() for name in ("plugin_docs_example.config",
                                                          "advanced.config")]

# -- strategies ----------------------------------------------------------------------------------

# Pieces of Erlang syntax, so that mutations reach past the tokenizer.
ERLANG_TOKENS = ["{", "}", "[", "]", "<<", ">>", ",", ".", "|", "#{", "=>", ":", "/", "-",
                 "16#", "2#1", "36#z", "$a", "$\\x{41}", '"s"', "'q'", "atom", "Var", "1.5e3",
                 "9" * 200, "<<1:64>>", "<<1:99999999999>>", "/utf8", "unit:8", "<<\"x\"/utf16>>",
                 "true", "%", "\n", "\\", "\u00e9", "\x00", "[{shovels, [", "{sources, [",
                 "{brokers, [\"amqp://h\"]}", "{queue, <<>>}", "{prefetch_count, ", "long",
                 "{<<\"x-a\">>, table, [", "{<<\"h\">>, array, ["]

JSON_SCALARS = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
                | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=40))
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                max_size=4),
    max_leaves=25)

URI_ALPHABET = st.sampled_from([*"amqps:/@%?&=#[]._-0123456789fhx ",
                                "amqp://", "amqps://", "guest:guest@", "%2F", "%zz", "%ff", "heartbeat=", "frame_max=",
    "channel_max=", "connection_timeout=", "cacertfile=", "certfile=", "keyfile=", "verify=",
    "depth=", "auth_mechanism=external", "server_name_indication=", "[::1]", ":5672",
    "9" * 30, "\u00e9", "\x00"])
URI_TEXTS = st.lists(URI_ALPHABET, max_size=20).map("".join) | st.text(max_size=60)


@st.composite
def mutated(draw: st.DrawFn, samples: list[str], tokens: list[str]) -> str:
    """A valid sample with a few spans deleted, duplicated or replaced by syntax pieces."""
    text = draw(st.sampled_from(samples))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 40)))
        how = draw(st.sampled_from(["delete", "insert", "duplicate", "replace"]))
        if how == "delete":
            text = text[:i] + text[j:]
        elif how == "duplicate":
            text = text[:j] + text[i:j] * draw(st.integers(1, 50)) + text[j:]
        else:
            piece = draw(st.sampled_from(tokens) | st.text(max_size=5))
            text = text[:i] + piece + (text[j:] if how == "replace" else text[i:])
    return text


@st.composite
def shovel_like(draw: st.DrawFn) -> dict[str, Any]:
    """A definition with known keys (either form) and arbitrary JSON values: the validator's
    every clause reached with every kind of value."""
    base: dict[str, Any] = draw(st.sampled_from([
        {"sources": {"broker": "amqp://s"}, "destinations": {"broker": "amqp://d"},
         "queue": "q"},
        {"src-uri": "amqp://s", "src-queue": "q", "dest-uri": "amqp://d"},
    ]))
    keys = STATIC_ALL if "queue" in base else DYNAMIC_ALL
    changes = draw(st.dictionaries(st.sampled_from(keys), JSON_VALUES, max_size=4))
    return {**base, **changes}


# -- the Erlang-term importer ---------------------------------------------------------------------


def _import_erlang(text: str) -> None:
    try:
        import_erlang_config(text, source="f.config", warnings=[])
    except ConfigImportError as exc:
        assert str(exc).startswith("f.config")


@given(st.text(max_size=300))
def test_importer_on_any_text_raises_only_import_errors(text: str) -> None:
    _import_erlang(text)


@given(mutated(ERLANG_SAMPLES, ERLANG_TOKENS))
def test_importer_on_mutated_configs_raises_only_import_errors(text: str) -> None:
    _import_erlang(text)


@given(st.binary(max_size=300))
def test_importer_on_any_bytes_raises_only_import_errors(data: bytes) -> None:
    try:
        _import_erlang(decode_utf8(data, "f.config"))
    except ConfigImportError as exc:
        assert str(exc).startswith("f.config:")


@given(JSON_VALUES)
def test_definitions_importer_raises_only_import_errors(value: Any) -> None:
    doc = value if not isinstance(value, dict) else {"parameters": [
        {"component": "shovel", "name": "s", "vhost": "/", "value": value}], **value}
    try:
        import_definitions(doc, source="d.json")
    except ConfigImportError:
        pass


# -- the JSON validator -----------------------------------------------------------------------


@given(JSON_VALUES)
def test_parse_config_on_any_json_raises_only_config_errors(value: Any) -> None:
    for doc in (value, {"shovels": value}, {"shovels": {"s": value}}):
        try:
            parse_config(doc)
        except ConfigError:
            pass


@given(shovel_like())
def test_every_clause_with_any_value_raises_only_config_errors(definition: dict[str, Any]) -> None:
    try:
        config = parse_config({"shovels": {"s": definition}})
    except ConfigError as exc:
        assert "\n" not in str(exc)
        return
    assert 1 <= config.shovels["s"].workers <= 256


def _dumps(value: Any) -> bytes:
    return json.dumps(value).encode()  # integers past 64 bits too, which orjson refuses


@given(st.one_of(JSON_VALUES.map(_dumps), shovel_like().map(_dumps),
                 st.binary(max_size=200)))
def test_put_bodies_raise_only_config_errors(body: bytes) -> None:
    try:
        parse_put_body("x", body, None)
    except ConfigError as exc:
        assert str(exc).startswith("PUT /api/shovels/x: ")


@given(st.binary(max_size=200) | JSON_VALUES.map(lambda v: _dumps({"shovels": v})))
def test_a_config_file_s_bytes_raise_only_config_errors(data: bytes) -> None:
    try:
        parse_document(data, "c.json")
    except ConfigError as exc:
        assert str(exc).startswith("c.json: ")


# -- the URI parser and the Spark option -------------------------------------------------------


@given(URI_TEXTS)
def test_the_uri_parser_raises_only_uri_errors(text: str) -> None:
    try:
        parse_uri(text)
    except URIError:
        pass
    # and inside the validator, a ConfigError
    try:
        parse_config({"shovels": {"s": {"src-uri": text, "src-queue": "q",
                                         "dest-uri": "amqp://d"}}})
    except ConfigError:
        pass


@given(JSON_VALUES.map(json.dumps) | st.text(max_size=100))
def test_the_spark_declarations_option_raises_only_value_errors(text: str) -> None:
    try:
        parse_options({"uri": "amqp://h", "declarations": text})
    except ValueError as exc:
        assert str(exc).startswith("pumpd option declarations")

