"""BP-34 AvailabilityOfEntriesOfLedger: which entries of a ledger a bookie holds, as BookKeeper encodes them.

A bookie answers GetListOfEntriesOfLedger with this encoding; the availability check compares it with the
entries the bookie must store (a `Striping`, see `bkaudit.model.quorum`). Ledgers hold millions of entries, so
nothing here materialises entry ids unless the caller asks to iterate them.

Wire layout (big-endian, spec section 5): a 64-byte header (int32 version 0, int32 group count, 56 zero
bytes), then per group int64 firstSequenceStart, int64 lastSequenceStart, int32 sequenceSize, int32
sequencePeriod. A group is `sequenceSize` consecutive ids starting at firstSequenceStart, repeated every
`sequencePeriod` ids up to the sequence starting at lastSequenceStart.

Decoding policy (where we are stricter than Java, because an audit must never report a wrong answer):

- Java's own encoder only emits period-0 groups, ascending and with distinct firsts; fed unsorted ids it can
  emit groups whose ranges overlap (ids [1, 0, 1] give (0,0,2,0)(1,1,1,0)). Such overlapping *runs* are
  accepted and merged, so `.total` counts every entry once (Java would count 3 there).
- Groups must be strictly ascending by firstSequenceStart (Java re-sorts and lets a duplicate first silently
  replace the earlier group, which drops entries).
- A period-based group whose range overlaps another group is rejected: no BookKeeper producer emits one, and
  its meaning would depend on Java's floor-lookup quirks.
- lastSequenceStart must be a whole number of periods after firstSequenceStart, and the sequences of a group
  must not overlap each other (sequenceSize <= sequencePeriod); otherwise Java's count and membership
  disagree.
- Entry ids are non-negative and must fit in int64.
- Java answers `isEntryAvailable(last + size)` with true for groups whose sequences touch (size == period);
  here membership is exact.

Everything malformed raises `FormatError` naming the field and its byte offset in the encoding.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from itertools import pairwise
from typing import TypeAlias

import numpy as np

from bkaudit.errors import FormatError
from bkaudit.model.quorum import Striping, union_run_arrays

Group: TypeAlias = tuple[int, int, int, int]
"""(first_sequence_start, last_sequence_start, sequence_size, sequence_period), as on the wire."""

_Piece: TypeAlias = tuple[int, int, int, int]
"""Normalised group (start, end, period, size), end = its last id; a run has period == size == its length."""

HEADER_SIZE = 64
GROUP_SIZE = 24
CURRENT_VERSION = 0
INVALID_ENTRY_ID = -1
"""Java's "uninitialised" sentinel: the encoder skips it (and it ends the sequence being built)."""

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
_HEADER = struct.Struct(">ii56x")
_GROUP = struct.Struct(">qqii")
_GROUP_DTYPE = np.dtype([("first", ">i8"), ("last", ">i8"), ("size", ">i4"), ("period", ">i4")])
"""The wire group as a numpy record: long answers are packed column-wise, not group by group."""
VECTOR_MIN_RUNS = 64
"""From this many runs on, `encode_runs` packs with numpy (a 50,000-entry E3/WQ2 share is ~17,000 runs)."""


# -- encoding ------------------------------------------------------------------------------------------------


def encoded_size(groups: int) -> int:
    """Bytes of an encoding with `groups` sequence groups (BookKeeper's encoder: one group per run)."""
    return HEADER_SIZE + GROUP_SIZE * groups


def encode(entry_ids: Iterable[int]) -> bytes:
    """Encode entry ids exactly as BookKeeper's Java class does, quirks included.

    Every maximal run of consecutive ids (in input order) becomes its own group (start, start, size, 0); ids
    inside the run being built are dropped as duplicates; groups are written sorted by start, a later run with
    the same start replacing an earlier one (Java's TreeMap.put). Unsorted input can therefore lose ids
    ([1, 2, 3, 5, 1, 2] encodes {1, 2, 5}) or produce overlapping groups, just as Java does. -1 is skipped
    (and, as in Java, ends the run being built).
    """
    return _pack_sequences(_java_sequences(entry_ids))


