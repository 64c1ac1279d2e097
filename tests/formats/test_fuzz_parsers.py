"""Every parser in bkaudit.formats, fed random and mutated bytes, either decodes or raises FormatError.

A snapshot over a real cluster reads whatever is in ZooKeeper and on the bookies; one corrupt znode or
response must become a row with a reason, never an IndexError / UnicodeDecodeError / DecodeError that kills a
task.
Mutations start from valid encodings (every shared vector plus our own encodings) so they reach deep into
each decoder: bit flips, truncations, insertions, deletions, duplicated slices and interesting bytes.
Deterministic (seeded per parser) and bounded: a few thousand cases in a few seconds.
"""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Callable
from typing import Any

import pytest

from bkaudit.errors import FormatError
from bkaudit.formats import ledger_metadata, records
from bkaudit.model.ledger import DigestType, FrozenMap, LedgerMetadata, LedgerState, Segment
from tests import shared_vectors

VECTORS = shared_vectors.VECTORS_DIR
CASES_PER_PARSER = 1000
INTERESTING = [0x00, 0x01, 0x02, 0x08, 0x0A, 0x0D, 0x22, 0x27, 0x2D, 0x3A, 0x5C, 0x7B, 0x7D, 0x7F, 0x80, 0xC3,
               0xFF]


def _metadata_seeds() -> list[bytes]:
    doc = json.loads((VECTORS / "ledger_metadata.json").read_text())["vectors"]
    seeds = []
    for v in doc:
        if "base64" in v:
            seeds.append(base64.b64decode(v["base64"]))
        elif "hex" in v:
            seeds.append(bytes.fromhex(v["hex"]))
        else:
            seeds.append(v["text"].encode())
    md = LedgerMetadata(
        ensemble_size=3, write_quorum=3, ack_quorum=2, state=LedgerState.CLOSED, last_entry_id=1000,
        length=9999, digest_type=DigestType.MAC, password=b"\x00pw\xff",
        segments=(Segment(0, ("a:1", "b:1", "c:1")), Segment(500, ("a:1", "d:1", "c:1"))),
        ctime=1700000000000, custom_metadata=FrozenMap((("app", b"pulsar"), ("bin", b"\x00\xff"))), ctoken=7,
    )
    return seeds + [ledger_metadata.serialize(md, version) for version in (1, 2, 3)]


def _record_seeds() -> list[bytes]:
    texts = json.loads((VECTORS / "zk_paths_and_texts.json").read_text())["texts"]
    info = records.bookie_service_info_for(
        "10.0.0.1:3181", "10.0.0.1", 3181,
        extra_endpoints=[records.Endpoint("http", 8080, "h", "http", ("a",), ("tls",))],
        properties={"k": "v"},
    )
    cookie = records.Cookie("hést:3181", ("/j",), ("/l1", "/l2"), "uuid", ("/i",))
    return [
        texts["underreplicated"].encode(),
        texts["underreplication_layout"].encode(),
        texts["ledgers_layout"].encode(),
        bytes.fromhex(texts["checkallledgersctime_hex_for_1700000000000"]),
        records.encode_lock_data("host"),
        records.encode_auditor_vote("10.0.0.1:3181"),
        records.encode_cookie(cookie),
        b"3\nh:1\n/j\n1\t/l\n",
        records.encode_bookie_service_info(info),
        b'{"default": {"bk1:3181": {"rack": "/rack1", "hostname": "bk1.example.com"}}}',
        # every escape form and the tolerant syntax, so mutations exercise the TextFormat tokenizer
        b'# c\nreplica: "\\x41\\101\\u00e9\\U0001F600\\ud83d\\ude00\\a\\?" \'x\' ; ctime: -0x1F,\n',
        b'bookieHost: "h" journalDir: [\'j\'] ledgerDirs: "0" instanceId { } indexDirs < >',
    ]


def _availability_seeds() -> list[bytes]:
    doc = json.loads((VECTORS / "availability.json").read_text())
    return [bytes.fromhex(e["hex"]) for e in doc["encode"]]


def _entry_seeds() -> list[bytes]:
    entry = pytest.importorskip("bkaudit.formats.entry")
    seeds = []
    for digest in DigestType:
        manager = entry.DigestManager(1, b"pwd", digest)
        seeds += [manager.package(0, -1, 5, b"hello"), manager.package_lac(4)]
    return seeds


