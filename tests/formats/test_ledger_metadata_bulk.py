"""The column-wise decoder takes exactly the rows it can vouch for, and hands every other row back.

Equality of the rows it makes with the reference is tests/tables/test_snapshot_rows.py's property; here: that
BookKeeper's own v3 bytes and every canonical blob take the fast path (or the speed-up would silently vanish),
and that each kind of blob it must not vouch for goes to `parse_fields`, neighbours unaffected.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bkaudit.formats import ledger_metadata as lm
from bkaudit.formats import ledger_metadata_bulk as bulk
from bkaudit.formats.proto import DataFormats_pb2
from bkaudit.formats.wire import varint
from bkaudit.model.ledger import DigestType, LedgerMetadata, LedgerState, Segment
from bkaudit.tables.rows import LedgerBatchBuilder
from tests import shared_vectors
from tests.formats.test_ledger_metadata import vector_bytes
from tests.tables.test_snapshot_rows import reference_rows, valid_metadata

HEADER3 = b"BookieMetadataFormatVersion\t3\n"
VECTORS = shared_vectors.load("ledger_metadata.json")["vectors"]


def _good(i: int = 0, **changes: Any) -> LedgerMetadata:
    fields: dict[str, Any] = dict(
        ensemble_size=3, write_quorum=2, ack_quorum=2, state=LedgerState.CLOSED, last_entry_id=99 + i,
        length=1000, digest_type=DigestType.CRC32C, password=b"pw",
        segments=(Segment(0, ("10.0.0.1:3181", "10.0.0.2:3181", "10.0.0.3:3181")),
                  Segment(50, ("10.0.0.1:3181", "10.0.0.4:3181", "10.0.0.3:3181"))),
        ctime=1_700_000_000_000 + i, custom_metadata={"pulsar/managed-ledger": b"t/ns/persistent/x"},
    )  # fmt: skip
    fields.update(changes)
    return LedgerMetadata(**fields)


def _body(md: LedgerMetadata) -> bytes:
    blob = lm.serialize(md)
    size, start = lm._read_varint32(blob, len(HEADER3))
    return blob[start : start + size]


def _wrap(body: bytes) -> bytes:
    return HEADER3 + varint(len(body)) + body


def _message(**fields: Any) -> Any:
    msg = DataFormats_pb2.LedgerMetadataFormat(
        quorumSize=2, ensembleSize=3, length=0, state=1, password=b"", digestType=3, ackQuorumSize=2
    )
    msg.segment.add(firstEntryId=0, ensembleMember=["a:1", "b:1", "c:1"])
    for name, value in fields.items():
        setattr(msg, name, value)
    return msg


def _repeated_key() -> Any:
    msg = _message()
    msg.customMetadata.add(key="k", value=b"1")
    msg.customMetadata.add(key="k", value=b"2")  # canonical bytes; LedgerMetadata keeps the last value
    return msg


def _rows(blobs: list[bytes]) -> list[dict[str, Any]]:
    builder = LedgerBatchBuilder()
    for i, blob in enumerate(blobs):
        builder.add(i, blob, 1, 2, 1_600_000_000_000)
    return builder.flush().to_pylist()  # type: ignore[no-any-return]


def _expected(blobs: list[bytes]) -> list[dict[str, Any]]:
    return reference_rows([(i, b, 1, 2, 1_600_000_000_000) for i, b in enumerate(blobs)]).to_pylist()


def test_bookkeepers_own_v3_bytes_take_the_column_wise_path() -> None:
    blobs = [vector_bytes(v) for v in VECTORS]
    decoded = bulk.decode(blobs)
    assert decoded is not None
    v3 = [i for i, b in enumerate(blobs) if b.startswith(HEADER3)]
    assert len(v3) >= 2 and decoded.taken.tolist() == v3
    assert decoded.rest.tolist() == [i for i in range(len(blobs)) if i not in v3]  # v2 and v1: parse_fields
    assert _rows(blobs) == _expected(blobs)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(valid_metadata(), min_size=1, max_size=8))
def test_every_canonical_v3_blob_is_taken(mds: list[LedgerMetadata]) -> None:
    """What BookKeeper (and `serialize`) writes is canonical; only a bookie id or key the builder refuses,
    or a repeated custom key, sends a valid-looking ledger to parse_fields."""
    blobs = [lm.serialize(md) for md in mds]
    decoded = bulk.decode(blobs)
    assert decoded is not None
    assert decoded.taken.tolist() == list(range(len(blobs)))
    assert decoded.fields.num_rows == len(blobs)


def test_a_batch_of_one_thousand_pulsar_ledgers_is_taken_whole() -> None:
    blobs = [lm.serialize(_good(i)) for i in range(1000)]
    decoded = bulk.decode(blobs)
    assert decoded is not None and len(decoded.taken) == 1000 and not len(decoded.rest)
    assert _rows(blobs) == _expected(blobs)


NOT_TAKEN = {
    "unknown field": _wrap(_body(_good()) + b"\xa0\x01\x05"),
    "scalar twice": _wrap(_body(_good()) + b"\x08\x02"),
    "fields out of order": _wrap(b"\x28\x01" + _message().SerializeToString().replace(b"\x28\x01", b"", 1)),
    "unknown state": _wrap(_message().SerializeToString().replace(b"\x28\x01", b"\x28\x09", 1)),
    "unknown digest type": _wrap(_message().SerializeToString().replace(b"\x38\x03", b"\x38\x09", 1)),
    "no state": _wrap(_message().SerializePartialToString().replace(b"\x28\x01", b"", 1)),
    "trailing bytes": lm.serialize(_good()) + b"\x00\x01",
    "invalid UTF-8 member": _wrap(_message().SerializeToString().replace(b"b:1", b"\xff:1")),
    "BookKeeper-invalid member": _wrap(_message().SerializeToString().replace(b"b:1", b"b 1")),
    "repeated custom key": _wrap(_repeated_key().SerializeToString()),
    "E below WQ": _wrap(_message(ensembleSize=1).SerializeToString()),
    "AQ zero": _wrap(_message(ackQuorumSize=0).SerializeToString()),
    "no segment": _wrap(_message().SerializeToString().split(b"\x32", 1)[0]),
    "ensemble of the wrong size": _wrap(_message(ensembleSize=2, quorumSize=2).SerializeToString()),
    "first entry ids not rising": lm.serialize(_good()).replace(b"\x10\x32", b"\x10\x00"),
    "truncated": lm.serialize(_good())[:-4],
    "v2 text": lm.serialize(_good(), 2),
    "v1 text": lm.serialize(_good(ctime=None, custom_metadata={}), 1),
    "header written differently": lm.serialize(_good()).replace(b"\t3\n", b"\t03\n", 1),
    "over 16 KiB (3-byte length)": lm.serialize(_good(custom_metadata={"big": b"x" * 20_000})),
    "empty": b"",
    "header only": HEADER3,
}


@pytest.mark.parametrize("name", sorted(NOT_TAKEN))
def test_what_it_cannot_vouch_for_goes_to_parse_fields_and_neighbours_are_taken(name: str) -> None:
    odd = NOT_TAKEN[name]
    blobs = [lm.serialize(_good(0)), odd, lm.serialize(_good(2)), lm.serialize(_good(3))]
    decoded = bulk.decode(blobs)
    assert decoded is not None
    assert decoded.rest.tolist() == [1] and decoded.taken.tolist() == [0, 2, 3]
    assert _rows(blobs) == _expected(blobs)


def test_the_odd_cases_are_what_they_claim() -> None:
    """Guard the table above: each one parse_fields rejects is rejected, each it accepts is accepted."""
    rejected = {name for name, blob in NOT_TAKEN.items() if _fails(blob)}
    assert rejected == {
        "unknown state", "no state", "invalid UTF-8 member", "BookKeeper-invalid member", "E below WQ",
        "AQ zero", "no segment", "ensemble of the wrong size", "first entry ids not rising", "truncated",
        "empty", "header only",
    }  # fmt: skip  # an unknown digest type reads as unset (proto2): the enum's first value, CRC32


def _fails(blob: bytes) -> bool:
    try:
        lm.parse_fields(blob)
    except Exception:
        return True
    return False


def test_without_ptars_every_row_takes_parse_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bulk, "_HANDLER", [None])
    blobs = [lm.serialize(_good(i)) for i in range(5)] + [NOT_TAKEN["truncated"]]
    assert bulk.decode(blobs) is None and not bulk.available()
    assert _rows(blobs) == _expected(blobs)


def test_one_bad_body_among_many_costs_only_itself() -> None:
    """ptars fails a whole call on one undecodable body: the bisection isolates it."""
    blobs = [lm.serialize(_good(i)) for i in range(257)]
    for at in (0, 100, 256):
        blobs[at] = NOT_TAKEN["invalid UTF-8 member"]
    decoded = bulk.decode(blobs)
    assert decoded is not None
    assert decoded.rest.tolist() == [0, 100, 256]
    assert np.array_equal(decoded.taken, np.setdiff1d(np.arange(257), [0, 100, 256]))


def test_an_incompatible_ptars_release_is_dropped_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A release whose API moved (here: a handler that raises TypeError) must not fail a snapshot: the
    process falls back to parse_fields for good and says so once."""

    class Moved:
        def array_to_record_batch(self, _: object) -> None:
            raise TypeError("array_to_record_batch() takes 0 positional arguments")

    monkeypatch.setattr(bulk, "_HANDLER", [Moved()])
    blobs = [lm.serialize(_good(i)) for i in range(3)]
    assert _rows(blobs) == _expected(blobs)
    assert bulk._HANDLER == [None] and not bulk.available()
    assert "column-wise metadata decoding disabled" in caplog.text
