"""Ledger metadata codec (bkaudit.formats.ledger_metadata) against BookKeeper's bytes.

Ground truth: /work/shared/vectors/ledger_metadata.json (BookKeeper's TestLedgerMetadataSerDe and bytes
verified against protobuf-java), the spec's worked examples, and an independent hand-written protobuf encoder
and text template below that follow LedgerMetadataSerDe's field rules.
"""

from __future__ import annotations

import base64
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bkaudit.errors import FormatError, QuorumError
from bkaudit.formats import ledger_metadata as lm
from bkaudit.formats.proto import DataFormats_pb2
from bkaudit.formats.textformat import escape_bytes
from bkaudit.model.ledger import DigestType, FrozenMap, LedgerMetadata, LedgerState, Segment
from tests import shared_vectors

VECTORS = shared_vectors.load("ledger_metadata.json")["vectors"]
HEADER3 = b"BookieMetadataFormatVersion\t3\n"
HEADER2 = b"BookieMetadataFormatVersion\t2\n"
V2_TEXT = next(v["text"] for v in VECTORS if v["name"] == "bk-test-v2")
OPEN_E3W2A2 = bytes.fromhex(next(v["hex"] for v in VECTORS if v["name"] == "open-e3w2a2"))


def vector_bytes(vector: dict[str, Any]) -> bytes:
    if "base64" in vector:
        return base64.b64decode(vector["base64"])
    if "hex" in vector:
        return bytes.fromhex(vector["hex"])
    return str(vector["text"]).encode("utf-8")


# -- independent reference encoders ------------------------------------------------------------------------


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int32/int64 are 10-byte varints
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def tag(field: int, wire: int) -> bytes:
    return varint(field << 3 | wire)


def vfield(field: int, value: int) -> bytes:
    return tag(field, 0) + varint(value)


def lfield(field: int, payload: bytes) -> bytes:
    return tag(field, 2) + varint(len(payload)) + payload


def reference_v3(md: LedgerMetadata) -> bytes:
    """LedgerMetadataSerDe v3 written by hand: field order by number, presence as BookKeeper sets it."""
    body = vfield(1, md.write_quorum) + vfield(2, md.ensemble_size) + vfield(3, md.length)
    body += vfield(4, md.last_entry_id) + vfield(5, md.state.value)
    for seg in md.segments:
        members = b"".join(lfield(1, b.encode("utf-8")) for b in seg.ensemble)
        body += lfield(6, members + vfield(2, seg.first_entry_id))
    body += vfield(7, md.digest_type.value) + lfield(8, md.password) + vfield(9, md.ack_quorum)
    if md.ctime is not None:
        body += vfield(10, md.ctime)
    for key, value in md.custom_metadata.items():
        body += lfield(11, lfield(1, key.encode("utf-8")) + lfield(2, value))
    body += vfield(12, md.ctoken)
    return HEADER3 + varint(len(body)) + body


def reference_v2(md: LedgerMetadata) -> bytes:
    """LedgerMetadataSerDe v2 as a text template (escaping is tested against Java's switch elsewhere)."""
    def q(raw: bytes) -> str:
        return '"' + escape_bytes(raw) + '"'

    lines = [f"quorumSize: {md.write_quorum}", f"ensembleSize: {md.ensemble_size}", f"length: {md.length}",
             f"lastEntryId: {md.last_entry_id}", f"state: {md.state.name}"]
    for seg in md.segments:
        lines.append("segment {")
        lines += [f"  ensembleMember: {q(b.encode())}" for b in seg.ensemble]
        lines += [f"  firstEntryId: {seg.first_entry_id}", "}"]
    digest = "HMAC" if md.digest_type is DigestType.MAC else md.digest_type.name
    lines += [f"digestType: {digest}", f"password: {q(md.password)}", f"ackQuorumSize: {md.ack_quorum}"]
    if md.ctime is not None:
        lines.append(f"ctime: {md.ctime}")
    for key, value in md.custom_metadata.items():
        lines += ["customMetadata {", f"  key: {q(key.encode())}", f"  value: {q(value)}", "}"]
    return HEADER2 + ("\n".join(lines) + "\n").encode("ascii")


