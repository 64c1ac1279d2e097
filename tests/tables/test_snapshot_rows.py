"""The snapshot's column-wise row builder gives exactly the rows built the straightforward way.

`LedgerBatchBuilder` (via `chunk_batches`, what the data source's reader runs on multiRead, and
`ledger_batches`, its path on single reads) decodes the v3 blobs it can
vouch for column-wise (`ledger_metadata_bulk`, ptars) and the rest with `ledger_metadata.parse_fields`, and
builds Arrow columns directly. The reference here builds one dict per ledger from `ledger_metadata.parse`'s
LedgerMetadata (its segment ranges from `LedgerMetadata.segment_ranges`) and converts with
`RecordBatch.from_pylist`: the two must agree value for value (Arrow equality, types included, and the Python
values of every cell), on valid blobs of every version, on blobs BookKeeper would reject, and on corrupted
bytes. (Not byte for byte: a column-wise array may carry an all-valid bitmap where from_pylist has none.)
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kazoo.protocol.states import ZnodeStat

from bkaudit.formats import ledger_metadata as lm
from bkaudit.formats.proto import DataFormats_pb2
from bkaudit.formats.wire import varint
from bkaudit.model.ledger import DigestType, LedgerMetadata, LedgerState, Segment
from bkaudit.tables.rows import (
    CTIME_MAX_MS,
    PULSAR_MANAGED_LEDGER_KEY,
    chunk_batches,
    ctime_micros,
    ledger_batches,
)
from bkaudit.tables.schemas import SOURCE_SCHEMA

HEADER3 = b"BookieMetadataFormatVersion\t3\n"


def reference_rows(znodes: Iterable[tuple[int, bytes, int, int, int]]) -> pa.RecordBatch:
    """One dict per ledger, as a reader of LedgerMetadata would write it."""
    rows = []
    for ledger_id, data, version, mzxid, ctime_ms in znodes:
        row: dict[str, Any] = {
            "ledger_id": ledger_id, "znode_version": version, "znode_mzxid": mzxid,
            "znode_ctime": ctime_ms * 1000,
        }  # fmt: skip
        try:
            md = lm.parse(data)
        except Exception as exc:
            detail = " ".join(str(exc).split()) or "no detail"
            row["parse_error"] = f"{type(exc).__name__}: {detail}"
            row["raw_metadata"] = base64.b64encode(data).decode("ascii")
            rows.append(row)
            continue
        custom = {key: text(value) for key, value in md.custom_metadata.items()}
        row.update(
            state=md.state.name, ensemble_size=md.ensemble_size, write_quorum=md.write_quorum,
            ack_quorum=md.ack_quorum, last_entry_id=md.last_entry_id, length=md.length,
            digest_type=md.digest_type.name, ctime=ctime_micros(ctime_ms if md.ctime is None else md.ctime),
            custom_metadata=list(custom.items()), managed_ledger=custom.get(PULSAR_MANAGED_LEDGER_KEY),
            segment_count=len(md.segments),
            segments=[
                {"segment_index": i, "first_entry_id": seg.first_entry_id, "last_entry_id": last,
                 "ensemble": list(seg.ensemble)}
                for i, seg, last in md.segment_ranges()
            ],
        )  # fmt: skip
        rows.append(row)
    return pa.RecordBatch.from_pylist(rows, schema=SOURCE_SCHEMA)


def text(value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(value).decode("ascii")


def assert_same_batches(blobs: list[bytes], batch_size: int) -> None:
    """Same batches; where the reference cannot build one, the builder fails there with the same error.

    """
    znodes = [(i * 7919, blob, i % 5, 10_000 + i, 1_600_000_000_000 + i) for i, blob in enumerate(blobs)]
    paths = {f"/l/{i}": z[0] for i, z in enumerate(znodes)}
    reads: Iterator[tuple[str, bytes | None, Any]] = (
        (f"/l/{i}", data, ZnodeStat(0, mzxid, ctime, 0, version, 0, 0, 0, len(data), 0, 0))
        for i, (_, data, version, mzxid, ctime) in enumerate(znodes)
    )
    for got in (ledger_batches(reads, dict(paths), batch_size=batch_size), chunked(znodes, batch_size)):
        assert_batches(got, znodes, batch_size)


def chunked(znodes: list[tuple[int, bytes, int, int, int]], size: int) -> Iterator[pa.RecordBatch]:
    """The reader's multiRead path: `chunk_batches` over chunks of `size` (so its batches end where
    `ledger_batches`'s do), each (ids, data, Stat tuples) as `read_chunks` answers."""
    ids = [z[0] for z in znodes]
    data = [z[1] for z in znodes]
    stats = [(0, mzxid, ctime, 0, version, 0, 0, 0, len(d), 0, 0) for _, d, version, mzxid, ctime in znodes]
    cuts = range(0, len(ids), size)
    chunks = [(ids[at : at + size], data[at : at + size], stats[at : at + size]) for at in cuts]
    return chunk_batches(chunks, batch_size=size)


