"""Ensemble placement policies: judge an ensemble (adherence) and pick bookies (new ensemble, replacement).

One implementation serves the Spark placement check, the auditor, the ledger client and the replication
worker, so the bookies we choose are exactly the ones our own check accepts. Semantics follow
BookKeeper's ``*EnsemblePlacementPolicy`` classes; where we deliberately differ (region-aware adherence, how
unknown bookies are counted) docs/placement.md says so and why.

Every topology-aware policy here works on *labels*: a bookie's label is what the policy cares about (its rack,
its (region, rack), its (zone, upgrade domain)) and a write set is judged from its labels alone. That makes
adherence a pure function of (labels, WQ) and lets choosing search over label sequences instead of over
bookies; bookies are only drawn from the label pools at the end.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
import random
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, ClassVar

from bkaudit.errors import NotEnoughBookies, QuorumError
from bkaudit.model.ledger import LedgerMetadata
from bkaudit.model.quorum import validate_quorum, write_set
from bkaudit.model.topology import (
    DEFAULT_RACK,
    DEFAULT_REGION_AND_RACK,
    DEFAULT_ZONE_AND_UPGRADEDOMAIN,
    Topology,
    location_components,
    normalize_location,
)

#: (group, leaf): the group is the rack / region / zone (None = unknown), the leaf identifies the bookie's
#: placement inside it (rack location, upgrade domain). Two bookies with equal labels are interchangeable.
Label = tuple[str | None, str]

#: Search nodes allowed per adherence level when choosing an ensemble. Real ensembles (E <= ~20, a few dozen
#: labels) are found in a few hundred nodes; the cap bounds the cost of proving a tight case infeasible.
SEARCH_BUDGET = 10_000


class Adherence(enum.IntEnum):
    """BookKeeper's PlacementPolicyAdherence; ordered so `min()` gives the worst of several results."""

    FAIL = 1
    MEETS_SOFT = 3
    MEETS_STRICT = 5


class _BudgetExhausted(Exception):
    """Internal: the label search ran out of nodes."""


# ---------------------------------------------------------------------------------------------------------
# base classes
# ---------------------------------------------------------------------------------------------------------
class PlacementPolicy(abc.ABC):
    """What every placement policy offers the checker, the client and the replication worker."""

    name: ClassVar[str]

    @property
    @abc.abstractmethod
    def default_location(self) -> str:
        """The location BookKeeper gives a bookie it cannot resolve under this policy."""

    @abc.abstractmethod
    def evaluate(
        self, ensemble: Sequence[str], write_quorum: int, ack_quorum: int, topology: Topology
    ) -> tuple[Adherence, list[str]]:
        """Adherence and the human reasons behind anything short of MEETS_STRICT (one pass for both)."""

    def adherence(
        self, ensemble: Sequence[str], write_quorum: int, ack_quorum: int, topology: Topology
    ) -> Adherence:
        """BookKeeper's isEnsembleAdheringToPlacementPolicy for this ensemble as recorded in metadata."""
        return self.evaluate(ensemble, write_quorum, ack_quorum, topology)[0]

    def bookkeeper_adherence(
        self,
        ensemble: Sequence[str],
        write_quorum: int,
        ack_quorum: int,
        topology: Topology,
        *,
        writable: Collection[str],
    ) -> Adherence:
        """What BookKeeper's own policy answers for this ensemble in its Auditor, for reconciliation.

        Our `adherence` judges the recorded ensemble against the whole topology; BookKeeper's answer can
        differ (rack-aware counts only `writable` bookies; region-aware always says MEETS_STRICT). Policies
        whose rule is BookKeeper's return `adherence` itself.
        """
        return self.adherence(ensemble, write_quorum, ack_quorum, topology)

    def explain(
        self, ensemble: Sequence[str], write_quorum: int, ack_quorum: int, topology: Topology
    ) -> list[str]:
        """Why the ensemble is FAIL or MEETS_SOFT (empty when strict): which write set, which racks/zones."""
        return self.evaluate(ensemble, write_quorum, ack_quorum, topology)[1]

    @abc.abstractmethod
    def choose_ensemble(
        self,
        ensemble_size: int,
        write_quorum: int,
        ack_quorum: int,
        candidates: Sequence[str],
        topology: Topology,
        *,
        exclude: Collection[str] = (),
        rng: random.Random | None = None,
    ) -> tuple[str, ...]:
        """A new ensemble of distinct candidates, none excluded; raises NotEnoughBookies when impossible."""

    @abc.abstractmethod
    def replace_bookie(
        self,
        ensemble: Sequence[str],
        index: int,
        write_quorum: int,
        ack_quorum: int,
        candidates: Sequence[str],
        topology: Topology,
        *,
        exclude: Collection[str] = (),
        rng: random.Random | None = None,
    ) -> str:
        """The bookie to put at `index`: never an ensemble member nor excluded; NotEnoughBookies if none."""


