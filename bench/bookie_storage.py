"""Bookie micro-benchmarks behind the numbers in docs/storage.md.

    .venv/bin/python -m bench.bookie_storage [--ledgers 100000] [--adds 50000]

1. storage only (in process): adds/s with group commit vs one transaction (one fsync) per add;
2. one bookie process, one BookieClient: pipelined 1 KiB adds/s (acknowledged = durable);
3. GetListOfEntries: a bookie bulk-loaded with `--ledgers` ledgers, listed through the batch operation
   (10,000 ledgers per message) vs one message per ledger, in ledgers/s.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from concurrent.futures import Future, wait
from pathlib import Path

from bkaudit.bookie.bulkload import bulk_load_index
from bkaudit.bookie.storage import Storage
from bkaudit.cluster.local import LocalCluster
from bkaudit.formats.entry import DigestManager, master_key
from bkaudit.model.ledger import DigestType
from bkaudit.rpc.client import BookieClient

KEY = master_key(b"bench")


def _bodies(ledgers: int, per_ledger: int, size: int = 1024) -> list[tuple[int, int, bytes]]:
    payload = b"x" * size
    out: list[tuple[int, int, bytes]] = []
    for lid in range(1, ledgers + 1):
        dm = DigestManager(lid, b"bench", DigestType.CRC32C)
        out.extend((lid, e, dm.package(e, e - 1, (e + 1) * size, payload)) for e in range(per_ledger))
    return out


def storage_adds(n: int, max_batch: int) -> float:
    items = _bodies(8, n // 8)
    with tempfile.TemporaryDirectory() as d, Storage(d, max_batch=max_batch) as s:
        start = time.perf_counter()
        futures = [s.add_entry(lid, e, KEY, body) for lid, e, body in items]
        wait(futures)
        return len(items) / (time.perf_counter() - start)


def rpc_adds(cluster: LocalCluster, n: int, window: int = 4000) -> float:
    b = cluster.bookies[0]
    items = _bodies(8, n // 8)
    with BookieClient(b.id, b.id) as client:
        client.get_bookie_info().result(10)
        start = time.perf_counter()
        inflight: list[Future[None]] = []
        for lid, e, body in items:
            inflight.append(client.add_entry(lid, e, KEY, body))
            if len(inflight) >= window:
                wait(inflight[: window // 2])
                del inflight[: window // 2]
        wait(inflight)
        return len(items) / (time.perf_counter() - start)


def listing(cluster: LocalCluster, ledgers: int) -> tuple[float, float, float]:
    b = cluster.bookies[0]
    cluster.stop_bookie(b.id)
    bulk_load_index(b.data_dir, ((lid, [(0, 9), (12, 20), (25, 25)]) for lid in range(1, ledgers + 1)))
    cluster.start_bookie(b.id)
    ids = list(range(1, ledgers + 1))
    with BookieClient(b.id, b.id, request_timeout_s=120) as client:
        rates = []
        for _ in range(2):  # first pass encodes every ledger's availability, the second is served cached
            start = time.perf_counter()
            chunks = [ids[i : i + 10_000] for i in range(0, len(ids), 10_000)]
            futures = [client.get_list_of_entries_batch(chunk) for chunk in chunks]
            total = sum(len(f.result(120)) for f in futures)
            rates.append(total / (time.perf_counter() - start))
        sample = ids[:20_000]
        start = time.perf_counter()
        wait([client.get_list_of_entries(lid) for lid in sample])
        single_rate = len(sample) / (time.perf_counter() - start)
    return rates[0], rates[1], single_rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--adds", type=int, default=50_000)
    parser.add_argument("--ledgers", type=int, default=100_000)
    args = parser.parse_args()
    print(f"storage, group commit:       {storage_adds(args.adds, 2000):10,.0f} adds/s")
    print(f"storage, commit per add:     {storage_adds(min(args.adds, 3000), 1):10,.0f} adds/s")
    with tempfile.TemporaryDirectory() as d:
        cluster = LocalCluster.up(Path(d) / "c", bookies=1, racks=1)
        try:
            adds = rpc_adds(cluster, args.adds)
            print(f"one bookie, native protocol:{adds:10,.0f} adds/s (1 KiB, pipelined)")
            cold, warm, single = listing(cluster, args.ledgers)
            print(f"GetListOfEntries, batch:     {cold:10,.0f} ledgers/s first pass, {warm:,.0f} cached "
                  f"({args.ledgers:,} ledgers)")
            print(f"GetListOfEntries, one each:  {single:10,.0f} ledgers/s")
        finally:
            cluster.down()


if __name__ == "__main__":
    main()
