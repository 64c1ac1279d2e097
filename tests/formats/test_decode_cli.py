"""`bkaudit decode metadata|availability` (bkaudit.formats.commands), in-process and as a real subprocess.

Ground truth: the shared vectors (metadata fields, availability encodings) and brute-force set arithmetic for
missing entries.
"""

from __future__ import annotations

import base64
import json
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from bkaudit.cli import cli
from bkaudit.formats import ledger_metadata
from bkaudit.model.ledger import DigestType, FrozenMap, LedgerMetadata, LedgerState, Segment
from tests import shared_vectors

VECTORS = shared_vectors.VECTORS_DIR
MD_VECTORS = json.loads((VECTORS / "ledger_metadata.json").read_text())["vectors"]
AVAILABILITY = json.loads((VECTORS / "availability.json").read_text())
BKAUDIT = Path(sys.executable).parent / "bkaudit"


def run(*args: str, input: bytes | None = None) -> Result:
    return CliRunner().invoke(cli, ["decode", *args], input=input)


def assert_one_line_error(result: Result, needle: str) -> None:
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], result.stderr
    assert "Traceback" not in result.output


def vector_bytes(vector: dict[str, Any]) -> bytes:
    if "base64" in vector:
        return base64.b64decode(vector["base64"])
    if "hex" in vector:
        return bytes.fromhex(vector["hex"])
    return str(vector["text"]).encode()