def _java_sequences(entry_ids: Iterable[int]) -> list[tuple[int, int]]:
    """(start, size) of the groups Java's encoder emits, sorted by start.

    Java's group-merging branch can never fire (a new group has period 0 and lastSequenceStart == its first,
    and the next sequence never starts there), so each closed sequence is one group.
    """
    by_start: dict[int, int] = {}
    start, size = INVALID_ENTRY_ID, 0
    for entry_id in entry_ids:
        if not INVALID_ENTRY_ID <= entry_id <= _INT64_MAX:
            raise ValueError(f"entry id {entry_id} is not a BookKeeper entry id (-1 .. 2**63-1)")
        if start == INVALID_ENTRY_ID:
            start, size = entry_id, 1
        elif start <= entry_id < start + size:
            continue
        elif entry_id == start + size:
            size += 1
        else:
            by_start[start] = size
            start, size = entry_id, 1
    if start != INVALID_ENTRY_ID:
        by_start[start] = size
    return sorted(by_start.items())


def encode_runs(runs: Iterable[tuple[int, int]]) -> bytes:
    """Encode ascending, disjoint inclusive (first, last) runs; the same bytes `encode` gives for their ids.

    Adjacent runs are merged (as Java would) and runs longer than int32 are split, on a slower path.
    Unsorted, overlapping, empty or negative runs raise ValueError.
    """
    run_list = runs if isinstance(runs, list | tuple) else list(runs)
    if len(run_list) >= VECTOR_MIN_RUNS:
        firsts, lasts = zip(*run_list, strict=True)
        return encode_run_arrays(firsts, lasts)
    fields: list[int] = []
    prev_last = -2
    for first, last in run_list:
        size = last - first + 1
        if first <= prev_last + 1 or not 0 < size <= _INT32_MAX:
            return _encode_irregular_runs(run_list)
        fields += (first, first, size, 0)
        prev_last = last
    try:
        return _packer(len(run_list)).pack(CURRENT_VERSION, len(run_list), *fields)
    except struct.error:  # an id beyond int64
        return _encode_irregular_runs(run_list)


_PACKERS: dict[int, struct.Struct] = {}


def _packer(groups: int) -> struct.Struct:
    """Header and `groups` groups as one Struct (one pack call: a 10-entry ledger's listing is one group)."""
    packer = _PACKERS.get(groups)
    if packer is None:
        packer = struct.Struct(_HEADER.format + _GROUP.format.lstrip(">") * groups)
        if groups < VECTOR_MIN_RUNS:
            _PACKERS[groups] = packer
    return packer


def encode_run_arrays(firsts: Sequence[int] | np.ndarray, lasts: Sequence[int] | np.ndarray) -> bytes:
    """`encode_runs` for runs given as two parallel columns (a bookie's index, a striping's runs).

    This is the bookie's path (GetListOfEntriesOfLedger of a long striped ledger is tens of thousands of
    groups) and the checker's (the digest of what a bookie must hold): well-formed runs (ascending, gaps
    between them, sizes within int32) are packed as numpy records in one pass; anything else takes the
    validating slow path, so the bytes are always `encode`'s.
    """
    if len(firsts) != len(lasts):
        raise ValueError(f"{len(firsts)} run starts but {len(lasts)} run ends")
    try:
        f = np.asarray(firsts, dtype=np.int64)
        last = np.asarray(lasts, dtype=np.int64)
    except OverflowError:
        return _encode_irregular_runs(list(zip(firsts, lasts, strict=True)))
    n = len(f)
    if n:
        sizes = last - f + 1
        regular = (
            f[0] >= 0
            and int(last.max()) < _INT64_MAX
            and bool((sizes > 0).all())
            and bool((sizes <= _INT32_MAX).all())
            and bool((f[1:] > last[:-1] + 1).all())
        )
        if not regular:
            return _encode_irregular_runs(list(zip(f.tolist(), last.tolist(), strict=True)))
    out = np.zeros(n, dtype=_GROUP_DTYPE)
    if n:
        out["first"] = f
        out["last"] = f
        out["size"] = sizes
    return _HEADER.pack(CURRENT_VERSION, n) + out.tobytes()


