"""A real Java bookie on SortedLedgerStorage pins every index page a listing reads, until it restarts.

InterleavedLedgerStorage.getListOfEntriesOfLedger walks the ledger's index pages through
LedgerCacheImpl.getEntriesIterator, which takes each page with `getLEP()` (IndexInMemPageMgr
.getLedgerEntryPage: the page is marked in use) and never releases it; reads release theirs
(IndexInMemPageMgr.getEntryOffset's `finally`). A page in use is never evicted, so once `pageLimit` pages
are pinned, any request that needs another page loops in IndexInMemPageMgr.grabCleanPage ("Could not grab a
clean page ... force flushing dirty ledgers") on a read thread, for ever, and is never answered. That is why
bkaudit budgets the pages its listings pin on a Java bookie (`[checker] java_listing_max_pages`,
docs/compatibility.md).

Everything here is BookKeeper's: the bookie, and its Java client asking it (BookieClient's
getListOfEntriesOfLedger, which the Auditor's replicasCheck calls, and readEntry). The bookie gets a small
`pageLimit` so that a few dozen ledgers reach it; nothing else differs from its defaults.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bkaudit.cluster.bookies import LOG_FILE
from bkaudit.cluster.local import LocalCluster
from tests.fixtures.cluster import running_cluster

PAGE_LIMIT = 24
LEDGERS = 2 * PAGE_LIMIT
OVER = 3  # listings tried past the limit (each waits out the client's timeout)
OPEN_FILES = 4  # openFileLimit: index files kept open for writes, twice as many for reads


def open_index_files(pid: int) -> int:
    """Index files (`<ledger>.idx`) the bookie's process has open now."""
    fds = Path(f"/proc/{pid}/fd")
    count = 0
    for fd in fds.iterdir():
        try:
            count += fds.joinpath(fd.name).readlink().name.endswith(".idx")
        except OSError:  # closed meanwhile
            continue
    return count


@pytest.fixture
def cluster(zk_server, tmp_path_factory, java_bookkeeper) -> Iterator[LocalCluster]:  # type: ignore[no-untyped-def]
    with running_cluster(zk_server, tmp_path_factory, bookies=1, racks=1, java={0: "sorted"},
                         java_settings={"pageLimit": PAGE_LIMIT, "openFileLimit": OPEN_FILES}) as c:
        yield c


def test_listings_pin_index_pages_until_the_bookie_serves_nothing_new(cluster: LocalCluster) -> None:
    client = cluster.java_client()
    bookie = cluster.bookies[0]
    ids = [client.call("create", ensemble=1, wq=1, aq=1, digest="CRC32C", password="pw", entries=1,
                       size=20)["ledger"] for _ in range(LEDGERS)]
    cluster.restart_bookies()  # entries out of the memtable, into the index; no page in memory

    def listed(ledger: int) -> str:
        return str(client.call("list", bookie=bookie.id, ledger=ledger, timeout_ms=3000, upto=1)["answer"])

    # reads take a page and an index file and give both back: twice as many ledgers as pages, all served,
    # twice over, with no more index files open than the bookie's caches keep
    for _ in range(2):
        assert client.call("readbookie", bookie=bookie.id, reads=[[i, 0] for i in ids])["failed"] == []
    assert bookie.pid is not None
    assert open_index_files(bookie.pid) <= 3 * OPEN_FILES
    # listings keep theirs: the bookie lists as many ledgers as it has pages, then answers no new one, and
    # the index file of every ledger it listed stays open (PageEntriesIterableImpl is never closed)
    answers = [listed(i) for i in ids[: PAGE_LIMIT + OVER]]
    served = answers.index("timeout") if "timeout" in answers else len(answers)
    assert served == PAGE_LIMIT, answers
    assert open_index_files(bookie.pid) >= PAGE_LIMIT
    assert answers[served:] == ["timeout"] * OVER, answers
    # nor a read that needs a page it has no room for: the ledgers listed last are far from the cache
    failed = client.call("readbookie", bookie=bookie.id, reads=[[i, 0] for i in ids[-3:]])["failed"]
    assert [f[0] for f in failed] == ids[-3:], failed
    log = (Path(bookie.data_dir) / LOG_FILE).read_text(errors="replace")
    assert "Could not grab a clean page" in log
    # a restart unpins everything: the same ledgers are listed again
    cluster.restart_bookies()
    assert [listed(i) for i in ids[PAGE_LIMIT : PAGE_LIMIT + OVER]] == ["entries"] * OVER
