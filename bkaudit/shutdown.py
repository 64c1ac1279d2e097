"""Ending a bkaudit process once its work is done, without the native-thread abort at interpreter teardown.

Why: `bkaudit violations --json` exited 134 ("terminate called without an active exception") in about 1
run in 20 under load, after printing its output. A gdb backtrace of the abort shows the main thread in
Py_FinalizeEx and an Arrow ThreadPool worker (a C++ std::thread) being force-unwound by pthread_exit.
delta-rs reads tables through pyarrow datasets over a *Python* filesystem (deltalake's DeltaStorageHandler,
a PyFileSystem), so Arrow's pool threads call back into Python; a thread that asks for the GIL while the
interpreter finalises is ended by CPython (3.11-3.13) with pthread_exit, and that forced unwind through the
noexcept entry frame of std::thread calls std::terminate. Reported upstream as delta-io/delta-rs#2184 and
apache/arrow#34314. Nothing of ours is wrong at that moment: the output is written, and the threads belong
to libraries that offer no way to join them.

The sound fix is to not tear the interpreter down after a command completed: do what a normal exit does that
matters to us, in the same order (wait for our non-daemon threads, run atexit handlers, flush stdio), then
`os._exit(code)`, which skips C++ static destructors and the finalisation in which the pool threads die.
Resources that must be released (ZooKeeper sessions, Spark, files) are closed by the commands themselves.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, NoReturn, TypeVar

T = TypeVar("T")

STOP_GRACE_S = 20.0
"""How long a long-running command (`autorecovery run`, `admin serve`; `bookie run` adds its drain timeout)
may take to stop once asked: inside Kubernetes' default 30 s termination grace period."""


def exit_process(code: int) -> NoReturn:
    """Flush, run atexit handlers, and end the process with `code` without interpreter finalisation."""
    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not current and not thread.daemon and thread.is_alive():
            thread.join()  # what the interpreter would wait for before finalising
    try:
        atexit._run_exitfuncs()  # logging.shutdown, pyspark's gateway stop, tempfile cleanups ...
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe (`bkaudit ... | head`) must not change the code
                pass
        os._exit(code)


class StopWatchdog:
    """Bounds the stop of a long-running command whatever it is blocked on (a ZooKeeper call while ZooKeeper
    is down waits for a reconnect that may never come): once `arm()`ed, the process ends within `grace_s` —
    if the orderly stop has not called `done()` by then, one line on stderr and `os._exit(code)`.

    Locks, votes and registrations a process holds in ZooKeeper are ephemeral: what it could not release
    goes when its session expires, as after a crash; only the process's own work is cut short.
    """

    def __init__(self, grace_s: float, what: str, *, code: int = 1) -> None:
        self.grace_s = grace_s
        self.what = what
        self.code = code
        self._armed = threading.Lock()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def armed(self) -> bool:
        return self._thread is not None

    def arm(self) -> None:
        """Start the clock (idempotent: the first call counts)."""
        with self._armed:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._watch, name="stop-watchdog", daemon=True)
            self._thread.start()

    def done(self) -> None:
        """The orderly stop finished: the watchdog stands down."""
        self._done.set()

    def _watch(self) -> None:
        if self._done.wait(self.grace_s):
            return
        _die(self.code, f"error: {self.what} did not stop within {self.grace_s:g}s; exiting without a clean "
                        "release (what it holds in ZooKeeper expires with its session)")


def _die(code: int, line: str) -> NoReturn:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    with contextlib.suppress(OSError):
        os.write(2, (line + "\n").encode("utf-8", "replace"))
    os._exit(code)


@contextlib.contextmanager
def stop_signals(on_stop: Callable[[], None], watchdog: StopWatchdog) -> Iterator[None]:
    """SIGTERM / SIGINT ask for a graceful stop (`on_stop`) and arm `watchdog`; a second one ends the process
    at once (exit 1: the operator insisted, nothing more was released). Only in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def handler(signum: int, _frame: Any) -> None:
        if watchdog.armed:
            _die(watchdog.code, f"error: {watchdog.what}: signal {signum} again, exiting at once")
        watchdog.arm()
        on_stop()

    for sig in previous:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def within(seconds: float, fn: Callable[[], T], *, name: str = "bounded") -> tuple[bool, T | None]:
    """Run `fn` on a daemon thread for at most `seconds`: (True, its result), or (False, None) when it did not
    finish (it is left running; the process is about to end) or raised (logged by the caller's `fn`)."""
    result: list[T] = []

    def run() -> None:
        with contextlib.suppress(Exception):
            result.append(fn())

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    thread.join(max(0.0, seconds))
    return (True, result[0]) if result else (False, None)


__all__ = ["STOP_GRACE_S", "StopWatchdog", "exit_process", "stop_signals", "within"]
