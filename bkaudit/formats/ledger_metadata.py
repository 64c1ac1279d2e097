"""Ledger metadata znode codec, byte-compatible with BookKeeper's `LedgerMetadataSerDe`.

Every blob starts with `BookieMetadataFormatVersion\\t<n>\\n` and then holds
- v3 (BookKeeper >= 4.9, the default): a varint32 length and a binary `LedgerMetadataFormat`;
- v2 (4.2-4.8): the protobuf TextFormat of `LedgerMetadataFormat` (never with cToken);
- v1 (4.0/4.1): plain text lines (quorum, ensemble size, length, one line per ensemble, a CLOSED line).

All three versions are decoded into a `LedgerMetadataFormat` protobuf message first and read by one
function (into plain fields: `parse_fields`, what the snapshot reads; `parse` wraps them in a
`LedgerMetadata`), so the read rules below hold for every version and both entry points:
- only a CLOSED ledger takes `lastEntryId` and `length` (others read as -1 and 0, as BookKeeper does);
- `digestType` is read only when `password` is present. Without a password (v1 ledgers) BookKeeper has no
  digest type at all; we report `CRC32` with an empty password: it is the protobuf default of the field
  (what BookKeeper reads when a password is present without a digest type) and the client's default;
- an absent `ackQuorumSize` means the write quorum; an absent `ctime` is None (use the znode's ctime).

Writers (v3 and v2, and v1 for completeness) set the fields exactly as BookKeeper does: quorumSize,
ensembleSize, length and lastEntryId always, state, segments, digestType and password always (empty password
if none), ackQuorumSize always, ctime only when present, customMetadata in order, and cToken always in v3.
So parse -> serialize in the blob's own version reproduces BookKeeper's bytes.

Validation: bytes that BookKeeper could not have produced raise FormatError naming the field and offset:
a bad header or version, a truncated or oversized length, protobuf decode errors, missing required fields,
no segments, segment first entry ids not strictly ascending, an ensemble whose size is not ensembleSize,
and quorum sizes outside E >= WQ >= AQ >= 1. BookKeeper's builder checks all of these but AQ >= 1 (it
accepts AQ <= 0, which no client can create); we reject it too because the quorum math downstream cannot
be evaluated on it. Trailing bytes after a v3 message are ignored, as BookKeeper's reader does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.protobuf.message import DecodeError

from bkaudit.errors import FormatError
from bkaudit.formats import textformat
from bkaudit.formats.bookie_id import first_invalid_reason
from bkaudit.formats.proto import DataFormats_pb2
from bkaudit.formats.textformat import Field, Kind, Symbol
from bkaudit.formats.wire import varint
from bkaudit.model.ledger import DigestType, FrozenMap, LedgerMetadata, LedgerState, Segment

__all__ = [
    "CURRENT_VERSION",
    "DEFAULT_DIGEST_TYPE",
    "HEADER_PREFIX",
    "SUPPORTED_VERSIONS",
    "format_version",
    "parse",
    "parse_fields",
    "serialize",
]

HEADER_PREFIX = b"BookieMetadataFormatVersion\t"
CURRENT_VERSION = 3
SUPPORTED_VERSIONS = (1, 2, 3)
DEFAULT_DIGEST_TYPE = DigestType.CRC32
_MAX_VERSION_DIGITS = 10
_V1_CLOSED_TAG = "CLOSED"
_V1_IN_RECOVERY_ENTRY_ID = -102
_MESSAGE = "LedgerMetadataFormat"
_CLOSED = LedgerState.CLOSED.value

_LMF: Any = DataFormats_pb2.LedgerMetadataFormat
_EMPTY_CUSTOM = FrozenMap()
# Hot-path lookups: Enum(value) calls cost more than the protobuf decode itself.
_STATE_OF = {s.value: s for s in LedgerState}
_DIGEST_OF = {d.value: d for d in DigestType}
_HEADERS = {v: HEADER_PREFIX + str(v).encode("ascii") + b"\n" for v in SUPPORTED_VERSIONS}
_V3_HEADER = _HEADERS[3]
_V3_BODY = len(_V3_HEADER)

# What `parse_fields` returns: LedgerMetadata's fields in order, state and digest type as protobuf numbers,
# segments as (first entry id, members) and custom metadata as (key, value) pairs in stored order.
Fields = tuple[int, int, int, int, int, int, int, bytes, list[tuple[int, list[str]]], int | None,
               list[tuple[str, bytes]], int]


# ------------------------------------------------------------------------------------------------------------
# Public API
# ------------------------------------------------------------------------------------------------------------


def format_version(data: bytes) -> int:
    """The metadata format version in the blob's header (1, 2 or 3); FormatError if garbled or unsupported."""
    return _read_header(bytes(data))[0]