def assert_batches(
    got: Iterator[pa.RecordBatch], znodes: list[tuple[int, bytes, int, int, int]], batch_size: int
) -> None:
    for start in range(0, len(znodes), batch_size):
        try:
            expected = reference_rows(znodes[start : start + batch_size])
        except Exception as exc:
            with pytest.raises(type(exc)):
                next(got)
            return
        batch = next(got)
        assert batch.schema == SOURCE_SCHEMA
        assert batch.equals(expected)
        assert _as_python(batch) == _as_python(expected)
    assert next(got, None) is None


def _as_python(batch: pa.RecordBatch) -> list[dict[str, Any]]:
    """The rows as Python values, timestamps as their integer microseconds: a ctime the column holds may lie
    past Python's datetime (year 9999), which `to_pylist` cannot build."""
    columns = [
        column.cast(pa.int64()) if pa.types.is_timestamp(column.type) else column for column in batch.columns
    ]
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names).to_pylist()


# -- generated blobs -----------------------------------------------------------------------------------------

BOOKIE = st.sampled_from(["10.0.0.12:3181", "10.0.0.13:3181", "bk-7.example:3181", "b@[x]:1"])
ODD_BOOKIE = st.sampled_from(["readonly", "bk 1:3181", "", "bk\u00e9:1"])
KEY = st.sampled_from([PULSAR_MANAGED_LEDGER_KEY, "application", "component", "", "\u00e9"])
VALUE = st.one_of(
    st.sampled_from([b"public/default/persistent/t", b"pulsar", b"", b"\xff\x00", b"\xed\xa0\x80"]),
    st.binary(max_size=8),
)


@st.composite
def valid_metadata(draw: st.DrawFn) -> LedgerMetadata:
    e = draw(st.integers(1, 5))
    wq = draw(st.integers(1, e))
    firsts = sorted(draw(st.sets(st.integers(-1, 2**40), min_size=1, max_size=3)))
    state = draw(st.sampled_from(LedgerState))
    closed = state is LedgerState.CLOSED
    return LedgerMetadata(
        ensemble_size=e, write_quorum=wq, ack_quorum=draw(st.integers(1, wq)), state=state,
        last_entry_id=draw(st.integers(-1, 2**62)) if closed else -1,
        length=draw(st.integers(0, 2**62)) if closed else 0,
        digest_type=draw(st.sampled_from(DigestType)), password=draw(st.binary(max_size=4)),
        segments=tuple(Segment(f, tuple(draw(st.lists(BOOKIE, min_size=e, max_size=e)))) for f in firsts),
        ctime=draw(st.none() | st.integers(-(2**40), 2**40)),
        custom_metadata=draw(st.dictionaries(KEY, VALUE, max_size=3)),
        ctoken=draw(st.integers(0, 2**40)),
    )  # fmt: skip


