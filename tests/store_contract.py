"""The lifecycle rules, the drain and the admin API, asserted once and run against both ClusterStores.

tests/store/test_store_memory.py runs these on bkaudit.store.memory (no JVM, the inner loop);
tests/store/test_store_contract_zk.py runs the very same functions on a real ZooKeeper, which is
what makes the memory store a faithful double. Each module provides the `cluster` fixture: a `Backend`
that arranges what bookies and writers would have put in the cluster, and the store handed to the code
under test. Ground truth is what the test arranged: the ledgers it wrote, the failures it recorded.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any, Protocol

import httpx
import pytest

from bkaudit.admin import views, webhooks
from bkaudit.admin.server import AdminServer
from bkaudit.errors import FormatError, MetadataConflict, MetadataError, NoSuchLedger
from bkaudit.formats import ledger_metadata, records
from bkaudit.lifecycle import service, serving
from bkaudit.lifecycle.drain import Drainer, LifecycleCache, report_failure
from bkaudit.lifecycle.settings import LifecycleSettings
from bkaudit.model import lifecycle as lc
from bkaudit.model.dataloss import DataLossRecord
from bkaudit.model.ledger import DigestType, LedgerMetadata, LedgerState, Segment
from bkaudit.store import ClusterStore
from bkaudit.store.base import ABSENT
from bkaudit.store.derived import describe_bookies
from tests.admin.support import ADMIN, READER, Receiver, settings
from tests.helpers import wait_for

S = lc.LifecycleState
OP, AUD = lc.Actor.OPERATOR, lc.Actor.AUDITOR
A, B, C, D = "10.0.0.1:3181", "10.0.0.2:3181", "10.0.0.3:3181", "10.0.0.4:3181"


class Backend(Protocol):
    store: ClusterStore

    def add_cookie(self, bookie: str) -> None: ...

    def register(self, bookie: str, data: bytes, *, readonly: bool = False) -> None: ...

    def put_ledger(self, ledger_id: int, metadata: LedgerMetadata) -> None: ...

    def delete_ledger(self, ledger_id: int) -> None: ...

    def record_data_loss(self, record: DataLossRecord) -> None: ...

    def disable_replication(self) -> None: ...

    def marker(self, ledger_id: int) -> tuple[str, ...] | None: ...

    def corrupt_state(self, bookie: str) -> None: ...

    def set_serving_bytes(self, bookie: str, data: bytes) -> None:
        """Someone wrote these bytes as the bookie's serving switch."""
        ...

    def lock(self, ledger_id: int, holder: str) -> None:
        """A worker took the marked ledger's replication lock."""
        ...

    def vote(self, bookie: str) -> None:
        """A bookie entered the Auditor election (the first voter leads)."""
        ...

    def deregister(self, bookie: str) -> None:
        """A bookie's registration went (it stopped, or its session expired)."""
        ...

    def set_racks(self, data: bytes) -> None:
        """Pulsar's rack JSON (`/bookies`, cluster-wide: the backend puts back what was there)."""
        ...


def ledger(*ensembles: tuple[str, ...], closed: bool = True, length: int = 1000) -> LedgerMetadata:
    """A ledger whose segments have these ensembles (10 entries each), E = WQ = AQ."""
    size = len(ensembles[0])
    return LedgerMetadata(
        ensemble_size=size, write_quorum=size, ack_quorum=size,
        state=LedgerState.CLOSED if closed else LedgerState.OPEN,
        last_entry_id=10 * len(ensembles) - 1 if closed else -1, length=length if closed else 0,
        digest_type=DigestType.CRC32C, password=b"",
        segments=tuple(Segment(10 * i, ens) for i, ens in enumerate(ensembles)), ctime=0, custom_metadata={},
    )


def java_registration(bookie: str, *, http_port: int | None = None) -> bytes:
    """What a BookKeeper 4.17 bookie registers: bookie-rpc, plus HttpService's endpoint when it has one."""
    extra = () if http_port is None else (records.Endpoint("httpserver", http_port, "127.0.0.1", "http"),)
    host, port = bookie.rsplit(":", 1)
    return records.encode_bookie_service_info(
        records.bookie_service_info_for(bookie, host, int(port), extra_endpoints=extra))


def bkaudit_registration(bookie: str) -> bytes:
    """A bkaudit bookie's: it publishes its version, and follows its state record itself."""
    host, port = bookie.rsplit(":", 1)
    info = records.bookie_service_info_for(bookie, host, int(port))
    return records.encode_bookie_service_info(
        records.BookieServiceInfo(info.endpoints, ((serving.BKAUDIT_BOOKIE_PROPERTY, "test"),)))


def lost(ledger_id: int, *bookies: str) -> DataLossRecord:
    """The record a worker writes when it gives up on entries 0-9 of the ledger."""
    return DataLossRecord(ledger_id, ((0, 9),), "2026-12-07T00:00:00Z", bookies, 3, "worker")


