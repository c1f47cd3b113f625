"""Does a group hold its quota while thousands of workers join it within seconds?

    python -m benchmarks.join_storm [--workers 2000] [--join-seconds 3]
                                    [--server-processes 2] [--seconds 20] [--quick]

A live server (``rgadmin serve --workers N``, the README's defaults otherwise) on a fresh
PostgreSQL database (made on the server ``--database`` names, dropped afterwards), one group
with a ``publishRateInMsgs`` quota attached to one namespace, and ``--workers`` simulated
Spark worker processes of one job joining it at moments spread evenly over
``--join-seconds``, each wanting a tenth of the quota. Prints one JSON object.

A worker here is not an OS process (the machine has two cores) but rgspark's own objects
driven on one event loop: a `NamespaceQuota` (its buckets and demand estimators, the real
ones) and a `Reporter` whose rules decide everything a worker decides. Only the round trip
is the benchmark's, on asyncio's streams (one keep-alive connection per worker, as
`rgspark._admin.AdminClient` keeps one; `_Connection` says why not httpx's client), so that
thousands of reports can be in flight without a thread each:

- when to report: `Reporter.due_in`, looked at when it says (as `Reporter._wait` does) or
  at once when the watch says a group's shares moved;
- the report: `Reporter.request`, the round trip, then `Reporter.take_answer` (the two
  halves of `Reporter.run_once`) or, when it fails, `Reporter.failed` (the backoff, and the
  fail-static rule: the last answer while it holds, then its ``fallbackAllocations``), with
  `rgspark._admin.answer_of` mapping a status onto rgspark's errors;
- the first report: retried as `rgspark._client._first_report` retries it (``on_no_policy``
  ``"fail"``, the default: no task runs before the first answer, so a worker enforces 0);
- the watch on ``/quota/v1/changes``: `Reporter._watch`'s loop, on a connection per poll as
  `AdminClient.watcher` makes it;
- the work: slices of `SLICE_S` at the worker's demand, charged with
  `NamespaceQuota.charge`, then held back for the wait it returns, so its estimator measures
  a demand above its share, as a throttled Spark task's does.

What a worker enforces is its bucket's rate (`NamespaceQuota.rate`), 0 before its first
answer. Every `SAMPLE_S` the benchmark sums them: ``max_enforced_ratio`` is the most of
those sums over the quota, ``samples_over_105_pct`` the samples above DESIGN.md's bound.
Each sample also splits the sum by the worker's state: its last answer's lease holds,
past it but within the grace (the last allocation kept), on its fallback; and, with
``--diagnose``, by whether the server counts it alive then (its ``lease_until``, read from
the database every `DIAGNOSE_S`), beside the server's own sum in force. ``first_answer_s``
is each worker's time from its start to its first answer; ``status`` counts the answers by
status (``503`` the reports shed), ``first_report_status`` those to first reports alone.
``store_check`` is ``rgadmin check`` at the end.

``client_max_lag_s`` is how late the benchmark's own event loop ran. Past rgspark's demand
window (an eighth of the report interval), a worker whose loop ran late looks idle to its
estimator and reports a demand of 0, so the group's use after the storm reads low: with
2,000 workers (a lag of about 0.3 s) what they enforce settles near 85% of the quota, with
500 (0.02 s) at 99.9%. The bound and the first answers do not depend on it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import psycopg

from app.auth import create_token, generate_secret_key
from benchmarks._servers import (
    HOST,
    Server,
    migrate_rgadmin,
    postgres_database,
    serve_rgadmin,
    server_env,
    stop,
    store_check,
)

try:
    from rgspark._admin import answer_of, throttle_time_s
    from rgspark._exceptions import AdminServerError, ServerUnreachableError
    from rgspark._quota import NamespaceQuota
    from rgspark._reporter import MAX_WATCHED_GROUPS, WATCH_S, Reporter
    from rgspark._schedule import MAX_BACKOFF_S
except ImportError:  # a source checkout where the package is not installed
    sys.modules.pop("rgspark", None)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "spark"))
    from rgspark._admin import answer_of, throttle_time_s
    from rgspark._exceptions import AdminServerError, ServerUnreachableError
    from rgspark._quota import NamespaceQuota
    from rgspark._reporter import MAX_WATCHED_GROUPS, WATCH_S, Reporter
    from rgspark._schedule import MAX_BACKOFF_S

DEFAULT_DATABASE = "postgresql://postgres@127.0.0.1:5432/postgres"
SUPERUSER = "admin"
ROLE = "storm-job"
TENANT = "storm"
NAMESPACE = "ingest"
GROUP = "storm-group"
KIND = "publish"
DIMENSION = "publishMsgs"
DEMAND_SHARE = 0.1  # of the quota: what each worker wants
SLICE_S = 0.25  # seconds of work at its demand between two charges
SAMPLE_S = 0.25  # how often what the workers enforce is summed
DIAGNOSE_S = 0.5  # how often --diagnose reads the server's reporters
OVER = 1.05  # DESIGN.md's bound, as a fraction of the quota
REQUEST_TIMEOUT_S = 10.0  # rgspark's default (`ResourceGroupClient.timeout_s`)
FIRST_RETRY_S = 0.5  # `rgspark._client._first_report`'s first delay, doubled to 10 s
REPORT_PATH = "/quota/v1/reporters/{}/reports"
STATES = ("lease", "grace", "fallback")


class _Connection:
    """One HTTP/1.1 connection to the server, kept alive between calls as
    `rgspark._admin.AdminClient`'s is (``keep_alive=False``: one per call, as its watcher's).

    Not httpx: its asyncio client costs about 0.4 ms of CPU a call, and thousands of workers
    on a shared two-core machine then starve the server they measure (measured: the event
    loop ran 15-20 s late at 1,000-2,000 workers). The answer is still an `httpx.Response`,
    so that `answer_of` reads it as rgspark does."""

    def __init__(self, port: int, authorization: str, *, keep_alive: bool = True) -> None:
        self._port = port
        self._head = f"Host: {HOST}:{port}\r\nAuthorization: {authorization}\r\n"
        if not keep_alive:
            self._head += "Connection: close\r\n"
        self._keep_alive = keep_alive
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def call(
        self, method: str, target: str, body: Any = None, *, timeout: float = REQUEST_TIMEOUT_S
    ) -> httpx.Response:
        """The answer; `ServerUnreachableError` when none came (refused, cut, timed out)."""
        try:
            return await asyncio.wait_for(self._exchange(method, target, body), timeout)
        except (OSError, EOFError, TimeoutError, ValueError) as exc:
            self.close()
            raise ServerUnreachableError(f"{method} {target}: no answer ({exc!r})") from exc

    async def _exchange(self, method: str, target: str, body: Any) -> httpx.Response:
        if self._streams is not None and self._streams[0].at_eof():
            self.close()  # the server closed it while idle: a new one, as httpx's pool does
        if self._streams is None:
            self._streams = await asyncio.open_connection(HOST, self._port)
        reader, writer = self._streams
        content = b"" if body is None else json.dumps(body).encode()
        head = f"{method} {target} HTTP/1.1\r\n{self._head}Content-Length: {len(content)}\r\n"
        if body is not None:
            head += "Content-Type: application/json\r\n"
        writer.write(head.encode() + b"\r\n" + content)
        lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = dict(line.split(":", 1) for line in lines[1:] if line)
        headers = {name.lower(): value.strip() for name, value in headers.items()}
        length = 0 if status in (204, 304) else int(headers.get("content-length", 0))
        answer = await reader.readexactly(length) if length else b""
        if not self._keep_alive or headers.get("connection") == "close":
            self.close()
        return httpx.Response(status, headers=headers, content=answer)

    def close(self) -> None:
        if self._streams is not None:
            self._streams[1].close()
            self._streams = None


@dataclass
class _Stub:
    """Where a `Reporter` reads its admin client: the last answer's throttle time."""

    throttle_s: float = 0.0