@st.composite
def raw_v3(draw: st.DrawFn) -> bytes:
    """A LedgerMetadataFormat with fields drawn freely: repeated keys, bad ids, sizes BookKeeper rejects,
    missing required fields, invalid UTF-8 where strings belong, absent optional fields."""
    msg = DataFormats_pb2.LedgerMetadataFormat()
    for name, values in (
        ("quorumSize", st.integers(-1, 4)), ("ensembleSize", st.integers(0, 4)),
        ("length", st.integers(-5, 2**40)), ("lastEntryId", st.integers(-5, 2**40)),
        ("state", st.sampled_from([1, 2, 3])), ("digestType", st.sampled_from([1, 2, 3, 4])),
        ("password", st.binary(max_size=3)), ("ackQuorumSize", st.integers(-1, 4)),
        ("ctime", st.integers(-(2**40), 2**40)), ("cToken", st.integers(0, 9)),
    ):  # fmt: skip
        if draw(st.integers(0, 9)) > 0:
            setattr(msg, name, draw(values))
    size = draw(st.integers(1, 4))
    for _ in range(draw(st.integers(0, 3))):
        members = draw(st.lists(st.one_of(BOOKIE, BOOKIE, ODD_BOOKIE), min_size=size - 1, max_size=size + 1))
        msg.segment.add(ensembleMember=members, firstEntryId=draw(st.integers(-2, 5)))
    for _ in range(draw(st.integers(0, 4))):
        msg.customMetadata.add(key=draw(KEY), value=draw(VALUE))
    body = msg.SerializePartialToString()
    if draw(st.booleans()):  # invalid UTF-8 in an ensemble member or a key
        body = body.replace(b"10.0.0.1", b"10.0.0\xff", 1).replace(b"component", b"c\xffmponent", 1)
    return HEADER3 + varint(len(body)) + body


@st.composite
def corrupted(draw: st.DrawFn) -> bytes:
    blob = lm.serialize(draw(valid_metadata()), draw(st.sampled_from([1, 2, 3])))
    at = draw(st.integers(0, len(blob)))
    how = draw(st.sampled_from(["truncate", "flip", "insert"]))
    if how == "truncate":
        return blob[:at]
    if how == "flip" and at < len(blob):
        return blob[:at] + bytes([blob[at] ^ draw(st.integers(1, 255))]) + blob[at + 1 :]
    return blob[:at] + draw(st.binary(min_size=1, max_size=3)) + blob[at:]


BLOB = st.one_of(
    st.builds(lm.serialize, valid_metadata(), st.sampled_from([1, 2, 3])),
    raw_v3(),
    corrupted(),
    st.binary(max_size=40),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(BLOB, min_size=1, max_size=12), st.integers(1, 5))
def test_builder_matches_reference_rows(blobs: list[bytes], batch_size: int) -> None:
    assert_same_batches(blobs, batch_size)