def encode_separated_run_arrays(firsts: np.ndarray, lasts: np.ndarray) -> bytes:
    """`encode_run_arrays` for int64 runs an index keeps ascending with a gap between any two (a bookie's
    `EntryRuns`): only the id bounds and the int32 sizes are checked, so a 167-run share packs in a few
    numpy calls; anything else takes `encode_run_arrays`' validating path."""
    n = len(firsts)
    if not n:
        return _HEADER.pack(CURRENT_VERSION, 0)
    sizes = lasts - firsts + 1
    if firsts[0] < 0 or lasts[-1] >= _INT64_MAX or int(sizes.max()) > _INT32_MAX or int(sizes.min()) < 1:
        return encode_run_arrays(firsts, lasts)
    out = np.zeros(n, dtype=_GROUP_DTYPE)
    out["first"] = firsts
    out["last"] = firsts
    out["size"] = sizes
    return _HEADER.pack(CURRENT_VERSION, n) + out.tobytes()


def encode_striping(striping: Striping) -> bytes:
    """`encode_runs(striping.runs())`, computed from the striping's arithmetic instead of its runs.

    The bookie's answer for a one-segment ledger and the checker's expected answer for it: runs of `size` ids
    every `period`, only the first and last possibly cut by [first, last]. Their starts are one arange, so a
    500-entry E3/WQ2 share (167 groups) packs in a few numpy calls instead of a Python loop or a union.
    """
    s = striping
    n = s.run_count()
    if n == 0:
        return _HEADER.pack(CURRENT_VERSION, 0)
    if s.first < 0 or s.last >= _INT64_MAX or (s.size == s.period and s.last - s.first >= _INT32_MAX):
        return encode_runs(list(s.runs()))  # ids the fast path does not cover: validated, or split runs
    if s.size == s.period:  # every id: one run
        return _packer(1).pack(CURRENT_VERSION, 1, s.first, s.first, s.last - s.first + 1, 0)
    start = s.first_run_start()
    final = start + (n - 1) * s.period
    head = max(start, s.first)
    head_size = min(start + s.size - 1, s.last) - head + 1
    tail_size = min(final + s.size - 1, s.last) - final + 1
    if n == 1:
        return _packer(1).pack(CURRENT_VERSION, 1, head, head, head_size, 0)
    if n < _STRIPING_VECTOR_MIN_RUNS:
        fields = [head, head, head_size, 0]
        for first in range(start + s.period, final, s.period):
            fields += (first, first, s.size, 0)
        fields += (final, final, tail_size, 0)
        return _packer(n).pack(CURRENT_VERSION, n, *fields)
    out = np.zeros(n, dtype=_GROUP_DTYPE)
    firsts = out["first"]
    firsts[:] = np.arange(start, final + 1, s.period, dtype=np.int64)
    firsts[0] = head
    out["last"] = firsts
    sizes = out["size"]
    sizes[:] = s.size
    sizes[0] = head_size
    sizes[-1] = tail_size
    return _HEADER.pack(CURRENT_VERSION, n) + out.tobytes()


