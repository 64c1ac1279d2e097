"""The client's metadata store on a real ZooKeeper: BookKeeper bytes, CAS, idgen, delete, close rules."""

from __future__ import annotations

import pytest

from bkaudit.client.handle import WriteHandle
from bkaudit.client.pipeline import AddPipeline
from bkaudit.errors import LedgerStateError, MetadataConflict, NoSuchLedger
from bkaudit.formats import ledger_metadata
from bkaudit.model.ledger import DigestType, LedgerMetadata, LedgerState, Segment
from bkaudit.store.ledgers import ZkMetadataStore
from bkaudit.zk import paths

ENSEMBLE = ("127.0.0.1:3181", "127.0.0.1:3182", "127.0.0.1:3183")


def _md(**kw: object) -> LedgerMetadata:
    base = LedgerMetadata(
        3,
        2,
        2,
        LedgerState.OPEN,
        -1,
        0,
        DigestType.CRC32C,
        b"pw",
        (Segment(0, ENSEMBLE),),
        custom_metadata={"app": b"bkaudit"},
    )
    return base.evolve(**kw) if kw else base


def test_idgen_create_cas_and_bytes_round_trip(zk, zk_root) -> None:
    store = ZkMetadataStore(zk, root=zk_root)
    ids = [store.new_ledger_id() for _ in range(3)]
    assert ids == sorted(ids) and len(set(ids)) == 3
    lid = ids[-1]
    version = store.create(lid, _md())
    raw, _ = zk.get(paths.ledger_path(lid, root=zk_root))
    assert raw.startswith(b"BookieMetadataFormatVersion\t3\n")
    assert ledger_metadata.parse(raw) == _md()
    assert ledger_metadata.serialize(ledger_metadata.parse(raw)) == raw
    closed = _md(
        state=LedgerState.CLOSED,
        last_entry_id=9,
        length=1234,
        segments=(Segment(0, ENSEMBLE), Segment(5, ("127.0.0.1:3184", *ENSEMBLE[1:]))),
    )
    v2 = store.write(lid, closed, version)
    with pytest.raises(MetadataConflict):
        store.write(lid, _md(), version)
    assert store.read(lid) == (closed, v2)
    raw, _ = zk.get(paths.ledger_path(lid, root=zk_root))
    assert ledger_metadata.serialize(ledger_metadata.parse(raw)) == raw
    assert lid in store.list_ids()
    store.delete(lid)
    with pytest.raises(NoSuchLedger):
        store.read(lid)


class _NoBookies:
    def choose_ensemble(self, *a: object) -> tuple[str, ...]:
        raise AssertionError("not used")

    replace_bookie = choose_ensemble


def _handle(zk, root: str, store: ZkMetadataStore, lid: int) -> WriteHandle:
    from concurrent.futures import ThreadPoolExecutor

    from bkaudit.formats.entry import DigestManager

    md, version = store.read(lid)
    pipeline = AddPipeline(
        ledger_id=lid,
        metadata=md,
        version=version,
        master_key=b"k",
        pool=None,
        directory=_NoBookies(),
        executor=ThreadPoolExecutor(1),
        store=store,
    )
    return WriteHandle(lid, pipeline, DigestManager(lid, b"pw", DigestType.CRC32C), store, close_timeout_s=1)


@pytest.mark.parametrize(
    ("concurrent", "expect"),
    [
        ({"custom_metadata": {"app": b"changed"}}, "closed"),  # still OPEN: retry
        ({"state": LedgerState.IN_RECOVERY}, "error"),  # being recovered
        ({"state": LedgerState.CLOSED, "last_entry_id": -1}, "closed"),  # closed at the same entry
        ({"state": LedgerState.CLOSED, "last_entry_id": 3, "length": 9}, "error"),  # closed elsewhere
    ],
)
def test_writer_close_conflict_rules_on_zookeeper(zk, zk_root, concurrent, expect) -> None:
    store = ZkMetadataStore(zk, root=zk_root)
    lid = store.new_ledger_id()
    store.create(lid, _md())
    handle = _handle(zk, zk_root, store, lid)
    md, version = store.read(lid)
    store.write(lid, md.evolve(**concurrent), version)  # a concurrent actor moves the version
    if expect == "error":
        with pytest.raises(LedgerStateError):
            handle.close()
        return
    closed = handle.close()
    final, _ = store.read(lid)
    assert final == closed and final.state is LedgerState.CLOSED and final.last_entry_id == -1
    if "custom_metadata" in concurrent:
        assert final.custom_metadata == {"app": b"changed"}  # the retry kept the concurrent change


