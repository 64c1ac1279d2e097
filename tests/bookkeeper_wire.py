"""A BookKeeper peer for wire tests, built from BookKeeper's definitions only, never from bkaudit's code.

- Messages: BookKeeper's .proto files compiled here (protoc via grpc_tools, into a private descriptor pool).
  bkaudit/formats/proto/BookkeeperProtocol.proto and DataFormats.proto are field-for-field copies of
  bookkeeper-proto/src/main/proto/ (the one extension, numbers >= 1000, is never used by these tests).
- v3 framing: BookieProtoEncoding writes a 4-byte big-endian length and the serialized message; both ends
  read it with Netty's LengthFieldBasedFrameDecoder(nettyMaxFrameSizeBytes, 0, 4, 0, 4).
- v2 packets (`V2`): written from apache/bookkeeper release-4.17.3, BookieProtocol.PacketHeader.toInt
  (version << 24 | opCode << 16 | flags), RequestEnDeCoderPreV3.encode (ReadRequest: header, ledgerId,
  entryId, the 20-byte master key when present; BatchedReadRequest: header, ledgerId, entryId, requestId,
  maxCount, maxSize, key), DigestManager.computeDigestAndPackageForSendingV2 (AddRequest: header, master
  key, entry) and ResponseEnDeCoderPreV3.decode (header, rc, ledgerId, entryId, then the entry; batched
  reads add requestId and int-length-prefixed entries). Error codes are BookieProtocol's.
- Entries: BookKeeper's DUMMY digest layout (ledgerId, entryId, lastAddConfirmed, length as big-endian
  int64s, then the payload).
"""

from __future__ import annotations

import itertools
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PROTO_DIR = Path(__file__).resolve().parents[1] / "bkaudit" / "formats" / "proto"
NETTY_MAX_FRAME_SIZE = 5 * 1024 * 1024  # AbstractConfiguration.DEFAULT_NETTY_MAX_FRAME_SIZE
KEY = bytes(range(20))  # a 20-byte master key, as SHA1("ledger" + password) would be
_txn = itertools.count(1)


class Messages:
    """BookkeeperProtocol.proto and DataFormats.proto, compiled: message classes and enum numbers."""

    def __init__(self, out_dir: Path) -> None:
        from grpc_tools import protoc

        out = out_dir / "bk.desc"
        names = ["BookkeeperProtocol.proto", "DataFormats.proto"]
        assert protoc.main(["protoc", f"-I{PROTO_DIR}", f"--descriptor_set_out={out}", *names]) == 0
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
        pool = descriptor_pool.DescriptorPool()
        for f in files.file:
            pool.Add(f)
        proto, formats = (f.package for f in files.file)

        def message(name: str) -> Any:
            return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))

        self.Request = message(f"{proto}.Request")
        self.Response = message(f"{proto}.Response")
        self.AuthMessage = message(f"{proto}.AuthMessage")
        self.BookieServiceInfoFormat = message(f"{formats}.BookieServiceInfoFormat")
        self.ops = {v.name: v.number for v in pool.FindEnumTypeByName(f"{proto}.OperationType").values}
        self.status = {v.name: v.number for v in pool.FindEnumTypeByName(f"{proto}.StatusCode").values}


def entry(ledger_id: int, entry_id: int, payload: bytes, *, lac: int | None = None) -> bytes:
    """A DUMMY-digest entry; its piggy-backed LAC is entry_id - 1 unless given."""
    lac = entry_id - 1 if lac is None else lac
    return struct.pack(">qqqq", ledger_id, entry_id, lac, len(payload)) + payload


def bookie_address(request: Any, zk_server: Any, tmp_path_factory: Any) -> Iterator[tuple[str, int]]:
    """For a module fixture parametrized by bookie kind: a bkaudit bookie (`cluster3`'s second), or Apache
    BookKeeper's own (4.17.3, SortedLedgerStorage, every other setting BookKeeper's default) in a cluster of
    its own, so a test's expectations are checked against Java as well."""
    from bkaudit.cluster.local import LocalCluster
    from tests.fixtures.cluster import running_cluster

    def address(cluster: LocalCluster, index: int) -> tuple[str, int]:
        host, port = cluster.bookies[index].id.rsplit(":", 1)
        return host, int(port)

    if request.param == "bkaudit":
        yield address(request.getfixturevalue("cluster3"), 1)
        return
    request.getfixturevalue("java_bookkeeper")  # fails, never skips, without the jars (make bookkeeper)
    with running_cluster(zk_server, tmp_path_factory, bookies=1, racks=1, java={0: "sorted"}) as cluster:
        yield address(cluster, 0)


BOOKIE_KINDS = ["bkaudit", pytest.param("java", marks=pytest.mark.java)]