def drain(cluster: Backend, bookie: str, **kwargs: Any) -> lc.StateRecord:
    return service.transition(cluster.store, bookie, S.DRAINING, actor=OP, by="op", **kwargs)


# -- transitions -----------------------------------------------------------------------------------------
def test_default_is_active_and_drain_records_who_and_why(cluster: Backend) -> None:
    cluster.add_cookie(A)
    assert service.current(cluster.store, A) == (S.ACTIVE, None, ABSENT)
    record = service.transition(cluster.store, A, S.DRAINING, actor=OP, by="alice", reason="scale down")
    state, stored, _ = service.current(cluster.store, A)
    assert state is S.DRAINING and stored == record
    assert (record.previous, record.by, record.reason) == (S.ACTIVE, "alice", "scale down")
    assert service.states(cluster.store) == {A: S.DRAINING}
    assert service.in_state(cluster.store, S.DRAINING) == {A}


def test_unknown_bookie_bad_ids_and_bad_transitions_are_refused_and_write_nothing(cluster: Backend) -> None:
    with pytest.raises(service.UnknownBookie, match="nobody:1 has no cookie under"):
        drain(cluster, "nobody:1")
    with pytest.raises(ValueError, match="bookie id"):
        drain(cluster, "a/b")
    cluster.add_cookie(A)
    for target in (S.DRAINED, S.REMOVED, S.ACTIVE):
        with pytest.raises(lc.TransitionRefused):
            service.transition(cluster.store, A, target, actor=OP, by="a")
    with pytest.raises(lc.TransitionRefused):  # DrainingFailed is the Auditor's to decide
        service.transition(cluster.store, A, S.DRAINING_FAILED, actor=OP, by="a")
    assert service.current(cluster.store, A)[1] is None
    assert cluster.store.lifecycle.history(A) == []


def test_history_is_complete_and_outlives_removal(cluster: Backend) -> None:
    cluster.add_cookie(A)
    drain(cluster, A)
    service.transition(cluster.store, A, S.DRAINED, actor=AUD, by="auditor", reason="no ledger left")
    service.transition(cluster.store, A, S.REMOVED, actor=OP, by="bob")
    assert not cluster.store.registry.has_cookie(A) and cluster.store.registry.read_cookie(A) is None
    assert service.current(cluster.store, A) == (S.ACTIVE, None, ABSENT)
    assert A not in service.states(cluster.store)
    hist = cluster.store.lifecycle.history(A)
    assert [(h.previous, h.state, h.by) for h in hist] == [
        (S.ACTIVE, S.DRAINING, "op"), (S.DRAINING, S.DRAINED, "auditor"), (S.DRAINED, S.REMOVED, "bob")
    ]
    with pytest.raises(service.UnknownBookie):
        drain(cluster, A)


def test_drained_and_removal_are_refused_while_ledgers_reference_the_bookie(cluster: Backend) -> None:
    for b in (A, B):
        cluster.add_cookie(b)
    cluster.put_ledger(7, ledger((A, B)))
    cluster.put_ledger(8, ledger((B, C), (A, C)))  # A only in a later segment
    cluster.put_ledger(9, ledger((B, C)))
    cluster.record_data_loss(lost(8, A))
    drain(cluster, A)
    service.transition(cluster.store, A, S.DRAINING_FAILED, actor=AUD, by="auditor")
    with pytest.raises(lc.TransitionRefused, match=r"2 ledgers still reference it \(1 with data") as refused:
        service.transition(cluster.store, A, S.DRAINED, actor=OP, by="a")
    assert refused.value.blockers == ("ledger 7", "ledger 8 (data loss recorded)")
    assert service.blockers(cluster.store, A).ledgers == (7, 8)
    cluster.delete_ledger(7)
    cluster.delete_ledger(8)  # the operator dealt with the bad ledgers
    service.transition(cluster.store, A, S.DRAINED, actor=OP, by="a")
    assert service.current(cluster.store, A)[0] is S.DRAINED


def test_an_auditor_decision_on_an_older_reading_is_refused(cluster: Backend) -> None:
    cluster.add_cookie(A)
    with pytest.raises(lc.TransitionRefused, match="is Active, not Draining"):
        service.transition(cluster.store, A, S.DRAINED, actor=AUD, by="auditor", expected=S.DRAINING)
    assert service.current(cluster.store, A)[1] is None


@pytest.mark.parametrize("readonly", [False, True])
def test_removal_of_a_registered_bookie_needs_force(cluster: Backend, readonly: bool) -> None:
    cluster.add_cookie(A)
    cluster.register(A, b"", readonly=readonly)
    drain(cluster, A)
    service.transition(cluster.store, A, S.DRAINED, actor=AUD, by="auditor")
    with pytest.raises(lc.TransitionRefused, match="still registered") as refused:
        service.transition(cluster.store, A, S.REMOVED, actor=OP, by="op")
    assert refused.value.blockers == (f"registered {'readonly' if readonly else 'writable'}",)
    assert service.current(cluster.store, A)[0] is S.DRAINED
    record = service.transition(cluster.store, A, S.REMOVED, actor=OP, by="op", force=True)
    assert record.state is S.REMOVED and not cluster.store.registry.has_cookie(A)


