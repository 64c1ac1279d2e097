"""Shared pieces of the admin API tests: tokens, a served app on loopback, seeded cluster records."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pyarrow as pa

from bkaudit.admin.auth import hash_token
from bkaudit.admin.server import AdminServer
from bkaudit.admin.settings import AdminSettings
from bkaudit.formats import ledger_metadata, records
from bkaudit.model.ledger import DigestType, LedgerMetadata, LedgerState, Segment
from bkaudit.store import ZkStore
from bkaudit.zk import paths, registry

ADMIN_TOKEN = "admin-token-0123456789"
READ_TOKEN = "read-token-0123456789"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
READER = {"Authorization": f"Bearer {READ_TOKEN}"}


def settings(**kw: Any) -> AdminSettings:
    kw.setdefault("webhook_poll_s", 0.2)
    kw.setdefault("webhook_backoff_s", 0.05)
    kw.setdefault("webhook_allow_networks", ("127.0.0.0/8",))  # the tests' receivers are on loopback
    return AdminSettings(admin_tokens=(f"ops:{hash_token(ADMIN_TOKEN)}",),
                         read_tokens=(f"viewer:{hash_token(READ_TOKEN)}",), **kw)


def serve(zk: Any, root: str, **kw: Any) -> AdminServer:
    warehouse = kw.pop("warehouse", "")
    pool = kw.pop("pool", None)
    return AdminServer(ZkStore(zk, root=root), settings(**kw), warehouse=warehouse, pool=pool, port=0).start()


def add_cookie(zk: Any, root: str, bookie: str) -> None:
    registry.create_cookie(zk, records.Cookie(bookie, ("/d",), ("/d",), "inst"), root=root)


def add_ledger(zk: Any, root: str, ledger_id: int, ensemble: tuple[str, ...], length: int = 1000) -> None:
    metadata = LedgerMetadata(
        ensemble_size=len(ensemble), write_quorum=len(ensemble), ack_quorum=len(ensemble),
        state=LedgerState.CLOSED, last_entry_id=9, length=length, digest_type=DigestType.CRC32C, password=b"",
        segments=(Segment(0, ensemble),),
    )
    zk.create(paths.ledger_path(ledger_id, root=root), ledger_metadata.serialize(metadata), makepath=True)


def write_audit_run(warehouse: str, run_id: str, start: datetime, rows: list[dict[str, Any]]) -> None:
    """A checker run's `audit_runs` and `violations` rows, committed as the checker does (delta-rs)."""
    import bkaudit.tables.checker_schemas as cs
    from bkaudit.tables.store import write_table

    date, sid = start.strftime("%Y-%m-%d"), f"snap-{run_id}"
    keys = {"run_id": run_id, "snapshot_id": sid, "run_date": date}
    v = pa.Table.from_pylist([{**keys, "detected_at": start, **r} for r in rows], schema=cs.VIOLATIONS.schema)
    same = {"snapshot_id": sid, "snapshot_date": date, "replace": {"run_id": run_id}}
    write_table(warehouse, "violations", v, **same)
    counts = Counter(r["category"] for r in rows)
    run = {**keys, "status": "succeeded", "started_at": start, "finished_at": start + timedelta(seconds=9),
           "seconds": 9.0, "ledgers_checked": 40, "counts": list(counts.items()), "published": 0}
    write_table(warehouse, "audit_runs", pa.Table.from_pylist([run], schema=cs.AUDIT_RUNS.schema), **same)


class RawConnection:
    """One keep-alive HTTP/1.1 connection on a plain socket: what a client sends byte by byte (a body that is
    announced but not sent, several requests on one connection) and what the server does with it."""

    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        import socket
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.sock = socket.create_connection((self.host, parts.port or 80), timeout=timeout_s)
        self.buffer = b""

    def send(self, method: str, target: str, headers: dict[str, str] | None = None,
             body: bytes = b"") -> None:
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self.host}"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)

    def _fill(self) -> bool:
        chunk = self.sock.recv(65536)
        self.buffer += chunk
        return bool(chunk)

    def response(self) -> tuple[int, dict[str, str], bytes]:
        """The next answer: (status, headers with lower-case names, body); the socket's timeout if none."""
        while b"\r\n\r\n" not in self.buffer:
            if not self._fill():
                raise ConnectionError("the server closed the connection before answering")
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        while len(self.buffer) < length:
            if not self._fill():
                raise ConnectionError("the server closed the connection in the middle of an answer")
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return int(status_line.split()[1]), headers, body

    def closed_by_server(self) -> bool:
        """True when the server closes the connection (reads whatever else it sends first)."""
        try:
            while self._fill():
                pass
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True
        return True

    def close(self) -> None:
        self.sock.close()


class Receiver:
    """A loopback HTTP server recording every POST; the first `fail_first` answers are 503."""

    def __init__(self, fail_first: int = 0) -> None:
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.fail_first = fail_first
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append((dict(self.headers), body))
                failing = len(receiver.received) <= receiver.fail_first
                self.send_response(503 if failing else 204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
