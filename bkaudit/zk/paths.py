"""ZooKeeper paths exactly as Apache BookKeeper derives them (pure string functions, no I/O).

Public names are fixed by an issue: operators' scripts import them. Layouts and constants follow
BookKeeper's `StringUtils`, `BookKeeperConstants`, `AbstractZkLedgerManager` and
`ZkLedgerUnderreplicationManager` (see shared/spec/bookkeeper-formats.md sections 1 and 3).

Every function that takes a `root` validates it, so a typo such as `ledgers` or `/ledgers/` fails here with a
clear message instead of silently reading or writing a different tree.
"""

from __future__ import annotations

import re

DEFAULT_ROOT = "/ledgers"
INT_MAX = 2**31 - 1  # Java Integer.MAX_VALUE: the short (10-digit) id space ends just below it
LONG_MAX = 2**63 - 1  # Java Long.MAX_VALUE: ledger ids are non-negative longs

LAYOUTS = ("hierarchical", "longhierarchical", "legacyhierarchical")

# BookKeeperConstants
AVAILABLE_NODE = "available"
READONLY_NODE = "readonly"
COOKIES_NODE = "cookies"
LAYOUT_NODE = "LAYOUT"
INSTANCEID_NODE = "INSTANCEID"
UNDER_REPLICATION_NODE = "underreplication"
IDGEN_NODE = "idgen"
IDGEN_LONG_NODE = "idgen-long"
ID_PREFIX = "ID-"
HOB_PREFIX = "HOB-"
UR_LEDGERS_NODE = "ledgers"  # BookKeeper appends the literal DEFAULT_ZK_LEDGERS_ROOT_PATH, whatever the root
LOCKS_NODE = "locks"
ELECTION_NODE = "auditorelection"
VOTE_PREFIX = "V_"
DISABLE_NODE = "disable"
LOST_BOOKIE_RECOVERY_DELAY_NODE = "lostBookieRecoveryDelay"
# Pulsar's rack-awareness JSON; lives at the ZooKeeper root, not under the ledgers root
RACKS_PATH = "/bookies"

# The three auditor "last run" znodes; keys are the kinds accepted by check_ctime_path.
CHECK_CTIME_NODES = {
    "checkallledgers": "checkallledgersctime",
    "placementpolicycheck": "placementpolicycheckctime",
    "replicascheck": "replicascheckctime",
}

# AbstractZkLedgerManager.isSpecialZnode: children of the root that are never ledgers (plus "ID-*").
SPECIAL_ZNODES = frozenset(
    {
        AVAILABLE_NODE,
        COOKIES_NODE,
        LAYOUT_NODE,
        INSTANCEID_NODE,
        UNDER_REPLICATION_NODE,
        IDGEN_NODE,
        IDGEN_LONG_NODE,
    }
)

# bkaudit's own state lives OUTSIDE the ledgers root: BookKeeper's validateAndNukeExistingCluster
# (AbstractZkLedgerManagerFactory) refuses to run while the root has a child that is neither a special znode
# nor a ledger parent. Default `/bkaudit<root>` (`/bkaudit/ledgers`), or `[zk] state_root`.
STATE_BASE = "/bkaudit"
# Where releases before the move kept it (`<root>/bkaudit`): still skipped by the listing, migrated at start.
BKAUDIT_NODE = "bkaudit"
DATA_LOSS_NODE = "dataloss"
LIFECYCLE_STATE_NODE = "state"  # child of a bookie's cookie znode (lifecycle design, shared/seeds/001)
LIFECYCLE_NODE = "lifecycle"
WEBHOOKS_NODE = "webhooks"
SERVING_NODE = "serving"
LISTING_SKIP = SPECIAL_ZNODES | {BKAUDIT_NODE}

# digits of each directory level below the root: `/{2}/{4}/L{4}` (short ids), `/{3}/{4}/{4}/{4}/L{4}` (long)
SHORT_WIDTHS = (2, 4)
LONG_WIDTHS = (3, 4, 4, 4)

_SHORT_DIRS = re.compile(r"\d{2}")
_LONG_DIRS = re.compile(r"\d{3}")
_FOUR_DIGITS = re.compile(r"\d{4}")
_LEAF = re.compile(r"L(\d{4})")
_HEX4 = re.compile(r"[0-9a-f]{4}")
_UR_LEAF = re.compile(r"urL(\d+)")
_DL_LEAF = re.compile(r"L(\d+)")