def make(**changes: Any) -> LedgerMetadata:
    base = LedgerMetadata(
        ensemble_size=3, write_quorum=2, ack_quorum=2, state=LedgerState.OPEN, last_entry_id=-1, length=0,
        digest_type=DigestType.CRC32C, password=b"pwd",
        segments=(Segment(0, ("10.0.0.1:3181", "10.0.0.2:3181", "10.0.0.3:3181")),),
    )
    return base.evolve(**changes)


# -- vectors -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_vector_fields_and_byte_exact_round_trip(vector: dict[str, Any]) -> None:
    data = vector_bytes(vector)
    md = lm.parse(data)
    expect = vector["expect"]
    assert md.write_quorum == expect["write_quorum"]
    assert md.ensemble_size == expect["ensemble_size"]
    assert md.ack_quorum == expect["ack_quorum"]
    assert md.state.name == expect["state"]
    for key, attr in [("length", "length"), ("last_entry_id", "last_entry_id"), ("ctime", "ctime")]:
        if key in expect:
            assert getattr(md, attr) == expect[key]
    if "digest_type" in expect:
        assert md.digest_type.name == expect["digest_type"]
    if "password" in expect:
        assert md.password == expect["password"].encode()
    if "segments" in expect:
        assert [[s.first_entry_id, list(s.ensemble)] for s in md.segments] == expect["segments"]
    version = lm.format_version(data)
    assert data.startswith(f"BookieMetadataFormatVersion\t{version}\n".encode())
    assert lm.serialize(md, version) == data


def test_v3_vectors_match_reference_encoder() -> None:
    for vector in VECTORS:
        data = vector_bytes(vector)
        if lm.format_version(data) == 3:
            assert reference_v3(lm.parse(data)) == data


def test_v2_vector_matches_reference_template() -> None:
    assert reference_v2(lm.parse(V2_TEXT.encode())) == V2_TEXT.encode()


def test_v1_vector_reads_in_recovery_with_ack_quorum_equal_write_quorum() -> None:
    md = lm.parse(b"BookieMetadataFormatVersion\t1\n2\n3\n0\n"
                  b"0\t192.0.2.1:1234\t192.0.2.2:1234\t192.0.2.3:1234\n-102\tCLOSED")
    assert (md.state, md.ack_quorum, md.last_entry_id, md.password) == (LedgerState.IN_RECOVERY, 2, -1, b"")
    assert md.digest_type is lm.DEFAULT_DIGEST_TYPE


def test_spec_v3_header_bytes() -> None:
    assert OPEN_E3W2A2[:30].hex(" ") == (
        "42 6f 6f 6b 69 65 4d 65 74 61 64 61 74 61 46 6f 72 6d 61 74 56 65 72 73 69 6f 6e 09 33 0a")
    assert lm.serialize(make()) == OPEN_E3W2A2


def test_spec_closed_example_bytes() -> None:
    closed = lm.serialize(make(state=LedgerState.CLOSED, last_entry_id=9, length=1234))
    assert closed[30:42].hex(" ") == "47 08 02 10 03 18 d2 09 20 09 28 03"
    # the rest is the open example's body after its `28 01` (state) field
    open_rest = OPEN_E3W2A2[31 + OPEN_E3W2A2[31:].index(b"\x28\x01") + 2 :]
    assert closed[42:] == open_rest
    assert lm.parse(closed).last_entry_id == 9 and lm.parse(closed).length == 1234


def test_v2_with_ctime_vector() -> None:
    data = (V2_TEXT + "ctime: 1544002383075\n").encode()
    md = lm.parse(data)
    assert md.ctime == 1544002383075
    assert lm.serialize(md, 2) == data


def test_v2_password_needing_escapes_spec_vector() -> None:
    data = V2_TEXT.replace('password: "passwd"', 'password: "\\000\\001\\377\\"\\\'\\\\a\\n"').encode()
    md = lm.parse(data)
    assert md.password == b"\x00\x01\xff\"'\\a\n"
    assert lm.serialize(md, 2) == data


def test_v3_bk_vector_keeps_ctime_minus_one_and_ctoken() -> None:
    md = lm.parse(vector_bytes(VECTORS[0]))
    assert md.ctime == -1 and md.ctoken == 0
    assert lm.serialize(md).endswith(b"\x50" + b"\xff" * 9 + b"\x01\x60\x00")


# -- field mapping and read rules --------------------------------------------------------------------------