def test_a_stale_version_loses_the_race(cluster: Backend) -> None:
    cluster.add_cookie(A)
    _, _, version = service.current(cluster.store, A)
    record = lc.StateRecord(S.DRAINING, "first", "t", "", S.ACTIVE)
    cluster.store.lifecycle.write_state(A, record, version=version)
    with pytest.raises(MetadataConflict):  # a second writer read the same (absent) version
        cluster.store.lifecycle.write_state(A, lc.StateRecord(S.DRAINING, "second", "t", "", S.ACTIVE),
                                            version=version)
    _, stored, newer = service.current(cluster.store, A)
    assert stored is not None and stored.by == "first" and newer != version
    with pytest.raises(MetadataConflict):  # nor may one remove at a version that moved
        cluster.store.lifecycle.remove_bookie(A, lc.StateRecord(S.REMOVED, "x", "t", "", S.DRAINED),
                                              version=newer + 5)
    assert [h.by for h in cluster.store.lifecycle.history(A)] == ["first"]
    with pytest.raises(MetadataConflict):  # a state record needs the cookie
        cluster.store.lifecycle.write_state(B, record, version=ABSENT)


def test_a_malformed_state_record_is_reported_not_guessed(cluster: Backend) -> None:
    cluster.add_cookie(A)
    cluster.corrupt_state(A)
    assert "error" in service.describe(cluster.store, A)
    assert A not in service.states(cluster.store)
    assert isinstance(cluster.store.lifecycle.list_states()[A], FormatError)
    with pytest.raises(FormatError, match="lifecycle state"):
        drain(cluster, A)


def test_describe_shows_state_registration_switch_and_progress(cluster: Backend) -> None:
    cluster.add_cookie(A)
    cluster.register(A, b"", readonly=True)
    drain(cluster, A, reason="why")
    cluster.store.lifecycle.write_serving(A, True, by="api:ops", at="t")
    cluster.store.lifecycle.write_progress(A, {"ledgers_left": 4})
    doc = service.describe(cluster.store, A)
    assert doc["state"] == "Draining" and doc["record"]["reason"] == "why"
    assert doc["registration"] == "readonly" and doc["read_only_requested"] is True
    assert doc["progress"] == {"ledgers_left": 4}


def test_drain_failures_and_progress_records(cluster: Backend) -> None:
    cluster.add_cookie(A)
    assert cluster.store.lifecycle.record_failure(A, 3, "boom", "t1") == 1
    assert cluster.store.lifecycle.record_failure(A, 3, "again", "t2") == 2
    assert cluster.store.lifecycle.list_failures(A) == {3: {"ledger_id": 3, "count": 2, "error": "again",
                                                            "at": "t2"}}
    cluster.store.lifecycle.write_progress(A, {"ledgers_left": 4, "failed_ledgers": [1]})
    assert cluster.store.lifecycle.read_progress(A) == {"ledgers_left": 4, "failed_ledgers": [1]}
    cluster.store.lifecycle.clear_drain_records(A)
    assert cluster.store.lifecycle.list_failures(A) == {} and cluster.store.lifecycle.read_progress(A) is None


# -- the drain -------------------------------------------------------------------------------------------
def test_the_drain_marks_what_references_the_bookie_and_ends_drained(cluster: Backend) -> None:
    for b in (A, B, C, D):
        cluster.add_cookie(b)
    cluster.put_ledger(1, ledger((A, B), length=100))
    cluster.put_ledger(2, ledger((B, C), (A, C), length=200))
    cluster.put_ledger(3, ledger((A, D), length=300))
    cluster.put_ledger(4, ledger((C, D)))
    drain(cluster, A)
    drain(cluster, D)
    drainer = Drainer(cluster.store, settings=LifecycleSettings())
    progress = drainer.step()
    assert (progress[A]["ledgers_left"], progress[A]["bytes_left"], progress[A]["marked"]) == (3, 600, 3)
    assert progress[D]["ledgers_left"] == 2 and progress[D]["marked"] == 1  # ledger 3 was published once
    assert {lid: cluster.marker(lid) for lid in (1, 2, 3, 4)} == {1: (A,), 2: (A,), 3: (A, D), 4: (D,)}
    assert cluster.store.lifecycle.read_progress(A) == progress[A]
    # the workers moved A's copies: only D's ledgers still name a draining bookie
    cluster.put_ledger(1, ledger((C, B)))
    cluster.put_ledger(2, ledger((B, C), (B, C)))
    cluster.put_ledger(3, ledger((B, D)))
    progress = drainer.step()
    assert progress[A]["ledgers_left"] == 0 and progress[D]["ledgers_left"] == 2
    assert service.current(cluster.store, A)[0] is S.DRAINED
    assert service.current(cluster.store, D)[0] is S.DRAINING


