"""BookKeeper's other ZooKeeper records, byte-compatible, as small frozen value objects.

Each record has an `encode_*` / `parse_*` pair. Parsers take the raw znode bytes and raise only
`FormatError` (with field and offset) on bytes BookKeeper would not accept, invalid UTF-8 included.

| record (znode)                                        | encoding                                          |
|-------------------------------------------------------|---------------------------------------------------|
| under-replicated marker (`underreplication/ledgers/…`) | TextFormat `UnderreplicatedLedgerFormat`          |
| lock data (`underreplication/locks/urL…`)             | TextFormat `LockDataFormat` or empty              |
| auditor vote (`underreplication/auditorelection/V_…`) | TextFormat `AuditorVoteFormat`                    |
| cookie (`cookies/<bookieId>`)                         | `"5\\n"` + TextFormat `CookieFormat` (legacy: v3) |
| ledgers LAYOUT (`/ledgers/LAYOUT`)                    | `"<ver>\\n<factoryClass>:<managerVersion>"`        |
| under-replication LAYOUT                              | TextFormat `LedgerRereplicationLayoutFormat`      |
| `checkallledgersctime` & co.                          | binary protobuf, int64 field 1                    |
| bookie registration (`available/<bookieId>`)          | binary protobuf `BookieServiceInfoFormat`         |
| Pulsar racks (`/bookies`)                             | JSON `BookiesRackConfiguration`                   |
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from bkaudit.errors import FormatError
from bkaudit.formats import textformat
from bkaudit.formats.bookie_id import invalid_bookie_id_reason
from bkaudit.formats.proto import DataFormats_pb2
from bkaudit.formats.textformat import Field, Kind, PrintValue

__all__ = [
    "BOOKIE_RPC_PROTOCOL",
    "COOKIE_LAYOUT_VERSION",
    "DEFAULT_ENDPOINT_ID",
    "DEFAULT_LEDGER_LAYOUT",
    "UNDERREPLICATION_LAYOUT_TYPE",
    "UNDERREPLICATION_LAYOUT_VERSION",
    "BookieRackInfo",
    "BookieServiceInfo",
    "Cookie",
    "Endpoint",
    "LedgerLayout",
    "UnderreplicatedMarker",
    "bookie_service_info_for",
    "encode_auditor_vote",
    "encode_bookie_service_info",
    "encode_check_ctime",
    "encode_cookie",
    "encode_ledger_layout",
    "encode_lock_data",
    "encode_rack_config",
    "encode_underreplicated_marker",
    "encode_underreplication_layout",
    "layout_name",
    "merge_replicas",
    "parse_auditor_vote",
    "parse_bookie_service_info",
    "parse_check_ctime",
    "parse_cookie",
    "parse_ledger_layout",
    "parse_lock_data",
    "parse_rack_config",
    "parse_underreplicated_marker",
    "parse_underreplication_layout",
    "update_rack_entry",
]


def _utf8(data: bytes, field: str) -> str:
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError("invalid UTF-8", field=field, offset=exc.start) from None


# ------------------------------------------------------------------------------------------------------------
# Under-replicated ledger marker
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UnderreplicatedMarker:
    """`UnderreplicatedLedgerFormat`: the bookies missing from a ledger's ensembles, and when it was marked.

    `ctime` is None when the marker was written with `storeSystemTimeAsLedgerUnderreplicatedMarkTime=false`.
    """

    replicas: tuple[str, ...]
    ctime: int | None = None


_UR_SCHEMA = {"replica": Field(Kind.STRING, repeated=True), "ctime": Field(Kind.INT64)}


def encode_underreplicated_marker(marker: UnderreplicatedMarker) -> bytes:
    """`replica: "..."` per replica, then `ctime: N` when present."""
    fields: list[tuple[str, PrintValue]] = [("replica", r) for r in marker.replicas]
    if marker.ctime is not None:
        fields.append(("ctime", marker.ctime))
    return textformat.print_message(fields).encode("ascii")


def parse_underreplicated_marker(data: bytes) -> UnderreplicatedMarker:
    """Replicas in stored order; ctime None when absent (BookKeeper's UNASSIGNED_CTIME)."""
    msg = textformat.parse_message(data, _UR_SCHEMA, name="UnderreplicatedLedgerFormat")
    ctime = msg.integer("ctime") if msg.has("ctime") else None
    return UnderreplicatedMarker(tuple(msg.strings("replica")), ctime)


def merge_replicas(
    marker: UnderreplicatedMarker, new_replicas: Iterable[str], now_ms: int | None
) -> UnderreplicatedMarker | None:
    """BookKeeper's re-mark of an already marked ledger (`handleLedgerUnderreplicatedAlreadyMarked`).

    Missing replicas not yet listed are appended in order; ctime is refreshed to `now_ms` only when at least
    one was added (None = BookKeeper's storeSystemTime setting off: keep the old ctime). Returns None when
    nothing changes, so the caller skips the setData. Unlike BookKeeper, a replica repeated within
    `new_replicas` is appended once.
    """
    seen = set(marker.replicas)
    added: list[str] = []
    for replica in new_replicas:
        if replica not in seen:
            seen.add(replica)
            added.append(replica)
    if not added:
        return None
    ctime = now_ms if now_ms is not None else marker.ctime
    return UnderreplicatedMarker(marker.replicas + tuple(added), ctime)


# ------------------------------------------------------------------------------------------------------------
# Lock data and auditor vote
# ------------------------------------------------------------------------------------------------------------

_BOOKIE_ID_SCHEMA = {"bookieId": Field(Kind.STRING)}
_VOTE_SCHEMA = {"bookieId": Field(Kind.STRING, required=True)}


def encode_lock_data(bookie_id: str | None) -> bytes:
    """`bookieId: "<host>"\\n`, or empty when the holder's host is unknown (as BookKeeper's getLockData)."""
    if bookie_id is None:
        return b""
    return textformat.print_message([("bookieId", bookie_id)]).encode("ascii")


def parse_lock_data(data: bytes) -> str | None:
    """The lock holder, or None for empty lock data."""
    msg = textformat.parse_message(data, _BOOKIE_ID_SCHEMA, name="LockDataFormat")
    return msg.string("bookieId") if msg.has("bookieId") else None


def encode_auditor_vote(bookie_id: str) -> bytes:
    """`bookieId: "<id>"\\n` (also the data the elected auditor writes onto `auditorelection`)."""
    return textformat.print_message([("bookieId", bookie_id)]).encode("ascii")


def parse_auditor_vote(data: bytes) -> str:
    """The voting bookie's id (required: an empty vote is corrupt)."""
    return textformat.parse_message(data, _VOTE_SCHEMA, name="AuditorVoteFormat").string("bookieId")


# ------------------------------------------------------------------------------------------------------------
# Cookie
# ------------------------------------------------------------------------------------------------------------

COOKIE_LAYOUT_VERSION = 5


@dataclass(frozen=True, slots=True)
class Cookie:
    """A bookie's identity stamp (`Cookie.java`), stored in ZooKeeper and in every bookie directory.

    `index_dirs` is None unless index directories are configured; `instance_id` is None when not stamped.
    """

    bookie_host: str
    journal_dirs: tuple[str, ...]
    ledger_dirs: tuple[str, ...]
    instance_id: str | None
    index_dirs: tuple[str, ...] | None = None
    layout_version: int = COOKIE_LAYOUT_VERSION


_COOKIE_SCHEMA = {
    "bookieHost": Field(Kind.STRING, required=True),
    "journalDir": Field(Kind.STRING, required=True),
    "ledgerDirs": Field(Kind.STRING, required=True),
    "instanceId": Field(Kind.STRING),
    "indexDirs": Field(Kind.STRING),
}


def encode_cookie(cookie: Cookie) -> bytes:
    """Layout >= 4: `"5\\n"` + TextFormat, as BookKeeper writes every current cookie.

    Layout 3 is written in its own legacy line format with `"3\\n"` (BookKeeper's toStringVersion3 puts the
    current version number on it, a bug that makes its own parser reject the result).
    """
    if cookie.layout_version >= 4:
        text = f"{COOKIE_LAYOUT_VERSION}\n" + textformat.print_message(_cookie_fields(cookie))
        return text.encode("ascii")
    if cookie.layout_version == 3:
        lines = (cookie.bookie_host, ",".join(cookie.journal_dirs), _encode_dirs(cookie.ledger_dirs))
        return ("3\n" + "".join(f"{line}\n" for line in lines)).encode("utf-8")
    raise ValueError(f"cannot encode cookie layout version {cookie.layout_version} (BookKeeper reads >= 3)")


def _cookie_fields(cookie: Cookie) -> list[tuple[str, PrintValue]]:
    fields: list[tuple[str, PrintValue]] = [
        ("bookieHost", cookie.bookie_host),
        ("journalDir", ",".join(cookie.journal_dirs)),
        ("ledgerDirs", _encode_dirs(cookie.ledger_dirs)),
    ]
    if cookie.instance_id is not None:
        fields.append(("instanceId", cookie.instance_id))
    if cookie.index_dirs is not None:
        fields.append(("indexDirs", _encode_dirs(cookie.index_dirs)))
    return fields


def parse_cookie(data: bytes) -> Cookie:
    """Cookie layout 3 (line format) or >= 4 (TextFormat); older layouts are rejected as BookKeeper does."""
    lines = _java_lines(_utf8(data, "cookie"))
    if not lines:
        raise FormatError("empty cookie", field="layoutVersion", offset=0)
    version = _java_parse_int(lines[0][1].strip(_JAVA_TRIM), "layoutVersion", 0)
    if version >= 4:
        rest_offset = lines[1][0] if len(lines) > 1 else len(data)
        msg = textformat.parse_message(bytes(data)[rest_offset:], _COOKIE_SCHEMA, offset=rest_offset,
                                       name="CookieFormat")
        index = _decode_dirs(msg.string("indexDirs"), "indexDirs") if msg.has("indexDirs") else None
        return Cookie(msg.string("bookieHost"), _split_journal(msg.string("journalDir")),
                      _decode_dirs(msg.string("ledgerDirs"), "ledgerDirs"), msg.string("instanceId") or None,
                      index, version)
    if version == 3:
        if len(lines) < 4:
            raise FormatError("layout 3 cookie needs host, journal dirs and ledger dirs lines",
                              field="cookie", offset=len(data))
        host, journal, ledger = (line for _, line in lines[1:4])
        return Cookie(host, _split_journal(journal), _decode_dirs(ledger, "ledgerDirs"), None, None, 3)
    raise FormatError(f"cookie layout version {version} is too old", field="layoutVersion", offset=0)


_JAVA_TRIM = "".join(map(chr, range(0x21)))  # String.trim() strips every char <= ' '


def _java_lines(text: str) -> list[tuple[int, str]]:
    """(byte offset, line) pairs as Java's BufferedReader.readLine yields them (\n, \r or \r\n ends)."""
    lines: list[tuple[int, str]] = []
    offset = 0
    for match in _LINE.finditer(text):
        line, end = match.group(1), match.group(2)
        if not line and not end:
            break
        lines.append((offset, line))
        offset += len(match.group(0).encode("utf-8"))
    return lines


_LINE = re.compile(r"([^\r\n]*)(\r\n|\r|\n|)")


def _java_parse_int(text: str, field: str, offset: int) -> int:
    """Java Integer.parseInt on ASCII text; FormatError otherwise."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    valid = bool(digits) and digits.isascii() and digits.isdigit() and len(digits.lstrip("0")) <= 10
    if not valid or not -(2**31) <= int(text) < 2**31:
        raise FormatError(f"not an int32: {text[:40]!r}", field=field, offset=offset)
    return int(text)


def _encode_dirs(dirs: tuple[str, ...]) -> str:
    """Cookie.encodeDirPaths: the count, then each directory, tab separated."""
    return "\t".join((str(len(dirs)), *dirs))


def _decode_dirs(value: str, field: str) -> tuple[str, ...]:
    """Inverse of `_encode_dirs`; the count must match (BookKeeper ignores it; a mismatch is corruption)."""
    count_text, _, rest = value.partition("\t")
    count = _java_parse_int(count_text, field, 0)
    dirs = tuple(rest.split("\t")) if rest or "\t" in value else ()
    if count != len(dirs):
        raise FormatError(f"directory count {count} but {len(dirs)} directories", field=field)
    return dirs


def _split_journal(value: str) -> tuple[str, ...]:
    return tuple(value.split(",")) if value else ()


# ------------------------------------------------------------------------------------------------------------
# Ledgers LAYOUT
# ------------------------------------------------------------------------------------------------------------

LayoutName = Literal["hierarchical", "longhierarchical", "legacyhierarchical", "flat"]


@dataclass(frozen=True, slots=True)
class LedgerLayout:
    """`/ledgers/LAYOUT`: which ledger manager lays out the metadata znodes (v1 stores a type name)."""

    manager_factory_class: str
    manager_version: int
    layout_format_version: int = 2


DEFAULT_LEDGER_LAYOUT = LedgerLayout("org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory", 1, 2)

_LAYOUT_NAMES: dict[str, LayoutName] = {
    "HierarchicalLedgerManagerFactory": "hierarchical",
    "LongHierarchicalLedgerManagerFactory": "longhierarchical",
    "LegacyHierarchicalLedgerManagerFactory": "legacyhierarchical",
    "FlatLedgerManagerFactory": "flat",
    "hierarchical": "hierarchical",
    "longhierarchical": "longhierarchical",
    "legacyhierarchical": "legacyhierarchical",
    "flat": "flat",
}


def encode_ledger_layout(layout: LedgerLayout) -> bytes:
    """`<layoutFormatVersion>\\n<class>:<managerVersion>`, with no trailing newline."""
    text = f"{layout.layout_format_version}\n{layout.manager_factory_class}:{layout.manager_version}"
    return text.encode("utf-8")


def parse_ledger_layout(data: bytes) -> LedgerLayout:
    """LedgerLayout.parseLayout: versions 1..2, one ':' in the manager line, later lines ignored."""
    lines = _java_split(_utf8(data, "LAYOUT"), "\n")
    version = _java_parse_int(lines[0], "layoutFormatVersion", 0)
    if not 1 <= version <= 2:
        raise FormatError(f"layout format version {version} not in 1..2", field="layoutFormatVersion",
                          offset=0)
    if len(lines) < 2:
        raise FormatError("ledger manager and its version absent from layout", field="managerFactoryClass")
    parts = _java_split(lines[1], ":")
    offset = len(lines[0]) + 1
    if len(parts) != 2:
        raise FormatError("expected '<factory class>:<version>'", field="managerFactoryClass", offset=offset)
    manager_version = _java_parse_int(parts[1], "managerVersion", offset + len(parts[0]) + 1)
    return LedgerLayout(parts[0], manager_version, version)


def _java_split(text: str, sep: str) -> list[str]:
    """Java String.split(literal): trailing empty strings dropped, "" gives [""]."""
    if not text:
        return [""]
    parts = text.split(sep)
    while parts and not parts[-1]:
        parts.pop()
    return parts or [""]


def layout_name(layout: LedgerLayout) -> LayoutName:
    """The ledger manager's short name, from a factory class (by simple name) or a v1 type name."""
    simple = layout.manager_factory_class.rsplit(".", 1)[-1]
    name = _LAYOUT_NAMES.get(simple)
    if name is None:
        raise FormatError(f"unsupported ledger manager {layout.manager_factory_class!r}",
                          field="managerFactoryClass")
    return name


# ------------------------------------------------------------------------------------------------------------
# Under-replication LAYOUT and check ctimes
# ------------------------------------------------------------------------------------------------------------

UNDERREPLICATION_LAYOUT_TYPE = "BASIC"
UNDERREPLICATION_LAYOUT_VERSION = 1
_UR_LAYOUT_SCHEMA = {"type": Field(Kind.STRING, required=True), "version": Field(Kind.INT32, required=True)}


def encode_underreplication_layout() -> bytes:
    """`type: "BASIC"\\nversion: 1\\n`, the only layout BookKeeper knows."""
    fields: list[tuple[str, PrintValue]] = [
        ("type", UNDERREPLICATION_LAYOUT_TYPE),
        ("version", UNDERREPLICATION_LAYOUT_VERSION),
    ]
    return textformat.print_message(fields).encode("ascii")


def parse_underreplication_layout(data: bytes) -> tuple[str, int]:
    """(type, version); FormatError unless BASIC/1 (BookKeeper's CompatibilityException)."""
    msg = textformat.parse_message(data, _UR_LAYOUT_SCHEMA, name="LedgerRereplicationLayoutFormat")
    kind, version = msg.string("type"), msg.integer("version")
    if (kind, version) != (UNDERREPLICATION_LAYOUT_TYPE, UNDERREPLICATION_LAYOUT_VERSION):
        raise FormatError(f"incompatible under-replication layout {kind}:{version} (expected BASIC:1)",
                          field="type")
    return kind, version


_CHECK_CTIME: Any = DataFormats_pb2.CheckAllLedgersFormat  # same wire shape as the other two *Format messages


def encode_check_ctime(ms: int) -> bytes:
    """`checkallledgersctime` / `placementpolicycheckctime` / `replicascheckctime`: int64 field 1."""
    return bytes(_CHECK_CTIME(checkAllLedgersCTime=ms).SerializeToString())


def parse_check_ctime(data: bytes) -> int:
    """The stored epoch ms; -1 when the field (or the data) is missing, as BookKeeper reads it."""
    try:
        msg = _CHECK_CTIME.FromString(bytes(data))
    except DecodeError as exc:
        raise FormatError(f"protobuf decode error: {exc}", field="checkCTime", offset=0) from None
    return int(msg.checkAllLedgersCTime) if msg.HasField("checkAllLedgersCTime") else -1


# ------------------------------------------------------------------------------------------------------------
# Bookie registration (BookieServiceInfo)
# ------------------------------------------------------------------------------------------------------------

BOOKIE_RPC_PROTOCOL = "bookie-rpc"
DEFAULT_ENDPOINT_ID = "bookie"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One service a bookie exposes (`BookieServiceInfo.Endpoint`)."""

    id: str
    port: int
    host: str
    protocol: str
    auth: tuple[str, ...] = ()
    extensions: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class BookieServiceInfo:
    """A bookie's registration data: its endpoints and free-form properties (in stored order)."""

    endpoints: tuple[Endpoint, ...]
    properties: tuple[tuple[str, str], ...] = ()

    def endpoint(self, protocol: str = BOOKIE_RPC_PROTOCOL) -> Endpoint | None:
        """The first endpoint speaking `protocol` (how BookKeeper's DefaultBookieAddressResolver picks)."""
        return next((e for e in self.endpoints if e.protocol == protocol), None)

    def properties_dict(self) -> dict[str, str]:
        """The properties as a mutable dict (BookKeeper's Map<String, String>)."""
        return dict(self.properties)


def _ordered_info_class() -> Any:
    """`BookieServiceInfoFormat` with `properties` as a repeated entry message instead of a map.

    Same wire format (a map is a repeated entry message), but the entries keep their order: protobuf-java
    writes a map in insertion order, while the Python runtime would reorder it by hash.
    """
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(DataFormats_pb2.DESCRIPTOR.serialized_pb)
    f = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="bkaudit/formats/records_bookie_service_info.proto",
                                              package="bkaudit.records", syntax="proto2",
                                              dependency=[DataFormats_pb2.DESCRIPTOR.name])
    entry = file.message_type.add(name="Property")
    entry.field.add(name="key", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    info = file.message_type.add(name="BookieServiceInfo")
    info.field.add(name="endpoints", number=6, type=f.TYPE_MESSAGE, label=f.LABEL_REPEATED,
                   type_name=".bkaudit.dataformats.BookieServiceInfoFormat.Endpoint")
    info.field.add(name="properties", number=7, type=f.TYPE_MESSAGE, label=f.LABEL_REPEATED,
                   type_name=".bkaudit.records.Property")
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("bkaudit.records.BookieServiceInfo"))


