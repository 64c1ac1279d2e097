"""Ledger layouts and injected holes of the checker benchmarks (checker.py, checker_reads.py, scaling.py).

Pure planning, no I/O: what each ledger looks like (quorums, length, segments), which copies the benchmark
deletes, and the ground truth a correct checker must report, from a naive per-entry model of those deletions.

Two layouts:
- `uniform`: one length for all, E3/WQ2/AQ2 and E5/WQ3/AQ2 alternating, one segment, ensembles rotating over
  the bookies (what `make bench-quick` measures);
- `realistic` (issue 15 item 2), seeded: ~98% of ledgers with 10-1,000 entries and ~2% with 13,000-50,000;
  E2/WQ2/AQ2, E3/WQ2/AQ2 and E5/WQ3/AQ2 in thirds; ~10% multi-segment (2-3 segments), each boundary replacing
  one bookie by one of the same rack that is not in the ensemble, as an ensemble change after a bookie
  failure does under BookKeeper's rack-aware placement.

Ensembles are consecutive bookies of a list whose racks are assigned round robin (LocalCluster's
/rack-1../rack-N), so an ensemble of up to N bookies spans min(E, N) racks, as the rack-aware policy asks.
Sizes stay linear at 1M ledgers: a single-segment ledger's segment tuple is shared per ensemble, a bookie's
share is produced as runs (`bookie_runs`) and only ledgers with holes are ever expanded entry by entry.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from bkaudit.model.quorum import Striping, entries_of_bookie, write_set

SEED = 34
HOLE_FRACTION = 0.01
UNIFORM_QUORUMS = ((3, 2, 2), (5, 3, 2))
REALISTIC_QUORUMS = ((2, 2, 2), (3, 2, 2), (5, 3, 2))
SHORT_LENGTHS = (10, 1_000)
LONG_LENGTHS = (13_000, 50_000)
LONG_FRACTION = 0.02
MULTI_SEGMENT_FRACTION = 0.10
HOLE_KINDS = ("one", "one", "run", "two")
LAYOUTS = ("uniform", "realistic")

Holes = dict[int, dict[str, set[int]]]
"""{ledger: {bookie: entry ids deleted from that bookie}}."""
Truth = dict[int, tuple[str, list[tuple[int, int]]]]
"""{damaged ledger: (category, entries below the write quorum as inclusive runs)}."""


@dataclass(frozen=True, slots=True)
class Layout:
    """One closed ledger: quorums, its length, and its segments as (first entry id, ensemble)."""

    e: int
    wq: int
    aq: int
    length: int
    segments: tuple[tuple[int, tuple[str, ...]], ...]

    @property
    def last(self) -> int:
        return self.length - 1

    def spans(self) -> Iterator[tuple[int, int, tuple[str, ...]]]:
        """(first, last, ensemble) of every segment."""
        for i, (first, ens) in enumerate(self.segments):
            end = self.segments[i + 1][0] - 1 if i + 1 < len(self.segments) else self.last
            yield first, end, ens

    def ensemble_at(self, entry: int) -> tuple[str, ...]:
        ens = self.segments[0][1]
        for first, seg in self.segments:
            if first > entry:
                break
            ens = seg
        return ens

    def bookies(self) -> set[str]:
        return {b for _first, ens in self.segments for b in ens}


# -- layouts -------------------------------------------------------------------------------------------------


def uniform(n: int, bookies: Sequence[str], entries: int | Sequence[int]) -> dict[int, Layout]:
    """E3/WQ2/AQ2 and E5/WQ3/AQ2 alternating, one segment, ensembles rotating; `entries` one length for all
    or one per ledger."""
    shared: dict[tuple[str, ...], tuple[tuple[int, tuple[str, ...]], ...]] = {}
    out: dict[int, Layout] = {}
    for i in range(n):
        e, wq, aq = UNIFORM_QUORUMS[i % 2]
        k = (i // 2) % len(bookies)
        ens = tuple(bookies[(k + j) % len(bookies)] for j in range(e))
        length = entries if isinstance(entries, int) else entries[i]
        out[i] = Layout(e, wq, aq, length, shared.setdefault(ens, ((0, ens),)))
    return out


def realistic(n: int, bookies: Sequence[str], racks: int, *, seed: int | str = SEED) -> dict[int, Layout]:
    """The seeded realistic mix (see the module docstring); `racks` as LocalCluster assigns them."""
    rng = random.Random(f"{seed}:realistic")
    shared: dict[tuple[str, ...], tuple[tuple[int, tuple[str, ...]], ...]] = {}
    out: dict[int, Layout] = {}
    nb = len(bookies)
    for lid in range(n):
        e, wq, aq = rng.choice(REALISTIC_QUORUMS)
        lo, hi = LONG_LENGTHS if rng.random() < LONG_FRACTION else SHORT_LENGTHS
        length = rng.randint(lo, hi)
        k = rng.randrange(nb)
        ens = tuple(bookies[(k + j) % nb] for j in range(e))
        if rng.random() >= MULTI_SEGMENT_FRACTION:
            out[lid] = Layout(e, wq, aq, length, shared.setdefault(ens, ((0, ens),)))
            continue
        count = rng.choice((2, 3))
        starts = sorted(rng.sample(range(1, length), count - 1))
        segments = [(0, ens)]
        for start in starts:
            segments.append((start, replace_one(segments[-1][1], bookies, racks, rng)))
        out[lid] = Layout(e, wq, aq, length, tuple(segments))
    return out


def replace_one(
    ens: tuple[str, ...], bookies: Sequence[str], racks: int, rng: random.Random
) -> tuple[str, ...]:
    """`ens` with one bookie replaced by one on the same rack (index mod `racks`) outside the ensemble."""
    at = {b: i for i, b in enumerate(bookies)}
    slots = list(range(len(ens)))
    rng.shuffle(slots)
    for slot in slots:
        rack = at[ens[slot]] % racks
        spare = [b for i, b in enumerate(bookies) if i % racks == rack and b not in ens]
        if spare:
            return (*ens[:slot], rng.choice(spare), *ens[slot + 1 :])
    raise ValueError(f"no bookie outside {ens} can replace one of it on its rack")


def plan(
    layout: str, n: int, bookies: Sequence[str], racks: int, *, entries: int = 10
) -> tuple[dict[int, Layout], Holes]:
    """Layouts and the listing holes (`listing_holes`) of the named layout."""
    if layout == "uniform":
        layouts = uniform(n, bookies, entries)
    elif layout == "realistic":
        layouts = realistic(n, bookies, racks)
    else:
        raise ValueError(f"unknown layout {layout!r} (one of {', '.join(LAYOUTS)})")
    return layouts, listing_holes(layouts)


# -- holes ---------------------------------------------------------------------------------------------------


def _damaged(
    layouts: dict[int, Layout], rng: random.Random
) -> Iterator[tuple[int, Layout, tuple[int, int, tuple[str, ...]]]]:
    """The ~1% of ledgers (at least 3) that get a hole, each with the segment span it goes in."""
    ids = sorted(layouts)
    for lid in rng.sample(ids, min(len(ids), max(3, int(len(ids) * HOLE_FRACTION)))):
        lay = layouts[lid]
        yield lid, lay, rng.choice(list(lay.spans()))


def listing_holes(layouts: dict[int, Layout], *, seed: int | str = SEED) -> Holes:
    """Holes in ~1% of the ledgers (at least 3), each in a random segment: one copy of an entry lost, a run of
    three of one bookie's entries lost, or one entry lost on two of its bookies."""
    rng = random.Random(seed)
    holes: Holes = {}
    for lid, lay, (first, last, ens) in _damaged(layouts, rng):
        entry = rng.randint(first, last)
        copies = [ens[i] for i in write_set(entry, lay.e, lay.wq)]
        kind = rng.choice(HOLE_KINDS)
        mine = holes.setdefault(lid, {})
        if kind == "two":
            for b in copies[:2]:
                mine.setdefault(b, set()).add(entry)
        elif kind == "run":
            b = copies[0]
            stored = entries_of_bookie(ens.index(b), first, last, lay.e, lay.wq)
            start = rng.randrange(stored.count())
            mine.setdefault(b, set()).update(itertools.islice(iter(stored), start, start + 3))
        else:
            mine.setdefault(copies[-1], set()).add(entry)
    return holes


