"""Bookie storage: group commit, fencing order, master keys, index runs, admin deletes, reload."""

from __future__ import annotations

import itertools
import random
import threading
from concurrent.futures import wait
from pathlib import Path

import pytest

from bkaudit.bookie.bulkload import BULK_MASTER_KEY, bulk_load_entries, bulk_load_index
from bkaudit.bookie.ledgerdb import StorageLocked
from bkaudit.bookie.runs import EntryRuns
from bkaudit.bookie.storage import Storage
from bkaudit.errors import BookieError
from bkaudit.formats import availability
from bkaudit.formats.entry import DigestManager, master_key
from bkaudit.model.ledger import DigestType

KEY = master_key(b"pwd")
OTHER = master_key(b"other")


def entry(ledger_id: int, entry_id: int, payload: bytes = b"p") -> bytes:
    return DigestManager(ledger_id, b"pwd", DigestType.CRC32C).package(entry_id, entry_id - 1, 0, payload)


@pytest.fixture
def storage(tmp_path: Path):
    s = Storage(tmp_path)
    yield s
    s.close()


# -- EntryRuns ----------------------------------------------------------------------------------------------
def test_runs_match_a_set_under_random_inserts() -> None:
    rng = random.Random(7)
    for _ in range(200):
        ids = [rng.randrange(0, 60) for _ in range(rng.randrange(0, 40))]
        runs = EntryRuns()
        for e in ids:
            runs.add(e)
        assert list(runs) == sorted(set(ids))
        assert runs.encoded() == availability.encode(sorted(set(ids)))
        starts_ends = runs.runs()
        assert all(a[1] + 1 < b[0] for a, b in itertools.pairwise(starts_ends))


def test_runs_add_run_merges_overlaps() -> None:
    runs = EntryRuns([(0, 3), (10, 12), (20, 25)])
    runs.add_run(2, 11)
    runs.add_run(13, 13)
    assert runs.runs() == [(0, 13), (20, 25)]
    runs.add_run(30, 29)  # empty
    assert runs.last == 25 and runs.count() == 20 and 21 in runs and 14 not in runs


# -- storage -----------------------------------------------------------------------------------------------
def test_adds_are_durable_and_listed(tmp_path: Path) -> None:
    ids = [0, 1, 2, 5, 6, 9]
    with Storage(tmp_path) as s:
        wait([s.add_entry(1, e, KEY, entry(1, e)) for e in ids])
        assert s.entry_runs(1) == [(0, 2), (5, 6), (9, 9)]
        assert s.read_entry(1, -1) == entry(1, 9)
    with Storage(tmp_path) as s:  # reloaded from disk
        assert s.entry_runs(1) == [(0, 2), (5, 6), (9, 9)]
        assert s.availability(1) == availability.encode(ids)
        assert s.read_entry(1, 5) == entry(1, 5)
        assert s.ledger_state(1).master_key == KEY  # type: ignore[union-attr]