def encode_segment_stripings(stripings: Sequence[Striping]) -> bytes:
    """`encode_runs` of the union of stripings over disjoint id ranges (one per segment a bookie served).

    Each striping is packed by `encode_striping`; runs can only touch where one range ends and the next
    begins, so the union is the concatenation with those boundary runs joined: no sort, no merge pass.
    Overlapping ranges take the general column union.
    """
    if len(stripings) == 1:  # a one-segment ledger: most answers
        return encode_striping(stripings[0])
    live = sorted((s for s in stripings if s.run_count()), key=lambda s: s.first)
    if len(live) <= 1:
        return encode_striping(live[0]) if live else _HEADER.pack(CURRENT_VERSION, 0)
    if any(a.last >= b.first for a, b in pairwise(live)):
        return encode_run_arrays(*union_run_arrays(live))
    bodies: list[bytes] = []
    groups = 0
    for s in live:
        body = encode_striping(s)
        n = (len(body) - HEADER_SIZE) // GROUP_SIZE
        if bodies:
            first, _, size, _ = _GROUP.unpack_from(body, HEADER_SIZE)
            tail = bodies[-1]
            prev_first, _, prev_size, _ = _GROUP.unpack_from(tail, len(tail) - GROUP_SIZE)
            if prev_first + prev_size == first:  # the runs touch across the boundary: one group
                if prev_size + size > _INT32_MAX:
                    return encode_run_arrays(*union_run_arrays(live))  # split like encode_runs does
                joined = _GROUP.pack(prev_first, prev_first, prev_size + size, 0)
                bodies[-1] = tail[: len(tail) - GROUP_SIZE] + joined
                body = body[HEADER_SIZE + GROUP_SIZE :]
                n -= 1
            else:
                body = body[HEADER_SIZE:]
        else:
            body = body[HEADER_SIZE:]
        if body:  # empty when its only run joined the one before
            bodies.append(body)
        groups += n
    return b"".join((_HEADER.pack(CURRENT_VERSION, groups), *bodies))


_STRIPING_VECTOR_MIN_RUNS = 16
"""From this many runs on, `encode_striping` fills numpy columns (about where both took 3 us here)."""


def _encode_irregular_runs(runs: Sequence[tuple[int, int]]) -> bytes:
    """Slow path of `encode_runs`: validate, merge adjacent runs, split runs too long for an int32 size."""
    merged: list[tuple[int, int]] = []
    for first, last in runs:
        if first < 0 or last > _INT64_MAX or last < first:
            raise ValueError(f"invalid run ({first}, {last}): need 0 <= first <= last <= 2**63-1")
        if merged and first <= merged[-1][1]:
            raise ValueError(f"run ({first}, {last}) is not after the previous run {merged[-1]}")
        if merged and first == merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], last)
        else:
            merged.append((first, last))
    return _pack_sequences([chunk for first, last in merged for chunk in _int32_chunks(first, last)])


def _int32_chunks(first: int, last: int) -> Iterator[tuple[int, int]]:
    """(start, size) pieces of a run, each fitting sequenceSize's int32 (Java cannot encode longer runs)."""
    while first <= last:
        size = min(last - first + 1, _INT32_MAX)
        yield first, size
        first += size


def _pack_sequences(sequences: Sequence[tuple[int, int]]) -> bytes:
    """The wire bytes for period-0 groups given as (start, size), in the given order."""
    buf = bytearray(HEADER_SIZE + GROUP_SIZE * len(sequences))
    _HEADER.pack_into(buf, 0, CURRENT_VERSION, len(sequences))
    offset = HEADER_SIZE
    for start, size in sequences:
        _GROUP.pack_into(buf, offset, start, start, size, 0)
        offset += GROUP_SIZE
    return bytes(buf)


# -- decoding ------------------------------------------------------------------------------------------------


