"""No secret of the secured run (tests/security/flow.py) appears in anything it wrote: logs of every process
at DEBUG (bookies, auditor and workers, admin server, each CLI command with -vv, Spark), stdout/stderr and
`--json` output, API answers, metrics files, Delta tables (parquet decoded to text, and the commit logs),
the HTML report, cluster.json, and the data of every znode in ZooKeeper.

Searched for: each secret as is, in base64 and in hex, and what can be derived from it and used in its place
or to attack it offline: the ZooKeeper digest id (`user:base64(sha1(user:password))`), the ledger's master
key and MAC key (sha1 of "ledger"/"mac" + password, raw/hex/base64), the TLS private keys' PEM body lines.

Where a secret must be stored, it is, as in BookKeeper: the ledger password in the ledger's metadata znode
(BookKeeper's format, needed for recovery), the master key in the bookie's storage, the webhook secret in its
znode (deliveries are signed with it); those places are ACL-protected (tests/security/test_zk_acls.py) and
the test checks the secret appears nowhere else. Inputs the operator wrote (bkaudit.toml, the PKI files, a
raw znode given to `decode metadata`) are not output.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from bkaudit.formats.entry import mac_key, master_key
from bkaudit.zk import paths
from tests.security.flow import USER, SecureRun, digest_id

pytestmark = [pytest.mark.slow, pytest.mark.spark]

ROOT = "/ledgers"


def _forms(secret: bytes) -> set[bytes]:
    """The secret and its common encodings (base64 with and without padding, urlsafe, hex either case)."""
    b64 = base64.b64encode(secret)
    return {secret, b64, b64.rstrip(b"="), base64.urlsafe_b64encode(secret).rstrip(b"="),
            secret.hex().encode(), secret.hex().upper().encode()}


def _pem_body(path: str) -> set[bytes]:
    lines = [ln for ln in Path(path).read_bytes().splitlines() if ln and not ln.startswith(b"-----")]
    return {ln for ln in lines if len(ln) >= 16}


def needles(run: SecureRun) -> dict[str, set[bytes]]:
    s, p = run.secrets, run.pki
    ledger = s.ledger_password.encode()
    digest = digest_id(USER, s.zk_password).encode()
    return {
        "ZooKeeper password": _forms(s.zk_password.encode()) | _forms(f"{USER}:{s.zk_password}".encode()),
        "ZooKeeper digest id": _forms(digest.split(b":", 1)[1]) | {digest},
        "ledger password": _forms(ledger),
        "ledger master/MAC key": _forms(master_key(ledger)) | _forms(mac_key(ledger)),
        "admin token": _forms(s.admin_token.encode()),
        "read token": _forms(s.read_token.encode()),
        "webhook secret": _forms(s.webhook_secret.encode()),
        "TLS private keys": {ln for key in Path(p["ca"]).parent.glob("*.key") for ln in _pem_body(str(key))},
    }


def outputs(run: SecureRun) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of everything the run wrote, decoded where the bytes on disk are not text."""
    for path in sorted(run.directory.rglob("*")):
        rel = path.relative_to(run.directory)
        if not path.is_file() or path == run.conf or rel.parts[0] in ("pki", "inputs"):
            continue
        if rel.parts[0] == "cluster" and rel.parts[-1] != "bookie.log" and len(rel.parts) > 2:
            continue  # bookie storage: entries and master keys, kept as BookKeeper's bookies keep them
        data = path.read_bytes()
        yield str(rel), data
        if path.suffix == ".parquet":
            yield f"{rel} (decoded)", json.dumps(pq.read_table(path).to_pylist(), default=repr).encode()


def znodes(run: SecureRun) -> Iterator[tuple[str, bytes]]:
    with run.owner() as zk:
        stack = ["/"]
        while stack:
            path = stack.pop()
            data, _ = zk.get(path)
            yield path, data
            stack.extend(f"{path.rstrip('/')}/{c}" for c in zk.get_children(path))


def _leaks(items: Iterator[tuple[str, bytes]], run: SecureRun) -> list[str]:
    found = []
    for name, data in items:
        for secret, forms in needles(run).items():
            if any(f in data for f in forms):
                found.append(f"{secret} in {name}")
    return found


def test_the_run_wrote_what_the_leak_search_covers(secure_run: SecureRun) -> None:
    """The search below is only as good as its haystack: logs at DEBUG, each kind of output, parquet."""
    names = [n for n, _ in outputs(secure_run)]
    for expected in ("bookie.log", "autorecovery.log", "admin.log", "check.err", "checker.prom", "decode.out",
                     "autorecovery.prom", ".html", "(decoded)", "_delta_log", "read.out", "metadata.out",
                     "violations.out", "api_api_v1_webhooks.json"):
        assert any(expected in n for n in names), f"nothing like {expected!r} among {names}"
    bookie_log = (secure_run.directory / "cluster" / "bookie-1" / "bookie.log").read_text()
    assert " DEBUG " in bookie_log or "DEBUG" in bookie_log


def test_no_secret_in_anything_the_run_wrote(secure_run: SecureRun) -> None:
    assert not _leaks(outputs(secure_run), secure_run)


def test_no_secret_in_zookeeper_outside_the_znodes_that_must_keep_it(secure_run: SecureRun) -> None:
    ledgers = {paths.ledger_path(i, root=ROOT) for i in secure_run.facts["ledgers"].values()}
    hook = paths.webhook_path(secure_run.facts["webhook"], root=ROOT)
    found = _leaks(znodes(secure_run), secure_run)
    stored = {f"ledger password in {p}" for p in ledgers} | {f"webhook secret in {hook}"}
    assert set(found) - stored == set()
    assert stored <= set(found)  # the search does find secrets where they are: it is not blind
