"""Jobs run as users run them: ``spark-submit`` in a child process, with settings of their own.

A job started this way has its own driver, JVM and executors' Python, so it can be given what
a test session cannot change once it runs: another Python for the executors, their
environment, ``--py-files``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path

# What a cluster's executors have: PySpark with its Arrow needs, and httpx for rgspark.
PACKAGES = ("pyspark", "py4j", "pyarrow", "pandas", "numpy", "httpx")
SERVER_MODULES = ("app", "fastapi", "sqlalchemy")
# What a job may read from the test's environment; nothing else of it reaches the job.
PASSED_ON = ("PATH", "HOME", "JAVA_HOME", "LANG", "TMPDIR")


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def clean_site(directory: Path) -> Path:
    """A folder of links to `PACKAGES` and every distribution they require (extras aside):
    on a PYTHONPATH, what executors have, without rgspark or anything of the server."""
    directory.mkdir()
    seen: set[str] = set()
    todo = list(PACKAGES)
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # required only under a marker that does not hold here
        for requirement in dist.requires or []:
            spec, _, marker = requirement.partition(";")
            if "extra" not in marker:
                todo.append(re.split(r"[\s\[<>=!~(]", spec.strip(), maxsplit=1)[0])
        for file in dist.files or []:
            top = file.parts[0]
            if top in ("..", "__pycache__") or top.endswith((".dist-info", ".pth")):
                continue
            link = directory / top
            if not link.exists():
                link.symlink_to(Path(str(dist.locate_file(top))))
    present = {path.name.split(".")[0] for path in directory.iterdir()}
    assert present >= set(PACKAGES)
    assert not present & {*SERVER_MODULES, "rgspark", "starlette", "uvicorn"}, present
    return directory


def python_without_site(path: Path) -> Path:
    """A script at `path` running this interpreter without its site-packages (``-S``): it
    imports only what PYTHONPATH (and Spark, for its workers) puts on its path."""
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    path.chmod(0o755)
    return path


def submit(
    args: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 180,
) -> subprocess.CompletedProcess[str]:
    """``spark-submit ARGS`` in `cwd`, with `env` over a bare environment (`PASSED_ON`)."""
    base = {name: os.environ[name] for name in PASSED_ON if name in os.environ}
    base["SPARK_HOME"] = str(spark_home())
    return subprocess.run(
        [str(spark_home() / "bin" / "spark-submit"), *args],
        cwd=cwd,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def traceback_of(output: str) -> list[str]:
    """The lines of the last Python traceback in `output`, up to its end."""
    lines = output.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent")]
    assert starts, output[-3000:]
    return lines[starts[-1] :]
