"""Pure transformations: ledger znode bytes + stat → Arrow columns of the `ledgers` data (no I/O).

Kept apart from the ZooKeeper and Spark code so every rule (what a corrupt blob becomes, how custom
metadata is rendered, how segment ranges are derived) is unit-testable without servers, and so the hot path
appends to plain Python lists per column and builds each Arrow array once per batch: per-row Arrow or
pandas objects would dominate the cost of a 1,000,000-ledger snapshot.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from bkaudit.formats.ledger_metadata import DEFAULT_DIGEST_TYPE
from bkaudit.model.ledger import DigestType, LedgerState
from bkaudit.tables.schemas import (
    SOURCE_SCHEMA,
    STRING_LIST,
    STRING_MAP,
    TIMESTAMP,
)

PULSAR_MANAGED_LEDGER_KEY = "pulsar/managed-ledger"
BINARY_PREFIX = "base64:"  # custom metadata values that are not UTF-8 text


def metadata_text(value: bytes) -> str:
    """A custom metadata value as text: UTF-8 when it is, else 'base64:' + base64 (lossless either way)."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return BINARY_PREFIX + base64.b64encode(value).decode("ascii")


def describe_error(exc: BaseException) -> str:
    """One line for a `parse_error` column: the exception type and message."""
    text = " ".join(str(exc).split()) or "no detail"
    return f"{type(exc).__name__}: {text}"


class LedgerBatchBuilder:
    """Accumulates ledger znodes; `flush()` returns a RecordBatch in SOURCE_SCHEMA, rows in the order added
    (`unparseable` counts the rows with a parse_error, as of the last flush).

    At flush, `formats.ledger_metadata_bulk` decodes every v3 blob it can vouch for at once into Arrow
    columns (no Python object per field); the rest (v1, v2, anything unusual, anything BookKeeper would
    reject) goes through `_ReferenceRows`, i.e. `parse_fields`, one by one. The two give the same rows
    (tests/tables/test_snapshot_rows.py pins both to a reference built from `ledger_metadata.parse`).
    """

    def __init__(self) -> None:
        self._reference = _ReferenceRows()
        self.unparseable = 0
        self._reset()

    def __len__(self) -> int:
        return len(self._ids)

    def _reset(self) -> None:
        self._ids: list[int] = []
        self._data: list[bytes] = []
        self._versions: list[int] = []
        self._mzxids: list[int] = []
        self._ctimes: list[int] = []

    def add(self, ledger_id: int, data: bytes, version: int, mzxid: int, ctime_ms: int) -> None:
        """One ledger znode: its id (from the path), data and stat fields (version, mzxid, ctime)."""
        self._ids.append(ledger_id)
        self._data.append(data)
        self._versions.append(version)
        self._mzxids.append(mzxid)
        self._ctimes.append(ctime_ms)

    def add_chunk(self, ids: list[int], data: list[bytes | None], stats: list[Any]) -> None:
        """Many ledger znodes at once: ids, data and Stat tuples (ZnodeStat's field order), aligned; a
        znode whose stat is None was deleted since it was listed and is left out."""
        if None in stats:
            kept = [i for i, st in enumerate(stats) if st is not None]
            ids, data, stats = [ids[i] for i in kept], [data[i] for i in kept], [stats[i] for i in kept]
            if not ids:
                return
        _, mzxids, ctimes, _, versions, *_ = zip(*stats, strict=True)
        self._ids.extend(ids)
        self._data.extend(d or b"" for d in data)
        self._versions.extend(versions)
        self._mzxids.extend(mzxids)
        self._ctimes.extend(ctimes)

    def flush(self) -> pa.RecordBatch:
        """The rows added since the last flush, as one RecordBatch (SOURCE_SCHEMA)."""
        from bkaudit.formats import ledger_metadata_bulk

        n = len(self._ids)
        decoded = ledger_metadata_bulk.decode(self._data) if n else None
        taken = decoded.taken if decoded is not None else np.zeros(0, np.int64)
        rest = decoded.rest if decoded is not None else np.arange(n)
        stats = [np.array(c, np.int64) for c in (self._ids, self._versions, self._mzxids, self._ctimes)]
        reference = self._reference
        for i in rest.tolist():
            reference.add(self._ids[i], self._data[i], self._versions[i], self._mzxids[i], self._ctimes[i])
        slow = reference.flush()
        self.unparseable += reference.unparseable
        reference.unparseable = 0
        self._reset()
        if decoded is None or not len(taken):
            return slow
        fast = fast_rows(decoded.fields, *(c[taken] for c in stats))
        if not len(rest):
            return fast
        order = np.argsort(np.concatenate([taken, rest]), kind="stable")
        return pa.Table.from_batches([fast, slow]).take(pa.array(order)).combine_chunks().to_batches()[0]


