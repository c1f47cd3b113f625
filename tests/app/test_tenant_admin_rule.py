"""A tenant admin never lifts a quota: every path that could leave a namespace with less of a
group than it had is refused or covered by another group (both databases)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.conftest import SUPERUSER
from tests.factories import create_group, create_namespace, create_tenant, reason

Auth = Callable[[str], dict[str, str]]

DEFAULT = "/admin/v2/default-resourcegroup"
NAMESPACE = "/admin/v2/namespaces/t/ns"
TENANT = "/admin/v2/tenants/t"

# Whatever else the namespace falls under once it has no group of its own.
COVERS = {
    "tenant": f"{TENANT}/resourcegroup/rg2",
    "default": f"{DEFAULT}/rg2",
}


def applied(client: TestClient, base: str = NAMESPACE) -> Any:
    response = client.get(f"{base}/resourcegroup", params={"applied": "true"})
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture
def world(client: TestClient) -> None:
    """Groups ``rg1`` (publish 10 msgs/s, on namespace ``t/ns``), ``rg2`` and ``spare``; tenant
    ``t`` administered by ``tenant-admin``. Nothing on the tenant and no default."""
    for group in ("rg1", "rg2", "spare"):
        create_group(client, group, publishRateInMsgs=10)
    create_tenant(client, "t", ["tenant-admin"])
    create_namespace(client, "t/ns", group="rg1")


@pytest.fixture
def admin(auth: Auth) -> dict[str, str]:
    return auth("tenant-admin")


@pytest.mark.usefixtures("world")
class TestDetach:
    def test_refused_when_nothing_would_cover_the_namespace(
        self, client: TestClient, admin: dict[str, str], unchanged: Any
    ) -> None:
        with unchanged():
            response = client.delete(f"{NAMESPACE}/resourcegroup", headers=admin)
        assert reason(response, 403) == (
            "Detaching would leave namespace t/ns without a ResourceGroup (its tenant has none "
            "and there is no default); only superusers may"
        )

    @pytest.mark.parametrize("cover", COVERS)
    def test_allowed_when_the_tenants_or_the_default_group_covers_it(
        self, client: TestClient, admin: dict[str, str], cover: str
    ) -> None:
        assert client.post(COVERS[cover]).status_code == 204
        assert client.delete(f"{NAMESPACE}/resourcegroup", headers=admin).status_code == 204
        assert applied(client) == {"resourceGroup": "rg2", "source": cover}

    def test_detaching_nothing_lifts_nothing(
        self, client: TestClient, admin: dict[str, str]
    ) -> None:
        client.delete(f"{NAMESPACE}/resourcegroup")
        assert client.delete(f"{NAMESPACE}/resourcegroup", headers=admin).status_code == 204

    def test_superusers_may(self, client: TestClient) -> None:
        assert client.delete(f"{NAMESPACE}/resourcegroup").status_code == 204
        assert applied(client) == {"resourceGroup": None, "source": None}

    def test_missing_namespace_is_404(
        self, client: TestClient, admin: dict[str, str], unchanged: Any
    ) -> None:
        with unchanged():
            response = client.delete("/admin/v2/namespaces/t/nope/resourcegroup", headers=admin)
        assert reason(response, 404) == "Namespace does not exist"


@pytest.mark.usefixtures("world")
class TestDeleteAndRecreate:
    def test_refused_when_the_namespace_would_come_back_without_a_group(
        self, client: TestClient, admin: dict[str, str], unchanged: Any
    ) -> None:
        with unchanged():
            response = client.delete(NAMESPACE, headers=admin)
        assert reason(response, 403) == (
            "Namespace t/ns has its own ResourceGroup and, created again, would have none (its "
            "tenant has none and there is no default); only superusers may delete it"
        )

    @pytest.mark.parametrize("cover", COVERS)
    def test_allowed_when_the_namespace_would_come_back_covered(
        self, client: TestClient, admin: dict[str, str], cover: str
    ) -> None:
        assert client.post(COVERS[cover]).status_code == 204
        assert client.delete(NAMESPACE, headers=admin).status_code == 204
        assert client.put(NAMESPACE, headers=admin).status_code == 204
        assert applied(client) == {"resourceGroup": "rg2", "source": cover}

    def test_a_namespace_without_a_group_of_its_own_may_go(
        self, client: TestClient, admin: dict[str, str]
    ) -> None:
        # Created again (by whoever may: see TestNewNamespace), it falls under what it fell
        # under before: nothing.
        assert client.put("/admin/v2/namespaces/t/free").status_code == 204
        assert client.delete("/admin/v2/namespaces/t/free", headers=admin).status_code == 204

    def test_superusers_may(self, client: TestClient) -> None:
        assert client.delete(NAMESPACE).status_code == 204

    def test_missing_namespace_is_404(
        self, client: TestClient, admin: dict[str, str], unchanged: Any
    ) -> None:
        with unchanged():
            response = client.delete("/admin/v2/namespaces/t/nope", headers=admin)
        assert reason(response, 404) == "Namespace does not exist"


@pytest.mark.usefixtures("world")
class TestNewNamespace:
    def test_covered_by_the_default(self, client: TestClient, admin: dict[str, str]) -> None:
        client.post(f"{DEFAULT}/rg2")
        assert client.put("/admin/v2/namespaces/t/new", headers=admin).status_code == 204
        assert applied(client, "/admin/v2/namespaces/t/new") == {
            "resourceGroup": "rg2",
            "source": "default",
        }

    def test_the_tenants_group_before_the_default(
        self, client: TestClient, admin: dict[str, str]
    ) -> None:
        client.post(f"{DEFAULT}/rg2")
        client.post(f"{TENANT}/resourcegroup/spare")
        assert client.put("/admin/v2/namespaces/t/new", headers=admin).status_code == 204
        assert applied(client, "/admin/v2/namespaces/t/new") == {
            "resourceGroup": "spare",
            "source": "tenant",
        }

    def test_refused_beside_a_limited_namespace_when_nothing_would_cover_it(
        self, client: TestClient, admin: dict[str, str], auth: Auth
    ) -> None:
        response = client.put("/admin/v2/namespaces/t/new", headers=admin)
        assert reason(response, 403) == (
            "A new namespace of tenant t would have no ResourceGroup while its namespaces have "
            "theirs (its tenant has none and there is no default): ask a superuser to create it, "
            "or to attach a ResourceGroup to tenant t"
        )
        assert client.get("/admin/v2/namespaces/t").json() == ["t/ns"]  # nothing written
        # Nor can a job granted anything there report unlimited: there is no namespace.
        jobs = client.post(
            "/quota/v1/reporters/r1/reports",
            headers=auth("job"),
            json={"sentAtMs": 0, "intervalMs": 1000, "namespaces": {"t/new": {}}},
        )
        assert jobs.status_code in (403, 404)

    def test_allowed_where_no_namespace_of_the_tenant_is_limited(
        self, client: TestClient, admin: dict[str, str]
    ) -> None:
        client.delete(f"{NAMESPACE}/resourcegroup")  # a superuser lifts t/ns's quota
        assert client.put("/admin/v2/namespaces/t/new", headers=admin).status_code == 204
        assert applied(client, "/admin/v2/namespaces/t/new") == {
            "resourceGroup": None,
            "source": None,
        }

    def test_superusers_may(self, client: TestClient) -> None:
        assert client.put("/admin/v2/namespaces/t/new").status_code == 204


@pytest.mark.usefixtures("world")
class TestAttach:
    def test_the_default_group_while_a_namespace_of_the_tenant_is_under_it(
        self, client: TestClient, admin: dict[str, str]
    ) -> None:
        client.post(f"{DEFAULT}/rg2")
        client.put("/admin/v2/namespaces/t/free")  # under the default
        assert client.post(f"{NAMESPACE}/resourcegroup/rg2", headers=admin).status_code == 204
        assert applied(client) == {"resourceGroup": "rg2", "source": "namespace"}

    def test_not_the_default_group_while_none_of_the_tenants_namespaces_is_under_it(
        self, client: TestClient, admin: dict[str, str], unchanged: Any
    ) -> None:
        client.post(f"{DEFAULT}/rg2")
        client.put("/admin/v2/namespaces/t/free")
        client.post(f"{TENANT}/resourcegroup/spare")  # t/free is under the tenant's group
        with unchanged():
            response = client.post(f"{NAMESPACE}/resourcegroup/rg2", headers=admin)
        assert "already uses" in reason(response, 403)

    def test_a_group_the_tenant_uses(self, client: TestClient, admin: dict[str, str]) -> None:
        client.put("/admin/v2/namespaces/t/other")
        response = client.post("/admin/v2/namespaces/t/other/resourcegroup/rg1", headers=admin)
        assert response.status_code == 204

    def test_the_tenants_own_attachment_stays_with_superusers(
        self, client: TestClient, admin: dict[str, str], unchanged: Any
    ) -> None:
        client.post(f"{TENANT}/resourcegroup/rg2")
        with unchanged():
            responses = [
                client.post(f"{TENANT}/resourcegroup/spare", headers=admin),
                client.delete(f"{TENANT}/resourcegroup", headers=admin),
            ]
        for response in responses:
            assert reason(response, 403) == "Only superusers may do this"


def race(*requests: tuple[httpx.Client, str, str]) -> list[int]:
    """Send the requests at once, each from its own thread: their status codes."""
    barrier = threading.Barrier(len(requests))
    statuses = [0] * len(requests)

    def send(index: int) -> None:
        http, method, path = requests[index]
        barrier.wait()
        statuses[index] = http.request(method, path).status_code

    threads = [threading.Thread(target=send, args=(index,)) for index in range(len(requests))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses


@pytest.mark.usefixtures("world")
class TestRaces:
    """A superuser's write racing a tenant admin's checked one, over real HTTP: the outcome is
    always that of one after the other, never a check passed on what the write then undid."""

    ROUNDS = 20

    @pytest.mark.parametrize("method", ["detach", "delete"])
    def test_an_attachment_racing_a_detach_or_delete_stays(
        self, client: TestClient, live_url: str, auth: Auth, method: str
    ) -> None:
        target = f"{NAMESPACE}/resourcegroup" if method == "detach" else NAMESPACE
        with (
            httpx.Client(base_url=live_url, headers=auth("tenant-admin")) as admin,
            httpx.Client(base_url=live_url, headers=auth(SUPERUSER)) as superuser,
        ):
            for _ in range(self.ROUNDS):
                client.put(NAMESPACE)
                client.delete(f"{NAMESPACE}/resourcegroup")  # nothing covers it
                attached, removed = race(
                    (superuser, "POST", f"{NAMESPACE}/resourcegroup/rg1"),
                    (admin, "DELETE", target),
                )
                assert removed in (204, 403)
                assert attached in (204, 404)  # 404: the namespace was deleted first
                if attached == 204:
                    # First, the admin's detach was a no-op, or, second, it was refused.
                    assert applied(client) == {"resourceGroup": "rg1", "source": "namespace"}

    @pytest.mark.parametrize("cover", COVERS)
    @pytest.mark.parametrize("method", ["detach", "delete"])
    def test_the_cover_taken_away_during_a_detach_or_delete(
        self, client: TestClient, live_url: str, auth: Auth, cover: str, method: str
    ) -> None:
        uncover = f"{TENANT}/resourcegroup" if cover == "tenant" else DEFAULT
        target = f"{NAMESPACE}/resourcegroup" if method == "detach" else NAMESPACE
        with (
            httpx.Client(base_url=live_url, headers=auth("tenant-admin")) as admin,
            httpx.Client(base_url=live_url, headers=auth(SUPERUSER)) as superuser,
        ):
            for _ in range(self.ROUNDS):
                client.put(NAMESPACE)
                client.post(f"{NAMESPACE}/resourcegroup/rg1")
                client.post(COVERS[cover])
                removed, uncovered = race((admin, "DELETE", target), (superuser, "DELETE", uncover))
                assert uncovered == 204
                assert removed in (204, 403)
                if removed == 403:  # the cover went first: the namespace keeps its group
                    assert applied(client) == {"resourceGroup": "rg1", "source": "namespace"}
