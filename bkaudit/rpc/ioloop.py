"""The process-wide asyncio event loops that carry every native bookie connection.

A few daemon threads (LOOPS) each run one loop; a client is bound to one of them, round robin, for its whole
life. Connections, reads and writes for all bookies are multiplexed there, so no thread exists per request,
and the work of answering many bookies (response parsing, the callbacks of the futures it completes) is not
serialised on a single thread. A forked child (Spark's Python workers) gets its own loops: the parent's
threads do not exist in the child.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import threading

LOOPS = 4

_lock = threading.Lock()
_loops: list[asyncio.AbstractEventLoop] = []
_threads: set[threading.Thread] = set()
_pid = 0
_next = itertools.count()


def get() -> asyncio.AbstractEventLoop:
    """One of the running I/O loops (round robin), started on first use (and again after a fork)."""
    global _pid
    if not _loops or _pid != os.getpid():
        with _lock:
            if not _loops or _pid != os.getpid():
                loops, threads = [], set()
                for i in range(LOOPS):
                    loop = asyncio.new_event_loop()
                    thread = threading.Thread(target=loop.run_forever, name=f"bookie-io-{i}", daemon=True)
                    thread.start()
                    loops.append(loop)
                    threads.add(thread)
                _loops[:] = loops
                _threads.clear()
                _threads.update(threads)
                _pid = os.getpid()
    return _loops[next(_next) % len(_loops)]


def in_loop() -> bool:
    """True on one of the I/O loops' own threads (where blocking on a loop would deadlock)."""
    return threading.current_thread() in _threads
