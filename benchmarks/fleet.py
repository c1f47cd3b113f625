"""Does what the simulator shows hold live: real servers, real reporters, real concurrency?

    python -m benchmarks.fleet SCENARIO.json [--database URL] [--server-processes N]
                               [--trace OUT.csv] [--duration-scale F]
    python -m benchmarks.fleet --all [DIR] [--database URL] [--server-processes N]
                               [--duration-scale F]

The first form runs one scenario (the simulator's file format, DESIGN.md section 7) live and
prints its metrics as one JSON object; the second runs every ``*.json`` scenario in DIR
(default: ``benchmarks/scenarios``), one after another, and prints one JSON object with a
table of the key figures per scenario and every run in full.

The server: a database made for the run, on the PostgreSQL server that ``--database`` names
(default ``postgresql://postgres@127.0.0.1:5432/test``; a new database is created there and
dropped afterwards) or in SQLite (``sqlite:///PATH``, a file that must not exist yet, deleted
afterwards; bare ``sqlite://`` puts it in the run's temporary folder), built with ``rgadmin
migrate``; then ``--server-processes`` (2) ``rgadmin serve`` processes on it, each with
``RG_REPORT_INTERVAL_SECONDS`` set to the scenario's ``report_interval_s``. They sit behind a
round-robin that is client-side: every HTTP client of the run (one per reporter, as each
worker process has its own) has a transport that sends each request to the next process in
turn, each client starting at a different one, so that one reporter's consecutive reports
land on different processes, as behind a load balancer without affinity.

Setup goes through the admin API with a superuser token (an HS256 key made for the run and
handed to the servers): a group whose ``publishRateInMsgs`` is the scenario's quota, a tenant,
one namespace per scenario namespace (a reporter's ``namespace``; ``default`` where it
names none), each attached to the group, and a role granted ``produce`` on each. Every reporter
reports with that role's token, not the superuser's.

Each scenario reporter is a real rgspark runtime, started as a worker process starts its own
(`rgspark._client._start`): a `NamespaceQuota` with ``publish`` announced, a `Reporter` whose
first report is answered before any work, then its background thread reporting over real
HTTP at the server's cadence. It is created at ``join_s`` on a thread of its own and closed
at ``leave_s`` (which releases its share at once); all run concurrently, in real time. Its
work consumes at most its demand, in the simulator's slices: 10 ms of work at the rate it
may use (its allocation, when below its demand), done in the time it takes at its demand,
then charged with ``quota.acquire("publish", msgs, 0)``, which waits while the bucket is in
debt; then the next slice. A worker that this process stalled (threads of one process on a
shared machine can be) makes up for up to half a second of missed work, at the rate its
bucket allows. With a demand of 0 it idles, and when demand comes back it announces its
traffic again (``quota.use("publish")``, a task starting), as the simulator's workers do.
What it charged counts in the one-second window in which it charged it. A quota change is a
``PUT`` of the group with only ``publishRateInMsgs`` (Pulsar's merge rule keeps the rest),
at its time.

Every 100 ms the allocations in force are sampled: each reporter's ``quota.rate
("publishMsgs")``, from its first answer until its release has returned. Their sum as a
percentage of the quota then is the figure DESIGN.md asks for: ``max_in_force_pct``, the most
of those samples, leaves out the samples from a quota cut until one interval after the
``PUT`` was answered (plus one sample period, for a report in flight), since a cut reaches
each reporter only at its next report; ``max_in_force_pct_after_cut`` is the most of those.
Live, a cut reaches the reporters sooner: the server pushes it (``GET /quota/v1/changes``)
and they report at once; ``in_force_over_105_pct_for_s`` under ``quota_changes`` says how
long after the cut the allocations in force were still above it.
``benchmarks/live_scenarios/deep-cut.json`` (a 20-fold cut with a 5 s report interval) shows
that on its own (the simulator is not run on it). Steady reporters hold leases
(`app.quota.leases`), so ``reports_per_reporter_s`` is below one per interval once a group
settles; every change that moves a share is pushed as a cut is.
A reporter's ``allocated_rate`` in the trace is the mean of its samples in the window (0
where it had none in force).

The metrics are quota_sim's (`benchmarks.quota_sim.metrics`, over windows built as its
``Simulation.windows`` builds them), so the two compare directly; ``simulated`` repeats the
simulator's key figures for the same scenario and algorithm ``project`` beside them.

``--duration-scale F`` shortens a run for CI: every time in the scenario (joins, leaves,
demand steps, quota changes and the duration) is multiplied by F and rounded to whole
seconds; the report interval is the server's and stays. The benchmark is the full length
(F = 1, the default).

Everything is bounded: each request times out, runtimes are closed and their threads joined
with timeouts, the servers are stopped and the database dropped also on errors, Ctrl-C and
SIGTERM. The exit status is 1 when something went wrong (a failed setup or quota change, a
reporter that never got its first answer, a thread that did not end, a failed report).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg import sql
from sqlalchemy import make_url

from app.auth import create_token, generate_secret_key
from benchmarks._servers import (
    HOST,
    Server,
    log_tail,
    migrate_rgadmin,
    serve_rgadmin,
    server_env,
    stop,
    store_check,
)
from benchmarks.quota_sim import (
    SCENARIOS,
    Member,
    Scenario,
    Window,
    metrics,
    rounded,
    simulate,
    write_trace,
)

try:
    from rgspark._admin import AdminClient
    from rgspark._exceptions import (
        AdminServerError,
        AuthenticationError,
        NamespaceNotFoundError,
        PermissionDeniedError,
    )
    from rgspark._quota import NamespaceQuota
    from rgspark._reporter import Reporter
except ImportError:  # a source checkout where the package is not installed
    sys.modules.pop("rgspark", None)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "spark"))
    from rgspark._admin import AdminClient
    from rgspark._exceptions import (
        AdminServerError,
        AuthenticationError,
        NamespaceNotFoundError,
        PermissionDeniedError,
    )
    from rgspark._quota import NamespaceQuota
    from rgspark._reporter import Reporter

DEFAULT_DATABASE = "postgresql://postgres@127.0.0.1:5432/test"
SUPERUSER = "admin"
ROLE = "fleet-job"
TENANT = "fleet"
GROUP = "fleet-group"
KIND = "publish"
DIMENSION = "publishMsgs"
SLICE_S = 0.01  # seconds of work between two charges, as the simulator's
CATCH_UP_S = 0.5  # the most work a stalled worker makes up for, in seconds of its demand
SAMPLE_S = 0.1  # how often the allocations in force are sampled
SAMPLES_PER_WINDOW = round(1 / SAMPLE_S)
START_DELAY_S = 0.2  # between setting up and the scenario's second 0
REQUEST_TIMEOUT_S = 5.0
FIRST_ANSWER_RETRY_S = 0.2
JOIN_TIMEOUT_S = 20.0  # for every thread of the run to end once told to
OVER = 1.05  # DESIGN.md's bound on the allocations in force, as a fraction of the quota
KEY_FIGURES = (
    "max_overshoot_pct",
    "utilization_pct",
    "steady_error_pct",
    "convergence_intervals",
    "jain_fairness",
)


class _Left(Exception):
    """Raised out of a reporter's sleeps when it is told to leave."""


