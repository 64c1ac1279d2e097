"""The `[checker]` and `[placement]` settings sections (conf/bkaudit.toml; BookKeeper keys: docs/config.md).

Here rather than in the Spark job so the CLI, the jobs and the tests can read and validate the section without
importing pyspark.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

from bkaudit.audit.classification import FailOn
from bkaudit.errors import ConfigError
from bkaudit.model.placement import (
    POLICY_KINDS,
    DefaultPolicy,
    PlacementPolicy,
    RackAwarePolicy,
    RegionAwarePolicy,
    ZoneAwarePolicy,
    policy_kind,
)
from bkaudit.model.topology import DEFAULT_RACK, Topology, normalize_location, resolve_topology

_S = TypeVar("_S")


class SectionSource(Protocol):
    """Anything that builds a settings section from its class (`bkaudit.config.Settings`)."""

    def get(self, cls: type[_S]) -> _S: ...


@dataclasses.dataclass(frozen=True)
class CheckerSettings:
    """How `bkaudit check` talks to bookies and ZooKeeper, what it publishes and where metrics go."""

    # underreplicatedLedgerRecoveryGracePeriod (s); 0 disables the progress check, as in BookKeeper
    grace_period_s: float = 3600.0
    # BP-34's delayed re-check of (ledger, bookie) calls that failed; no BookKeeper key (never implemented)
    retry_delay_s: float = 5.0
    retry_attempts: int = 1
    # ledgers per GetListOfEntries batch message (the bookie's extension operation)
    batch_size: int = 500
    # batch calls in flight per bookie (BookKeeper: at most 100 ledgers in flight in total)
    max_in_flight_per_bookie: int = 4
    # per-call deadline (BookKeeper: REPLICAS_CHECK_TIMEOUT_IN_SECS = 120 per ledger range)
    call_timeout_s: float = 15.0
    # consecutive transport failures after which a task stops calling a bookie for this attempt
    bookie_failure_threshold: int = 2
    # Spark partitions per bookie in the fan-out (more = more parallel calls to one bookie)
    partitions_per_bookie: int = 1
    # check open ledgers too, their last segment up to the LAC their bookies report (as BookKeeper's
    # checkAllLedgers / LedgerChecker; only its replicasCheck skips open ledgers)
    check_open_ledgers: bool = True
    # re-evaluations of a ledger whose metadata keeps changing before it is reported unverifiable
    max_reevaluations: int = 3
    # ZooKeeper reads/s of the pre-report re-read (auditorMaxNumberOfConcurrentOpenLedgerOperations): one
    # session, so the same cap as one snapshot task (SnapshotSettings.reads_per_second_per_task)
    zk_reads_per_s: float = 20_000.0
    # ranges kept per row (counts stay exact); bounds a row for a wiped bookie under a huge ledger
    max_ranges_per_row: int = 10_000
    # feed the under-replication queue (off by default for ad hoc runs)
    publish_underreplicated: bool = False
    # repairedPlacementPolicyNotAdheringBookieEnabled (BP-54): also mark placement_fail ledgers
    publish_placement: bool = False
    # markers written per second (zkReplicationTaskRateLimit-style throttle, cf. BookKeeper PR #3541)
    publish_rate_per_s: float = 50.0
    # after a successful run, write the Auditor's checkallledgersctime / placementpolicycheckctime /
    # replicascheckctime znodes (the checks this run stands in for; docs/compatibility.md)
    write_check_ctimes: bool = True
    # never | warning | critical: the lowest severity that makes the run exit 3
    fail_on: str = "critical"
    # Prometheus text file (node_exporter textfile collector); empty = none
    metrics_file: str = ""
    # Prometheus push gateway base URL, e.g. http://pushgateway:9091; empty = none
    pushgateway_url: str = ""
    metrics_job: str = "bkaudit_checker"
    # prefix of BookKeeper's gauge names: "auditor" gives auditor_NUM_LEDGERS_... as BookKeeper exports them
    metrics_scope: str = "auditor"
    # bookies whose listing is known not to work (Java bookies on DbLedgerStorage): verified by reads at once
    listing_unsupported: tuple[str, ...] = ()
    # deadline of the per-run listing probe; a bookie that does not answer it is verified by reads
    listing_probe_timeout_s: float = 5.0
    # most index pages a run lists on one Java bookie (Interleaved/SortedLedgerStorage): each page listed
    # stays pinned until the bookie restarts, and at its pageLimit the bookie stops serving (docs/
    # compatibility.md). Above it, that bookie is verified by reads. Under half of pageLimit at BookKeeper's
    # default 2 GB of direct memory (87,381 pages); 0: never list a Java bookie
    java_listing_max_pages: int = 40_000
    # auditorLedgerVerificationPercentage: entries read between each fragment's first and last on such bookies
    verification_percentage: float = 0.0
    # inFlightReadEntryNumInLedgerChecker: entry reads in flight per bookie when verifying by reads
    read_max_in_flight_per_bookie: int = 64

    def __post_init__(self) -> None:
        for key in ("grace_period_s", "retry_delay_s", "zk_reads_per_s", "publish_rate_per_s"):
            if getattr(self, key) < 0:
                raise ConfigError(f"checker.{key}", "must be >= 0")
        for key in (
            "batch_size",
            "max_in_flight_per_bookie",
            "bookie_failure_threshold",
            "partitions_per_bookie",
            "max_reevaluations",
        ):
            if getattr(self, key) < 1:
                raise ConfigError(f"checker.{key}", "must be >= 1")
        if not 0 <= self.verification_percentage <= 100:
            raise ConfigError("checker.verification_percentage", "must be a percentage in [0, 100]")
        if self.listing_probe_timeout_s <= 0:
            raise ConfigError("checker.listing_probe_timeout_s", "must be > 0")
        if self.java_listing_max_pages < 0:
            raise ConfigError("checker.java_listing_max_pages", "must be >= 0 (0 = never list a Java bookie)")
        if self.read_max_in_flight_per_bookie < 1:
            raise ConfigError("checker.read_max_in_flight_per_bookie", "must be >= 1")
        if self.retry_attempts < 0:
            raise ConfigError("checker.retry_attempts", "must be >= 0")
        if self.call_timeout_s <= 0:
            raise ConfigError("checker.call_timeout_s", "must be > 0")
        if self.max_ranges_per_row < 0:
            raise ConfigError("checker.max_ranges_per_row", "must be >= 0 (0 = unlimited)")
        try:
            FailOn(self.fail_on)
        except ValueError:
            raise ConfigError("checker.fail_on", "must be one of never, warning, critical") from None
        if self.pushgateway_url and not self.pushgateway_url.startswith(("http://", "https://")):
            raise ConfigError("checker.pushgateway_url", "must be an http(s) URL")


@dataclasses.dataclass(frozen=True)
class PlacementSettings:
    """Which placement policy the audit judges against, with BookKeeper's knobs (docs/config.md)."""

    policy: str = "rackaware"
    min_racks_per_write_quorum: int = 2
    enforce_min_racks: bool = False
    default_rack: str = DEFAULT_RACK
    regions_to_write: tuple[str, ...] = ()
    min_regions_for_durability: int = 2
    min_zones: int = 2
    desired_zones: int = 3
    enforce_strict_zoneaware: bool = True
    # bookie id -> network location, used when Pulsar's /bookies rack map is absent
    locations: dict[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if policy_kind(self.policy) is None:
            raise ConfigError(
                "placement.policy", f"unknown policy {self.policy!r} (one of {', '.join(POLICY_KINDS)})"
            )
        for key in ("min_racks_per_write_quorum", "min_regions_for_durability", "min_zones", "desired_zones"):
            if getattr(self, key) < 1:
                raise ConfigError(f"placement.{key}", "must be >= 1")
        if self.desired_zones < self.min_zones:
            raise ConfigError(
                "placement.desired_zones", f"must be >= min_zones ({self.min_zones}), as in BookKeeper"
            )
        if normalize_location(self.default_rack) is None:
            raise ConfigError("placement.default_rack", "must be a non-empty location such as /default-rack")
        self._check_regions()
        self._check_locations()

    def _check_regions(self) -> None:
        # BookKeeper writes reppRegionsToWrite as "r1;r2"; accept that inside one list item too
        regions = tuple(r.strip().strip("/") for item in self.regions_to_write for r in str(item).split(";"))
        if any(not r for r in regions):
            raise ConfigError("placement.regions_to_write", "region names must not be empty")
        if regions and len(regions) < self.min_regions_for_durability:
            raise ConfigError(
                "placement.regions_to_write",
                f"{len(regions)} region(s) cannot meet "
                f"min_regions_for_durability={self.min_regions_for_durability}",
            )
        object.__setattr__(self, "regions_to_write", regions)

    def _check_locations(self) -> None:
        if not isinstance(self.locations, Mapping):
            raise ConfigError("placement.locations", "must be a table of bookie id = location")
        for bookie, location in self.locations.items():
            if not isinstance(location, str) or normalize_location(location) is None:
                raise ConfigError(
                    f"placement.locations.{bookie}", f"expected a location like /rack1, got {location!r}"
                )


def policy_from_settings(settings: PlacementSettings | SectionSource) -> PlacementPolicy:
    """The policy configured in the ``[placement]`` section."""
    conf = settings if isinstance(settings, PlacementSettings) else settings.get(PlacementSettings)
    kind = policy_kind(conf.policy)
    if kind == "default":
        return DefaultPolicy()
    if kind == "regionaware":
        return RegionAwarePolicy(
            regions_to_write=conf.regions_to_write,
            min_regions_for_durability=conf.min_regions_for_durability,
            min_racks_per_write_quorum=conf.min_racks_per_write_quorum,
        )
    if kind == "zoneaware":
        return ZoneAwarePolicy(
            min_zones=conf.min_zones,
            desired_zones=conf.desired_zones,
            enforce_strict=conf.enforce_strict_zoneaware,
        )
    return RackAwarePolicy(
        min_racks_per_write_quorum=conf.min_racks_per_write_quorum,
        enforce_min_racks=conf.enforce_min_racks,
        default_rack=conf.default_rack,
    )


def topology_from_settings(
    settings: PlacementSettings | SectionSource, rack_config: Mapping[str, Any] | None = None
) -> Topology:
    """The topology to judge with (`resolve_topology`): Pulsar's ``/bookies`` map when it holds anything,
    else ``[placement] locations``; unmapped bookies get the configured policy's default location."""
    conf = settings if isinstance(settings, PlacementSettings) else settings.get(PlacementSettings)
    default = policy_from_settings(conf).default_location
    return resolve_topology(racks=rack_config, locations=conf.locations, default_location=default)