class _LabelledPolicy(PlacementPolicy):
    """Shared machinery: label bookies, judge write sets from labels, search label sequences."""

    #: whether some write set can be MEETS_SOFT (saves a useless second search for rack-aware)
    _has_soft: ClassVar[bool] = False
    #: what a label group is called in messages
    _group_noun: ClassVar[str] = "rack"

    # -- per-policy hooks ----------------------------------------------------------------------------------
    @abc.abstractmethod
    def _label(self, bookie: str, topology: Topology) -> Label:
        """The bookie's placement as this policy sees it."""

    @abc.abstractmethod
    def _judge_window(self, labels: Sequence[Label]) -> tuple[Adherence, str]:
        """One write set's level from its labels (label problems aside) and, below strict, the reason."""

    def _label_problem(self, label: Label) -> str | None:
        """Why a bookie with this label fails the policy by itself (e.g. unresolved zone), or None."""
        return None

    def _ledger_problems(self, ensemble_size: int, write_quorum: int) -> list[str]:
        """Reasons the quorum shape alone fails the policy, whatever the bookies (zone-aware E % WQ)."""
        return []

    @property
    def _strict(self) -> bool:
        """True when the policy refuses to place rather than place badly (BookKeeper's enforce* switches)."""
        return False

    def _groups_needed(self, write_quorum: int, floor: Adherence) -> int:
        """Distinct known groups a write set needs to reach `floor` (a lower bound used to prune search)."""
        return 0

    def _repairs_needed(self, labels: Sequence[Label], open_labels: Collection[Label]) -> int | None:
        """Bookies of groups already present that a partial write set still needs, None if none can help
        (`open_labels` still have bookies left); a pruning bound."""
        return 0

    def _penalty(self, label: Label) -> int:
        """Selection preference: 0 for a well-placed label, 1 for one to use only if nothing else fits."""
        return 1 if label[0] is None or self._label_problem(label) is not None else 0

    # -- adherence -----------------------------------------------------------------------------------------
    def evaluate(
        self, ensemble: Sequence[str], write_quorum: int, ack_quorum: int, topology: Topology
    ) -> tuple[Adherence, list[str]]:
        ens = tuple(ensemble)
        size = len(ens)
        if size == 0:
            return Adherence.FAIL, ["empty ensemble"]
        if not 1 <= write_quorum <= size:
            return Adherence.FAIL, [f"write quorum {write_quorum} is outside 1..ensemble size {size}"]
        labels = [self._label(b, topology) for b in ens]
        reasons = self._ledger_problems(size, write_quorum)
        for i, (bookie, label) in enumerate(zip(ens, labels, strict=True)):
            problem = self._label_problem(label)
            if problem is not None:
                reasons.append(f"bookie {i} {_where(bookie, topology)}: {problem}")
        worst = Adherence.FAIL if reasons else Adherence.MEETS_STRICT
        for first in range(size):
            members = write_set(first, size, write_quorum)
            level, why = self._judge_window([labels[k] for k in members])
            if level < Adherence.MEETS_STRICT:
                shown = ", ".join(_where(ens[k], topology) for k in members)
                reasons.append(f"write set {first} (entries ≡ {first} mod {size}) [{shown}]: {why}")
                worst = min(worst, level)
        return worst, reasons

    def _window_level(self, labels: Sequence[Label]) -> Adherence:
        """A write set's level including label problems (used when choosing)."""
        if any(self._label_problem(label) is not None for label in labels):
            return Adherence.FAIL
        return self._judge_window(labels)[0]

    # -- choosing ------------------------------------------------------------------------------------------
    def choose_ensemble(
        self,
        ensemble_size: int,
        write_quorum: int,
        ack_quorum: int,
        candidates: Sequence[str],
        topology: Topology,
        *,
        exclude: Collection[str] = (),
        rng: random.Random | None = None,
    ) -> tuple[str, ...]:
        """Prefer an ensemble whose every write set is strict, then soft; a strict policy stops there.

        A non-strict policy then returns a best-effort ensemble spread as widely as the candidates allow,
        as BookKeeper falls back to random selection when placement is not enforced.
        """
        validate_quorum(ensemble_size, write_quorum, ack_quorum)
        rng = rng if rng is not None else random.Random()
        excluded = set(exclude)
        pool = [b for b in dict.fromkeys(candidates) if b not in excluded]
        if len(pool) < ensemble_size:
            raise NotEnoughBookies(
                f"{self.name}: need {ensemble_size} bookies, only {len(pool)} candidates are not excluded"
            )
        pools = self._pools(pool, topology, rng)
        capacity = {label: len(members) for label, members in pools.items()}
        if sum(capacity.values()) < ensemble_size:
            raise NotEnoughBookies(
                f"{self.name}: need {ensemble_size} bookies, only {sum(capacity.values())} of {len(pool)} "
                f"candidates are eligible ({self._describe_capacity(capacity)})"
            )
        blockers = self._ledger_problems(ensemble_size, write_quorum)
        if blockers and self._strict:
            raise NotEnoughBookies(f"{self.name}: no adherent ensemble is possible: {'; '.join(blockers)}")
        floors = (
            [Adherence.MEETS_STRICT, Adherence.MEETS_SOFT] if self._has_soft else [Adherence.MEETS_STRICT]
        )
        gave_up = False
        for floor in floors:
            found = self._search(ensemble_size, write_quorum, capacity, floor, rng)
            if isinstance(found, list):
                return _draw(found, pools)
            gave_up = gave_up or found is not None
        if self._strict:
            why = f" (search gave up after {SEARCH_BUDGET} steps)" if gave_up else ""
            raise NotEnoughBookies(
                f"{self.name}: cannot place E={ensemble_size} WQ={write_quorum} so that every write set "
                f"adheres{why}; eligible candidates: {self._describe_capacity(capacity)}"
            )
        found = self._search(ensemble_size, write_quorum, capacity, Adherence.FAIL, rng)
        assert isinstance(found, list)  # unconstrained: the first path always completes
        return _draw(found, pools)

    def replace_bookie(
        self,
        ensemble: Sequence[str],
        index: int,
        write_quorum: int,
        ack_quorum: int,
        candidates: Sequence[str],
        topology: Topology,
        *,
        exclude: Collection[str] = (),
        rng: random.Random | None = None,
    ) -> str:
        """Pick the candidate that leaves the write sets containing `index` at the best level.

        Ties go to the label whose group (rack / region / zone) is least used in those write sets, then in
        the whole ensemble, then to chance. A strict policy refuses (NotEnoughBookies) rather than return a
        bookie that leaves one of those write sets FAIL.
        """
        ens = tuple(ensemble)
        validate_quorum(len(ens), write_quorum, ack_quorum)
        if not 0 <= index < len(ens):
            raise QuorumError(f"bookie index {index} outside ensemble of size {len(ens)}")
        rng = rng if rng is not None else random.Random()
        banned = set(exclude) | set(ens)
        pool = [b for b in dict.fromkeys(candidates) if b not in banned]
        pools = self._pools(pool, topology, rng)
        if not pools:
            raise NotEnoughBookies(
                f"{self.name}: no eligible replacement for index {index} "
                f"({len(pool)} candidates outside the ensemble and the exclusions)"
            )
        labels = [self._label(b, topology) for b in ens]
        starts = sorted({(index - j) % len(ens) for j in range(write_quorum)})
        neighbours = Counter(
            labels[k][0] for s in starts for k in write_set(s, len(ens), write_quorum) if k != index
        )
        everywhere = Counter(label[0] for k, label in enumerate(labels) if k != index)

        def rank(label: Label) -> tuple[int, int, int, int, float]:
            trial = list(labels)
            trial[index] = label
            level = min(
                self._window_level([trial[k] for k in write_set(s, len(ens), write_quorum)]) for s in starts
            )
            return (-level, self._penalty(label), neighbours[label[0]], everywhere[label[0]], rng.random())

        best_rank, best_label = min(((rank(label), label) for label in pools), key=lambda item: item[0])
        if self._strict and -best_rank[0] == Adherence.FAIL:
            raise NotEnoughBookies(
                f"{self.name}: every candidate for index {index} leaves a write set failing the policy; "
                f"eligible candidates: {self._describe_capacity({k: len(v) for k, v in pools.items()})}"
            )
        return pools[best_label][0]

    # -- search helpers ------------------------------------------------------------------------------------
    def _pools(self, pool: Sequence[str], topology: Topology, rng: random.Random) -> dict[Label, list[str]]:
        """Candidates grouped by label, shuffled; a strict policy drops bookies that fail by themselves."""
        pools: dict[Label, list[str]] = {}
        for bookie in pool:
            label = self._label(bookie, topology)
            if self._strict and self._label_problem(label) is not None:
                continue
            pools.setdefault(label, []).append(bookie)
        for members in pools.values():
            rng.shuffle(members)
        return pools

    def _describe_capacity(self, capacity: Mapping[Label, int]) -> str:
        per_group: Counter[str] = Counter()
        for (group, _), n in capacity.items():
            per_group[group if group is not None else "unknown"] += n
        listing = ", ".join(f"{g}: {n}" for g, n in sorted(per_group.items()))
        return f"{sum(per_group.values())} bookies in {len(per_group)} {self._group_noun}(s) ({listing})"

    def _search(
        self,
        size: int,
        write_quorum: int,
        capacity: Mapping[Label, int],
        floor: Adherence,
        rng: random.Random,
    ) -> list[Label] | _BudgetExhausted | None:
        """A label per ensemble position, within capacity, every write set at `floor` or better.

        None when no such sequence exists; a _BudgetExhausted marker when the search gave up first.
        Depth-first over positions: a write set is checked in full once its last position is set and
        against an optimistic bound while partial; labels are tried least-used-nearby first, which finds
        spread-out answers almost without backtracking; interchangeable unused labels are tried once
        (symmetry breaking) and failed states are remembered, which keeps proofs of infeasibility short.
        """
        search = _LabelSearch(self, size, write_quorum, capacity, floor, rng)
        try:
            return search.run()
        except _BudgetExhausted as exhausted:
            return exhausted


