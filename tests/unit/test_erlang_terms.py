"""The Erlang term reader: every syntax element, the Python types it produces, error positions."""

from __future__ import annotations

import pathlib

import pytest
from pumpd.importers.erlang.terms import (
    Atom,
    ErlangSyntaxError,
    ErlString,
    format_term,
    parse_term,
    parse_term_with_positions,
    parse_terms,
)

DATA = pathlib.Path(__file__).resolve().parents[1] / "data"

A = Atom
S = ErlString


def same(actual: object, expected: object) -> bool:
    """Equal *and* of the same types all the way down (Atom("a") == "a" would hide mistakes)."""
    if type(actual) is not type(expected):
        return False
    if isinstance(actual, (list, tuple)):
        assert isinstance(expected, (list, tuple))
        return len(actual) == len(expected) and all(same(a, e) for a, e in zip(actual, expected, strict=False))
    if isinstance(actual, dict):
        assert isinstance(expected, dict)
        return len(actual) == len(expected) and all(
            any(same(k, ek) and same(v, expected[ek]) for ek in expected) for k, v in actual.items()
        )
    return actual == expected


def check(text: str, expected: object) -> None:
    actual = parse_term(text)
    assert same(actual, expected), f"{text!r}: got {actual!r}, expected {expected!r}"


def error_of(text: str) -> ErlangSyntaxError:
    with pytest.raises(ErlangSyntaxError) as info:
        parse_term(text)
    return info.value


# --- atoms ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, name",
    [
        ("foo", "foo"),
        ("rabbit@node1", "rabbit@node1"),
        ("my_first_shovel", "my_first_shovel"),
        ("a1_B2@c", "a1_B2@c"),
        ("true", "true"),
        ("ärger", "ärger"),  # Latin-1 lowercase letters start atoms too
        ("'queue.declare'", "queue.declare"),
        ("'hello world'", "hello world"),
        ("'Capital'", "Capital"),
        ("''", ""),
        (r"'it\'s'", "it's"),
        (r"'back\\slash'", "back\\slash"),
        (r"'tab\there'", "tab\there"),
        ("'end'", "end"),  # a reserved word is fine quoted
        ("'队列'", "队列"),
    ],
)
def test_atoms(text: str, name: str) -> None:
    check(text, A(name))


def test_atom_is_a_distinguishable_str() -> None:
    atom = parse_term("durable")
    assert isinstance(atom, Atom) and isinstance(atom, str)
    assert not isinstance(atom, ErlString)
    assert atom == "durable"
    assert repr(atom) == "Atom('durable')"


@pytest.mark.parametrize("word", ["end", "case", "of", "fun", "receive", "after", "when", "not"])
def test_reserved_words_are_not_atoms(word: str) -> None:
    err = error_of(f"{{a, {word}}}")
    assert (err.line, err.column) == (1, 5)
    assert "reserved word" in err.reason


@pytest.mark.parametrize("name", ["maybe", "else"])
def test_feature_keywords_stay_atoms(name: str) -> None:
    check(name, A(name))


@pytest.mark.parametrize("text", ["X", "_", "_ignored", "Queue"])
def test_variables_are_refused(text: str) -> None:
    err = error_of(f"[{text}]")
    assert (err.line, err.column) == (1, 2)
    assert f"found variable {text}" in err.reason
    assert "variables" in err.reason


# --- strings --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "escape, char",
    [
        (r"\n", "\n"),
        (r"\t", "\t"),
        (r"\r", "\r"),
        (r"\b", "\b"),
        (r"\f", "\f"),
        (r"\v", "\v"),
        (r"\e", "\x1b"),
        (r"\d", "\x7f"),
        (r"\s", " "),
        (r"\\", "\\"),
        (r"\"", '"'),
        (r"\'", "'"),
        (r"\0", "\x00"),
        (r"\7", "\x07"),
        (r"\101", "A"),
        (r"\12", "\n"),
        (r"\x41", "A"),
        (r"\xff", "\xff"),
        (r"\x{41}", "A"),
        (r"\x{4E2D}", "中"),
        (r"\x{1F600}", "\U0001f600"),
        (r"\^a", "\x01"),
        (r"\^Z", "\x1a"),
        (r"\^@", "\x00"),
        (r"\z", "z"),  # an unknown escape stands for the character itself
    ],
)
def test_string_escapes(escape: str, char: str) -> None:
    check(f'"<{escape}>"', S(f"<{char}>"))


