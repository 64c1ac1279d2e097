"""Java protobuf TextFormat, byte for byte, for the records BookKeeper stores as text.

BookKeeper writes cookies, under-replication markers, lock data, auditor votes, the under-replication
LAYOUT and v2 ledger metadata with protobuf-java's `TextFormat` printer, and reads them with its parser.
A real BookKeeper must read what we write and we must read what it writes, so this module reproduces
Java's output exactly (escaping in particular: Java escapes every non-ASCII UTF-8 byte as 3-digit octal,
unlike Python's protobuf text printer) and accepts what Java's parser accepts.

Three layers:
- `escape_bytes` / `unescape`: Java's `TextFormat.escapeBytes` / `unescapeBytes`.
- `print_message`: `name: value` lines in the given (field-number) order, nested messages as indented blocks.
- `parse` (schema-free, ordered `(name, value)` pairs) and `parse_message` (checked against a small schema,
  giving typed access through `TextMessage`). Every parse error is a `FormatError` with field and byte offset.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from bkaudit.errors import FormatError

__all__ = [
    "MAX_NESTING",
    "Field",
    "Kind",
    "PrintValue",
    "Schema",
    "Symbol",
    "TextField",
    "TextMessage",
    "TextValue",
    "escape_bytes",
    "parse",
    "parse_message",
    "print_message",
    "unescape",
]


class Symbol(str):
    """A bare identifier: an enum value name (printed unquoted, e.g. `state: CLOSED`) or true/false."""

    __slots__ = ()


# Parsed values: quoted strings as raw bytes (string fields decode them as UTF-8), numbers as int, bare
# identifiers as Symbol, `{ }` / `< >` blocks as nested field lists.
TextValue: TypeAlias = "bytes | int | Symbol | list[TextField]"
TextField: TypeAlias = "tuple[str, TextValue]"
# Printable values: str (UTF-8 encoded then escaped), bytes, int, bool, Symbol, or a nested message.
PrintValue: TypeAlias = "str | bytes | int | Sequence[tuple[str, PrintValue]]"

# ----------------------------------------------------------------------------------------------------
# Escaping
# ----------------------------------------------------------------------------------------------------

_SIMPLE_ESCAPES = {
    0x07: "\\a",
    0x08: "\\b",
    0x0C: "\\f",
    0x0A: "\\n",
    0x0D: "\\r",
    0x09: "\\t",
    0x0B: "\\v",
    0x5C: "\\\\",
    0x27: "\\'",
    0x22: '\\"',
}


def _escape_of(b: int) -> str:
    if b in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[b]
    if 0x20 <= b <= 0x7E:
        return chr(b)
    return f"\\{b:03o}"


_ESCAPE_TABLE: tuple[str, ...] = tuple(_escape_of(b) for b in range(256))


def escape_bytes(data: bytes | bytearray | memoryview) -> str:
    """Java `TextFormat.escapeBytes`: C escapes, printable ASCII as is, every other byte as 3-digit octal.

    Non-ASCII text is escaped byte by byte ("hést" -> `h\\303\\251st`), which is what makes our cookies and
    markers byte-identical to BookKeeper's.
    """
    return "".join(map(_ESCAPE_TABLE.__getitem__, bytes(data)))


_SIMPLE_UNESCAPES = {
    ord("a"): 0x07,
    ord("b"): 0x08,
    ord("f"): 0x0C,
    ord("n"): 0x0A,
    ord("r"): 0x0D,
    ord("t"): 0x09,
    ord("v"): 0x0B,
    ord("\\"): 0x5C,
    ord("'"): 0x27,
    ord('"'): 0x22,
    ord("?"): 0x3F,
}
_OCTAL = frozenset(b"01234567")
_HEX = frozenset(b"0123456789abcdefABCDEF")


def unescape(text: str | bytes, *, field: str | None = None, offset: int = 0) -> bytes:
    """Java `TextFormat.unescapeBytes`: the inverse of `escape_bytes`, also accepting what Java's parser does.

    Accepts `\\xH`/`\\xHH`, 1-3 digit octal (masked to a byte, as Java does), `\\?`, `\\uXXXX`
    (surrogate pairs joined) and `\\UXXXXXXXX`. `str` input is UTF-8 encoded first (unescaped characters
    stand for their UTF-8 bytes). `offset` is added to error offsets so they point into the enclosing record.
    """
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    if b"\\" not in raw:
        return raw
    return _Unescaper(raw, field, offset).run()


class _Unescaper:
    """One pass over escaped bytes; a class only to keep each escape kind in its own short method."""

    def __init__(self, raw: bytes, field: str | None, base: int) -> None:
        self.raw = raw
        self.field = field
        self.base = base
        self.i = 0
        self.out = bytearray()

    def fail(self, message: str, at: int) -> FormatError:
        return FormatError(message, field=self.field, offset=self.base + at)

    def run(self) -> bytes:
        raw = self.raw
        while self.i < len(raw):
            c = raw[self.i]
            if c != 0x5C:
                self.out.append(c)
                self.i += 1
                continue
            if self.i + 1 >= len(raw):
                raise self.fail("invalid escape sequence: '\\' at end of string", self.i)
            self.escape(self.i)
        return bytes(self.out)

    def escape(self, start: int) -> None:
        c = self.raw[start + 1]
        self.i = start + 2
        if c in _OCTAL:
            self.octal(start)
        elif c in _SIMPLE_UNESCAPES:
            self.out.append(_SIMPLE_UNESCAPES[c])
        elif c == ord("x"):
            self.hex_byte(start)
        elif c == ord("u"):
            self.code_point(self.hex_digits(4, start), start)
        elif c == ord("U"):
            self.code_point(self.hex_digits(8, start), start)
        else:
            raise self.fail(f"invalid escape sequence '\\{chr(c)}'", start)

    def octal(self, start: int) -> None:
        code = self.raw[start + 1] - 0x30
        for _ in range(2):
            if self.i < len(self.raw) and self.raw[self.i] in _OCTAL:
                code = code * 8 + self.raw[self.i] - 0x30
                self.i += 1
        self.out.append(code & 0xFF)

    def hex_byte(self, start: int) -> None:
        digits = 0
        code = 0
        while digits < 2 and self.i < len(self.raw) and self.raw[self.i] in _HEX:
            code = code * 16 + int(chr(self.raw[self.i]), 16)
            self.i += 1
            digits += 1
        if digits == 0:
            raise self.fail("invalid escape sequence '\\x' with no digits", start)
        self.out.append(code)

    def hex_digits(self, count: int, start: int) -> int:
        chunk = self.raw[self.i : self.i + count]
        if len(chunk) != count or any(b not in _HEX for b in chunk):
            raise self.fail(f"escape sequence needs {count} hex digits", start)
        self.i += count
        return int(chunk, 16)

    def code_point(self, cp: int, start: int) -> None:
        if 0xD800 <= cp <= 0xDBFF and self.raw[self.i : self.i + 2] == b"\\u":
            save = self.i
            self.i += 2
            low = self.hex_digits(4, save)
            if not 0xDC00 <= low <= 0xDFFF:
                raise self.fail("unpaired surrogate in unicode escape", start)
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00)
        if 0xD800 <= cp <= 0xDFFF or cp > 0x10FFFF:
            raise self.fail(f"invalid unicode escape U+{cp:X}", start)
        self.out += chr(cp).encode("utf-8")


# ----------------------------------------------------------------------------------------------------
# Printing
# ----------------------------------------------------------------------------------------------------


def print_message(fields: Iterable[tuple[str, PrintValue]]) -> str:
    """Java `TextFormat.printer().printToString(message)` for the fields given, in the order given.

    Callers pass fields in field-number order (as protobuf-java prints) and only the fields that are set.
    The result is pure ASCII: every non-ASCII byte is escaped.
    """
    out: list[str] = []
    _print_into(out, fields, "")
    return "".join(out)


def _print_into(out: list[str], fields: Iterable[tuple[str, PrintValue]], indent: str) -> None:
    for name, value in fields:
        if isinstance(value, (list, tuple)):
            out.append(f"{indent}{name} {{\n")
            _print_into(out, value, indent + "  ")
            out.append(f"{indent}}}\n")
        else:
            out.append(f"{indent}{name}: {_scalar_text(value)}\n")


def _scalar_text(value: PrintValue) -> str:
    if isinstance(value, Symbol):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        # Java's copyFromUtf8 replaces unpaired surrogates by '?', as the "replace" handler does.
        return '"' + escape_bytes(value.encode("utf-8", "replace")) + '"'
    if isinstance(value, (bytes, bytearray, memoryview)):
        return '"' + escape_bytes(value) + '"'
    raise TypeError(f"cannot print {type(value).__name__} in TextFormat")


# ----------------------------------------------------------------------------------------------------
# Schemas (only what BookKeeper's text records use)
# ----------------------------------------------------------------------------------------------------


class Kind(enum.Enum):
    """Protobuf field types that occur in BookKeeper's text records."""

    STRING = "string"
    BYTES = "bytes"
    INT32 = "int32"
    INT64 = "int64"
    ENUM = "enum"
    MESSAGE = "message"


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a message schema.

    `enum_values` maps enum value names to numbers; `message` is the schema of a nested message.
    """

    kind: Kind
    repeated: bool = False
    required: bool = False
    enum_values: Mapping[str, int] | None = None
    message: Mapping[str, Field] | None = None


Schema: TypeAlias = Mapping[str, Field]

_INT_RANGES = {Kind.INT32: (-(2**31), 2**31 - 1), Kind.INT64: (-(2**63), 2**63 - 1)}


class TextMessage:
    """A parsed message checked against its schema; typed accessors with protobuf defaults.

    Singular fields keep their last value (Java's parser allows overwriting singular fields); repeated fields
    keep every value in order.
    """

    __slots__ = ("_values",)

    def __init__(self, values: dict[str, list[object]]) -> None:
        self._values = values

    def has(self, name: str) -> bool:
        """Whether the field appeared at all (protobuf's hasX())."""
        return name in self._values

    def _last(self, name: str) -> object | None:
        values = self._values.get(name)
        return values[-1] if values else None

    def string(self, name: str, default: str = "") -> str:
        """A string field (UTF-8 decoded), or `default` when absent."""
        value = self._last(name)
        return value if isinstance(value, str) else default

    def raw(self, name: str, default: bytes = b"") -> bytes:
        """A bytes field, or `default` when absent."""
        value = self._last(name)
        return value if isinstance(value, bytes) else default

    def integer(self, name: str, default: int = 0) -> int:
        """An integer or enum field (enums as their number), or `default` when absent."""
        value = self._last(name)
        return value if isinstance(value, int) else default

    def strings(self, name: str) -> list[str]:
        """Every value of a repeated string field, in order."""
        return [v for v in self._values.get(name, ()) if isinstance(v, str)]

    def messages(self, name: str) -> list[TextMessage]:
        """Every value of a (repeated) message field, in order."""
        return [v for v in self._values.get(name, ()) if isinstance(v, TextMessage)]


# ----------------------------------------------------------------------------------------------------
# Parsing
# ----------------------------------------------------------------------------------------------------

MAX_NESTING = 100
"""Java's TextFormat parser rejects messages nested deeper than its default recursion limit of 100."""
_WHITESPACE = frozenset(" \t\n\r\f\v")  # Java regex \s
_IDENT_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_IDENT_CHARS = _IDENT_START | frozenset("0123456789")
_NUMBER_START = frozenset("0123456789+-.")
_NUMBER_CHARS = _IDENT_CHARS | frozenset(".+-")


def parse(text: str | bytes, *, offset: int = 0) -> list[TextField]:
    """Parse TextFormat into ordered `(name, value)` pairs, without a schema.

    Accepts what Java's parser accepts for BookKeeper's records: `name: value`, `name { ... }`,
    `name: { ... }`, `< >` blocks, `[a, b]` lists, `;`/`,` separators, `#` comments, adjacent string
    concatenation, any whitespace. `offset` is added to error offsets (e.g. the length of a header that
    precedes the text).
    """
    return _Parser(_as_latin1(text, offset), offset, None).parse_document()


def parse_message(
    text: str | bytes, schema: Schema, *, offset: int = 0, name: str = "message"
) -> TextMessage:
    """Parse TextFormat and check it against `schema` (unknown fields, types, ranges, required fields).

    Like Java's parser, unknown field names and unknown enum names are errors.
    """
    parser = _Parser(_as_latin1(text, offset), offset, schema)
    fields = parser.parse_document()
    return _build_message(fields, schema, name, offset)


def _as_latin1(text: str | bytes, offset: int) -> str:
    """Validate UTF-8 and return the bytes as a latin-1 str, so indexes are byte offsets and quoted contents
    map back to their exact bytes (Java unescapes the UTF-8 bytes of the quoted text)."""
    if isinstance(text, str):
        try:
            return text.encode("utf-8").decode("latin-1")
        except UnicodeEncodeError as exc:
            raise FormatError("text is not encodable as UTF-8", offset=offset + exc.start) from None
    raw = bytes(text)
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError("invalid UTF-8", offset=offset + exc.start) from None
    return raw.decode("latin-1")


class _Parser:
    """Recursive-descent TextFormat parser over a latin-1 view of UTF-8 bytes."""

    def __init__(self, s: str, base: int, schema: Schema | None) -> None:
        self.s = s
        self.n = len(s)
        self.pos = 0
        self.base = base
        self.schema = schema
        self.depth = 0

    def fail(self, message: str, field: str | None = None, at: int | None = None) -> FormatError:
        return FormatError(message, field=field, offset=self.base + (self.pos if at is None else at))

    def peek(self) -> str:
        """Skip whitespace and comments; the next character or "" at the end."""
        s, n = self.s, self.n
        while self.pos < n:
            c = s[self.pos]
            if c in _WHITESPACE:
                self.pos += 1
            elif c == "#":
                end = s.find("\n", self.pos)
                self.pos = n if end < 0 else end + 1
            else:
                return c
        return ""

    def parse_document(self) -> list[TextField]:
        return self.parse_fields(None, self.schema)

    def parse_fields(self, closer: str | None, schema: Schema | None) -> list[TextField]:
        fields: list[TextField] = []
        while True:
            c = self.peek()
            if c == "":
                if closer is not None:
                    raise self.fail(f"expected '{closer}' before end of text")
                return fields
            if c == closer:
                self.pos += 1
                return fields
            self.parse_field(fields, schema)
            if self.peek() in (";", ","):
                self.pos += 1

    def parse_field(self, out: list[TextField], schema: Schema | None) -> None:
        at = self.pos
        name = self.identifier()
        spec = self.field_spec(schema, name, at)
        colon = self.peek() == ":"
        if colon:
            self.pos += 1
        if self.peek() == "[":
            self.pos += 1
            self.parse_list(out, name, spec, colon)
            return
        out.append((name, self.value(name, spec, colon)))

    def field_spec(self, schema: Schema | None, name: str, at: int) -> Field | None:
        if schema is None:
            return None
        spec = schema.get(name)
        if spec is None:
            raise self.fail(f"unknown field {name!r}", name, at)
        return spec

    def parse_list(self, out: list[TextField], name: str, spec: Field | None, colon: bool) -> None:
        if spec is not None and not spec.repeated:
            raise self.fail("list given for a non-repeated field", name)
        if self.peek() == "]":
            self.pos += 1
            return
        while True:
            out.append((name, self.value(name, spec, colon)))
            c = self.peek()
            self.pos += 1
            if c == "]":
                return
            if c != ",":
                raise self.fail("expected ',' or ']' in list", name, self.pos - 1)

    def value(self, name: str, spec: Field | None, colon: bool) -> TextValue:
        c = self.peek()
        if c in ("{", "<"):
            if spec is not None and spec.kind is not Kind.MESSAGE:
                raise self.fail("a block given for a scalar field", name)
            if self.depth >= MAX_NESTING:
                raise self.fail(f"messages nested deeper than {MAX_NESTING}", name)
            self.pos += 1
            self.depth += 1
            fields = self.parse_fields("}" if c == "{" else ">", spec.message if spec else None)
            self.depth -= 1
            return fields
        if not colon:
            raise self.fail("expected ':' after field name", name)
        at = self.pos
        value = self.scalar(name)
        if spec is not None:
            _check_scalar(value, spec, name, self.base + at)
        return value

    def identifier(self) -> str:
        start = self.pos
        s = self.s
        if start >= self.n or s[start] not in _IDENT_START:
            found = repr(s[start]) if start < self.n else "end of text"
            raise self.fail(f"expected a field name, found {found}")
        end = start + 1
        while end < self.n and s[end] in _IDENT_CHARS:
            end += 1
        self.pos = end
        return s[start:end]

    def scalar(self, name: str) -> TextValue:
        c = self.peek()
        if c in ('"', "'"):
            return self.strings(name)
        if c in _IDENT_START:
            return Symbol(self.identifier())
        if c in _NUMBER_START:
            return self.number(name)
        found = repr(c) if c else "end of text"
        raise self.fail(f"expected a value, found {found}", name)

    def strings(self, name: str) -> bytes:
        """One or more adjacent quoted strings, concatenated (as Java's parser does)."""
        parts = [self.quoted(name)]
        while self.peek() in ('"', "'"):
            parts.append(self.quoted(name))
        return b"".join(parts)

    def quoted(self, name: str) -> bytes:
        s, quote, start = self.s, self.s[self.pos], self.pos
        i = start + 1
        while True:
            if i >= self.n or s[i] == "\n":
                raise self.fail("string missing ending quote", name, start)
            c = s[i]
            if c == quote:
                break
            i += 2 if c == "\\" else 1
        self.pos = i + 1
        return unescape(s[start + 1 : i].encode("latin-1"), field=name, offset=self.base + start + 1)

    def number(self, name: str) -> int:
        start = self.pos
        end = start + 1
        while end < self.n and self.s[end] in _NUMBER_CHARS:
            end += 1
        self.pos = end
        token = self.s[start:end]
        value = _java_integer(token)
        if value is None:
            raise self.fail(f"expected an integer, found {token!r}", name, start)
        return value


_MAX_SIGNIFICANT_DIGITS = {8: 22, 10: 20, 16: 16}  # digits of 2**64 - 1 in each base
_DIGITS = {8: frozenset("01234567"), 10: frozenset("0123456789"), 16: frozenset("0123456789abcdefABCDEF")}


def _java_integer(token: str) -> int | None:
    """Java TextFormat.parseInteger: optional '-', then 0x hex, leading-0 octal or decimal; else None."""
    negative = token.startswith("-")
    body = token[1:] if negative else token
    if body.startswith(("0x", "0X")):
        digits, base = body[2:], 16
    elif body.startswith("0") and len(body) > 1:
        digits, base = body[1:], 8
    else:
        digits, base = body, 10
    if not digits or any(ch not in _DIGITS[base] for ch in digits):
        return None
    if len(digits.lstrip("0")) > _MAX_SIGNIFICANT_DIGITS[base]:  # beyond 64 bits (and int()'s digit limit)
        return None
    value = int(digits, base)
    return -value if negative else value


def _check_scalar(value: TextValue, spec: Field, name: str, offset: int) -> None:
    kind = spec.kind
    if kind in (Kind.STRING, Kind.BYTES):
        if not isinstance(value, bytes):
            raise FormatError("expected a quoted string", field=name, offset=offset)
    elif kind in _INT_RANGES:
        lo, hi = _INT_RANGES[kind]
        if not isinstance(value, int) or not lo <= value <= hi:
            raise FormatError(f"expected an {kind.value} integer", field=name, offset=offset)
    elif kind is Kind.ENUM:
        _check_enum(value, spec, name, offset)
    else:
        raise FormatError("expected a { } block", field=name, offset=offset)


def _check_enum(value: TextValue, spec: Field, name: str, offset: int) -> None:
    names = spec.enum_values or {}
    if isinstance(value, Symbol):
        if value not in names:
            raise FormatError(f"unknown enum value {value!s}", field=name, offset=offset)
    elif isinstance(value, int):
        if value not in names.values():
            raise FormatError(f"unknown enum number {value}", field=name, offset=offset)
    else:
        raise FormatError("expected an enum value", field=name, offset=offset)


def _build_message(fields: list[TextField], schema: Schema, where: str, offset: int) -> TextMessage:
    """Convert checked pairs to typed values; strings are decoded as UTF-8 (invalid UTF-8 is an error)."""
    values: dict[str, list[object]] = {}
    for name, value in fields:
        spec = schema[name]
        values.setdefault(name, []).append(_convert(value, spec, f"{where}.{name}", offset))
    for name, spec in schema.items():
        if spec.required and name not in values:
            raise FormatError("missing required field", field=f"{where}.{name}", offset=offset)
    return TextMessage(values)


def _convert(value: TextValue, spec: Field, where: str, offset: int) -> object:
    if spec.kind is Kind.MESSAGE:
        assert isinstance(value, list) and spec.message is not None
        return _build_message(value, spec.message, where, offset)
    if spec.kind is Kind.STRING:
        assert isinstance(value, bytes)
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise FormatError("string is not valid UTF-8", field=where, offset=offset) from None
    if spec.kind is Kind.ENUM and isinstance(value, Symbol):
        return (spec.enum_values or {})[value]
    return value