def decode(data: bytes | bytearray | memoryview) -> Availability:
    """Decode a BP-34 encoding (Java-encoded or period-based groups); trailing bytes are ignored (as Java)."""
    if len(data) < HEADER_SIZE:
        raise FormatError(
            f"{len(data)} bytes, shorter than the {HEADER_SIZE}-byte header", field="header", offset=0
        )
    version, count = _HEADER.unpack_from(data, 0)
    if version != CURRENT_VERSION:
        raise FormatError(f"unsupported header version {version}", field="version", offset=0)
    if count < 0:
        raise FormatError(f"negative group count {count}", field="numOfSequenceGroups", offset=4)
    end = HEADER_SIZE + GROUP_SIZE * count
    if len(data) < end:
        present = (len(data) - HEADER_SIZE) // GROUP_SIZE
        raise FormatError(
            f"header says {count} groups, body holds {present}",
            field=f"sequenceGroup[{present}]",
            offset=HEADER_SIZE + GROUP_SIZE * present,
        )
    return Availability(_GROUP.iter_unpack(memoryview(data)[HEADER_SIZE:end]))


def _group_error(index: int, field: str, message: str) -> FormatError:
    offset = HEADER_SIZE + GROUP_SIZE * index + {"first": 0, "last": 8, "size": 16, "period": 20}[field]
    name = {
        "first": "firstSequenceStart",
        "last": "lastSequenceStart",
        "size": "sequenceSize",
        "period": "sequencePeriod",
    }[field]
    return FormatError(message, field=f"sequenceGroup[{index}].{name}", offset=offset)


def _piece_of_group(index: int, group: Group) -> _Piece:
    """Validate one group and return it normalised to (start, end, period, size)."""
    first, last, size, period = group
    if first < 0:
        raise _group_error(index, "first", f"negative entry id {first}")
    if last < first:
        raise _group_error(index, "last", f"lastSequenceStart {last} below firstSequenceStart {first}")
    if size <= 0:
        raise _group_error(index, "size", f"non-positive sequence size {size}")
    if period < 0:
        raise _group_error(index, "period", f"negative sequence period {period}")
    end = last + size - 1
    if end > _INT64_MAX:
        raise _group_error(index, "size", f"entry ids run past int64 ({last} + {size} - 1)")
    if last == first:
        return (first, end, size, size)
    if period == 0:
        raise _group_error(index, "period", "period 0 with lastSequenceStart != firstSequenceStart")
    if (last - first) % period:
        raise _group_error(index, "last", f"{last} is not a whole number of periods ({period}) after {first}")
    if size > period:
        raise _group_error(index, "size", f"sequence size {size} exceeds period {period}: sequences overlap")
    if size == period:  # sequences touch: one contiguous run
        return (first, end, end - first + 1, end - first + 1)
    return (first, end, period, size)


def _normalise(groups: Iterable[Group]) -> list[_Piece]:
    """Validate groups in wire order; return disjoint ascending pieces (overlapping/adjacent runs merged).

    The loop keeps Java's usual shape (a period-0 run well after the previous piece) on a short path: bookies
    answer with thousands of such groups.
    """
    pieces: list[_Piece] = []
    prev_first = -1
    prev_end = -2
    for index, group in enumerate(groups):
        first, last, size, period = group
        if last == first and prev_end + 1 < first and size > 0 and period >= 0 and first + size <= _INT64_MAX:
            prev_first, prev_end = first, first + size - 1
            pieces.append((first, prev_end, size, size))
            continue
        piece = _piece_of_group(index, group)
        start, end, period, size = piece
        if start <= prev_first:
            raise _group_error(index, "first", f"groups not ascending: {start} after {prev_first}")
        prev_first = start
        if pieces and start <= prev_end + 1:
            p_start, p_end, p_period, p_size = pieces[-1]
            if period == size and p_period == p_size:
                end = max(p_end, end)
                piece = (p_start, end, end - p_start + 1, end - p_start + 1)
                pieces.pop()
            elif start <= p_end:
                message = f"period-based group overlaps the previous one ending at {p_end}"
                raise _group_error(index, "first", message)
        pieces.append(piece)
        prev_end = piece[1]
    return pieces


