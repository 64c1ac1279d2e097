"""BookieView.absent_for: how long a bookie has been in neither registration set (the data-loss grace).

The watch callbacks are driven directly with the children lists ZooKeeper would deliver; the clock is
BookieView's own monotonic clock, patched.
"""

from __future__ import annotations

import pytest

from bkaudit.autorecovery import view as view_module
from bkaudit.autorecovery.view import BookieView


def test_absence_counts_from_when_the_bookie_left_both_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(view_module.time, "monotonic", lambda: clock[0])
    v = BookieView(None)  # type: ignore[arg-type]  # no ZooKeeper: the watches are called by hand
    v._on_available(["a:1", "b:1", "readonly"])
    clock[0] = 110.0
    assert v.absent_for("a:1") == 0.0
    assert v.absent_for("never:1") == 10.0  # never seen registered: absent since the view started
    v._on_available(["b:1", "readonly"])  # a Java bookie turning read-only leaves `available` first ...
    clock[0] = 112.0
    assert v.absent_for("a:1") == 2.0
    v._on_readonly(["a:1"])  # ... and registers under readonly: present again
    assert v.absent_for("a:1") == 0.0
    v._on_readonly([])
    clock[0] = 130.0
    v._on_available(["readonly"])  # b leaves too; a stays gone since 112
    clock[0] = 131.0
    assert (v.absent_for("a:1"), v.absent_for("b:1")) == (19.0, 1.0)
