"""Many v3 ledger metadata blobs decoded at once into Arrow columns, for the snapshot's hot path.

Why: a snapshot decodes every ledger of a cluster. `ledger_metadata.parse_fields` costs ~10 µs per ledger
in Python, almost all of it reading fields out of protobuf objects; ptars (protobuf wire bytes straight to
Arrow arrays, in Rust) decodes the same bodies in under 1 µs each without creating a Python object per field.

`parse_fields` stays the one authority on what a blob means and on every error. This module only takes the
rows it can vouch for and hands back the index of every other row for `parse_fields` to decode. A row is
taken only when all of the following hold, so that the columns are exactly what `parse_fields` would give:
- the blob is the v3 header, a length varint of one or two bytes, and exactly that many body bytes (BookKeeper
  ignores trailing bytes; such blobs go to `parse_fields`, as do v1, v2 and headers written differently);
- ptars decodes the body, and encoding what it decoded gives back the same bytes. So the body is the
  canonical encoding of those values (fields in number order, each scalar once, no unknown fields, shortest
  varints: what BookKeeper's Java serializer writes), which every protobuf decoder reads the same way;
- the required fields are present, the enums hold values the schema declares, no custom metadata entry
  lacks its key or value, no key repeats within a ledger;
- the metadata passes the checks of BookKeeper's builder as `parse_fields` makes them (`_problem`):
  E >= WQ >= AQ >= 1, at least one segment, first entry ids rising, E members per ensemble, every member a
  valid BookieId. A row failing one goes to `parse_fields`, which decides the error: this filter can only
  send a row to the slow path, never reject it.
Without ptars installed (a `--py-files` deployment whose image lacks it), `decode` returns None and every
row takes `parse_fields`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bkaudit.formats.bookie_id import first_invalid_reason
from bkaudit.formats.ledger_metadata import _V3_HEADER
from bkaudit.model.ledger import DigestType, LedgerState

__all__ = ["Decoded", "available", "decode"]

log = logging.getLogger(__name__)

_STATES = np.array([s.value for s in LedgerState])
_DIGESTS = np.array([d.value for d in DigestType])


@dataclass(frozen=True)
class Decoded:
    """`fields`: LedgerMetadataFormat's fields as ptars columns (proto field names; unset optional fields
    null), one row per index of `taken`, in input order. `rest`: the indexes `parse_fields` must decode."""

    fields: pa.RecordBatch
    taken: np.ndarray
    rest: np.ndarray


def available() -> bool:
    return _handler() is not None


def decode(blobs: Sequence[bytes]) -> Decoded | None:
    """The rows of `blobs` this module vouches for, decoded; None when ptars is not installed (or failed in
    a way other than refusing a body: then it is not used again in this process)."""
    handler = _handler()
    if handler is None:
        return None
    try:
        return _decode(handler, blobs)
    except (ValueError, OverflowError, TypeError, AttributeError, pa.ArrowException) as exc:
        log.warning("column-wise metadata decoding disabled in this process (%s): every ledger takes "
                    "the one-by-one decoder", _describe(exc))
        _HANDLER[:] = [None]
        return None


def _decode(handler: Any, blobs: Sequence[bytes]) -> Decoded:
    n = len(blobs)
    candidates, bodies = _v3_bodies(pa.array(blobs, pa.binary()))
    pieces = _decode_pieces(handler, bodies, np.arange(len(candidates)))
    if not pieces:
        fields, taken = handler.array_to_record_batch(pa.array([], pa.binary())), np.array([], np.int64)
        return Decoded(fields, taken, np.arange(n, dtype=np.int64))
    # the usual case, one piece holding every body, skips the copies (take, concat, filter) the rest needs
    whole = len(pieces) == 1 and len(pieces[0][1]) == len(bodies)
    fields = pieces[0][0] if len(pieces) == 1 else pa.concat_batches([batch for batch, _ in pieces])
    at = pieces[0][1] if len(pieces) == 1 else np.concatenate([where for _, where in pieces])
    ours = bodies if whole else bodies.take(pa.array(at))
    canonical = pc.equal(handler.record_batch_to_array(fields), ours)
    ok = canonical.to_numpy(zero_copy_only=False) & _valid(fields)
    if not ok.all():
        fields = fields.filter(pa.array(ok))
    taken = candidates[at[ok]].astype(np.int64)
    if len(taken) == n:  # candidates and pieces keep input order, so every row taken means taken == 0..n-1
        return Decoded(fields, taken, np.zeros(0, np.int64))
    rest = np.setdiff1d(np.arange(n), taken, assume_unique=True)
    return Decoded(fields, taken, rest.astype(np.int64))


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


# -- ptars ---------------------------------------------------------------------------------------------------
_HANDLER: list[Any] = []


def _handler() -> Any:
    """ptars's handler for LedgerMetadataFormat (made once per process), or None without ptars."""
    if not _HANDLER:
        try:
            import ptars

            from bkaudit.formats.proto import DataFormats_pb2
        except ImportError:
            _HANDLER.append(None)
            return None
        try:
            pool = ptars.HandlerPool([DataFormats_pb2.DESCRIPTOR])
            _HANDLER.append(pool.get_for_message(DataFormats_pb2.LedgerMetadataFormat.DESCRIPTOR))
        except Exception as exc:  # an incompatible ptars release: decode one by one, say so once
            log.warning("ptars %s cannot decode ledger metadata (%s): every ledger takes the one-by-one "
                        "decoder", getattr(ptars, "__version__", "?"), _describe(exc))
            _HANDLER.append(None)
    return _HANDLER[0]


