"""BookieView.absent_for: how long a bookie has been in neither registration set (the data-loss grace).

The registrations change in a MemoryStore, whose registry watch delivers them as ZooKeeper's child watches
would; the clock is BookieView's own monotonic clock, patched.
"""

from __future__ import annotations

import pytest

from bkaudit.autorecovery import view as view_module
from bkaudit.autorecovery.view import BookieView
from bkaudit.store.memory import MemoryStore


def test_absence_counts_from_when_the_bookie_left_both_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(view_module.time, "monotonic", lambda: clock[0])
    store = MemoryStore()
    v = BookieView(store.registry).start()
    store.register("a:1")
    store.register("b:1")
    clock[0] = 110.0
    assert v.absent_for("a:1") == 0.0
    assert v.absent_for("never:1") == 10.0  # never seen registered: absent since the view started
    store.deregister("a:1")  # a Java bookie turning read-only leaves `available` first ...
    clock[0] = 112.0
    assert v.absent_for("a:1") == 2.0
    store.register("a:1", readonly=True)  # ... and registers under readonly: present again
    assert v.absent_for("a:1") == 0.0
    store.deregister("a:1")
    clock[0] = 130.0
    store.deregister("b:1")  # b leaves too; a stays gone since 112
    clock[0] = 131.0
    assert (v.absent_for("a:1"), v.absent_for("b:1")) == (19.0, 1.0)