def test_octal_escape_takes_at_most_three_digits() -> None:
    check(r'"\1234"', S("S4"))  # \123 is 'S', then a literal 4


def test_strings() -> None:
    check('""', S(""))
    check('"amqp://"', S("amqp://"))
    check('"中文 ok"', S("中文 ok"))
    check('"two\nlines"', S("two\nlines"))  # a literal newline inside the quotes
    check('"%not a comment"', S("%not a comment"))


def test_adjacent_strings_are_concatenated() -> None:
    check('"amqp://" "host" % comment\n "/vhost"', S("amqp://host/vhost"))
    check('["a" "b", "c"]', [S("ab"), S("c")])


def test_string_is_not_an_atom() -> None:
    term = parse_term('"durable"')
    assert isinstance(term, ErlString) and not isinstance(term, Atom)
    assert repr(term) == "ErlString('durable')"


@pytest.mark.parametrize(
    "text, reason",
    [
        (r'"\x{110000}"', "not a Unicode scalar value"),
        (r'"\x{D800}"', "not a Unicode scalar value"),
        (r'"\x{}"', "hexadecimal"),
        (r'"\x{41"', "hexadecimal"),
        (r'"\xg0"', "two hexadecimal digits"),
        ('"abc\\', "unterminated"),
    ],
)
def test_bad_escapes(text: str, reason: str) -> None:
    assert reason in error_of(text).reason


# --- binaries -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, value",
    [
        ("<<>>", b""),
        ('<<"text">>', b"text"),
        ('<<"">>', b""),
        ('<<"a", "b">>', b"ab"),
        ('<<"a" "b">>', b"ab"),
        ("<<1,2,3>>", b"\x01\x02\x03"),
        ("<< 1 , 255 >>", b"\x01\xff"),
        ("<<$a, $b>>", b"ab"),
        ('<<"x", 0, "y">>', b"x\x00y"),
        ('<<"é">>', b"\xe9"),  # Latin-1, as Erlang builds it without /utf8
        ('<<"é"/utf8>>', "é".encode()),
        ('<<"队列"/utf8>>', "队列".encode()),
        ("<<16#263A/utf8>>", "\u263a".encode()),
        ('<<"ab"/utf16>>', "ab".encode("utf-16-be")),
        ('<<"ab"/utf16-little>>', "ab".encode("utf-16-le")),
        ('<<"a"/utf32>>', "a".encode("utf-32-be")),
        ("<<256:16>>", b"\x01\x00"),
        ("<<1:16/little>>", b"\x01\x00"),
        ("<<1:32/big-unsigned-integer>>", b"\x00\x00\x00\x01"),
        ("<<-1>>", b"\xff"),
        ("<<-2:16/signed>>", b"\xff\xfe"),
        ('<<"ab":16>>', b"\x00a\x00b"),
        ("<<1:2/unit:8>>", b"\x00\x01"),
        ("<<1.5/float>>", b"\x3f\xf8\x00\x00\x00\x00\x00\x00"),
        ("<<1.5:32/float>>", b"\x3f\xc0\x00\x00"),
        ("<<2:32/float-little>>", b"\x00\x00\x00\x40"),
        ("<<0:0>>", b""),
    ],
)
def test_binaries(text: str, value: bytes) -> None:
    check(text, value)


@pytest.mark.parametrize(
    "text, reason, column",
    [
        ("<<300>>", "300 does not fit in a segment of 8 bits", 3),
        ("<<-129>>", "does not fit", 3),
        ('<<"中">>', 'write <<"..."/utf8>>', 3),
        ("<<1:4>>", "bitstrings are not supported", 3),
        ("<<1/binary>>", "not supported", 5),
        ("<<1/weird>>", "unknown binary type specifier 'weird'", 5),
        ("<<a>>", "expected a string or a number as a binary segment, found atom a", 3),
        ("<<1.5>>", "/float", 3),
        ('<<"a"/float>>', "needs a number", 3),
        ("<<1:8/utf8>>", "takes no size", 3),
        ("<<1:24/float>>", "16, 32 or 64 bits", 3),
        ("<<1 2>>", "expected ',' or '>>' in a binary", 5),
        ("<<1:x>>", "segment size", 5),
        ("<<1", "expected ',' or '>>' in a binary, found end of input", 4),
    ],
)
def test_bad_binaries(text: str, reason: str, column: int) -> None:
    err = error_of(text)
    assert reason in err.reason
    assert (err.line, err.column) == (1, column)