class _ReferenceRows:
    """Ledger znodes decoded one by one; `flush()` returns a RecordBatch in SOURCE_SCHEMA.

    `add()` decodes with `bkaudit.formats.ledger_metadata.parse_fields`; a blob it rejects (or any decoder
    crash) becomes a row with `parse_error` and the raw bytes in base64, never an exception: one bad znode
    must not stop a snapshot of a million ledgers. Per ledger the hot path builds no value objects (no
    LedgerMetadata, Segment or FrozenMap): it appends one tuple of scalars (transposed into columns by `zip`
    at flush) and the nested values to flat column lists, so nothing it keeps until the flush is a container
    the garbage collector has to walk again and again (bench/snapshot_decode.py).
    """

    # the scalar columns, in the order of the tuples `add` appends ("ctime" still in ms, null for bad rows)
    _SCALARS = (
        "ledger_id", "state", "ensemble_size", "write_quorum", "ack_quorum", "last_entry_id", "length",
        "digest_type", "ctime", "managed_ledger", "segment_count", "znode_version", "znode_mzxid",
        "znode_ctime", "parse_error", "raw_metadata",
    )  # fmt: skip

    def __init__(self) -> None:
        from bkaudit.formats.ledger_metadata import parse_fields

        self._parse = parse_fields
        self.unparseable = 0
        self._reset()

    def __len__(self) -> int:
        return len(self._rows)

    def _reset(self) -> None:
        self._rows: list[tuple[Any, ...]] = []
        self._bad = 0
        self._cm_offsets = [0]
        self._cm_keys: list[str] = []
        self._cm_values: list[bytes] = []  # raw: made text at flush, through a memo
        self._seg_offsets = [0]
        self._seg_index: list[int] = []
        self._seg_first: list[int] = []
        self._seg_last: list[int | None] = []
        self._ens_offsets = [0]
        self._ens_members: list[str] = []

    def add(self, ledger_id: int, data: bytes, version: int, mzxid: int, ctime_ms: int) -> None:
        """One ledger znode: its id (from the path), data and stat fields (version, mzxid, ctime)."""
        try:
            e, wq, aq, state, last, length, digest, _, segments, ctime, custom, _ = self._parse(data)
        except Exception as exc:
            self._add_unparseable(ledger_id, data, version, mzxid, ctime_ms, describe_error(exc))
            return
        managed = None
        if custom:
            by_key = dict(custom)  # a key stored twice: first position, last value (as LedgerMetadata)
            self._cm_keys.extend(by_key)
            self._cm_values.extend(by_key.values())
            managed = by_key.get(PULSAR_MANAGED_LEDGER_KEY)
        self._cm_offsets.append(len(self._cm_keys))
        # a segment ends before the next one starts; the last one of a closed ledger at its last entry id
        count = len(segments)
        members, ens_offsets, seg_last = self._ens_members, self._ens_offsets, self._seg_last
        self._seg_index.extend(range(count))
        for i, (first, ensemble) in enumerate(segments):
            self._seg_first.append(first)
            if i:
                seg_last.append(first - 1)
            members.extend(ensemble)
            ens_offsets.append(len(members))
        seg_last.append(last if state == _CLOSED else None)
        self._seg_offsets.append(len(self._seg_first))
        # BookKeeper uses the znode's ctime when the metadata carries none (storeCtime off)
        self._rows.append((
            ledger_id, state, e, wq, aq, last, length, digest, ctime_ms if ctime is None else ctime, managed,
            count, version, mzxid, ctime_ms, None, None,
        ))  # fmt: skip

    def _add_unparseable(
        self, ledger_id: int, data: bytes, version: int, mzxid: int, ctime_ms: int, error: str
    ) -> None:
        self.unparseable += 1
        self._bad += 1
        raw = base64.b64encode(bytes(data)).decode("ascii")
        self._rows.append((ledger_id, *([None] * 10), version, mzxid, ctime_ms, error, raw))
        self._cm_offsets.append(len(self._cm_keys))
        self._seg_offsets.append(len(self._seg_first))

    def flush(self) -> pa.RecordBatch:
        """The rows added since the last flush, as one RecordBatch (SOURCE_SCHEMA)."""
        rows = self._rows
        columns: dict[str, Any] = (
            dict(zip(self._SCALARS, zip(*rows, strict=True), strict=True))
            if rows
            else dict.fromkeys(self._SCALARS, ())
        )
        columns["state"] = [_STATE_NAME[s] for s in columns["state"]]
        columns["digest_type"] = [_DIGEST_NAME[d] for d in columns["digest_type"]]
        columns["ctime"] = [ctime_micros(c) for c in columns["ctime"]]
        columns["znode_ctime"] = [c * 1000 for c in columns["znode_ctime"]]
        columns["managed_ledger"] = _texts(columns["managed_ledger"])
        # unparseable rows have null custom metadata and segments (not empty ones)
        mask = pa.array([s is None for s in columns["segment_count"]], pa.bool_()) if self._bad else None
        columns["custom_metadata"] = pa.MapArray.from_arrays(
            pa.array(self._cm_offsets, pa.int32()),
            pa.array(self._cm_keys, pa.string()),
            pa.array(_texts(self._cm_values), pa.string()),
            type=STRING_MAP,
            mask=mask,
        )
        columns["segments"] = self._segments(mask)
        arrays = [
            c if isinstance(c := columns[f.name], pa.Array) else pa.array(c, f.type) for f in SOURCE_SCHEMA
        ]
        batch = pa.RecordBatch.from_arrays(arrays, schema=SOURCE_SCHEMA)
        self._reset()
        return batch

    def _segments(self, mask: pa.Array | None) -> pa.Array:
        seg_type = SOURCE_SCHEMA.field("segments").type
        ensembles = pa.ListArray.from_arrays(
            pa.array(self._ens_offsets, pa.int32()), pa.array(self._ens_members, pa.string())
        )
        structs = pa.StructArray.from_arrays(
            [
                pa.array(self._seg_index, pa.int32()),
                pa.array(self._seg_first, pa.int64()),
                pa.array(self._seg_last, pa.int64()),
                ensembles.cast(STRING_LIST),
            ],
            fields=list(seg_type.value_type),
        )
        return pa.ListArray.from_arrays(
            pa.array(self._seg_offsets, pa.int32()), structs, type=seg_type, mask=mask
        )