def parse(data: bytes) -> LedgerMetadata:
    """Decode a ledger metadata znode (versions 1-3); FormatError on anything BookKeeper would reject."""
    e, wq, aq, state, last, length, digest, password, segments, ctime, custom, ctoken = parse_fields(data)
    return LedgerMetadata(
        e, wq, aq, _STATE_OF[state], last, length, _DIGEST_OF[digest], password,
        tuple([Segment(first, tuple(members)) for first, members in segments]), ctime,
        FrozenMap(tuple(custom)) if custom else _EMPTY_CUSTOM, ctoken,
    )  # fmt: skip


def parse_fields(data: bytes) -> Fields:
    """`parse` without the value objects, for bulk readers: the same checks, errors and read rules.

    Why: the snapshot decodes every ledger of a cluster, and building LedgerMetadata, Segment and FrozenMap
    objects only to take them apart into columns cost more than the decode. Custom metadata keys may repeat
    here (FrozenMap keeps the first position and the last value).
    """
    buf = bytes(data)
    if buf.startswith(_V3_HEADER):
        return _fields(*_decode_v3(buf, _V3_BODY))
    version, pos = _read_header(buf)
    if version == 3:
        return _fields(*_decode_v3(buf, pos))
    if version == 2:
        return _fields(_decode_v2(buf, pos), pos)
    return _fields(_decode_v1(buf, pos), pos)


def serialize(metadata: LedgerMetadata, version: int = CURRENT_VERSION) -> bytes:
    """Encode as BookKeeper's `LedgerMetadataSerDe.serialize` does for `version` (3 by default, 2 or 1).

    v2 drops cToken; v1 keeps only quorum, ensemble size, length, ensembles and state (as BookKeeper).
    Raises ValueError (QuorumError for quorum sizes) for metadata that `parse` would reject.
    """
    _check_writable(metadata)
    if version == 3:
        body: bytes = _to_proto(metadata, include_ctoken=True).SerializeToString()
        return _HEADERS[3] + varint(len(body)) + body
    if version == 2:
        text = textformat.print_message(_text_fields(_to_proto(metadata, include_ctoken=False)))
        return _HEADERS[2] + text.encode("ascii")
    if version == 1:
        return _HEADERS[1] + _v1_text(metadata).encode("utf-8")
    raise ValueError(f"unsupported ledger metadata format version {version} (expected 1, 2 or 3)")


# ------------------------------------------------------------------------------------------------------------
# Header and v3
# ------------------------------------------------------------------------------------------------------------


def _read_header(buf: bytes) -> tuple[int, int]:
    """(version, body offset). Like BookKeeper: under 10 characters before '\\n', then Integer.parseInt."""
    if not buf.startswith(HEADER_PREFIX):
        at = next((i for i, (a, b) in enumerate(zip(buf, HEADER_PREFIX, strict=False)) if a != b), len(buf))
        raise FormatError("ledger metadata header corrupt", field="header", offset=at)
    start = len(HEADER_PREFIX)
    end = buf.find(b"\n", start, start + _MAX_VERSION_DIGITS)
    if end < 0:
        raise FormatError("unable to find end of version number", field="header", offset=start)
    version = _java_int(buf[start:end].decode("latin-1"), 32)
    if version is None:
        raise FormatError(f"unparseable version number {buf[start:end]!r}", field="header", offset=start)
    if version not in SUPPORTED_VERSIONS:
        raise FormatError(f"unsupported metadata format version {version} (expected 1..3)",
                          field="header", offset=start)
    return version, end + 1


