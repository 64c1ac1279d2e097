"""Bookie lifecycle: Active -> Draining -> Drained / DrainingFailed -> removed (docs/lifecycle.md)."""
