"""Does a group in observe mode leave its job unthrottled, show what it would hold back, and
hold the job to its quota from the second after it is switched to enforce?

    python -m benchmarks.observe_mode [--quick] [--cores 2] [--rows 20000000] [--rounds 10]
                                      [--quota 20000] [--observe-seconds 12]
                                      [--enforce-seconds 8]

prints one JSON object, measured with real PySpark in local mode (``--cores`` worker slots)
against ``rgadmin serve`` on a SQLite database of its own in a temporary folder (reports every
half second, leases of 2 s and a usage sample a second, so that the history's usage is
complete about 5 s after the fact). Two groups: ``free`` limits nothing; ``watched`` allows
``--quota`` msgs/s (far below what a local job sends unthrottled) and is in observe mode.

- ``side_by_side``: ``--rows`` rows of ``spark.range``, one partition per core, through
  ``throttle(df, client, "publish")`` to Spark's noop sink, in each group, ``--rounds`` pairs
  back to back after a warm-up job in each, alternating which goes first, with Spark's own
  Arrow batches (10,000 rows). Each pair gives the observed job's time over the unlimited
  one's; the figure is the median over couples of pairs (one of each order) of their
  geometric mean, which cancels the first job's handicap (beside it ``total_ratio``, the
  sums', ``ratio_of_best``, the fastest rounds', and ``cpu_ratio``, the median pair's ratio
  of CPU seconds taken by the JVM's process tree, which holds the Python workers, and the
  server: other load on a shared machine is in neither; ``enforced_s`` is what enforcing
  would take). Bar: within 5% of 1. ``charge_us``: the microseconds one charge of a batch
  costs a worker, unlimited and observed.
- ``switch``: rows without end, in the observed group, into a counting sink that
  ``throttled`` holds (a ``mapInArrow`` that logs the time and row count of each batch it
  takes, as it takes it, and drops it; Arrow batches of 100 rows, so that a second's count
  is exact to 0.5% at the default quota). ``--observe-seconds`` after its first rows, the
  figures are read as people see them: the usage history's complete moments since the job
  started (usage, allocation, ``holdBack``, averaged), set against the rows the sink counted
  over the same seconds; ``/metrics`` (``rg_resource_group_observe`` and
  ``rg_resource_group_would_hold_back_ratio``); and ``rgadmin top --once``. Then the group
  is switched to enforce through the API (``PUT .../mode``), the rows the sink counts in
  each second from one after the switch (changes are pushed within a second) are taken for
  ``--enforce-seconds``, and the job is cancelled. Bars: the history's usage within 5% of
  what the sink counted, its allocation within 5% of the quota, its hold back and the
  metrics' within 5 points of ``max(0, 1 - quota / counted rate)``; metrics and top say
  observe; every second from one after the switch within 5% of the quota.

``--quick`` shrinks everything for a smoke test: its figures, not its bars.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.auth import create_token
from benchmarks._servers import (
    process_tree_cpu_seconds,
    rgadmin,
)
from benchmarks.spark_throttle import (
    SUPERUSER,
    Setup,
    admin_server,
    run,
    run_in_workdir,
    spark_session,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

BAR = 0.05
TIMING_CONF = {
    "spark.sql.execution.arrow.maxRecordsPerBatch": "100",
    "spark.buffer.size": "1024",
}
SERVER_SETTINGS = {
    "RG_REPORT_INTERVAL_SECONDS": "0.5",
    "RG_REPORT_LEASE_SECONDS": "2",
    "RG_USAGE_HISTORY_RESOLUTION_SECONDS": "1",
}
ENDLESS_ROWS = 10**12
DEFAULT_BATCH_ROWS = "10000"  # Spark's
FREE, WATCHED = "free", "watched"
FIRST_ROWS_TIMEOUT_S = 120.0


def set_mode(setup: Setup, group: str, mode: str) -> None:
    setup._call("PUT", f"/admin/v2/resourcegroups/{group}/mode", {"mode": mode})


def throttled(spark: SparkSession, setup: Setup, namespace: str, rows: int, cores: int) -> Any:
    from rgspark import throttle

    return throttle(spark.range(rows, numPartitions=cores), setup.client(namespace), "publish")


def cpu_clock(spark: SparkSession, setup: Setup) -> Callable[[], float | None]:
    """CPU seconds of the JVM's process tree (it runs the Python workers) and of the server:
    what a job and its reports cost, whatever else loads the machine (None where unknown)."""
    gateway = getattr(spark.sparkContext, "_gateway", None)
    jvm_pid: int | None = getattr(getattr(gateway, "proc", None), "pid", None)

    def cpu_seconds() -> float | None:
        jvm = None if jvm_pid is None else process_tree_cpu_seconds(jvm_pid)
        served = setup.server.cpu_seconds()
        return None if jvm is None or served is None else jvm + served

    return cpu_seconds


def timed_job(
    spark: SparkSession, setup: Setup, namespace: str, rows: int, cores: int
) -> tuple[float, float | None]:
    """Seconds, and CPU seconds, to send `rows` through `throttle` in `namespace`, to Spark's
    noop sink."""
    df = throttled(spark, setup, namespace, rows, cores)
    cpu = cpu_clock(spark, setup)
    cpu_before, start = cpu(), time.perf_counter()
    run(df)
    seconds, cpu_after = time.perf_counter() - start, cpu()
    used = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
    return seconds, used


@contextlib.contextmanager
def default_batches(spark: SparkSession) -> Iterator[None]:
    """Spark's own Arrow batch size while the block runs: the small batches that time rows
    in the switch would make the side by side a test of charging 100 rows at a time."""
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    spark.conf.set(key, DEFAULT_BATCH_ROWS)
    try:
        yield
    finally:
        spark.conf.set(key, TIMING_CONF[key])


def side_by_side(
    spark: SparkSession, setup: Setup, args: argparse.Namespace, quota: float
) -> dict[str, Any]:
    """The observed job's time over the unlimited one's, in pairs (see the docstring)."""
    rows, cores, rounds = args.rows, args.cores, args.rounds
    pairs, cpu_pairs = [], []
    with default_batches(spark):
        for namespace in (FREE, WATCHED):  # warm-ups: each namespace's runtime in the workers
            timed_job(spark, setup, namespace, rows, cores)
        for index in range(rounds):
            order = (FREE, WATCHED) if index % 2 == 0 else (WATCHED, FREE)
            measured = {ns: timed_job(spark, setup, ns, rows, cores) for ns in order}
            pairs.append({ns: seconds for ns, (seconds, _) in measured.items()})
            cpu_pairs.append({ns: cpu for ns, (_, cpu) in measured.items()})
    ratios = [pair[WATCHED] / pair[FREE] for pair in pairs]
    # Rounds in couples of opposite order: the job run first in a pair is the slower, by up
    # to a third on a shared machine, and a couple's geometric mean cancels that.
    couples = [math.sqrt(a * b) for a, b in zip(ratios[::2], ratios[1::2], strict=False)]
    cpu_ratios = [
        watched / free for pair in cpu_pairs if (watched := pair[WATCHED]) and (free := pair[FREE])
    ]
    ratio = statistics.median(couples or ratios)
    return {
        "rows": rows,
        "rounds": rounds,
        "unlimited_s": [round(pair[FREE], 3) for pair in pairs],
        "observed_s": [round(pair[WATCHED], 3) for pair in pairs],
        "pair_ratios": [round(r, 4) for r in ratios],
        "couple_ratios": [round(r, 4) for r in couples],
        "total_ratio": round(sum(p[WATCHED] for p in pairs) / sum(p[FREE] for p in pairs), 4),
        "ratio_of_best": round(min(p[WATCHED] for p in pairs) / min(p[FREE] for p in pairs), 4),
        "cpu_pair_ratios": [round(r, 4) for r in cpu_ratios],
        "cpu_ratio": round(statistics.median(cpu_ratios), 4) if cpu_ratios else None,
        "enforced_s": round(rows / quota, 1),
        "ratio": round(ratio, 4),
        "bar": BAR,
        "meets_bar": abs(ratio - 1) <= BAR,
    }


def batches(directory: Path) -> list[tuple[float, int]]:
    """Every logged batch, ``(epoch seconds, rows)``, in time order: read while the job
    writes, a file may end in a line not yet written whole, which is left for the next read."""
    found = []
    for path in directory.glob("*.log"):
        for line in path.read_text().split("\n")[:-1]:
            moment, rows = line.split()
            found.append((float(moment), int(rows)))
    return sorted(found)


def per_second(logged_batches: list[tuple[float, int]], start: float, seconds: int) -> list[int]:
    """Rows logged in each whole second from `start`, for `seconds` seconds."""
    counts = [0] * seconds
    for moment, rows in logged_batches:
        index = int((moment - start) // 1)
        if 0 <= index < seconds:
            counts[index] += rows
    return counts


def wait_for_rows(directory: Path, job: threading.Thread) -> float:
    """When the job's first rows were logged."""
    deadline = time.monotonic() + FIRST_ROWS_TIMEOUT_S
    while time.monotonic() < deadline and job.is_alive():
        found = batches(directory)
        if found:
            return found[0][0]
        time.sleep(0.05)
    raise RuntimeError("the job logged no rows")


