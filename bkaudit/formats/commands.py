"""`bkaudit decode`: turn raw BookKeeper bytes (a znode, a GetListOfEntriesOfLedger answer) into JSON.

For forensics on one ledger: `zkCli get` or `bkaudit zk get` a metadata znode into a file and decode it, or
paste the hex of a bookie's availability answer. Pure: reads a file or stdin, never ZooKeeper or a bookie.
Bad input exits with status 1 and one `error: ...` line naming what is wrong, never a traceback.
"""

from __future__ import annotations

import base64
import functools
import json
import sys
from collections.abc import Callable
from itertools import islice
from pathlib import Path
from typing import Any, TypeVar

import click

from bkaudit.errors import BkAuditError, FormatError
from bkaudit.formats import ledger_metadata
from bkaudit.formats.textformat import escape_bytes
from bkaudit.model.ledger import LedgerMetadata

MAX_LISTED = 1000
"""At most this many runs / missing ranges are printed (a ledger can have millions)."""

F = TypeVar("F", bound=Callable[..., Any])


def _fail(message: str) -> None:
    click.echo("error: " + " ".join(message.split()), err=True)
    sys.exit(1)


def _reporting_errors(what: str) -> Callable[[F], F]:
    """Turn every failure into one `error:` line and exit status 1 (operators pipe this into scripts)."""

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return func(*args, **kwargs)
            except FormatError as exc:
                _fail(f"not a valid {what}: {exc}")
            except OSError as exc:
                _fail(f"cannot read {exc.filename or 'input'}: {exc.strerror or exc}")
            except (BkAuditError, ValueError) as exc:
                _fail(str(exc))
            except Exception as exc:  # never a traceback for bad input, even from an unexpected decoder bug
                _fail(f"cannot decode {what}: {type(exc).__name__}: {exc}")
            return None

        return wrapper  # type: ignore[return-value]

    return decorate


@click.group("decode")
def decode() -> None:
    """Decode BookKeeper binary / text records into JSON (offline, no cluster needed)."""


# ------------------------------------------------------------------------------------------------------------
# metadata
# ------------------------------------------------------------------------------------------------------------


@decode.command("metadata")
@click.argument("source", default="-", metavar="[FILE|-]")
@click.option("--show-password", is_flag=True,
              help="print the ledger password (default: only its length, as BookKeeper's toSafeString)")
@_reporting_errors("ledger metadata znode")
def metadata_command(source: str, show_password: bool) -> None:
    """Decode a ledger metadata znode's raw bytes (format v1, v2 or v3) from FILE or stdin."""
    data = _read_bytes(source)
    metadata = ledger_metadata.parse(data)
    out = metadata_json(metadata, ledger_metadata.format_version(data), show_password=show_password)
    click.echo(json.dumps(out, indent=2))


def _read_bytes(source: str) -> bytes:
    if source == "-":
        return sys.stdin.buffer.read()
    return Path(source).read_bytes()


def metadata_json(md: LedgerMetadata, format_version: int, *, show_password: bool = False) -> dict[str, Any]:
    """The JSON view of ledger metadata; binary values appear as base64 (and printable where useful).

    The password (BookKeeper's ledger access check, stored in the znode) is shown only when asked for:
    output lands in terminals, tickets and logs (docs/security.md).
    """
    password: dict[str, Any] = {"length": len(md.password)}
    if show_password:
        password.update(base64=_b64(md.password), printable=escape_bytes(md.password))
    return {
        "format_version": format_version,
        "ensemble_size": md.ensemble_size,
        "write_quorum": md.write_quorum,
        "ack_quorum": md.ack_quorum,
        "state": md.state.name,
        "last_entry_id": md.last_entry_id,
        "length": md.length,
        "digest_type": md.digest_type.name,
        "password": password,
        "ctime": md.ctime,
        "custom_metadata": {key: _maybe_text(value) for key, value in md.custom_metadata.items()},
        "ctoken": md.ctoken,
        "segments": [
            {"first_entry_id": seg.first_entry_id, "last_entry_id": last, "ensemble": list(seg.ensemble)}
            for _, seg, last in md.segment_ranges()
        ],
    }


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _maybe_text(value: bytes) -> str | dict[str, str]:
    """UTF-8 text as a string (Pulsar stores text there); anything else as {"base64": ...}."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": _b64(value)}


# ------------------------------------------------------------------------------------------------------------
# availability
# ------------------------------------------------------------------------------------------------------------


@decode.command("availability")
@click.argument("source", metavar="HEX|FILE|-")
@click.option("--expected", metavar="FIRST:LAST[:E:WQ:INDEX]", default=None,
              help="also list the missing entries of [FIRST, LAST]; with E:WQ:INDEX only those the bookie at "
                   "ensemble index INDEX must store")
@_reporting_errors("GetListOfEntriesOfLedger answer")
def availability_command(source: str, expected: str | None) -> None:
    """Decode a BP-34 AvailabilityOfEntriesOfLedger: a hex string, a file of raw bytes, or - for stdin."""
    from bkaudit.formats import availability

    decoded = availability.decode(_hex_or_file(source))
    runs = list(islice(decoded.runs(), MAX_LISTED + 1))
    out: dict[str, Any] = {
        "groups": [
            {"first_sequence_start": g[0], "last_sequence_start": g[1], "sequence_size": g[2],
             "sequence_period": g[3]}
            for g in decoded.groups
        ],
        "total": decoded.total,
        "runs": [list(run) for run in runs[:MAX_LISTED]],
        "runs_truncated": len(runs) > MAX_LISTED,
    }
    if expected is not None:
        out.update(_missing_json(decoded, expected))
    click.echo(json.dumps(out, indent=2))


def _hex_or_file(source: str) -> bytes:
    """`-` reads raw stdin; text that parses as hex is the bytes; anything else is a file path."""
    if source == "-":
        return sys.stdin.buffer.read()
    text = "".join(source.split())
    if text[:2].lower() == "0x":
        text = text[2:]
    try:
        return bytes.fromhex(text)
    except ValueError:
        pass
    path = Path(source)
    if not path.exists():
        raise ValueError(f"{source!r} is neither hex nor an existing file")
    return path.read_bytes()


def _missing_json(decoded: Any, spec: str) -> dict[str, Any]:
    from bkaudit.model.quorum import entries_of_bookie

    numbers = _expected_numbers(spec)
    first, last = numbers[0], numbers[1]
    described: dict[str, Any] = {"first": first, "last": last}
    striping = None
    if len(numbers) == 5:
        ensemble_size, write_quorum, index = numbers[2:]
        striping = entries_of_bookie(index, first, last, ensemble_size, write_quorum)
        described.update(ensemble_size=ensemble_size, write_quorum=write_quorum, bookie_index=index)
    missing: list[tuple[int, int]] = decoded.missing(first, last, striping)
    return {
        "expected": described,
        "missing_count": sum(hi - lo + 1 for lo, hi in missing),
        "missing": [list(r) for r in missing[:MAX_LISTED]],
        "missing_truncated": len(missing) > MAX_LISTED,
    }


def _expected_numbers(spec: str) -> list[int]:
    parts = spec.split(":")
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        numbers = []
    if len(numbers) not in (2, 5):
        raise ValueError(f"--expected must be FIRST:LAST or FIRST:LAST:E:WQ:INDEX (integers), got {spec!r}")
    return numbers