def fast_rows(
    fields: pa.RecordBatch, ids: np.ndarray, versions: np.ndarray, mzxids: np.ndarray, ctimes_ms: np.ndarray
) -> pa.RecordBatch:
    """SOURCE_SCHEMA rows from `ledger_metadata_bulk`'s columns (rows it vouched for) and the znodes' stat
    fields: column for column what `_ReferenceRows` makes of the same blobs through `parse_fields`."""
    import pyarrow.compute as pc

    n = fields.num_rows
    wq = fields.column("quorumSize")
    state = fields.column("state").to_numpy().astype(np.int64)
    closed = state == _CLOSED
    last = np.where(closed, pc.fill_null(fields.column("lastEntryId"), 0).to_numpy(), -1)
    has_password = fields.column("password").is_valid().to_numpy(zero_copy_only=False)
    stored_digest = pc.fill_null(fields.column("digestType"), _PROTO_DEFAULT_DIGEST).to_numpy()
    digest = np.where(has_password, stored_digest, _DEFAULT_DIGEST)
    # BookKeeper uses the znode's ctime when the metadata carries none (storeCtime off)
    ctime = fields.column("ctime")
    stored = ctime.is_valid().to_numpy(zero_copy_only=False)
    ctime_ms = np.where(stored, pc.fill_null(ctime, 0).to_numpy(), ctimes_ms)
    in_range = (ctime_ms >= -CTIME_MAX_MS) & (ctime_ms <= CTIME_MAX_MS)
    custom, managed = _fast_custom(fields.column("customMetadata"), n)
    columns: dict[str, Any] = {
        "ledger_id": pa.array(ids, pa.int64()),
        "state": _NAMES_OF_STATES.take(pa.array(state)),
        "ensemble_size": fields.column("ensembleSize"),
        "write_quorum": wq,
        "ack_quorum": pc.coalesce(fields.column("ackQuorumSize"), wq),
        "last_entry_id": pa.array(last, pa.int64()),
        "length": pa.array(np.where(closed, fields.column("length").to_numpy(), 0), pa.int64()),
        "digest_type": _NAMES_OF_DIGESTS.take(pa.array(digest)),
        "ctime": pa.array(np.where(in_range, ctime_ms, 0) * 1000, pa.int64(), mask=~in_range).cast(TIMESTAMP),
        "custom_metadata": custom,
        "managed_ledger": managed,
        "segment_count": pc.list_value_length(fields.column("segment")).cast(pa.int32()),
        "znode_version": pa.array(versions, pa.int32()),
        "znode_mzxid": pa.array(mzxids, pa.int64()),
        "znode_ctime": pa.array(ctimes_ms * 1000, pa.int64()).cast(TIMESTAMP),
        "parse_error": pa.nulls(n, pa.string()),
        "raw_metadata": pa.nulls(n, pa.string()),
        "segments": _fast_segments(fields.column("segment"), last, closed),
    }
    return pa.RecordBatch.from_arrays([columns[f.name] for f in SOURCE_SCHEMA], schema=SOURCE_SCHEMA)


