"""The Auditor's drain pass on the embedded ZooKeeper (no bookies: markers, progress and decisions only)."""

from __future__ import annotations

import http.server
import socket
import threading

from bkaudit.formats import records
from bkaudit.lifecycle import service
from bkaudit.lifecycle.drain import Drainer, LifecycleCache
from bkaudit.lifecycle.settings import LifecycleSettings
from bkaudit.model import lifecycle as lc
from bkaudit.model.dataloss import DataLossRecord, now_iso
from bkaudit.store import ZkStore
from bkaudit.zk import dataloss, paths, registry
from bkaudit.zk import lifecycle as store
from bkaudit.zk import underreplication as ur
from tests.admin.support import add_cookie, add_ledger

S = lc.LifecycleState
A, B, C, D = (f"10.0.0.{i}:3181" for i in range(1, 5))


def drain(zk, root: str, bookie: str) -> None:
    service.transition(ZkStore(zk, root=root), bookie, S.DRAINING, actor=lc.Actor.OPERATOR, by="t")


def test_markers_name_every_draining_bookie_and_progress_is_recorded(zk, zk_root) -> None:
    for b in (A, B, C, D):
        add_cookie(zk, zk_root, b)
    add_ledger(zk, zk_root, 1, (A, B, C), length=300)
    add_ledger(zk, zk_root, 2, (A, C, D), length=500)
    add_ledger(zk, zk_root, 3, (C, D), length=700)
    drain(zk, zk_root, A)
    drain(zk, zk_root, B)
    cs = ZkStore(zk, root=zk_root)
    drainer = Drainer(cs, settings=LifecycleSettings(drain_check_interval_s=1))
    progress = drainer.step()
    assert sorted(ur.list_underreplicated(zk, root=zk_root)) == [1, 2]
    assert set(ur.get_marker(zk, 1, root=zk_root)[0].replicas) == {A, B}  # planned against both
    assert ur.get_marker(zk, 2, root=zk_root)[0].replicas == (A,)
    assert (progress[A]["ledgers_left"], progress[A]["bytes_left"]) == (2, 800)
    assert (progress[B]["ledgers_left"], progress[B]["bytes_left"]) == (1, 300)
    cache = LifecycleCache(cs, ttl_s=0)
    assert cache.draining() == {A, B} and cache.not_active() == {A, B}

    # the workers moved ledger 1 off both bookies: B is drained, A still holds ledger 2
    zk.delete(paths.ledger_path(1, root=zk_root))
    add_ledger(zk, zk_root, 1, (D, C, "10.0.0.5:3181"), length=300)
    drainer.step()
    assert service.current(cs, B)[0] is S.DRAINED
    assert service.current(cs, A)[0] is S.DRAINING
    assert cache.draining() == {A} and cache.not_active() == {A, B}

    # ledger 2 cannot be replicated (data loss recorded): everything left is bad -> DrainingFailed
    dataloss.write(zk, DataLossRecord(2, ((0, 9),), now_iso(), (A,), 3, "w"), root=zk_root)
    drainer.step()
    record, _ = store.read_state(zk, A, root=zk_root)
    assert record is not None and record.state is S.DRAINING_FAILED and record.by == "auditor"
    assert store.read_progress(zk, A, root=zk_root)["data_loss_ledgers"] == [2]


def test_repeated_failures_count_only_when_nothing_else_is_left(zk, zk_root) -> None:
    for b in (A, B, C):
        add_cookie(zk, zk_root, b)
    add_ledger(zk, zk_root, 5, (A, B))
    add_ledger(zk, zk_root, 6, (A, C))
    drain(zk, zk_root, A)
    cs = ZkStore(zk, root=zk_root)
    drainer = Drainer(cs, settings=LifecycleSettings(drain_max_failures=2))
    for _ in range(2):
        store.record_failure(zk, A, 5, "NotEnoughBookies", "t", root=zk_root)
    drainer.step()
    assert service.current(cs, A)[0] is S.DRAINING  # ledger 6 can still move
    assert store.read_progress(zk, A, root=zk_root)["failed_ledgers"] == [5]
    zk.delete(paths.ledger_path(6, root=zk_root))
    drainer.step()
    assert service.current(cs, A)[0] is S.DRAINING_FAILED


