"""What each bookie must hold of a ledger, as the fan-out's requests carry it: the digest of the canonical
listing of those entries, the healthy answer's size, and the last entry (see bkaudit.job.fanout).

Computed once per (ledger, bookie) by the ledger pass, so it must cost little more than a dictionary lookup
for the ledgers of a typical workload: hence the memos of `ExpectedDigests`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from xxhash import xxh3_128_digest

from bkaudit.audit.batching import answer_bytes
from bkaudit.audit.expected import checked_segments
from bkaudit.formats.availability import encode_segment_stripings
from bkaudit.model.quorum import Striping, entries_of_bookie
from bkaudit.model.shape import LedgerShape

DIGEST_MAX_RUNS = 1 << 21
"""Above this many expected runs (a 48 MiB answer, beyond any response frame) the digest is not computed: the
answer is compared in detail instead."""


def digest(data: bytes) -> bytes:
    """XXH3-128 of the bytes: equal digests mean equal bytes (no accidental collisions, unlike a CRC).

    Every healthy answer is hashed once by the fan-out and every expected one once by the ledger pass (17 GB
    of each at a million realistic ledgers). The digest only has to catch accidental differences: a bookie
    that wanted to deceive the check would not need a collision, it would send the expected listing. So a
    fast non-cryptographic 128-bit hash does the job: 1.1 µs for a 130 KB answer, against 70 µs for the
    SHA-256 used before (with the CPU's SHA instructions; docs/performance.md, "Metadata checker").
    """
    return xxh3_128_digest(data)


class Expectation(NamedTuple):
    """What one bookie must hold of one ledger, as a listing request carries it."""

    digest: bytes | None  # of the canonical encoding (None: too many runs, always compare in detail)
    size: int  # the healthy answer's bytes, by which listing calls are cut
    last_entry: int | None  # the highest entry it must hold: a listing may hide it (rpc.listing.confirm_tail)


class ExpectedDigests:
    """Digests of the canonical encoding of each bookie's expected entries, memoised twice.

    By layout (E, WQ and the checked segments' spans): which bookie index must hold which striping; and by
    striping set: the digest and the healthy answer's size. Ledgers of one workload repeat a handful of
    layouts (uniform ledger lengths), so a ledger costs a few dictionary lookups there; where every ledger
    has its own length, each (ledger, bookie) is encoded and hashed once, and the per-ledger bookkeeping
    around it is kept to building each Striping once.
    """

    MEMO_LIMIT = 100_000

    def __init__(self) -> None:
        self._plans: dict[tuple[Any, ...], list[list[tuple[int, _Key, Striping]]]] = {}
        self._known: dict[tuple[_Key, ...], Expectation] = {}

    def expected(self, shape: LedgerShape) -> tuple[dict[str, bytes | None], int]:
        """({bookie: digest or None}, entries checked) — bookies in `expected_by_bookie` order."""
        wanted, n = self.expected_requests(shape)
        return {bookie: x.digest for bookie, x in wanted.items()}, n

    def expected_requests(self, shape: LedgerShape) -> tuple[dict[str, Expectation], int]:
        """({bookie: its Expectation}, entries checked) — `expected`'s order."""
        spans = checked_segments(shape)
        e, wq = shape.ensemble_size, shape.write_quorum
        key = (e, wq, tuple((sp.first, sp.last) for sp in spans))
        plan = self._plans.get(key)
        if plan is None:
            plan = [self._bookie_stripings(sp.first, sp.last, e, wq) for sp in spans]
            if len(self._plans) < self.MEMO_LIMIT:
                self._plans[key] = plan
        out: dict[str, Expectation] = {}
        if len(spans) == 1 and len(set(spans[0].ensemble)) == e:
            # one checked segment of distinct bookies (most ledgers): one striping each, nothing to group
            ensemble = spans[0].ensemble
            for idx, skey, striping in plan[0]:
                out[ensemble[idx]] = self._expect((skey,), (striping,))
            return out, spans[0].last - spans[0].first + 1
        by_bookie: dict[str, list[tuple[_Key, Striping]]] = {}
        for sp, per in zip(spans, plan, strict=True):
            ensemble = sp.ensemble
            for idx, skey, striping in per:
                by_bookie.setdefault(ensemble[idx], []).append((skey, striping))
        for bookie, held in by_bookie.items():
            out[bookie] = self._expect(tuple(k for k, _ in held), [s for _, s in held])
        return out, sum(sp.last - sp.first + 1 for sp in spans)

    @staticmethod
    def _bookie_stripings(first: int, last: int, e: int, wq: int) -> list[tuple[int, _Key, Striping]]:
        """(bookie index, memo key, striping) of every index that must hold entries of [first, last]."""
        per = []
        whole_period = last - first + 1 >= e  # then every index holds WQ ids of each period: no count needed
        for idx in range(e):
            st = entries_of_bookie(idx, first, last, e, wq)
            if whole_period or st.count() > 0:
                per.append((idx, (st.first, st.last, st.start, st.period, st.size), st))
        return per

    def _expect(self, key: tuple[_Key, ...], stripings: Sequence[Striping]) -> Expectation:
        """The Expectation of a bookie holding exactly `stripings`, memoised."""
        hit = self._known.get(key)
        if hit is None:
            last = max((held for s in stripings if (held := s.last_held()) is not None), default=None)
            hit = Expectation(self._digest_of(stripings), answer_bytes(stripings), last)
            if len(self._known) < self.MEMO_LIMIT:
                self._known[key] = hit
        return hit

    @staticmethod
    def _digest_of(stripings: Sequence[Striping]) -> bytes | None:
        if sum(s.run_count() for s in stripings) > DIGEST_MAX_RUNS:
            return None
        return digest(encode_segment_stripings(stripings))


_Key = tuple[int, int, int, int, int]
"""A striping as a memo key: (first, last, start, period, size)."""
