"""Which bookies a writer may pick, and where they sit: the input of ensemble placement.

Placement rules live in `bkaudit.model.placement` (one source of truth); this module only gathers their
inputs from ZooKeeper: writable bookies (`/ledgers/available`, read-only ones excluded, as BookKeeper's
client does) and rack locations (Pulsar's `/bookies` JSON).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from bkaudit.errors import NotEnoughBookies

if TYPE_CHECKING:
    from bkaudit.store.base import ClusterStore


class BookieDirectory(Protocol):
    """Chooses ensembles and replacement bookies for the client."""

    def choose_ensemble(self, ensemble_size: int, write_quorum: int, ack_quorum: int) -> tuple[str, ...]: ...

    def replace_bookie(
        self, ensemble: Sequence[str], index: int, write_quorum: int, ack_quorum: int, exclude: Sequence[str]
    ) -> str: ...


class ZkBookieDirectory:
    """Placement over the live registration in ZooKeeper, with the configured policy (rack-aware default)."""

    def __init__(
        self,
        cluster: ClusterStore,
        *,
        policy: Any = None,
        settings: Any = None,
        rng: random.Random | None = None,
    ) -> None:
        self.cluster = cluster
        self._policy = policy
        self._settings = settings  # bkaudit.config.Settings: [placement] locations fill rack gaps
        self.rng = rng or random.Random()

    @property
    def policy(self) -> Any:
        if self._policy is None:
            from bkaudit.model.placement import RackAwarePolicy

            self._policy = RackAwarePolicy(min_racks_per_write_quorum=2)
        return self._policy

    def writable(self) -> list[str]:
        """Writable bookies, read through a lost connection (ensemble changes during a ZooKeeper restart)."""
        return sorted(self.cluster.retrying(self.cluster.registry.writable, what="list of writable bookies"))

    def topology(self) -> Any:
        """Bookie locations (`model.topology.resolve_topology`): Pulsar's /bookies rack map, its keys resolved
        through the registrations as Pulsar does, else [placement] locations, else the policy's default."""
        from bkaudit.model.topology import resolve_topology

        racks = self.cluster.retrying(self.cluster.registry.rack_config, what="rack map /bookies")
        if self._settings is not None:
            from bkaudit.audit.settings import topology_from_settings

            return topology_from_settings(self._settings, racks)
        return resolve_topology(racks=racks, locations={}, default_location=self.policy.default_location)

    def choose_ensemble(self, ensemble_size: int, write_quorum: int, ack_quorum: int) -> tuple[str, ...]:
        candidates = self.writable()
        if len(candidates) < ensemble_size:
            raise NotEnoughBookies(
                f"need {ensemble_size} writable bookies, found {len(candidates)}: "
                f"{', '.join(candidates) or '-'}"
            )
        return tuple(
            self.policy.choose_ensemble(
                ensemble_size, write_quorum, ack_quorum, candidates, self.topology(), rng=self.rng
            )
        )

    def replace_bookie(
        self, ensemble: Sequence[str], index: int, write_quorum: int, ack_quorum: int, exclude: Sequence[str]
    ) -> str:
        candidates = [b for b in self.writable() if b not in exclude]
        if not [b for b in candidates if b not in ensemble]:
            raise NotEnoughBookies(
                f"no writable bookie left to replace {ensemble[index]} "
                f"(excluded: {', '.join(exclude) or '-'})"
            )
        return str(
            self.policy.replace_bookie(
                tuple(ensemble),
                index,
                write_quorum,
                ack_quorum,
                candidates,
                self.topology(),
                exclude=tuple(exclude),
                rng=self.rng,
            )
        )
