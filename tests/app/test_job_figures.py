"""``POST`` and ``GET /quota/v1/jobs/{jobId}/figures``: what a job's tasks moved through the
throttle, added up by the server for each role and read back, through HTTP on both databases."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from alembic import command
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, create_engine, func, select, text, update

from app.api.quota import forget_old_figures
from app.db import alembic_config, sqlalchemy_url
from app.models import JobAction, JobFigure
from app.quota.schemas import MAX_FIGURE
from app.schemas import INT64_MAX
from app.state import state_of
from rgspark.wire import KEPT_ACTIONS, KINDS, MAX_ACTIONS_PER_POST
from tests.app.test_quota_reports import body, report
from tests.conftest import SUPERUSER, empty_database, serve
from tests.factories import FakeClock, create_namespace, create_tenant, grant, reason

Auth = Callable[[str], dict[str, str]]
START_MS = 1_764_380_000_000
EMPTY = {"rows": 0, "bytes": 0, "heldS": 0.0, "pushbacks": 0, "pushbackS": 0.0, "actions": {}}
PUSHBACK_FIGURES = ("pushbacks", "pushbackS")


@pytest.fixture
def world(client: TestClient) -> None:
    """Namespace ``t/ns``: roles ``job`` and ``other`` produce to it, ``reader`` consumes."""
    create_tenant(client, "t")
    create_namespace(client, "t/ns", producers=["job", "other"])
    grant(client, "t/ns", "reader", "consume")


def action(
    rows: int,
    nbytes: int = 0,
    held_s: float = 0.0,
    start: int = 0,
    end: int = 0,
    *,
    pushbacks: int = 0,
    pushback_s: float = 0.0,
) -> dict[str, Any]:
    """An action's figures, its start and end in ms after `START_MS`."""
    return {
        "rows": rows,
        "bytes": nbytes,
        "heldS": held_s,
        "pushbacks": pushbacks,
        "pushbackS": pushback_s,
        "startMs": START_MS + start,
        "endMs": START_MS + end,
    }


def as_workers_post(actions: dict[str, Any]) -> dict[str, Any]:
    """``actions`` as rgspark's workers post them: the pushback figures only when not 0."""
    return {
        name: {key: value for key, value in figures.items() if key not in PUSHBACK_FIGURES or value}
        for name, figures in actions.items()
    }


def post(
    app: FastAPI,
    headers: dict[str, str],
    job: str,
    actions: dict[str, Any],
    *,
    kind: str = "publish",
    namespace: str = "t/ns",
) -> httpx.Response:
    payload = {"namespace": namespace, "kind": kind, "actions": as_workers_post(actions)}
    return TestClient(app).post(f"/quota/v1/jobs/{job}/figures", json=payload, headers=headers)


def added(app: FastAPI, headers: dict[str, str], job: str, actions: dict[str, Any]) -> None:
    response = post(app, headers, job, actions)
    assert response.status_code == 204, response.text


def figures(
    app: FastAPI, headers: dict[str, str], job: str, kind: str = "publish"
) -> dict[str, Any]:
    """The job's figures of ``kind``, without the kind (checked)."""
    response = TestClient(app).get(
        f"/quota/v1/jobs/{job}/figures", params={"kind": kind}, headers=headers
    )
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    assert answer.pop("kind") == kind
    return answer


RACE_THREADS, RACE_ROUNDS = 8, 6


def race_actions(index: int, turn: int) -> dict[str, Any]:
    """What worker ``index`` posts at ``turn`` of the race: to an action every worker adds
    to, and to one of its own. Halves, quarters and eighths sum exactly in any order."""
    shared = action(
        index + 1, 10, 0.25, 100 - index, 200 + turn, pushbacks=turn + 1, pushback_s=0.125
    )
    own = action(turn + 1, 1, 0.5, index, index + turn, pushbacks=index, pushback_s=turn)
    return {"shared": shared, f"own:{index}": own}


