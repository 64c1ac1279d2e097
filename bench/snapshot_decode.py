"""Python CPU per ledger of the snapshot's partition reader, without ZooKeeper or Spark.

    .venv/bin/python -m bench.snapshot_decode [--ledgers N] [--runs R] [--profile] [--baseline-repo DIR]

Why: at 1M ledgers the snapshot's `ledgers` step ran at 0.22x the rate of raw multiRead, bound by the Python
workers (~60 us of CPU per ledger). This isolates that per-ledger path exactly as
`bkaudit.spark.datasource.read_units` runs it, from the bytes of a multiRead response to the Arrow batches
it yields: `MultiRead.deserialize` (column-wise answers) -> `bkaudit.tables.rows.chunk_batches` (decode,
validate, build columns, flush every `batch_size` rows). Listing and the request side are not included
(they do not touch the metadata).

Data: synthetic, realistic v3 blobs written by the repo's own `ledger_metadata.serialize` (seeded): 1-3
segments, E3/WQ2/AQ2 or E5/WQ3/AQ2 over 40 bookies "10.0.0.x:3181", CRC32C, Pulsar's custom metadata
(`pulsar/managed-ledger`, application, component), mostly closed ledgers; `--bad-fraction` mixes in
malformed blobs (parse_error rows). The responses are laid out byte for byte as ZooKeeper sends multiRead
answers (100 getData results each).

Each run is a fresh process timing `--passes` passes after one warm-up pass (the bookie-id memo and
imports warm, as in a long task) and reporting its median pass. With `--baseline-repo DIR` (a checkout or
export of another revision) runs alternate between that tree and this one (bench/harness.py's order) and
both must yield the same rows (SHA-256 of the Arrow IPC stream of the batches rebuilt from their values).
Prints us per ledger, median (min-max) over the runs; `--profile` prints a cProfile of one pass instead. A
default run takes ~30 s (60 s with a baseline). Results: docs/performance.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BOOKIES = [f"10.0.0.{i}:3181" for i in range(10, 50)]
CHUNK = 100  # getData ops per multiRead (bkaudit.zk.multiread.MULTI_READ_BATCH)


def make_blobs(ledgers: int, seed: int, bad_fraction: float) -> list[bytes]:
    """Seeded, realistic ledger metadata blobs (v3), a `bad_fraction` of them malformed."""
    from bkaudit.formats.ledger_metadata import serialize
    from bkaudit.model.ledger import DigestType, LedgerMetadata, LedgerState, Segment

    rng = random.Random(seed)
    blobs = []
    for i in range(ledgers):
        e, wq = rng.choice([(3, 2), (3, 2), (5, 3)])
        firsts = sorted(rng.sample(range(1, 50_000), rng.choice([0, 0, 1, 2])))
        segments = tuple(Segment(first, tuple(rng.sample(BOOKIES, e))) for first in [0, *firsts])
        closed = rng.random() < 0.9
        last = segments[-1].first_entry_id + rng.randrange(0, 50_000) if closed else -1
        md = LedgerMetadata(
            ensemble_size=e, write_quorum=wq, ack_quorum=2,
            state=LedgerState.CLOSED if closed else LedgerState.OPEN,
            last_entry_id=last, length=(last + 1) * 1024 if closed else 0,
            digest_type=DigestType.CRC32C, password=b"", segments=segments,
            ctime=1_700_000_000_000 + i,
            custom_metadata={
                "application": b"pulsar",
                "component": b"managed-ledger",
                "pulsar/managed-ledger": f"tenant-{i % 7}/ns-{i % 3}/persistent/topic-{i % 997}".encode(),
            },
        )  # fmt: skip
        blob = serialize(md)
        if rng.random() < bad_fraction:
            blob = rng.choice([blob[: rng.randrange(len(blob))], blob.replace(b"10.0.0.", b"10 0.0.", 1)])
        blobs.append(blob)
    return blobs


def responses(blobs: list[bytes]) -> list[tuple[list[str], bytes]]:
    """(paths, multiRead response) per chunk, laid out as ZooKeeper's MultiResponse of getData results."""
    from kazoo.protocol.serialization import int_struct, multiheader_struct, stat_struct

    out = []
    for start in range(0, len(blobs), CHUNK):
        paths, buf = [], bytearray()
        for ledger_id in range(start, min(start + CHUNK, len(blobs))):
            blob = blobs[ledger_id]
            paths.append(f"/ledgers/00/{ledger_id // 10_000:04d}/L{ledger_id % 10_000:04d}")
            buf += multiheader_struct.pack(4, False, 0) + int_struct.pack(len(blob)) + blob
            ctime = 1_700_000_000_000 + ledger_id
            stat = (ledger_id, ledger_id + 7, ctime, ctime, 2, 0, 0, 0, len(blob), 0, ledger_id)
            buf += stat_struct.pack(*stat)
        buf += multiheader_struct.pack(-1, True, -1)
        out.append((paths, bytes(buf)))
    return out


def ledger_ids(chunks: list[tuple[list[str], bytes]]) -> dict[str, int]:
    """{path: ledger id}, as `read_units` records them while listing (not timed: listing is not measured)."""
    return {p: int(p[-4:]) + 10_000 * int(p[-10:-6]) for paths, _ in chunks for p in paths}