def test_the_drain_fails_only_when_every_ledger_left_is_bad(cluster: Backend) -> None:
    for b in (A, B):
        cluster.add_cookie(b)
    cluster.put_ledger(5, ledger((A, B)))
    cluster.put_ledger(6, ledger((A, B)))
    cluster.put_ledger(7, ledger((A, B)))
    cluster.record_data_loss(lost(7, A))
    drain(cluster, A)
    drainer = Drainer(cluster.store, settings=LifecycleSettings(drain_max_failures=2))
    for _ in range(2):
        report_failure(cluster.store, frozenset({A}), frozenset({A, B}), 5, "NotEnoughBookies")
    progress = drainer.step()[A]
    assert service.current(cluster.store, A)[0] is S.DRAINING  # ledger 6 can still move
    assert (progress["failed_ledgers"], progress["data_loss_ledgers"], progress["marked"]) == ([5], [7], 1)
    assert cluster.marker(6) == (A,) and cluster.marker(5) is None and cluster.marker(7) is None
    cluster.delete_ledger(6)
    drainer.step()
    record, _ = cluster.store.lifecycle.read_state(A)
    assert record is not None and record.state is S.DRAINING_FAILED and record.by == "auditor"
    assert "2 ledgers cannot be replicated" in record.reason


def test_an_open_ledger_waits_and_never_counts_as_failed(cluster: Backend) -> None:
    for b in (A, B):
        cluster.add_cookie(b)
    cluster.put_ledger(9, ledger((A, B), closed=False))
    drain(cluster, A)
    for _ in range(3):
        report_failure(cluster.store, frozenset({A}), frozenset({A, B}), 9, "open")
    progress = Drainer(cluster.store, settings=LifecycleSettings(drain_max_failures=1)).step()[A]
    assert progress["waiting_open_ledgers"] == [9] and progress["failed_ledgers"] == []
    assert service.current(cluster.store, A)[0] is S.DRAINING and cluster.marker(9) == (A,)


def test_no_marker_is_written_while_replication_is_disabled(cluster: Backend) -> None:
    for b in (A, B):
        cluster.add_cookie(b)
    cluster.put_ledger(1, ledger((A, B)))
    cluster.disable_replication()
    drain(cluster, A)
    progress = Drainer(cluster.store, settings=LifecycleSettings()).step()[A]
    assert "marked" not in progress and cluster.marker(1) is None and progress["ledgers_left"] == 1


def test_a_writable_bookie_without_http_is_never_drained(cluster: Backend) -> None:
    cluster.add_cookie(A)
    cluster.register(A, java_registration(A))  # a Java bookie with httpServerEnabled=false
    drain(cluster, A)
    check = serving.inspect(cluster.store, A)
    assert check.serving is serving.Serving.WRITABLE and check.permanent and "no http endpoint" in check.error
    progress = Drainer(cluster.store, settings=LifecycleSettings()).step()[A]
    assert progress["ledgers_left"] == 0
    record, _ = cluster.store.lifecycle.read_state(A)
    assert record is not None and record.state is S.DRAINING_FAILED
    assert "still registered writable" in record.reason


def test_serving_follows_the_registration(cluster: Backend) -> None:
    for b in (A, B, C):
        cluster.add_cookie(b)
    cluster.register(A, bkaudit_registration(A))
    cluster.register(B, java_registration(B, http_port=1), readonly=True)
    cluster.register(C, b"\xff garbage")
    assert serving.inspect(cluster.store, A).serving is serving.Serving.FOLLOWS_STATE
    assert serving.inspect(cluster.store, B).serving is serving.Serving.READ_ONLY
    assert serving.inspect(cluster.store, D).serving is serving.Serving.ABSENT
    broken = serving.inspect(cluster.store, C)
    assert broken.serving is serving.Serving.WRITABLE and "unparseable registration" in broken.error


def test_the_workers_cache_and_their_failure_reports(cluster: Backend) -> None:
    for b in (A, B, C):
        cluster.add_cookie(b)
    cache = LifecycleCache(cluster.store, ttl_s=0)
    assert cache.draining() == frozenset() and cache.not_active() == frozenset()
    drain(cluster, A)
    drain(cluster, B)
    service.transition(cluster.store, B, S.DRAINED, actor=AUD, by="auditor")
    assert cache.draining() == {A} and cache.not_active() == {A, B}
    report_failure(cluster.store, frozenset({A, B}), frozenset({A, C}), 4, "x" * 600)
    (failure,) = cluster.store.lifecycle.list_failures(A).values()
    assert failure["count"] == 1 and len(failure["error"]) == 500
    assert cluster.store.lifecycle.list_failures(B) == {}


LIFECYCLE = "/api/v1/bookie/lifecycle"