# -- metadata ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("vector", MD_VECTORS, ids=[v["name"] for v in MD_VECTORS])
def test_metadata_vectors(vector: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "znode"
    path.write_bytes(vector_bytes(vector))
    result = run("metadata", str(path), "--show-password")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    for key, value in vector["expect"].items():
        if key == "password":
            assert base64.b64decode(out["password"]["base64"]) == value.encode()
            assert out["password"]["printable"] == value
        elif key == "segments":
            assert [[s["first_entry_id"], s["ensemble"]] for s in out["segments"]] == value
        else:
            assert out[key] == value, key
    assert out["format_version"] == ledger_metadata.format_version(vector_bytes(vector))


def test_metadata_from_stdin_with_derived_segment_ends_and_binary_values() -> None:
    md = LedgerMetadata(
        ensemble_size=2, write_quorum=2, ack_quorum=1, state=LedgerState.CLOSED, last_entry_id=25, length=999,
        digest_type=DigestType.MAC, password=b"\x00p\n",
        segments=(Segment(0, ("a:1", "b:1")), Segment(10, ("a:1", "c:1")), Segment(20, ("d:1", "c:1"))),
        ctime=1700000000000, custom_metadata=FrozenMap((("app", "pulsar é".encode()), ("bin", b"\xff\x00"))),
        ctoken=5,
    )
    for version in (3, 2):
        result = run("metadata", "--show-password", input=ledger_metadata.serialize(md, version))
        assert result.exit_code == 0, result.output
        out = json.loads(result.stdout)
        ends = [(s["first_entry_id"], s["last_entry_id"]) for s in out["segments"]]
        assert ends == [(0, 9), (10, 19), (20, 25)]
        assert out["digest_type"] == "MAC" and out["state"] == "CLOSED" and out["length"] == 999
        assert out["password"] == {"length": 3, "base64": "AHAK", "printable": "\\000p\\n"}
        assert out["custom_metadata"] == {"app": "pulsar é", "bin": {"base64": "/wA="}}
        assert out["ctime"] == 1700000000000
        assert out["ctoken"] == (5 if version == 3 else 0)
    result = run("metadata", "-", input=ledger_metadata.serialize(md.evolve(state=LedgerState.OPEN,
                                                                            last_entry_id=-1, length=0)))
    assert json.loads(result.stdout)["segments"][-1]["last_entry_id"] is None
    assert json.loads(result.stdout)["password"] == {"length": 3}  # not shown unless asked for
    assert "AHAK" not in result.stdout


def test_metadata_bad_inputs(tmp_path: Path) -> None:
    assert_one_line_error(run("metadata", input=b"not metadata\n"), "field header")
    assert_one_line_error(run("metadata", input=b"BookieMetadataFormatVersion\t3\n\x05\x08"), "field length")
    assert_one_line_error(run("metadata", str(tmp_path / "missing")), "cannot read")
    assert_one_line_error(run("metadata", str(tmp_path)), "cannot read")


# -- availability ------------------------------------------------------------------------------------------


def encode_groups(groups: list[list[int]]) -> bytes:
    header = struct.pack(">ii56x", 0, len(groups))
    return header + b"".join(struct.pack(">qqii", *g) for g in groups)


def runs_of(ids: list[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for i in sorted(set(ids) - {-1}):
        if out and out[-1][1] + 1 == i:
            out[-1][1] = i
        else:
            out.append([i, i])
    return out


@pytest.mark.parametrize("case", AVAILABILITY["encode"], ids=lambda c: str(c["entries"])[:40])
def test_availability_encode_vectors(case: dict[str, Any]) -> None:
    result = run("availability", case["hex"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["total"] == len(set(case["entries"]) - {-1})
    assert out["runs"] == runs_of(case["entries"])
    assert len(out["groups"]) == int(case["hex"][8:16], 16)


@pytest.mark.parametrize("case", AVAILABILITY["decode"], ids=lambda c: str(c["groups"])[:40])
def test_availability_period_groups(case: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "answer.bin"
    path.write_bytes(encode_groups(case["groups"]))
    out = json.loads(run("availability", str(path)).stdout)
    assert out["total"] == case["total"]
    assert out["runs"] == runs_of(case["available"])
    assert [[g["first_sequence_start"], g["last_sequence_start"], g["sequence_size"], g["sequence_period"]]
            for g in out["groups"]] == case["groups"]


def test_availability_stdin_and_hex_spellings() -> None:
    data = encode_groups([[3, 3, 4, 0]])
    for args, stdin in [(["-"], data), ([data.hex()], None), (["0x" + data.hex().upper()], None),
                        ([" ".join(data.hex()[i:i + 8] for i in range(0, len(data.hex()), 8))], None)]:
        result = run("availability", *args, input=stdin)
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["runs"] == [[3, 6]]


def test_availability_expected_striping_matches_brute_force() -> None:
    case = max(AVAILABILITY["encode"], key=lambda c: len(c["entries"]))  # BookKeeper's unit-test array
    data, ids = bytes.fromhex(case["hex"]), case["entries"]
    first, last, e, wq, index = 0, 40, 5, 3, 2
    must = [x for x in range(first, last + 1) if (index - x) % e < wq]
    missing = sorted(set(must) - set(ids))
    out = json.loads(run("availability", data.hex(), "--expected", f"{first}:{last}:{e}:{wq}:{index}").stdout)
    assert out["missing_count"] == len(missing)
    assert out["missing"] == runs_of(missing)
    assert out["expected"] == {"first": 0, "last": 40, "ensemble_size": 5, "write_quorum": 3,
                               "bookie_index": 2}
    whole = json.loads(run("availability", data.hex(), "--expected", "0:40").stdout)
    assert whole["missing"] == runs_of(sorted(set(range(41)) - set(ids)))


def test_availability_caps_listed_runs() -> None:
    data = encode_groups([[0, 4_000_000, 1, 2]])  # every even id: two million runs
    out = json.loads(run("availability", data.hex(), "--expected", "0:5000").stdout)
    assert out["total"] == 2_000_001
    assert len(out["runs"]) == 1000 and out["runs_truncated"] is True
    assert len(out["missing"]) == 1000 and out["missing_truncated"] is True and out["missing_count"] == 2500


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["zz-not-hex"], "neither hex nor an existing file"),
        (["00"], "not a valid GetListOfEntriesOfLedger answer"),
        ([encode_groups([[1, 5, 1, 0]]).hex()], "period"),
        ([encode_groups([]).hex(), "--expected", "1:x"], "--expected"),
        ([encode_groups([]).hex(), "--expected", "1:2:3"], "--expected"),
        ([encode_groups([]).hex(), "--expected", "0:9:3:2:7"], "bookie index 7"),
        ([encode_groups([]).hex(), "--expected", "-5:2"], "non-negative"),
    ],
)
def test_availability_bad_inputs(args: list[str], needle: str) -> None:
    assert_one_line_error(run("availability", *args), needle)


# -- the installed command ---------------------------------------------------------------------------------


def test_installed_command_in_a_subprocess(tmp_path: Path) -> None:
    path = tmp_path / "znode"
    path.write_bytes(vector_bytes(MD_VECTORS[0]))
    done = subprocess.run([str(BKAUDIT), "decode", "metadata", str(path)], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["ack_quorum"] == 1
    bad = subprocess.run([str(BKAUDIT), "decode", "availability", "-"], input=b"\x00" * 10,
                         capture_output=True, timeout=60)
    assert bad.returncode == 1
    assert bad.stderr.decode().startswith("error: ") and b"Traceback" not in bad.stderr
    assert bad.stdout == b""