# the servers and the round-robin in front of them


class RoundRobin:
    """The server processes, and what each was sent and what failed, over all clients."""

    def __init__(self, ports: Sequence[int]) -> None:
        self.ports = list(ports)
        self._clients = itertools.count()
        self._lock = threading.Lock()
        self.requests = [0] * len(self.ports)
        self.reports = 0
        self.failed: dict[str, int] = defaultdict(int)  # "POST /reports 503": count

    def first(self) -> int:
        """Where a new client starts its turn: the next process after the last client's."""
        with self._lock:
            return next(self._clients) % len(self.ports)

    def sent(self, index: int) -> None:
        with self._lock:
            self.requests[index] += 1

    def record(self, request: httpx.Request, outcome: int | str) -> None:
        route = _route(request.url.path)
        with self._lock:
            if request.method == "POST" and route == "/reports":
                self.reports += 1
            # A release the server answers 404 is fine: it had already counted the reporter gone.
            released = request.method == "DELETE" and outcome == 404
            if not isinstance(outcome, int) or (outcome >= 400 and not released):
                self.failed[f"{request.method} {route} {outcome}"] += 1


def _route(path: str) -> str:
    for suffix in ("/reports", "/policy"):
        if path.endswith(suffix):
            return suffix
    return "/reporters/{id}" if "/reporters/" in path else path