def test_builder_matches_reference_on_a_realistic_mix() -> None:
    """Thousands of ledgers across several flushes, with a few bad ones among them."""
    import random

    rng = random.Random(3)
    bookies = [f"10.0.0.{i}:3181" for i in range(10, 30)]
    blobs = []
    for i in range(3000):
        e, wq = rng.choice([(3, 2), (5, 3)])
        closed = rng.random() < 0.8
        firsts = (0, 100, 200)[: rng.randint(1, 3)]
        custom = {PULSAR_MANAGED_LEDGER_KEY: f"t/ns/persistent/topic-{i % 50}".encode()} if i % 4 else {}
        md = LedgerMetadata(
            ensemble_size=e, write_quorum=wq, ack_quorum=2,
            state=LedgerState.CLOSED if closed else LedgerState.OPEN,
            last_entry_id=rng.randrange(200, 10**6) if closed else -1,
            length=rng.randrange(10**9) if closed else 0, digest_type=DigestType.CRC32C, password=b"",
            segments=tuple(Segment(f, tuple(rng.sample(bookies, e))) for f in firsts),
            ctime=None if i % 10 == 0 else 1_700_000_000_000 + i, custom_metadata=custom,
        )  # fmt: skip
        blob = lm.serialize(md)
        if i % 97 == 0:
            blob = blob[: len(blob) // 2]
        blobs.append(blob)
    assert_same_batches(blobs, 1000)


def test_a_chunk_leaves_out_ledgers_deleted_since_listing() -> None:
    """A read whose stat is None (NoNode: deleted between listing and reading) is no row; the others keep
    their order and their own stat fields."""
    segments = (Segment(0, ("a:1", "b:1", "c:1")),)
    blob = lm.serialize(LedgerMetadata(3, 2, 2, LedgerState.CLOSED, 9, 10, DigestType.CRC32C, b"", segments))
    stat = (0, 77, 1_600_000_000_000, 0, 4, 0, 0, 0, len(blob), 0, 0)
    gone: list[Any] = [None]
    chunks = [([1, 2, 3], [blob, None, blob], [stat, None, stat]), ([4], gone, gone), ([5], [blob], [stat])]
    (batch,) = chunk_batches(chunks, batch_size=100)
    assert batch.column("ledger_id").to_pylist() == [1, 3, 5]
    assert batch.column("znode_mzxid").to_pylist() == [77] * 3
    assert batch.column("znode_version").to_pylist() == [4] * 3
    assert batch.num_rows == batch.column("parse_error").null_count


def test_an_empty_builder_flushes_an_empty_batch() -> None:
    from bkaudit.tables.rows import LedgerBatchBuilder

    batch = LedgerBatchBuilder().flush()
    assert batch.schema == SOURCE_SCHEMA and batch.num_rows == 0
    assert batch.equals(pa.RecordBatch.from_pylist([], schema=SOURCE_SCHEMA))


def test_the_memo_of_metadata_texts_never_changes_a_value(monkeypatch: Any) -> None:
    """Values are converted once and remembered; past the bound, and for long values, converted every time."""
    from bkaudit.tables import rows

    monkeypatch.setattr(rows, "_TEXT_OF", {})
    monkeypatch.setattr(rows, "_TEXT_OF_MAX", 2)
    values: list[bytes | None] = [b"a", b"\xff", None, b"a", b"c", b"x" * 300, b"\xff"]
    expected = ["a", "base64:/w==", None, "a", "c", "x" * 300, "base64:/w=="]
    assert rows._texts(values) == expected
    assert rows._TEXT_OF == {b"a": "a", b"\xff": "base64:/w=="}
    assert rows._texts(values) == expected
    monkeypatch.setattr(rows, "_TEXT_OF_MAX", 10)
    assert rows._texts([b"x" * 300, b"c"]) == ["x" * 300, "c"] and b"x" * 300 not in rows._TEXT_OF


def test_a_ctime_beyond_the_column_is_null_and_the_batch_survives() -> None:
    segments = (Segment(0, ("10.0.0.12:3181", "10.0.0.13:3181")),)
    ctimes = [CTIME_MAX_MS + 1, -(CTIME_MAX_MS + 1), CTIME_MAX_MS, 1_700_000_000_000, 2**62]
    blobs = [
        lm.serialize(LedgerMetadata(2, 2, 2, LedgerState.CLOSED, 9, 100, DigestType.CRC32C, b"", segments,
                                    ctime=c))
        for c in ctimes
    ]
    reads = ((f"/l/{i}", b, ZnodeStat(0, 1, 5, 0, 0, 0, 0, 0, len(b), 0, 0)) for i, b in enumerate(blobs))
    batch = next(ledger_batches(reads, {f"/l/{i}": i for i in range(len(blobs))}, batch_size=100))
    micros = batch.column("ctime").cast(pa.int64()).to_pylist()
    assert micros == [None, None, CTIME_MAX_MS * 1000, 1_700_000_000_000_000, None]
    assert batch.column("parse_error").to_pylist() == [None] * len(blobs)
    assert batch.column("last_entry_id").to_pylist() == [9] * len(blobs)