_INFO: Any = _ordered_info_class()


def encode_bookie_service_info(info: BookieServiceInfo) -> bytes:
    """Binary `BookieServiceInfoFormat` as ZKRegistrationManager writes it (host and protocol always set)."""
    msg = _INFO()
    for e in info.endpoints:
        msg.endpoints.add(id=e.id, port=e.port, host=e.host, protocol=e.protocol, auth=e.auth,
                          extensions=e.extensions)
    for key, value in info.properties:
        msg.properties.add(key=key, value=value)
    return bytes(msg.SerializeToString())


def parse_bookie_service_info(data: bytes, bookie_id: str) -> BookieServiceInfo:
    """Decode registration data; empty data is a legacy registration derived from `bookie_id` ("host:port").

    Legacy follows BookieServiceInfoUtils.buildLegacyBookieServiceInfo: one bookie-rpc endpoint whose id is
    the bookie id itself.
    """
    if not data:
        return _legacy_service_info(bookie_id)
    try:
        msg = _INFO.FromString(bytes(data))
    except DecodeError as exc:
        raise FormatError(f"protobuf decode error: {exc}", field="BookieServiceInfoFormat",
                          offset=0) from None
    if not msg.IsInitialized():
        raise FormatError("missing required field", field=",".join(msg.FindInitializationErrors()), offset=0)
    endpoints = tuple(
        Endpoint(e.id, e.port, e.host, e.protocol, tuple(e.auth), tuple(e.extensions)) for e in msg.endpoints
    )
    properties = tuple(dict((p.key, p.value) for p in msg.properties).items())
    _require_text(endpoints, properties)
    return BookieServiceInfo(endpoints, properties)