class _LabelSearch:
    """State of one depth-first label search (see _LabelledPolicy._search)."""

    def __init__(
        self,
        policy: _LabelledPolicy,
        size: int,
        write_quorum: int,
        capacity: Mapping[Label, int],
        floor: Adherence,
        rng: random.Random,
    ) -> None:
        self.policy = policy
        self.size = size
        self.wq = write_quorum
        self.floor = floor
        self.rng = rng
        self.remaining = dict(capacity)
        self.seq: list[Label | None] = [None] * size
        self.nodes = 0
        self.order = list(capacity)
        self.dead_ends: set[tuple[Any, ...]] = set()
        self.group_shape: dict[str | None, tuple[int, ...]] = {}
        for (group, _), n in capacity.items():
            self.group_shape[group] = (*self.group_shape.get(group, ()), n)
        self.group_shape = {g: tuple(sorted(s)) for g, s in self.group_shape.items()}

    def run(self) -> list[Label] | None:
        if not self._enough_group_incidences() or not self._place(0):
            return None
        return [label for label in self.seq if label is not None]

    def _place(self, position: int) -> bool:
        if position == self.size:
            return True
        state = self._state(position)
        if state in self.dead_ends:
            return False
        for label in self._options(position):
            self.nodes += 1
            if self.nodes > SEARCH_BUDGET and self.floor > Adherence.FAIL:
                raise _BudgetExhausted
            self.seq[position] = label
            self.remaining[label] -= 1
            if self._windows_ok(position) and self._place(position + 1):
                return True
            self.remaining[label] += 1
            self.seq[position] = None
        self.dead_ends.add(state)
        return False

    def _state(self, position: int) -> tuple[Any, ...]:
        """All that the rest of the search depends on: what is left, the labels the next write sets reach
        back to, and the first labels that the wrapping write sets reach forward to."""
        back = tuple(self.seq[max(0, position - self.wq + 1) : position])
        front = tuple(self.seq[: min(self.wq - 1, position)])
        return (position, back, front, tuple(self.remaining[label] for label in self.order))

    def _enough_group_incidences(self) -> bool:
        """Counting bound, checked once before searching.

        Every write set needs `need` distinct groups, and a group with c usable bookies appears in at most
        min(E, c * WQ) of the E write sets (each bookie is in WQ of them).
        """
        if self.floor == Adherence.FAIL:
            return True
        need = self.policy._groups_needed(self.wq, self.floor)
        usable: Counter[str] = Counter()
        for label, n in self.remaining.items():
            if label[0] is not None and self.policy._label_problem(label) is None:
                usable[label[0]] += n
        return sum(min(self.size, n * self.wq) for n in usable.values()) >= need * self.size

    def _windows_ok(self, position: int) -> bool:
        """Every write set containing `position` is at `floor` (complete) or can still reach it (partial)."""
        if self.floor == Adherence.FAIL:
            return True
        open_labels = [label for label, left in self.remaining.items() if left > 0]
        open_groups: set[str | None] = {label[0] for label in open_labels if label[0] is not None}
        for start in {(position - j) % self.size for j in range(self.wq)}:
            window = [self.seq[k] for k in write_set(start, self.size, self.wq)]
            labels = [label for label in window if label is not None]
            free = len(window) - len(labels)
            if free == 0:
                if self.policy._window_level(labels) < self.floor:
                    return False
            elif not self._may_reach(labels, free, open_labels, open_groups):
                return False
        return True

    def _may_reach(
        self, labels: Sequence[Label], free: int, open_labels: Sequence[Label], open_groups: set[str | None]
    ) -> bool:
        """Optimistic bound for a partial write set: sound pruning, never rejects a completable one.

        Free slots can at best each bring a group not yet in the write set (only groups with bookies left),
        after first repairing what needs a bookie of an existing group (zone-aware upgrade domains).
        """
        if any(self.policy._label_problem(label) is not None for label in labels):
            return False
        groups = {label[0] for label in labels if label[0] is not None}
        repairs = self.policy._repairs_needed(labels, open_labels)
        if repairs is None or repairs > free:
            return False
        reachable = len(groups) + min(free - repairs, len(open_groups - groups))
        return reachable >= self.policy._groups_needed(self.wq, self.floor)

    def _options(self, position: int) -> list[Label]:
        """Labels to try at `position`: best first, one representative per class of interchangeable labels."""
        around = {(position + d) % self.size for d in range(-(self.wq - 1), self.wq)} - {position}
        near = [label for label in (self.seq[k] for k in around) if label is not None]
        near_groups = Counter(label[0] for label in near)
        near_labels = Counter(near)
        used = {label for label in self.seq if label is not None}
        used_groups = {label[0] for label in used}
        seen: set[tuple[Any, ...]] = set()
        options: list[tuple[tuple[int, int, int, int, float], Label]] = []
        for label, left in self.remaining.items():
            if left <= 0:
                continue
            signature = self._signature(label, used, used_groups)
            if signature in seen:
                continue
            seen.add(signature)
            key = (
                self.policy._penalty(label),
                near_groups[label[0]],
                near_labels[label],
                -left,
                self.rng.random(),
            )
            options.append((key, label))
        options.sort(key=lambda item: item[0])
        return [label for _, label in options]

    def _signature(self, label: Label, used: set[Label], used_groups: set[str | None]) -> tuple[Any, ...]:
        """Equal signatures ⇒ swapping the two labels (or their whole groups) maps solutions to solutions."""
        if label in used:
            return ("used", label)
        problem = self.policy._label_problem(label) is not None
        penalty = self.policy._penalty(label)
        if label[0] in used_groups or label[0] is None:
            return ("fresh-label", label[0], self.remaining[label], problem, penalty)
        return ("fresh-group", self.group_shape[label[0]], self.remaining[label], problem, penalty)


