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
import os
import sys
import threading
from typing import NoReturn


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


__all__ = ["exit_process"]