# --- numbers --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, value",
    [
        ("0", 0),
        ("42", 42),
        ("-7", -7),
        ("+5", 5),
        ("- 1", -1),
        ("-  % minus, then a comment\n 3", -3),
        ("16#ff", 255),
        ("16#FF", 255),
        ("-16#10", -16),
        ("2#1010", 10),
        ("8#777", 511),
        ("36#zz", 36 * 36 - 1),
        ("1_000_000", 1_000_000),
        ("16#ff_ff", 0xFFFF),
        ("12345678901234567890123", 12345678901234567890123),
        ("$a", 97),
        ("$A", 65),
        ("$\\n", 10),
        ("$\\s", 32),
        ("$ ", 32),
        ("$\\x{1F600}", 0x1F600),
        ("$中", ord("中")),
        ("$$", 36),
        ("-$a", -97),
    ],
)
def test_integers(text: str, value: int) -> None:
    check(text, value)


@pytest.mark.parametrize(
    "text, value",
    [
        ("1.5", 1.5),
        ("0.0", 0.0),
        ("-0.5", -0.5),
        ("1.0e3", 1000.0),
        ("1.0E3", 1000.0),
        ("2.5e+2", 250.0),
        ("1.0e-3", 0.001),
        ("1_0.2_5", 10.25),
        ("60.0e-1", 6.0),
    ],
)
def test_floats(text: str, value: float) -> None:
    check(text, value)


@pytest.mark.parametrize(
    "text, reason, column",
    [
        ("16#", "expected a base-16 digit after '16#'", 4),
        ("1#0", "radix 1 is out of range", 1),
        ("37#1", "radix 37 is out of range", 1),
        ("1e3", "expected '.' or end of input after the term, found atom e3", 2),
        ("1.0e400", "too large", 1),
        ("- a", "expected a number after '-', found atom a", 3),
        ("$", "expected a character after '$'", 2),
        ("1__0", "found variable __0", 2),
    ],
)
def test_bad_numbers(text: str, reason: str, column: int) -> None:
    err = error_of(text)
    assert reason in err.reason
    assert (err.line, err.column) == (1, column)


def test_a_float_needs_digits_after_its_point() -> None:
    check("1.", 1)  # the integer 1 and the terminating dot
    assert "'.'" in error_of("1.e3").reason


# --- tuples, lists, maps --------------------------------------------------------------------


def test_tuples() -> None:
    check("{}", ())
    check("{a}", (A("a"),))
    check('{a, <<"b">>, "c", 1, 2.0}', (A("a"), b"b", S("c"), 1, 2.0))
    check("{{2024, 1, 31}, {23, 59, 59}}", ((2024, 1, 31), (23, 59, 59)))


def test_lists() -> None:
    check("[]", [])
    check("[a]", [A("a")])
    check("[a, [b, [c, []]]]", [A("a"), [A("b"), [A("c"), []]]])


def test_list_with_a_proper_tail_is_flattened() -> None:
    check("[a | [b]]", [A("a"), A("b")])
    check("[a, b | [c, d]]", [A("a"), A("b"), A("c"), A("d")])
    check("[a | []]", [A("a")])
    check('[$a | "bc"]', S("abc"))  # [$a | "bc"] is the string "abc" in Erlang
    check('[x | "bc"]', [A("x"), 98, 99])


def test_maps() -> None:
    check("#{}", {})
    check("#{a => 1}", {A("a"): 1})
    check(
        '#{<<"k">> => [v], {t, 1} => #{nested => "yes"}}',
        {b"k": [A("v")], (A("t"), 1): {A("nested"): S("yes")}},
    )