# -- validation --------------------------------------------------------------------------------------------
def validate_root(root: str) -> str:
    """Return `root` if it is an absolute znode path like `/ledgers` or `/pulsar/ledgers`; else ValueError."""
    if not isinstance(root, str) or not root.startswith("/") or root == "/":
        raise ValueError(f"ledgers root must be an absolute znode path such as '/ledgers', got {root!r}")
    if root.endswith("/") or any(part in ("", ".", "..") for part in root[1:].split("/")):
        raise ValueError(f"ledgers root must have no empty, '.', '..' or trailing '/' parts, got {root!r}")
    if any(ord(ch) < 0x20 for ch in root):
        raise ValueError(f"ledgers root contains control characters: {root!r}")
    return root


def validate_ledger_id(ledger_id: int) -> int:
    """Return `ledger_id` if it is a BookKeeper ledger id (a non-negative Java long); else ValueError."""
    if isinstance(ledger_id, bool) or not isinstance(ledger_id, int):
        raise ValueError(f"ledger id must be an int, got {ledger_id!r}")
    if not 0 <= ledger_id <= LONG_MAX:
        raise ValueError(f"ledger id must be in [0, 2^63-1], got {ledger_id}")
    return ledger_id


def validate_bookie_id(bookie_id: str) -> str:
    if not isinstance(bookie_id, str) or not bookie_id or "/" in bookie_id or bookie_id in (".", ".."):
        raise ValueError(f"bookie id must be a non-empty string without '/', got {bookie_id!r}")
    return bookie_id


def _validate_layout(layout: str) -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"unknown ledger layout {layout!r} (known: {', '.join(LAYOUTS)})")
    return layout


# -- ledger metadata znodes --------------------------------------------------------------------------------
def short_hierarchy(ledger_id: int) -> str:
    """`/{2}/{4}/L{4}` of the 10-digit id (StringUtils.getShortHierarchicalLedgerPath)."""
    s = f"{ledger_id:010d}"
    return f"/{s[0:2]}/{s[2:6]}/L{s[6:10]}"


def long_hierarchy(ledger_id: int) -> str:
    """`/{3}/{4}/{4}/{4}/L{4}` of the 19-digit id (StringUtils.getLongHierarchicalLedgerPath)."""
    s = f"{ledger_id:019d}"
    return f"/{s[0:3]}/{s[3:7]}/{s[7:11]}/{s[11:15]}/L{s[15:19]}"


def ledger_path(ledger_id: int, *, root: str = DEFAULT_ROOT, layout: str = "hierarchical") -> str:
    """The metadata znode of a ledger under `root` for the given ledger manager layout.

    `hierarchical` (BookKeeper's default) is the hybrid: short path below Integer.MAX_VALUE, long path from
    it on. `longhierarchical` always uses the long path; `legacyhierarchical` always the short one and cannot
    hold ids >= Integer.MAX_VALUE (its id generator never produces them).
    """
    validate_root(root)
    validate_ledger_id(ledger_id)
    _validate_layout(layout)
    if layout == "longhierarchical" or (layout == "hierarchical" and ledger_id >= INT_MAX):
        return root + long_hierarchy(ledger_id)
    if ledger_id >= INT_MAX:
        raise ValueError(
            f"ledger id {ledger_id} does not fit the legacyhierarchical layout (ids must be < {INT_MAX}); "
            "use the hierarchical or longhierarchical layout"
        )
    return root + short_hierarchy(ledger_id)


def parse_ledger_path(path: str, *, root: str = DEFAULT_ROOT) -> int | None:
    """The ledger id of a ledger metadata znode path (short or long form), or None if `path` is not one."""
    validate_root(root)
    if not isinstance(path, str) or not path.startswith(root + "/"):
        return None
    parts = path[len(root) + 1 :].split("/")
    return parse_hierarchy(parts)


def parse_hierarchy(parts: list[str] | tuple[str, ...]) -> int | None:
    """The ledger id from the znode names below the root (`['00', '0000', 'L0001']`), or None."""
    heads: tuple[re.Pattern[str], ...]
    if len(parts) == 3:
        heads = (_SHORT_DIRS, _FOUR_DIGITS)
    elif len(parts) == 5:
        heads = (_LONG_DIRS, _FOUR_DIGITS, _FOUR_DIGITS, _FOUR_DIGITS)
    else:
        return None
    if not all(rx.fullmatch(p) for rx, p in zip(heads, parts[:-1], strict=True)):
        return None
    leaf = _LEAF.fullmatch(parts[-1])
    if leaf is None:
        return None
    value = int("".join(parts[:-1]) + leaf.group(1))
    return value if value <= LONG_MAX else None


