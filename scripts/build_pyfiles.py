"""Zip the rgspark package to ship to Spark executors with ``--py-files``.

    python scripts/build_pyfiles.py [DEST]        (default: dist/rgspark.zip)

then ``spark-submit --py-files dist/rgspark.zip job.py``, or ``spark.sparkContext.addPyFile``.
The zip holds ``spark/rgspark`` alone, as the top-level package ``rgspark``: no server code.
On the cluster it needs httpx next to PySpark and PyArrow. The standard library is enough to
build it, and the same sources always give the same bytes.
"""

from __future__ import annotations

import argparse
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "spark" / "rgspark"
DEFAULT_DEST = ROOT / "dist" / "rgspark.zip"
# Sources and the typing marker; never caches or editor leftovers.
SUFFIXES = (".py", ".typed")
# Fixed metadata, so that an unchanged package gives an identical zip.
EPOCH = (1980, 1, 1, 0, 0, 0)


def build(dest: Path = DEFAULT_DEST, package: Path = PACKAGE) -> Path:
    """Write the zip to `dest` (its folder is made if needed) and return `dest`."""
    files = sorted(
        path
        for path in package.rglob("*")
        if path.is_file() and path.suffix in SUFFIXES and "__pycache__" not in path.parts
    )
    if package / "__init__.py" not in files:
        raise FileNotFoundError(f"{package} is not a Python package")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(dest, "w") as archive:
        for path in files:
            name = f"rgspark/{path.relative_to(package).as_posix()}"
            info = zipfile.ZipInfo(name, date_time=EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, path.read_bytes())
    return dest


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dest", nargs="?", type=Path, default=DEFAULT_DEST, help="the zip to write")
    build(parser.parse_args(argv).dest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