# -- the admin API over the store --------------------------------------------------------------------------
@contextlib.contextmanager
def api(cluster: Backend) -> Iterator[httpx.Client]:
    """The admin server over the store, on a loopback port (uvicorn, as `bkaudit admin serve` runs it)."""
    server = AdminServer(cluster.store, settings(), port=0).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            yield client
    finally:
        server.stop()


def test_the_api_lists_bookies_with_their_registration_state_and_cookie(cluster: Backend) -> None:
    for b in (A, B, C):
        cluster.add_cookie(b)
    cluster.register(A, bkaudit_registration(A))
    cluster.register(B, b"", readonly=True)
    cluster.register(D, b"")  # registered, never formatted into the cluster: no cookie
    drain(cluster, B)
    with api(cluster) as http:
        assert http.get("/api/v1/bookie/list_bookies", headers=READER).json() == {
            A: "10.0.0.1", B: "10.0.0.2", D: "10.0.0.4"}
        assert http.get("/api/v1/bookie/list_bookies?type=ro", headers=READER).json() == {B: "10.0.0.2"}
        info = {i["bookie"]: i for i in http.get("/api/v1/bookie/list_bookie_info", headers=READER).json()}
        assert {b: (i["registration"], i["cookie"], i["state"]) for b, i in info.items()} == {
            A: ("writable", True, "Active"), B: ("readonly", True, "Draining"), C: ("absent", True, "Active"),
            D: ("writable", False, "Active")}
        state = http.get("/api/v1/bookie/state", params={"bookie": B}, headers=READER).json()
        assert (state["running"], state["readOnly"], state["lifecycleState"]) == (True, True, "Draining")
        cookie = http.get("/api/v1/bookie/cookie", params={"bookie": A}, headers=READER).json()
        assert cookie["bookieHost"] == A and isinstance(cookie["version"], int)
        unknown = http.get("/api/v1/bookie/state", params={"bookie": "10.9.9.9:1"}, headers=READER)
        assert unknown.status_code == 404


def test_the_api_moves_a_bookie_through_its_lifecycle(cluster: Backend) -> None:
    for b in (A, B):
        cluster.add_cookie(b)
    cluster.put_ledger(3, ledger((A, B)))
    with api(cluster) as http:
        r = http.put("/api/v1/bookie/lifecycle", params={"bookie": A}, headers=ADMIN,
                     json={"state": "Draining", "reason": "scale down"})
        assert r.status_code == 200, r.text
        assert http.put("/api/v1/bookie/lifecycle", params={"bookie": A}, headers=READER,
                        json={"state": "Draining"}).status_code == 403
        service.transition(cluster.store, A, S.DRAINING_FAILED, actor=AUD, by="auditor")
        r = http.put(LIFECYCLE, params={"bookie": A}, headers=ADMIN, json={"state": "Drained"})
        assert r.status_code == 409 and r.json()["blockers"] == ["ledger 3"]
        cluster.delete_ledger(3)
        r = http.put(LIFECYCLE, params={"bookie": A}, headers=ADMIN, json={"state": "Drained"})
        assert r.status_code == 200, r.text
        r = http.request("DELETE", "/api/v1/bookie/cookie", params={"bookie": A}, headers=ADMIN)
        assert r.status_code == 200 and r.json()["state"] == "Removed"
        history = http.get("/api/v1/bookie/lifecycle/history", params={"bookie": A}, headers=READER).json()
        assert [(h["state"], h["by"]) for h in history] == [
            ("Draining", "api:ops"), ("DrainingFailed", "auditor"), ("Drained", "api:ops"),
            ("Removed", "api:ops")]
        assert not cluster.store.registry.has_cookie(A)


def test_the_api_shows_the_queue_data_loss_and_the_auditor(cluster: Backend) -> None:
    cluster.store.queue.mark(5, [A])
    cluster.store.queue.mark(5, [B])
    cluster.store.queue.mark(9, [C])
    cluster.lock(9, "worker-1")
    cluster.record_data_loss(lost(7, A, B))
    cluster.vote(C)
    cluster.vote(A)
    with api(cluster) as http:
        assert http.get("/api/v1/autorecovery/list_under_replicated_ledger", headers=READER).json() == [5, 9]
        missing = http.get("/api/v1/autorecovery/list_under_replicated_ledger?printmissingreplica=true",
                           headers=READER).json()
        assert missing == {"5": [A, B], "9": [C]}
        (loss,) = http.get("/api/v1/autorecovery/data_loss", headers=READER).json()
        assert (loss["ledger_id"], loss["bookies"], loss["lost_entries"]) == (7, [A, B], 10)
        assert http.get("/api/v1/autorecovery/who_is_auditor", headers=READER).json() == {"Auditor": C}
    rows = {r["ledger_id"]: r for r in views.queue(cluster.store)["ledgers"]}
    assert (rows[5]["locked_by"], rows[9]["locked_by"]) == (None, "worker-1")