class RoundRobinTransport(httpx.BaseTransport):
    """Sends each request to the next server process in turn, over a keep-alive pool of its
    own per process: so one reporter's consecutive reports land on different processes.

    The turn is the client's own, not one shared by all: with one shared turn, reporters
    that report in lockstep would each stay with one process. Clients start their turns
    at different processes, so the load is even.
    """

    def __init__(self, servers: RoundRobin) -> None:
        self._servers = servers
        self._turn = itertools.count(servers.first())
        # Plain HTTP: no TLS context to build, which would cost each new runtime ~35 ms of
        # CPU under the GIL and hold back the others joining with it.
        self._pools = [httpx.HTTPTransport(verify=False) for _ in servers.ports]
        #: Set as its reporter closes, which cuts the watcher's long poll on purpose.
        self.closing = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        index = next(self._turn) % len(self._servers.ports)
        self._servers.sent(index)
        port = self._servers.ports[index]
        request.url = request.url.copy_with(host=HOST, port=port)
        request.headers["Host"] = f"{HOST}:{port}"
        try:
            response = self._pools[index].handle_request(request)
        except httpx.TransportError as exc:
            if not (self.closing and request.url.path == "/quota/v1/changes"):
                self._servers.record(request, type(exc).__name__)
            raise
        self._servers.record(request, response.status_code)
        return response

    def close(self) -> None:
        for pool in self._pools:
            pool.close()


@contextlib.contextmanager
def _database(url: str, workdir: Path) -> Iterator[tuple[str, str]]:
    """A new database for the run: (its URL, what it is); dropped or deleted afterwards."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        if not parsed.database:
            path = workdir / "fleet.db"
        else:
            # The servers run in the temporary folder: resolve a relative path here, not there.
            path = Path(parsed.database).resolve()
            if path.exists():
                raise SystemExit(f"{path} exists; give a SQLite file that does not exist yet")
        try:
            yield f"sqlite:///{path}", "sqlite"
        finally:
            for leftover in (path, *(path.with_name(path.name + s) for s in ("-wal", "-shm"))):
                leftover.unlink(missing_ok=True)
        return
    if backend != "postgresql":
        raise SystemExit(f"--database must be a postgresql:// or sqlite:// URL, not {url!r}")
    server = parsed.set(drivername="postgresql")
    admin = server.render_as_string(hide_password=False)
    name = f"rg_fleet_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin, autocommit=True, connect_timeout=10) as connection:
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        row = connection.execute("SHOW server_version").fetchone()
    try:
        yield (
            server.set(database=name).render_as_string(hide_password=False),
            f"postgresql {row[0] if row else '?'}",
        )
    finally:
        with psycopg.connect(admin, autocommit=True, connect_timeout=10) as connection:
            connection.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@contextlib.contextmanager
def _servers(count: int, workdir: Path, env: dict[str, str]) -> Iterator[list[Server]]:
    """``count`` ``rgadmin serve`` processes, started side by side; all stopped afterwards."""
    futures: list[Future[Server]] = []
    try:
        with ThreadPoolExecutor(count) as pool:
            futures = [
                pool.submit(serve_rgadmin, workdir, f"rgadmin-{n}", env) for n in range(count)
            ]
        for future in futures:
            error = future.exception()
            if error is not None:
                raise error
        yield [future.result() for future in futures]
    finally:
        for future in futures:
            if future.done() and not future.cancelled() and future.exception() is None:
                stop(future.result())


class Admin:
    """The superuser's calls: setup and quota changes."""

    def __init__(self, servers: RoundRobin, token: str) -> None:
        self._http = httpx.Client(
            base_url=f"http://{HOST}:{servers.ports[0]}",
            headers={"Authorization": f"Bearer {token}"},
            timeout=REQUEST_TIMEOUT_S,
            transport=RoundRobinTransport(servers),
        )

    def setup(self, quota: float, namespaces: Sequence[str]) -> None:
        self.set_quota(quota)
        self._call("PUT", f"/admin/v2/tenants/{TENANT}", {"adminRoles": [], "allowedClusters": []})
        for namespace in namespaces:
            path = f"/admin/v2/namespaces/{TENANT}/{namespace}"
            self._call("PUT", path)
            self._call("POST", f"{path}/resourcegroup/{GROUP}")
            self._call("POST", f"{path}/permissions/{ROLE}", ["produce"])

    def set_quota(self, quota: float) -> None:
        # Only the one field: on update, Pulsar's merge rule keeps every other as stored.
        self._call("PUT", f"/admin/v2/resourcegroups/{GROUP}", {"publishRateInMsgs": round(quota)})

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, body: Any = None) -> None:
        response = self._http.request(method, path, json=body)
        if response.status_code != 204:
            raise RuntimeError(f"{method} {path}: {response.status_code} {response.text}")