def _piece_count(piece: _Piece) -> int:
    start, end, period, size = piece
    return ((end - size + 1 - start) // period + 1) * size


# -- the value object ----------------------------------------------------------------------------------------


class Availability:
    """The entries of one ledger a bookie holds, decoded from BP-34 groups; immutable.

    `groups` are kept exactly as received; queries run on a normalised, disjoint form, so overlapping runs are
    counted once. Membership is a binary search; `missing` is group/run arithmetic, never a per-entry loop.
    Two availabilities are equal when their normalised forms are (adjacent or overlapping runs equal the
    merged run; a period group and the same ids spelled as runs do not compare equal).
    """

    __slots__ = ("_pieces", "_starts", "_total", "groups")

    groups: tuple[Group, ...]
    _pieces: tuple[_Piece, ...]
    _starts: tuple[int, ...]
    _total: int

    def __init__(self, groups: Iterable[Group]) -> None:
        """Validate groups (FormatError offsets refer to the equivalent wire encoding)."""
        group_tuple = tuple(groups)
        pieces = _normalise(group_tuple)
        object.__setattr__(self, "groups", group_tuple)
        object.__setattr__(self, "_pieces", tuple(pieces))
        object.__setattr__(self, "_starts", tuple(p[0] for p in pieces))
        object.__setattr__(self, "_total", sum(map(_piece_count, pieces)))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Availability is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Availability is immutable")

    @property
    def total(self) -> int:
        """Number of available entries, each counted once."""
        return self._total

    def __bool__(self) -> bool:
        return self._total > 0

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Availability):
            return self._pieces == other._pieces
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._pieces)

    def __repr__(self) -> str:
        return f"Availability({len(self.groups)} groups, total={self._total})"

    def __contains__(self, entry_id: object) -> bool:
        if not isinstance(entry_id, int):
            return False
        index = bisect_right(self._starts, entry_id) - 1
        if index < 0:
            return False
        start, end, period, size = self._pieces[index]
        return entry_id <= end and (entry_id - start) % period < size

    def __iter__(self) -> Iterator[int]:
        """Every available entry id, ascending; O(total) — prefer `runs()` or `missing()` for big ledgers."""
        for first, last in self.runs():
            yield from range(first, last + 1)

    @property
    def last(self) -> int | None:
        """The highest available id (None when nothing is), in O(1): pieces are ascending and disjoint."""
        if not self._pieces:
            return None
        start, end, period, size = self._pieces[-1]
        return start + (end - size + 1 - start) // period * period + size - 1

    def runs(self) -> Iterator[tuple[int, int]]:
        """Maximal inclusive (first, last) runs of available ids, ascending."""
        pending: tuple[int, int] | None = None
        for start, end, period, size in self._pieces:
            for run_start in range(start, end - size + 2, period):
                run_end = run_start + size - 1
                if pending is not None and pending[1] + 1 == run_start:
                    pending = (pending[0], run_end)
                    continue
                if pending is not None:
                    yield pending
                pending = (run_start, run_end)
        if pending is not None:
            yield pending

    def missing(
        self, first: int, last: int, expected: Striping | Iterable[int] | None = None
    ) -> list[tuple[int, int]]:
        """Inclusive ranges (ascending, merged) of the expected ids in [first, last] that are not available.

        `expected` is None (every id in the range), a `Striping` (handled arithmetically: the cost grows with
        groups, runs of the striping in the range and missing ranges, never with entry count), or any iterable
        of ids (materialised).
        """
        out: list[tuple[int, int]] = []
        for want in _expected_patterns(first, last, expected):
            for lo, hi, piece in self._uncovered_regions(want.first, want.last):
                if piece is None:
                    _add_pattern_runs(want.start, want.period, want.size, lo, hi, out)
                else:
                    _add_difference(want, lo, hi, piece, out)
        return out

    def missing_count(self, first: int, last: int, expected: Striping | Iterable[int] | None = None) -> int:
        """How many expected ids in [first, last] are not available; arithmetic like `missing`."""
        count = 0
        for want in _expected_patterns(first, last, expected):
            for lo, hi, piece in self._uncovered_regions(want.first, want.last):
                count += _pattern_count(want.start, want.period, want.size, lo, hi)
                if piece is not None:
                    count -= _covered_count(want, lo, hi, piece)
        return count

    def _uncovered_regions(self, lo: int, hi: int) -> Iterator[tuple[int, int, _Piece | None]]:
        """Ascending parts of [lo, hi] outside run pieces: gaps (piece None) and periodic pieces' spans."""
        pieces = self._pieces
        cursor = lo
        for index in range(max(bisect_right(self._starts, lo) - 1, 0), len(pieces)):
            start, end, period, size = pieces[index]
            if end < cursor:
                continue
            if start > hi:
                break
            if start > cursor:
                yield cursor, start - 1, None
            region_end = end if end < hi else hi
            if period != size:
                yield max(start, cursor), region_end, pieces[index]
            cursor = region_end + 1
            if cursor > hi:
                return
        yield cursor, hi, None