@dataclass
class _Worker:
    """One simulated worker process: rgspark's objects, and what the benchmark saw of it."""

    index: int
    start_at: float  # wall clock
    quota: NamespaceQuota = field(default_factory=lambda: NamespaceQuota(TENANT, NAMESPACE))
    stub: _Stub = field(default_factory=_Stub)
    reporter: Reporter | None = None
    first_answer_s: float | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def reporter_id(self) -> str:
        return f"storm-{self.index:05d}"

    def enforced(self) -> float:
        """The rate its tasks are held to now: 0 before its first answer (no task runs)."""
        if self.first_answer_s is None:
            return 0.0
        rate = self.quota.rate(DIMENSION)
        return math.inf if rate is None else rate

    def state(self, now: float) -> str:
        """``lease`` (its last answer holds), ``grace`` (past it, the last allocation kept:
        `Reporter.fallback_at` not reached) or ``fallback``."""
        reporter = self.reporter
        assert reporter is not None and reporter.reached_at is not None
        if reporter.on_fallback:
            return "fallback"
        return "lease" if now < reporter.reached_at + reporter.lease_s else "grace"


@dataclass
class _Tally:
    status: Counter[str] = field(default_factory=Counter)
    watch_status: Counter[str] = field(default_factory=Counter)
    first_status: Counter[str] = field(default_factory=Counter)
    """Of the answers to the workers' first reports."""