# the reporters


@dataclass
class _Runtime:
    """One scenario reporter: a worker process's rgspark runtime and the work it does."""

    member: Member
    reporter_id: str
    t0: float
    stop: threading.Event = field(default_factory=threading.Event)
    quota: NamespaceQuota | None = None
    in_force: bool = False  # from its first answer until its release has returned
    first_answer_s: float | None = None  # after its join
    consumed: dict[int, float] = field(default_factory=lambda: defaultdict(float))
    allocated: dict[int, float] = field(default_factory=lambda: defaultdict(float))  # sums
    errors: list[str] = field(default_factory=list)
    thread: threading.Thread | None = None

    def start(self, servers: RoundRobin, token: str) -> None:
        if self.stop.is_set():  # it leaves as it joins: no process starts
            return
        self.thread = threading.Thread(
            target=self._run, args=(servers, token), name=f"fleet-{self.member.id}", daemon=True
        )
        self.thread.start()

    def _sleep(self, seconds: float) -> None:
        if self.stop.wait(max(0.0, seconds)):
            raise _Left

    def _run(self, servers: RoundRobin, token: str) -> None:
        reporter: Reporter | None = None
        try:
            # As `rgspark._client._start` starts a worker's runtime, on the round-robin.
            quota = NamespaceQuota(TENANT, self.member.namespace, sleep=self._sleep)
            quota.use(KIND)
            transport = RoundRobinTransport(servers)
            admin = AdminClient(
                f"http://{HOST}:{servers.ports[0]}",
                token=token,
                timeout=REQUEST_TIMEOUT_S,
                transport=transport,
            )
            reporter = Reporter(admin, [quota], reporter_id=self.reporter_id)
            self._first_answer(reporter)
            self.first_answer_s = time.monotonic() - self.t0 - self.member.join_s
            self.quota = quota
            self.in_force = True
            reporter.start()
            self._work(quota)
        except _Left:
            pass
        except Exception as exc:
            self.errors.append(f"reporter {self.member.id}: {exc!r}")
        finally:
            if reporter is not None:
                transport.closing = True
                try:
                    reporter.close()  # joins its thread, then releases the shares at once
                except Exception as exc:
                    self.errors.append(f"reporter {self.member.id} at close: {exc!r}")
            self.in_force = False

    def _first_answer(self, reporter: Reporter) -> None:
        while True:
            try:
                reporter.run_once()
                return
            except (AuthenticationError, PermissionDeniedError, NamespaceNotFoundError):
                raise  # retrying will not fix the token, the grant or the namespace
            except AdminServerError:
                self._sleep(FIRST_ANSWER_RETRY_S)

    def _work(self, quota: NamespaceQuota) -> None:
        due = time.monotonic()
        idle = False
        while True:
            now = time.monotonic()
            demand = self.member.demand_at(now - self.t0)
            if demand <= 0:
                idle = True
                self._sleep(SLICE_S)
                due = time.monotonic()
                continue
            if idle:  # a task starts again: it announces its traffic, as the simulator's do
                idle = False
                quota.use(KIND)
            rate = quota.rate(DIMENSION)
            msgs = min(demand, math.inf if rate is None else rate) * SLICE_S
            # The slice takes its time at the demand's pace. A worker held up by this process
            # (the GIL, a slow wake: here the whole fleet shares one process on a shared
            # machine) catches up on what it missed, as a worker with queued input does, at
            # the rate its bucket allows; a longer stall than CATCH_UP_S is lost.
            due = max(due, now - CATCH_UP_S) + msgs / demand
            self._sleep(due - time.monotonic())
            self.consumed[math.floor(time.monotonic() - self.t0)] += msgs
            if quota.acquire(KIND, msgs, 0):
                due = time.monotonic()  # held back: the next slice starts from now


def _reporter_id(index: int, member: Member) -> str:
    return f"fleet-{index}-{re.sub(r'[^A-Za-z0-9_-]', '_', member.id)}"[:64]


# one run