def _draw(labels: Sequence[Label], pools: Mapping[Label, list[str]]) -> tuple[str, ...]:
    """Turn a label sequence into bookies, taking each label's (already shuffled) pool in order."""
    taken: Counter[Label] = Counter()
    chosen = []
    for label in labels:
        chosen.append(pools[label][taken[label]])
        taken[label] += 1
    return tuple(chosen)


def _where(bookie: str, topology: Topology) -> str:
    suffix = "" if topology.is_mapped(bookie) else ", unmapped"
    return f"{bookie} ({topology.location(bookie)}{suffix})"


def _names(groups: Iterable[str | None]) -> str:
    return ", ".join(sorted(g if g is not None else "unknown" for g in set(groups)))


# ---------------------------------------------------------------------------------------------------------
# the four policies
# ---------------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class DefaultPolicy(_LabelledPolicy):
    """BookKeeper's DefaultEnsemblePlacementPolicy: no topology; every ensemble is MEETS_STRICT."""

    name: ClassVar[str] = "default"

    @property
    def default_location(self) -> str:
        return DEFAULT_RACK

    def evaluate(
        self, ensemble: Sequence[str], write_quorum: int, ack_quorum: int, topology: Topology
    ) -> tuple[Adherence, list[str]]:
        return Adherence.MEETS_STRICT, []

    def _label(self, bookie: str, topology: Topology) -> Label:
        return ("*", "*")

    def _judge_window(self, labels: Sequence[Label]) -> tuple[Adherence, str]:
        return Adherence.MEETS_STRICT, ""


