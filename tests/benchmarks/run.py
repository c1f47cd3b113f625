"""Runs a benchmark the way its smoke tests need it: ``python -m benchmarks.<name>`` from the
repository root, as a process of its own, its JSON report read from what it printed.

The benchmarks start servers and databases of their own and print their progress on stderr:
a failed run shows the end of it, where the error is, rather than all of it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]

# Characters of stderr shown when a run fails: its last lines hold the traceback.
STDERR_TAIL = 5000


def run_benchmark(name: str, *args: str, timeout: float) -> dict[str, Any]:
    """The report ``benchmarks.<name>`` printed when run with ``args``, once it exited cleanly."""
    completed = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name}", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert completed.returncode == 0, completed.stderr[-STDERR_TAIL:]
    report: dict[str, Any] = json.loads(completed.stdout)
    return report