@dataclass
class _Sample:
    t_s: float
    quota: float
    in_force: float
    unlimited: bool
    rates: dict[str, float] = field(default_factory=dict)
    """Each reporter's rate in force, by its scenario id."""


@dataclass
class _QuotaChange:
    at_s: float
    quota: float
    cut: bool
    answered_s: float | None = None
    error: str | None = None

    def reaching(self, sample: _Sample, interval_s: float) -> bool:
        """Whether ``sample`` is taken while a cut is still reaching the reporters: from the
        cut until one interval after the PUT was answered, plus a sample for a report in
        flight."""
        answered = self.at_s if self.answered_s is None else self.answered_s
        return self.cut and self.at_s <= sample.t_s < answered + interval_s + SAMPLE_S

    def summary(self, samples: Sequence[_Sample], interval_s: float) -> dict[str, Any]:
        result: dict[str, Any] = {
            "at_s": self.at_s,
            "quota": self.quota,
            "put_answered_s": _round(self.answered_s),
        }
        if self.cut:
            reaching = [s for s in samples if self.reaching(s, interval_s)]
            over = [s.t_s for s in reaching if s.in_force > OVER * s.quota]
            # Until the last sample above the bound: how long the cut took to reach enough
            # reporters that the allocations in force were within it again.
            result["in_force_over_105_pct_for_s"] = (
                round(max(over) + SAMPLE_S - self.at_s, 3) if over else 0.0
            )
            result["max_in_force_pct"] = _max_pct(reaching)
        return result


def scaled(scenario: Scenario, factor: float) -> Scenario:
    """Every time in ``scenario`` times ``factor``, in whole seconds; the interval stays."""
    if factor == 1:
        return scenario

    def at(t_s: float) -> float:
        return float(round(t_s * factor))

    return replace(
        scenario,
        duration_s=max(1.0, at(scenario.duration_s)),
        quota_changes=tuple((at(t), quota) for t, quota in scenario.quota_changes),
        members=tuple(
            replace(
                m,
                join_s=at(m.join_s),
                leave_s=None if m.leave_s is None else at(m.leave_s),
                demand=tuple((at(t), rate) for t, rate in m.demand),
            )
            for m in scenario.members
        ),
    )


def run(
    scenario: Scenario,
    *,
    database: str,
    server_processes: int,
    duration_scale: float = 1.0,
    trace: Path | None = None,
) -> dict[str, Any]:
    """Set up, run ``scenario`` live and measure it; the servers and database are gone after."""
    started = time.monotonic()
    key = generate_secret_key()
    workdir = Path(tempfile.mkdtemp(prefix="rg-fleet-"))
    try:
        with _database(database, workdir) as (database_url, database_kind):
            env = server_env(database_url, key, SUPERUSER)
            env["RG_REPORT_INTERVAL_SECONDS"] = repr(scenario.interval_s)
            migrate_rgadmin(workdir, env)
            with _servers(server_processes, workdir, env) as servers:
                result = _live(scenario, servers, key, trace)
                # The store as the run left it: what the quota bound rests on holds.
                result["store_check"] = store_check(workdir, env)
                if not result["store_check"]["ok"]:
                    result["errors"].append(
                        "rgadmin check: " + "; ".join(result["store_check"]["lines"])
                    )
                result["servers"] = [
                    {
                        **entry,
                        "cpu_seconds": _round(server.cpu_seconds()),
                        # What went wrong, seen from the server, before its folder goes.
                        **({"log_tail": log_tail(server, 40)} if result["errors"] else {}),
                    }
                    for entry, server in zip(result["servers"], servers, strict=True)
                ]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return {
        "benchmark": "fleet",
        "scenario": scenario.name,
        "duration_s": scenario.duration_s,
        "duration_scale": duration_scale,
        "report_interval_s": scenario.interval_s,
        "database": database_kind,
        "server_processes": server_processes,
        **result,
        "wall_seconds": round(time.monotonic() - started, 1),
    }


