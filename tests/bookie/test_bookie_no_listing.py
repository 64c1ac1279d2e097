"""The DbLedgerStorage-like bookie mode, as a Java bookie on DbLedgerStorage answers: a listing of a ledger it
holds is dropped unanswered (the storage's UnsupportedOperationException escapes
GetListOfEntriesOfLedgerProcessorV3), a listing of one it does not hold is ENOLEDGER (the handle lookup in
HandleFactoryImpl / LedgerDescriptor.createReadOnly throws NoLedgerException first); the rest is served.

Drives `BookieService` directly with v3 protobuf requests (the transport around it is not what is tested here)
on a real on-disk Storage.
"""

from __future__ import annotations

import queue

from bkaudit.bookie.service import BookieService
from bkaudit.bookie.storage import Storage
from bkaudit.formats.entry import DigestManager
from bkaudit.formats.proto import BookkeeperProtocol_pb2 as pb
from bkaudit.model.ledger import DigestType


def request(txn: int, op: int, ledger_id: int) -> bytes:
    req = pb.Request()
    req.header.version = pb.VERSION_THREE
    req.header.operation = op
    req.header.txnId = txn
    if op == pb.GET_LIST_OF_ENTRIES_OF_LEDGER:
        req.getListOfEntriesOfLedgerRequest.ledgerId = ledger_id
    elif op == pb.GET_LIST_OF_ENTRIES_OF_LEDGERS:
        req.getListOfEntriesOfLedgersRequest.ledgerId.extend([ledger_id])
    else:
        req.readRequest.ledgerId = ledger_id
        req.readRequest.entryId = 0
    return req.SerializeToString()


def serve(tmp_path, *, answer_listing: bool) -> list[tuple[int, int]]:
    """(txnId, status) of every reply to: list, batch list, read (in that order), once the read answered."""
    dm = DigestManager(7, b"", DigestType.CRC32C)
    answers: queue.Queue[tuple[int, int]] = queue.Queue()

    def reply(data: bytes) -> None:
        resp = pb.Response()
        resp.ParseFromString(data)
        answers.put((resp.header.txnId, resp.status))

    with Storage(tmp_path) as storage:
        storage.add_entry(7, 0, dm.master_key, dm.package(0, -1, 1, b"x"), recovery=False).result(30)
        service = BookieService(storage, answer_listing=answer_listing)
        try:
            service.dispatch(request(1, pb.GET_LIST_OF_ENTRIES_OF_LEDGER, 7), reply)
            service.dispatch(request(2, pb.GET_LIST_OF_ENTRIES_OF_LEDGERS, 7), reply)
            service.dispatch(request(3, pb.READ_ENTRY, 7), reply)
            got = []
            expected = 3 if answer_listing else 1
            # requests are taken in order: once the read is answered, the listings were dropped (or queued)
            while len(got) < expected or not any(txn == 3 for txn, _ in got):
                got.append(answers.get(timeout=30))
            while not answers.empty():
                got.append(answers.get_nowait())
            if not answer_listing:
                assert service.inflight == 0, "dropped requests do not count as in flight (drain)"
        finally:
            service.close()
    return got


def test_no_listing_mode_never_answers_listing_of_a_ledger_it_holds(tmp_path):
    got = serve(tmp_path, answer_listing=False)
    assert got == [(3, pb.EOK)]


def test_no_listing_mode_answers_enoledger_for_a_ledger_it_does_not_hold(tmp_path):
    answers: queue.Queue[tuple[int, int]] = queue.Queue()

    def reply(data: bytes) -> None:
        resp = pb.Response()
        resp.ParseFromString(data)
        answers.put((resp.header.txnId, resp.status))

    with Storage(tmp_path) as storage:
        service = BookieService(storage, answer_listing=False)
        try:
            service.dispatch(request(1, pb.GET_LIST_OF_ENTRIES_OF_LEDGER, 8), reply)
            assert answers.get(timeout=30) == (1, pb.ENOLEDGER)
            assert service.inflight == 0
        finally:
            service.close()


def test_default_mode_answers_listing(tmp_path):
    got = serve(tmp_path, answer_listing=True)
    assert sorted(txn for txn, _ in got) == [1, 2, 3]