class _Storm:
    """The workers, their event loop's tasks, and the samples."""

    def __init__(self, args: argparse.Namespace, port: int, token: str) -> None:
        self.args = args
        self.port = port
        self.authorization = f"Bearer {token}"
        self.quota = float(args.quota)
        self.demand = DEMAND_SHARE * self.quota
        self.tally = _Tally()
        self.samples: list[dict[str, Any]] = []
        self.server_view: dict[str, tuple[float, float | None]] = {}  # id: (until, allocation)
        self.server_in_force: float | None = None
        self.workers: list[_Worker] = []
        self.lag_s = 0.0
        self.errors: list[str] = []

    async def run(self) -> None:
        t0 = time.time() + 0.5
        spacing = self.args.join_seconds / max(1, self.args.workers)
        self.workers = [_Worker(n, t0 + n * spacing) for n in range(self.args.workers)]
        tasks = [asyncio.create_task(self._life(w)) for w in self.workers]
        try:
            await self._sample(t0, t0 + self.args.seconds)
        finally:
            ended = await _end(tasks)
            self.errors += [
                repr(outcome)
                for outcome in ended
                if isinstance(outcome, BaseException)
                and not isinstance(outcome, asyncio.CancelledError)
            ]

    async def _sample(self, t0: float, end: float) -> None:
        due = t0
        while due < end:
            due += SAMPLE_S
            await asyncio.sleep(max(0.0, due - time.time()))
            now = time.time()
            self.lag_s = max(self.lag_s, now - due)
            self.samples.append(self._snapshot(now - t0, now))

    def _snapshot(self, t_s: float, now: float) -> dict[str, Any]:
        quota = self.quota
        by_state = dict.fromkeys(STATES, 0.0)
        counted = {"alive": 0.0, "gone": 0.0}
        counted_n = {"alive": 0, "gone": 0}
        joined = answered = 0
        for worker in self.workers:
            joined += worker.start_at <= now
            if worker.first_answer_s is None:
                continue
            answered += 1
            rate = worker.enforced()
            by_state[worker.state(now)] += rate
            view = self.server_view.get(worker.reporter_id)
            alive = "alive" if view is not None and view[0] > now else "gone"
            counted[alive] += rate
            counted_n[alive] += 1
        total = sum(by_state.values())
        sample: dict[str, Any] = {
            "t_s": round(t_s, 2),
            "ratio": round(total / self.quota, 4),
            "joined": joined,
            "answered": answered,
            "by_state": {k: round(v / self.quota, 4) for k, v in by_state.items()},
            "workers_by_state": dict(
                Counter(w.state(now) for w in self.workers if w.first_answer_s is not None)
            ),
        }
        if self.args.diagnose:
            sample["by_server_count"] = {k: round(v / self.quota, 4) for k, v in counted.items()}
            sample["workers_by_server_count"] = counted_n
            in_force = self.server_in_force
            sample["server_in_force"] = None if in_force is None else round(in_force / quota, 4)
        return sample

    async def _life(self, worker: _Worker) -> None:
        await asyncio.sleep(max(0.0, worker.start_at - time.time()))
        worker.quota.use(KIND)  # as `rgspark._client._start` does
        reporter = worker.reporter = Reporter(
            worker.stub,  # type: ignore[arg-type]
            [worker.quota],
            reporter_id=worker.reporter_id,
        )
        http = _Connection(self.port, self.authorization)
        try:
            await self._first_answer(worker, reporter, http)
            work = asyncio.create_task(self._work(worker))
            watch = asyncio.create_task(self._watch(worker, reporter)) if self.args.watch else None
            try:
                await self._report_when_due(worker, reporter, http)
            finally:
                work.cancel()
                if watch is not None:
                    watch.cancel()
        finally:
            http.close()

    async def _first_answer(self, worker: _Worker, reporter: Reporter, http: _Connection) -> None:
        """As `rgspark._client._first_report`: retried, the delay doubled up to 10 s."""
        delay = FIRST_RETRY_S
        while True:
            now = time.time()
            try:
                answer = await self._post(worker, reporter.request(now), http)
            except AdminServerError as exc:
                self.tally.first_status[str(exc.status_code or "unreachable")] += 1
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)
                continue
            reporter.take_answer(answer, now)
            self.tally.first_status["200"] += 1
            worker.first_answer_s = time.time() - worker.start_at
            return

    async def _report_when_due(
        self, worker: _Worker, reporter: Reporter, http: _Connection
    ) -> None:
        """`Reporter._run`: wait until `Reporter.due_in` says, report, again."""
        while True:
            seconds = reporter.due_in(time.time())
            if seconds > 0:
                worker.wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(worker.wake.wait(), seconds)
                continue
            now = time.time()
            try:
                answer = await self._post(worker, reporter.request(now), http)
            except AdminServerError as exc:
                reporter.failed(exc)
                continue
            reporter.take_answer(answer, now)  # which also ends a streak of failures

    async def _post(
        self, worker: _Worker, body: dict[str, Any], http: _Connection
    ) -> dict[str, Any]:
        path = REPORT_PATH.format(worker.reporter_id)
        try:
            response = await http.call("POST", path, body)
        except ServerUnreachableError:
            self.tally.status["unreachable"] += 1
            raise
        self.tally.status[str(response.status_code)] += 1
        worker.stub.throttle_s = throttle_time_s(response)
        return answer_of(response, "POST", path)

    async def _work(self, worker: _Worker) -> None:
        """Slices at the demand, charged, then held back as long as the charge says."""
        quota = worker.quota
        while True:
            rate = quota.rate(DIMENSION)
            msgs = min(self.demand, math.inf if rate is None else rate) * SLICE_S
            await asyncio.sleep(msgs / self.demand)
            wait = quota.charge(KIND, msgs, 0)
            await asyncio.sleep(max(wait, 0.001))

    async def _watch(self, worker: _Worker, reporter: Reporter) -> None:
        """`Reporter._watch`: the long poll on changes, on a new connection each time."""
        after: int | None = None
        wakes: dict[str, int | None] = {}
        failures = 0
        http = _Connection(self.port, self.authorization, keep_alive=False)
        try:
            while True:
                groups = sorted(reporter._groups)[:MAX_WATCHED_GROUPS]
                wakes = {group: wakes.get(group) for group in groups}
                params: dict[str, Any] = {"waitMs": round(WATCH_S * 1000)}
                if after is not None:
                    params["after"] = after
                if wakes:
                    params["group"] = [f"{'' if w is None else w}:{g}" for g, w in wakes.items()]
                try:
                    target = "/quota/v1/changes?" + urlencode(params, doseq=True)
                    response = await http.call("GET", target, timeout=WATCH_S + REQUEST_TIMEOUT_S)
                    self.tally.watch_status[str(response.status_code)] += 1
                    answer = answer_of(response, "GET", "/quota/v1/changes")
                except AdminServerError:
                    failures += 1
                    await asyncio.sleep(min(reporter.period_s * 2**failures, MAX_BACKOFF_S))
                    continue
                failures = 0
                generation = int(answer["generation"])
                seen = {str(g): int(w) for g, w in (answer.get("groups") or {}).items()}
                if after is not None and generation > after:
                    reporter.changed(admin=True)
                    worker.wake.set()
                elif any(wakes.get(g) not in (None, wake) for g, wake in seen.items()):
                    reporter.changed(admin=False)
                    worker.wake.set()
                after = generation
                wakes.update(seen)
        finally:
            http.close()


