"""bkaudit: know, not hope, that a BookKeeper cluster keeps its durability contract."""

__version__ = "0.1.0"
