"""BookKeeper's ZooKeeper records (bkaudit.formats.records) against BookKeeper's bytes.

Ground truth: /work/shared/vectors/zk_paths_and_texts.json, the spec's verified cookie / marker / ctime bytes,
hand-written protobuf wire encodings, and BookKeeper's documented merge and parse rules.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bkaudit.errors import FormatError
from bkaudit.formats import records as r
from bkaudit.formats.records import (
    BookieRackInfo,
    BookieServiceInfo,
    Cookie,
    Endpoint,
    LedgerLayout,
    UnderreplicatedMarker,
)
from tests import shared_vectors

TEXTS = shared_vectors.load("zk_paths_and_texts.json")["texts"]


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def lfield(field: int, payload: bytes) -> bytes:
    return varint(field << 3 | 2) + varint(len(payload)) + payload


# -- shared vectors ------------------------------------------------------------------------------------------


def test_underreplicated_marker_vector() -> None:
    marker = UnderreplicatedMarker(("192.0.2.1:3181", "192.0.2.2:3181"), 1700000000000)
    assert r.encode_underreplicated_marker(marker) == TEXTS["underreplicated"].encode()
    assert r.parse_underreplicated_marker(TEXTS["underreplicated"].encode()) == marker


def test_underreplication_layout_vector() -> None:
    assert r.encode_underreplication_layout() == TEXTS["underreplication_layout"].encode()
    assert r.parse_underreplication_layout(TEXTS["underreplication_layout"].encode()) == ("BASIC", 1)


def test_ledgers_layout_vector() -> None:
    data = TEXTS["ledgers_layout"].encode()
    assert r.encode_ledger_layout(r.DEFAULT_LEDGER_LAYOUT) == data
    assert r.parse_ledger_layout(data) == r.DEFAULT_LEDGER_LAYOUT
    assert r.layout_name(r.parse_ledger_layout(data)) == "hierarchical"


def test_check_ctime_vector() -> None:
    assert r.encode_check_ctime(1700000000000).hex() == TEXTS["checkallledgersctime_hex_for_1700000000000"]
    assert r.parse_check_ctime(bytes.fromhex("0880d095ffbc31")) == 1700000000000


# -- under-replicated marker --------------------------------------------------------------------------------


def test_marker_without_ctime() -> None:
    marker = UnderreplicatedMarker(("b:1",), None)
    assert r.encode_underreplicated_marker(marker) == b'replica: "b:1"\n'
    assert r.parse_underreplicated_marker(b'replica: "b:1"\n') == marker
    assert r.parse_underreplicated_marker(b"") == UnderreplicatedMarker((), None)


@pytest.mark.parametrize(
    "data", [b"replicas: \"a\"\n", b"replica: 1\n", b"ctime: \"x\"\n", b"\xff", b"replica: \"a"]
)
def test_marker_rejects_garbage(data: bytes) -> None:
    with pytest.raises(FormatError):
        r.parse_underreplicated_marker(data)


def test_merge_replicas_appends_only_new_ones_and_refreshes_ctime() -> None:
    marker = UnderreplicatedMarker(("a:1", "b:1"), 100)
    assert r.merge_replicas(marker, ["b:1", "c:1", "a:1", "d:1", "c:1"], 200) == UnderreplicatedMarker(
        ("a:1", "b:1", "c:1", "d:1"), 200)


def test_merge_replicas_nothing_new_is_none() -> None:
    marker = UnderreplicatedMarker(("a:1", "b:1"), 100)
    assert r.merge_replicas(marker, ["b:1", "a:1"], 200) is None
    assert r.merge_replicas(marker, [], 200) is None


def test_merge_replicas_without_clock_keeps_ctime() -> None:
    marker = UnderreplicatedMarker(("a:1",), 100)
    assert r.merge_replicas(marker, ["c:1"], None) == UnderreplicatedMarker(("a:1", "c:1"), 100)
    assert r.merge_replicas(UnderreplicatedMarker((), None), ["c:1"], None) == UnderreplicatedMarker(("c:1",))


# -- lock data and votes ------------------------------------------------------------------------------------


def test_lock_data() -> None:
    assert r.encode_lock_data("bk-host-1") == b'bookieId: "bk-host-1"\n'
    assert r.encode_lock_data(None) == b""
    assert r.parse_lock_data(b'bookieId: "bk-host-1"\n') == "bk-host-1"
    assert r.parse_lock_data(b"") is None


def test_auditor_vote() -> None:
    assert r.encode_auditor_vote("10.0.0.1:3181") == b'bookieId: "10.0.0.1:3181"\n'
    assert r.parse_auditor_vote(b'bookieId: "10.0.0.1:3181"\n') == "10.0.0.1:3181"
    with pytest.raises(FormatError) as err:
        r.parse_auditor_vote(b"")
    assert err.value.field == "AuditorVoteFormat.bookieId"


# -- cookie --------------------------------------------------------------------------------------------------

SPEC_COOKIE = (b'5\nbookieHost: "192.168.1.10:3181"\njournalDir: "/data/bk/journal"\n'
               b'ledgerDirs: "2\\t/data/bk/ledgers1\\t/data/bk/ledgers2"\ninstanceId: "2a6c3a2e-..."\n')


def test_cookie_spec_bytes() -> None:
    cookie = Cookie("192.168.1.10:3181", ("/data/bk/journal",), ("/data/bk/ledgers1", "/data/bk/ledgers2"),
                    "2a6c3a2e-...")
    assert r.encode_cookie(cookie) == SPEC_COOKIE
    assert r.parse_cookie(SPEC_COOKIE) == cookie


def test_cookie_non_ascii_host_is_octal_escaped() -> None:
    cookie = Cookie("hést:1", ("/j1", "/j2"), (), None, index_dirs=("/i",))
    data = r.encode_cookie(cookie)
    assert data == (b'5\nbookieHost: "h\\303\\251st:1"\njournalDir: "/j1,/j2"\nledgerDirs: "0"\n'
                    b'indexDirs: "1\\t/i"\n')
    assert r.parse_cookie(data) == cookie


def test_cookie_layout_4_reads_and_is_rewritten_as_5() -> None:
    data = SPEC_COOKIE.replace(b"5\n", b" 4 \r\n", 1)
    cookie = r.parse_cookie(data)
    assert cookie.layout_version == 4 and cookie.bookie_host == "192.168.1.10:3181"
    assert r.encode_cookie(cookie) == SPEC_COOKIE


def test_cookie_empty_instance_id_is_none() -> None:
    data = SPEC_COOKIE.replace(b'"2a6c3a2e-..."', b'""')
    assert r.parse_cookie(data).instance_id is None


def test_cookie_legacy_layout_3() -> None:
    data = b"3\n10.0.0.1:3181\n/j1,/j2\n2\t/l1\t/l2\n"
    cookie = r.parse_cookie(data)
    assert cookie == Cookie("10.0.0.1:3181", ("/j1", "/j2"), ("/l1", "/l2"), None, None, 3)
    assert r.encode_cookie(cookie) == data


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (b"", "layoutVersion"),
        (b"x\n", "layoutVersion"),
        (b"9" * 5000 + b"\n", "layoutVersion"),
        (b"2\nh\nj\n0\n", "layoutVersion"),
        (b"3\nh\nj\n", "cookie"),
        (b'5\nbookieHost: "h"\njournalDir: "j"\n', "CookieFormat.ledgerDirs"),
        (b'5\nbookieHost: "h"\njournalDir: "j"\nledgerDirs: "2\\t/a"\n', "ledgerDirs"),
        (b'5\nbookieHost: "h"\njournalDir: "j"\nledgerDirs: "x\\t/a"\n', "ledgerDirs"),
        (b'5\nbookieHost: "h"\njournalDir: "j"\nledgerDirs: "0"\nindexDirs: "1"\n', "indexDirs"),
        (b'5\nbookieHost: "\xff"\n', "cookie"),
        (b'5\nbookieHost: "h" bogus: 1\n', "bogus"),
    ],
)
def test_cookie_rejects(data: bytes, field: str) -> None:
    with pytest.raises(FormatError) as err:
        r.parse_cookie(data)
    assert err.value.field == field


def test_cookie_encode_refuses_unknown_layout() -> None:
    with pytest.raises(ValueError):
        r.encode_cookie(Cookie("h:1", (), (), None, layout_version=2))


# -- ledgers LAYOUT ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("factory", "name"),
    [
        ("org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory", "hierarchical"),
        ("org.apache.bookkeeper.meta.LongHierarchicalLedgerManagerFactory", "longhierarchical"),
        ("org.apache.bookkeeper.meta.LegacyHierarchicalLedgerManagerFactory", "legacyhierarchical"),
        ("org.apache.bookkeeper.meta.FlatLedgerManagerFactory", "flat"),
        ("flat", "flat"),
        ("hierarchical", "hierarchical"),
    ],
)
def test_layout_names(factory: str, name: str) -> None:
    assert r.layout_name(LedgerLayout(factory, 1)) == name


def test_layout_v1_stores_a_type_name() -> None:
    layout = r.parse_ledger_layout(b"1\nflat:1")
    assert layout == LedgerLayout("flat", 1, 1)
    assert r.layout_name(layout) == "flat"
    assert r.encode_ledger_layout(layout) == b"1\nflat:1"


def test_layout_trailing_lines_ignored_like_java_split() -> None:
    assert r.parse_ledger_layout(b"2\norg.x.FlatLedgerManagerFactory:1\n\n") == LedgerLayout(
        "org.x.FlatLedgerManagerFactory", 1, 2)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (b"3\nflat:1", "layoutFormatVersion"),
        (b"0\nflat:1", "layoutFormatVersion"),
        (b"two\nflat:1", "layoutFormatVersion"),
        (b"2", "managerFactoryClass"),
        (b"2\nflat", "managerFactoryClass"),
        (b"2\nflat:", "managerFactoryClass"),
        (b"2\na:b:c", "managerFactoryClass"),
        (b"2\nflat:one", "managerVersion"),
        (b"2\nflat:" + b"9" * 5000, "managerVersion"),
        (b"9" * 5000, "layoutFormatVersion"),
        (b"\xff", "LAYOUT"),
    ],
)
def test_layout_rejects(data: bytes, field: str) -> None:
    with pytest.raises(FormatError) as err:
        r.parse_ledger_layout(data)
    assert err.value.field == field


def test_layout_name_rejects_unknown_manager() -> None:
    with pytest.raises(FormatError):
        r.layout_name(LedgerLayout("org.apache.bookkeeper.meta.MSLedgerManagerFactory", 1))


# -- under-replication LAYOUT and ctimes ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "data", [b'type: "BASIC"\nversion: 2\n', b'type: "FANCY"\nversion: 1\n', b"version: 1\n", b"x"]
)
def test_underreplication_layout_mismatch(data: bytes) -> None:
    with pytest.raises(FormatError):
        r.parse_underreplication_layout(data)


def test_check_ctime_missing_reads_minus_one() -> None:
    assert r.parse_check_ctime(b"") == -1
    assert r.parse_check_ctime(b"\x10\x05") == -1  # only an unknown field
    assert r.parse_check_ctime(r.encode_check_ctime(-7)) == -7
    with pytest.raises(FormatError):
        r.parse_check_ctime(b"\x08")


# -- bookie service info -------------------------------------------------------------------------------------


def reference_service_info(info: BookieServiceInfo) -> bytes:
    out = b""
    for e in info.endpoints:
        body = lfield(1, e.id.encode()) + varint(2 << 3) + varint(e.port) + lfield(3, e.host.encode())
        body += lfield(4, e.protocol.encode())
        body += b"".join(lfield(5, a.encode()) for a in e.auth)
        body += b"".join(lfield(6, x.encode()) for x in e.extensions)
        out += lfield(6, body)
    for key, value in info.properties:
        out += lfield(7, lfield(1, key.encode()) + lfield(2, value.encode()))
    return out


def test_bookie_service_info_default_endpoint_bytes() -> None:
    properties = {"z": "1", "a": "", "m": "é"}
    info = r.bookie_service_info_for("10.0.0.1:3181", "10.0.0.1", 3181, properties=properties)
    assert info.endpoints == (Endpoint("bookie", 3181, "10.0.0.1", "bookie-rpc"),)
    data = r.encode_bookie_service_info(info)
    assert data == reference_service_info(info)
    assert data.startswith(b"2!\n\x06bookie\x10\xed\x18\x1a\x0810.0.0.1\"\nbookie-rpc")
    parsed = r.parse_bookie_service_info(data, "10.0.0.1:3181")
    assert parsed == info
    assert [k for k, _ in parsed.properties] == ["z", "a", "m"]


def test_bookie_service_info_extra_endpoints() -> None:
    http = Endpoint("http", 8080, "h", "http", auth=("tls",), extensions=("x", "y"))
    info = r.bookie_service_info_for("h:3181", "h", 3181, extra_endpoints=[http])
    data = r.encode_bookie_service_info(info)
    assert data == reference_service_info(info)
    parsed = r.parse_bookie_service_info(data, "h:3181")
    assert parsed.endpoint("http") == http
    assert parsed.endpoint() == info.endpoints[0]
    assert parsed.endpoint("grpc") is None


def test_bookie_service_info_legacy_empty_data() -> None:
    info = r.parse_bookie_service_info(b"", "10.0.0.7:3181")
    # BookieServiceInfoUtils.buildLegacyBookieServiceInfo: the endpoint id is the bookie id itself
    assert info == BookieServiceInfo((Endpoint("10.0.0.7:3181", 3181, "10.0.0.7", "bookie-rpc"),))
    with pytest.raises(FormatError):
        r.parse_bookie_service_info(b"", "custom-bookie-id")
    with pytest.raises(FormatError):
        r.parse_bookie_service_info(b"", "host:port")


def test_bookie_service_info_duplicate_property_keeps_first_position_last_value() -> None:
    data = lfield(7, lfield(1, b"k") + lfield(2, b"1")) + lfield(7, lfield(1, b"j") + lfield(2, b"2"))
    data += lfield(7, lfield(1, b"k") + lfield(2, b"3"))
    assert r.parse_bookie_service_info(data, "x").properties == (("k", "3"), ("j", "2"))


@pytest.mark.parametrize(
    "data",
    [
        lfield(6, lfield(1, b"bookie")),  # endpoint without its required port
        lfield(6, lfield(1, b"\xff") + b"\x10\x01"),  # invalid UTF-8 id
        lfield(7, lfield(1, b"k") + lfield(2, b"\xfe")),  # invalid UTF-8 property
        b"\x32\x05ab",  # truncated
    ],
)
def test_bookie_service_info_rejects(data: bytes) -> None:
    with pytest.raises(FormatError):
        r.parse_bookie_service_info(data, "h:1")


@pytest.mark.parametrize("bookie_id", ["", "readonly", "a b", "h\u00e9:1", "x/y"])
def test_bookie_service_info_for_rejects_invalid_bookie_ids(bookie_id: str) -> None:
    with pytest.raises(ValueError):
        r.bookie_service_info_for(bookie_id, "h", 1)


def test_bookie_service_info_for_accepts_bookkeeper_id_characters() -> None:
    # BookKeeper's pattern [a-zA-Z0-9:-_.\-]+ has the range ':'..'_' (includes @, [, ], ^ and upper case)
    r.bookie_service_info_for("Bookie-1.example_com:3181", "h", 1)
    r.bookie_service_info_for("a@b[c]^d", "h", 1)


# -- Pulsar racks --------------------------------------------------------------------------------------------


def test_rack_config_spec_example() -> None:
    data = b'{"default": {"bk1:3181": {"rack": "/rack1", "hostname": "bk1.example.com"}}}'
    assert r.parse_rack_config(data) == {"default": {"bk1:3181": BookieRackInfo("/rack1", "bk1.example.com")}}


def test_rack_config_normalises_racks() -> None:
    data = json.dumps({"g": {"a:1": {"rack": "r1"}, "b:1": {"rack": "/"}, "c:1": {"rack": ""}, "d:1": {},
                             "e:1": {"rack": None, "hostname": None, "extra": [1]}}}).encode()
    assert r.parse_rack_config(data) == {"g": {
        "a:1": BookieRackInfo("/r1"), "b:1": BookieRackInfo(None), "c:1": BookieRackInfo(None),
        "d:1": BookieRackInfo(None), "e:1": BookieRackInfo(None)}}
    assert r.parse_rack_config(b"") == {}


def test_rack_config_encode_is_compact_and_ordered() -> None:
    config = {"z": {"b:1": BookieRackInfo("/r2", "hé")}, "a": {"a:1": BookieRackInfo(None, "h")}}
    data = r.encode_rack_config(config)
    assert data == '{"z":{"b:1":{"rack":"/r2","hostname":"hé"}},"a":{"a:1":{"hostname":"h"}}}'.encode()
    assert r.parse_rack_config(data) == config


@pytest.mark.parametrize(
    "data",
    [b"{", b"[]", b'{"g": []}', b'{"g": {"a:1": "r"}}', b'{"g": {"a:1": {"rack": 5}}}', b"\xff", b"[" * 5000,
     b'{"g": {}} x'],
)
def test_rack_config_rejects(data: bytes) -> None:
    with pytest.raises(FormatError):
        r.parse_rack_config(data)


# -- properties ----------------------------------------------------------------------------------------------

TEXT = st.text(max_size=12)
DIRS = st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\t,"),
                        min_size=1, max_size=8),
                max_size=3).map(tuple)


@given(st.lists(TEXT, max_size=4).map(tuple), st.none() | st.integers(-(2**63), 2**63 - 1))
def test_marker_round_trip(replicas: tuple[str, ...], ctime: int | None) -> None:
    marker = UnderreplicatedMarker(replicas, ctime)
    assert r.parse_underreplicated_marker(r.encode_underreplicated_marker(marker)) == marker


@given(TEXT, DIRS, DIRS, st.none() | TEXT.filter(bool), st.none() | DIRS)
def test_cookie_round_trip(host: str, journal: tuple[str, ...], ledgers: tuple[str, ...],
                           instance: str | None, index: tuple[str, ...] | None) -> None:
    cookie = Cookie(host, journal, ledgers, instance, index)
    assert r.parse_cookie(r.encode_cookie(cookie)) == cookie


@given(st.none() | TEXT, TEXT)
def test_lock_and_vote_round_trip(holder: str | None, voter: str) -> None:
    assert r.parse_lock_data(r.encode_lock_data(holder)) == holder
    assert r.parse_auditor_vote(r.encode_auditor_vote(voter)) == voter


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters=":\n"), min_size=1),
       st.integers(-(2**31), 2**31 - 1), st.integers(1, 2))
def test_ledger_layout_round_trip(factory: str, manager_version: int, layout_version: int) -> None:
    layout = LedgerLayout(factory, manager_version, layout_version)
    assert r.parse_ledger_layout(r.encode_ledger_layout(layout)) == layout


@given(st.integers(-(2**63), 2**63 - 1))
def test_check_ctime_round_trip(ms: int) -> None:
    assert r.parse_check_ctime(r.encode_check_ctime(ms)) == ms


ENDPOINTS = st.builds(Endpoint, TEXT, st.integers(-(2**31), 2**31 - 1), TEXT, TEXT,
                      st.lists(TEXT, max_size=2).map(tuple), st.lists(TEXT, max_size=2).map(tuple))


@given(st.lists(ENDPOINTS, max_size=3).map(tuple), st.dictionaries(TEXT, TEXT, max_size=4))
def test_bookie_service_info_round_trip(endpoints: tuple[Endpoint, ...], properties: dict[str, str]) -> None:
    info = BookieServiceInfo(endpoints, tuple(properties.items()))
    data = r.encode_bookie_service_info(info)
    assert data == reference_service_info(info)
    if data:
        assert r.parse_bookie_service_info(data, "h:1") == info
    else:  # nothing to write: BookKeeper reads empty data as a legacy registration
        assert r.parse_bookie_service_info(data, "h:1").endpoints[0].id == "h:1"


RACKS = st.builds(BookieRackInfo, st.none() | TEXT.map(lambda t: "/" + t if t.strip("/") else None).filter(
    lambda t: t is None or t.strip() != "/"), st.none() | TEXT)  # " /" is Pulsar's default rack


@given(st.dictionaries(TEXT, st.dictionaries(TEXT, RACKS, max_size=3), max_size=3))
def test_rack_config_round_trip(config: dict[str, dict[str, BookieRackInfo]]) -> None:
    assert r.parse_rack_config(r.encode_rack_config(config)) == config


# -- set_rack's edit of Pulsar's /bookies: only the bookie's own entry changes ---------------------------
PULSAR_DOC = (
    b'{"analytics":{"10.0.0.9:3181":{"rack":"r9","hostname":"bk9.example.com"}},'
    b'"default":{"10.0.0.1:3181":{"rack":" /"},"10.0.0.2:3181":{"rack":"/region-a/r2","hostname":"bk2"},'
    b'"10.0.0.3:3181":{"rack":"r3"}}}'
)


def test_rack_update_changes_only_its_entry_on_a_pulsar_document() -> None:
    out = r.update_rack_entry(PULSAR_DOC, bookie_id="10.0.0.3:3181", rack="/r7", hostname="bk3")
    assert out is not None
    before, after = json.loads(PULSAR_DOC), json.loads(out)
    assert list(after) == ["analytics", "default"]  # Pulsar's (sorted TreeMap) group order kept
    assert list(after["default"]) == list(before["default"])
    assert after["default"]["10.0.0.3:3181"] == {"rack": "/r7", "hostname": "bk3"}
    after["default"]["10.0.0.3:3181"] = before["default"]["10.0.0.3:3181"]
    assert after == before  # " /" (Pulsar's default rack), raw "r9"/"r3" and every hostname untouched


def test_rack_update_adds_a_new_bookie_and_group_in_pulsar_order() -> None:
    out = r.update_rack_entry(PULSAR_DOC, bookie_id="10.0.0.4:3181", rack="/r4", group="batch")
    after = json.loads(out or b"")
    assert list(after) == ["analytics", "batch", "default"]  # where Pulsar's TreeMap puts it
    assert after["batch"] == {"10.0.0.4:3181": {"rack": "/r4"}}
    assert after["default"] == json.loads(PULSAR_DOC)["default"]


def test_rack_update_keeps_a_bookie_in_its_own_group_and_is_a_no_op_when_unchanged() -> None:
    out = r.update_rack_entry(PULSAR_DOC, bookie_id="10.0.0.9:3181", rack="/r1")
    after = json.loads(out or b"")
    assert after["analytics"]["10.0.0.9:3181"] == {"rack": "/r1", "hostname": "bk9.example.com"}
    assert "10.0.0.9:3181" not in after["default"]
    assert r.update_rack_entry(out or b"", bookie_id="10.0.0.9:3181", rack="/r1") is None
    assert r.update_rack_entry(b"", bookie_id="a:1", rack="/r") == b'{"default":{"a:1":{"rack":"/r"}}}'


def test_rack_update_refuses_a_malformed_document() -> None:
    with pytest.raises(FormatError):
        r.update_rack_entry(b'{"default": [1]}', bookie_id="a:1", rack="/r")


def test_pulsar_default_rack_with_spaces_reads_as_the_default() -> None:
    """Pulsar's getRack trims before comparing with "/": " /" is the default rack, not "/ /"."""
    doc = r.parse_rack_config(b'{"default":{"a:1":{"rack":" /"},"b:1":{"rack":"r1"}}}')["default"]
    assert doc["a:1"].rack is None and doc["b:1"].rack == "/r1"


@pytest.mark.parametrize("missing", ["host", "protocol"])
def test_bookie_service_info_endpoint_without_host_or_protocol_is_a_format_error(missing: str) -> None:
    """DataFormats.proto: Endpoint.host and .protocol are `required`; BookKeeper rejects the record."""
    body = lfield(1, b"bookie") + varint(2 << 3) + varint(3181)
    body += b"" if missing == "host" else lfield(3, b"10.0.0.1")
    body += b"" if missing == "protocol" else lfield(4, b"bookie-rpc")
    with pytest.raises(FormatError, match=missing):
        r.parse_bookie_service_info(lfield(6, body), "10.0.0.1:3181")
