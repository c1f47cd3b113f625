"""The worker side of quota sharing, from plain Python against a real server over HTTP."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select

from app.models import QuotaReporter
from rgspark import ServerUnreachableError
from rgspark._admin import AdminClient
from rgspark._reporter import NamespaceQuota, Reporter

Auth = Callable[[str], dict[str, str]]
QUOTA = 1000


@pytest.fixture
def job_token(client: TestClient, token: Callable[[str], str]) -> str:
    """Group ``rg`` (publish 1000 msgs/s) on ``t/ns``; a token for role ``job``, which produces."""
    for method, path, body in (
        ("PUT", "/admin/v2/resourcegroups/rg", {"publishRateInMsgs": QUOTA}),
        ("PUT", "/admin/v2/tenants/t", {}),
        ("PUT", "/admin/v2/namespaces/t/ns", None),
        ("POST", "/admin/v2/namespaces/t/ns/resourcegroup/rg", None),
        ("POST", "/admin/v2/namespaces/t/ns/permissions/job", ["produce"]),
    ):
        assert client.request(method, path, json=body).status_code == 204
    return token("job")


def reporters(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(connection.scalar(select(func.count()).select_from(QuotaReporter)) or 0)


def test_report_applies_the_allocation_and_close_releases_it(
    live_url: str, job_token: str, engine: Engine
) -> None:
    quota = NamespaceQuota("t", "ns")
    reporter = Reporter(AdminClient(live_url, token=job_token), [quota])
    assert quota.rate("publishMsgs") is None
    next_in = reporter.run_once()
    assert 0 < next_in <= 1.0
    assert 0 < (quota.rate("publishMsgs") or 0) <= QUOTA
    assert quota.rate("publishBytes") is None  # the group leaves bytes unlimited
    assert reporters(engine) == 1
    reporter.close()
    assert reporters(engine) == 0


def test_two_reporters_converge_on_shares_of_the_quota(live_url: str, job_token: str) -> None:
    quotas = [NamespaceQuota("t", "ns"), NamespaceQuota("t", "ns")]
    processes = [Reporter(AdminClient(live_url, token=job_token), [q]) for q in quotas]
    for _ in range(8):
        for quota, process in zip(quotas, processes, strict=True):
            # Both want far more than their share: each charge leaves them owing.
            quota.charge("publish", 400, 0)
            process.run_once()
    rates = [q.rate("publishMsgs") or 0.0 for q in quotas]
    assert sum(rates) <= QUOTA * 1.05
    assert rates[0] == pytest.approx(QUOTA / 2, rel=0.1)
    assert rates[1] == pytest.approx(QUOTA / 2, rel=0.1)
    for process in processes:
        process.close()


def test_unreachable_server_keeps_the_last_allocation(live_url: str, job_token: str) -> None:
    quota = NamespaceQuota("t", "ns")
    with Reporter(AdminClient(live_url, token=job_token), [quota]) as reporter:
        reporter.run_once()
    rate = quota.rate("publishMsgs")
    gone = Reporter(AdminClient("http://127.0.0.1:1", token=job_token), [quota])
    with pytest.raises(ServerUnreachableError):
        gone.run_once()
    gone.close()
    assert quota.rate("publishMsgs") == rate


def test_a_kind_announced_but_not_yet_charged_claims_a_share(live_url: str, job_token: str) -> None:
    quota = NamespaceQuota("t", "ns")
    quota.use("publish")
    assert set(quota.usage()) == {"publishMsgs", "publishBytes"}
    with Reporter(AdminClient(live_url, token=job_token), [quota]) as reporter:
        reporter.run_once()
    assert quota.rate("publishMsgs") == pytest.approx(QUOTA, rel=0.05)


def test_initial_rate_holds_before_the_first_answer() -> None:
    quota = NamespaceQuota("t", "ns", initial_rate=50)
    assert quota.rate("dispatchBytes") == 50
    quota.apply({"publishMsgs": 10, "publishBytes": -1})
    assert quota.rate("publishMsgs") == 10
    assert quota.rate("publishBytes") is None