def test_webhooks_deliver_each_later_transition_once(cluster: Backend) -> None:
    for b in (A, B):
        cluster.add_cookie(b)
    drain(cluster, B)  # before the webhook: never delivered
    receiver = Receiver()
    try:
        hook = webhooks.register(cluster.store, url=receiver.url, secret="s3cret", by="t", at="now",
                                 allow=settings().allowed_networks())
        assert [h.id for h in webhooks.list_all(cluster.store)] == [hook.id]
        drain(cluster, A)
        dispatchers = [webhooks.Dispatcher(cluster.store, poll_s=0.05, backoff_s=0.01,
                                           allow=settings().allowed_networks()) for _ in range(2)]
        for d in dispatchers:
            d.start()  # two admin servers: the claim lets one of them deliver
        try:
            wait_for(lambda: [d for d in webhooks.deliveries(cluster.store, hook.id)
                              if d["status"] != "pending"], 10, "a delivery")
            time.sleep(0.3)  # further passes over the same history send nothing again
        finally:
            for d in dispatchers:
                d.stop()
        (delivered,) = webhooks.deliveries(cluster.store, hook.id)
        assert delivered["status"] == "delivered" and delivered["payload"]["bookie"] == A
        assert delivered["payload"]["transition"]["state"] == "Draining"
        assert len(receiver.received) == 1
        assert json.loads(receiver.received[0][1])["bookie"] == A
        assert webhooks.delete(cluster.store, hook.id) and not webhooks.delete(cluster.store, hook.id)
        assert webhooks.list_all(cluster.store) == [] and webhooks.deliveries(cluster.store, hook.id) == []
    finally:
        receiver.close()


# -- AutoRecovery's records: the queue, its locks, the switch, the delay, data loss, the election, watches ---
def test_a_marker_is_locked_resolved_at_its_version_and_kept_when_remarked(cluster: Backend) -> None:
    queue = cluster.store.queue
    assert queue.lock(7, holder="w1") is None  # not marked: nothing to take
    assert queue.mark(7, [A]) and not queue.mark(7, [A])  # the same replica again writes nothing
    assert queue.marked() == queue.queued() == [7]
    marker, version = queue.read_marker(7) or (None, -1)
    assert marker is not None and marker.replicas == (A,) and version == 0
    assert queue.lock(7, holder="w1") == 0 and queue.holds_lock(7)
    assert queue.lock(7, holder="w2") is None  # one holder at a time
    assert queue.locked() == {7} and queue.lock_holder(7) == "w1"
    assert queue.mark(7, [B])  # another bookie lost meanwhile: the marker moves on
    assert queue.marker(7) is not None and queue.marker(7).replicas == (A, B)  # type: ignore[union-attr]
    assert not queue.resolve(7, version=0)  # re-marked since the lock: it stays queued ...
    assert queue.marked() == [7] and not queue.holds_lock(7) and queue.locked() == set()  # ... unlocked
    version = queue.lock(7, holder="w1")
    assert version == 1 and queue.resolve(7, version=version)
    assert queue.marked() == [] and queue.locked() == set() and queue.read_marker(7) is None
    assert queue.mark(8, [A]) and queue.lock(8, holder="w1") == 0
    assert queue.release(8) and not queue.release(8) and queue.marked() == [8]


def test_the_disable_switch_holds_workers_until_enabled(cluster: Backend) -> None:
    queue = cluster.store.queue
    assert queue.is_enabled() and queue.wait_until_enabled(0.0)
    assert queue.set_enabled(False) and not queue.set_enabled(False)
    assert not queue.is_enabled() and not queue.wait_until_enabled(0.2)
    assert queue.set_enabled(True) and not queue.set_enabled(True)
    assert queue.wait_until_enabled(1.0)


def test_the_recovery_delay_is_seeded_once_and_watched(cluster: Backend) -> None:
    queue = cluster.store.queue
    assert queue.recovery_delay() is None
    assert queue.seed_recovery_delay(30) == 30 and queue.seed_recovery_delay(5) == 30
    seen: list[bytes | None] = []
    queue.watch_recovery_delay(lambda data: seen.append(data) and None)
    wait_for(lambda: seen == [b"30"], 10, "the current value")
    queue.set_recovery_delay(7)
    wait_for(lambda: seen == [b"30", b"7"], 10, "the change")
    assert queue.recovery_delay() == 7


def test_data_loss_records_are_written_read_and_cleared(cluster: Backend) -> None:
    records_ = cluster.store.data_loss
    record = lost(42, A, B)
    records_.write(record)
    assert records_.ids() == [42] and records_.exists(42) and records_.read(42) == record
    assert records_.delete(42) and not records_.delete(42) and records_.read(42) is None
    assert records_.migrate_legacy() == []