def test_mac_is_hmac_on_the_wire() -> None:
    md = make(digest_type=DigestType.MAC)
    assert b"\x38\x02" in lm.serialize(md)
    assert b"digestType: HMAC\n" in lm.serialize(md, 2)
    assert lm.parse(lm.serialize(md)).digest_type is DigestType.MAC
    assert lm.parse(lm.serialize(md, 2)).digest_type is DigestType.MAC


def build(**fields: Any) -> bytes:
    """A v3 blob from raw LedgerMetadataFormat fields (to test what BookKeeper's writer never produces)."""
    defaults: dict[str, Any] = {"quorumSize": 2, "ensembleSize": 3, "length": 0, "state": 1,
                                "segment": [{"firstEntryId": 0, "ensembleMember": ["a:1", "b:1", "c:1"]}]}
    defaults.update(fields)
    body = DataFormats_pb2.LedgerMetadataFormat(**{k: v for k, v in defaults.items() if v is not None})
    raw = body.SerializePartialToString()
    return HEADER3 + varint(len(raw)) + raw


def test_open_ledger_ignores_stored_last_entry_and_length() -> None:
    md = lm.parse(build(state=1, lastEntryId=5, length=77))
    assert (md.last_entry_id, md.length) == (-1, 0)
    md = lm.parse(build(state=2, lastEntryId=5, length=77))
    assert (md.state, md.last_entry_id, md.length) == (LedgerState.IN_RECOVERY, -1, 0)
    md = lm.parse(build(state=3, lastEntryId=5, length=77))
    assert (md.state, md.last_entry_id, md.length) == (LedgerState.CLOSED, 5, 77)


def test_digest_type_only_read_with_password() -> None:
    assert lm.parse(build(digestType=2)).digest_type is lm.DEFAULT_DIGEST_TYPE  # no password: ignored
    assert lm.parse(build(digestType=2)).password == b""
    assert lm.parse(build(password=b"")).digest_type is DigestType.CRC32  # protobuf default of the field
    assert lm.parse(build(password=b"x", digestType=4)).digest_type is DigestType.DUMMY


def test_absent_optional_fields() -> None:
    md = lm.parse(build())
    assert md.ack_quorum == md.write_quorum == 2
    assert md.ctime is None and md.ctoken == 0 and dict(md.custom_metadata) == {}


def test_custom_metadata_order_and_binary_values_kept() -> None:
    custom = FrozenMap((("zeta", b"\xff\x00"), ("alpha", b"pulsar"), ("", b"")))
    md = make(custom_metadata=custom, ctime=1700000000000, ctoken=42)
    for version in (3, 2):
        parsed = lm.parse(lm.serialize(md, version))
        assert tuple(parsed.custom_metadata.items()) == tuple(custom.items())
    assert reference_v3(md) == lm.serialize(md)
    assert reference_v2(md) == lm.serialize(md, 2)
    assert lm.parse(lm.serialize(md, 2)).ctoken == 0  # v2 never carries cToken


def test_trailing_bytes_after_v3_message_are_ignored_like_bookkeeper() -> None:
    assert lm.parse(OPEN_E3W2A2 + b"garbage") == lm.parse(OPEN_E3W2A2)


def test_v2_accepts_java_parser_tolerance() -> None:
    text = ("BookieMetadataFormatVersion\t2\n# comment\nensembleSize: 3 quorumSize: 2; length: 0\n"
            "state: 1 segment: { ensembleMember: 'a:1' ensembleMember: \"b:1\" ensembleMember: \"c:1\" "
            "firstEntryId: 0 } digestType: 3 password: 'p'")
    md = lm.parse(text.encode())
    assert (md.ensemble_size, md.digest_type, md.password, md.segments[0].ensemble[0]) == (
        3, DigestType.CRC32C, b"p", "a:1")


def test_v1_closed_and_multiple_ensembles() -> None:
    data = b"BookieMetadataFormatVersion\t1\n2\n2\n500\n0\ta:1\tb:1\n10\ta:1\tc:1\n19\tCLOSED"
    md = lm.parse(data)
    assert md.state is LedgerState.CLOSED and (md.last_entry_id, md.length) == (19, 500)
    assert [s.first_entry_id for s in md.segments] == [0, 10]
    assert lm.serialize(md, 1) == data
    crlf = lm.parse(data.replace(b"\n", b"\r\n").replace(b"Version\t1\r\n", b"Version\t1\n"))
    assert crlf == md