@dataclasses.dataclass(frozen=True)
class RackAwarePolicy(_LabelledPolicy):
    """RackawareEnsemblePlacementPolicy: every write set spans >= min(WQ, min_racks_per_write_quorum) racks.

    A rack is a bookie's whole network location, as in BookKeeper. Unlike BookKeeper, which counts only the
    bookies in its `knownBookies` (writable right now), every member is judged by the topology, an unmapped
    one on `default_rack`: the audit judges the placement recorded in metadata, not today's liveness.
    Never MEETS_SOFT.
    """

    min_racks_per_write_quorum: int = 2
    enforce_min_racks: bool = False
    default_rack: str = DEFAULT_RACK

    name: ClassVar[str] = "rackaware"

    def __post_init__(self) -> None:
        if self.min_racks_per_write_quorum < 1:
            raise ValueError("min_racks_per_write_quorum must be >= 1")
        rack = normalize_location(self.default_rack)
        if rack is None:
            raise ValueError("default_rack must be a non-empty location")
        object.__setattr__(self, "default_rack", rack)

    @property
    def default_location(self) -> str:
        return self.default_rack

    @property
    def _strict(self) -> bool:
        return self.enforce_min_racks

    def _label(self, bookie: str, topology: Topology) -> Label:
        rack = self.default_rack if topology.is_default(bookie) else topology.location(bookie)
        return (rack, rack)

    def _penalty(self, label: Label) -> int:
        return 1 if label[1] == self.default_rack else 0

    def _label_problem(self, label: Label) -> str | None:
        if self.enforce_min_racks and label[1] == self.default_rack:
            return (
                f"on the default rack {self.default_rack} while enforce_min_racks "
                "(enforceMinNumRacksPerWriteQuorum) is set"
            )
        return None

    def _groups_needed(self, write_quorum: int, floor: Adherence) -> int:
        return min(write_quorum, self.min_racks_per_write_quorum)

    def _judge_window(self, labels: Sequence[Label]) -> tuple[Adherence, str]:
        racks = {label[1] for label in labels}
        need = min(len(labels), self.min_racks_per_write_quorum)
        if len(racks) < need:
            return Adherence.FAIL, (
                f"spans {len(racks)} rack(s) ({_names(racks)}), needs {need} "
                f"= min(WQ, min_racks_per_write_quorum={self.min_racks_per_write_quorum})"
            )
        return Adherence.MEETS_STRICT, ""

    def bookkeeper_adherence(
        self,
        ensemble: Sequence[str],
        write_quorum: int,
        ack_quorum: int,
        topology: Topology,
        *,
        writable: Collection[str],
    ) -> Adherence:
        """RackawareEnsemblePlacementPolicyImpl.isEnsembleAdheringToPlacementPolicy: only bookies in its
        `knownBookies` (writable now) add their rack to a write set; down and read-only ones add nothing."""
        ens = tuple(ensemble)
        if not ens:
            return Adherence.FAIL
        known = frozenset(writable)
        need = min(write_quorum, self.min_racks_per_write_quorum)
        for first in range(len(ens)):
            members = (ens[(first + j) % len(ens)] for j in range(write_quorum))
            racks = {self._label(b, topology)[1] for b in members if b in known}
            if len(racks) < need or (self.enforce_min_racks and self.default_rack in racks):
                return Adherence.FAIL
        return Adherence.MEETS_STRICT


