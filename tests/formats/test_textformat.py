"""Java TextFormat escaping, printing and parsing (bkaudit.formats.textformat).

Ground truth: the spec's verified Java outputs, and an independent byte-by-byte transcription of
protobuf-java's `TextFormat.escapeBytes` switch statement below.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bkaudit.errors import FormatError
from bkaudit.formats import textformat as tf
from bkaudit.formats.textformat import Field, Kind, Symbol


def java_escape_reference(data: bytes) -> str:
    """protobuf-java TextFormat.escapeBytes, transcribed case by case."""
    out = []
    for b in data:
        if b == 0x07:
            out.append("\\a")
        elif b == ord("\b"):
            out.append("\\b")
        elif b == ord("\f"):
            out.append("\\f")
        elif b == ord("\n"):
            out.append("\\n")
        elif b == ord("\r"):
            out.append("\\r")
        elif b == ord("\t"):
            out.append("\\t")
        elif b == 0x0B:
            out.append("\\v")
        elif b == ord("\\"):
            out.append("\\\\")
        elif b == ord("'"):
            out.append("\\'")
        elif b == ord('"'):
            out.append('\\"')
        elif 0x20 <= b <= 0x7E:
            out.append(chr(b))
        else:
            digits = ((b >> 6) & 3, (b >> 3) & 7, b & 7)
            out.append("\\" + "".join(chr(ord("0") + d) for d in digits))
    return "".join(out)


# -- escaping ----------------------------------------------------------------------------------------------


def test_escape_non_ascii_utf8_bytes_as_octal_spec_vector() -> None:
    assert tf.escape_bytes("hést:1".encode()) == "h\\303\\251st:1"


def test_escape_password_spec_vector() -> None:
    # spec section 2: bytes 00 01 ff " ' \ a \n  ->  "\000\001\377\"\'\\a\n"
    assert tf.escape_bytes(b"\x00\x01\xff\"'\\a\n") == "\\000\\001\\377\\\"\\'\\\\a\\n"


def test_escape_every_byte_matches_java_reference() -> None:
    every = bytes(range(256))
    assert tf.escape_bytes(every) == java_escape_reference(every)
    assert tf.escape_bytes(b"\x7f") == "\\177"
    assert tf.escape_bytes(b"\x07\x08\x0b\x0c\x0d\x09") == "\\a\\b\\v\\f\\r\\t"


@given(st.binary(max_size=200))
def test_escape_unescape_round_trip(data: bytes) -> None:
    escaped = tf.escape_bytes(data)
    assert escaped == java_escape_reference(data)
    assert escaped.isascii()
    assert tf.unescape(escaped) == data


@given(st.text(max_size=50))
def test_unescape_unescaped_text_gives_its_utf8(text: str) -> None:
    assert tf.unescape(text.replace("\\", "/")) == text.replace("\\", "/").encode("utf-8")


@pytest.mark.parametrize(
    ("escaped", "raw"),
    [
        ("\\x41\\x4", b"A\x04"),
        ("\\xfF", b"\xff"),
        ("\\101\\7\\08", b"A\x07\x008"),
        ("\\777", b"\xff"),  # Java keeps the low byte
        ("\\?", b"?"),
        ("\\u00e9", "é".encode()),
        ("\\U0001F600", "😀".encode()),
        ("\\ud83d\\ude00", "😀".encode()),
        ("é", "é".encode()),
    ],
)
def test_unescape_java_forms(escaped: str, raw: bytes) -> None:
    assert tf.unescape(escaped) == raw


@pytest.mark.parametrize(
    ("escaped", "offset"),
    [("ab\\", 2), ("\\q", 0), ("x\\x", 1), ("\\u12", 0), ("\\ud800", 0), ("\\U00110000", 0), ("\\udc00", 0)],
)
def test_unescape_rejects_invalid_escapes_with_offset(escaped: str, offset: int) -> None:
    with pytest.raises(FormatError) as err:
        tf.unescape(escaped, field="f", offset=10)
    assert err.value.offset == 10 + offset
    assert err.value.field == "f"


# -- printing ----------------------------------------------------------------------------------------------


def test_print_scalars_in_given_order() -> None:
    fields = [("b", 2), ("a", "x\ty"), ("e", Symbol("CLOSED")), ("n", -1), ("p", b"\x00"), ("t", True)]
    text = tf.print_message(fields)
    assert text == 'b: 2\na: "x\\ty"\ne: CLOSED\nn: -1\np: "\\000"\nt: true\n'


def test_print_nested_blocks_indent_two_spaces_per_level() -> None:
    text = tf.print_message([("outer", [("x", 1), ("inner", [("y", "é")])]), ("z", 0)])
    assert text == 'outer {\n  x: 1\n  inner {\n    y: "\\303\\251"\n  }\n}\nz: 0\n'


def test_print_rejects_unknown_value_types() -> None:
    with pytest.raises(TypeError):
        tf.print_message([("f", 1.5)])  # type: ignore[list-item]


# -- schema-free parsing -----------------------------------------------------------------------------------


def test_parse_tolerant_syntax() -> None:
    text = """
    # a comment
    a { b: 1; c: "x" 'y' }   d: [1, -0x10, 010]
    e: FOO, f < g: "\\n" >  h: { } i: [] j [{k: 1}, {k: 2}]
    """
    assert tf.parse(text) == [
        ("a", [("b", 1), ("c", b"xy")]),
        ("d", 1),
        ("d", -16),
        ("d", 8),
        ("e", "FOO"),
        ("f", [("g", b"\n")]),
        ("h", []),
        ("j", [("k", 1)]),
        ("j", [("k", 2)]),
    ]
    assert isinstance(tf.parse("e: FOO")[0][1], Symbol)


def test_parse_accepts_bytes_and_keeps_raw_utf8_inside_strings() -> None:
    assert tf.parse('s: "hé\\303\\251"'.encode()) == [("s", "héé".encode())]


@pytest.mark.parametrize(
    ("text", "field", "offset"),
    [
        ("a", "a", 1),  # no ':' and no value
        ("a: ", "a", 3),
        ('a: "x', "a", 3),
        ("a: 'x\n'", "a", 3),
        ("a { b: 1", None, 8),
        ("a: 1.5", "a", 3),
        ("a: 0x", "a", 3),
        ("a: 09", "a", 3),
        ('a: "\\q"', "a", 4),
        ("a: }", "a", 3),
        ("1: 2", None, 0),
        ("a: [1 2]", "a", 6),
        ("a: @", "a", 3),
        ("a: " + "9" * 5000, "a", 3),  # past Python's int() digit limit: still a FormatError
        ("a: 0x" + "f" * 17, "a", 3),
    ],
)
def test_parse_errors_name_field_and_offset(text: str, field: str | None, offset: int) -> None:
    with pytest.raises(FormatError) as err:
        tf.parse(text, offset=100)
    assert err.value.field == field
    assert err.value.offset == 100 + offset


def test_parse_limits_nesting_and_number_size() -> None:
    assert tf.parse("a: -0x" + "0" * 5000 + "8000000000000000") == [("a", -(2**63))]
    assert tf.parse("a {" * 100 + "}" * 100)
    with pytest.raises(FormatError) as err:
        tf.parse("a {" * 101 + "}" * 101)
    assert err.value.offset == 302  # the 101st opening brace
    with pytest.raises(FormatError):
        tf.parse("a <" * 100_000)


def test_parse_rejects_invalid_utf8_with_byte_offset() -> None:
    with pytest.raises(FormatError) as err:
        tf.parse(b'a: "ok"\nb: "\xff"')
    assert err.value.offset == 12


# -- schema-checked parsing --------------------------------------------------------------------------------

SCHEMA = {
    "name": Field(Kind.STRING, required=True),
    "data": Field(Kind.BYTES),
    "small": Field(Kind.INT32),
    "big": Field(Kind.INT64),
    "state": Field(Kind.ENUM, enum_values={"OPEN": 1, "CLOSED": 3}),
    "tags": Field(Kind.STRING, repeated=True),
    "child": Field(Kind.MESSAGE, repeated=True, message={"id": Field(Kind.INT64, required=True)}),
}


def test_parse_message_typed_access() -> None:
    msg = tf.parse_message(
        'name: "a" name: "b" data: "\\377" small: -2147483648 big: 9223372036854775807 state: 3 '
        'tags: "x" tags: "y" child { id: 1 } child: < id: 2 >',
        SCHEMA,
    )
    assert msg.string("name") == "b"  # singular fields: the last value wins, as in Java's parser
    assert msg.raw("data") == b"\xff"
    assert msg.integer("small") == -(2**31)
    assert msg.integer("big") == 2**63 - 1
    assert msg.integer("state") == 3
    assert msg.strings("tags") == ["x", "y"]
    assert [c.integer("id") for c in msg.messages("child")] == [1, 2]
    assert not msg.has("missing") and msg.integer("missing", -1) == -1


def test_parse_message_enum_by_name() -> None:
    assert tf.parse_message('name: "" state: CLOSED', SCHEMA).integer("state") == 3


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('name: "a" other: 1', "other"),
        ('name: "a" small: 2147483648', "small"),
        ('name: "a" big: -9223372036854775809', "big"),
        ('name: "a" state: HALF', "state"),
        ('name: "a" state: 2', "state"),
        ('name: "a" small: "1"', "small"),
        ("name: 1", "name"),
        ('name: "a" child: 1', "child"),
        ('name: "a" small { }', "small"),
        ('name: "a" small: [1]', "small"),
        ('name: "\\377"', "message.name"),
        ('name: "a" child { }', "message.child.id"),
        ("", "message.name"),
    ],
)
def test_parse_message_rejects_schema_violations(text: str, field: str) -> None:
    with pytest.raises(FormatError) as err:
        tf.parse_message(text, SCHEMA)
    assert err.value.field == field


FIELD_NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)
SCALARS = st.one_of(st.binary(max_size=20), st.integers(-(2**63), 2**63 - 1), FIELD_NAMES.map(Symbol))
TREES = st.recursive(
    st.lists(st.tuples(FIELD_NAMES, SCALARS), max_size=4),
    lambda children: st.lists(st.tuples(FIELD_NAMES, st.one_of(SCALARS, children)), max_size=4),
    max_leaves=12,
)


@given(TREES)
def test_print_then_parse_round_trip(fields: list[tuple[str, object]]) -> None:
    text = tf.print_message(fields)  # type: ignore[arg-type]
    assert tf.parse(text) == fields