def test_format_version() -> None:
    assert [lm.format_version(vector_bytes(v)) for v in VECTORS] == [3, 3, 2, 1]


# -- rejections --------------------------------------------------------------------------------------------

BAD = [
    ("empty", b"", "header", 0),
    ("garbled header", b"BookieMetadataFormatVersoin\t3\n", "header", 24),
    ("no newline", b"BookieMetadataFormatVersion\t3", "header", 28),
    ("too many digits", b"BookieMetadataFormatVersion\t0000000003\n", "header", 28),
    ("not a number", b"BookieMetadataFormatVersion\tx\n", "header", 28),
    ("version 4", b"BookieMetadataFormatVersion\t4\n", "header", 28),
    ("version 0", b"BookieMetadataFormatVersion\t0\n", "header", 28),
    ("truncated varint", HEADER3 + b"\x80", "length", 30),
    ("malformed varint", HEADER3 + b"\xff\xff\xff\xff\xff\x01", "length", 30),
    ("negative length", HEADER3 + b"\xff\xff\xff\xff\x0f", "length", 30),
    ("length past end", HEADER3 + b"\x05\x08\x02", "length", 30),
    ("decode error", HEADER3 + b"\x02\x08\xff", "LedgerMetadataFormat", 31),
    ("missing required", HEADER3 + b"\x02\x08\x02", "ensembleSize", 31),
    ("missing firstEntryId", build(segment=[{"ensembleMember": ["a:1", "b:1", "c:1"]}]),
     "segment[0].firstEntryId", 31),
    ("no segments", build(segment=[]), "segment", 31),
    ("ensemble too small", build(segment=[{"firstEntryId": 0, "ensembleMember": ["a:1"]}]),
     "segment[0].ensembleMember", 31),
    ("segments not ascending", build(segment=[{"firstEntryId": 5, "ensembleMember": ["a:1", "b:1", "c:1"]},
                                              {"firstEntryId": 5, "ensembleMember": ["a:1", "b:1", "c:1"]}]),
     "segment[1].firstEntryId", 31),
    ("E < WQ", build(quorumSize=4), "quorumSize", 31),
    ("WQ < AQ", build(ackQuorumSize=3), "quorumSize", 31),
    ("AQ 0", build(ackQuorumSize=0), "quorumSize", 31),
    ("unknown state", HEADER3 + b"\x08\x08\x02\x10\x03\x18\x00\x28\x07", "state", 31),
    ("v2 unknown field", V2_TEXT.replace("length", "lenght").encode(), "lenght", 60),
    ("v2 bad enum", HEADER2 + b"state: SHUT", "state", 37),
    ("v2 missing required", HEADER2 + b"quorumSize: 1", "LedgerMetadataFormat.ensembleSize", 30),
    ("v2 int32 overflow", HEADER2 + b"quorumSize: 2147483648", "quorumSize", 42),
    ("v1 too short", b"BookieMetadataFormatVersion\t1\n2\n3\n", "v1", 30),
    ("v1 not a number", b"BookieMetadataFormatVersion\t1\n2\nthree\n0\n", "ensembleSize", 32),
    ("v1 huge number", b"BookieMetadataFormatVersion\t1\n2\n3\n" + b"9" * 5000 + b"\n", "length", 34),
    ("v2 huge number", HEADER2 + b"length: " + b"9" * 5000, "length", 38),
    ("v1 line without tab", b"BookieMetadataFormatVersion\t1\n2\n3\n0\n0\n", "segment", 36),
    ("v1 invalid utf-8", b"BookieMetadataFormatVersion\t1\n2\n3\n0\n0\t\xff", "v1", 38),
]