def is_ledger_parent_node(name: str) -> bool:
    """True for a top-level hierarchy dir: 2 digits (short) or 3 digits (long), BookKeeper's `\\d{2,3}`."""
    return bool(_SHORT_DIRS.fullmatch(name) or _LONG_DIRS.fullmatch(name))


def is_special_znode(name: str) -> bool:
    """BookKeeper's AbstractZkLedgerManager.isSpecialZnode: a root child that is never a ledger."""
    return name in SPECIAL_ZNODES or name.startswith(ID_PREFIX)


def is_skipped_in_listing(name: str) -> bool:
    """What bkaudit's ledger listing skips: BookKeeper's special znodes plus bkaudit's own subtree."""
    return is_special_znode(name) or name in LISTING_SKIP


# -- cluster-level znodes ----------------------------------------------------------------------------------
def _child(root: str, *names: str) -> str:
    return "/".join((validate_root(root), *names))


def layout_path(*, root: str = DEFAULT_ROOT) -> str:
    """`{root}/LAYOUT`: the ledger manager factory record."""
    return _child(root, LAYOUT_NODE)


def instanceid_path(*, root: str = DEFAULT_ROOT) -> str:
    return _child(root, INSTANCEID_NODE)


def idgen_path(*, root: str = DEFAULT_ROOT) -> str:
    """Parent of the EPHEMERAL_SEQUENTIAL `ID-` znodes of the short (31-bit) id generator."""
    return _child(root, IDGEN_NODE)


def idgen_long_path(*, root: str = DEFAULT_ROOT) -> str:
    """Parent of the long (63-bit) id generator's `HOB-%010d` dirs; once it exists, all new ids are long."""
    return _child(root, IDGEN_LONG_NODE)


def available_root(*, root: str = DEFAULT_ROOT) -> str:
    return _child(root, AVAILABLE_NODE)


def readonly_root(*, root: str = DEFAULT_ROOT) -> str:
    return _child(root, AVAILABLE_NODE, READONLY_NODE)


def cookies_root(*, root: str = DEFAULT_ROOT) -> str:
    return _child(root, COOKIES_NODE)


def available_path(bookie_id: str, *, root: str = DEFAULT_ROOT) -> str:
    """EPHEMERAL registration of a writable bookie."""
    return _child(root, AVAILABLE_NODE, validate_bookie_id(bookie_id))


def readonly_path(bookie_id: str, *, root: str = DEFAULT_ROOT) -> str:
    """EPHEMERAL registration of a read-only bookie."""
    return _child(root, AVAILABLE_NODE, READONLY_NODE, validate_bookie_id(bookie_id))


def cookie_path(bookie_id: str, *, root: str = DEFAULT_ROOT) -> str:
    """PERSISTENT cookie of every bookie ever registered (the 'all bookies' list)."""
    return _child(root, COOKIES_NODE, validate_bookie_id(bookie_id))


# -- under-replication -------------------------------------------------------------------------------------
def underreplication_root(*, root: str = DEFAULT_ROOT) -> str:
    return _child(root, UNDER_REPLICATION_NODE)


def ur_layout_path(*, root: str = DEFAULT_ROOT) -> str:
    return _child(root, UNDER_REPLICATION_NODE, LAYOUT_NODE)


def ur_ledgers_root(*, root: str = DEFAULT_ROOT) -> str:
    return _child(root, UNDER_REPLICATION_NODE, UR_LEDGERS_NODE)


def locks_root(*, root: str = DEFAULT_ROOT) -> str:
    return _child(root, UNDER_REPLICATION_NODE, LOCKS_NODE)


def election_root(*, root: str = DEFAULT_ROOT) -> str:
    return _child(root, UNDER_REPLICATION_NODE, ELECTION_NODE)


def disable_path(*, root: str = DEFAULT_ROOT) -> str:
    """Present ⇔ auto-recovery (re-replication) is disabled."""
    return _child(root, UNDER_REPLICATION_NODE, DISABLE_NODE)


def lost_bookie_recovery_delay_path(*, root: str = DEFAULT_ROOT) -> str:
    return _child(root, UNDER_REPLICATION_NODE, LOST_BOOKIE_RECOVERY_DELAY_NODE)