def endless_job(spark: SparkSession, df: DataFrame) -> threading.Thread:
    """`df` run on a thread until `SparkContext.cancelAllJobs`."""

    def target() -> None:
        with contextlib.suppress(Exception):  # cancelled: Spark raises
            run(df)

    job = threading.Thread(target=target, name="observe-mode-job", daemon=True)
    job.start()
    return job


def counted(spark: SparkSession, setup: Setup, rows: int, cores: int, directory: Path) -> Any:
    """`rows` rows into a counting sink that `throttled` holds to the observed group's rate:
    each batch it takes is logged (``<epoch seconds> <rows>``, a file per worker process) and
    dropped. Counted where the job sends, with nothing downstream to lag behind."""
    from rgspark import throttled

    def count(batches: Iterator[Any]) -> Iterator[Any]:
        with (directory / f"{os.getpid()}.log").open("a") as out:
            for batch in batches:
                out.write(f"{time.time()} {batch.num_rows}\n")
                out.flush()  # the job is cancelled: nothing may wait in a buffer
        yield from ()

    df = spark.range(rows, numPartitions=cores)
    return df.mapInArrow(throttled(count, setup.client(WATCHED), "publish"), df.schema)


def history_figures(
    setup: Setup, logged_batches: list[tuple[float, int]], start: float, end: float
) -> dict[str, Any]:
    """The observed group's publish msgs in the usage history over the complete moments whose
    second lies in [start, end), with the rows the job logged over the same seconds."""
    answer = setup.admin.get(f"/admin/v2/resourcegroups/{WATCHED}/usage", params={"since": 60})
    answer.raise_for_status()
    history = answer.json()
    msgs = history["dimensions"]["publishRateInMsgs"]
    moments = [
        index
        for index, moment in enumerate(history["times"])
        if start + 1 <= moment <= end and msgs["usage"][index] is not None
    ]
    found: dict[str, Any] = {"mode": history["mode"], "moments": len(moments)}
    if not moments:
        return found
    first, last = history["times"][moments[0]] - 1, history["times"][moments[-1]]
    sent = sum(rows for moment, rows in logged_batches if first <= moment < last)
    found.update(
        sent_rate=sent / (last - first),
        usage=statistics.mean(msgs["usage"][i] for i in moments),
        allocation=statistics.mean(msgs["allocation"][i] for i in moments),
        hold_back=statistics.mean(msgs["holdBack"][i] for i in moments),
    )
    return found


