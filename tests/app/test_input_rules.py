"""Input as JSON Schema reads it: whole-number floats are integers; roles refused by the
spec's pattern are refused by the server; a 405 names every method of its path."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

Auth = Callable[[str], dict[str, str]]
GROUPS = "/admin/v2/resourcegroups"


class TestWholeNumbers:
    def test_whole_floats_are_integers(self, client: TestClient) -> None:
        body = {"publishRateInMsgs": 5.0, "publishRateInBytes": 1e3, "dispatchRateInMsgs": -1.0}
        assert client.put(f"{GROUPS}/rg", json=body).status_code == 204
        stored = client.get(f"{GROUPS}/rg").json()
        assert stored["publishRateInMsgs"] == 5
        assert type(stored["publishRateInMsgs"]) is int
        assert (stored["publishRateInBytes"], stored["dispatchRateInMsgs"]) == (1000, -1)
        quota = {"requestsPerSecond": 10.0}
        assert client.put("/admin/v2/request-quotas/default", json=quota).status_code == 204
        assert client.get("/admin/v2/request-quotas").json()["default"] == 10

    @pytest.mark.parametrize(
        ("value", "problem"),
        [
            (5.5, "Input should be a whole number"),
            (-0.5, "Input should be a whole number"),
            ("5", "Input should be a whole number"),
            (True, "Input should be a whole number"),
            (1e30, "Input should be less than or equal to 2147483647"),
            (2.0**31, "Input should be less than or equal to 2147483647"),
            (-2.0, "Input should be greater than or equal to -1"),
        ],
    )
    def test_other_numbers_are_a_clear_400(
        self, client: TestClient, unchanged: Any, value: Any, problem: str
    ) -> None:
        with unchanged():
            response = client.put(f"{GROUPS}/rg", json={"publishRateInMsgs": value})
        assert response.status_code == 400
        assert response.json()["reason"] == f"Invalid value for 'publishRateInMsgs': {problem}"

    def test_int64_bound_is_exact(self, client: TestClient, unchanged: Any) -> None:
        with unchanged():
            # 2**63 as a float: one above int64, though a double prints it as int64's bound.
            response = client.put(f"{GROUPS}/rg", json={"publishRateInBytes": 2.0**63})
        assert response.status_code == 400
        body = {"publishRateInBytes": 2**63 - 1}
        assert client.put(f"{GROUPS}/rg", json=body).status_code == 204

    def test_reports_take_whole_floats(self, client: TestClient, auth: Auth) -> None:
        client.put(f"{GROUPS}/rg", json={"publishRateInMsgs": 100})
        client.put("/admin/v2/tenants/t", json={"adminRoles": []})
        client.put("/admin/v2/namespaces/t/ns")
        client.post("/admin/v2/namespaces/t/ns/resourcegroup/rg")
        report = {
            "sentAtMs": float(round(time.time() * 1000)),
            "intervalMs": 1000.0,
            "namespaces": {"t/ns": {"publishMsgs": {"used": 10.0, "demand": 10}}},
        }
        response = client.post("/quota/v1/reporters/r/reports", json=report)
        assert response.status_code == 200, response.text
        report["namespaces"]["t/ns"]["publishMsgs"]["used"] = 10.5  # type: ignore[index]
        response = client.post("/quota/v1/reporters/r/reports", json=report)
        assert response.status_code == 400
        assert "whole number" in response.json()["reason"]


class TestRoles:
    @pytest.mark.parametrize("character", ["\x85", "\xa0", "\u2028", "\ufeff", " ", "\t"])
    def test_a_role_with_a_space_or_control_character_is_refused(
        self, client: TestClient, unchanged: Any, character: str
    ) -> None:
        role = f"a{character}b"
        client.put("/admin/v2/tenants/t", json={"adminRoles": []})
        client.put("/admin/v2/namespaces/t/ns")
        with unchanged():
            as_admin = client.post("/admin/v2/tenants/t", json={"adminRoles": [role]})
            granted = client.post(
                f"/admin/v2/namespaces/t/ns/permissions/{quote(role, safe='')}", json=["produce"]
            )
        assert "is not a role: 1-255 characters without spaces" in as_admin.json()["reason"]
        assert as_admin.status_code == 400
        assert granted.status_code == 400
        assert "Invalid role name" in granted.json()["reason"]

    def test_other_characters_are_roles(self, client: TestClient) -> None:
        client.put("/admin/v2/tenants/t", json={"adminRoles": ["jörg@example.com", "a\u200bb"]})
        assert client.get("/admin/v2/tenants/t").json()["adminRoles"] == [
            "jörg@example.com",
            "a\u200bb",
        ]


class TestMethodNotAllowed:
    @pytest.mark.parametrize(
        ("path", "allowed"),
        [
            ("/admin/v2/tenants/t", "DELETE, GET, POST, PUT"),
            (f"{GROUPS}/rg", "DELETE, GET, PUT"),
            (GROUPS, "GET"),
            ("/admin/v2/namespaces/t/ns/resourcegroup/rg", "POST, PUT"),
        ],
    )
    def test_allow_lists_every_method_of_the_path(
        self, client: TestClient, path: str, allowed: str
    ) -> None:
        response = client.patch(path)
        assert response.status_code == 405
        assert response.headers["allow"] == allowed
        assert response.json() == {"reason": "Method Not Allowed"}