class _LosesTheAnswer:
    """The real kazoo client, except that the first `set` is applied on the server and its answer is lost
    (ConnectionLoss after the write): the one interleaving a live server cannot be made to produce on cue."""

    def __init__(self, zk: object) -> None:
        self._zk, self.lost = zk, 0

    def set(self, path: str, value: bytes, version: int = -1) -> object:
        from kazoo.exceptions import ConnectionLoss

        stat = self._zk.set(path, value, version=version)  # type: ignore[attr-defined]
        if not self.lost:
            self.lost += 1
            raise ConnectionLoss()
        return stat

    def __getattr__(self, name: str) -> object:
        return getattr(self._zk, name)


def test_chaos_seed_300_a_write_whose_answer_was_lost_is_retried_and_recognised(zk, zk_root) -> None:
    real = ZkMetadataStore(zk, root=zk_root)
    lid = real.new_ledger_id()
    version = real.create(lid, _md())
    flaky = _LosesTheAnswer(zk)
    store = ZkMetadataStore(flaky, root=zk_root)
    changed = _md(segments=(Segment(0, ENSEMBLE), Segment(4, ("127.0.0.1:3184", *ENSEMBLE[1:]))))
    new_version = store.write(lid, changed, version)  # the retry conflicts with our own landed write
    assert flaky.lost == 1
    assert real.read(lid) == (changed, new_version) and new_version == version + 1
    # a stale version is still a conflict (no connection was lost: nothing to recognise)
    with pytest.raises(MetadataConflict):
        store.write(lid, changed.evolve(custom_metadata={"app": b"mine"}), version)
    assert real.read(lid) == (changed, new_version)


class _DropsFirstRead:
    """The real kazoo client, except that the first `get`/`get_children` loses its connection (a ZooKeeper
    restart under the call, as chaos seed 402 hit; a live server cannot drop one chosen request)."""

    def __init__(self, zk: object) -> None:
        self._zk, self.dropped = zk, 0

    def _once(self, name: str, *args: object, **kw: object) -> object:
        from kazoo.exceptions import ConnectionLoss

        if not self.dropped:
            self.dropped += 1
            raise ConnectionLoss()
        return getattr(self._zk, name)(*args, **kw)

    def get(self, *args: object, **kw: object) -> object:
        return self._once("get", *args, **kw)

    def get_children(self, *args: object, **kw: object) -> object:
        return self._once("get_children", *args, **kw)

    def __getattr__(self, name: str) -> object:
        return getattr(self._zk, name)


def test_chaos_seed_402_bookie_start_and_ensemble_change_read_through_a_lost_connection(zk, tmp_path) -> None:
    from bkaudit.bookie.registration import check_cookie
    from bkaudit.client.directory import ZkBookieDirectory
    from bkaudit.store import ZkStore
    from bkaudit.zk import registry
    from tests.helpers import unique_path

    root = unique_path("t", "/ledgers")
    for node in (paths.available_root(root=root), paths.cookies_root(root=root)):
        zk.ensure_path(node)
    zk.create(paths.instanceid_path(root=root), b"instance-402")
    registry.register(zk, "127.0.0.1:3181", b"", root=root)
    directory = _DropsFirstRead(zk)
    assert ZkBookieDirectory(ZkStore(directory, root=root)).writable() == ["127.0.0.1:3181"]
    assert directory.dropped == 1
    starting = _DropsFirstRead(zk)
    cookie = check_cookie(ZkStore(starting, root=root), "127.0.0.1:3182", tmp_path, has_data=False)
    assert starting.dropped == 1 and cookie.instance_id == "instance-402"
    assert registry.read_cookie(zk, "127.0.0.1:3182", root) is not None  # stamped after the retried read