def check_ctime_path(kind: str, *, root: str = DEFAULT_ROOT) -> str:
    """One of the auditor's last-run znodes.

    `kind` is `checkallledgers`, `placementpolicycheck` or `replicascheck` (the znode name without its `ctime`
    suffix); the full znode name is accepted too.
    """
    node = CHECK_CTIME_NODES.get(kind) or (kind if kind in CHECK_CTIME_NODES.values() else None)
    if node is None:
        raise ValueError(f"unknown check ctime kind {kind!r} (known: {', '.join(CHECK_CTIME_NODES)})")
    return _child(root, UNDER_REPLICATION_NODE, node)


def hex_hierarchy(ledger_id: int) -> str:
    """`/hhhh/hhhh/hhhh/hhhh`: the id as four lowercase 16-bit groups, high to low (getParentZnodePath)."""
    validate_ledger_id(ledger_id)
    groups = [(ledger_id >> shift) & 0xFFFF for shift in (48, 32, 16, 0)]
    return "".join(f"/{g:04x}" for g in groups)


def underreplicated_ledger_path(ledger_id: int, *, root: str = DEFAULT_ROOT) -> str:
    """The under-replication marker of a ledger: `{ur}/ledgers/hhhh/hhhh/hhhh/hhhh/urL%010d`."""
    return f"{ur_ledgers_root(root=root)}{hex_hierarchy(ledger_id)}/urL{ledger_id:010d}"


def parse_underreplicated_path(path: str, *, root: str = DEFAULT_ROOT) -> int | None:
    """The ledger id of a marker path, or None if `path` is not one.

    The id comes from the leaf (`urL(\\d+)$`, as BookKeeper parses it); the four hex dirs must be present.
    """
    return _parse_hex_tree(path, ur_ledgers_root(root=root), _UR_LEAF)


def lock_path(ledger_id: int, *, root: str = DEFAULT_ROOT) -> str:
    """EPHEMERAL lock a replication worker holds while re-replicating a ledger: `{ur}/locks/urL%010d`."""
    return f"{locks_root(root=root)}/urL{validate_ledger_id(ledger_id):010d}"


def parse_lock_name(name: str) -> int | None:
    """The ledger id of a lock znode name (`urL0000000001`), or None."""
    match = _UR_LEAF.fullmatch(name)
    return int(match.group(1)) if match and int(match.group(1)) <= LONG_MAX else None


# -- bkaudit's own records ---------------------------------------------------------------------------------
def bkaudit_state_root(*, root: str = DEFAULT_ROOT, state_root: str | None = None) -> str:
    """bkaudit's own subtree, outside the ledgers root: `state_root` if given, else `/bkaudit<root>`."""
    if state_root:
        return validate_state_root(state_root, root=root)
    return STATE_BASE + validate_root(root)


def validate_state_root(state_root: str, *, root: str = DEFAULT_ROOT) -> str:
    """An absolute path that is neither the ledgers root nor below it (BookKeeper's nuke rule)."""
    state_root = validate_root(state_root)
    root = validate_root(root)
    if state_root == root or state_root.startswith(root + "/"):
        raise ValueError(f"bkaudit's state root {state_root!r} must be outside the ledgers root {root!r}")
    return state_root


def legacy_bkaudit_root(*, root: str = DEFAULT_ROOT) -> str:
    """`{root}/bkaudit`: where earlier releases kept their state (it blocks `nukeexistingcluster`)."""
    return _child(root, BKAUDIT_NODE)


def data_loss_root(*, root: str = DEFAULT_ROOT, state_root: str | None = None) -> str:
    return _child(bkaudit_state_root(root=root, state_root=state_root), DATA_LOSS_NODE)


def legacy_data_loss_root(*, root: str = DEFAULT_ROOT) -> str:
    return _child(root, BKAUDIT_NODE, DATA_LOSS_NODE)


def data_loss_path(ledger_id: int, *, root: str = DEFAULT_ROOT, state_root: str | None = None) -> str:
    """bkaudit's record of entries no replica can serve: `{state}/dataloss/hhhh/hhhh/hhhh/hhhh/L%010d`.

    The same 16-bit fan-out as the under-replication tree keeps every directory small however many ledgers
    are recorded.
    """
    return f"{data_loss_root(root=root, state_root=state_root)}{hex_hierarchy(ledger_id)}/L{ledger_id:010d}"


def parse_data_loss_path(path: str, *, root: str = DEFAULT_ROOT, state_root: str | None = None) -> int | None:
    return _parse_hex_tree(path, data_loss_root(root=root, state_root=state_root), _DL_LEAF)