def frame(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


class Wire:
    """One TCP connection speaking BookKeeper's framing (v3 messages, or raw v2 payloads)."""

    def __init__(self, bk: Messages, address: tuple[str, int], *, sock: socket.socket | None = None) -> None:
        self.bk = bk
        self.sock = sock or socket.create_connection(address, timeout=20)
        self.buf = b""

    def request(self, op: str, **sub: Any) -> Any:
        req = self.bk.Request()
        req.header.version = 3  # VERSION_THREE
        req.header.operation = self.bk.ops[op]
        req.header.txnId = next(_txn)
        for field, values in sub.items():
            getattr(req, field).SetInParent()
            for k, v in values.items():
                setattr(getattr(req, field), k, v)
        return req

    def send(self, *requests: Any) -> None:
        self.sock.sendall(b"".join(frame(r.SerializeToString()) for r in requests))

    def receive_frame(self) -> bytes | None:
        """The next frame's payload, or None when the bookie closed the connection."""
        while True:
            if len(self.buf) >= 4:
                (size,) = struct.unpack(">I", self.buf[:4])
                assert size <= NETTY_MAX_FRAME_SIZE - 4  # what a Java client's frame decoder accepts
                if len(self.buf) >= 4 + size:
                    data, self.buf = self.buf[4 : 4 + size], self.buf[4 + size :]
                    return data
            try:
                chunk = self.sock.recv(1 << 16)
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            self.buf += chunk

    def receive(self) -> Any:
        """The next v3 response, or None when the bookie closed the connection."""
        data = self.receive_frame()
        return None if data is None else self.bk.Response.FromString(data)

    def call(self, *requests: Any) -> list[Any]:
        """Pipeline `requests`, return their responses in request order (matched by txnId)."""
        self.send(*requests)
        by_txn = {}
        while len(by_txn) < len(requests):
            resp = self.receive()
            assert resp is not None, "connection closed before every request was answered"
            by_txn[resp.header.txnId] = resp
        return [by_txn[r.header.txnId] for r in requests]

    def closed_by_peer(self) -> bool:
        """True once the bookie closes the connection (nothing else may arrive before)."""
        return self.receive_frame() is None

    def close(self) -> None:
        self.sock.close()


class V2:
    """BookieProtocol's packets (see the module docstring for the Java methods they follow)."""

    CURRENT_PROTOCOL_VERSION = 2
    ADDENTRY, READENTRY, AUTH, READ_LAC, WRITE_LAC, GET_BOOKIE_INFO, BATCH_READ_ENTRY = 1, 2, 3, 4, 5, 6, 7
    FLAG_NONE, FLAG_DO_FENCING, FLAG_RECOVERY_ADD, FLAG_HIGH_PRIORITY = 0, 1, 2, 4
    EOK, ENOLEDGER, ENOENTRY, EBADREQ, EIO, EUA, EBADVERSION, EFENCED, EREADONLY = (
        0, 1, 2, 100, 101, 102, 103, 104, 105)

    @staticmethod
    def header(op: int, flags: int = 0, version: int = CURRENT_PROTOCOL_VERSION) -> bytes:
        if version == 0:
            return struct.pack(">i", op)
        return struct.pack(">I", ((version & 0xFF) << 24) | ((op & 0xFF) << 16) | (flags & 0xFFFF))

    @classmethod
    def add(cls, body: bytes, *, key: bytes = KEY, flags: int = 0, version: int = 2) -> bytes:
        return frame(cls.header(cls.ADDENTRY, flags, version) + key + body)

    @classmethod
    def read(cls, ledger_id: int, entry_id: int, *, key: bytes | None = None, flags: int = 0,
             version: int = 2) -> bytes:
        return frame(cls.header(cls.READENTRY, flags, version) + struct.pack(">qq", ledger_id, entry_id)
                     + (key or b""))

    @classmethod
    def batch_read(cls, ledger_id: int, entry_id: int, *, request_id: int, max_count: int, max_size: int,
                   key: bytes | None = None, flags: int = 0) -> bytes:
        return frame(cls.header(cls.BATCH_READ_ENTRY, flags)
                     + struct.pack(">qqqiq", ledger_id, entry_id, request_id, max_count, max_size)
                     + (key or b""))


@dataclass(frozen=True)
class V2Response:
    version: int
    op: int
    rc: int
    ledger_id: int
    entry_id: int
    data: bytes
    request_id: int | None = None
    entries: tuple[bytes, ...] = ()

    @classmethod
    def parse(cls, payload: bytes) -> V2Response:
        (header,) = struct.unpack_from(">i", payload, 0)
        version = (header >> 24) & 0xFF
        op = header & 0xFF if version == 0 else (header >> 16) & 0xFF
        rc, ledger_id, entry_id = struct.unpack_from(">iqq", payload, 4)
        rest = payload[24:]
        if op != V2.BATCH_READ_ENTRY:
            return cls(version, op, rc, ledger_id, entry_id, rest)
        (request_id,) = struct.unpack_from(">q", rest, 0)
        entries, offset = [], 8
        while offset < len(rest):
            (size,) = struct.unpack_from(">i", rest, offset)
            entries.append(rest[offset + 4 : offset + 4 + size])
            offset += 4 + size
        return cls(version, op, rc, ledger_id, entry_id, b"", request_id, tuple(entries))


def v2_call(wire: Wire, *packets: bytes) -> list[V2Response]:
    """Send v2 packets on `wire`, return that many v2 responses in arrival order."""
    wire.sock.sendall(b"".join(packets))
    out = []
    for _ in packets:
        data = wire.receive_frame()
        assert data is not None, "connection closed before every v2 request was answered"
        out.append(V2Response.parse(data))
    return out