def _read_varint32(buf: bytes, pos: int) -> tuple[int, int]:
    """BookKeeper's readRawVarint32: at most 5 bytes, 32-bit wrap-around; a negative size is corrupt."""
    if pos + 1 < len(buf) and buf[pos + 1] < 0x80:  # a ledger's metadata is under 16 KiB: 1 or 2 bytes
        first = buf[pos]
        if first < 0x80:
            return first, pos + 1
        return (first & 0x7F) | buf[pos + 1] << 7, pos + 2
    start = pos
    result = 0
    for shift in range(0, 35, 7):
        if pos >= len(buf):
            raise FormatError("truncated length varint", field="length", offset=start)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            result &= 0xFFFFFFFF
            if result >= 1 << 31:
                raise FormatError("negative message length", field="length", offset=start)
            return result, pos
    raise FormatError("malformed varint32 length", field="length", offset=start)


def _decode_v3(buf: bytes, pos: int) -> tuple[Any, int]:
    """(LedgerMetadataFormat, offset of its first byte) from the length-delimited body at `pos`."""
    size, start = _read_varint32(buf, pos)
    end = start + size
    if end > len(buf):
        raise FormatError(f"message length {size} runs past the end of the data ({len(buf) - start} bytes)",
                          field="length", offset=pos)
    try:
        msg = _LMF.FromString(buf[start:end])
    except DecodeError as exc:
        raise FormatError(f"protobuf decode error: {exc}", field=_MESSAGE, offset=start) from None
    if not msg.IsInitialized():
        missing = msg.FindInitializationErrors()
        raise FormatError("missing required field", field=missing[0] if missing else _MESSAGE, offset=start)
    return msg, start


# ------------------------------------------------------------------------------------------------------------
# v2 (TextFormat)
# ------------------------------------------------------------------------------------------------------------

_STATES = {"OPEN": 1, "IN_RECOVERY": 2, "CLOSED": 3}
_DIGESTS = {"CRC32": 1, "HMAC": 2, "CRC32C": 3, "DUMMY": 4}
_SEGMENT_SCHEMA = {
    "ensembleMember": Field(Kind.STRING, repeated=True),
    "firstEntryId": Field(Kind.INT64, required=True),
}
_CUSTOM_SCHEMA = {"key": Field(Kind.STRING), "value": Field(Kind.BYTES)}
_SCHEMA = {
    "quorumSize": Field(Kind.INT32, required=True),
    "ensembleSize": Field(Kind.INT32, required=True),
    "length": Field(Kind.INT64, required=True),
    "lastEntryId": Field(Kind.INT64),
    "state": Field(Kind.ENUM, required=True, enum_values=_STATES),
    "segment": Field(Kind.MESSAGE, repeated=True, message=_SEGMENT_SCHEMA),
    "digestType": Field(Kind.ENUM, enum_values=_DIGESTS),
    "password": Field(Kind.BYTES),
    "ackQuorumSize": Field(Kind.INT32),
    "ctime": Field(Kind.INT64),
    "customMetadata": Field(Kind.MESSAGE, repeated=True, message=_CUSTOM_SCHEMA),
    "cToken": Field(Kind.INT64),
}
_SCALARS = ("quorumSize", "ensembleSize", "length", "lastEntryId", "state", "digestType", "password",
            "ackQuorumSize", "ctime", "cToken")


def _decode_v2(buf: bytes, pos: int) -> Any:
    """TextFormat -> LedgerMetadataFormat (schema-checked: unknown fields are errors, as in Java's parser)."""
    text = textformat.parse_message(buf[pos:], _SCHEMA, offset=pos, name=_MESSAGE)
    msg = _LMF()
    for name in _SCALARS:
        if text.has(name):
            value = text.raw(name) if name == "password" else text.integer(name)
            setattr(msg, name, value)
    for seg in text.messages("segment"):
        members, first = seg.strings("ensembleMember"), seg.integer("firstEntryId")
        msg.segment.add(ensembleMember=members, firstEntryId=first)
    for entry in text.messages("customMetadata"):
        msg.customMetadata.add(key=entry.string("key"), value=entry.raw("value"))
    return msg