@pytest.mark.parametrize(
    "text, reason, column",
    [
        ("{a, b", "expected ',' or '}' in a tuple, found end of input", 6),
        ("{a b}", "expected ',' or '}' in a tuple, found atom b", 4),
        ("{a,}", "expected a term, found '}'", 4),
        ("{a,,b}", "expected a term, found ','", 4),
        ("[a, b", "expected ',', '|' or ']' in a list, found end of input", 6),
        ("[a,]", "expected a term, found ']'", 4),
        ("[a | b]", "the tail after '|' must be a proper list, found b", 6),
        ("[a | <<1>>]", "must be a proper list", 6),
        ("[a | [b] | c]", "expected ']' after the tail of a list, found '|'", 10),
        ("#{[a] => 1}", "a map key must not contain lists or maps", 3),
        ("#{a 1}", "expected '=>' after a map key, found number 1", 5),
        ("#{a := 1}", "expected '=>' after a map key, found ':='", 5),
        ("#a", "expected '{' after '#'", 2),
        ("#{a => 1", "expected ',' or '}' in a map, found end of input", 9),
        ("}", "expected a term, found '}'", 1),
        ("", "expected a term, found end of input", 1),
        ("   % only a comment", "expected a term, found end of input", 20),
        ("{a, ?}", "unexpected character '?'", 5),
        ("{a, fun() -> ok end}", "reserved word", 5),
        ("{a}.{b}", "expected '.' or end of input after the term, found '.'", 4),
        ("{a}. {b}.", "expected end of input after the terminating '.', found '{'", 6),
        ("{a} {b}", "expected '.' or end of input after the term, found '{'", 5),
    ],
)
def test_structural_errors(text: str, reason: str, column: int) -> None:
    err = error_of(text)
    assert reason in err.reason
    assert (err.line, err.column) == (1, column)


def test_nesting_limit() -> None:
    deep = "[" * 300 + "]" * 300
    assert "nested more than" in error_of(deep).reason
    check("[" * 50 + "]" * 50, parse_term("[" * 50 + "]" * 50))


# --- layout: comments, the terminating dot, white space ---------------------------------------


def test_comments_and_whitespace_anywhere() -> None:
    text = (
        "%% header\n{ % open\n\ta , % first\r\n  [ 1 % one\n , 2 ] % list\n} % close\n. % the end"
    )
    check(text, (A("a"), [1, 2]))


def test_terminating_dot_is_optional() -> None:
    check("{a, 1}.", (A("a"), 1))
    check("{a, 1}.\n", (A("a"), 1))
    check("{a, 1}.% trailing comment", (A("a"), 1))
    check("{a, 1}", (A("a"), 1))
    check("{a, 1}\n\n% just a comment\n", (A("a"), 1))


def test_byte_order_mark_is_skipped() -> None:
    check("\ufeff[a].", [A("a")])


def test_parse_terms_reads_a_consult_file() -> None:
    terms = parse_terms("{a, 1}.\n%% comment\n{b, 2}.\n[c]")
    assert same(terms, [(A("a"), 1), (A("b"), 2), [A("c")]])
    assert parse_terms("  % nothing\n") == []
    with pytest.raises(ErlangSyntaxError) as info:
        parse_terms("{a}.\n{b} {c}.")
    assert (info.value.line, info.value.column) == (2, 5)


# --- error positions ------------------------------------------------------------------------


def test_error_positions_count_lines_and_characters() -> None:
    err = error_of('[\n  {a, "中文"},\n  {b, ?}\n]')
    assert (err.line, err.column) == (3, 7)
    err = error_of('{"中文", ?}')  # columns count characters, not bytes
    assert (err.line, err.column) == (1, 8)


def test_unterminated_string_points_at_its_start() -> None:
    err = error_of('[ok,\n  "no end\n\n')
    assert (err.line, err.column) == (2, 3)
    assert err.reason == 'unterminated string: missing closing "'
    err = error_of("[ok, 'no end]")
    assert (err.line, err.column) == (1, 6)
    assert "unterminated quoted atom" in err.reason


def test_error_message_and_attributes() -> None:
    err = error_of("{a,\n b")
    assert isinstance(err, ValueError)
    assert (err.line, err.column) == (2, 3)
    assert err.reason == "expected ',' or '}' in a tuple, found end of input"
    assert str(err) == "line 2, column 3: expected ',' or '}' in a tuple, found end of input"