def _live(
    scenario: Scenario, servers: list[Server], key: bytes, trace: Path | None
) -> dict[str, Any]:
    """Set the group up, run ``scenario``'s timeline in real time, then measure it."""
    turn = RoundRobin([server.port for server in servers])
    namespaces = sorted({m.namespace for m in scenario.members})
    admin = Admin(turn, create_token(subject=SUPERUSER, secret_key=key))
    role_token = create_token(subject=ROLE, secret_key=key)
    errors: list[str] = []
    runtimes: list[_Runtime] = []
    changes = _quota_changes(scenario)
    samples: list[_Sample] = []
    change_threads: list[threading.Thread] = []
    try:
        admin.setup(scenario.quota, namespaces)
        t0 = time.monotonic() + START_DELAY_S
        runtimes += [_Runtime(m, _reporter_id(n, m), t0) for n, m in enumerate(scenario.members)]
        try:
            _conduct(
                scenario, t0, runtimes, changes, samples, change_threads, admin, turn, role_token
            )
        finally:
            errors += _end_threads(runtimes, change_threads)
    finally:
        admin.close()
    for runtime in runtimes:
        errors += runtime.errors
    errors += [f"quota change at {c.at_s:g} s: {c.error}" for c in changes if c.error]
    errors += [f"{count} x {what}" for what, count in sorted(turn.failed.items())]
    return _figures(scenario, runtimes, changes, samples, turn, errors, trace)


def _quota_changes(scenario: Scenario) -> list[_QuotaChange]:
    """The scenario's quota changes, each a cut when it lowers the quota before it."""
    changes = []
    previous = scenario.quota
    for at_s, quota in scenario.quota_changes:
        changes.append(_QuotaChange(at_s, quota, cut=quota < previous))
        previous = quota
    return changes


def _end_threads(runtimes: list[_Runtime], change_threads: list[threading.Thread]) -> list[str]:
    """Tell every reporter to leave, and join every thread of the run within
    `JOIN_TIMEOUT_S` in all: the threads still running then, as errors."""
    errors = []
    for runtime in runtimes:
        runtime.stop.set()
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    for thread in [*(r.thread for r in runtimes if r.thread), *change_threads]:
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            errors.append(f"thread {thread.name} still running {JOIN_TIMEOUT_S:.0f} s on")
    return errors


def _figures(
    scenario: Scenario,
    runtimes: list[_Runtime],
    changes: list[_QuotaChange],
    samples: list[_Sample],
    turn: RoundRobin,
    errors: list[str],
    trace: Path | None,
) -> dict[str, Any]:
    """quota_sim's metrics of the run, what was in force, and the reports sent."""
    windows = _windows(scenario, runtimes)
    if trace is not None:
        write_trace(trace, windows)
    after_cut = [s for s in samples if _after_cut(s, changes, scenario.interval_s)]
    steady = [s for s in samples if not _after_cut(s, changes, scenario.interval_s)]
    reporter_seconds = _reporter_seconds(scenario)
    return {
        **rounded(metrics(scenario, windows)),
        "max_in_force_pct": _max_pct(steady),
        "max_in_force_pct_after_cut": _max_pct(after_cut) if after_cut else None,
        "in_force_samples": _in_force_samples(scenario, samples, steady, after_cut),
        "first_answer_after_join_s": _spread(
            [r.first_answer_s for r in runtimes if r.first_answer_s is not None]
        ),
        "reports": turn.reports,
        "reports_per_reporter_s": _round(turn.reports / reporter_seconds)
        if reporter_seconds > 0
        else None,
        "quota_changes": [c.summary(samples, scenario.interval_s) for c in changes],
        "servers": [
            {"port": port, "requests": requests}
            for port, requests in zip(turn.ports, turn.requests, strict=True)
        ],
        "simulated": _simulated(scenario),
        "errors": errors,
    }


def _in_force_samples(
    scenario: Scenario,
    samples: list[_Sample],
    steady: list[_Sample],
    after_cut: list[_Sample],
) -> dict[str, Any]:
    """How many samples were taken, and what the steady ones had in force."""
    return {
        "period_s": SAMPLE_S,
        "count": len(samples),
        "after_cut": len(after_cut),
        # A reporter whose answer left publishMsgs unlimited: the sums leave it out.
        "unlimited": sum(s.unlimited for s in samples),
        "mean_pct_with_demand_over_quota": _round(
            _mean_pct(s for s in steady if _total_demand(scenario, s.t_s) >= s.quota)
        ),
        "peak": _peak(steady),
    }


def _reporter_seconds(scenario: Scenario) -> float:
    """The seconds the scenario's reporters are in it, summed over them."""
    return sum(
        min(math.inf if m.leave_s is None else m.leave_s, scenario.duration_s) - m.join_s
        for m in scenario.members
        if m.join_s < scenario.duration_s
    )