def _fast_segments(segments: pa.ListArray, last: np.ndarray, closed: np.ndarray) -> pa.Array:
    """Each segment ends before the next one starts; the last one of a closed ledger at its last entry id."""
    import pyarrow.compute as pc

    flat = segments.flatten()
    parent = pc.list_parent_indices(segments).to_numpy()
    offsets = segments.offsets.to_numpy()
    offsets = offsets - offsets[0]
    firsts = flat.field("firstEntryId").to_numpy()
    ends = np.zeros(len(firsts), np.int64)
    ends[:-1] = firsts[1:] - 1
    final = np.ones(len(firsts), bool)
    final[:-1] = parent[1:] != parent[:-1]
    ends[final] = last[parent[final]]
    structs = pa.StructArray.from_arrays(
        [
            pa.array(np.arange(len(firsts)) - offsets[parent], pa.int32()),
            pa.array(firsts, pa.int64()),
            pa.array(ends, pa.int64(), mask=final & ~closed[parent]),
            flat.field("ensembleMember").cast(STRING_LIST),
        ],
        fields=list(_SEGMENT_STRUCT),
    )
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), structs, type=pa.list_(_SEGMENT_STRUCT))


def _fast_custom(custom: pa.ListArray, n: int) -> tuple[pa.Array, pa.Array]:
    """(custom_metadata map, managed_ledger): values as text through the memo, once per distinct value."""
    import pyarrow.compute as pc

    flat = custom.flatten()
    offsets = custom.offsets.to_numpy()
    keys, values = flat.field("key"), flat.field("value")
    encoded = pc.dictionary_encode(values)
    texts = pa.array(_texts(encoded.dictionary.to_pylist()), pa.string()).take(encoded.indices)
    mapped = pa.MapArray.from_arrays(pa.array(offsets - offsets[0], pa.int32()), keys, texts, type=STRING_MAP)
    # each ledger's entry for Pulsar's key (keys do not repeat within a ledger on this path), or none
    entry = np.full(n, -1, np.int64)
    pulsar = np.nonzero(pc.equal(keys, PULSAR_MANAGED_LEDGER_KEY).to_numpy(zero_copy_only=False))[0]
    entry[pc.list_parent_indices(custom).to_numpy()[pulsar]] = pulsar
    return mapped, texts.take(pa.array(entry, mask=entry < 0))


def _names(enum_type: Any) -> dict[int | None, str | None]:
    return {None: None, **{member.value: member.name for member in enum_type}}


CTIME_MAX_MS = (2**63 - 1) // 1000
"""The largest |ctime| in ms the microsecond `ctime` column holds (year ~292,000); Java's long holds more."""


def ctime_micros(ctime_ms: int | None) -> int | None:
    """The `ctime` column's value: a metadata ctime beyond the column's range is null, not a failed batch
    (BookKeeper stores any long; one such ledger must not stop the snapshot)."""
    if ctime_ms is None or not -CTIME_MAX_MS <= ctime_ms <= CTIME_MAX_MS:
        return None
    return ctime_ms * 1000