def test_nothing_is_published_while_replication_is_disabled(zk, zk_root) -> None:
    add_cookie(zk, zk_root, A)
    add_ledger(zk, zk_root, 9, (A, B))
    drain(zk, zk_root, A)
    ur.disable_replication(zk, root=zk_root)
    Drainer(ZkStore(zk, root=zk_root), settings=LifecycleSettings()).step()
    assert list(ur.list_underreplicated(zk, root=zk_root)) == []
    assert store.read_progress(zk, A, root=zk_root)["ledgers_left"] == 1


# -- a bookie that does not follow its state znode (Apache BookKeeper's): its HTTP admin API -----------------
class BookieHttpApi:
    """BookKeeper's `/api/v1/bookie/state/readonly` as BookieStateReadOnlyService answers it, on loopback.

    `answer` picks what a PUT gets: "ok" (the bookie re-registers under available/readonly, as
    BookieStateManager.doTransitionToReadOnlyMode does, then 200 {"readOnly": true}), "disabled" (400, its
    readOnlyModeEnabled=false text) or "error" (a bare 500, ErrorHttpService). Every request is recorded.
    """

    def __init__(self, zk, root: str, bookie: str) -> None:
        self.requests: list[tuple[str, str, bytes]] = []
        self.answer = "ok"
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _reply(self, code: int, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                api.requests.append(("GET", self.path, b""))
                ro = registry.bookie_state(zk, bookie, root) == "readonly"
                self._reply(200, b'{"readOnly":%s}' % (b"true" if ro else b"false"))

            def do_PUT(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                api.requests.append(("PUT", self.path, body))
                if api.answer == "disabled":
                    self._reply(400, b"Bookie is disabled ReadOnly mode, cannot transit to readOnly mode")
                elif api.answer == "error":
                    self._reply(500, b"")
                else:
                    registry.register(zk, bookie, api.registration, readonly=True, root=root)
                    self._reply(200, b'{\n  "readOnly" : true\n}')

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.registration = b""

    def puts(self) -> list[bytes]:
        return [body for method, _, body in self.requests if method == "PUT"]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def java_registration(bookie: str, http_port: int | None, *, http_host: str = "0.0.0.0") -> bytes:
    """What a BookKeeper 4.17 bookie registers: bookie-rpc, plus HttpService's endpoint when it has one."""
    extra = () if http_port is None else (records.Endpoint("httpserver", http_port, http_host, "http"),)
    host, port = bookie.rsplit(":", 1)
    return records.encode_bookie_service_info(
        records.bookie_service_info_for(bookie, host, int(port), extra_endpoints=extra))


J = "127.0.0.1:3181"  # the stand-in Java bookie: its HTTP API listens on 127.0.0.1


def test_a_java_bookie_is_made_read_only_through_its_http_api_and_kept_so(zk, zk_root) -> None:
    zk.ensure_path(paths.readonly_root(root=zk_root))
    for b in (J, B, C):
        add_cookie(zk, zk_root, b)
    add_ledger(zk, zk_root, 1, (J, B))
    api = BookieHttpApi(zk, zk_root, J)
    try:
        # httpServerHost's default 0.0.0.0 is a wildcard: the bookie-rpc endpoint's host is asked
        api.registration = java_registration(J, api.port)
        registry.register(zk, J, api.registration, root=zk_root)
        drain(zk, zk_root, J)
        assert api.requests == []  # the transition itself calls nobody
        events: list[tuple[str, dict]] = []
        cs = ZkStore(zk, root=zk_root)
        drainer = Drainer(cs, settings=LifecycleSettings(), emit=lambda event, **f: events.append((event, f)))
        progress = drainer.step()[J]
        assert api.requests == [("PUT", "/api/v1/bookie/state/readonly", b'{"readOnly":true}')]
        assert registry.bookie_state(zk, J, zk_root) == "readonly"
        assert progress["serving"] == "made_read_only" and progress["ledgers_left"] == 1
        assert progress["serving_url"] == f"http://127.0.0.1:{api.port}/api/v1/bookie/state/readonly"
        made = {"bookie": J, "state": "Draining", "url": progress["serving_url"]}
        assert ("drain_read_only", made) in events
        assert sorted(ur.list_underreplicated(zk, root=zk_root)) == [1]
        # read-only already: nothing is sent; no ledger left -> Drained
        zk.delete(paths.ledger_path(1, root=zk_root))
        assert drainer.step()[J]["serving"] == "read_only"
        assert service.current(cs, J)[0] is S.DRAINED
        assert len(api.puts()) == 1
        # restarted, it registers writable again (BookKeeper keeps a manual read-only mode in memory only):
        # a Drained bookie is made read-only again; bkaudit never asks for {"readOnly": false}
        registry.register(zk, J, api.registration, root=zk_root)
        drainer.step()
        assert registry.bookie_state(zk, J, zk_root) == "readonly"
        assert api.puts() == [b'{"readOnly":true}'] * 2
    finally:
        api.close()


def test_a_java_bookie_that_stays_writable_is_never_drained(zk, zk_root) -> None:
    zk.ensure_path(paths.readonly_root(root=zk_root))
    for b in (J, B):
        add_cookie(zk, zk_root, b)
    api = BookieHttpApi(zk, zk_root, J)
    try:
        api.registration = java_registration(J, api.port, http_host="127.0.0.1")
        registry.register(zk, J, api.registration, root=zk_root)
        drain(zk, zk_root, J)
        cs = ZkStore(zk, root=zk_root)
        drainer = Drainer(cs, settings=LifecycleSettings(drain_max_failures=3))
        # a 500 may pass: asked again every pass, Draining meanwhile even though nothing references it
        api.answer = "error"
        for attempt in (1, 2):
            progress = drainer.step()[J]
            assert service.current(cs, J)[0] is S.DRAINING
            assert progress["serving"] == "writable" and progress["serving_attempts"] == attempt
            assert "answered 500" in progress["serving_error"]
        # ... until drain_max_failures passes in a row: DrainingFailed, with the reason
        drainer.step()
        record, _ = store.read_state(zk, J, root=zk_root)
        assert record is not None and record.state is S.DRAINING_FAILED
        assert "still registered writable" in record.reason and "answered 500" in record.reason
        assert len(api.puts()) == 3

        # the bookie refuses for good (readOnlyModeEnabled=false: 400): DrainingFailed at the first pass
        add_cookie(zk, zk_root, C)
        other = BookieHttpApi(zk, zk_root, C)
        try:
            other.answer = "disabled"
            registry.register(zk, C, java_registration(C, other.port, http_host="127.0.0.1"), root=zk_root)
            drain(zk, zk_root, C)
            drainer.step()
            record, _ = store.read_state(zk, C, root=zk_root)
            assert record is not None and record.state is S.DRAINING_FAILED
            assert "answered 400: Bookie is disabled ReadOnly mode" in record.reason
        finally:
            other.close()
    finally:
        api.close()


def test_no_http_endpoint_or_nothing_listening(zk, zk_root) -> None:
    zk.ensure_path(paths.readonly_root(root=zk_root))
    for b in (A, B, J):
        add_cookie(zk, zk_root, b)
    # no endpoint (httpServerEnabled=false, BookKeeper's default): DrainingFailed at once, saying so
    registry.register(zk, A, java_registration(A, None), root=zk_root)
    # an endpoint nobody answers on: asked again each pass (the bookie may be restarting)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    registry.register(zk, J, java_registration(J, closed, http_host="127.0.0.1"), root=zk_root)
    # a bkaudit bookie follows its state itself: never called, Drained as before
    ours = records.bookie_service_info_for(B, "10.0.0.2", 3181, properties={"bkaudit.version": "x"})
    registry.register(zk, B, records.encode_bookie_service_info(ours), root=zk_root)
    for b in (A, B, J):
        drain(zk, zk_root, b)
    cs = ZkStore(zk, root=zk_root)
    progress = Drainer(cs, settings=LifecycleSettings(drain_max_failures=2)).step()
    states = {b: service.current(cs, b)[0] for b in (A, B, J)}
    assert states == {A: S.DRAINING_FAILED, B: S.DRAINED, J: S.DRAINING}
    record, _ = store.read_state(zk, A, root=zk_root)
    assert record is not None and "no http endpoint" in record.reason and "httpServerEnabled" in record.reason
    assert progress[B]["serving"] == "follows_state"
    assert progress[J]["serving"] == "writable" and "failed" in progress[J]["serving_error"]
