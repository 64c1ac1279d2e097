"""bkaudit.client: the ledger client (create, pipelined adds, ensemble change, close, open with fencing and
recovery, reads). See docs/client.md.

    from bkaudit.client import BookKeeper
    from bkaudit.config import ZkSettings
    with BookKeeper.connect(ZkSettings(connect="127.0.0.1:2181")) as bk:
        with bk.create_ledger(3, 2, 2) as ledger:
            ledger.add_entry(b"hello")
        reader = bk.open_ledger(ledger.ledger_id)
"""

from bkaudit.client.bookkeeper import BookKeeper, LedgerClient
from bkaudit.client.handle import WriteHandle
from bkaudit.client.reader import ReadHandle
from bkaudit.client.settings import ClientSettings

__all__ = ["BookKeeper", "ClientSettings", "LedgerClient", "ReadHandle", "WriteHandle"]
