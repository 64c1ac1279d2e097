"""dist/bkaudit-pyfiles.zip: the bkaudit package for `spark-submit --py-files` (`make dist`).

Pure Python only: the dependencies (kazoo, deltalake, pyarrow, ...) must already be in the cluster's Python,
or come from the packed environment of `make dist-env` (spark.archives). Byte-code caches are left out.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path


def build(source: Path, target: Path) -> int:
    count = 0
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(source.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                zf.write(path, path.relative_to(source.parent).as_posix())
                count += 1
    return count


if __name__ == "__main__":
    repo = Path(__file__).resolve().parent.parent
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else repo / "dist" / "bkaudit-pyfiles.zip"
    out.parent.mkdir(parents=True, exist_ok=True)
    print(f"{out}: {build(repo / 'bkaudit', out)} files")