def one_pass(chunks: list[tuple[list[str], bytes]], ids: dict[str, int], batch_size: int) -> list[Any]:
    """The reader's per-ledger work over every chunk: the RecordBatches it would yield (`ids` is consumed).

    On a tree with `rows.chunk_batches` (2026-11-27 on), as `read_units` runs it: each response decoded
    column-wise by `MultiRead.deserialize`, a chunk at a time; on an older tree (a `--baseline-repo`), one
    read at a time through `rows.ledger_batches`, each answer paired with its path as that tree's reader
    did (`old_reads`)."""
    from bkaudit.tables import rows
    from bkaudit.zk.multiread import MultiRead

    if hasattr(rows, "chunk_batches"):
        answered = ((paths, MultiRead.deserialize(buf, 0)) for paths, buf in chunks)
        return list(rows.chunk_batches(
            (([ids.pop(p) for p in paths], a.data, a.stats) for paths, a in answered), batch_size=batch_size
        ))
    return list(rows.ledger_batches(old_reads(chunks, MultiRead.deserialize), ids, batch_size=batch_size))


def old_reads(
    chunks: list[tuple[list[str], bytes]], deserialize: Any
) -> Iterator[tuple[str, bytes | None, Any]]:
    """(path, data, stat) per read, from a tree whose `MultiRead.deserialize` answers a list of results: its
    private `multiread._pair` (until 45509b0), restated here so the bench imports no private name."""
    from kazoo.exceptions import NoNodeError

    for paths, buf in chunks:
        results = deserialize(buf, 0)
        if len(results) != len(paths):
            raise ValueError(f"multiRead answered {len(results)} results for {len(paths)} reads")
        for path, res in zip(paths, results, strict=True):
            if type(res) is tuple:  # (data, stat): nearly every result
                yield path, res[0], res[1]
            elif isinstance(res, NoNodeError):
                yield path, None, None
            elif isinstance(res, Exception):
                raise res
            else:
                yield path, res[0], res[1]


def digest(batches: list[Any]) -> str:
    """SHA-256 of the rows' values: each batch rebuilt from its Python values first, so that two trees
    whose arrays hold the same values in differently laid out buffers (an all-valid bitmap or none) agree."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batches[0].schema) as writer:
        for b in batches:
            writer.write_batch(pa.RecordBatch.from_pylist(b.to_pylist(), schema=b.schema))
    return hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()


def side(ledgers: int, passes: int, seed: int, bad_fraction: float, batch_size: int) -> dict[str, Any]:
    """One run (in this process): us per ledger of each timed pass and the output's digest."""
    chunks = responses(make_blobs(ledgers, seed, bad_fraction))
    ids = ledger_ids(chunks)
    out = one_pass(chunks, dict(ids), batch_size)  # warm-up
    per_ledger = []
    for _ in range(passes):
        fresh = dict(ids)
        t0 = time.process_time()
        one_pass(chunks, fresh, batch_size)
        per_ledger.append((time.process_time() - t0) / ledgers * 1e6)
    return {"us_per_ledger": statistics.median(per_ledger), "passes": per_ledger, "digest": digest(out)}


def run_fresh(repo: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One side's run in a fresh process importing `bkaudit` from `repo` (its PYTHONPATH, alone). The file
    runs by path, not as bench.snapshot_decode: `-m` would put the current directory, this tree, first."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--side",
           "--ledgers", str(args.ledgers), "--passes", str(args.passes), "--seed", str(args.seed),
           "--bad-fraction", str(args.bad_fraction), "--batch-size", str(args.batch_size)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(repo.resolve())}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--ledgers", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per tree (alternated)")
    parser.add_argument("--passes", type=int, default=3, help="timed passes per process (median taken)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--bad-fraction", type=float, default=0.0, help="share of malformed blobs")
    parser.add_argument("--batch-size", type=int, default=10_000, help="rows per RecordBatch (as the reader)")
    parser.add_argument("--baseline-repo", type=Path, help="another revision's tree, measured alternately")
    parser.add_argument("--profile", action="store_true", help="cProfile one pass (this tree) and exit")
    parser.add_argument("--side", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side:
        print(json.dumps(side(args.ledgers, args.passes, args.seed, args.bad_fraction, args.batch_size)))
        return 0
    if args.profile:
        import cProfile
        import pstats

        chunks = responses(make_blobs(args.ledgers, args.seed, args.bad_fraction))
        ids = ledger_ids(chunks)
        one_pass(chunks, dict(ids), args.batch_size)
        profiler = cProfile.Profile()
        profiler.runcall(one_pass, chunks, dict(ids), args.batch_size)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        return 0
    from bench import harness

    trees = {"this tree": ROOT}
    if args.baseline_repo is not None:
        trees = {"baseline": args.baseline_repo, **trees}
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    for run, name in harness.alternation(list(trees), args.runs):
        r = run_fresh(trees[name], args)
        results[name].append(r)
        print(f"  run {run + 1} {name}: {r['us_per_ledger']:.2f} us/ledger", flush=True)
    if len({r["digest"] for rs in results.values() for r in rs}) != 1:
        raise SystemExit("the trees' Arrow output differs: not a like-for-like comparison")
    print(f"{args.ledgers:,} ledgers, bad fraction {args.bad_fraction}, batch size {args.batch_size}; "
          "Python CPU (process time) per ledger, median (min-max) of the runs:")  # fmt: skip
    spreads = {name: harness.Spread.of(r["us_per_ledger"] for r in rs) for name, rs in results.items()}
    for name, spread in spreads.items():
        print(f"  {name}: {spread.cell()} us/ledger")
    if "baseline" in spreads:
        print(f"  speed-up: {harness.ratio(spreads['baseline'], spreads['this tree']):.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