def _parsers() -> dict[str, Callable[[bytes], Any]]:
    """Name -> parser; entry/availability are imported lazily so a missing module skips only its cases."""
    parsers: dict[str, Callable[[bytes], Any]] = {
        "ledger_metadata.parse": ledger_metadata.parse,
        "ledger_metadata.format_version": ledger_metadata.format_version,
        "records.parse_underreplicated_marker": records.parse_underreplicated_marker,
        "records.parse_lock_data": records.parse_lock_data,
        "records.parse_auditor_vote": records.parse_auditor_vote,
        "records.parse_cookie": records.parse_cookie,
        "records.parse_ledger_layout": records.parse_ledger_layout,
        "records.parse_underreplication_layout": records.parse_underreplication_layout,
        "records.parse_check_ctime": records.parse_check_ctime,
        "records.parse_bookie_service_info": lambda data: records.parse_bookie_service_info(data, "h:3181"),
        "records.parse_rack_config": records.parse_rack_config,
    }
    for name in ("availability.decode", "entry.parse_entry_header", "entry.verify", "entry.verify_lac"):
        parsers[name] = lambda data, name=name: _lazy(name, data)
    return parsers


def _lazy(name: str, data: bytes) -> Any:
    if name == "availability.decode":
        return pytest.importorskip("bkaudit.formats.availability").decode(data)
    entry = pytest.importorskip("bkaudit.formats.entry")
    if name == "entry.parse_entry_header":
        return entry.parse_entry_header(data)
    results = []
    for digest in DigestType:
        manager = entry.DigestManager(1, b"pwd", digest)
        if name == "entry.verify":
            results.append(manager.verify(data, 0))
        else:
            results.append(manager.verify_lac(data))
    return results


def _seeds_for(name: str) -> list[bytes]:
    if name.startswith("ledger_metadata"):
        own = _metadata_seeds()
    elif name.startswith("records"):
        own = _record_seeds()
    elif name.startswith("availability"):
        own = _availability_seeds()
    else:
        own = _entry_seeds()
    return own * 3 + _metadata_seeds() + _record_seeds()  # mostly its own formats, some foreign ones


def mutate(rng: random.Random, data: bytes) -> bytes:
    """One to three random edits of `data`."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(8)
        pos = rng.randint(0, len(buf))
        if op == 0 and buf:
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            del buf[pos:]
        elif op == 2:
            buf[pos:pos] = rng.randbytes(rng.randint(1, 8))
        elif op == 3:
            del buf[pos : pos + rng.randint(1, 8)]
        elif op == 4 and buf:
            start = rng.randrange(len(buf))
            buf[pos:pos] = buf[start : start + rng.randint(1, 16)]
        elif op == 5 and buf:
            buf[rng.randrange(len(buf))] = rng.choice(INTERESTING)
        elif op == 6:
            buf[pos:pos] = bytes([rng.choice(INTERESTING)])
        elif op == 7:  # long runs: huge numbers, deep nesting, long strings
            buf[pos:pos] = bytes([rng.choice(b"9{<[\"0f")]) * rng.choice((64, 5000))
    return bytes(buf)


def cases(name: str) -> list[bytes]:
    rng = random.Random(name)
    seeds = _seeds_for(name)
    out = list(seeds)
    while len(out) < CASES_PER_PARSER:
        if rng.random() < 0.2:
            out.append(rng.randbytes(rng.randint(0, 120)))
        else:
            out.append(mutate(rng, rng.choice(seeds)))
    return out


@pytest.mark.parametrize("name", sorted(_parsers()))
def test_parser_raises_only_format_error(name: str) -> None:
    parser = _parsers()[name]
    decoded = rejected = 0
    for data in cases(name):
        try:
            parser(data)
            decoded += 1
        except FormatError:
            rejected += 1
        except pytest.skip.Exception:
            raise
        except Exception as exc:  # any other exception is a bug in the parser
            pytest.fail(f"{name} raised {type(exc).__name__}: {exc} on input {data!r}")
    assert decoded + rejected >= CASES_PER_PARSER
    assert rejected > 0  # the corpus does reach the error paths


def test_mutations_are_deterministic_and_varied() -> None:
    first, second = cases("ledger_metadata.parse"), cases("ledger_metadata.parse")
    assert first == second
    assert len(set(first)) > CASES_PER_PARSER * 0.9