_STATE_NAME = _names(LedgerState)
_DIGEST_NAME = _names(DigestType)
_CLOSED = LedgerState.CLOSED.value
# the names as arrays indexed by protobuf number, for the column-wise rows
_NAMES_OF_STATES = pa.array([_STATE_NAME.get(v) for v in range(max(s.value for s in LedgerState) + 1)])
_NAMES_OF_DIGESTS = pa.array([_DIGEST_NAME.get(v) for v in range(max(d.value for d in DigestType) + 1)])
_DEFAULT_DIGEST = DEFAULT_DIGEST_TYPE.value  # no password stored: BookKeeper's default digest type
_PROTO_DEFAULT_DIGEST = DigestType.CRC32.value  # a password but no digestType: the enum's first value
_SEGMENT_STRUCT = SOURCE_SCHEMA.field("segments").type.value_type

# Custom metadata values as text, by value. Pulsar writes the same few values on every ledger (application,
# component) and a topic's name on each of its ledgers: a lookup costs a fraction of `metadata_text`.
# Bounded like bookie_id's memo: past the bound (or for long values) values are converted every time.
_TEXT_OF: dict[bytes, str] = {}
_TEXT_OF_MAX = 65_536
_TEXT_OF_MAX_VALUE = 256


def _texts(values: Iterable[bytes | None]) -> list[str | None]:
    memo = _TEXT_OF
    return [None if v is None else memo[v] if v in memo else _text(v) for v in values]


def _text(value: bytes) -> str:
    text = metadata_text(value)
    if len(_TEXT_OF) < _TEXT_OF_MAX and len(value) <= _TEXT_OF_MAX_VALUE:
        _TEXT_OF[value] = text
    return text


def ledger_batches(
    reads: Iterable[tuple[str, bytes | None, Any]], ids: dict[str, int], *, batch_size: int
) -> Iterator[pa.RecordBatch]:
    """RecordBatches (SOURCE_SCHEMA, at most `batch_size` rows) of the (path, data, stat) of ZooKeeper reads.

    `ids` maps each path to its ledger id (entries are popped as reads arrive); a read with no stat is a
    ledger deleted between listing and reading: simply absent.
    """
    builder = LedgerBatchBuilder()
    add, pop, rows = builder.add, ids.pop, 0
    for path, data, stat in reads:
        ledger_id = pop(path)
        if stat is None:
            continue
        add(ledger_id, data or b"", stat.version, stat.mzxid, stat.ctime)
        rows += 1
        if rows >= batch_size:
            yield builder.flush()
            rows = 0
    if rows:
        yield builder.flush()


def chunk_batches(
    chunks: Iterable[tuple[list[int], list[bytes | None], list[Any]]], *, batch_size: int
) -> Iterator[pa.RecordBatch]:
    """RecordBatches (SOURCE_SCHEMA, about `batch_size` rows: whole chunks) of chunks of ZooKeeper reads,
    each (ledger ids, data, Stat tuples) as `bkaudit.zk.multiread.read_chunks` answers them; a read with
    no stat is a ledger deleted between listing and reading: simply absent."""
    builder = LedgerBatchBuilder()
    for ids, data, stats in chunks:
        builder.add_chunk(ids, data, stats)
        if len(builder) >= batch_size:
            yield builder.flush()
    if len(builder):
        yield builder.flush()


__all__ = [
    "LedgerBatchBuilder",
    "chunk_batches",
    "describe_error",
    "explode_segments",
    "ledger_batches",
    "metadata_text",
]


def explode_segments(batch: pa.RecordBatch | pa.Table) -> pa.Table:
    """The nested `segments` of data source rows as `ledger_segments` rows (ledger_id + segment columns)."""
    import pyarrow.compute as pc

    segments = batch.column("segments")
    if isinstance(segments, pa.ChunkedArray):
        segments = segments.combine_chunks()
    flat = pc.list_flatten(segments)
    parents = pc.list_parent_indices(segments)
    ledger_ids = batch.column("ledger_id")
    if isinstance(ledger_ids, pa.ChunkedArray):
        ledger_ids = ledger_ids.combine_chunks()
    return pa.table(
        {
            "ledger_id": pc.take(ledger_ids, parents),
            "segment_index": flat.field("segment_index"),
            "first_entry_id": flat.field("first_entry_id"),
            "last_entry_id": flat.field("last_entry_id"),
            "ensemble": flat.field("ensemble"),
        }
    )
