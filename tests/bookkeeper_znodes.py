"""ZooKeeper content as BookKeeper 4.17's Java code writes it, for tests whose far end stands in for it.

Built from BookKeeper's definitions, never through bkaudit's own writers:
- ledger metadata: `LedgerMetadataSerDe.serializeVersion3`, i.e. the header
  `BookieMetadataFormatVersion\\t3\\n` then a length-delimited `LedgerMetadataFormat` (DataFormats.proto),
  at the short hierarchical path (`StringUtils.getShortHierarchicalLedgerPath`: the `%010d` id split 2-4-4,
  last part prefixed `L`);
- registrations: `ZKRegistrationManager.registerBookie` puts `serializeBookieServiceInfo(...)` at
  `<root>/available/<bookieId>` or `<root>/available/readonly/<bookieId>`; the endpoint is the one
  `BookieService.publishInfo` publishes (`id "bookie"`, protocol `bookie-rpc`, the bound host and port);
- cookies: `<root>/cookies/<bookieId>` with the TextFormat `Cookie` (version 5) a Java bookie writes.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.internal.encoder import _VarintBytes

from bkaudit.formats.proto import DataFormats_pb2 as df


def ledger_path(root: str, ledger_id: int) -> str:
    s = f"{ledger_id:010d}"
    return f"{root}/{s[0:2]}/{s[2:6]}/L{s[6:10]}"


def closed_ledger(segments: list[tuple[int, tuple[str, ...]]], *, last_entry_id: int, write_quorum: int = 2,
                  ack_quorum: int = 2) -> bytes:
    """A CLOSED ledger's v3 metadata; `segments` = [(first entry id, ensemble), ...]."""
    msg = df.LedgerMetadataFormat()
    msg.ensembleSize = len(segments[0][1])
    msg.quorumSize, msg.ackQuorumSize = write_quorum, ack_quorum
    msg.length, msg.lastEntryId = 1024, last_entry_id
    msg.state = df.LedgerMetadataFormat.CLOSED
    msg.digestType = df.LedgerMetadataFormat.CRC32C
    msg.password = b""
    msg.ctime = 1_700_000_000_000
    for first, ensemble in segments:
        segment = msg.segment.add()
        segment.firstEntryId = first
        segment.ensembleMember.extend(ensemble)
    msg.cToken = 0
    body = msg.SerializeToString()
    return b"BookieMetadataFormatVersion\t3\n" + _VarintBytes(len(body)) + body


def add_ledger(zk: Any, root: str, ledger_id: int, segments: list[tuple[int, tuple[str, ...]]],
               *, last_entry_id: int = 19) -> None:
    zk.create(ledger_path(root, ledger_id), closed_ledger(segments, last_entry_id=last_entry_id),
              makepath=True)


def service_info(host: str, port: int) -> bytes:
    info = df.BookieServiceInfoFormat()
    endpoint = info.endpoints.add()
    endpoint.id, endpoint.port, endpoint.host, endpoint.protocol = "bookie", port, host, "bookie-rpc"
    return info.SerializeToString()


def register(zk: Any, root: str, bookie_id: str, data: bytes, *, readonly: bool = False) -> None:
    """A registration znode (EPHEMERAL in BookKeeper; the test's session owns it)."""
    parent = f"{root}/available/readonly" if readonly else f"{root}/available"
    zk.ensure_path(parent)
    zk.create(f"{parent}/{bookie_id}", data, ephemeral=True)


def add_cookie(zk: Any, root: str, bookie_id: str) -> None:
    cookie = f'5\nbookieHost: "{bookie_id}"\njournalDir: "/tmp/journal"\nledgerDirs: "1\\t/tmp/ledgers"\n'
    zk.create(f"{root}/cookies/{bookie_id}", cookie.encode(), makepath=True)