def _require_text(endpoints: tuple[Endpoint, ...], properties: tuple[tuple[str, str], ...]) -> None:
    """proto2 strings are not UTF-8 checked by the runtime: invalid ones come back as bytes."""
    for i, e in enumerate(endpoints):
        texts = (e.id, e.host, e.protocol, *e.auth, *e.extensions)
        if not all(type(t) is str for t in texts):
            raise FormatError("string is not valid UTF-8", field=f"endpoints[{i}]")
    if not all(type(k) is str and type(v) is str for k, v in properties):
        raise FormatError("string is not valid UTF-8", field="properties")


def _legacy_service_info(bookie_id: str) -> BookieServiceInfo:
    parts = bookie_id.split(":")
    if len(parts) < 2:
        raise FormatError(f"legacy registration needs a host:port bookie id, got {bookie_id!r}",
                          field="bookieId")
    port = _java_parse_int(parts[1], "bookieId", len(parts[0]) + 1)
    return BookieServiceInfo((Endpoint(bookie_id, port, parts[0], BOOKIE_RPC_PROTOCOL),))


def bookie_service_info_for(
    bookie_id: str,
    host: str,
    port: int,
    *,
    rpc_extensions: Iterable[str] = (),
    extra_endpoints: Iterable[Endpoint] = (),
    properties: Mapping[str, str] | None = None,
) -> BookieServiceInfo:
    """The registration a BookKeeper bookie publishes: endpoint id "bookie", protocol "bookie-rpc", with
    `rpc_extensions` (BookieService.publishInfo adds "tls" when TLS is configured).

    `bookie_id` must be a valid BookKeeper bookie id (it names the registration znode).
    """
    _check_bookie_id(bookie_id)
    rpc = Endpoint(DEFAULT_ENDPOINT_ID, port, host, BOOKIE_RPC_PROTOCOL, extensions=tuple(rpc_extensions))
    return BookieServiceInfo((rpc, *extra_endpoints), tuple((properties or {}).items()))


