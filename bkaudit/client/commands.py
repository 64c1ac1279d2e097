"""`bkaudit ledger ...`: write, read, recover, inspect, list and delete ledgers from the command line.

Thin: parse options, call `bkaudit.client.BookKeeper`, print one JSON document (--json) or a short text.
Every failure the tool anticipates (bad arguments, dead ZooKeeper or bookies, protocol errors) becomes a
one-line `error: ...` and exit status 1, never a traceback.
"""

from __future__ import annotations

import base64
import functools
import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click

from bkaudit.cli_common import (
    ENTRY_ID,
    LEDGER_ID,
    LONG_MAX,
    CommandError,
    ZkTarget,
    emit,
    exit_code_for,
    zk_target,
    zookeeper_error,
)
from bkaudit.errors import BkAuditError
from bkaudit.exitcodes import ExitCode

F = TypeVar("F", bound=Callable[..., Any])


class _OneLine:
    """Usage errors as one `Error: ...` line, without click's usage banner (operators grep logs)."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any
    ) -> click.Context:
        try:
            context: click.Context = super().make_context(  # type: ignore[misc]
                info_name, args, parent=parent, **extra
            )
            return context
        except click.UsageError as exc:
            raise CommandError(exc.format_message(), ExitCode.USAGE) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)  # type: ignore[misc]
        except click.UsageError as exc:
            raise CommandError(exc.format_message(), ExitCode.USAGE) from None


class OneLineCommand(_OneLine, click.Command):
    pass


class OneLineGroup(_OneLine, click.Group):
    command_class = OneLineCommand


@click.group(name="ledger", cls=OneLineGroup)
def ledger() -> None:
    """Create, read, recover and inspect ledgers (the BookKeeper client)."""


def _cli_errors(func: F) -> F:
    """Turn anticipated errors into one line on stderr and exit status 1 (2 for invalid settings)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (click.ClickException, click.exceptions.Exit, click.Abort, SystemExit):
            raise
        except BkAuditError as exc:
            raise CommandError(f"{type(exc).__name__}: {exc}", exit_code_for(exc)) from None
        except TimeoutError:
            raise click.ClickException("timed out waiting for bookies (are they running?)") from None
        except Exception as exc:  # an unexpected failure still must not dump a traceback on operators
            raise zookeeper_error(exc) or click.ClickException(f"{type(exc).__name__}: {exc}") from None

    return wrapper  # type: ignore[return-value]


@contextmanager
def _client(settings: Any) -> Iterator[Any]:
    """A BookKeeper client on the command's settings (`load_settings`: its flags applied)."""
    from bkaudit.client.bookkeeper import BookKeeper

    _quiet_kazoo()
    bk = BookKeeper.from_settings(settings)
    try:
        yield bk
    finally:
        bk.close()


def _quiet_kazoo() -> None:
    """kazoo logs every failed connection attempt; the CLI reports the outcome once, as one line."""
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)


