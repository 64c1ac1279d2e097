"""Bookie lifecycle states and the transitions between them (pure: no I/O, no clock).

The states and rules of the lifecycle design (shared/seeds/001): Active (the default, no state znode),
Draining, DrainingFailed, Drained, and "removed" (cookie and state deleted together). Who may make a
transition is part of the rule: the Auditor decides Draining -> Drained / DrainingFailed from replication
results; an operator starts a drain, accepts a failed one after fixing its ledgers, and removes a drained
bookie.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass

from bkaudit.errors import FormatError


class LifecycleState(enum.Enum):
    ACTIVE = "Active"
    DRAINING = "Draining"
    DRAINING_FAILED = "DrainingFailed"
    DRAINED = "Drained"
    REMOVED = "Removed"  # target of the final transition only: never stored

    @property
    def serves_reads_only(self) -> bool:
        """Draining, DrainingFailed and Drained bookies take no new writes (they run read-only)."""
        return self in (LifecycleState.DRAINING, LifecycleState.DRAINING_FAILED, LifecycleState.DRAINED)

    @classmethod
    def parse(cls, text: str) -> LifecycleState:
        """Case-insensitive, with or without separators (`draining-failed`, `DRAINING_FAILED`)."""
        key = text.replace("-", "").replace("_", "").replace(" ", "").lower()
        for state in cls:
            if state.value.lower() == key:
                return state
        known = ", ".join(s.value for s in cls)
        raise ValueError(f"unknown lifecycle state {text!r} (known: {known})")


class Actor(enum.Enum):
    OPERATOR = "operator"
    AUDITOR = "auditor"


# (from, to) -> who may make it
TRANSITIONS: dict[tuple[LifecycleState, LifecycleState], Actor] = {
    (LifecycleState.ACTIVE, LifecycleState.DRAINING): Actor.OPERATOR,
    (LifecycleState.DRAINING, LifecycleState.DRAINED): Actor.AUDITOR,
    (LifecycleState.DRAINING, LifecycleState.DRAINING_FAILED): Actor.AUDITOR,
    (LifecycleState.DRAINING_FAILED, LifecycleState.DRAINED): Actor.OPERATOR,
    (LifecycleState.DRAINED, LifecycleState.REMOVED): Actor.OPERATOR,
}


class TransitionRefused(ValueError):
    """The transition is not allowed from the current state, by this actor, or now (`blockers` says why)."""

    def __init__(self, message: str, *, blockers: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.blockers = blockers


def check_transition(current: LifecycleState, target: LifecycleState, *, actor: Actor) -> None:
    """Raise TransitionRefused unless `actor` may move a bookie from `current` to `target`."""
    allowed = TRANSITIONS.get((current, target))
    if allowed is None:
        nexts = sorted(t.value for (f, t) in TRANSITIONS if f is current)
        raise TransitionRefused(
            f"{current.value} -> {target.value} is not a lifecycle transition "
            f"(from {current.value}: {', '.join(nexts) or 'none'})"
        )
    if allowed is not actor:
        raise TransitionRefused(
            f"{current.value} -> {target.value} is made by the {allowed.value}, not the {actor.value}"
        )


@dataclass(frozen=True)
class StateRecord:
    """What the state znode holds: the state and who set it, when and why."""

    state: LifecycleState
    by: str
    at: str  # ISO-8601 UTC
    reason: str = ""
    previous: LifecycleState | None = None

    def to_dict(self) -> dict[str, str | None]:
        return {
            "state": self.state.value,
            "previous": self.previous.value if self.previous else None,
            "by": self.by,
            "at": self.at,
            "reason": self.reason,
        }


def encode(record: StateRecord) -> bytes:
    return json.dumps(record.to_dict(), sort_keys=True).encode()


def parse(data: bytes) -> StateRecord:
    """The state znode's JSON; FormatError on anything else (a bad znode is reported, never guessed)."""
    try:
        raw = json.loads(data.decode())
        if not isinstance(raw, dict):
            raise TypeError("not an object")
        previous = raw.get("previous")
        return StateRecord(
            LifecycleState.parse(str(raw["state"])),
            str(raw.get("by", "")),
            str(raw.get("at", "")),
            str(raw.get("reason", "")),
            LifecycleState.parse(previous) if previous else None,
        )
    except (UnicodeDecodeError, ValueError, TypeError, KeyError) as exc:
        raise FormatError(f"bad lifecycle state record: {exc}") from exc
