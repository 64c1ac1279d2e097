"""confirm_tail: one read decides whether a listing hid the bookie's newest entry (Java's interleaved index).

The client here is a stand-in that answers reads from a set the test chose; what a real Java bookie lists is
tested against one in tests/spark/test_java_checker.py.
"""

from __future__ import annotations

from concurrent.futures import Future

from bkaudit.errors import BookieError
from bkaudit.formats.availability import decode, encode
from bkaudit.rpc.listing import confirm_tail


class Reads:
    def __init__(self, held: set[int], status: str = "ENOENTRY") -> None:
        self.held, self.status, self.asked = held, status, []

    def read_entry(self, ledger_id: int, entry_id: int) -> Future[bytes]:
        self.asked.append((ledger_id, entry_id))
        fut: Future[bytes] = Future()
        if entry_id in self.held:
            fut.set_result(b"entry")
        else:
            fut.set_exception(BookieError(self.status, ledger_id=ledger_id, entry_id=entry_id))
        return fut


def test_a_hidden_entry_the_bookie_holds_is_added() -> None:
    client = Reads({0})
    out = confirm_tail(client, 7, encode([]), 0, timeout_s=1)
    assert list(decode(out)) == [0] and client.asked == [(7, 0)]


def test_an_entry_the_bookie_lacks_stays_missing() -> None:
    for status in ("ENOENTRY", "ENOLEDGER", "UNAVAILABLE"):
        client = Reads(set(), status)
        listed = encode(range(1024))
        assert confirm_tail(client, 7, listed, 1024, timeout_s=1) == listed
        assert client.asked == [(7, 1024)]


def test_no_read_when_the_listing_cannot_have_hidden_it() -> None:
    client = Reads({0, 1, 2, 5})
    for listed, last in ((encode([0, 1, 2]), 2), (encode([0, 1, 5]), 2), (encode([0]), None), (b"junk", 3)):
        assert confirm_tail(client, 7, listed, last, timeout_s=1) == listed
    assert client.asked == []