def test_the_election_orders_votes_and_tells_of_a_vote_that_went(cluster: Backend) -> None:
    election, queue = cluster.store.election, cluster.store.queue
    assert queue.auditor() is None and queue.votes() == []
    first = election.vote("a:1")
    second = election.vote("b:1")
    assert election.predecessor(first) is None and election.predecessor(second) == first
    assert queue.auditor() == "a:1" and len(queue.votes()) == 2
    gone: list[str] = []
    assert election.watch_gone(first, lambda: gone.append(first))
    election.withdraw(first)
    wait_for(lambda: gone == [first], 10, "the watch on the withdrawn vote")
    assert not election.watch_gone(first, lambda: gone.append("again"))
    with pytest.raises(MetadataError):
        election.predecessor(first)
    assert election.predecessor(second) is None and queue.auditor() == "b:1"


def test_registry_watches_see_registrations_come_and_go(cluster: Backend) -> None:
    seen: dict[str, Any] = {}
    cluster.store.registry.watch(
        on_writable=lambda ids: seen.__setitem__("writable", sorted(ids)),
        on_readonly=lambda ids: seen.__setitem__("readonly", sorted(ids)),
        on_racks=lambda data: seen.__setitem__("racks", data),
    )
    wait_for(lambda: seen == {"writable": [], "readonly": [], "racks": None}, 10, "the empty registry")
    cluster.register(A, bkaudit_registration(A))
    cluster.register(B, b"", readonly=True)
    wait_for(lambda: seen.get("writable") == [A] and seen.get("readonly") == [B], 10, "both registrations")
    cluster.deregister(A)
    wait_for(lambda: seen.get("writable") == [], 10, "A gone")
    assert cluster.store.registry.endpoint_hosts([], [B]) == {B: "10.0.0.2"}


def test_a_registration_names_the_session_that_holds_it(cluster: Backend) -> None:
    registry = cluster.store.registry
    assert registry.registration_owner(A) is None
    cluster.register(A, bkaudit_registration(A))
    owner = registry.registration_owner(A)
    assert owner is not None and owner != -1
    cluster.register(A, bkaudit_registration(A), readonly=True)  # the same session, read-only now
    assert registry.registration_owner(A) == owner
    cluster.deregister(A)
    assert registry.registration_owner(A) is None


def test_the_index_of_every_bookie_and_the_bookie_table(cluster: Backend) -> None:
    cluster.put_ledger(1, ledger((A, B)))
    cluster.put_ledger(2, ledger((A, B), (C, D)))
    assert cluster.store.index.every_bookie() == {A: [1, 2], B: [1, 2], C: [2], D: [2]}
    for bookie in (A, C):
        cluster.add_cookie(bookie)
    cluster.register(A, bkaudit_registration(A))
    rows = {r["id"]: r for r in describe_bookies(cluster.store.registry)}
    assert (rows[A]["state"], rows[A]["has_cookie"], rows[C]["state"]) == ("writable", True, "absent")
    assert cluster.store.registry.delete_cookie(C) and not cluster.store.registry.delete_cookie(C)
    assert cluster.store.registry.cookies() == [A]



def test_a_bookie_watching_its_records_sees_its_state_and_switch(cluster: Backend) -> None:
    cluster.add_cookie(A)
    states: list[lc.LifecycleState | None] = []
    switches: list[bool] = []
    cluster.store.lifecycle.watch(
        A, on_state=lambda s: states.append(None if s is None else s.state),  # type: ignore[union-attr]
        on_serving=switches.append,
    )
    wait_for(lambda: states == [None] and switches == [False], 10, "the first reading")
    drain(cluster, A)
    wait_for(lambda: states[-1] is S.DRAINING, 10, "Draining")
    cluster.store.lifecycle.write_serving(A, True, by="t", at="now")
    wait_for(lambda: switches[-1] is True, 10, "the switch")


def test_only_a_switch_saying_readonly_true_switches(cluster: Backend) -> None:
    """The switch's bytes are read the same way by every reader: unreadable, not an object, or readOnly
    anything but JSON true means not switched."""
    cluster.store.lifecycle.write_serving(A, True, by="t", at="now")
    assert cluster.store.lifecycle.read_serving(A) is True
    for data, switched in ((b"garbage", False), (b"[true]", False), (b'{"readOnly": "true"}', False),
                           (b'{"readOnly": 1}', False), (b"", False), (b'{"readOnly": true}', True)):
        cluster.set_serving_bytes(A, data)
        assert cluster.store.lifecycle.read_serving(A) is switched, data
        seen: list[bool] = []
        cluster.store.lifecycle.watch(A, on_state=lambda _s: None, on_serving=seen.append)
        wait_for(lambda: seen[-1:] == [switched], 10, f"the watch's reading of {data!r}")  # noqa: B023