def _conduct(
    scenario: Scenario,
    t0: float,
    runtimes: list[_Runtime],
    changes: list[_QuotaChange],
    samples: list[_Sample],
    change_threads: list[threading.Thread],
    admin: Admin,
    turn: RoundRobin,
    role_token: str,
) -> None:
    """The timeline, in real time: quota changes, leaves and joins at their times (in that
    order at the same moment, as the simulator orders them), and a sample every 100 ms."""
    events: list[tuple[float, int, Any]] = []
    for change in changes:
        events.append((change.at_s, 0, change))
    for runtime in runtimes:
        if runtime.member.leave_s is not None:
            events.append((runtime.member.leave_s, 1, runtime))
        events.append((runtime.member.join_s, 2, runtime))
    events = sorted((e for e in events if e[0] < scenario.duration_s), key=lambda e: e[:2])
    sample_count = math.ceil(scenario.duration_s / SAMPLE_S - 1e-9)
    pending = iter(events)
    event = next(pending, None)
    k = 0
    while event is not None or k < sample_count:
        next_event = math.inf if event is None else event[0]
        next_sample = k * SAMPLE_S if k < sample_count else math.inf
        at_s = min(next_event, next_sample)
        delay = t0 + at_s - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        if event is not None and next_event <= next_sample:
            _, order, subject = event
            if order == 0:
                thread = threading.Thread(
                    target=_change_quota, args=(admin, subject, t0), daemon=True
                )
                thread.name = f"fleet-quota-{subject.at_s:g}"
                change_threads.append(thread)
                thread.start()
            elif order == 1:
                subject.stop.set()
            else:
                subject.start(turn, role_token)
            event = next(pending, None)
        else:
            samples.append(_sample(k * SAMPLE_S, scenario.quota_at(k * SAMPLE_S), runtimes, k))
            k += 1
    delay = t0 + scenario.duration_s - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def _change_quota(admin: Admin, change: _QuotaChange, t0: float) -> None:
    try:
        admin.set_quota(change.quota)
    except Exception as exc:
        change.error = repr(exc)
    change.answered_s = time.monotonic() - t0


