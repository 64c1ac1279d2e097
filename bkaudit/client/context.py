"""What every ledger operation of one client shares: metadata store, bookie connections, placement."""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from bkaudit.client.directory import BookieDirectory
from bkaudit.client.settings import ClientSettings
from bkaudit.model.ledger import DigestType
from bkaudit.store.ledgers import MetadataStore


@dataclass(frozen=True)
class ClientContext:
    store: MetadataStore
    pool: Any  # BookieClientPool-like: get(bookie_id) -> BookieClient
    directory: BookieDirectory
    executor: Executor  # ensemble changes run here, off the RPC callback threads
    settings: ClientSettings


def digest_for(ledger_id: int, password: bytes, digest_type: DigestType) -> Any:
    """The entry digest manager of a ledger (bkaudit.formats.entry, imported when first needed)."""
    from bkaudit.formats.entry import DigestManager

    return DigestManager(ledger_id, password, digest_type)


def master_key_for(password: bytes) -> bytes:
    from bkaudit.formats.entry import master_key

    return bytes(master_key(password))