# == ledger metadata (ClusterStore.ledgers: BookKeeper's LedgerManager) =====================================
def test_ledger_ids_are_new_and_metadata_is_created_once(cluster: Backend) -> None:
    ledgers = cluster.store.ledgers
    first, second = ledgers.new_ledger_id(), ledgers.new_ledger_id()
    assert first != second and ledgers.list_ids() == []
    md = ledger((A, B))
    assert ledgers.create(second, md) == 0
    assert ledgers.read(second) == (md, 0)
    with pytest.raises(MetadataConflict):
        ledgers.create(second, ledger((C, D)))
    assert ledgers.read(second) == (md, 0)
    with pytest.raises(NoSuchLedger):
        ledgers.read(first)


def test_ledger_metadata_is_written_by_compare_and_set(cluster: Backend) -> None:
    ledgers = cluster.store.ledgers
    version = ledgers.create(4, ledger((A, B), closed=False))
    closed = ledger((A, B))
    assert ledgers.write(4, closed, version) == version + 1
    with pytest.raises(MetadataConflict):
        ledgers.write(4, ledger((C, D)), version)  # a writer that read the older version loses
    assert ledgers.read(4) == (closed, version + 1)
    with pytest.raises(NoSuchLedger):
        ledgers.write(5, closed, 0)


def test_ledgers_are_listed_and_deleted(cluster: Backend) -> None:
    ledgers = cluster.store.ledgers
    cluster.put_ledger(12, ledger((A, B)))  # written by another client
    ledgers.create(3, ledger((B, C)))
    assert ledgers.list_ids() == [3, 12]
    assert cluster.store.index.ledgers_of([C]) == {C: {3: 1000}}  # one set of ledgers for every kind
    ledgers.delete(12)
    assert ledgers.list_ids() == [3]
    with pytest.raises(NoSuchLedger):
        ledgers.read(12)
    with pytest.raises(NoSuchLedger):
        ledgers.delete(12)


def test_a_ledger_version_is_read_without_its_metadata(cluster: Backend) -> None:
    ledgers = cluster.store.ledgers
    assert ledgers.version(6) is None
    version = ledgers.create(6, ledger((A, B)))
    assert ledgers.version(6) == version
    ledgers.write(6, ledger((A, C)), version)
    assert ledgers.version(6) == version + 1


# == the registry's rack configuration, as placement reads it ==============================================
def test_rack_keys_resolve_through_the_registrations(cluster: Backend) -> None:
    assert cluster.store.registry.rack_config() == {}
    custom = records.bookie_service_info_for("bookie-a", "127.0.0.5", 3181)
    cluster.register("bookie-a", records.encode_bookie_service_info(custom))  # its endpoint names the host
    cluster.register(B, b"", readonly=True)  # legacy: the endpoint is the id's
    cluster.register("bookie-c", b"garbage")  # unresolvable: its rack entry covers its id only
    cluster.set_racks(json.dumps({"default": {"bookie-a": {"rack": "/r1"}, B: {"rack": "/r2"}}}).encode())
    found = cluster.store.registry.rack_config()
    assert {g: sorted(m) for g, m in found.items()} == {"default": sorted(["bookie-a", B])}
    assert found["default"]["bookie-a"].rack == "/r1"
    assert dict(found.addresses) == {"bookie-a": "127.0.0.5", B: "10.0.0.2"}


# == the snapshot's bulk reads: registrations and markers as written ======================================
def test_registrations_are_read_as_the_bookies_wrote_them(cluster: Backend) -> None:
    assert cluster.store.registry.registration_bytes() == []
    cluster.register(A, java_registration(A))
    cluster.register(B, b"", readonly=True)
    assert cluster.store.registry.registration_bytes() == [(A, "writable", java_registration(A)),
                                                           (B, "readonly", b"")]


def test_markers_are_read_with_their_locks(cluster: Backend) -> None:
    assert cluster.store.queue.marker_bytes() == []
    cluster.store.queue.mark(9, [B])
    cluster.store.queue.mark(5, [A, C])
    cluster.lock(9, "worker-1")
    found = cluster.store.queue.marker_bytes()
    assert [(i, records.parse_underreplicated_marker(m).replicas, lock) for i, m, lock in found] == [
        (5, (A, C), None), (9, (B,), records.encode_lock_data("worker-1"))]


def test_a_recheck_reads_metadata_and_markers_in_bulk(cluster: Backend) -> None:
    md = ledger((A, B))
    cluster.put_ledger(3, md)
    cluster.put_ledger(4, ledger((B, C)))
    found = cluster.store.ledgers.read_raw([3, 5])  # 5 does not exist: left out
    assert list(found) == [3]
    data, version, _sequence = found[3]
    assert ledger_metadata.parse(data) == md and version == 0
    cluster.put_ledger(3, ledger((A, C)))  # another writer
    assert cluster.store.ledgers.read_raw([3])[3][1] == 1
    assert cluster.store.queue.mark(4, [C])
    markers = cluster.store.queue.markers_of([3, 4])
    assert list(markers) == [4] and records.parse_underreplicated_marker(markers[4]).replicas == (C,)