def _check_bookie_id(bookie_id: str) -> None:
    """BookieId.validateBookieId (`bkaudit.formats.bookie_id`)."""
    reason = invalid_bookie_id_reason(bookie_id)
    if reason is not None:
        raise ValueError(reason)


# ------------------------------------------------------------------------------------------------------------
# Pulsar rack configuration (/bookies)
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BookieRackInfo:
    """Pulsar's BookieInfo: the rack path (None = default rack) and an optional hostname."""

    rack: str | None
    hostname: str | None = None


def parse_rack_config(data: bytes) -> dict[str, dict[str, BookieRackInfo]]:
    """`{group: {"host:port": {"rack": "/r1", "hostname": "..."}}}`; empty data means no racks configured.

    Racks are normalised as Pulsar's BookieRackAffinityMapping does: a missing leading "/" is added, and an
    empty rack or "/" becomes None (the default rack). Unknown keys are ignored (Pulsar's Jackson setup).
    """
    if not data:
        return {}
    try:
        doc = json.loads(_utf8(data, "bookies"))
    except (ValueError, RecursionError) as exc:
        raise FormatError(f"malformed rack JSON: {exc}", field="bookies") from None
    groups = _json_object(doc, "bookies")
    return {group: _rack_group(group, bookies) for group, bookies in groups.items()}


