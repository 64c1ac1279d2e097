"""Pure-codec benchmark: BP-34 availability, missing-entry arithmetic, entry digests, ledger metadata parsing.

    .venv/bin/python -m bench.formats [--quick] [--runs R] [--json PATH]

Every row is measured against an in-run baseline on the same machine and data, and the ratio is reported:

1. laziness of the availability decode: `decode` (groups only, 1, 10 and 1000 period-0 groups, as Java
   bookies encode them) vs `set(decode(data))`, which materialises every entry id. This measures what not
   materialising ids saves, not a faster decoder: Java's own decode does not materialise ids either;
2. `Availability.missing()` calls/s with a `Striping` expectation (what the availability check asks per
   bookie and segment) vs the naive set difference, on the Java encoding of a realistic answer (the only
   like-for-like row of the availability sections: both sides start from the same bytes and give the same
   ranges). No period-based groups: no BookKeeper producer emits them, so they are not benchmarked;
3. laziness of the bookie's encode: `encode_runs` over the runs its index keeps vs `encode` over the
   materialised ids (what keeping runs saves);
4. entry package / verify per second (CRC32C 1 and 64 KiB, MAC 1 KiB payloads) vs a straightforward
   implementation with the same result that digests a concatenated copy and re-keys the HMAC per entry;
5. ledger metadata v3 parses/s (`bkaudit.formats.ledger_metadata.parse`) vs the bare protobuf decode of the
   same bytes, when that module exists (the hook below skips the section otherwise).

Every row runs both sides through bench/harness.py's alternation (3 timed loops each by default) and reports
medians with min-max and the ratio median/median; prints a markdown table and writes the raw results as
JSON (bench/results/formats-<stamp>.json or --json). A default run takes ~30 s.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import hmac
import importlib.util
import os
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import google_crc32c

from bench import harness
from bkaudit.formats.availability import decode, encode, encode_runs
from bkaudit.formats.entry import DigestManager, Entry
from bkaudit.model.ledger import DigestType
from bkaudit.model.quorum import Striping, entries_of_bookie


@dataclass
class Row:
    section: str
    case: str
    ours: harness.Spread  # seconds per operation over the timed loops
    baseline: harness.Spread
    baseline_name: str

    @property
    def ratio(self) -> float:
        return harness.ratio(self.baseline, self.ours)


def _loops(fn: Callable[[], object], budget: float) -> int:
    """Calls per timed loop so that a loop takes about `budget` seconds (after one call that fails early)."""
    fn()
    loops = 1
    while True:
        started = time.perf_counter()
        for _ in range(loops):
            fn()
        if time.perf_counter() - started >= budget / 4:
            return max(1, int(loops * budget / max(time.perf_counter() - started, 1e-9)))
        loops *= 4


def measure(
    ours: Callable[[], object], baseline: Callable[[], object], budget: float, runs: int
) -> tuple[harness.Spread, harness.Spread]:
    """Seconds per call of both sides: `runs` timed loops each, alternated (bench/harness.py's order), in
    this process: a per-call cost has no start-up to include, and both sides are equally warm."""
    fns = {"ours": ours, "baseline": baseline}
    loops = {k: _loops(f, budget) for k, f in fns.items()}
    per_call: dict[str, list[float]] = {k: [] for k in fns}
    for _run, side in harness.alternation(list(fns), runs):
        fn, n = fns[side], loops[side]
        started = time.perf_counter()
        for _ in range(n):
            fn()
        per_call[side].append((time.perf_counter() - started) / n)
    return harness.Spread.of(per_call["ours"]), harness.Spread.of(per_call["baseline"])


# -- availability --------------------------------------------------------------------------------------------


def runs_with_holes(entries: int, groups: int) -> list[tuple[int, int]]:
    """`groups` equal runs covering [0, entries) with one missing entry between consecutive runs."""
    length = entries // groups
    return [(i * length, (i + 1) * length - 2 if i < groups - 1 else entries - 1) for i in range(groups)]


def naive_missing(data: bytes, expected: Striping) -> list[tuple[int, int]]:
    """Baseline: materialise the available ids, then walk every expected id."""
    available = set(decode(data))
    ranges: list[tuple[int, int]] = []
    for entry_id in expected:
        if entry_id not in available:
            if ranges and ranges[-1][1] + 1 == entry_id:
                ranges[-1] = (ranges[-1][0], entry_id)
            else:
                ranges.append((entry_id, entry_id))
    return ranges


def bench_availability(budget: float, repeats: int, scale: int) -> list[Row]:
    rows = []
    for groups in (1, 10, 1000):
        entries = 50_000 * scale
        data = encode_runs(runs_with_holes(entries, groups))
        rows.append(
            Row(
                "decode laziness (no ids materialised)",
                f"{groups} group(s), {entries:,} entries",
                *measure(
                    lambda data=data: decode(data),
                    lambda data=data: set(decode(data)),
                    budget,
                    repeats,
                ),
                "set(decode(data)): every id materialised",
            )
        )
    runs = runs_with_holes(50_000 * scale, 1000)
    ids = [e for first, last in runs for e in range(first, last + 1)]
    rows.append(
        Row(
            "encode laziness (runs, not ids)",
            f"encode_runs, 1000 runs, {len(ids):,} entries",
            *measure(
                lambda: encode_runs(runs),
                lambda: encode(ids),
                budget,
                repeats,
            ),
            "encode(ids): every id materialised",
        )
    )
    return rows


def bench_missing(budget: float, repeats: int, scale: int) -> list[Row]:
    rows = []
    # Java-encoded (one group per stripe run) answer of bookie 0 in an E3/WQ2 ledger, 3 entries missing.
    entries = 30_000 * scale
    expected = entries_of_bookie(0, 0, entries - 1, 3, 2)
    holes = {2, 3, entries // 2 + 2}
    data = encode(e for e in expected if e not in holes)
    assert decode(data).missing(0, entries - 1, expected) == naive_missing(data, expected)
    rows.append(
        Row(
            "decode + missing (Striping)",
            f"E3/WQ2, Java groups ({len(decode(data).groups):,}), {entries:,} entries",
            *measure(
                lambda: decode(data).missing(0, entries - 1, expected),
                lambda: naive_missing(data, expected),
                budget,
                repeats,
            ),
            "set difference",
        )
    )
    return rows


# -- entries -------------------------------------------------------------------------------------------------


def naive_digest(digest_type: DigestType, password: bytes, covered: bytes) -> bytes:
    """Baseline digest: over one concatenated buffer, re-deriving the HMAC key every time."""
    if digest_type is DigestType.CRC32C:
        return struct.pack(">I", google_crc32c.value(covered))
    return hmac.new(hashlib.sha1(b"mac" + password).digest(), covered, hashlib.sha1).digest()


def naive_package(
    digest_type: DigestType, password: bytes, fields: tuple[int, int, int, int], payload: bytes
) -> bytes:
    header = struct.pack(">qqqq", *fields)
    return header + naive_digest(digest_type, password, header + payload) + payload


def naive_verify(digest_type: DigestType, password: bytes, data: bytes) -> Entry:
    """Baseline verify with the same result (an Entry), digesting a concatenated copy."""
    length = 4 if digest_type is DigestType.CRC32C else 20
    header, digest, payload = data[:32], data[32 : 32 + length], data[32 + length :]
    if naive_digest(digest_type, password, header + payload) != digest:
        raise ValueError("digest mismatch")
    return Entry(*struct.unpack(">qqqq", header), payload)


def bench_entries(budget: float, repeats: int) -> list[Row]:
    rows = []
    fields = (1, 7, 6, 8 * 1024)
    for digest_type, size in (
        (DigestType.CRC32C, 1024),
        (DigestType.CRC32C, 64 * 1024),
        (DigestType.MAC, 1024),
    ):
        payload = os.urandom(size)
        manager = DigestManager(1, b"pwd", digest_type)
        packaged = manager.package(*fields[1:], payload)
        assert naive_package(digest_type, b"pwd", fields, payload) == packaged
        assert naive_verify(digest_type, b"pwd", packaged) == manager.verify(packaged, 7)
        case = f"{digest_type.name}, {size // 1024} KiB payload"
        rows.append(
            Row(
                "entry package",
                case,
                *measure(
                    lambda m=manager, p=payload: m.package(7, 6, 8 * 1024, p),
                    lambda t=digest_type, p=payload: naive_package(t, b"pwd", fields, p),
                    budget,
                    repeats,
                ),
                "concatenate + digest",
            )
        )
        rows.append(
            Row(
                "entry verify",
                case,
                *measure(
                    lambda m=manager, d=packaged: m.verify(d, 7),
                    lambda t=digest_type, d=packaged: naive_verify(t, b"pwd", d),
                    budget,
                    repeats,
                ),
                "slice + concatenate + digest",
            )
        )
    return rows


# -- ledger metadata (hook: only when bkaudit.formats.ledger_metadata exists) --------------------------------


def v3_body(blob: bytes) -> bytes:
    """The protobuf message of a v3 blob: after the header line and its varint32 length."""
    pos, length, shift = blob.index(b"\n") + 1, 0, 0
    while True:
        byte = blob[pos]
        length |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if byte < 0x80:
            return blob[pos : pos + length]


def bench_metadata(budget: float, repeats: int) -> list[Row]:
    if importlib.util.find_spec("bkaudit.formats.ledger_metadata") is None:
        print("bkaudit.formats.ledger_metadata not found: metadata parses/s skipped", file=sys.stderr)
        return []
    from bkaudit.formats import ledger_metadata
    from bkaudit.formats.proto import DataFormats_pb2
    from bkaudit.model.ledger import FrozenMap, LedgerMetadata, LedgerState, Segment

    rows = []
    for segments in (1, 10):
        bookies = [f"bookie-{i}.example.com:3181" for i in range(3 + segments)]
        metadata = LedgerMetadata(
            ensemble_size=3,
            write_quorum=2,
            ack_quorum=2,
            state=LedgerState.CLOSED,
            last_entry_id=segments * 10_000 - 1,
            length=segments * 10_000 * 1024,
            digest_type=DigestType.CRC32C,
            password=b"pwd",
            segments=tuple(Segment(i * 10_000, tuple(bookies[i : i + 3])) for i in range(segments)),
            ctime=1_700_000_000_000,
            custom_metadata=FrozenMap({"application": b"pulsar", "component": b"managed-ledger"}),
        )
        blob = ledger_metadata.serialize(metadata, 3)
        body = v3_body(blob)
        assert ledger_metadata.parse(blob) == metadata
        assert DataFormats_pb2.LedgerMetadataFormat.FromString(body).ensembleSize == 3
        rows.append(
            Row(
                "ledger metadata parse",
                f"v3, {segments} segment(s), {len(blob)} bytes",
                *measure(
                    lambda b=blob: ledger_metadata.parse(b),
                    lambda b=body: DataFormats_pb2.LedgerMetadataFormat.FromString(b),
                    budget,
                    repeats,
                ),
                "bare protobuf decode",
            )
        )
    return rows


# -- report --------------------------------------------------------------------------------------------------


def table(rows: list[Row]) -> list[str]:
    row = harness.markdown_row
    lines = [
        row(["what", "case", "ours, ops/s, median (min-max)", "baseline", "baseline, ops/s", "ratio"]),
        row(["---", "---", "---:", "---", "---:", "---:"]),
    ]
    for r in rows:
        lines.append(row([r.section, r.case, f"**{_rate(r.ours)}**", r.baseline_name, _rate(r.baseline),
                          f"{r.ratio:.2f}x"]))
    return lines


def _rate(per_call: harness.Spread) -> str:
    return per_call.rate_cell(1.0)


def report(rows: list[Row], quick: bool, runs: int, start: dict[str, object], end: dict[str, object]) -> str:
    lines = [
        f"### Formats ({dt.date.today().isoformat()}, `bench/formats.py{' --quick' if quick else ''}`)",
        "",
        harness.machine_line(start, end),
        f"Single thread, one process; per row {runs} timed loops of each side, alternated; ops/s is the "
        "median (min-max) over the loops and the ratio median/median.",
        "",
        *table(rows),
        "",
        "Ratios above 1 mean ours is faster. The laziness rows compare against materialising every entry "
        "id: they measure what laziness saves, not a faster codec (Java does not materialise ids either). "
        "The like-for-like availability row is decode + missing on a Java-encoded answer. The metadata "
        "baseline is the protobuf decode alone (our parse adds header checks, validation and the "
        "LedgerMetadata value object, so it is below 1).",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small run (CI smoke, a few seconds)")
    parser.add_argument("--runs", type=int, default=harness.DEFAULT_RUNS, help="timed loops of each side")
    parser.add_argument("--json", help="result file (default bench/results/formats-<stamp>.json)")
    args = parser.parse_args(argv)
    budget, scale = (0.05, 1) if args.quick else (0.3, 2)
    start = harness.machine()
    rows = bench_availability(budget, args.runs, scale)
    rows += bench_missing(budget, args.runs, scale)
    rows += bench_entries(budget, args.runs)
    rows += bench_metadata(budget, args.runs)
    end = harness.machine()
    path = harness.write_json(
        "formats",
        {"quick": args.quick, "runs": args.runs, "machine_start": start, "machine_end": end,
         "rows": [{"section": r.section, "case": r.case, "baseline_name": r.baseline_name,
                   "ours_s_per_op": r.ours, "baseline_s_per_op": r.baseline, "ratio": r.ratio}
                  for r in rows]},
        args.json,
    )
    print(report(rows, args.quick, args.runs, start, end) + f"Raw results: `{path}`.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