# -- missing-entry arithmetic ------------------------------------------------------------------------------
# A "pattern" is (start, period, size): the ids whose offset from `start` modulo `period` is below `size`,
# i.e. runs of `size` ids every `period` ids (a plain run has period == size). The expected entries (a
# Striping) and an available period group are both patterns, so every question below is answered per run or
# per period, never per entry. The helpers take plain ints: they are the availability check's hot path.


def _expected_patterns(first: int, last: int, expected: Striping | Iterable[int] | None) -> list[Striping]:
    """The expected ids in [first, last] as ascending disjoint Stripings (a plain run has period == size)."""
    if first < 0:
        raise ValueError(f"entry ids are non-negative, got first={first}")
    if expected is None:
        return [_run(first, last)] if first <= last else []
    if isinstance(expected, Striping):
        lo, hi = max(first, expected.first), min(last, expected.last)
        if lo > hi:
            return []
        return [Striping(lo, hi, expected.start, expected.period, expected.size)]
    ids = sorted({e for e in expected if first <= e <= last})
    runs: list[Striping] = []
    run_start = 0
    for i, entry_id in enumerate(ids):
        if i == 0 or entry_id != ids[i - 1] + 1:
            if i:
                runs.append(_run(run_start, ids[i - 1]))
            run_start = entry_id
    if ids:
        runs.append(_run(run_start, ids[-1]))
    return runs


def _run(first: int, last: int) -> Striping:
    return Striping(first, last, first, last - first + 1, last - first + 1)


def _pattern_runs(start: int, period: int, size: int, lo: int, hi: int) -> Iterator[tuple[int, int]]:
    """The pattern's runs clipped to [lo, hi], ascending."""
    if period == size:
        if lo <= hi:
            yield lo, hi
        return
    run = lo - (lo - start) % period
    if run + size <= lo:
        run += period
    while run <= hi:
        yield max(run, lo), min(run + size - 1, hi)
        run += period


def _pattern_count(start: int, period: int, size: int, lo: int, hi: int) -> int:
    """How many ids of the pattern lie in [lo, hi], in O(1)."""
    if hi < lo:
        return 0
    base = lo - (lo - start) % period  # a run start at or before lo
    full, rest = divmod(hi - base + 1, period)
    return full * size + min(rest, size) - min(lo - base, size)


def _add_pattern_runs(
    start: int, period: int, size: int, lo: int, hi: int, out: list[tuple[int, int]]
) -> None:
    """Append the pattern's runs in [lo, hi] (a gap between available pieces: all of them are missing)."""
    if period == size:
        _append_range(out, lo, hi)
        return
    run = lo - (lo - start) % period
    if run + size <= lo:
        run += period
    while run <= hi:
        _append_range(out, max(run, lo), min(run + size - 1, hi))
        run += period


def _append_range(out: list[tuple[int, int]], lo: int, hi: int) -> None:
    """Append [lo, hi] to ascending ranges, merging with the last one when they touch."""
    if out and out[-1][1] + 1 >= lo:
        out[-1] = (out[-1][0], max(out[-1][1], hi))
    else:
        out.append((lo, hi))