def _sample(t_s: float, quota: float, runtimes: list[_Runtime], index: int) -> _Sample:
    total = 0.0
    unlimited = False
    rates: dict[str, float] = {}
    for runtime in runtimes:
        if not runtime.in_force or runtime.quota is None:
            continue
        rate = runtime.quota.rate(DIMENSION)
        if rate is None:
            unlimited = True
            continue
        total += rate
        rates[runtime.member.id] = rate
        runtime.allocated[index // SAMPLES_PER_WINDOW] += rate
    return _Sample(t_s, quota, total, unlimited, rates)


def _after_cut(sample: _Sample, changes: list[_QuotaChange], interval_s: float) -> bool:
    return any(change.reaching(sample, interval_s) for change in changes)


def _windows(scenario: Scenario, runtimes: list[_Runtime]) -> list[Window]:
    """As `benchmarks.quota_sim.Simulation.windows` builds them."""
    result = []
    for k in range(math.ceil(scenario.duration_s)):
        active = [r for r in runtimes if r.member.active_at(k)]
        samples = min(SAMPLES_PER_WINDOW, math.ceil((scenario.duration_s - k) / SAMPLE_S - 1e-9))
        result.append(
            Window(
                start_s=k,
                quota=scenario.quota_at(k),
                demand={r.member.id: r.member.demand_at(k) for r in active},
                consumed={r.member.id: r.consumed.get(k, 0.0) for r in active},
                allocated={r.member.id: r.allocated.get(k, 0.0) / samples for r in active},
                total=sum(r.consumed.get(k, 0.0) for r in runtimes),
                namespaces={r.member.id: r.member.namespace for r in active},
            )
        )
    return result


def _total_demand(scenario: Scenario, t_s: float) -> float:
    return sum(m.demand_at(t_s) for m in scenario.members if m.active_at(t_s))


def _peak(samples: Sequence[_Sample]) -> dict[str, Any] | None:
    """The sample with the most in force: when, and each reporter's rate then."""
    if not samples:
        return None
    peak = max(samples, key=lambda s: s.in_force / s.quota)
    return {
        "t_s": round(peak.t_s, 2),
        "pct": round(peak.in_force / peak.quota * 100, 2),
        "rates": {reporter: round(rate, 2) for reporter, rate in sorted(peak.rates.items())},
    }


def _max_pct(samples: Sequence[_Sample]) -> float:
    return round(max((s.in_force / s.quota * 100 for s in samples), default=0.0), 2)


def _mean_pct(samples: Iterator[_Sample] | Sequence[_Sample]) -> float | None:
    values = [s.in_force / s.quota * 100 for s in samples]
    return sum(values) / len(values) if values else None


def _simulated(scenario: Scenario) -> dict[str, Any]:
    figures = simulate(scenario, "project")
    return {
        **{name: figures[name] for name in KEY_FIGURES},
        "after_quota_notice": figures["after_quota_notice"],
        "reports_per_reporter_s": figures.get("reports_per_reporter_s"),
    }


def _spread(values: Sequence[float]) -> dict[str, float | None]:
    return {
        "mean": _round(sum(values) / len(values)) if values else None,
        "max": _round(max(values, default=None)),
    }


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


# every scenario


def run_all(
    directory: Path, *, database: str, server_processes: int, duration_scale: float
) -> dict[str, Any]:
    results: dict[str, dict[str, Any]] = {}
    for path in sorted(directory.glob("*.json")):
        scenario = scaled(Scenario.load(path), duration_scale)
        _progress(f"fleet: {scenario.name} ({scenario.duration_s:g} s)")
        results[scenario.name] = run(
            scenario,
            database=database,
            server_processes=server_processes,
            duration_scale=duration_scale,
        )
    table = [
        {
            "scenario": name,
            **{figure: result[figure] for figure in KEY_FIGURES},
            "max_overshoot_after_notice_pct": result["after_quota_notice"]["max_overshoot_pct"],
            "utilization_capped_after_notice_pct": result["after_quota_notice"][
                "utilization_capped_pct"
            ],
            "max_in_force_pct": result["max_in_force_pct"],
            "max_in_force_pct_after_cut": result["max_in_force_pct_after_cut"],
            "reports_per_reporter_s": result["reports_per_reporter_s"],
            "errors": len(result["errors"]),
        }
        for name, result in results.items()
    ]
    first = next(iter(results.values()), {})
    return {
        "benchmark": "fleet",
        "scenarios_dir": str(directory),
        "database": first.get("database"),
        "server_processes": server_processes,
        "duration_scale": duration_scale,
        "table": table,
        "results": results,
    }


# main


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _terminate(signum: int, _frame: object) -> None:
    # Turn SIGTERM into an exception, so the servers are stopped and the database dropped.
    raise SystemExit(128 + signum)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("scenario", nargs="?", type=Path, help="a scenario JSON file")
    parser.add_argument(
        "--all",
        nargs="?",
        const=SCENARIOS,
        type=Path,
        metavar="DIR",
        help=f"run every scenario in DIR (default DIR: {SCENARIOS})",
    )
    parser.add_argument(
        "--database",
        default=os.environ.get("RG_TEST_POSTGRES_URL", DEFAULT_DATABASE),
        help="a PostgreSQL server to make the run's database on (default: %(default)s), "
        "or sqlite:///PATH (a new file) or sqlite:// (a temporary file)",
    )
    parser.add_argument(
        "--server-processes", type=int, default=2, help="rgadmin serve processes (2)"
    )
    parser.add_argument("--trace", type=Path, help="write the per-window CSV trace here")
    parser.add_argument(
        "--duration-scale",
        type=float,
        default=1.0,
        metavar="F",
        help="multiply every time in the scenario by F, for a shorter run (1: the benchmark)",
    )
    args = parser.parse_args(argv)
    if (args.scenario is None) == (args.all is None):
        parser.error("give either a scenario file or --all")
    if args.all is not None and args.trace is not None:
        parser.error("--trace goes with a single scenario")
    if args.server_processes < 1:
        parser.error("--server-processes must be 1 or more")
    if not 0 < args.duration_scale <= 1:
        parser.error("--duration-scale must be above 0 and at most 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    if args.all is not None:
        report = run_all(
            args.all,
            database=args.database,
            server_processes=args.server_processes,
            duration_scale=args.duration_scale,
        )
        failed = any(row["errors"] for row in report["table"])
    else:
        report = run(
            scaled(Scenario.load(args.scenario), args.duration_scale),
            database=args.database,
            server_processes=args.server_processes,
            duration_scale=args.duration_scale,
            trace=args.trace,
        )
        failed = bool(report["errors"])
    print(json.dumps(report, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