def read_holes(layouts: dict[int, Layout], *, seed: int | str = f"{SEED}:read-holes") -> Holes:
    """Holes the first/last-per-segment reads must see, in ~1% of the ledgers: in a random segment, one
    bookie's first or last stored entry lost, or the segment's first or last entry lost on two bookies."""
    rng = random.Random(seed)
    holes: Holes = {}
    for lid, lay, (first, last, ens) in _damaged(layouts, rng):
        kind = rng.choice(("first", "last", "two"))
        mine = holes.setdefault(lid, {})
        if kind == "two":
            x = rng.choice((first, last))
            for i in rng.sample(list(write_set(x, lay.e, lay.wq)), 2):
                mine.setdefault(ens[i], set()).add(x)
            continue
        i = rng.randrange(lay.e)
        stored = list(entries_of_bookie(i, first, last, lay.e, lay.wq).runs())
        if not stored:  # this bookie index holds nothing of a tiny segment: take the segment's first entry
            i, x = write_set(first, lay.e, lay.wq)[0], first
        else:
            x = stored[0][0] if kind == "first" else stored[-1][1]
        mine.setdefault(ens[i], set()).add(x)
    return holes


# -- ground truth and bookie shares --------------------------------------------------------------------------


def truth(layouts: dict[int, Layout], holes: Holes) -> Truth:
    """Expected category and entries below WQ of every damaged ledger: naive, entry by entry, counting the
    copies each entry still has on its write set in the segment holding it. Only ledgers with holes are
    expanded."""
    out: Truth = {}
    for lid, lost in holes.items():
        lay = layouts[lid]
        least, under = lay.wq, []
        for x in range(lay.length):
            ens = lay.ensemble_at(x)
            copies = sum(1 for i in write_set(x, lay.e, lay.wq) if x not in lost.get(ens[i], ()))
            least = min(least, copies)
            if copies < lay.wq:
                under.append(x)
        if least < lay.wq:
            category = (
                "no_replica" if least == 0 else "below_ack_quorum" if least < lay.aq else "below_write_quorum"
            )
            out[lid] = (category, as_runs(under))
    return out