def metrics_figures(setup: Setup) -> dict[str, Any]:
    """``rg_resource_group_observe`` and the publish msgs hold back of the observed group."""
    text = setup.admin.get("/metrics").text
    found: dict[str, Any] = {"observe": None, "would_hold_back_ratio": None}
    for line in text.splitlines():
        if line.startswith(f'rg_resource_group_observe{{group="{WATCHED}"}}'):
            found["observe"] = float(line.split()[-1])
        elif line.startswith(
            f'rg_resource_group_would_hold_back_ratio{{group="{WATCHED}",dimension="publishMsgs"}}'
        ):
            found["would_hold_back_ratio"] = float(line.split()[-1])
    return found


def top_figures(setup: Setup) -> dict[str, Any]:
    """``rgadmin top --once GROUP``'s publishMsgs row: its MODE and WOULD_HOLD_BACK."""
    token = create_token(subject=SUPERUSER, secret_key=setup.secret_key)
    command = [*rgadmin(), "--admin-url", setup.url, "--auth-params", f"token:{token}"]
    printed = subprocess.run(
        [*command, "top", "--once", WATCHED], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    lines = [line.split() for line in printed.splitlines()]
    header, rows = lines[0], [line for line in lines[1:] if line[1] == "publishMsgs"]
    row = dict(zip(header, rows[0], strict=True)) if rows else {}
    return {"mode": row.get("MODE"), "would_hold_back": row.get("WOULD_HOLD_BACK")}


def observed_figures(
    setup: Setup, quota: float, logged_batches: list[tuple[float, int]], start: float
) -> dict[str, Any]:
    """What the history, /metrics and top show of the observed group while it observes,
    against what the job sent and the quota (see the docstring)."""
    history = history_figures(setup, logged_batches, start, time.time())
    metrics = metrics_figures(setup)
    top = top_figures(setup)
    shown = history["moments"] > 0
    sent = history.get("sent_rate", 0.0)
    expected = max(0.0, 1 - quota / sent) if sent > 0 else 0.0
    checks = {
        "history_mode": history["mode"] == "observe",
        "history_usage": shown and abs(history["usage"] / sent - 1) <= BAR,
        "history_allocation": shown and abs(history["allocation"] / quota - 1) <= BAR,
        "history_hold_back": shown and abs(history["hold_back"] - expected) <= BAR,
        "metrics_mode": metrics["observe"] == 1.0,
        "metrics_hold_back": metrics["would_hold_back_ratio"] is not None
        and abs(metrics["would_hold_back_ratio"] - expected) <= BAR,
        "top_mode": top["mode"] == "observe",
    }
    return {
        "expected_hold_back": round(expected, 4),
        "history": history,
        "metrics": metrics,
        "top": top,
        "checks": checks,
        "meets_bar": all(checks.values()),
    }


def switch(
    spark: SparkSession, setup: Setup, args: argparse.Namespace, quota: float, workdir: Path
) -> dict[str, Any]:
    """Observe, read the figures, switch to enforce, count rows per second (the docstring)."""
    directory = workdir / "switch"
    directory.mkdir()
    job = endless_job(spark, counted(spark, setup, ENDLESS_ROWS, args.cores, directory))
    try:
        first = wait_for_rows(directory, job)
        time.sleep(max(0.0, first + args.observe_seconds - time.time()))
        figures = observed_figures(setup, quota, batches(directory), first)
        switched_at = time.time()
        set_mode(setup, WATCHED, "enforce")
        time.sleep(args.enforce_seconds + 1.5)
    finally:
        spark.sparkContext.cancelAllJobs()
        job.join(timeout=60)
    logged_batches = batches(directory)
    observed = per_second(logged_batches, first + 1, int(switched_at - first) - 1)
    # Seconds from one after the switch: changes are pushed within a second, and until the
    # workers have it they send unheld, at hundreds of times the quota.
    enforced = per_second(logged_batches, switched_at + 1.0, args.enforce_seconds)
    errors = [count / quota - 1 for count in enforced]
    return {
        "observed": figures,
        "observed_rows_per_s": observed,
        "switched_after_s": round(switched_at - first, 3),
        "enforced_rows_per_s": enforced,
        "enforced_errors": [round(error, 4) for error in errors],
        "enforced_max_error": round(max((abs(e) for e in errors), default=1.0), 4),
        "bar": BAR,
        "meets_bar": bool(errors) and all(abs(error) <= BAR for error in errors),
    }


def charge_cost(quota: float, batch_rows: int, charges: int = 20_000) -> dict[str, float]:
    """Microseconds a worker spends on one charge of a batch (`NamespaceQuota.reserve`),
    unlimited and observed: what observe mode adds to a job, batch by batch."""
    from rgspark._quota import NamespaceQuota

    unlimited = NamespaceQuota("t", FREE)
    observed = NamespaceQuota("t", WATCHED)
    observed.apply({"publishMsgs": quota})
    observed.observe(True)
    costs = {}
    for name, limits in (("unlimited", unlimited), ("observed", observed)):
        start = time.perf_counter()
        for _ in range(charges):
            limits.reserve("publish", batch_rows, 0)
        costs[name] = round((time.perf_counter() - start) / charges * 1e6, 2)
    return costs


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="A tiny run for a smoke test.")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--rows", type=int, default=20_000_000, help="Rows per side-by-side job.")
    parser.add_argument("--rounds", type=int, default=10, help="Even: in couples.")
    parser.add_argument("--quota", type=int, default=20_000, help="The observed group's msgs/s.")
    parser.add_argument("--observe-seconds", type=int, default=12)
    parser.add_argument("--enforce-seconds", type=int, default=8)
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.rounds = min(args.rows, 100_000), 1
        args.observe_seconds, args.enforce_seconds = min(args.observe_seconds, 8), 2
    return args