@dataclasses.dataclass(frozen=True)
class RegionAwarePolicy(_LabelledPolicy):
    """Region-aware placement over ``/region/rack`` locations, with a real adherence check.

    BookKeeper's RegionAwareEnsemblePlacementPolicy answers MEETS_STRICT unconditionally (TODO, issue #1898).
    Ours: FAIL when a write set spans fewer than min(WQ, min_regions_for_durability) known regions, or a
    bookie lies outside `regions_to_write` (when set); MEETS_SOFT when the bookies a write set has in one
    region sit on fewer than min(their number, min_racks_per_write_quorum) racks; MEETS_STRICT otherwise.
    Bookies of unknown region count towards no region. Placement is enforced (NotEnoughBookies rather than a
    failing ensemble) when `regions_to_write` is set, as BookKeeper enforces durability only then.
    """

    regions_to_write: tuple[str, ...] = ()
    min_regions_for_durability: int = 2
    min_racks_per_write_quorum: int = 2

    name: ClassVar[str] = "regionaware"
    _has_soft: ClassVar[bool] = True
    _group_noun: ClassVar[str] = "region"

    def __post_init__(self) -> None:
        if self.min_regions_for_durability < 1:
            raise ValueError("min_regions_for_durability must be >= 1")
        if self.min_racks_per_write_quorum < 1:
            raise ValueError("min_racks_per_write_quorum must be >= 1")
        regions = tuple(r.strip().strip("/") for r in self.regions_to_write if r.strip().strip("/"))
        object.__setattr__(self, "regions_to_write", regions)

    @property
    def default_location(self) -> str:
        return DEFAULT_REGION_AND_RACK

    def bookkeeper_adherence(
        self,
        ensemble: Sequence[str],
        write_quorum: int,
        ack_quorum: int,
        topology: Topology,
        *,
        writable: Collection[str],
    ) -> Adherence:
        """RegionAwareEnsemblePlacementPolicy returns MEETS_STRICT for every ensemble (TODO, #1898)."""
        return Adherence.MEETS_STRICT

    @property
    def _strict(self) -> bool:
        return bool(self.regions_to_write)

    def _label(self, bookie: str, topology: Topology) -> Label:
        location = topology.location(bookie)
        if location == DEFAULT_REGION_AND_RACK:
            return (None, location)
        return (topology.region(bookie), location)

    def _label_problem(self, label: Label) -> str | None:
        if self.regions_to_write and label[0] not in self.regions_to_write:
            where = f"region {label[0]}" if label[0] is not None else "unknown region"
            listed = ", ".join(self.regions_to_write)
            return f"{where} is not in regions_to_write (reppRegionsToWrite) [{listed}]"
        return None

    def _groups_needed(self, write_quorum: int, floor: Adherence) -> int:
        return min(write_quorum, self.min_regions_for_durability)

    def _judge_window(self, labels: Sequence[Label]) -> tuple[Adherence, str]:
        regions = {label[0] for label in labels if label[0] is not None}
        need = min(len(labels), self.min_regions_for_durability)
        if len(regions) < need:
            return Adherence.FAIL, (
                f"spans {len(regions)} known region(s) ({_names(regions) or 'none'}), needs {need} "
                f"= min(WQ, min_regions_for_durability={self.min_regions_for_durability})"
            )
        for region in sorted(regions):
            racks = [label[1] for label in labels if label[0] == region]
            want = min(len(racks), self.min_racks_per_write_quorum)
            if len(set(racks)) < want:
                return Adherence.MEETS_SOFT, (
                    f"its {len(racks)} bookies in region {region} sit on {len(set(racks))} rack(s) "
                    f"({_names(racks)}), wants {want} = min(bookies in region, "
                    f"min_racks_per_write_quorum={self.min_racks_per_write_quorum})"
                )
        return Adherence.MEETS_STRICT, ""