async def _end(tasks: list[asyncio.Task[None]]) -> list[BaseException | None]:
    """Cancel the tasks until they have ended: ``asyncio.wait_for`` (3.11) loses a cancel
    that comes as its wait ends, and the worker would go on reporting."""
    pending = set(tasks)
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=1.0)
    return [None if task.cancelled() else task.exception() for task in tasks]


def _read_server_view(storm: _Storm, database_url: str, stop_reading: threading.Event) -> None:
    """--diagnose: every `DIAGNOSE_S`, each reporter's lease end and stored allocation, and
    the group's sum in force, as the server holds them."""
    with psycopg.connect(database_url, autocommit=True) as connection:
        while not stop_reading.wait(DIAGNOSE_S):
            rows = connection.execute(
                "SELECT r.reporter_id, extract(epoch FROM r.lease_until), "
                "u.publish_msgs_allocation FROM quota_reporters r "
                "LEFT JOIN quota_usage u ON u.reporter_id = r.reporter_id"
            ).fetchall()
            storm.server_view = {rid: (float(until), alloc) for rid, until, alloc in rows}
            row = connection.execute(
                "SELECT publish_msgs_in_force FROM quota_groups WHERE name = %s", (GROUP,)
            ).fetchone()
            storm.server_in_force = None if row is None else float(row[0])