def main(argv: Sequence[str] | None = None) -> int:
    return run_in_workdir("rgspark-observe-", _benchmark, _parse_args(argv))


def _benchmark(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    import pyspark

    with (
        admin_server(workdir, settings=SERVER_SETTINGS) as setup,
        spark_session(args.cores, TIMING_CONF) as spark,
    ):
        quota = args.quota
        setup.put_group(FREE)  # limits nothing
        setup.namespace(FREE, FREE)
        setup.put_group(WATCHED, publishRateInMsgs=quota)
        setup.namespace(WATCHED, WATCHED)
        set_mode(setup, WATCHED, "observe")
        compared = side_by_side(spark, setup, args, quota)
        switched = switch(spark, setup, args, quota, workdir)
        server_log = setup.server.log.read_text(errors="replace")
    return {
        "benchmark": "observe_mode",
        "quota": quota,
        "side_by_side": compared,
        "charge_us": charge_cost(quota, int(DEFAULT_BATCH_ROWS)),
        "switch": switched,
        "meets_bars": {
            "unthrottled": compared["meets_bar"],
            "figures": switched["observed"]["meets_bar"],
            "enforce_after_switch": switched["meets_bar"],
        },
        "config": {
            "quick": args.quick,
            "cores": args.cores,
            "observe_seconds": args.observe_seconds,
            "enforce_seconds": args.enforce_seconds,
            "server_settings": SERVER_SETTINGS,
            "server_errors_logged": server_log.count("Traceback"),
            "pyspark": pyspark.__version__,
        },
    }


if __name__ == "__main__":
    raise SystemExit(main())