def _custom_metadata(pairs: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--custom-metadata")
        out[key] = value
    return out


@ledger.command("write")
@zk_target
@click.option("--entries", "-n", type=click.IntRange(min=0), default=10, show_default=True)
@click.option("--ensemble", "-e", type=click.IntRange(min=1), default=None, help="ensemble size [3]")
@click.option("--write-quorum", "-w", type=click.IntRange(min=1), default=None, help="write quorum [2]")
@click.option("--ack-quorum", "-a", type=click.IntRange(min=1), default=None, help="ack quorum [2]")
@click.option(
    "--entry-size",
    type=click.IntRange(min=0),
    default=1024,
    show_default=True,
    help="payload bytes per entry",
)
@click.option(
    "--digest",
    type=click.Choice(["crc32c", "crc32", "mac", "dummy"], case_sensitive=False),
    default=None,
    help="entry digest [crc32c]",
)
@click.option("--password", default="", help="ledger password (master key and MAC key)")
@click.option("--custom-metadata", "custom", multiple=True, metavar="KEY=VALUE")
@click.option(
    "--no-close", is_flag=True, help="exit without closing: leave the ledger OPEN, as a crashed writer"
)
@click.option("--json", "as_json", is_flag=True)
@_cli_errors
def write_cmd(
    target: ZkTarget, entries: int,
    ensemble: int | None,
    write_quorum: int | None,
    ack_quorum: int | None,
    entry_size: int,
    digest: str | None,
    password: str,
    custom: tuple[str, ...],
    no_close: bool,
    as_json: bool,
) -> None:
    """Create a ledger and add ENTRIES entries of ENTRY_SIZE bytes (entry i's payload starts "entry-i ")."""
    from bkaudit.client.settings import ClientSettings, digest_from_name

    settings = target.settings()
    defaults = settings.get(ClientSettings)
    e = ensemble or defaults.ensemble_size
    wq = write_quorum or min(defaults.write_quorum, e)
    aq = ack_quorum or min(defaults.ack_quorum, wq)
    metadata = _custom_metadata(custom)
    with _client(settings) as bk:
        handle = bk.create_ledger(
            e,
            wq,
            aq,
            digest_type=digest_from_name(digest or defaults.digest_type),
            password=password,
            custom_metadata=metadata,
        )
        futures = [handle.add_entry_async(entry_payload(i, entry_size)) for i in range(entries)]
        for fut in futures:
            fut.result(defaults.add_timeout_s * 4)
        result = {"ledger_id": handle.ledger_id, "last_add_confirmed": handle.last_add_confirmed}
        if no_close:
            handle.abandon()
            result["state"] = "OPEN"
            emit(
                result,
                as_json,
                lambda d: f"ledger {d['ledger_id']} left OPEN at entry {d['last_add_confirmed']}",
            )
            sys.stdout.flush()
            os._exit(0)  # a crashed writer: no close, no clean session shutdown
        md = handle.close()
        result["state"] = md.state.name
        result["length"] = md.length
    emit(result, as_json, lambda d: f"ledger {d['ledger_id']} CLOSED at entry {d['last_add_confirmed']}")


def entry_payload(entry_id: int, size: int) -> bytes:
    """Deterministic payload of `bkaudit ledger write`: "entry-<id> " padded with a repeating pattern."""
    head = b"entry-%d " % entry_id
    if size <= len(head):
        return head[:size]
    pad = bytes((entry_id + k) % 251 for k in range(256))
    body = head + pad * ((size - len(head)) // len(pad) + 1)
    return body[:size]


def _entry_json(entry: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "entry_id": entry.entry_id,
        "last_add_confirmed": entry.last_add_confirmed,
        "length": entry.length,
        "size": len(entry.payload),
    }
    try:
        out["text"] = entry.payload.decode("utf-8")
    except UnicodeDecodeError:
        pass
    out["payload_b64"] = base64.b64encode(entry.payload).decode("ascii")
    return out


@ledger.command("read")
@zk_target
@click.argument("ledger_id", type=LEDGER_ID)
@click.option("--first", type=ENTRY_ID, default=0, show_default=True)
@click.option("--last", type=click.IntRange(-1, LONG_MAX), default=None,
              help="last entry (default: last add confirmed)")
@click.option("--recover", is_flag=True, help="fence and recover first (stops a live writer)")
@click.option("--json", "as_json", is_flag=True)
@_cli_errors
def read_cmd(
    target: ZkTarget, ledger_id: int,
    first: int,
    last: int | None,
    recover: bool,
    as_json: bool,
) -> None:
    """Read entries FIRST..LAST (without fencing unless --recover)."""
    with _client(target.settings()) as bk:
        handle = bk.open_ledger(ledger_id, recover=recover)
        stop = handle.last_add_confirmed if last is None else last
        entries = handle.read_entries(first, stop) if stop >= first else []
        data = {
            "ledger_id": ledger_id,
            "state": handle.metadata.state.name,
            "last_add_confirmed": handle.last_add_confirmed,
            "entries": [_entry_json(e) for e in entries],
        }

    def human(d: dict[str, Any]) -> str:
        lines = [f"ledger {d['ledger_id']} {d['state']} last_add_confirmed={d['last_add_confirmed']}"]
        for e in d["entries"]:
            shown = e.get("text", e["payload_b64"])
            lines.append(f"{e['entry_id']}\t{e['size']}B\t{shown[:60]!r}")
        return "\n".join(lines)

    emit(data, as_json, human)


@ledger.command("recover")
@zk_target
@click.argument("ledger_id", type=LEDGER_ID)
@click.option("--json", "as_json", is_flag=True)
@_cli_errors
def recover_cmd(
    target: ZkTarget, ledger_id: int,
    as_json: bool,
) -> None:
    """Fence the ledger's writer, find its last entry and close it (a no-op if already CLOSED)."""
    with _client(target.settings()) as bk:
        md = bk.open_ledger(ledger_id, recover=True).metadata
    data = {
        "ledger_id": ledger_id,
        "state": md.state.name,
        "last_entry_id": md.last_entry_id,
        "length": md.length,
        "segments": len(md.segments),
    }
    emit(data, as_json, lambda d: f"ledger {d['ledger_id']} {d['state']} at entry {d['last_entry_id']}")


def metadata_json(ledger_id: int, md: Any) -> dict[str, Any]:
    """A ledger's metadata as plain JSON values (password shown only as its length)."""
    return {
        "ledger_id": ledger_id,
        "state": md.state.name,
        "ensemble_size": md.ensemble_size,
        "write_quorum": md.write_quorum,
        "ack_quorum": md.ack_quorum,
        "last_entry_id": md.last_entry_id,
        "length": md.length,
        "digest_type": md.digest_type.name,
        "password_length": len(md.password),
        "ctime": md.ctime,
        "ctoken": md.ctoken,
        "segments": [{"first_entry_id": s.first_entry_id, "ensemble": list(s.ensemble)} for s in md.segments],
        "custom_metadata": {k: v.decode("utf-8", "backslashreplace") for k, v in md.custom_metadata.items()},
    }


@ledger.command("metadata")
@zk_target
@click.argument("ledger_id", type=LEDGER_ID)
@click.option("--json", "as_json", is_flag=True)
@_cli_errors
def metadata_cmd(
    target: ZkTarget, ledger_id: int,
    as_json: bool,
) -> None:
    """Show a ledger's metadata as stored in ZooKeeper."""
    with _client(target.settings()) as bk:
        data = metadata_json(ledger_id, bk.ledger_metadata(ledger_id))

    def human(d: dict[str, Any]) -> str:
        lines = [
            f"ledger {d['ledger_id']} {d['state']} E{d['ensemble_size']} WQ{d['write_quorum']} "
            f"AQ{d['ack_quorum']} last_entry_id={d['last_entry_id']} length={d['length']} "
            f"digest={d['digest_type']}"
        ]
        lines += [f"  from {s['first_entry_id']}: {', '.join(s['ensemble'])}" for s in d["segments"]]
        lines += [f"  {k} = {v}" for k, v in d["custom_metadata"].items()]
        return "\n".join(lines)

    emit(data, as_json, human)


@ledger.command("list")
@zk_target
@click.option("--json", "as_json", is_flag=True)
@_cli_errors
def list_cmd(
    target: ZkTarget, as_json: bool
) -> None:
    """List ledger ids."""
    with _client(target.settings()) as bk:
        ids = bk.list_ledgers()
    emit({"ledgers": ids, "count": len(ids)}, as_json, lambda d: "\n".join(str(i) for i in d["ledgers"]))


@ledger.command("delete")
@zk_target
@click.argument("ledger_id", type=LEDGER_ID)
@click.option("--json", "as_json", is_flag=True)
@_cli_errors
def delete_cmd(
    target: ZkTarget, ledger_id: int,
    as_json: bool,
) -> None:
    """Delete a ledger's metadata (bookies keep its entries on disk)."""
    with _client(target.settings()) as bk:
        bk.delete_ledger(ledger_id)
    emit({"ledger_id": ledger_id, "deleted": True}, as_json, lambda d: f"ledger {d['ledger_id']} deleted")
