"""BookieMode tells its listeners of every writable <-> read-only transition, including one made between the
moment a caller acted on the mode and the moment it started listening.

The bookie registers (writable or read-only, from the mode), then listens to re-register on changes. A
lifecycle state written in between (an operator draining a bookie as it starts) was lost: the bookie served
read-only while registered writable (a CI run of tests/bookie/test_bookie_lifecycle.py showed it)."""

from __future__ import annotations

import threading

from bkaudit.bookie.mode import BookieMode


def test_a_change_before_listening_is_told_when_listening() -> None:
    mode = BookieMode()
    registered = mode.readonly  # what the bookie registered as
    mode.set("lifecycle", True)  # the state watch fires before the listener is in place
    told: list[bool] = []
    mode.listen(told.append, assumed=registered)
    assert told == [True]
    mode.set("lifecycle", False)
    assert told == [True, False]


def test_nothing_is_told_when_the_mode_is_what_the_caller_assumed() -> None:
    mode = BookieMode()
    mode.set("forced", True)
    told: list[bool] = []
    mode.listen(told.append, assumed=True)
    mode.set("disk", True)  # still read-only: no transition
    assert told == []
    mode.listen(told.append)  # no assumption: only later transitions
    assert told == []


def test_a_transition_racing_the_listen_call_reaches_the_listener_exactly_once() -> None:
    for _ in range(200):
        mode = BookieMode()
        told: list[bool] = []
        flip = threading.Thread(target=mode.set, args=("lifecycle", True))
        flip.start()
        mode.listen(told.append, assumed=False)
        flip.join()
        assert told == [True], told
