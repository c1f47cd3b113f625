"""The Spark guide's spark-submit command, run as written, holds the job to its group's rate.

The command runs in bash from a folder laid out as this repository is after ``make client``:
``.venv-client`` is the Python running these tests (it has rgspark, PySpark and PyArrow),
next to ``scripts/`` and ``examples/``. Only the server's address differs: the test's server
listens on a port of its own.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.factories import create_group, create_namespace, create_tenant
from tests.spark.submit import PASSED_ON

if TYPE_CHECKING:
    from tests.spark.conftest import RGServer

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "spark.md"
GUIDE_URL = "http://127.0.0.1:8080"
RATE = 2000  # etl-gold's publishRateInMsgs in the quick start's tour


def guide_command() -> str:
    """The Spark guide's shell block that runs spark-submit."""
    blocks = re.findall(r"```sh\n(.*?)```", GUIDE.read_text(), re.DOTALL)
    [block] = [block for block in blocks if "spark-submit" in block]
    return str(block)


def test_the_guide_spark_submit_command_holds_the_rate(rg_server: RGServer, tmp_path: Path) -> None:
    # The quick start's tour: group etl-gold on team-a/ingest, role etl-job granted produce.
    admin = rg_server.admin
    create_group(admin, "etl-gold", publishRateInMsgs=RATE, publishRateInBytes=10485760)
    create_tenant(admin, "team-a", ["team-a"])
    create_namespace(admin, "team-a/ingest", group="etl-gold", producers=["etl-job"])
    (tmp_path / ".venv-client").symlink_to(Path(sys.prefix))
    for folder in ("scripts", "examples"):
        (tmp_path / folder).symlink_to(ROOT / folder)
    command = guide_command()
    assert command.count(GUIDE_URL) == 1
    env = {name: os.environ[name] for name in PASSED_ON if name in os.environ}
    env["JOB_TOKEN"] = rg_server.token("etl-job")

    completed = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command.replace(GUIDE_URL, rg_server.url)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )

    assert completed.returncode == 0, (completed.stdout[-3000:], completed.stderr[-5000:])
    assert (tmp_path / "dist" / "rgspark.zip").is_file()
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert report["resourceGroup"] == "etl-gold"
    assert report["rows"] == 20_000
    # Ten seconds' worth at the group's rate.
    assert 7 <= report["wall_s"] <= 20, report
    assert report["rows_per_s"] == pytest.approx(RATE, rel=0.3), report
    assert report["task_throttled_s"] > 0
