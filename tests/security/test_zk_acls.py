"""With `[zk] auth_digest` + `enable_security` (BookKeeper's zkEnableSecurity), every znode any bkaudit
writer created during the secured run (tests/security/flow.py) carries CREATOR_ALL_ACL for the configured
digest identity, and clients without those credentials can neither read nor change it.

The znodes judged are the ones the run's poller actually saw (the whole tree walked, minus what existed
before the run), not a list written here; a coverage check makes sure each writer really ran.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NoNodeError, NotEmptyError
from kazoo.security import ACL, Id

from bkaudit.config import ZkSettings
from bkaudit.zk import client as zkclient
from bkaudit.zk import paths
from tests.security.flow import USER, SecureRun, digest_id

pytestmark = [pytest.mark.slow, pytest.mark.spark]

ROOT = "/ledgers"


def bookkeeper_open(path: str) -> bool:
    """Znodes BookKeeper itself creates OPEN_ACL_UNSAFE whatever zkEnableSecurity says
    (/work/shared/spec/bookkeeper-formats.md): lostBookieRecoveryDelay and the long id generator's dirs."""
    long_root = paths.idgen_long_path(root=ROOT)
    return path == paths.lost_bookie_recovery_delay_path(root=ROOT) or path == long_root or \
        path.startswith(long_root + "/")


def created(run: SecureRun) -> dict[str, tuple[list[ACL], int]]:
    """Every znode seen during the run that did not exist before it (the chroot itself is the harness's)."""
    return {p: v for p, v in run.seen.nodes.items() if p not in run.baseline and p != "/"}


def test_every_znode_bkaudit_created_carries_the_configured_acl(secure_run: SecureRun) -> None:
    nodes = created(secure_run)
    expected = [ACL(31, Id("digest", digest_id(USER, secure_run.secrets.zk_password)))]  # CREATOR_ALL_ACL
    wrong = {p: acl for p, (acl, _) in nodes.items() if not bookkeeper_open(p) and acl != expected}
    assert not wrong, f"znodes without the configured ACL: {wrong}"

    # every writer ran: the znode kinds each one creates are among those judged
    facts, seen = secure_run.facts, set(nodes)
    ledgers = facts["ledgers"]
    bookie = facts["damaged_bookie"]
    writers = {
        "cluster metadata (cluster init)": [paths.instanceid_path(root=ROOT), paths.layout_path(root=ROOT)],
        "cookies": [paths.cookie_path(b, root=ROOT) for b in secure_run.cluster.ids()],  # type: ignore[union-attr]
        "registrations (ephemeral)": [paths.available_path(bookie, root=ROOT)],
        "rack map": [paths.RACKS_PATH],
        "ledgers": [paths.ledger_path(i, root=ROOT) for i in ledgers.values()],
        "under-replication marker": [paths.underreplicated_ledger_path(ledgers["single"], root=ROOT)],
        "data-loss record": [paths.data_loss_path(ledgers["single"], root=ROOT)],
        "lifecycle state": [paths.lifecycle_state_path(facts["drained"], root=ROOT)],
        "read-only switch (admin API)": [paths.serving_path(facts["readonly"], root=ROOT)],
        "webhook": [paths.webhook_path(facts["webhook"], root=ROOT)],
        "checker ctime": [paths.check_ctime_path(k, root=ROOT) for k in paths.CHECK_CTIME_NODES],
        "replication switch (autorecovery disable)": [paths.disable_path(root=ROOT)],
    }
    missing = {w: [p for p in ps if p not in seen] for w, ps in writers.items()}
    assert not {w: ps for w, ps in missing.items() if ps}, f"writers whose znodes were never seen: {missing}"
    prefixes = {
        "lifecycle history": paths.lifecycle_history_root(facts["drained"], root=ROOT) + "/",
        "webhook deliveries": paths.webhook_deliveries_root(facts["webhook"], root=ROOT) + "/",
        "auditor votes (ephemeral)": paths.election_root(root=ROOT) + "/",
        "re-replication locks (ephemeral)": paths.locks_root(root=ROOT) + "/",
    }
    assert not [w for w, pre in prefixes.items() if not any(p.startswith(pre) for p in seen)], prefixes


@pytest.mark.parametrize("who", ["anonymous", "wrong digest"])
def test_clients_without_the_credentials_cannot_read_or_change_them(secure_run: SecureRun, who: str) -> None:
    settings = ZkSettings(connect=secure_run.connect, root=ROOT,
                          auth_digest="" if who == "anonymous" else f"{USER}:not-the-password")
    nodes = created(secure_run)
    outsider = zkclient.connect(settings)
    try:
        with secure_run.owner() as owner:
            present = [p for p in sorted(nodes) if not bookkeeper_open(p) and owner.exists(p) is not None]
        assert len(present) >= 30, f"only {len(present)} znodes still present to check"
        allowed = [f"{op} {path}: {outcome}" for path in present
                   for op, outcome in _attempts(outsider, path, nodes).items() if outcome != "NoAuth"]
        assert not allowed, f"{who} was allowed: {allowed}"
    finally:
        zkclient.close(outsider)


def _attempts(outsider: KazooClient, path: str, nodes: dict[str, tuple[list[ACL], int]]) -> dict[str, str]:
    """Each read and write an outsider could try on `path` -> "NoAuth" or what happened instead."""
    parent = path.rsplit("/", 1)[0] or "/"
    attempts: dict[str, Callable[[], object]] = {
        "exists": lambda: outsider.exists(path),
        "get": lambda: outsider.get(path),
        "get children": lambda: outsider.get_children(path),
        "set": lambda: outsider.set(path, b"tampered"),
        "create child": lambda: outsider.create(path + "/intruder", b"x"),
        "set ACL": lambda: outsider.set_acls(path, [ACL(31, Id("world", "anyone"))]),
    }
    if parent in nodes and not bookkeeper_open(parent):  # DELETE is the parent's permission
        attempts["delete"] = lambda: outsider.delete(path)
    out = {}
    for op, attempt in attempts.items():
        try:
            attempt()
            out[op] = "allowed"
        except NoAuthError:
            out[op] = "NoAuth"
        except (NoNodeError, NotEmptyError) as exc:  # answered past the ACL check: not refused
            out[op] = type(exc).__name__
    return out


def test_only_bookkeepers_own_open_znodes_are_writable_without_credentials(secure_run: SecureRun) -> None:
    """The documented exception, proven rather than assumed: lostBookieRecoveryDelay is world-writable in
    BookKeeper too (ZkLedgerUnderreplicationManager creates it OPEN_ACL_UNSAFE)."""
    delay = paths.lost_bookie_recovery_delay_path(root=ROOT)
    acl, _ = created(secure_run)[delay]
    assert acl == [ACL(31, Id("world", "anyone"))]
    assert [p for p in created(secure_run) if bookkeeper_open(p)] == [delay]  # short ids: no idgen-long