def as_runs(ids: list[int]) -> list[tuple[int, int]]:
    """Sorted ids as maximal inclusive runs."""
    out: list[tuple[int, int]] = []
    for x in sorted(ids):
        if out and out[-1][1] + 1 == x:
            out[-1] = (out[-1][0], x)
        else:
            out.append((x, x))
    return out


def bookie_runs(lay: Layout, bookie: str, lost: set[int] | None = None) -> list[tuple[int, int]]:
    """The entries `bookie` stores of a ledger as inclusive runs, over every segment it is in, minus `lost`.
    Expands entry by entry only when something was lost."""
    runs: list[tuple[int, int]] = []
    for first, last, ens in lay.spans():
        if bookie in ens:
            runs.extend(entries_of_bookie(ens.index(bookie), first, last, lay.e, lay.wq).runs())
    if not lost:
        return runs
    return as_runs([x for lo, hi in runs for x in range(lo, hi + 1) if x not in lost])


def bookie_stripings(lay: Layout, bookie: str) -> list[Striping]:
    """The entries `bookie` stores of a ledger as one striping per segment it is in (nothing lost): what
    `bookie.bulkload.bulk_load_stripings` stores in one row each."""
    return [entries_of_bookie(ens.index(bookie), first, last, lay.e, lay.wq)
            for first, last, ens in lay.spans() if bookie in ens]


def bookie_entries(lay: Layout, bookie: str, lost: set[int] | None = None) -> Iterator[int]:
    """The entry ids `bookie` stores of a ledger (for bodies: the read-evidence bench), minus `lost`."""
    for lo, hi in bookie_runs(lay, bookie, lost):
        yield from range(lo, hi + 1)