def race_sums() -> dict[str, Any]:
    """Every action of the race, as the server should hold it once every post is in."""
    threads, rounds = RACE_THREADS, RACE_ROUNDS
    own_rows = sum(range(1, rounds + 1))
    shared = action(
        rounds * sum(range(1, threads + 1)),
        10 * threads * rounds,
        0.25 * threads * rounds,
        100 - (threads - 1),
        200 + rounds - 1,
        pushbacks=threads * own_rows,
        pushback_s=0.125 * threads * rounds,
    )
    own = {
        f"own:{i}": action(
            own_rows,
            rounds,
            0.5 * rounds,
            i,
            i + rounds - 1,
            pushbacks=i * rounds,
            pushback_s=sum(range(rounds)),
        )
        for i in range(threads)
    }
    return {"shared": shared, **own}


def stored_jobs(engine: Engine) -> set[str]:
    """The jobs with totals or actions stored."""
    with engine.connect() as connection:
        return set(connection.scalars(select(JobFigure.job_id))) | set(
            connection.scalars(select(JobAction.job_id))
        )


@pytest.mark.usefixtures("world")
class TestAdding:
    def test_posts_add_up_and_an_actions_posts_merge(
        self, servers: list[FastAPI], auth: Auth
    ) -> None:
        job = auth("job")
        added(servers[0], job, "j1", {"sql:1": action(200, 4096, 0.25, 100, 500)})
        added(servers[1], job, "j1", {"sql:1": action(50, 1000, 0.5, 50, 400)})
        added(servers[0], job, "j1", {"sql:1": action(1, 1, 0.0, 300, 900), "sql:2": action(7)})

        assert figures(servers[1], job, "j1") == {
            **EMPTY,
            "rows": 258,
            "bytes": 5097,
            "heldS": 0.75,
            "actions": {
                # Sums, the earliest start, the latest end.
                "sql:1": action(251, 5097, 0.75, 50, 900),
                "sql:2": action(7),
            },
        }
        # Each kind and each job apart.
        assert figures(servers[0], job, "j1", "dispatch") == EMPTY
        assert figures(servers[0], job, "j2") == EMPTY

    def test_pushback_figures_add_up_and_are_0_when_left_out(
        self, servers: list[FastAPI], auth: Auth
    ) -> None:
        job = auth("job")
        pushed = action(5, 50, 0.5, 10, 20, pushbacks=2, pushback_s=0.75)
        added(servers[0], job, "j1", {"sql:1": pushed, "sql:2": action(1)})
        plain = action(1, 1, 0.0, 0, 30)
        assert "pushbacks" not in as_workers_post({"a": plain})["a"]  # posted without them
        added(servers[1], job, "j1", {"sql:1": plain})
        only_seconds = action(0, 0, 0.0, 40, 40, pushback_s=0.125)
        added(servers[0], job, "j1", {"sql:1": only_seconds, "sql:3": action(2, pushbacks=5)})
        # What rgspark's workers before these figures posted, to the letter.
        old_worker = {"rows": 4, "bytes": 4, "heldS": 0.0, "startMs": START_MS, "endMs": START_MS}
        added(servers[1], job, "j1", {"sql:4": old_worker})

        assert figures(servers[1], job, "j1") == {
            "rows": 13,
            "bytes": 55,
            "heldS": 0.5,
            "pushbacks": 7,
            "pushbackS": 0.875,
            "actions": {
                "sql:1": action(6, 51, 0.5, 0, 40, pushbacks=2, pushback_s=0.875),
                "sql:2": action(1),
                "sql:3": action(2, pushbacks=5),
                "sql:4": action(4, 4),
            },
        }
        assert figures(servers[0], job, "j1", "dispatch") == EMPTY

    def test_kinds_are_rgsparks(self, servers: list[FastAPI], auth: Auth) -> None:
        for kind in KINDS:
            response = post(servers[0], auth("job"), "j1", {"a": action(len(kind))}, kind=kind)
            assert response.status_code == 204, response.text
            assert figures(servers[1], auth("job"), "j1", kind)["rows"] == len(kind)

    def test_posts_at_the_same_instant_to_two_processes_lose_nothing(
        self, servers: list[FastAPI], auth: Auth
    ) -> None:
        barrier = threading.Barrier(RACE_THREADS)
        failures: list[str] = []

        def worker(url: str, index: int) -> None:
            with httpx.Client(base_url=url, headers=auth("job"), timeout=60) as http:
                for turn in range(RACE_ROUNDS):
                    actions = as_workers_post(race_actions(index, turn))
                    payload = {"namespace": "t/ns", "kind": "publish", "actions": actions}
                    barrier.wait(timeout=60)
                    response = http.post("/quota/v1/jobs/race/figures", json=payload)
                    if response.status_code != 204:
                        failures.append(response.text)

        # Each app served on its own event loop, as server processes are.
        with serve(servers[0]) as first, serve(servers[1]) as second:
            # One request each first: FastAPI builds an app's routes at its first request, and
            # two apps of one process building theirs at once on two threads may fail.
            for url in (first, second):
                response = httpx.get(
                    f"{url}/quota/v1/jobs/race/figures",
                    params={"kind": "publish"},
                    headers=auth("job"),
                )
                assert response.status_code == 200, response.text
            running = [
                threading.Thread(target=worker, args=((first, second)[i % 2], i))
                for i in range(RACE_THREADS)
            ]
            for thread in running:
                thread.start()
            for thread in running:
                thread.join(timeout=120)
        assert not failures

        expected_actions = race_sums()
        sums = ("rows", "bytes", "heldS", *PUSHBACK_FIGURES)
        assert figures(servers[0], auth("job"), "race") == {
            **{key: sum(entry[key] for entry in expected_actions.values()) for key in sums},
            "actions": expected_actions,
        }

    def test_only_the_latest_actions_are_kept_while_the_totals_count_all(
        self, servers: list[FastAPI], auth: Auth, engine: Engine
    ) -> None:
        job = auth("job")
        total = KEPT_ACTIONS + 4
        # Posted out of order: a late post of an early action is counted, and not kept.
        starts = [*range(4, total), *range(4)]
        for first in range(0, total, 5):
            actions = {f"a:{s}": action(1, 2, 0.5, s, s + 1) for s in starts[first : first + 5]}
            added(servers[first % 2], job, "j1", actions)

        answer = figures(servers[0], job, "j1")
        assert answer["rows"] == total
        assert answer["bytes"] == 2 * total
        assert answer["heldS"] == 0.5 * total
        assert set(answer["actions"]) == {f"a:{s}" for s in range(total - KEPT_ACTIONS, total)}
        with engine.connect() as connection:
            assert connection.scalar(select(func.count()).select_from(JobAction)) == KEPT_ACTIONS

    def test_sums_stop_at_the_largest_bigint(
        self, servers: list[FastAPI], auth: Auth, engine: Engine
    ) -> None:
        job = auth("job")
        # 64 actions of 2**53 a post: the totals pass 2**63 at the 16th.
        most = {
            f"a:{n}": action(MAX_FIGURE, MAX_FIGURE, start=n, end=n, pushbacks=MAX_FIGURE)
            for n in range(MAX_ACTIONS_PER_POST)
        }
        for turn in range(INT64_MAX // (MAX_ACTIONS_PER_POST * MAX_FIGURE) + 1):
            added(servers[turn % 2], job, "j1", most)
        with engine.begin() as connection:
            connection.execute(
                update(JobAction).values(
                    rows=INT64_MAX - 1, bytes=INT64_MAX - MAX_FIGURE, pushbacks=INT64_MAX - 2
                )
            )
        last = action(MAX_FIGURE, MAX_FIGURE, start=63, end=63, pushbacks=MAX_FIGURE)
        added(servers[0], job, "j1", {"a:63": last})

        answer = figures(servers[1], job, "j1")
        assert (answer["rows"], answer["bytes"], answer["pushbacks"]) == (INT64_MAX,) * 3
        assert answer["actions"]["a:63"]["rows"] == INT64_MAX
        assert answer["actions"]["a:63"]["bytes"] == INT64_MAX
        assert answer["actions"]["a:63"]["pushbacks"] == INT64_MAX
        assert answer["actions"]["a:62"]["rows"] == INT64_MAX - 1
        assert answer["actions"]["a:62"]["pushbacks"] == INT64_MAX - 2

    def test_a_consumer_may_post(self, servers: list[FastAPI], auth: Auth) -> None:
        added(servers[0], auth("reader"), "j1", {"a": action(3)})
        assert figures(servers[0], auth("reader"), "j1")["rows"] == 3


@pytest.mark.usefixtures("world")
class TestRoles:
    def test_each_role_sees_its_own_and_a_superuser_all(
        self, servers: list[FastAPI], auth: Auth
    ) -> None:
        own = action(1, 10, 0.25, 10, 20, pushbacks=3, pushback_s=1.5)
        added(servers[0], auth("job"), "j1", {"a": own})
        others = {"a": action(2, 20, 0.5, 5, 15, pushbacks=1, pushback_s=0.25), "b": action(4)}
        added(servers[1], auth("other"), "j1", others)

        assert figures(servers[1], auth("job"), "j1") == {
            "rows": 1,
            "bytes": 10,
            "heldS": 0.25,
            "pushbacks": 3,
            "pushbackS": 1.5,
            "actions": {"a": own},
        }
        assert figures(servers[0], auth("other"), "j1") == {
            "rows": 6,
            "bytes": 20,
            "heldS": 0.5,
            "pushbacks": 1,
            "pushbackS": 0.25,
            "actions": others,
        }
        # A role with none learns nothing of others': zeros, as for a job never posted.
        assert figures(servers[0], auth("stranger"), "j1") == EMPTY
        assert figures(servers[1], auth(SUPERUSER), "j1") == {
            "rows": 7,
            "bytes": 30,
            "heldS": 0.75,
            "pushbacks": 4,
            "pushbackS": 1.75,
            "actions": {
                "a": action(3, 30, 0.75, 5, 20, pushbacks=4, pushback_s=1.75),
                "b": action(4),
            },
        }

    @pytest.mark.parametrize(
        ("role", "namespace"),
        [("stranger", "t/ns"), ("stranger", "t/missing"), ("job", "t/missing"), ("job", "x/ns")],
    )
    def test_a_role_that_may_not_report_for_the_namespace_gets_403_and_stores_nothing(
        self, servers: list[FastAPI], auth: Auth, unchanged: Any, role: str, namespace: str
    ) -> None:
        added(servers[0], auth("job"), "j1", {"a": action(1)})
        with unchanged():
            response = post(servers[1], auth(role), "j1", {"a": action(5)}, namespace=namespace)
            assert f"namespace {namespace}" in reason(response, 403)


@pytest.mark.usefixtures("world")
class TestRefused:
    @pytest.mark.parametrize(
        ("change", "named"),
        [
            (lambda b: b.update(extra=1), "Unknown field 'extra'"),
            (lambda b: b["actions"]["sql:1"].update(rowz=1), "Unknown field 'actions.sql:1.rowz'"),
            (lambda b: b.update(kind="both"), "'kind'"),
            (lambda b: b.pop("kind"), "'kind'"),
            (lambda b: b.update(namespace="t"), "'namespace'"),
            (lambda b: b.update(namespace="t/."), "'namespace'"),
            (lambda b: b["actions"]["sql:1"].update(endMs=START_MS - 1), "'actions.sql:1'"),
            (lambda b: b["actions"]["sql:1"].update(rows=-1), "'actions.sql:1.rows'"),
            (lambda b: b["actions"]["sql:1"].update(bytes=MAX_FIGURE + 1), "'actions.sql:1.bytes'"),
            (lambda b: b["actions"]["sql:1"].update(rows=1.5), "'actions.sql:1.rows'"),
            (lambda b: b["actions"]["sql:1"].update(rows="1"), "'actions.sql:1.rows'"),
            (lambda b: b["actions"]["sql:1"].update(heldS=-0.5), "'actions.sql:1.heldS'"),
            (lambda b: b["actions"]["sql:1"].update(pushbacks=-1), "'actions.sql:1.pushbacks'"),
            (lambda b: b["actions"]["sql:1"].update(pushbacks=0.5), "'actions.sql:1.pushbacks'"),
            (lambda b: b["actions"]["sql:1"].update(pushbacks="2"), "'actions.sql:1.pushbacks'"),
            (lambda b: b["actions"]["sql:1"].update(pushbacks=None), "'actions.sql:1.pushbacks'"),
            (
                lambda b: b["actions"]["sql:1"].update(pushbacks=MAX_FIGURE + 1),
                "'actions.sql:1.pushbacks'",
            ),
            (lambda b: b["actions"]["sql:1"].update(pushbackS=-0.5), "'actions.sql:1.pushbackS'"),
            (lambda b: b["actions"]["sql:1"].update(pushbackS="1"), "'actions.sql:1.pushbackS'"),
            (lambda b: b["actions"]["sql:1"].update(pushbackS=None), "'actions.sql:1.pushbackS'"),
            (lambda b: b["actions"]["sql:2"].update(pushbackS=True), "'actions.sql:2.pushbackS'"),
            (lambda b: b["actions"]["sql:1"].pop("startMs"), "'actions.sql:1.startMs'"),
            (lambda b: b.update(actions={}), "'actions'"),
            (
                lambda b: b.update(actions={f"a{n}": action(1) for n in range(65)}),
                "'actions'",
            ),
            (lambda b: b.update(actions={"a b": action(1)}), "'actions.a b.[key]'"),
            (lambda b: b.update(actions={"x" * 129: action(1)}), "'actions."),
        ],
    )
    def test_a_bad_body_is_400_naming_the_problem_and_stores_nothing(
        self,
        servers: list[FastAPI],
        auth: Auth,
        unchanged: Any,
        change: Callable[[dict[str, Any]], object],
        named: str,
    ) -> None:
        added(servers[0], auth("job"), "j1", {"sql:1": action(1, 1, 0.5, 0, 10)})
        payload: dict[str, Any] = {
            "namespace": "t/ns",
            "kind": "publish",
            "actions": {"sql:1": action(1, 1, 0.5, 0, 10), "sql:2": action(2)},
        }
        change(payload)
        with unchanged():
            response = TestClient(servers[1]).post(
                "/quota/v1/jobs/j1/figures", json=payload, headers=auth("job")
            )
            assert named in reason(response, 400)

    def test_the_end_before_the_start_is_named(self, servers: list[FastAPI], auth: Auth) -> None:
        response = post(servers[0], auth("job"), "j1", {"sql:3": action(1, start=10, end=9)})
        said = reason(response, 400)
        assert "sql:3" in said and "endMs" in said and "startMs" in said

    @pytest.mark.parametrize("field", ["heldS", "pushbackS"])
    @pytest.mark.parametrize("value", ["Infinity", "NaN"])
    def test_a_figure_that_is_not_finite_is_400(
        self, servers: list[FastAPI], auth: Auth, unchanged: Any, field: str, value: str
    ) -> None:
        # Python's JSON writes the values JSON has not, as some clients do.
        figures = {**action(1, 1), field: float(value.lower())}
        content = json.dumps({"namespace": "t/ns", "kind": "publish", "actions": {"a": figures}})
        assert value in content
        headers = {**auth("job"), "Content-Type": "application/json"}
        with unchanged():
            response = TestClient(servers[0]).post(
                "/quota/v1/jobs/j1/figures", content=content, headers=headers
            )
            assert f"'actions.a.{field}'" in reason(response, 400)

    @pytest.mark.parametrize("job", ["a-b", "a.b", "x" * 33, "é"])
    def test_a_bad_job_id_is_400(
        self, servers: list[FastAPI], auth: Auth, unchanged: Any, job: str
    ) -> None:
        with unchanged():
            assert "jobId" in reason(post(servers[0], auth("job"), job, {"a": action(1)}), 400)
            response = TestClient(servers[0]).get(
                f"/quota/v1/jobs/{job}/figures", params={"kind": "publish"}, headers=auth("job")
            )
            assert "jobId" in reason(response, 400)

    @pytest.mark.parametrize("params", [{}, {"kind": "both"}, {"kind": ""}])
    def test_a_read_without_a_kind_is_400(
        self, servers: list[FastAPI], auth: Auth, params: dict[str, str]
    ) -> None:
        response = TestClient(servers[0]).get(
            "/quota/v1/jobs/j1/figures", params=params, headers=auth("job")
        )
        assert "'kind'" in reason(response, 400)

    @pytest.mark.parametrize("authorization", [None, "Bearer garbage"])
    def test_without_a_valid_token_it_is_401(
        self, servers: list[FastAPI], auth: Auth, unchanged: Any, authorization: str | None
    ) -> None:
        added(servers[0], auth("job"), "j1", {"a": action(1)})
        headers = {} if authorization is None else {"Authorization": authorization}
        with unchanged():
            response = post(servers[0], headers, "j1", {"a": action(1)})
            assert response.status_code == 401
            assert response.headers["WWW-Authenticate"].startswith("Bearer")
            response = TestClient(servers[1]).get(
                "/quota/v1/jobs/j1/figures", params={"kind": "publish"}, headers=headers
            )
            assert response.status_code == 401


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_figures_stored_before_the_pushback_figures_read_0(backend: str, tmp_path: Any) -> None:
    key = "'j1', 'job', 'publish'"
    with empty_database(backend, tmp_path) as url:
        config = alembic_config(url)
        command.upgrade(config, "0013_group_mode")
        engine = create_engine(sqlalchemy_url(url))
        try:
            with engine.begin() as connection:
                # Rows of the previous revision, whose tables lack the pushback columns.
                connection.execute(
                    text(
                        "INSERT INTO job_figures (job_id, role, kind, rows, bytes, held_s, "
                        f"updated_at) VALUES ({key}, 1, 2, 0.5, CURRENT_TIMESTAMP)"
                    )
                )
                connection.execute(
                    text(
                        "INSERT INTO job_actions (job_id, role, kind, action, rows, bytes, "
                        f"held_s, started_ms, ended_ms) VALUES ({key}, 'a', 1, 2, 0.5, 3, 4)"
                    )
                )
            command.upgrade(config, "head")
            with engine.connect() as connection:
                for model in (JobFigure, JobAction):
                    stored = connection.execute(select(model.pushbacks, model.pushback_s)).all()
                    assert [tuple(row) for row in stored] == [(0, 0.0)]
        finally:
            engine.dispose()


@pytest.mark.usefixtures("world")
class TestKeeping:
    def test_figures_outlive_the_jobs_release(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock
    ) -> None:
        job = auth("job")
        report(servers[0], job, "j1-worker", body(clock, 10))
        added(servers[0], job, "j1", {"a": action(3)})
        before = figures(servers[0], job, "j1")

        response = TestClient(servers[1]).delete("/quota/v1/jobs/j1", headers=job)
        assert response.status_code == 204

        assert figures(servers[1], job, "j1") == before

    def test_figures_not_updated_for_the_retention_are_deleted(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock, engine: Engine
    ) -> None:
        state = state_of(servers[0])
        retention_s = state.settings.job_figures_retention_seconds
        job = auth("job")
        added(servers[0], job, "old", {"a": action(1)})
        added(servers[1], job, "kept", {"a": action(1)})
        clock.advance(retention_s / 2)
        added(servers[0], job, "kept", {"b": action(2)})  # updated: kept from now on

        clock.advance(retention_s / 2 - 1)
        assert asyncio.run(forget_old_figures(state, clock.now))
        assert stored_jobs(engine) == {"old", "kept"}  # not quite the retention yet

        clock.advance(2)
        assert asyncio.run(forget_old_figures(state, clock.now))
        assert stored_jobs(engine) == {"kept"}  # totals and actions alike
        assert figures(servers[1], job, "old") == EMPTY
        assert figures(servers[1], job, "kept")["rows"] == 3

        clock.advance(retention_s / 2)
        assert asyncio.run(forget_old_figures(state, clock.now))
        assert stored_jobs(engine) == set()
