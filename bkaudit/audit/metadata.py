"""Metadata that cannot be checked at all: `metadata_unparseable` (critical).

Two shapes of the same problem: the snapshot could not decode the znode (`parse_error` set, raw bytes kept
for forensics), or it decoded into something BookKeeper's own `LedgerMetadataImpl` would refuse (quorum sizes
out of order, an ensemble of the wrong size, segments going backwards). Either way no reader can open the
ledger, and the other checks cannot judge it, so it is critical and one row per ledger.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from bkaudit.audit.base import Category, Check, Finding
from bkaudit.audit.details import MetadataDetail
from bkaudit.model.shape import LedgerShape


@dataclass(frozen=True, slots=True)
class MetadataRecord:
    """A ledger row of the snapshot: either a parse error or a shape."""

    ledger_id: int
    parse_error: str | None = None
    shape: LedgerShape | None = None
    raw_size: int | None = None
    version: int | None = None


class MetadataCheck(Check[MetadataRecord]):
    """Unparseable or self-contradictory metadata."""

    name: ClassVar[str] = "metadata"
    categories: ClassVar[tuple[Category, ...]] = (Category.METADATA_UNPARSEABLE,)

    def evaluate(self, subject: MetadataRecord) -> list[Finding]:
        if subject.parse_error:
            return [
                Finding(
                    category=Category.METADATA_UNPARSEABLE,
                    ledger_id=subject.ledger_id,
                    facts=MetadataDetail(subject.parse_error, parsed=False, raw_bytes=subject.raw_size),
                ).stamped(subject.version)
            ]
        if subject.shape is None:
            return []
        problems = subject.shape.problems()
        if not problems:
            return []
        return [
            Finding(
                category=Category.METADATA_UNPARSEABLE,
                ledger_id=subject.ledger_id,
                facts=MetadataDetail("; ".join(problems), parsed=True, problems=tuple(problems)),
            ).stamped(subject.version)
        ]