def pairs(layouts: dict[int, Layout]) -> int:
    """(ledger, bookie) pairs: one GetListOfEntriesOfLedger each in a replicas check."""
    return sum(len(lay.bookies()) for lay in layouts.values())


def describe(layout: str, plan: dict[int, Layout]) -> str:
    """One sentence on what the ledgers of a plan are (for the reports)."""
    n = len(plan)
    total = sum(lay.length for lay in plan.values())
    multi = sum(1 for lay in plan.values() if len(lay.segments) > 1)
    if layout == "uniform":
        lengths = sorted({lay.length for lay in plan.values()})
        shown = f"{lengths[0]} entries each" if len(lengths) == 1 else f"{lengths[0]}-{lengths[-1]} entries"
        return (f"closed, {shown} ({total:,} entries in all), E3/WQ2/AQ2 and E5/WQ3/AQ2 alternating, one "
                f"segment, ensembles rotating over the bookies ({pairs(plan):,} (ledger, bookie) pairs)")
    long_ = sum(1 for lay in plan.values() if lay.length >= LONG_LENGTHS[0])
    mix = {q: sum(1 for lay in plan.values() if (lay.e, lay.wq, lay.aq) == q) for q in REALISTIC_QUORUMS}
    quorums = ", ".join(f"E{e}/WQ{w}/AQ{a} {c / n:.0%}" for (e, w, a), c in mix.items())
    return (f"closed, realistic layout (seed {SEED}): {n - long_:,} ledgers of {SHORT_LENGTHS[0]}-"
            f"{SHORT_LENGTHS[1]:,} entries and {long_:,} of {LONG_LENGTHS[0]:,}-{LONG_LENGTHS[1]:,} "
            f"({total:,} entries in all); {quorums}; {multi:,} ledgers ({multi / n:.1%}) with 2-3 segments, "
            f"one bookie replaced by one of its rack at each boundary; rack-aware ensembles "
            f"({pairs(plan):,} (ledger, bookie) pairs)")


ROW_BYTES = 63
"""SQLite bytes per bulk-loaded entry copy with its index (measured: 4,754,998 copies in 284 MB)."""
RUN_BYTES = 72
"""Bookie memory per in-memory run (`bookie/runs.py`: two list slots and two int objects), estimated."""
STRIPING_ROW_BYTES = 60
"""SQLite bytes per striping row with its ledger index (six integers), estimated."""
STRIPING_MEMORY_BYTES = 250
"""Bookie memory per striped (ledger, segment): a `Striping`, its share of a `StripedIds` and of the index
dict, estimated."""


@dataclass(frozen=True, slots=True)
class Footprint:
    """What loading a plan into the bookies costs: entry rows and their in-memory runs for the shares that
    lost entries, one striping row and object per (ledger, segment, bookie) for the others."""

    copies: int
    runs: int
    stripings: int = 0

    @property
    def disk_bytes(self) -> int:
        return self.copies * ROW_BYTES + self.stripings * STRIPING_ROW_BYTES

    @property
    def memory_bytes(self) -> int:
        return self.runs * RUN_BYTES + self.stripings * STRIPING_MEMORY_BYTES


def footprint(plan: dict[int, Layout], holes: Holes | None = None) -> Footprint:
    """Rows, runs and stripings of a plan as `bench/checker.py` loads it, from the stripings alone
    (O(segments x bookies), no expansion): a bookie's share of a ledger is entry rows where it lost entries
    (`holes`), stripings otherwise."""
    holes = holes or {}
    copies = runs = stripings = 0
    for lid, lay in plan.items():
        damaged = holes.get(lid, {})
        for first, last, ens in lay.spans():
            for idx in range(lay.e):
                if ens[idx] in damaged:
                    share = entries_of_bookie(idx, first, last, lay.e, lay.wq)
                    copies += share.count()
                    runs += share.run_count()
                else:
                    stripings += 1
    return Footprint(copies, runs, stripings)