def legacy_data_loss_path(ledger_id: int, *, root: str = DEFAULT_ROOT) -> str:
    return f"{legacy_data_loss_root(root=root)}{hex_hierarchy(ledger_id)}/L{ledger_id:010d}"


def parse_legacy_data_loss_path(path: str, *, root: str = DEFAULT_ROOT) -> int | None:
    return _parse_hex_tree(path, legacy_data_loss_root(root=root), _DL_LEAF)


def _parse_hex_tree(path: str, base: str, leaf_rx: re.Pattern[str]) -> int | None:
    if not isinstance(path, str) or not path.startswith(base + "/"):
        return None
    parts = path[len(base) + 1 :].split("/")
    if len(parts) != 5 or not all(_HEX4.fullmatch(p) for p in parts[:4]):
        return None
    leaf = leaf_rx.fullmatch(parts[4])
    if leaf is None:
        return None
    value = int(leaf.group(1))
    return value if value <= LONG_MAX else None


# -- bookie lifecycle (shared/seeds/001) -------------------------------------------------------------------
def lifecycle_state_path(bookie_id: str, *, root: str = DEFAULT_ROOT) -> str:
    """`{root}/cookies/<bookieId>/state`: the bookie's lifecycle state (absent = Active), as the design says.

    A child under the cookie means BookKeeper's own cookie delete (a plain delete) fails until the state is
    cleared, which is intended: a drained bookie's cookie goes together with its state (docs/lifecycle.md).
    """
    return _child(root, COOKIES_NODE, validate_bookie_id(bookie_id), LIFECYCLE_STATE_NODE)


def lifecycle_root(*, root: str = DEFAULT_ROOT, state_root: str | None = None) -> str:
    """Lifecycle history, drain progress and failures: under bkaudit's state root, outside the ledgers root,
    so BookKeeper's `nukeexistingcluster` is not blocked (only `state` sits beside the cookie).
    """
    return _child(bkaudit_state_root(root=root, state_root=state_root), LIFECYCLE_NODE)


def lifecycle_history_root(bookie_id: str, *, root: str = DEFAULT_ROOT, state_root: str | None = None) -> str:
    """Append-only transitions of one bookie: PERSISTENT_SEQUENTIAL `h-` children (kept after removal)."""
    return _child(lifecycle_root(root=root, state_root=state_root), "history", validate_bookie_id(bookie_id))


def drain_progress_path(bookie_id: str, *, root: str = DEFAULT_ROOT, state_root: str | None = None) -> str:
    """The Auditor's latest drain progress of a bookie (ledgers / bytes left, failures), JSON."""
    base = lifecycle_root(root=root, state_root=state_root)
    return _child(base, "progress", validate_bookie_id(bookie_id))


def drain_failures_root(bookie_id: str, *, root: str = DEFAULT_ROOT, state_root: str | None = None) -> str:
    """Per-ledger failure counts workers report while draining a bookie: children `L%010d`, JSON."""
    base = lifecycle_root(root=root, state_root=state_root)
    return _child(base, "failures", validate_bookie_id(bookie_id))


def drain_failure_path(
    bookie_id: str, ledger_id: int, *, root: str = DEFAULT_ROOT, state_root: str | None = None
) -> str:
    base = drain_failures_root(bookie_id, root=root, state_root=state_root)
    return f"{base}/L{validate_ledger_id(ledger_id):010d}"


def serving_path(bookie_id: str, *, root: str = DEFAULT_ROOT, state_root: str | None = None) -> str:
    """An operator's read-only request for a bookie (the cluster-level /api/v1/bookie/state/readonly)."""
    base = bkaudit_state_root(root=root, state_root=state_root)
    return _child(base, SERVING_NODE, validate_bookie_id(bookie_id))


def webhooks_root(*, root: str = DEFAULT_ROOT, state_root: str | None = None) -> str:
    return _child(bkaudit_state_root(root=root, state_root=state_root), WEBHOOKS_NODE)


def webhook_path(webhook_id: str, *, root: str = DEFAULT_ROOT, state_root: str | None = None) -> str:
    return _child(webhooks_root(root=root, state_root=state_root), validate_bookie_id(webhook_id))


def webhook_deliveries_root(
    webhook_id: str, *, root: str = DEFAULT_ROOT, state_root: str | None = None
) -> str:
    """Delivery records of one webhook: PERSISTENT_SEQUENTIAL `d-` children."""
    base = bkaudit_state_root(root=root, state_root=state_root)
    return _child(base, "webhook-deliveries", validate_bookie_id(webhook_id))