def _rack_group(group: str, bookies: object) -> dict[str, BookieRackInfo]:
    members = _json_object(bookies, group)
    return {bookie: _rack_info(f"{group}.{bookie}", info) for bookie, info in members.items()}


def _rack_info(where: str, info: object) -> BookieRackInfo:
    obj = _json_object(info, where)
    rack, hostname = obj.get("rack"), obj.get("hostname")
    if not isinstance(rack, (str, type(None))) or not isinstance(hostname, (str, type(None))):
        raise FormatError("rack and hostname must be strings", field=where)
    return BookieRackInfo(_normalise_rack(rack), hostname)


def _json_object(value: object, where: str) -> dict[str, object]:
    if not isinstance(value, dict):
        raise FormatError(f"expected a JSON object, got {type(value).__name__}", field=where)
    return value


def _normalise_rack(rack: str | None) -> str | None:
    """Pulsar's getRack: empty, or "/" once trimmed (its `" /"` default rack), means the default rack."""
    if not rack or rack.strip() == "/":
        return None
    return rack if rack.startswith("/") else "/" + rack


def encode_rack_config(config: Mapping[str, Mapping[str, BookieRackInfo]]) -> bytes:
    """Compact JSON, keys in insertion order, None fields omitted (Pulsar writes non-null fields only)."""
    doc = {group: {bookie: _rack_json(info) for bookie, info in bookies.items()}
           for group, bookies in config.items()}
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _rack_json(info: BookieRackInfo) -> dict[str, str]:
    out: dict[str, str] = {}
    if info.rack is not None:
        out["rack"] = info.rack
    if info.hostname is not None:
        out["hostname"] = info.hostname
    return out


