"""The limbo state of bookie storage (BookKeeper's LedgerStorage.setLimboState, DbLedgerStorage semantics).

A ledger in limbo may have lost entries this bookie acknowledged: every answer that would say "I have no such
entry / ledger" becomes EUNKNOWNLEDGERSTATE, while entries it does hold are served. The requests go through
the real BookieService (v3 protobuf bytes in and out) over a real Storage on disk.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from bkaudit.bookie.service import BookieService
from bkaudit.bookie.storage import NEEDS_INTEGRITY_CHECK, Storage
from bkaudit.errors import BookieError
from bkaudit.formats.entry import DigestManager, master_key
from bkaudit.formats.proto import BookkeeperProtocol_pb2 as pb
from bkaudit.model.ledger import DigestType

KEY = master_key(b"pwd")
LEDGER = 42


def entry(entry_id: int, ledger_id: int = LEDGER) -> bytes:
    digest = DigestManager(ledger_id, b"pwd", DigestType.CRC32C)
    return digest.package(entry_id, entry_id - 1, 0, b"p%d" % entry_id)


@pytest.fixture
def storage(tmp_path: Path):
    s = Storage(tmp_path)
    yield s
    s.close()


def call(service: BookieService, req: pb.Request) -> pb.Response:
    req.header.version = pb.VERSION_THREE
    req.header.txnId = 7
    got: list[bytes] = []
    done = threading.Event()

    def reply(data: bytes) -> None:
        got.append(data)
        done.set()

    service.dispatch(req.SerializeToString(), reply)
    assert done.wait(10)
    resp = pb.Response()
    resp.ParseFromString(got[0])
    return resp


def read(service: BookieService, entry_id: int, *, fence: bool = False, key: bytes = KEY) -> pb.Response:
    req = pb.Request()
    req.header.operation = pb.READ_ENTRY
    req.readRequest.ledgerId, req.readRequest.entryId = LEDGER, entry_id
    if fence:
        req.readRequest.flag = pb.ReadRequest.FENCE_LEDGER
        req.readRequest.masterKey = key
    return call(service, req)


def add(service: BookieService, entry_id: int, *, recovery: bool, key: bytes = KEY) -> pb.Response:
    req = pb.Request()
    req.header.operation = pb.ADD_ENTRY
    a = req.addRequest
    a.ledgerId, a.entryId, a.masterKey, a.body = LEDGER, entry_id, key, entry(entry_id)
    if recovery:
        a.flag = pb.AddRequest.RECOVERY_ADD
    return call(service, req)


@pytest.fixture
def service(storage: Storage):
    s = BookieService(storage)
    yield s
    s.close()


def test_unknown_ledger_in_limbo_answers_unknown_to_every_negative_question(
        storage: Storage, service: BookieService) -> None:
    storage.enter_limbo(LEDGER)  # the wiped bookie's case: nothing stored, the metadata names it
    assert read(service, 0).status == pb.EUNKNOWNLEDGERSTATE
    assert read(service, -1).status == pb.EUNKNOWNLEDGERSTATE
    assert read(service, -1, fence=True).status == pb.EUNKNOWNLEDGERSTATE  # fenced first, then unknown
    lac = pb.Request()
    lac.header.operation = pb.READ_LAC
    lac.readLacRequest.ledgerId = LEDGER
    assert call(service, lac).status == pb.EUNKNOWNLEDGERSTATE
    listing = pb.Request()
    listing.header.operation = pb.GET_LIST_OF_ENTRIES_OF_LEDGER
    listing.getListOfEntriesOfLedgerRequest.ledgerId = LEDGER
    assert call(service, listing).status == pb.EUNKNOWNLEDGERSTATE
    batch = pb.Request()
    batch.header.operation = pb.GET_LIST_OF_ENTRIES_OF_LEDGERS
    batch.getListOfEntriesOfLedgersRequest.ledgerId.extend([LEDGER, 7])
    items = {i.ledgerId: i.status for i in call(service, batch).getListOfEntriesOfLedgersResponse.ledgers}
    assert items == {LEDGER: pb.EUNKNOWNLEDGERSTATE, 7: pb.ENOLEDGER}
    # a ledger that is not in limbo still gets the final answer
    other = pb.Request()
    other.header.operation = pb.READ_ENTRY
    other.readRequest.ledgerId, other.readRequest.entryId = 7, 0
    assert call(service, other).status == pb.ENOLEDGER


def test_limbo_ledger_is_fenced_takes_recovery_adds_and_adopts_their_key(
        storage: Storage, service: BookieService) -> None:
    storage.enter_limbo(LEDGER)
    assert add(service, 0, recovery=False).status == pb.EFENCED
    assert add(service, 0, recovery=True).status == pb.EOK  # recovery write-back / copy lands
    held = read(service, 0)
    assert held.status == pb.EOK  # held entries are served in limbo
    assert not held.readResponse.HasField("maxLAC")  # the LAC is unknown (a Java bookie fails the read)
    assert read(service, 1).status == pb.EUNKNOWNLEDGERSTATE  # absent ones stay unknown
    assert storage.ledger_state(LEDGER).master_key == KEY  # the keyless ledger adopted the first key
    assert add(service, 1, recovery=True, key=master_key(b"other")).status == pb.EUA
    assert read(service, 0, fence=True).status == pb.EOK
    storage.clear_limbo(LEDGER)
    assert read(service, 0).readResponse.maxLAC == -1  # known again: entry 0 carries LAC -1


def test_limbo_is_durable_and_clearing_restores_final_answers(tmp_path: Path) -> None:
    with Storage(tmp_path) as s:
        s.add_entry(LEDGER, 0, KEY, entry(0)).result()
        s.enter_limbo(LEDGER)
        s.set_flag(NEEDS_INTEGRITY_CHECK, True)
    with Storage(tmp_path) as s:
        assert s.in_limbo(LEDGER) and s.limbo_ledgers() == [LEDGER]
        assert NEEDS_INTEGRITY_CHECK in s.flags
        assert s.ledger_state(LEDGER).fenced and s.ledger_state(LEDGER).master_key == KEY
        with pytest.raises(BookieError) as unknown:
            s.read_entry(LEDGER, 1)
        assert unknown.value.status == "EUNKNOWNLEDGERSTATE"
        s.clear_limbo(LEDGER)
        s.set_flag(NEEDS_INTEGRITY_CHECK, False)
    with Storage(tmp_path) as s:
        assert not s.in_limbo(LEDGER) and not s.flags
        with pytest.raises(BookieError) as missing:
            s.read_entry(LEDGER, 1)
        assert missing.value.status == "ENOENTRY"
        assert s.read_entry(LEDGER, -1) == entry(0)
        assert s.has_entry(LEDGER, 0) and not s.has_entry(LEDGER, 1)


def test_storage_without_the_limbo_column_is_upgraded(tmp_path: Path) -> None:
    cur = tmp_path / "current"
    cur.mkdir()
    conn = sqlite3.connect(cur / "ledgers.db")
    conn.executescript("""
        CREATE TABLE ledgers (ledger_id INTEGER PRIMARY KEY, master_key BLOB,
                              fenced INTEGER NOT NULL DEFAULT 0, lac_body BLOB);
        CREATE TABLE entries (ledger_id INTEGER NOT NULL, entry_id INTEGER NOT NULL, body BLOB NOT NULL);
        CREATE UNIQUE INDEX entries_by_id ON entries (ledger_id, entry_id);
    """)
    conn.execute("INSERT INTO ledgers VALUES (?, ?, 1, NULL)", (LEDGER, KEY))
    conn.commit()
    conn.close()
    with Storage(tmp_path) as s:
        assert not s.created
        state = s.ledger_state(LEDGER)
        assert state is not None and state.fenced and not state.limbo
        s.enter_limbo(LEDGER)
        assert s.in_limbo(LEDGER)


def test_new_storage_says_so(tmp_path: Path) -> None:
    with Storage(tmp_path) as s:
        assert s.created
    with Storage(tmp_path) as s:
        assert not s.created