@dataclasses.dataclass(frozen=True)
class ZoneAwarePolicy(_LabelledPolicy):
    """ZoneawareEnsemblePlacementPolicyImpl over ``/zone/upgradedomain`` locations.

    FAIL when E is not a multiple of WQ, WQ <= min_zones, a bookie is unresolved (default location or not
    exactly two components), a write set spans fewer than min_zones zones, or a zone with several bookies in
    a write set has them in a single upgrade domain. A write set spanning >= min(WQ, desired_zones) zones is
    strict, fewer is MEETS_SOFT; the ensemble gets its worst write set. BookKeeper applies the E % WQ and
    WQ <= min_zones rules in adherence even when enforce_strict is off (that switch only relaxes choosing).
    """

    min_zones: int = 2
    desired_zones: int = 3
    enforce_strict: bool = True

    name: ClassVar[str] = "zoneaware"
    _has_soft: ClassVar[bool] = True
    _group_noun: ClassVar[str] = "zone"

    def __post_init__(self) -> None:
        if self.min_zones < 1:
            raise ValueError("min_zones must be >= 1")
        if self.desired_zones < self.min_zones:
            raise ValueError("desired_zones must be >= min_zones")

    @property
    def default_location(self) -> str:
        return DEFAULT_ZONE_AND_UPGRADEDOMAIN

    @property
    def _strict(self) -> bool:
        return self.enforce_strict

    def _label(self, bookie: str, topology: Topology) -> Label:
        location = topology.location(bookie)
        parts = location_components(location)
        if topology.is_default(bookie) or location == DEFAULT_ZONE_AND_UPGRADEDOMAIN or len(parts) != 2:
            return (None, "")
        return (parts[0], parts[1])

    def _label_problem(self, label: Label) -> str | None:
        if label[0] is None:
            return "network location unresolved (zone-aware needs /zone/upgradedomain)"
        return None

    def _ledger_problems(self, ensemble_size: int, write_quorum: int) -> list[str]:
        problems = []
        if ensemble_size % write_quorum != 0:
            problems.append(
                f"ensemble size {ensemble_size} is not a multiple of write quorum {write_quorum} "
                "(wrapping write sets could fall back to fewer zones)"
            )
        if write_quorum <= self.min_zones:
            problems.append(
                f"write quorum {write_quorum} <= min_zones (minNumZonesPerWriteQuorum) {self.min_zones} "
                "(a lost zone could leave no replacement)"
            )
        return problems

    def _groups_needed(self, write_quorum: int, floor: Adherence) -> int:
        if floor >= Adherence.MEETS_STRICT:
            return max(self.min_zones, min(write_quorum, self.desired_zones))
        return self.min_zones

    def _repairs_needed(self, labels: Sequence[Label], open_labels: Collection[Label]) -> int | None:
        """Zones holding several bookies in one upgrade domain each need a bookie from another domain."""
        domains: dict[str | None, set[str]] = {}
        count: Counter[str | None] = Counter()
        for zone, domain in labels:
            domains.setdefault(zone, set()).add(domain)
            count[zone] += 1
        broken = [zone for zone, n in count.items() if zone is not None and n > 1 and len(domains[zone]) < 2]
        for zone in broken:
            if not any(z == zone and d not in domains[zone] for z, d in open_labels):
                return None
        return len(broken)

    def _judge_window(self, labels: Sequence[Label]) -> tuple[Adherence, str]:
        known = [label for label in labels if label[0] is not None]
        zones = Counter(label[0] for label in known)
        if len(zones) < self.min_zones:
            return Adherence.FAIL, (
                f"spans {len(zones)} zone(s) ({_names(zones) or 'none'}), needs min_zones={self.min_zones}"
            )
        for zone, count in sorted(zones.items(), key=lambda kv: str(kv[0])):
            domains = {label[1] for label in known if label[0] == zone}
            if count > 1 and len(domains) < 2:
                return Adherence.FAIL, (
                    f"its {count} bookies in zone {zone} share one upgrade domain ({_names(domains)}), "
                    "needs 2"
                )
        desired = min(len(labels), self.desired_zones)
        if len(zones) < desired:
            return Adherence.MEETS_SOFT, (
                f"spans {len(zones)} zones ({_names(zones)}), desired {desired} "
                f"= min(WQ, desired_zones={self.desired_zones})"
            )
        return Adherence.MEETS_STRICT, ""


