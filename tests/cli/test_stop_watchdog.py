"""bkaudit.shutdown's stop watchdog (issue 32 item 10): once a long-running command is asked to stop, the
process ends in bounded time whatever its orderly stop is blocked on; a second signal ends it at once.

Each case is a small Python process whose "orderly stop" blocks forever (as a ZooKeeper request waiting for a
reconnect did), signalled by the test.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

PROGRAM = """
import sys, threading
from bkaudit.shutdown import StopWatchdog, stop_signals
stop = threading.Event()
watchdog = StopWatchdog({grace}, "test service")
with stop_signals(stop.set, watchdog):
    print("ready", flush=True)
    stop.wait()
    threading.Event().wait()  # the orderly stop, blocked for good
"""


def run(grace: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM.format(grace=grace)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_blocked_stop_ends_at_the_deadline_with_exit_1(sig: signal.Signals) -> None:
    proc = run(grace=1.5)
    began = time.monotonic()
    proc.send_signal(sig)
    code = proc.wait(timeout=30)
    took = time.monotonic() - began
    assert code == 1 and 1.4 <= took < 10, (code, took)
    err = proc.stderr.read() if proc.stderr else ""
    assert "test service did not stop within 1.5s" in err and "Traceback" not in err, err


def test_a_second_signal_ends_the_stop_at_once() -> None:
    proc = run(grace=60)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    began = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=30)
    assert code == 1 and time.monotonic() - began < 10
    assert "again, exiting at once" in (proc.stderr.read() if proc.stderr else "")


def test_a_stop_that_finishes_disarms_the_watchdog() -> None:
    from bkaudit.shutdown import StopWatchdog, within

    watchdog = StopWatchdog(0.5, "in-process")
    watchdog.arm()
    assert within(5, lambda: 42) == (True, 42)
    watchdog.done()
    time.sleep(1.0)  # past the deadline: still alive, the stop had finished
    assert within(0.2, lambda: time.sleep(5)) == (False, None)