def _setup(port: int, token: str, quota: int) -> None:
    """The group, the tenant, the namespace attached to it, the job's role granted on it."""
    with httpx.Client(
        base_url=f"http://{HOST}:{port}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=REQUEST_TIMEOUT_S,
    ) as http:
        path = f"/admin/v2/namespaces/{TENANT}/{NAMESPACE}"
        for method, url, body in (
            ("PUT", f"/admin/v2/resourcegroups/{GROUP}", {"publishRateInMsgs": quota}),
            ("PUT", f"/admin/v2/tenants/{TENANT}", {"adminRoles": [], "allowedClusters": []}),
            ("PUT", path, None),
            ("POST", f"{path}/resourcegroup/{GROUP}", None),
            ("POST", f"{path}/permissions/{ROLE}", ["produce"]),
        ):
            response = http.request(method, url, json=body)
            if response.status_code != 204:
                raise RuntimeError(f"{method} {url}: {response.status_code} {response.text}")


def _percentile(values: Sequence[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(fraction * len(ordered)) - 1)]


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _summary(storm: _Storm) -> dict[str, Any]:
    samples = storm.samples
    peak = max(samples, key=lambda s: s["ratio"], default=None)
    firsts = [w.first_answer_s for w in storm.workers if w.first_answer_s is not None]
    over = [s for s in samples if s["ratio"] > OVER]
    return {
        "max_enforced_ratio": peak["ratio"] if peak else None,
        "samples": len(samples),
        "samples_over_105_pct": len(over),
        "peak": peak,
        "first_over_105": over[0] if over else None,
        "shed_503": storm.tally.status.get("503", 0),
        "status": dict(storm.tally.status),
        "first_report_status": dict(storm.tally.first_status),
        "watch_status": dict(storm.tally.watch_status),
        "first_answer_s": {
            "answered": len(firsts),
            "unanswered": len(storm.workers) - len(firsts),
            "median": _round(_percentile(firsts, 0.5)),
            "p99": _round(_percentile(firsts, 0.99)),
            "max": _round(max(firsts, default=None)),
        },
        "final": samples[-1] if samples else None,
        "client_max_lag_s": round(storm.lag_s, 3),
        "errors": sorted(Counter(storm.errors).items())[:10],
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    key = generate_secret_key()
    result: dict[str, Any] = {
        "workers": args.workers,
        "join_seconds": args.join_seconds,
        "server_processes": args.server_processes,
        "seconds": args.seconds,
        "quota": args.quota,
        "demand_per_worker": DEMAND_SHARE * args.quota,
        "sample_s": SAMPLE_S,
    }
    with (
        tempfile.TemporaryDirectory(prefix="join-storm-") as tmp,
        postgres_database(args.database, "rg_storm") as (database_url, version),
    ):
        workdir = Path(tmp)
        env = server_env(database_url, key, SUPERUSER)
        migrate_rgadmin(workdir, env)
        result["database"] = f"postgresql {version}"
        server: Server = serve_rgadmin(workdir, "rgadmin", env, workers=args.server_processes)
        stop_reading = threading.Event()
        try:
            _setup(server.port, create_token(subject=SUPERUSER, secret_key=key), args.quota)
            storm = _Storm(args, server.port, create_token(subject=ROLE, secret_key=key))
            reader = threading.Thread(
                target=_read_server_view, args=(storm, database_url, stop_reading), daemon=True
            )
            if args.diagnose:
                reader.start()
            asyncio.run(storm.run())
            stop_reading.set()
            result.update(_summary(storm))
            if args.samples:
                result["all_samples"] = storm.samples
            result["store_check"] = store_check(workdir, env)
        finally:
            stop_reading.set()
            stop(server)
    return result


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2000)
    parser.add_argument("--join-seconds", type=float, default=3.0)
    parser.add_argument("--server-processes", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=20.0, help="from the first join")
    parser.add_argument("--quota", type=int, default=100_000, help="publishRateInMsgs")
    parser.add_argument("--database", default=DEFAULT_DATABASE, help="a PostgreSQL server")
    parser.add_argument("--no-watch", dest="watch", action="store_false")
    parser.add_argument("--diagnose", action="store_true", help="read the server's view")
    parser.add_argument("--samples", action="store_true", help="print every sample")
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: 40 workers over 1 s, 6 s"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.workers, args.join_seconds, args.seconds = 40, 1.0, 6.0
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    # Thousands of workers' warnings (each shed report is one) would cost the event loop
    # more than their work: the figures say what happened.
    logging.getLogger("rgspark").setLevel(logging.ERROR)
    result = run(args)
    print(json.dumps(result, indent=2))
    ok = result["store_check"]["ok"] and result["first_answer_s"]["unanswered"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