def test_missing_close_in_the_plugin_docs_example_is_located() -> None:
    text = (DATA / "plugin_docs_example.config").read_text()
    # Drop the comma before {queue, <<>>} (line 30): the list of clauses ends too early.
    broken = text.replace("]}\n, {queue, <<>>}\n", "]}\n {queue, <<>>}\n")
    assert broken != text
    err = error_of(broken)
    assert (err.line, err.column) == (30, 2)
    assert err.reason == "expected ',', '|' or ']' in a list, found '{'"
    # An unclosed tuple is only noticed where the tuple cannot go on any more.
    err = error_of(text.replace("{prefetch_count, 10}", "{prefetch_count, 10"))
    assert (err.line, err.column) == (38, 1)
    assert err.reason == "expected ',' or '}' in a tuple, found ']'"


# --- the plugin documentation's example, positions, formatting -----------------------------------


def test_plugin_docs_example_parses_to_the_expected_term() -> None:
    term = parse_term((DATA / "plugin_docs_example.config").read_text())
    assert isinstance(term, tuple) and same(term[0], A("rabbitmq_shovel"))
    [(shovels_key, [(name, clauses)])] = term[1]  # type: ignore[misc]
    assert same(shovels_key, A("shovels")) and same(name, A("my_first_shovel"))
    sources = dict(clauses)[A("sources")]
    assert same(
        sources[0],
        (
            A("brokers"),
            [
                S("amqp://fred:secret@host1.domain/my_vhost"),
                S("amqp://john:secret@host2.domain/my_vhost"),
            ],
        ),
    )
    queue_declare = sources[1][1][1]
    assert same(
        queue_declare,
        (A("queue.declare"), [(A("arguments"), [(b"x-message-ttl", A("long"), 60000)])]),
    )
    assert same(dict(clauses)[A("queue")], b"")
    assert same(dict(clauses)[A("ack_mode")], A("on_confirm"))


def test_positions_of_containers_atoms_and_strings() -> None:
    term, positions = parse_term_with_positions('[\n  {a, "s", <<"b">>, 7, {}, [x]}\n].')
    assert isinstance(term, list)
    entry = term[0]
    assert isinstance(entry, tuple)
    assert positions.of(term) == (1, 1)
    assert positions.of(entry) == (2, 3)
    assert positions.of(entry[0]) == (2, 4)
    assert positions.of(entry[1]) == (2, 7)
    assert positions.of(entry[2]) is None  # binaries are not tracked
    assert positions.of(entry[3]) is None  # nor integers
    assert positions.of(entry[4]) is None  # nor the shared empty tuple
    assert positions.of(entry[5]) == (2, 28)
    assert positions.of(entry[5][0]) == (2, 29)
    assert positions.of(object()) is None


@pytest.mark.parametrize(
    "term, text",
    [
        (A("durable"), "durable"),
        (A("queue.declare"), "'queue.declare'"),
        (A("Capital"), "'Capital'"),
        (A("end"), "'end'"),
        (A(""), "''"),
        (A("it's"), r"'it\'s'"),
        (S('say "hi"\n'), r'"say \"hi\"\n"'),
        (b"", "<<>>"),
        (b"my_fanout", '<<"my_fanout">>'),
        ("é".encode(), '<<"é"/utf8>>'),
        (b"\x00\xff", "<<0,255>>"),
        (1e20, "1.0e+20"),
        (-1.5, "-1.5"),
        ((), "{}"),
        ([A("a"), 1], "[a, 1]"),
        ({A("k"): S("v")}, '#{k => "v"}'),
    ],
)
def test_format_term(term: object, text: str) -> None:
    assert format_term(term) == text


def test_format_term_round_trips() -> None:
    text = (DATA / "advanced.config").read_text()
    term = parse_term(text)
    assert same(parse_term(format_term(term)), term)
    odd = [
        A("a b"),
        S("\x01\t\\\"'"),
        b"\x00\x01",
        "é".encode(),
        -3,
        2.5e-10,
        {A("m"): [(), {}]},
        S(""),
    ]
    assert same(parse_term(format_term(odd)), odd)


def test_format_term_shortens() -> None:
    text = format_term([A("a")] * 100, 20)
    assert len(text) == 20 and text.endswith("...")