def _add_gaps(lo: int, hi: int, covered: Iterable[tuple[int, int]], out: list[tuple[int, int]]) -> None:
    """Append the parts of [lo, hi] not covered by ascending runs inside it."""
    cursor = lo
    for run_first, run_last in covered:
        if run_first > cursor:
            _append_range(out, cursor, run_first - 1)
        cursor = run_last + 1
    if cursor <= hi:
        _append_range(out, cursor, hi)


def _same_period_covered(want: Striping, piece: _Piece) -> bool:
    """True when both repeat every P ids and each expected run lies inside an available one."""
    start, _end, period, size = piece
    return want.period == period and (want.start - start) % period + want.size <= size


def _add_difference(want: Striping, lo: int, hi: int, piece: _Piece, out: list[tuple[int, int]]) -> None:
    """Append the expected ids in [lo, hi] (inside the span of a periodic piece) that the piece lacks."""
    start, _end, period, size = piece
    if _same_period_covered(want, piece):
        return
    if want.period == want.size:  # contiguous expectation: every gap of the piece is missing, O(output)
        _add_gaps(lo, hi, _pattern_runs(start, period, size, lo, hi), out)
        return
    for run_lo, run_hi in _pattern_runs(want.start, want.period, want.size, lo, hi):
        _add_gaps(run_lo, run_hi, _pattern_runs(start, period, size, run_lo, run_hi), out)


def _covered_count(want: Striping, lo: int, hi: int, piece: _Piece) -> int:
    """How many expected ids in [lo, hi] (inside the span of a periodic piece) the piece holds."""
    start, _end, period, size = piece
    if want.period == want.size:
        return _pattern_count(start, period, size, lo, hi)
    if want.period == period:
        return _same_period_overlap(want, lo, hi, piece)
    return sum(
        _pattern_count(start, period, size, run_lo, run_hi)
        for run_lo, run_hi in _pattern_runs(want.start, want.period, want.size, lo, hi)
    )


def _same_period_overlap(want: Striping, lo: int, hi: int, piece: _Piece) -> int:
    """Ids in [lo, hi] in both patterns when they share a period: intersect their arcs of one period."""
    start, _end, period, size = piece
    offset = (want.start - start) % period
    arcs = [(offset, min(offset + want.size, period) - 1)]
    if offset + want.size > period:
        arcs.append((0, offset + want.size - period - 1))
    count = 0
    for arc_lo, arc_hi in arcs:
        both_hi = min(arc_hi, size - 1)
        if arc_lo <= both_hi:
            count += _pattern_count(start + arc_lo, period, both_hi - arc_lo + 1, lo, hi)
    return count


# -- Java's listing that hides its newest entry --------------------------------------------------------------


def listing_may_hide(held: Availability, last_entry: int | None) -> bool:
    """Whether a bookie's listing may have left out `last_entry`, the highest entry the bookie must hold.

    Java's InterleavedLedgerStorage (and SortedLedgerStorage once its memtable is flushed) lists the index
    pages below `max(flushed pages x entries per page, highest entry in memory)`
    (IndexInMemPageMgr.PageEntriesIterableImpl), so the bookie's highest entry is left out while it starts an
    index page that is not flushed yet: a ledger whose only entry on that bookie is 0 lists as empty, a
    1,025-entry ledger lists 0..1023 (BookKeeper 4.17.3, tests/spark/test_java_checker.py). Only an entry
    past everything listed can be hidden so; the caller reads it before calling it missing.
    """
    if last_entry is None or last_entry in held:
        return False
    top = held.last
    return top is None or top < last_entry


def with_entry(data: bytes, entry_id: int) -> bytes:
    """`data` (an encoded listing whose ids are all below `entry_id`) with `entry_id` added."""
    return encode_runs([*decode(data).runs(), (entry_id, entry_id)])
