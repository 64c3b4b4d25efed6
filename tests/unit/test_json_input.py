"""The one JSON reader (pumpd.config.json_input) and the inputs that go through it: a key given
twice is refused with its path, integers stay exact and within 64 bits, floats stay floats and
finite, nesting and size are bounded; a PUT body, the importers and the state file refuse alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pumpd import exitcodes
from pumpd.cli.import_commands import main_import_definitions
from pumpd.config.json_input import JsonInputError, read_json
from pumpd.config.parse import ConfigError
from pumpd.supervisor import statefile
from pumpd.supervisor.definitions import BodyNotJson, parse_put_body

BIG = "99999999999999999999"  # 67 bits: orjson reads it as the double 1e+20


DYNAMIC = {"src-uri": "amqp://s", "src-queue": "in", "dest-uri": "amqp://d", "dest-queue": "out"}


def read(text: str, **kw: Any) -> Any:
    return read_json(text.encode(), max_bytes=kw.pop("max_bytes", 1 << 20), **kw)


def refusal(text: str | bytes, **kw: Any) -> JsonInputError:
    data = text.encode() if isinstance(text, str) else text
    with pytest.raises(JsonInputError) as info:
        read_json(data, max_bytes=kw.pop("max_bytes", 1 << 20), **kw)
    return info.value


def test_integers_are_exact_and_floats_stay_floats() -> None:
    doc = read('{"max": 9223372036854775807, "min": -9223372036854775808, "f": 1.5, '
               '"e": 1e2, "z": -0, "n": null, "b": [true, false]}')
    assert doc == {"max": 2**63 - 1, "min": -(2**63), "f": 1.5, "e": 100.0, "z": 0, "n": None,
                   "b": [True, False]}
    assert type(doc["max"]) is int and type(doc["e"]) is float and type(doc["z"]) is int
    assert read("12345678901234567") == 12345678901234567  # a double would round it


@pytest.mark.parametrize("text,path,fragment", [
    (f'{{"h": {{"x": {BIG}}}}}', ("h", "x"), f"integer {BIG} does not fit in a signed 64-bit"),
    ("[9223372036854775808]", (0,), "integer 9223372036854775808 does not fit"),
    ("[-9223372036854775809]", (0,), "integer -9223372036854775809 does not fit"),
    ('{"a": ' + "9" * 5000 + "}", ("a",), "integer 999999999999999999999999... (5000 characters)"),
    ('{"a": [1, 1e400]}', ("a", 1), "number 1e400 is not finite"),
    ('{"a": -1e400}', ("a",), "number -1e400 is not finite"),
    ('{"a": NaN}', ("a",), "NaN is not a JSON number"),
    ('{"a": [Infinity]}', ("a", 0), "Infinity is not a JSON number"),
    ('{"a": -Infinity}', ("a",), "-Infinity is not a JSON number"),
    ('{"a": "\\ud800"}', ("a",), "lone surrogate"),
    ('{"a": {"\\udfff": 1}}', ("a",), "lone surrogate"),
])
def test_values_refused_by_path(text: str, path: tuple[Any, ...], fragment: str) -> None:
    e = refusal(text)
    assert e.path == path and fragment in e.reason and e.line is None and not e.duplicate
    assert len(str(e)) < 200


def test_a_key_given_twice_is_refused_with_where() -> None:
    e = refusal('{"s": {"d": [{"q": 1}, {"q": 1, "r": 2, "q": 3}]}}')
    assert (e.path, e.duplicate) == (("s", "d", 1, "q"), True)
    assert str(e) == "at s.d[1].q: key 'q' is given twice"
    assert refusal('{"a": 1, "a": 1}').path == ("a",)  # the same value twice: still refused
    assert read('{"a": {"b": 1}, "b": {"a": 1}}') == {"a": {"b": 1}, "b": {"a": 1}}


def test_syntax_errors_have_a_line_and_column() -> None:
    e = refusal('{\n  "a": 1,\n}')
    assert (e.line, e.column, e.path) == (3, 1, ())
    assert str(e).startswith("line 3, column 1: ")
    e = refusal(b'{"a":\n "\xff"}')
    assert (e.line, e.column) == (2, 3) and e.reason == "not UTF-8 (byte 0xff)"
    for text in ("", "{} {}", "[1,]", "'a'", "{'a': 1}", "\ufeff{}"):
        assert refusal(text).line is not None, text


def test_size_and_depth_are_bounded() -> None:
    assert refusal("[" + "1," * 600 + "1]", max_bytes=1000).reason == "larger than 1000 bytes"
    assert read("[" + "1," * 400 + "1]", max_bytes=1000)[-1] == 1
    assert read("[[[1]]]", max_depth=3) == [[[1]]]
    e = refusal('{"a": [[{"b": [1]}]]}', max_depth=4)
    assert (e.path, e.reason) == (("a", 0, 0, "b"), "objects and arrays nested more than 4 deep")
    # deeper than the parser recurses: found by a scan, with its path, never a RecursionError
    e = refusal('{"x": [0, {"k\\"}": ' + '{"a": ' * 100_000 + "1" + "}" * 100_001 + "]}",
                max_depth=5)
    assert e.path == ("x", 1, 'k"}', "a", "a") and "nested more than 5 deep" in e.reason


def test_a_put_body_refuses_as_the_file_does() -> None:
    body = b'{"src-uri": "amqp://s", "src-queue": "in", "dest-uri": "amqp://d", ' \
           b'"dest-queue": "a", "dest-queue": "b"}'
    with pytest.raises(ConfigError) as info:
        parse_put_body("x", body, None)
    e = info.value
    assert not isinstance(e, BodyNotJson)
    assert (e.source, e.shovel, e.clause) == ("PUT /api/shovels/x", "x", "dest-queue")
    assert e.message == "key 'dest-queue' is given twice"
    wrapped = b'{"value": {"dest-queue": 1, "dest-queue": 2}}'
    with pytest.raises(ConfigError) as info:
        parse_put_body("x", wrapped, None)
    assert info.value.clause == "value.dest-queue"
    big = json.dumps({**DYNAMIC, "dest-publish-properties": {"headers": {"n": 0}}})
    with pytest.raises(ConfigError) as info:
        parse_put_body("x", big.replace('"n": 0', f'"n": -{BIG}').encode(), None)
    assert (info.value.clause, info.value.message) == (
        "dest-publish-properties",
        f"at headers.n: integer -{BIG} does not fit in a signed 64-bit integer (-2^63 to 2^63-1)")
    with pytest.raises(BodyNotJson, match="the body is not valid JSON: line 1, column 2"):
        parse_put_body("x", b"{not json", None)
    ok = parse_put_body("x", json.dumps({**DYNAMIC, "dest-publish-properties": {"headers": {
        "n": 2**63 - 1, "f": 0.5}}}).encode(), None)
    assert dict(ok.cfg.publish_properties["headers"]) == {"n": 2**63 - 1, "f": 0.5}


def test_the_importer_and_the_state_file_refuse_alike(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    export = tmp_path / "defs.json"
    export.write_text('{"parameters": [{"component": "shovel", "name": "s", "vhost": "/", '
                      '"value": {"src-queue": "a", "src-queue": "b"}}]}')
    assert main_import_definitions(str(export)) == exitcodes.CONFIG_ERROR
    err = capsys.readouterr().err
    assert "at parameters[0].value.src-queue: key 'src-queue' is given twice" in err
    state = tmp_path / "s.runtime.json"
    state.write_text('{"shovels": {}, "paused": ["a"], "paused": []}')
    with pytest.raises(statefile.StateFileError, match="at paused: key 'paused' is given twice"):
        statefile.load_paused(state)

