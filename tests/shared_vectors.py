"""Where the golden vectors live: ../shared/vectors beside the checkout (as CI lays it out).

`BKAUDIT_SHARED` overrides the location. A missing directory is an error, not a skip: the vectors are the
ground truth of the format tests.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parents[1]
VECTORS_DIR = Path(os.environ.get("BKAUDIT_SHARED", _REPO.parent / "shared")) / "vectors"


def load(name: str) -> Any:
    """Parse one vector file, e.g. load("availability.json")."""
    path = VECTORS_DIR / name
    if not path.is_file():
        raise FileNotFoundError(f"golden vector {path} not found (set BKAUDIT_SHARED to shared/)")
    return json.loads(path.read_text())