def _text_fields(msg: Any) -> list[tuple[str, textformat.PrintValue]]:
    """A message's set fields in field-number order, as protobuf-java's TextFormat printer walks them."""
    fields: list[tuple[str, textformat.PrintValue]] = []
    for fd, value in msg.ListFields():
        values = list(value) if fd.is_repeated else [value]
        for v in values:
            fields.append((fd.name, _text_value(fd, v)))
    return fields


def _text_value(fd: Any, value: Any) -> textformat.PrintValue:
    if fd.type == fd.TYPE_MESSAGE:
        return _text_fields(value)
    if fd.type == fd.TYPE_ENUM:
        return Symbol(fd.enum_type.values_by_number[value].name)
    if isinstance(value, (str, bytes, int)):
        return value
    raise TypeError(f"unexpected value for {fd.name}")


# ------------------------------------------------------------------------------------------------------------
# v1 (plain text)
# ------------------------------------------------------------------------------------------------------------


def _decode_v1(buf: bytes, pos: int) -> Any:
    """BookKeeper's parseVersion1Config, reading into a LedgerMetadataFormat (no password, AQ = WQ)."""
    lines = _java_lines(_utf8(buf[pos:], pos), pos)
    if len(lines) < 3:
        raise FormatError("v1 metadata needs quorum, ensemble size and length lines", field="v1", offset=pos)
    msg = _LMF(state=_STATES["OPEN"])
    msg.quorumSize = _v1_int(lines[0], 32, "quorumSize")
    msg.ensembleSize = _v1_int(lines[1], 32, "ensembleSize")
    msg.length = _v1_int(lines[2], 64, "length")
    for offset, line in lines[3:]:
        parts = _java_split_tab(line)
        if len(parts) < 2:
            raise FormatError("expected '<firstEntryId>\\t<bookie>...' or '<lastEntryId>\\tCLOSED'",
                              field="segment", offset=offset)
        if parts[1] == _V1_CLOSED_TAG:
            _v1_closed(msg, _v1_int((offset, parts[0]), 64, "lastEntryId"))
            break
        first = _v1_int((offset, parts[0]), 64, "firstEntryId")
        msg.segment.add(firstEntryId=first, ensembleMember=parts[1:])
    return msg


def _v1_closed(msg: Any, last_entry_id: int) -> None:
    if last_entry_id == _V1_IN_RECOVERY_ENTRY_ID:
        msg.state = _STATES["IN_RECOVERY"]
    else:
        msg.state = _STATES["CLOSED"]
        msg.lastEntryId = last_entry_id


def _v1_int(line: tuple[int, str], bits: int, field: str) -> int:
    value = _java_int(line[1], bits)
    if value is None:
        raise FormatError(f"not a {bits}-bit integer: {line[1][:40]!r}", field=field, offset=line[0])
    return value


def _v1_text(md: LedgerMetadata) -> str:
    lines = [str(md.write_quorum), str(md.ensemble_size), str(md.length)]
    lines += ["\t".join((str(s.first_entry_id), *s.ensemble)) for s in md.segments]
    text = "\n".join(lines) + "\n"
    if md.state is LedgerState.IN_RECOVERY:
        text += f"{_V1_IN_RECOVERY_ENTRY_ID}\t{_V1_CLOSED_TAG}"
    elif md.state is LedgerState.CLOSED:
        text += f"{md.last_entry_id}\t{_V1_CLOSED_TAG}"
    return text