def update_rack_entry(
    data: bytes, *, bookie_id: str, rack: str, hostname: str | None = None, group: str = "default"
) -> bytes | None:
    """`/bookies` with only `bookie_id`'s entry set to `rack` (and `hostname`); None when already so.

    Everything else survives as written: other entries' raw rack strings (Pulsar's `" /"` default rack, `"r1"`
    without its slash), unknown fields, member order and group order. A bookie already listed keeps its group
    (an operator may have filed it under another one); a new one joins `group`, and a new group is placed in
    sorted order, where Pulsar's `BookiesRackConfiguration` (a TreeMap) would put it. Malformed JSON raises
    FormatError: the document is never overwritten with a guess.
    """
    parse_rack_config(data)  # validates the whole document
    doc: dict[str, Any] = json.loads(_utf8(data, "bookies")) if data else {}
    home = next((g for g, members in doc.items() if bookie_id in members), None)
    entry: dict[str, Any] = dict(doc[home][bookie_id]) if home is not None else {}
    wanted = dict(entry, rack=rack, **({"hostname": hostname} if hostname is not None else {}))
    if home is not None and wanted == entry:
        return None
    if home is None:
        home = group
        if group not in doc:
            doc = _with_group(doc, group)
    doc[home] = {**doc[home], bookie_id: wanted}
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _with_group(doc: dict[str, Any], group: str) -> dict[str, Any]:
    """`doc` plus an empty `group`: in sorted place when the groups are sorted (as Pulsar writes them)."""
    if list(doc) != sorted(doc):
        return {**doc, group: {}}
    return dict(sorted([*doc.items(), (group, {})], key=lambda kv: kv[0]))
