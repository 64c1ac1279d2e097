"""A bookie's listing as evidence, where Java's can leave out the bookie's newest entry.

Both the checker's fan-out and AutoRecovery's worker judge a bookie from its GET_LIST_OF_ENTRIES_OF_LEDGER
answer; both pass a listing that differs from what the bookie must hold through `confirm_tail` first, so that
an entry Java's interleaved index hid (`formats.availability.listing_may_hide`) is not called missing.
"""

from __future__ import annotations

import logging
from typing import Any

from bkaudit.errors import FormatError
from bkaudit.formats.availability import decode, listing_may_hide, with_entry

log = logging.getLogger(__name__)


def confirm_tail(
    client: Any, ledger_id: int, listed: bytes, last_entry: int | None, *, timeout_s: float
) -> bytes:
    """The listing, with `last_entry` added when the listing may have hidden it and a read finds it there
    (`availability.listing_may_hide`: Java's interleaved index). One read, only for a listing that differs
    from what the bookie must hold; an undecodable listing, or any failed read, leaves `listed` as it is."""
    try:
        if not listing_may_hide(decode(listed), last_entry):
            return listed
    except FormatError:
        return listed
    assert last_entry is not None
    try:
        client.read_entry(ledger_id, last_entry).result(timeout_s)
    except Exception as exc:  # ENOENTRY, ENOLEDGER: missing indeed; anything else proves nothing either way
        log.debug("ledger %s entry %s not confirmed by a read: %s", ledger_id, last_entry, exc)
        return listed
    log.info("ledger %s: the listing hid entry %s, which the bookie holds (a read returned it)",
             ledger_id, last_entry)
    return with_entry(listed, last_entry)