def _decode_pieces(
    handler: Any, bodies: pa.Array, where: np.ndarray
) -> list[tuple[pa.RecordBatch, np.ndarray]]:
    """Decoded batches with the positions (in `bodies`) of their rows. ptars fails a whole call on one bad
    body (truncated, invalid UTF-8 in a string): halve until the bad ones stand alone, and leave them out."""
    if not len(where):
        return []
    chunk = bodies if len(where) == len(bodies) else bodies.take(pa.array(where))
    try:
        return [(handler.array_to_record_batch(chunk), where)]
    except (ValueError, OverflowError):
        if len(where) == 1:
            return []
    half = len(where) // 2
    return _decode_pieces(handler, bodies, where[:half]) + _decode_pieces(handler, bodies, where[half:])


# -- header and body -----------------------------------------------------------------------------------------
def _v3_bodies(blobs: pa.BinaryArray) -> tuple[np.ndarray, pa.BinaryArray]:
    """(indexes of the blobs that are exactly header + varint + body, their bodies as one BinaryArray)."""
    head = len(_V3_HEADER)
    lengths = np.asarray(pc.binary_length(blobs).to_numpy(zero_copy_only=False), np.int64)
    headed = pc.starts_with(blobs, pattern=_V3_HEADER).to_numpy(zero_copy_only=False)
    index = np.nonzero((lengths >= head + 2) & headed)[0]
    if not len(index):
        return index, pa.array([], pa.binary())
    ours = blobs.take(pa.array(index))
    pair = pc.binary_slice(ours, head, head + 2)  # the length varint's first two bytes, two per row
    varint = np.frombuffer(pair.buffers()[2], dtype=np.uint8, count=2 * len(index)).reshape(-1, 2)
    b0, b1 = varint[:, 0].astype(np.int64), varint[:, 1].astype(np.int64)
    one = b0 < 0x80
    size = np.where(one, b0, (b0 & 0x7F) | (b1 << 7))
    exact = (one | (b1 < 0x80)) & (size > 0) & (head + np.where(one, 1, 2) + size == lengths[index])
    end = int(lengths.max(initial=0))
    bodies = pc.if_else(
        pa.array(one), pc.binary_slice(ours, head + 1, end), pc.binary_slice(ours, head + 2, end)
    )
    return index[exact], bodies.filter(pa.array(exact))


# -- what parse_fields would also accept ---------------------------------------------------------------------
def _valid(f: pa.RecordBatch) -> np.ndarray:
    """Per row: required fields present, declared enum values, and BookKeeper's builder checks passed."""
    n = f.num_rows
    q, e, state = _ints(f, "quorumSize"), _ints(f, "ensembleSize"), _ints(f, "state")
    aq = np.where(_present(f, "ackQuorumSize"), _ints(f, "ackQuorumSize"), q)
    ok: np.ndarray = (
        _present(f, "quorumSize") & _present(f, "ensembleSize") & _present(f, "length") & _present(f, "state")
        & np.isin(state, _STATES)
        & (~_present(f, "digestType") | np.isin(_ints(f, "digestType"), _DIGESTS))
        & (e >= q) & (q >= aq) & (aq >= 1)
    )  # fmt: skip
    segments = f.column("segment")
    ok &= _list_lengths(segments) > 0
    ok &= _segments_ok(segments, e, n)
    ok &= _custom_ok(f.column("customMetadata"), n)
    return ok


def _segments_ok(segments: pa.ListArray, e: np.ndarray, n: int) -> np.ndarray:
    flat = segments.flatten()
    parent = pc.list_parent_indices(segments).to_numpy()
    first = flat.field("firstEntryId")
    members = flat.field("ensembleMember")
    good = first.is_valid().to_numpy(zero_copy_only=False) & (_list_lengths(members) == e[parent])
    firsts = pc.fill_null(first, 0).to_numpy()
    rising = np.ones(len(firsts), bool)
    rising[1:] = (parent[1:] != parent[:-1]) | (firsts[1:] > firsts[:-1])
    good &= rising
    names = members.flatten()
    if len(names):
        encoded = pc.dictionary_encode(names)
        bad_name = np.array([first_invalid_reason((s,)) is not None for s in encoded.dictionary.to_pylist()])
        bad_member = bad_name[encoded.indices.to_numpy()]
        owner = pc.list_parent_indices(members).to_numpy()
        good &= np.bincount(owner[bad_member], minlength=len(good)) == 0
    return np.asarray(np.bincount(parent[~good], minlength=n) == 0, bool)


def _custom_ok(custom: pa.ListArray, n: int) -> np.ndarray:
    flat = custom.flatten()
    if not len(flat):
        return np.ones(n, bool)
    parent = pc.list_parent_indices(custom).to_numpy()
    keys, values = flat.field("key"), flat.field("value")
    good = keys.is_valid().to_numpy(zero_copy_only=False) & values.is_valid().to_numpy(zero_copy_only=False)
    key_ids = pc.dictionary_encode(pc.fill_null(keys, "")).indices.to_numpy().astype(np.int64)
    pairs = parent.astype(np.int64) * (int(key_ids.max()) + 1) + key_ids
    unique, counts = np.unique(pairs, return_counts=True)
    repeated = np.isin(pairs, unique[counts > 1])
    return np.asarray(np.bincount(parent[~good | repeated], minlength=n) == 0, bool)


def _ints(f: pa.RecordBatch, name: str) -> np.ndarray:
    return np.asarray(pc.fill_null(f.column(name), 0).to_numpy(), np.int64)


def _present(f: pa.RecordBatch, name: str) -> np.ndarray:
    return np.asarray(f.column(name).is_valid().to_numpy(zero_copy_only=False), bool)


def _list_lengths(lists: pa.ListArray) -> np.ndarray:
    return np.asarray(pc.fill_null(pc.list_value_length(lists), 0).to_numpy(), np.int64)
