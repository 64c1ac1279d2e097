"""The process-wide asyncio event loop that carries every native bookie connection.

One daemon thread runs it; connections, reads and writes for all bookies are multiplexed there, so no thread
exists per connection or per request. A forked child (Spark's Python workers) gets its own loop: the parent's
thread does not exist in the child.
"""

from __future__ import annotations

import asyncio
import os
import threading

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None
_pid = 0


def get() -> asyncio.AbstractEventLoop:
    """The running I/O loop, started on first use (and again after a fork)."""
    global _loop, _thread, _pid
    loop = _loop
    if loop is not None and _pid == os.getpid():
        return loop
    with _lock:
        if _loop is None or _pid != os.getpid():
            _loop = asyncio.new_event_loop()
            _pid = os.getpid()
            _thread = threading.Thread(target=_loop.run_forever, name="bookie-io", daemon=True)
            _thread.start()
        return _loop


def in_loop() -> bool:
    """True on the I/O loop's own thread (where blocking on the loop would deadlock)."""
    return _thread is not None and threading.current_thread() is _thread
