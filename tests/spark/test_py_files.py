"""rgspark shipped as a zip with ``--py-files``, to a job whose Python has no server code.

The job runs under ``spark-submit`` in a child process with a clean Python: ``-S`` (no
site-packages) and a PYTHONPATH holding only PySpark, py4j, PyArrow, pandas, NumPy and httpx
and what they need, linked from this environment. Its driver and its workers import rgspark
from the zip, cannot import the server's packages, and throttle a job against the server.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.spark.submit import SERVER_MODULES, clean_site, python_without_site, submit

if TYPE_CHECKING:
    from tests.spark.conftest import RGServer

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
RATE = 2000  # msgs/s
ROWS = 4000

JOB = """
import importlib
import json
import sys
import time

SERVER_MODULES = {server_modules!r}


def unimportable(names):
    missing = []
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def origin():
    import rgspark

    return rgspark.__file__


def probe(batches):
    import pyarrow as pa

    for _ in batches:
        pass
    yield pa.RecordBatch.from_pydict(
        {{"origin": [origin()], "missing": [",".join(unimportable(SERVER_MODULES))]}}
    )


def main():
    url, tenant, namespace, token = sys.argv[1:5]
    assert unimportable(SERVER_MODULES) == list(SERVER_MODULES), sys.path
    assert "rgspark.zip" in origin(), origin()

    import rgspark
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    workers = spark.range(2, numPartitions=2).mapInArrow(probe, "origin string, missing string")
    workers = [row.asDict() for row in workers.collect()]
    for worker in workers:
        assert "rgspark.zip" in worker["origin"], worker
        assert worker["missing"] == ",".join(SERVER_MODULES), worker

    client = rgspark.ResourceGroupClient(url, tenant=tenant, namespace=namespace, token=token)
    policy = client.check()
    df = spark.range({rows}, numPartitions=2)
    start = time.monotonic()
    rows = rgspark.throttle(df, client, "publish").count()
    elapsed = time.monotonic() - start
    stats = client.stats["publish"]
    print(json.dumps({{
        "driver": {{"origin": origin(), "missing": unimportable(SERVER_MODULES)}},
        "workers": workers,
        "policy": policy,
        "rows": rows,
        "seconds": elapsed,
        "stats": {{"rows": stats.rows, "task_throttled_s": stats.task_throttled_s}},
    }}))
    spark.stop()


main()
"""


def test_the_zip_ships_rgspark_to_a_job_without_the_server(
    rg_server: RGServer, tmp_path: Path
) -> None:
    archive = tmp_path / "dist" / "rgspark.zip"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_pyfiles.py"), str(archive)], check=True
    )
    with zipfile.ZipFile(archive) as zipped:
        names = zipped.namelist()
    assert "rgspark/__init__.py" in names
    assert all(re.fullmatch(r"rgspark/\w+\.py|rgspark/py\.typed", name) for name in names), names

    site = clean_site(tmp_path / "site")
    python = python_without_site(tmp_path / "python")
    script = tmp_path / "job.py"
    script.write_text(JOB.format(server_modules=SERVER_MODULES, rows=ROWS))
    job = rg_server.namespace(publishRateInMsgs=RATE)

    completed = submit(
        [
            *("--master", "local[2]", "--conf", "spark.ui.enabled=false"),
            *("--py-files", str(archive)),
            str(script),
            *(rg_server.url, job.tenant, job.namespace, job.token),
        ],
        cwd=tmp_path,  # nothing of this repository on the job's path
        env={
            "PYTHONPATH": str(site),
            "PYSPARK_PYTHON": str(python),
            "PYSPARK_DRIVER_PYTHON": str(python),
        },
    )

    assert completed.returncode == 0, completed.stderr[-5000:]
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert report["driver"]["missing"] == list(SERVER_MODULES)
    assert "rgspark.zip" in report["driver"]["origin"]
    assert len(report["workers"]) == 2
    assert report["policy"]["resourceGroup"] == job.group
    assert report["rows"] == report["stats"]["rows"] == ROWS
    # Two seconds' worth at the group's rate: held back, and not for long.
    assert 1.4 <= report["seconds"] <= 20, report
    assert report["stats"]["task_throttled_s"] > 0