# ---------------------------------------------------------------------------------------------------------
# ledgers and settings
# ---------------------------------------------------------------------------------------------------------
def ledger_adherence(
    metadata: LedgerMetadata, policy: PlacementPolicy, topology: Topology
) -> tuple[Adherence, list[tuple[int, Adherence, list[str]]]]:
    """Worst adherence over the ledger's segments, plus (segment index, adherence, reasons) per segment.

    Like BookKeeper's placementPolicyCheck every segment counts, including an empty last one; a ledger
    without segments is vacuously MEETS_STRICT (metadata checks report that shape, not placement).
    """
    results = []
    for i, segment in enumerate(metadata.segments):
        level, reasons = policy.evaluate(
            segment.ensemble, metadata.write_quorum, metadata.ack_quorum, topology
        )
        results.append((i, level, reasons))
    worst = min((level for _, level, _ in results), default=Adherence.MEETS_STRICT)
    return worst, results


POLICY_KINDS = ("default", "rackaware", "regionaware", "zoneaware")


def policy_kind(name: str) -> str | None:
    """Canonical policy name for `name`: ours ("rackaware", "rack-aware") or BookKeeper's class name
    (``org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy``); None when unknown."""
    short = name.strip().rsplit(".", 1)[-1].lower().replace("-", "").replace("_", "")
    for suffix in ("ensembleplacementpolicyimpl", "ensembleplacementpolicy"):
        if short.endswith(suffix):
            short = short[: -len(suffix)]
    return short if short in POLICY_KINDS else None