def test_many_concurrent_adds_share_commits(storage: Storage) -> None:
    commits = []
    original = storage._commit

    def counting(ops):  # type: ignore[no-untyped-def]
        if ops:
            commits.append(len(ops))
        original(ops)

    storage._commit = counting  # type: ignore[method-assign]
    futures = []

    def writer(ledger_id: int) -> None:
        futures.extend(storage.add_entry(ledger_id, e, KEY, entry(ledger_id, e)) for e in range(500))

    threads = [threading.Thread(target=writer, args=(lid,)) for lid in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wait(futures)
    assert all(f.exception() is None for f in futures)
    assert sum(commits) == 2000 and len(commits) < 2000  # group commit: fewer transactions than adds
    assert storage.pending == 0


def test_master_key_mismatch_is_eua(storage: Storage) -> None:
    storage.add_entry(1, 0, KEY, entry(1, 0)).result()
    with pytest.raises(BookieError) as err:
        storage.add_entry(1, 1, OTHER, entry(1, 1)).result()
    assert err.value.status == "EUA"
    with pytest.raises(BookieError, match="EUA"):
        storage.fence(1, OTHER).result()


def test_fence_rejects_plain_adds_but_not_recovery_adds(tmp_path: Path) -> None:
    with Storage(tmp_path) as s:
        s.add_entry(3, 0, KEY, entry(3, 0)).result()
        s.fence(3, KEY).result()
        with pytest.raises(BookieError, match="EFENCED"):
            s.add_entry(3, 1, KEY, entry(3, 1)).result()
        s.add_entry(3, 1, KEY, entry(3, 1), recovery=True).result()
        s.fence(3, KEY).result()  # idempotent, answered from durable state
    with Storage(tmp_path) as s:
        assert s.ledger_state(3).fenced  # type: ignore[union-attr]
        assert s.entry_runs(3) == [(0, 1)]


def test_fence_linearizes_with_queued_adds(storage: Storage) -> None:
    """Adds queued before the fence succeed, adds queued after it fail: one writer, arrival order."""
    storage.add_entry(4, 0, KEY, entry(4, 0)).result()
    before = [storage.add_entry(4, e, KEY, entry(4, e)) for e in range(1, 50)]
    fence = storage.fence(4, KEY)
    after = [storage.add_entry(4, e, KEY, entry(4, e)) for e in range(50, 60)]
    wait([*before, fence, *after])
    assert fence.exception() is None
    assert all(f.exception() is None for f in before)
    assert all(isinstance(f.exception(), BookieError) and f.exception().status == "EFENCED" for f in after)


def test_fence_unknown_ledger_creates_it_fenced(storage: Storage) -> None:
    storage.fence(9, KEY).result()
    assert storage.knows(9) and storage.entry_runs(9) == []
    assert storage.availability(9) == availability.encode([])
    with pytest.raises(BookieError, match="ENOENTRY"):
        storage.read_entry(9, -1)


def test_reads_of_unknown_and_missing(storage: Storage) -> None:
    with pytest.raises(BookieError, match="ENOLEDGER"):
        storage.read_entry(5, 0)
    with pytest.raises(BookieError, match="ENOLEDGER"):
        storage.read_lac(5)
    assert storage.availability(5) is None
    storage.add_entry(5, 0, KEY, entry(5, 0)).result()
    with pytest.raises(BookieError, match="ENOENTRY"):
        storage.read_entry(5, 1)


def test_write_lac_and_read_lac(storage: Storage) -> None:
    dm = DigestManager(6, b"pwd", DigestType.CRC32C)
    storage.add_entry(6, 0, KEY, entry(6, 0)).result()
    assert storage.read_lac(6) == (None, entry(6, 0))
    storage.write_lac(6, KEY, dm.package_lac(0)).result()
    assert storage.read_lac(6) == (dm.package_lac(0), entry(6, 0))
    with pytest.raises(BookieError, match="EUA"):
        storage.write_lac(6, OTHER, dm.package_lac(0)).result()


def test_readd_is_idempotent_last_write_wins(storage: Storage) -> None:
    storage.add_entry(7, 0, KEY, entry(7, 0, b"a")).result()
    storage.add_entry(7, 0, KEY, entry(7, 0, b"a")).result()
    storage.add_entry(7, 0, KEY, entry(7, 0, b"b"), recovery=True).result()
    assert storage.read_entry(7, 0) == entry(7, 0, b"b")
    assert storage.entry_runs(7) == [(0, 0)]


def test_admin_deletes_make_holes_and_survive_reopen(tmp_path: Path) -> None:
    with Storage(tmp_path) as s:
        wait([s.add_entry(8, e, KEY, entry(8, e)) for e in range(12)])
        wait([s.add_entry(10, e, KEY, entry(10, e)) for e in range(3)])
        assert s.delete_entries(8, [3, 5, 6, 7, 99]) == 4
        assert s.entry_runs(8) == [(0, 2), (4, 4), (8, 11)]
        assert s.delete_ledger(10) == 3
        assert not s.knows(10)
    with Storage(tmp_path) as s:
        assert s.entry_runs(8) == [(0, 2), (4, 4), (8, 11)]
        assert s.entry_runs(10) is None
        with pytest.raises(BookieError, match="ENOENTRY"):
            s.read_entry(8, 5)


def test_data_dir_is_locked_while_open(tmp_path: Path) -> None:
    with Storage(tmp_path):
        with pytest.raises(StorageLocked, match="in use"):
            Storage(tmp_path)
        with pytest.raises(StorageLocked):
            bulk_load_index(tmp_path, [])


def test_overload_is_etoomanyrequests(tmp_path: Path) -> None:
    with Storage(tmp_path, max_pending=1) as s:
        with s._cv:  # pretend one operation is in flight
            s._inflight = 1
        with pytest.raises(BookieError, match="ETOOMANYREQUESTS"):
            s.add_entry(1, 0, KEY, entry(1, 0)).result()
        with s._cv:
            s._inflight = 0


def test_bulk_load_index(tmp_path: Path) -> None:
    ledgers = [(lid, [(0, 4), (7, 9)] if lid % 2 else [(0, 0)]) for lid in range(1000)]
    assert bulk_load_index(tmp_path, ledgers) == 500 * 8 + 500
    with Storage(tmp_path) as s:
        assert len(s.ledger_ids()) == 1000
        assert s.entry_runs(1) == [(0, 4), (7, 9)]
        assert s.entry_runs(2) == [(0, 0)]
        got = s.read_entry(1, 8)
        dm = DigestManager(1, b"", DigestType.DUMMY)
        assert dm.verify(got, 8).entry_id == 8
        assert s.ledger_state(1).master_key == master_key(b"")  # type: ignore[union-attr]



def test_bulk_load_entries_stores_given_bodies(tmp_path: Path) -> None:
    crc = {lid: DigestManager(lid, b"", DigestType.CRC32C) for lid in (3, 4)}
    bodies = {(lid, e): crc[lid].package(e, e - 1, 100 * (e + 1), bytes([e]) * 100) for lid in (3, 4)
              for e in range(6) if (lid, e) != (4, 2)}  # entry 2 of ledger 4 left out: a hole
    ledgers = [(lid, [(e, b) for (k, e), b in bodies.items() if k == lid]) for lid in (3, 4)]
    assert bulk_load_entries(tmp_path, ledgers, chunk=4) == 11
    with Storage(tmp_path) as s:
        assert s.entry_runs(3) == [(0, 5)]
        assert s.entry_runs(4) == [(0, 1), (3, 5)]
        assert s.read_entry(4, 5) == bodies[(4, 5)]
        assert crc[3].verify(s.read_entry(3, 0), 0).payload == b"\x00" * 100
        with pytest.raises(BookieError, match="ENOENTRY"):
            s.read_entry(4, 2)
        assert s.ledger_state(4).master_key == master_key(b"")  # type: ignore[union-attr]

# -- batch listing wire bytes -------------------------------------------------------------------------------
def _batch_head():
    from bkaudit.formats.proto import BookkeeperProtocol_pb2 as pb

    head = pb.Response(status=pb.EOK)
    head.header.version = pb.VERSION_THREE
    head.header.operation = pb.GET_LIST_OF_ENTRIES_OF_LEDGERS
    head.header.txnId = 2**40
    return head


def _expected_batch(head, items):
    """The protobuf serialization of a batch response; items are (ledger, status name, bytes or None)."""
    from bkaudit.formats.proto import BookkeeperProtocol_pb2 as pb

    expected = pb.Response()
    expected.CopyFrom(head)
    batch = expected.getListOfEntriesOfLedgersResponse
    batch.status = pb.EOK
    for lid, status, data in items:
        if data is None:
            batch.ledgers.add(ledgerId=lid, status=pb.StatusCode.Value(status))
        else:
            batch.ledgers.add(ledgerId=lid, status=pb.EOK, availabilityOfEntriesOfLedger=data)
    return expected.SerializeToString()


def test_batch_listing_bytes_equal_protobuf_encoding() -> None:
    from bkaudit.bookie.listing import batch_response, ledger_item
    from bkaudit.formats.wire import varint

    assert [varint(v) for v in (0, 1, 127, 128, 300)] == [b"\x00", b"\x01", b"\x7f", b"\x80\x01", b"\xac\x02"]
    head = _batch_head()
    entries = [(1, availability.encode([0, 1, 5])), (2**40 + 3, None), (7, availability.encode([]))]
    expected = _expected_batch(head, [(lid, "ENOLEDGER" if d is None else "EOK", d) for lid, d in entries])
    items = [(lid, None if d is None else ledger_item(lid, d)) for lid, d in entries]
    assert batch_response(head.SerializeToString(), items, max_bytes=10**6) == expected


def test_batch_listing_never_exceeds_the_frame_and_marks_what_did_not_fit() -> None:
    """Ledgers answered in order while they fit; the rest ETOOMANYREQUESTS, a ledger too big for any frame
    EIO, unknown ledgers still ENOLEDGER; the answer within `max_bytes` (ground truth: protobuf's bytes)."""
    from bkaudit.bookie.listing import batch_response, ledger_item

    head = _batch_head()
    big = availability.encode(range(0, 2000, 2))  # 1000 groups: 24,064 bytes
    small = availability.encode([0, 1, 2])
    huge = availability.encode(range(0, 8000, 2))
    entries = [(1, small), (2, big), (3, None), (4, big), (5, small), (6, huge)]
    limit = 2 * len(big)  # room for one big ledger, not two; ledger 6 fits no frame of this size
    items = [(lid, None if d is None else ledger_item(lid, d)) for lid, d in entries]
    got = batch_response(head.SerializeToString(), items, max_bytes=limit)
    assert got is not None and len(got) <= limit
    assert got == _expected_batch(head, [(1, "EOK", small), (2, "EOK", big), (3, "ENOLEDGER", None),
                                         (4, "ETOOMANYREQUESTS", None), (5, "ETOOMANYREQUESTS", None),
                                         (6, "EIO", None)])
    # not even the short answers fit: the caller answers the whole request ETOOMANYREQUESTS
    smalls = [(i, ledger_item(i, small)) for i in range(100)]
    assert batch_response(head.SerializeToString(), smalls, max_bytes=200) is None


# -- the listing cache ---------------------------------------------------------------------------------------
def test_listing_cache_is_an_lru_bounded_by_its_accounted_bytes() -> None:
    from bkaudit.bookie.listing import ListingCache, ledger_item

    cost = len(ledger_item(0, b"\x00" * 1000)) + ListingCache.ENTRY_OVERHEAD  # ids 0..9: same item size
    cache = ListingCache(3 * cost)
    for lid in range(3):
        assert cache.put(lid, bytes([lid]) * 1000) == ledger_item(lid, bytes([lid]) * 1000)
    assert cache.bytes == 3 * cost and len(cache) == 3
    assert cache.get(0) == b"\x00" * 1000  # 0 is now the most recent
    cache.put(3, b"\x03" * 1000)  # evicts 1, the least recently used
    assert 1 not in cache and {0, 2, 3} == {lid for lid in range(4) if lid in cache}
    assert cache.bytes == 3 * cost and cache.evictions == 1
    assert cache.item(2) == ledger_item(2, b"\x02" * 1000)  # 2 is now the most recent
    cache.put(9, b"x" * (3 * cost))  # larger than the whole bound: not cached, nothing evicted
    assert 9 not in cache and len(cache) == 3
    cache.invalidate(0)
    assert cache.bytes == 2 * cost and cache.get(0) is None


def test_listing_more_ledgers_than_the_cache_holds_stays_under_the_bound_and_recomputes(tmp_path) -> None:
    """50 ledgers of E3/WQ2-like stripes (every third id missing) through a cache bound of about 8 of them:
    the cache's accounted bytes never pass the bound, and evicted ledgers answer the same bytes again, equal
    to the encoding of the ids written (ground truth), also after a write changed one of them."""
    written: dict[int, list[int]] = {}
    ledgers = []
    for lid in range(1, 51):
        ids = [e for e in range(300 + lid) if e % 3 != 2]
        written[lid] = ids
        ledgers.append((lid, [(e, e) for e in ids]))
    bulk_load_index(tmp_path, ledgers)
    per_ledger = len(availability.encode(written[25]))
    bound = 8 * per_ledger
    with Storage(tmp_path, listing_cache_bytes=bound) as s:
        cache = s.listing_cache
        for _ in range(2):
            for lid in written:
                assert s.availability(lid) == availability.encode(written[lid])
                assert cache.bytes <= bound
        assert cache.evictions > 0 and 0 < len(cache) < 50
        assert s.availability_many([1, 50]) == [(1, availability.encode(written[1])),
                                                (50, availability.encode(written[50]))]
        from bkaudit.bookie.listing import ledger_item

        for _ in range(2):
            assert s.listing_items([3, 999, 40]) == [(3, ledger_item(3, availability.encode(written[3]))),
                                                     (999, None),
                                                     (40, ledger_item(40, availability.encode(written[40])))]
            assert cache.bytes <= bound
        s.add_entry(50, 5000, BULK_MASTER_KEY, entry(50, 5000)).result(timeout=10)  # invalidates ledger 50
        written[50].append(5000)
        assert s.availability(50) == availability.encode(written[50])
        s.delete_entries(1, [0, 1])
        assert s.availability(1) == availability.encode(written[1][2:])
        assert cache.bytes <= bound


# -- the storage check ---------------------------------------------------------------------------------------
def test_storage_check_reloads_entries_removed_by_another_process(tmp_path) -> None:
    from bkaudit.bookie.ledgerdb import connect_db, current_dir

    bulk_load_index(tmp_path, [(7, [(0, 99)]), (8, [(0, 9)])])
    with Storage(tmp_path) as s:
        assert s.availability(7) == availability.encode(range(100))  # cached now
        assert s.check() is None
        other = connect_db(current_dir(tmp_path) / "ledgers.db")  # not the bookie: e.g. a disk repair tool
        other.execute("DELETE FROM entries WHERE ledger_id = 7 AND entry_id >= 50")
        other.close()
        assert s.check() is None
        assert s.availability(7) == availability.encode(range(50))
        assert s.entry_runs(8) == [(0, 9)]


@pytest.mark.parametrize("damage", ["rmtree", "unlink", "replace", "overwrite"])
def test_storage_check_reports_lost_storage_and_fails_requests_with_eio(tmp_path, damage) -> None:
    import shutil

    from bkaudit.bookie.ledgerdb import current_dir

    bulk_load_index(tmp_path, [(7, [(0, 9)])])
    db = current_dir(tmp_path) / "ledgers.db"
    with Storage(tmp_path) as s:
        assert s.check() is None and s.availability(7) is not None
        if damage == "rmtree":
            shutil.rmtree(current_dir(tmp_path))
        elif damage == "unlink":
            db.unlink()
        elif damage == "replace":
            db.rename(db.with_suffix(".old"))
            db.write_bytes(db.with_suffix(".old").read_bytes())
        else:
            with open(db, "r+b") as f:
                f.write(b"\x00" * 100)
        problem = s.check()
        assert problem is not None and s.failed == problem
        for call in (lambda: s.availability(7), lambda: s.availability_many([7]), lambda: s.read_entry(7, 0),
                     lambda: s.entry_runs(7), lambda: s.listing_items([7])):
            with pytest.raises(BookieError, match="EIO"):
                call()
        with pytest.raises(BookieError, match="EIO"):
            s.add_entry(7, 10, BULK_MASTER_KEY, entry(7, 10)).result(timeout=10)
        assert s.check() == problem  # stays lost


def test_batch_listing_property_within_limit_in_order_and_exact() -> None:
    """Random requests and limits: the response is never above the limit, parses as protobuf, answers every
    ledger in request order, full answers are exactly the encodings given and form a prefix of the ledgers
    with entries (ground truth: the inputs and protobuf's parser)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from bkaudit.bookie.listing import batch_response, ledger_item
    from bkaudit.formats.proto import BookkeeperProtocol_pb2 as pb

    head = _batch_head().SerializeToString()

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.tuples(st.integers(0, 2**63 - 1), st.one_of(st.none(), st.integers(0, 300))),
                    max_size=40, unique_by=lambda t: t[0]),
           st.integers(50, 40_000))
    def check(ledgers, limit):
        encode = availability.encode
        given_bytes = {lid: None if n is None else encode(range(0, 2 * n, 2)) for lid, n in ledgers}
        items = [(lid, None if d is None else ledger_item(lid, d)) for lid, d in given_bytes.items()]
        got = batch_response(head, items, max_bytes=limit)
        if got is None:
            assert len(head) + 9 + 16 * len(items) > limit  # batch tag 2, length <= 5, status 2; <= 16 each
            return
        assert len(got) <= limit
        resp = pb.Response()
        resp.ParseFromString(got)
        answers = resp.getListOfEntriesOfLedgersResponse.ledgers
        assert [a.ledgerId for a in answers] == list(given_bytes)
        cut = False
        for a in answers:
            data = given_bytes[a.ledgerId]
            if data is None:
                assert a.status == pb.ENOLEDGER
            elif a.status == pb.EOK:
                assert not cut and a.availabilityOfEntriesOfLedger == data
            elif a.status == pb.ETOOMANYREQUESTS:
                cut = True
            else:
                assert a.status == pb.EIO and len(ledger_item(a.ledgerId, data)) + len(head) > limit - 30

    check()


def test_service_answers_eio_rather_than_a_frame_above_its_limit(tmp_path) -> None:
    """A single-ledger listing larger than the response limit is EIO (a client's frame decoder would drop the
    connection on it); a batch of everything is cut to the limit (request bytes built with protobuf)."""
    import threading

    from bkaudit.bookie.service import BookieService
    from bkaudit.formats.proto import BookkeeperProtocol_pb2 as pb

    bulk_load_index(tmp_path, [(1, [(e, e) for e in range(0, 2000, 2)]), (2, [(0, 5)])])  # 1000 runs, 24 KB
    with Storage(tmp_path) as s:
        service = BookieService(s, max_response_bytes=10_000)
        try:
            def ask(req: pb.Request) -> pb.Response:
                got: list[bytes] = []
                done = threading.Event()
                service.dispatch(req.SerializeToString(), lambda b: (got.append(b), done.set()))
                assert done.wait(10)
                assert len(got[0]) <= 10_000
                resp = pb.Response()
                resp.ParseFromString(got[0])
                return resp

            for lid, status in ((1, pb.EIO), (2, pb.EOK)):
                req = pb.Request()
                req.header.version, req.header.operation, req.header.txnId = (
                    pb.VERSION_THREE, pb.GET_LIST_OF_ENTRIES_OF_LEDGER, lid)
                req.getListOfEntriesOfLedgerRequest.ledgerId = lid
                assert ask(req).status == status
            req = pb.Request()
            req.header.version, req.header.operation, req.header.txnId = (
                pb.VERSION_THREE, pb.GET_LIST_OF_ENTRIES_OF_LEDGERS, 9)
            req.getListOfEntriesOfLedgersRequest.ledgerId.extend([2, 1, 3])
            items = ask(req).getListOfEntriesOfLedgersResponse.ledgers
            assert [(i.ledgerId, i.status) for i in items] == [(2, pb.EOK), (1, pb.EIO), (3, pb.ENOLEDGER)]
            assert items[0].availabilityOfEntriesOfLedger == availability.encode(range(6))
        finally:
            service.close()
