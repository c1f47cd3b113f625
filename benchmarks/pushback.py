"""Does a Spark job whose destination pushes back settle at what it takes, losing no row, and
does its group's other namespace get the rest?

    python -m benchmarks.pushback [--quick] [--seconds 20] [--quota 2000] [--limit 800]
                                  [--partitions 1] [--report-interval S]

prints one JSON object with these figures, measured with real PySpark in local mode against
``rgadmin serve`` on a SQLite database of its own and real HTTP destinations in this process:

- ``pushback``: a group allows ``--quota`` msgs/s to two namespaces. The first's job
  (``--limit`` times ``--seconds`` rows of distinct ids, ``--partitions`` partitions) sends
  them with ``foreachPartition(throttled_sink(client, "publish", send))`` to a destination
  that answers 429 with a ``Retry-After`` once it took ``--limit`` rows in the last second
  (a sliding window); `send` POSTs the chunk's ids with httpx and raises its
  ``HTTPStatusError``. At the same time, the second's job sends to a destination that takes
  everything. From the rows each destination took, timed as they arrive: the first's rate
  over sliding 2 s windows, the time from its first row to the first window after which
  the first window within 10% of ``--limit`` (``time_to_converge_s``), its mean rate from
  then to its last second (``converged_rate``) and the share of windows since within 10%
  (``windows_within_bar``), every id received exactly once (``lost``,
  ``duplicated``), and the second's rate over the same window (``other_rate``, against
  ``--quota`` minus ``--limit``).
- ``baseline``: the same job to the same kind of destination, in a group of its own, with a
  `send` that raises a plain ``RuntimeError`` on a 429 (rgspark cannot tell it from any
  other failure): whether the job failed, and the ids lost and duplicated.

Bars: ``converged_rate`` within 10% of ``--limit`` reached in under 10 s; no id lost or
duplicated; ``other_rate`` at least 85% of ``--quota`` minus ``--limit``. ``--quick`` shrinks
the run for a smoke test; its windows are too short for the bars.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.spark_throttle import Setup, admin_server, run_in_workdir, spark_session

if TYPE_CHECKING:
    from pyspark.sql import Row, SparkSession

    from rgspark import ResourceGroupClient

BAR = 0.10  # of the destination's limit: the converged rate's error
CONVERGE_BAR_S = 10.0
OTHER_BAR = 0.85  # of the room the first namespace leaves: the other's rate
WINDOW_S = 2.0  # the rates' sliding window, at the destinations
STEP_S = 0.25  # between two windows
TAIL_S = 1.0  # the last second of a job, when its tasks end, is left out


class Destination:
    """An HTTP endpoint in a thread of this process that takes POSTed JSON lists of ids: at
    most `limit` ids over any `window_s` seconds times ``limit`` (429 with a ``Retry-After``
    of the seconds until there is room, to the millisecond), everything when `limit` is
    None. It records each id it took and when it took them."""

    def __init__(self, limit: float | None, window_s: float = 1.0) -> None:
        self.limit = limit
        self.window_s = window_s
        self.ids: Counter[int] = Counter()
        self.taken: list[tuple[float, int]] = []  # (time.time(), ids) of each accepted post
        self.refused = 0
        self._recent: deque[tuple[float, int]] = deque()  # accepted within the window
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/rows"

    def offer(self, ids: list[int]) -> float | None:
        """Take `ids`, or refuse them: None when taken, else the seconds until there is room."""
        now = time.time()
        with self._lock:
            recent = self._recent
            while recent and recent[0][0] <= now - self.window_s:
                recent.popleft()
            if self.limit is not None:
                room = self.limit * self.window_s - sum(n for _, n in recent)
                if len(ids) > room:
                    self.refused += 1
                    return _until_room(recent, len(ids) - room, now, self.window_s)
            recent.append((now, len(ids)))
            self.taken.append((now, len(ids)))
            self.ids.update(ids)
            return None

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def received(self, expected: int) -> dict[str, int]:
        """Of ids ``0 .. expected - 1``: how many arrived, were lost, came more than once."""
        return {
            "expected": expected,
            "received": sum(self.ids.values()),
            "lost": sum(1 for i in range(expected) if i not in self.ids),
            "duplicated": sum(count - 1 for count in self.ids.values() if count > 1),
            "unexpected": sum(1 for i in self.ids if not 0 <= i < expected),
        }


def _until_room(
    recent: deque[tuple[float, int]], missing: float, now: float, window: float
) -> float:
    """Seconds until enough of `recent` leaves the window to make `missing` ids of room."""
    freed = 0
    for when, n in recent:
        freed += n
        if freed >= missing:
            return max(0.001, when + window - now)
    return window


def _handler(destination: Destination) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            wait = destination.offer([int(i) for i in json.loads(body)])
            self.send_response(204 if wait is None else 429)
            if wait is not None:
                self.send_header("Retry-After", f"{wait:.3f}")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a line per post would drown the benchmark's output

    return Handler


@contextlib.contextmanager
def destination(limit: float | None) -> Iterator[Destination]:
    endpoint = Destination(limit)
    try:
        yield endpoint
    finally:
        endpoint.close()


def posting(url: str, *, plain: bool = False) -> Callable[[list[Row]], None]:
    """A sink's `send`: POST the chunk's ids to `url`. An error answer raises httpx's
    ``HTTPStatusError`` (a 429 is a pushback rgspark recognises), or with `plain` a
    ``RuntimeError`` (which it cannot tell from any other failure)."""

    clients: list[Any] = []  # each task's copy opens one, kept for its chunks

    def send(chunk: list[Row]) -> None:
        import httpx

        if not clients:
            clients.append(httpx.Client(timeout=30))
        response = clients[0].post(url, json=[row[0] for row in chunk])
        if plain and response.is_error:
            raise RuntimeError(f"the destination answered {response.status_code}")
        response.raise_for_status()

    return send


def sink_job(
    spark: SparkSession,
    client: ResourceGroupClient,
    url: str,
    rows: int,
    partitions: int,
    **kw: Any,
) -> Callable[[], None]:
    """The job that sends ids ``0 .. rows - 1`` to `url` through `throttled_sink` (made now,
    on the driver), to run later."""
    from rgspark import throttled_sink

    sink = throttled_sink(client, "publish", posting(url, **kw))
    df = spark.range(rows, numPartitions=partitions)
    return lambda: df.foreachPartition(sink)


def run_together(*jobs: Callable[[], None]) -> list[BaseException | None]:
    """Run `jobs` at the same time, each in a driver thread; what each raised."""
    errors: list[BaseException | None] = [None] * len(jobs)

    def run(index: int) -> None:
        try:
            jobs[index]()
        except BaseException as exc:  # reported, not lost in a thread
            errors[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def rates(taken: list[tuple[float, int]], start: float, end: float) -> list[tuple[float, float]]:
    """(window end, ids per second) over sliding `WINDOW_S` windows every `STEP_S`, from
    ``start + WINDOW_S`` to `end`."""
    series = []
    at = start + WINDOW_S
    while at <= end:
        ids = sum(n for when, n in taken if at - WINDOW_S < when <= at)
        series.append((at, ids / WINDOW_S))
        at += STEP_S
    return series


def convergence(taken: list[tuple[float, int]], limit: float) -> dict[str, Any]:
    """When the rate at a destination first came within `BAR` of `limit` (over a `WINDOW_S`
    window), its mean rate from then to its last `TAIL_S`, and the share of windows since
    within `BAR`."""
    empty = {"converged": False, "time_to_converge_s": None, "converged_rate": 0.0}
    if not taken:
        return empty
    start, end = taken[0][0], taken[-1][0] - TAIL_S
    series = rates(taken, start, end)
    settled = next((at for at, rate in series if abs(rate / limit - 1) <= BAR), None)
    if settled is None or end - settled < WINDOW_S:
        return empty
    since = [rate for at, rate in series if at >= settled]
    return {
        "converged": True,
        "time_to_converge_s": round(settled - start, 2),
        "converged_rate": round(rate_between(taken, settled - WINDOW_S, end), 1),
        "windows_within_bar": round(
            sum(abs(rate / limit - 1) <= BAR for rate in since) / len(since), 3
        ),
        "min_window_rate": round(min(since), 1),
        "window": (settled - WINDOW_S, end),
    }


def rate_between(taken: list[tuple[float, int]], start: float, end: float) -> float:
    ids = sum(n for when, n in taken if start < when <= end)
    return ids / (end - start) if end > start else 0.0


def pushback(
    spark: SparkSession, setup: Setup, args: argparse.Namespace, group: str = "shared"
) -> dict[str, Any]:
    """The two namespaces' jobs, side by side: the `pushback` figures."""
    setup.put_group(group, publishRateInMsgs=args.quota)
    for namespace in ("pushy", "other"):
        setup.namespace(namespace, group)
    pushy_client, other_client = setup.client("pushy"), setup.client("other")
    rows = round(args.limit * args.seconds)
    room = args.quota - args.limit
    with destination(args.limit) as pushy, destination(None) as other:
        errors = run_together(
            sink_job(spark, pushy_client, pushy.url, rows, args.partitions),
            # Enough to keep sending while the first job runs, at the room it leaves.
            sink_job(
                spark, other_client, other.url, round(room * args.seconds * 1.5), args.partitions
            ),
        )
        settled = convergence(pushy.taken, args.limit)
        window = settled.pop("window", None)
        other_rate = 0.0 if window is None else rate_between(other.taken, *window)
        stats = pushy_client.stats["publish"]
        return {
            "limit": args.limit,
            "quota": args.quota,
            **settled,
            "error": round(settled["converged_rate"] / args.limit - 1, 3),
            "ids": pushy.received(rows),
            "refused_posts": pushy.refused,
            "pushbacks": stats.pushbacks,
            "pushback_s": round(stats.pushback_s, 2),
            "task_throttled_s": round(stats.task_throttled_s, 2),
            "other_rate": round(other_rate, 1),
            "other_room": room,
            "other_share": round(other_rate / room, 3),
            "job_errors": [None if e is None else _first_line(e) for e in errors],
            "series": {
                "pushy": _series(pushy.taken),
                "other": _series(other.taken),
            },
        }