@pytest.mark.parametrize(("data", "field", "offset"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_rejects_with_field_and_offset(data: bytes, field: str, offset: int) -> None:
    with pytest.raises(FormatError) as err:
        lm.parse(data)
    assert err.value.field == field
    assert err.value.offset == offset


def test_rejects_invalid_utf8_bookie_id_in_v3() -> None:
    blob = build(segment=[{"firstEntryId": 0, "ensembleMember": ["a:1", "b:1", "c:1"]}])
    corrupt = blob.replace(b"c:1", b"\xff:1")
    with pytest.raises(FormatError) as err:
        lm.parse(corrupt)
    assert err.value.field == "segment[0].ensembleMember"


def test_serialize_refuses_what_parse_rejects() -> None:
    with pytest.raises(QuorumError):
        lm.serialize(make(ack_quorum=3))
    with pytest.raises(ValueError, match="ensembleSize"):
        lm.serialize(make(segments=(Segment(0, ("a:1",)),)))
    with pytest.raises(ValueError, match="version"):
        lm.serialize(make(), 4)


# -- properties --------------------------------------------------------------------------------------------

HOSTS = st.text(alphabet="abcxyz019.-", min_size=1, max_size=12)
# any id BookKeeper's BookieId accepts (not only host:port); invalid ones are covered by the FormatError tests
BOOKIES = st.one_of(
    st.builds("{}:{}".format, HOSTS, st.integers(0, 65535)),
    st.from_regex(r"[a-zA-Z0-9:-_.\-]{1,8}", fullmatch=True).filter(lambda t: t.lower() != "readonly"),
)
INT64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def metadata(draw: st.DrawFn) -> LedgerMetadata:
    e = draw(st.integers(1, 6))
    wq = draw(st.integers(1, e))
    firsts = sorted(draw(st.sets(st.integers(-1, 2**40), min_size=1, max_size=4)))
    state = draw(st.sampled_from(LedgerState))
    closed = state is LedgerState.CLOSED
    return LedgerMetadata(
        ensemble_size=e, write_quorum=wq, ack_quorum=draw(st.integers(1, wq)), state=state,
        last_entry_id=draw(st.integers(-1, 2**63 - 1)) if closed else -1,
        length=draw(st.integers(0, 2**63 - 1)) if closed else 0,
        digest_type=draw(st.sampled_from(DigestType)), password=draw(st.binary(max_size=24)),
        segments=tuple(Segment(f, tuple(draw(st.lists(BOOKIES, min_size=e, max_size=e)))) for f in firsts),
        ctime=draw(st.none() | INT64),
        custom_metadata=FrozenMap(draw(st.dictionaries(st.text(max_size=6), st.binary(max_size=6),
                                                       max_size=3))),
        ctoken=draw(INT64),
    )


@given(metadata())
def test_v3_round_trip_and_reference_bytes(md: LedgerMetadata) -> None:
    data = lm.serialize(md)
    assert data == reference_v3(md)
    assert lm.parse(data) == md
    assert lm.serialize(lm.parse(data)) == data


@given(metadata())
def test_v2_round_trip_drops_only_ctoken(md: LedgerMetadata) -> None:
    data = lm.serialize(md, 2)
    assert data == reference_v2(md)
    assert lm.parse(data) == md.evolve(ctoken=0)
    assert lm.serialize(lm.parse(data), 2) == data


@given(metadata())
def test_v1_round_trip_of_what_v1_can_hold(md: LedgerMetadata) -> None:
    md = md.evolve(ack_quorum=md.write_quorum, password=b"", digest_type=lm.DEFAULT_DIGEST_TYPE, ctime=None,
                   custom_metadata=FrozenMap(), ctoken=0,
                   segments=tuple(Segment(s.first_entry_id, tuple(f"b{i}:1" for i in range(md.ensemble_size)))
                                  for s in md.segments))
    if md.state is LedgerState.CLOSED and md.last_entry_id == -102:
        md = md.evolve(last_entry_id=-1)
    assert lm.parse(lm.serialize(md, 1)) == md


def test_v3_parse_is_lean() -> None:
    """The snapshot parses 10^5-10^6 blobs: guard against per-field Python overhead (10x margin)."""
    segments = (Segment(0, ("a:1", "b:1", "c:1")), Segment(100, ("a:1", "b:1", "d:1")))
    blobs = [lm.serialize(make(segments=segments))]
    blobs *= 20000
    start = time.perf_counter()
    for blob in blobs:
        lm.parse(blob)
    per_blob = (time.perf_counter() - start) / len(blobs)
    assert per_blob < 100e-6


# -- ensemble members must be BookKeeper BookieIds (BookieId.validateBookieId) ------------------------------
def _v3_with_members(members: list[str]) -> bytes:
    msg = DataFormats_pb2.LedgerMetadataFormat(
        quorumSize=2, ensembleSize=3, length=0, lastEntryId=-1, ackQuorumSize=2,
        state=DataFormats_pb2.LedgerMetadataFormat.CLOSED,
        digestType=DataFormats_pb2.LedgerMetadataFormat.CRC32C, password=b"p", cToken=0,
    )
    msg.segment.add(ensembleMember=members, firstEntryId=0)
    body = msg.SerializeToString()
    return b"BookieMetadataFormatVersion\t3\n" + bytes([len(body)]) + body


@pytest.mark.parametrize(
    "bad", ["bk 1:3181", "bk1:3181/x", "readonly", "ReadOnly", "bk\u00e91:3181", "bk1:3181,", "bk1{:3181", ""]
)
def test_an_ensemble_member_bookkeeper_cannot_parse_is_a_format_error(bad: str) -> None:
    """BookKeeper's BookieId.parse throws on these: it cannot open the ledger, so neither do we."""
    with pytest.raises(FormatError, match="BookieId"):
        lm.parse(_v3_with_members(["a:1", bad, "c:3"]))


def test_bookie_id_charset_is_bookkeepers_regex_with_its_range() -> None:
    # `[a-zA-Z0-9:-_.\-]+`: ':-_' is a range, so ;<=>?@[\]^ are accepted as BookKeeper accepts them
    md = lm.parse(_v3_with_members(["a:1", "b@[x]^;=?<>\\:2", "Bk-1.example_x:3181"]))
    assert md.segments[0].ensemble[1] == "b@[x]^;=?<>\\:2"


def test_v1_metadata_with_a_bad_bookie_id_is_a_format_error() -> None:
    with pytest.raises(FormatError, match="BookieId"):
        lm.parse(b"BookieMetadataFormatVersion\t1\n2\n3\n0\n0\ta:1\tb c:2\td:3\n")


def test_a_row_for_an_unopenable_ledger_carries_its_parse_error() -> None:
    """The snapshot row (what the checker turns into `metadata_unparseable`) for an invalid member."""
    from bkaudit.tables.rows import LedgerBatchBuilder

    builder = LedgerBatchBuilder()
    builder.add(7, _v3_with_members(["a:1", "readonly", "c:3"]), 0, 1, 0)
    builder.add(8, _v3_with_members(["a:1", "b:2", "c:3"]), 0, 1, 0)
    row, good = builder.flush().to_pylist()
    assert builder.unparseable == 1
    assert row["ledger_id"] == 7 and "BookieId 'readonly' is not valid" in row["parse_error"]
    assert row["segments"] is None and row["raw_metadata"]
    assert good["ledger_id"] == 8 and good["parse_error"] is None and good["segments"][0]["ensemble"] == [
        "a:1", "b:2", "c:3"
    ]


def test_accepted_bookie_ids_are_remembered_but_bad_ones_never_are(monkeypatch: pytest.MonkeyPatch) -> None:
    """The memo of accepted ids (a snapshot decodes millions of ensembles naming a few hundred bookies) must
    not change any verdict: a bad id next to remembered good ones is still refused, every time, and once the
    memo is full new ids are still checked one by one."""
    from bkaudit.formats import bookie_id

    monkeypatch.setattr(bookie_id, "_ACCEPTED", set())
    monkeypatch.setattr(bookie_id, "_ACCEPTED_MAX", 4)
    lm.parse(_v3_with_members(["a:1", "b:2", "c:3"]))
    assert {"a:1", "b:2", "c:3"} == bookie_id._ACCEPTED
    for _ in range(2):
        with pytest.raises(FormatError, match="BookieId"):
            lm.parse(_v3_with_members(["a:1", "b:2", "bad id"]))
    assert "bad id" not in bookie_id._ACCEPTED
    lm.parse(_v3_with_members(["d:4", "e:5", "f:6"]))  # the memo is full past 4: still accepted, checked
    assert len(bookie_id._ACCEPTED) <= 6
    lm.parse(_v3_with_members(["g:7", "h:8", "i:9"]))
    assert not {"g:7", "h:8", "i:9"} & bookie_id._ACCEPTED
    with pytest.raises(FormatError, match="BookieId"):
        lm.parse(_v3_with_members(["g:7", "readonly", "i:9"]))
