"""Evidence from reads, for bookies that cannot list their entries (BookKeeper's LedgerChecker semantics).

`DbLedgerStorage`, Pulsar's default, throws on `getListOfEntriesOfLedger` and the Java bookie never answers
the request. BookKeeper's own periodic check (`Auditor.checkAllLedgers` → `LedgerChecker`) reads entries
instead: per fragment (segment) and bookie index, the first and the last entry that bookie stores, plus
`auditorLedgerVerificationPercentage` percent of the fragment spread evenly in between (one random entry per
bucket of `length / n` ids, kept when the bookie stores it). This module is that choice, and the reduction of
the per-entry answers to a `BookieEvidence` the durability assessment combines exactly as listing evidence:

* ENOENTRY for an entry: that entry is proven missing;
* ENOLEDGER: the bookie does not know the ledger, so it holds none of it (as with a listing);
* an entry whose digest or ids do not verify: *corrupt*, not a replica (beyond BookKeeper, which only counts
  the read as successful);
* any other failure: the bookie is unverified for this ledger, with its status.

Entries that were not read are assumed present, so a finding from sampled reads is a lower bound: it carries
exactly the entries proven missing or corrupt, never an extrapolation.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from bkaudit.audit.base import Range, merge_ranges, range_count
from bkaudit.audit.evidence import BookieEvidence, MissingRun, compare_bookie, failed_evidence
from bkaudit.audit.expected import Expected, expected_by_bookie
from bkaudit.audit.statuses import STATUS_CORRUPT, STATUS_NO_ENTRY, STATUS_NO_LEDGER, STATUS_OK
from bkaudit.errors import FormatError
from bkaudit.formats.entry import DIGEST_LENGTH, HEADER_SIZE, DigestManager, parse_entry_header
from bkaudit.model.ledger import DigestType
from bkaudit.model.quorum import Striping
from bkaudit.model.shape import LedgerShape

EVIDENCE_LISTING = "listing"
EVIDENCE_READS = "reads"



def first_stored(s: Striping) -> int | None:
    """The lowest id of the striping (LedgerFragment.getFirstStoredEntryId), None when it is empty."""
    if s.last < s.first:
        return None
    offset = (s.first - s.start) % s.period
    e = s.first if offset < s.size else s.first + (s.period - offset)
    return e if e <= s.last else None


def last_stored(s: Striping) -> int | None:
    """The highest id of the striping (LedgerFragment.getLastStoredEntryId), None when it is empty."""
    if s.last < s.first:
        return None
    offset = (s.last - s.start) % s.period
    e = s.last if offset < s.size else s.last - (offset - s.size + 1)
    return e if e >= s.first else None


def entries_to_verify(s: Striping, percentage: float, rng: random.Random) -> list[int]:
    """The entries LedgerChecker reads for one (fragment, bookie index), ascending.

    `length = lastStored - firstStored + 1` ids and `n = int(length * percentage / 100)`. When `n < length`:
    first and last stored, plus, if `n > 0`, one random id in each bucket of `length // n` ids starting at
    firstStored while the bucket start is below `lastStored - bucket - 1`, kept if the bookie stores it.
    Otherwise every stored entry.
    """
    first, last = first_stored(s), last_stored(s)
    if first is None or last is None:
        return []
    if first == last:
        return [first]
    length = last - first + 1
    n = int(length * (percentage / 100.0))
    if n >= length:
        return list(Striping(first, last, s.start, s.period, s.size))
    chosen = {first, last}
    if n > 0:
        bucket = length // n
        index = first
        while index < last - bucket - 1:
            candidate = rng.randrange(bucket) + index
            if candidate in s:
                chosen.add(candidate)
            index += bucket
    return sorted(chosen)


@dataclass(frozen=True, slots=True)
class ReadPlan:
    """What to read from one bookie for one ledger: `entries` (ascending) out of `expected` it must hold."""

    entries: tuple[int, ...]
    expected: int

    @property
    def fraction(self) -> float:
        return len(self.entries) / self.expected if self.expected else 1.0


def plan_reads(
    shape: LedgerShape,
    bookie_id: str,
    percentage: float,
    *,
    seed: str = "",
    expected: Sequence[Expected] | None = None,
) -> ReadPlan:
    """Entries to read from `bookie_id` for `shape`: `entries_to_verify` per segment it appears in.

    The random picks are seeded by (`seed`, ledger, bookie, segment, index), so a re-run task (Spark) reads
    the same entries, and a new run (a new seed) samples others.
    """
    wants = list(expected) if expected is not None else expected_by_bookie(shape).get(bookie_id, [])
    chosen: set[int] = set()
    total = 0
    for exp in wants:
        rng = random.Random(f"{seed}:{shape.ledger_id}:{bookie_id}:{exp.segment_index}:{exp.bookie_index}")
        chosen.update(entries_to_verify(exp.striping, percentage, rng))
        total += exp.count
    return ReadPlan(tuple(sorted(chosen)), total)


@dataclass(frozen=True, slots=True)
class ReadSummary:
    """The per-entry answers of one (ledger, bookie), reduced: what travels from the executor to the combine.

    `status` OK (every read answered: `missing` and `corrupt` list the entries proven bad), ENOLEDGER, or the
    first failure that leaves the bookie unverified (`error` says why).
    """

    status: str
    entries_read: int
    missing: tuple[int, ...] = ()
    corrupt: tuple[int, ...] = ()
    error: str | None = None


def summarise_reads(outcomes: Mapping[int, str], errors: Mapping[int, str] | None = None) -> ReadSummary:
    """Reduce {entry: OK | ENOENTRY | CORRUPT | ENOLEDGER | failure status} to one ReadSummary."""
    if any(status == STATUS_NO_LEDGER for status in outcomes.values()):
        return ReadSummary(STATUS_NO_LEDGER, len(outcomes))
    for entry, status in sorted(outcomes.items()):
        if status not in (STATUS_OK, STATUS_NO_ENTRY, STATUS_CORRUPT):
            why = (errors or {}).get(entry) or status
            return ReadSummary(status, 0, error=f"read of entry {entry}: {why}")
    missing = tuple(sorted(e for e, st in outcomes.items() if st == STATUS_NO_ENTRY))
    corrupt = tuple(sorted(e for e, st in outcomes.items() if st == STATUS_CORRUPT))
    return ReadSummary(STATUS_OK, len(outcomes), missing, corrupt)


def read_evidence(
    shape: LedgerShape,
    bookie_id: str,
    summary: ReadSummary,
    expected: Sequence[Expected] | None = None,
) -> BookieEvidence:
    """A BookieEvidence from reads: missing runs are exactly the entries proven missing or corrupt."""
    wants = list(expected) if expected is not None else expected_by_bookie(shape).get(bookie_id, [])
    total = sum(w.count for w in wants)
    if summary.status == STATUS_NO_LEDGER:
        ev = compare_bookie(shape, bookie_id, None, wants)
        return BookieEvidence(
            bookie_id,
            STATUS_NO_LEDGER,
            ev.missing,
            evidence=EVIDENCE_READS,
            entries_read=summary.entries_read,
            entries_expected=total,
        )
    if summary.status != STATUS_OK:
        return failed_evidence(bookie_id, summary.status, summary.error, evidence=EVIDENCE_READS)
    bad = sorted(set(summary.missing) | set(summary.corrupt))
    missing: list[MissingRun] = []
    for w in wants:
        mine = [e for e in bad if e in w.striping]
        if mine:
            ranges = tuple(_ranges(mine))
            missing.append(MissingRun(w.segment_index, w.bookie_index, ranges, range_count(ranges)))
    return BookieEvidence(
        bookie_id,
        STATUS_OK,
        tuple(missing),
        evidence=EVIDENCE_READS,
        entries_read=summary.entries_read,
        entries_expected=total,
        corrupt=tuple(_ranges(sorted(summary.corrupt))),
    )


def verify_entry(
    ledger_id: int, entry_id: int, data: bytes, digest_type: str | None, password: bytes | None = None
) -> str | None:
    """None when the stored entry verifies; else why it is corrupt (`EntryVerifier`, for one entry)."""
    return EntryVerifier(ledger_id, digest_type, password)(entry_id, data)


class EntryVerifier:
    """Verifies the stored entries of one ledger: built once per ledger, called once per entry read.

    CRC32C, CRC32 and DUMMY need no password and are verified in full (BookKeeper's DigestManager rules, via
    `bkaudit.formats.entry`). A MAC ledger is verified in full only with its password; without it (the
    snapshot does not keep passwords) the header ids and the length are checked. An unknown digest type gets
    the header check only. Building the DigestManager once per ledger, not per entry, matters: its keys are
    SHA-1 hashes of the password, several times the cost of a CRC over a small entry.
    """

    __slots__ = ("_manager", "kind", "ledger_id")

    def __init__(self, ledger_id: int, digest_type: str | None, password: bytes | None = None) -> None:
        self.ledger_id = ledger_id
        try:
            self.kind = DigestType[digest_type] if digest_type else None
        except KeyError:
            self.kind = None
        full = self.kind is not None and (self.kind is not DigestType.MAC or password is not None)
        self._manager = DigestManager(ledger_id, password or b"", self.kind) if full and self.kind else None

    def __call__(self, entry_id: int, data: bytes) -> str | None:
        """None when `data` is entry `entry_id` of this ledger, intact; else why it is corrupt."""
        try:
            if self._manager is not None:
                self._manager.verify(data, entry_id)
                return None
            got_ledger, got_entry, _lac, _length = parse_entry_header(data)
            if got_ledger != self.ledger_id or got_entry != entry_id:
                return f"header says ledger {got_ledger} entry {got_entry}"
            kind = self.kind
            if kind is not None and len(data) < HEADER_SIZE + DIGEST_LENGTH[kind]:
                return f"{len(data)} bytes, shorter than the header and the {kind.name} digest"
        except FormatError as exc:
            return str(exc)
        return None


def _ranges(ids: Iterable[int]) -> list[Range]:
    return merge_ranges((e, e) for e in ids)