def _utf8(raw: bytes, offset: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError("invalid UTF-8", field="v1", offset=offset + exc.start) from None


def _java_lines(text: str, offset: int) -> list[tuple[int, str]]:
    """(offset, line) pairs as Java's BufferedReader.readLine yields them (\\n, \\r or \\r\\n terminators)."""
    lines: list[tuple[int, str]] = []
    i, n = 0, len(text)
    while i < n:
        j = i
        while j < n and text[j] not in "\r\n":
            j += 1
        lines.append((offset + i, text[i:j]))
        i = j + (2 if text.startswith("\r\n", j) else 1)
    return lines


def _java_split_tab(line: str) -> list[str]:
    """Java's String.split("\\t"): trailing empty strings removed (but "" splits to [""])."""
    if not line:
        return [""]
    parts = line.split("\t")
    while parts and not parts[-1]:
        parts.pop()
    return parts


def _java_int(text: str, bits: int) -> int | None:
    """Java Integer/Long.parseLong on ASCII: optional sign and decimal digits, within the type's range."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not digits.isascii() or not digits.isdigit() or len(digits.lstrip("0")) > 20:
        return None
    value = int(text)
    limit = 1 << (bits - 1)
    return value if -limit <= value < limit else None


# ------------------------------------------------------------------------------------------------------------
# Protobuf <-> LedgerMetadata
# ------------------------------------------------------------------------------------------------------------


def _fields(msg: Any, offset: int) -> Fields:
    """LedgerMetadataSerDe.decodeFormat plus LedgerMetadataBuilder.build's checks, for every version."""
    closed = msg.state == _CLOSED
    has_password = msg.HasField("password")
    e, wq = msg.ensembleSize, msg.quorumSize
    aq = msg.ackQuorumSize if msg.HasField("ackQuorumSize") else wq
    segments = [(s.firstEntryId, s.ensembleMember[:]) for s in msg.segment]
    custom = [(c.key, c.value) for c in msg.customMetadata]
    problem = _problem(e, wq, aq, segments, custom)
    if problem is not None:
        raise FormatError(problem[1], field=problem[0], offset=offset)
    return (
        e, wq, aq, msg.state, msg.lastEntryId if closed else -1, msg.length if closed else 0,
        msg.digestType if has_password else DEFAULT_DIGEST_TYPE.value, msg.password if has_password else b"",
        segments, msg.ctime if msg.HasField("ctime") else None, custom, msg.cToken,
    )  # fmt: skip


def _problem(e: int, wq: int, aq: int, segments: Sequence[tuple[int, Sequence[str]]],
             custom: Sequence[tuple[str, bytes]]) -> tuple[str, str] | None:
    """(field, message) for the first invariant the metadata breaks, or None."""
    if not e >= wq >= aq >= 1:
        return "quorumSize", f"quorum sizes must satisfy E >= WQ >= AQ >= 1, got E={e} WQ={wq} AQ={aq}"
    if not segments:
        return "segment", "there must be at least one ensemble in the ledger"
    previous: int | None = None
    for i, (first, ensemble) in enumerate(segments):
        if previous is not None and first <= previous:
            return f"segment[{i}].firstEntryId", f"first entry id {first} not above {previous}"
        if len(ensemble) != e:
            return f"segment[{i}].ensembleMember", f"{len(ensemble)} bookies but ensembleSize {e}"
        reason = first_invalid_reason(ensemble)
        if reason is not None:  # BookieId.parse throws: BookKeeper cannot open this ledger
            if not all(type(b) is str for b in ensemble):
                return f"segment[{i}].ensembleMember", "bookie id is not valid UTF-8"
            return f"segment[{i}].ensembleMember", reason
        previous = first
    for key, _ in custom:  # a loop, not all(genexpr): this runs for every ledger of a snapshot
        if type(key) is not str:
            return "customMetadata.key", "key is not valid UTF-8"
    return None


def _check_writable(md: LedgerMetadata) -> None:
    md.validate()
    segments = [(s.first_entry_id, s.ensemble) for s in md.segments]
    problem = _problem(
        md.ensemble_size, md.write_quorum, md.ack_quorum, segments, list(md.custom_metadata.items())
    )
    if problem is not None:
        raise ValueError(f"cannot serialize ledger metadata: {problem[1]} ({problem[0]})")


def _to_proto(md: LedgerMetadata, *, include_ctoken: bool) -> Any:
    """LedgerMetadataSerDe.buildLedgerMetadataFormat: which fields are set decides the bytes."""
    msg = _LMF(
        quorumSize=md.write_quorum,
        ackQuorumSize=md.ack_quorum,
        ensembleSize=md.ensemble_size,
        length=md.length,
        lastEntryId=md.last_entry_id,
        state=md.state.value,
        digestType=md.digest_type.value,
        password=md.password,
    )
    if md.ctime is not None:
        msg.ctime = md.ctime
    for key, value in md.custom_metadata.items():
        msg.customMetadata.add(key=key, value=value)
    for seg in md.segments:
        msg.segment.add(firstEntryId=seg.first_entry_id, ensembleMember=seg.ensemble)
    if include_ctoken:
        msg.cToken = md.ctoken
    return msg