def baseline(spark: SparkSession, setup: Setup, args: argparse.Namespace) -> dict[str, Any]:
    """The same job with a `send` that raises a plain error on a 429."""
    setup.put_group("alone", publishRateInMsgs=args.quota)
    setup.namespace("plain", "alone")
    rows = round(args.limit * args.seconds)
    with destination(args.limit) as plain:
        job = sink_job(spark, setup.client("plain"), plain.url, rows, args.partitions, plain=True)
        (error,) = run_together(job)
        return {
            "job_failed": error is not None,
            "error": None if error is None else _first_line(error),
            "ids": plain.received(rows),
        }


def _series(taken: list[tuple[float, int]]) -> list[float]:
    """Ids per second at a destination, each second from its first."""
    if not taken:
        return []
    start = taken[0][0]
    seconds = [0] * (int(taken[-1][0] - start) + 1)
    for when, n in taken:
        seconds[int(when - start)] += n
    return [float(n) for n in seconds]


def _first_line(error: BaseException) -> str:
    text = str(error)
    for line in text.splitlines():
        if "RuntimeError" in line or "HTTPStatusError" in line:
            return line.strip()[:300]
    return (text.splitlines() or [type(error).__name__])[0][:300]


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pushback", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a tiny run, for a smoke test")
    parser.add_argument("--seconds", type=float, default=None, help="the first job's length")
    parser.add_argument("--quota", type=int, default=2000, help="the group's msgs/s")
    parser.add_argument("--limit", type=int, default=800, help="the destination's rows/s")
    parser.add_argument("--partitions", type=int, default=1, help="of the first job")
    parser.add_argument("--report-interval", type=float, default=None, help="the server's")
    args = parser.parse_args(argv)
    if args.seconds is None:
        args.seconds = 4.0 if args.quick else 20.0
    if not 0 < args.limit < args.quota:
        parser.error("--limit must be above 0 and below --quota")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    return run_in_workdir("rgspark-pushback-", _benchmark, _parse_args(argv))


def _benchmark(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    import pyspark

    with admin_server(workdir, args.report_interval) as setup:
        with spark_session(2 * args.partitions) as spark:
            figures = pushback(spark, setup, args)
            plain = baseline(spark, setup, args)
        server_log = setup.server.log.read_text(errors="replace")
    ids = figures["ids"]
    meets = {
        "converged": figures["converged"]
        and abs(figures["error"]) <= BAR
        and figures["time_to_converge_s"] < CONVERGE_BAR_S,
        "exactly_once": ids["lost"] == ids["duplicated"] == ids["unexpected"] == 0,
        "other_rises": figures["other_share"] >= OTHER_BAR,
    }
    return {
        "benchmark": "pushback",
        "pushback": figures,
        "baseline": plain,
        "meets_bars": meets,
        "config": {
            "master": f"local[{2 * args.partitions}]",
            "seconds": args.seconds,
            "partitions": args.partitions,
            "quick": args.quick,
            "report_interval_s": args.report_interval,
            "window_s": WINDOW_S,
            "server_errors_logged": server_log.count("Traceback"),
            "pyspark": pyspark.__version__,
            "python": platform.python_version(),
        },
    }


if __name__ == "__main__":
    sys.exit(main())
