"""Fetch the dashboard's and the API docs' browser assets into ``app/ui/vendor/``.

    python scripts/vendor_ui_assets.py

The server serves them itself, so the dashboard, ``/docs`` and ``/redoc`` work on clusters
without internet access; the files are committed, so serving needs neither network nor npm.
Each package is pinned to a version and to the integrity hash the npm registry (or the mirror
that ``NPM_CONFIG_REGISTRY`` names) published for it: the script checks that the registry
still publishes that hash, checks the tarball against it, and writes only the files listed
below, with the package's licence and a ``VERSIONS.json`` that says where every file came
from. To upgrade, change a version, set its integrity to the one ``npm view PACKAGE@VERSION
dist.integrity`` prints, and run it. The standard library is enough to run it.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEST = ROOT / "app" / "ui" / "vendor"
# npm's own setting names a mirror, where there is one.
REGISTRY = os.environ.get("NPM_CONFIG_REGISTRY", "https://registry.npmjs.org").rstrip("/")
TIMEOUT_S = 60


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    integrity: str  # Subresource Integrity form, as the registry publishes it: "sha512-<base64>"
    folder: str  # under DEST
    files: tuple[str, ...]  # paths inside the tarball's "package/" folder; written flat


PACKAGES = (
    Package(
        "uplot",
        "1.6.32",
        "sha512-KIMVnG68zvu5XXUbC4LQEPnhwOxBuLyW1AHtpm6IKTXImkbLgkMy+jabjLgSLMasNuGGzQm/ep3tOkyTxpiQIw==",
        "uplot",
        ("dist/uPlot.esm.js", "dist/uPlot.min.css", "LICENSE"),
    ),
    Package(
        "swagger-ui-dist",
        "5.35.0",
        "sha512-U06rpMtW9V3XPGOBeamTUSr0Z09jMX4IJuANpE/EZbAhw0G8CgwrzU4YmXkn/h0wCDNsXdGarTNNHC3sU8yVUQ==",
        "swagger-ui",
        (
            "swagger-ui-bundle.js",
            "swagger-ui-bundle.js.LICENSE.txt",
            "swagger-ui.css",
            "LICENSE",
            "NOTICE",
        ),
    ),
    # Redoc 2, the major version FastAPI's own docs page is written for.
    Package(
        "redoc",
        "2.5.4",
        "sha512-M6jWhG1qoBnH6TFmzJnstyCZ87HmOY/UzDm78mHiYihEdlV/YcS9ogOo1NlElnJMeLsyxHFe2yFc4sNjHTrABQ==",
        "redoc",
        ("bundles/redoc.standalone.js", "bundles/redoc.standalone.js.LICENSE.txt", "LICENSE"),
    ),
)


class VendorError(Exception):
    """The registry or a tarball is not what the pins say."""


def _get(url: str) -> bytes:
    if urllib.parse.urlsplit(url).scheme != "https":
        raise VendorError(f"refusing a non-HTTPS URL: {url}")
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
        data: bytes = response.read()
    return data


def _sri(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def fetch(package: Package) -> tuple[bytes, str]:
    """The package's tarball, checked against the pinned and the published integrity, and
    its licence as the registry states it."""
    name = urllib.parse.quote(package.name, safe="@")
    meta = json.loads(_get(f"{REGISTRY}/{name}/{package.version}"))
    published = meta["dist"]["integrity"]
    if published != package.integrity:
        raise VendorError(
            f"{package.name}@{package.version}: the registry publishes {published}, "
            f"pinned here is {package.integrity}"
        )
    tarball = _get(meta["dist"]["tarball"])
    if _sri(tarball) != package.integrity:
        raise VendorError(f"{package.name}@{package.version}: the tarball fails its integrity")
    return tarball, str(meta.get("license", "unknown"))


def extract(package: Package, tarball: bytes, dest: Path) -> dict[str, str]:
    """Write the package's listed files into ``dest/folder``; their names there (relative
    to ``dest``) and SHA-256 digests, by which a test tells that none was edited since."""
    folder = dest / package.folder
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    written = {}
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as archive:
        for path in package.files:
            member = archive.extractfile(f"package/{path}")
            if member is None:
                raise VendorError(f"{package.name}: {path} is not a file")
            name = Path(path).name
            data = member.read()
            (folder / name).write_bytes(data)
            written[f"{package.folder}/{name}"] = hashlib.sha256(data).hexdigest()
    return written


def vendor(dest: Path = DEST, packages: Sequence[Package] = PACKAGES) -> dict[str, dict[str, Any]]:
    """Fetch, check and write every package; returns what ``VERSIONS.json`` holds."""
    versions: dict[str, dict[str, Any]] = {}
    for package in packages:
        tarball, license_name = fetch(package)
        files = extract(package, tarball, dest)
        versions[package.name] = {
            "version": package.version,
            "license": license_name,
            "integrity": package.integrity,
            "files": files,
        }
    (dest / "VERSIONS.json").write_text(json.dumps(versions, indent=2) + "\n", encoding="utf-8")
    return versions


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", type=Path, default=DEST, help="the folder to write")
    dest = parser.parse_args(argv).dest
    try:
        versions = vendor(dest)
    except (VendorError, OSError) as exc:
        sys.stderr.write(f"vendor_ui_assets: {exc}\n")
        return 1
    for name, entry in versions.items():
        sys.stderr.write(f"{name} {entry['version']}: {', '.join(entry['files'])}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
