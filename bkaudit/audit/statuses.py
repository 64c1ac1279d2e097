"""What a bookie's answer to one (ledger, bookie) question can be: the one definition of answer statuses.

A status is a string because it travels through Arrow columns, Delta tables and JSON details: BookKeeper's
StatusCode names (BookkeeperProtocol.proto) for what a bookie sent, and a few names of our own for what we
judged about an answer or about a call that got none. Three classes, used by the fan-out, the per-ledger
combine, the bookie statistics and the availability checks alike:

* **answered** (`ANSWERED`): OK or ENOLEDGER, a final answer about the ledger (never retried); with a lost
  bookie's LOST_BOOKIE these are the **settled** statuses (`SETTLED`): what the bookie holds is known;
* **judged** (`is_transport_failure` is False): the bookie was reached and answered something, even an error
  or undecodable bytes, or we know why it was not asked (not registered, never checked);
* **transport failure**: no BookKeeper answer at all (UNAVAILABLE, CIRCUIT_OPEN, a timeout, ...).
"""

from __future__ import annotations

STATUS_OK = "OK"
"""The bookie answered with its list of entries (or the entries read back)."""
STATUS_NO_LEDGER = "ENOLEDGER"
"""The bookie answered that it does not know the ledger: it holds none of its entries."""
STATUS_NO_ENTRY = "ENOENTRY"
"""A read found no such entry on the bookie (read evidence: the entry is missing there)."""
STATUS_CORRUPT = "CORRUPT"
"""A read returned an entry whose digest does not verify (read evidence)."""
STATUS_NOT_CHECKED = "NOT_CHECKED"
"""No answer was recorded for a bookie that had to be asked (never expected; reported, never dropped)."""
STATUS_INVALID_RESPONSE = "INVALID_RESPONSE"
"""The bookie answered, but its bytes do not decode as AvailabilityOfEntriesOfLedger."""
STATUS_NOT_REGISTERED = "NOT_REGISTERED"
"""The bookie has no registration to resolve an endpoint from (and no static address was configured)."""
STATUS_LOST_BOOKIE = "LOST_BOOKIE"
"""The bookie is lost: not registered, and it gave no answer through the delayed re-check. BookKeeper's
Auditor marks its ledgers under-replicated (AuditorBookieCheckTask) and LedgerChecker counts its fragments bad
without asking it (BookieWatcher.isBookieUnavailable): its copies are not copies. Judged on the driver after
the re-check, never sent by a bookie."""
STATUS_CIRCUIT_OPEN = "CIRCUIT_OPEN"
"""Not asked: earlier calls to the bookie failed at the transport level in this attempt (see the fan-out)."""
STATUS_UNAVAILABLE = "UNAVAILABLE"
"""The call got no answer (connection refused or reset, timeout): `bkaudit.errors.BookieError`'s status."""
STATUS_UNKNOWN_LEDGER_STATE = "EUNKNOWNLEDGERSTATE"
"""The ledger is in limbo on that bookie (BookKeeper's data-integrity check after it lost its data): it may
or may not hold the entries. Judged, never final: retried, then reported as unverifiable on that bookie."""
STATUS_BAD_REQUEST = "EBADREQ"
"""BookKeeper's EBADREQ; also what we record when a batch answer lacks one of the ledgers asked for."""

BOOKKEEPER_STATUSES = frozenset(
    {
        "EOK",
        STATUS_NO_LEDGER,
        STATUS_NO_ENTRY,
        STATUS_BAD_REQUEST,
        "EIO",
        "EUA",
        "EBADVERSION",
        "EFENCED",
        "EREADONLY",
        "ETOOMANYREQUESTS",
        STATUS_UNKNOWN_LEDGER_STATE,
    }
)
"""Statuses a bookie sends (BookkeeperProtocol StatusCode): the bookie is reachable, the ledger may not be."""

ANSWERED = frozenset({STATUS_OK, STATUS_NO_LEDGER})
"""The two final answers about a ledger; everything else is retried after the delay (BP-34)."""

SETTLED = frozenset({*ANSWERED, STATUS_LOST_BOOKIE})
"""What the bookie holds of the ledger is known: an answer, or a lost bookie (nothing we can read)."""

JUDGED = frozenset({STATUS_OK, *BOOKKEEPER_STATUSES, STATUS_INVALID_RESPONSE, STATUS_NOT_REGISTERED,
                    STATUS_NOT_CHECKED, STATUS_LOST_BOOKIE})
"""Statuses that are not transport failures: the bookie answered, or we know why it was not asked."""


def is_answered(status: str) -> bool:
    """A final answer about the ledger (OK or ENOLEDGER)."""
    return status in ANSWERED


def is_transport_failure(status: str) -> bool:
    """True when the call never got a BookKeeper answer (connection refused, timeout, stream reset, ...)."""
    return status not in JUDGED
