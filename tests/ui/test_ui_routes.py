"""The dashboard's own routes over HTTP, on both databases: its session endpoint, its files
and the offline API docs."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.api.ui import UI_DIR
from scripts.vendor_ui_assets import PACKAGES
from tests.conftest import SUPERUSER
from tests.factories import attach, create_group, create_namespace, create_tenant, set_default_group

Auth = Callable[[str], dict[str, str]]


class TestSession:
    def test_needs_a_token(self, anonymous: TestClient) -> None:
        response = anonymous.get("/ui/api/session")
        assert response.status_code == 401
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        bad = anonymous.get("/ui/api/session", headers={"Authorization": "Bearer nonsense"})
        assert bad.status_code == 401
        assert bad.json()["reason"].startswith("Invalid token")

    def test_superuser_sees_everything(self, client: TestClient) -> None:
        create_group(client, "b")
        create_group(client, "a")
        create_tenant(client, "t", ["someone"])
        answer = client.get("/ui/api/session").json()
        assert answer == {
            "role": SUPERUSER,
            "superuser": True,
            "tenants": ["t"],
            "resourceGroups": ["a", "b"],
            "usageResolutionSeconds": 10.0,
            "usageRetentionSeconds": 3600.0,
            # A lease (8 s) and two report intervals (1 s each), and a second's leeway to
            # write each process's counts, then a second for the write.
            "usageCompleteAfterSeconds": 12.0,
        }

    @pytest.fixture
    def world(self, client: TestClient) -> None:
        """Role ``ra`` administers A and B, ``rb`` B and C.

        A has group g1, its namespace a1 has g2 and a2 none (so g1); B has none and its b1
        none (so the default, gd); C's c1 has g3; g4 is used by nobody.
        """
        for group in ("g1", "g2", "g3", "g4", "gd"):
            create_group(client, group)
        create_tenant(client, "A", ["ra"])
        create_tenant(client, "B", ["ra", "rb"])
        create_tenant(client, "C", ["rb"])
        for namespace in ("A/a1", "A/a2", "B/b1", "C/c1"):
            create_namespace(client, namespace)
        attach(client, "A", "g1")
        attach(client, "A/a1", "g2")
        attach(client, "C/c1", "g3")
        set_default_group(client, "gd")

    @pytest.mark.usefixtures("world")
    @pytest.mark.parametrize(
        ("role", "tenants", "groups"),
        [
            ("ra", ["A", "B"], ["g1", "g2", "gd"]),
            ("rb", ["B", "C"], ["g3", "gd"]),
            ("nobody", [], []),
        ],
    )
    def test_tenant_admin_sees_its_tenants_and_their_groups(
        self, client: TestClient, auth: Auth, role: str, tenants: list[str], groups: list[str]
    ) -> None:
        answer = client.get("/ui/api/session", headers=auth(role)).json()
        assert (answer["role"], answer["superuser"]) == (role, False)
        assert (answer["tenants"], answer["resourceGroups"]) == (tenants, groups)
        # Exactly the groups the admin API lets the role read, and its usage history.
        for group in ("g1", "g2", "g3", "g4", "gd"):
            expected = 200 if group in groups else 403
            for path in (
                f"/admin/v2/resourcegroups/{group}",
                f"/admin/v2/resourcegroups/{group}/usage",
            ):
                assert client.get(path, headers=auth(role)).status_code == expected, path

    @pytest.mark.usefixtures("world")
    def test_the_default_counts_only_while_it_covers_a_namespace(
        self, client: TestClient, auth: Auth
    ) -> None:
        attach(client, "B/b1", "g4")
        assert client.get("/ui/api/session", headers=auth("rb")).json()["resourceGroups"] == [
            "g3",
            "g4",
        ]

    def test_is_not_in_the_openapi_document(self, app: FastAPI) -> None:
        paths = app.openapi()["paths"]
        assert not [path for path in paths if path.startswith(("/ui", "/docs", "/redoc"))]


class TestFiles:
    def test_dashboard_is_served_with_a_same_origin_policy(self, anonymous: TestClient) -> None:
        assert anonymous.get("/ui", follow_redirects=False).status_code == 307
        page = anonymous.get("/ui/")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert "default-src 'self'" in page.headers["content-security-policy"]
        script = anonymous.get("/ui/js/main.js")
        assert script.headers["content-type"].startswith("text/javascript")
        assert anonymous.get("/ui/no-such-file.js").status_code == 404

    def test_every_asset_the_dashboard_links_is_local(self, anonymous: TestClient) -> None:
        html = anonymous.get("/ui/").text
        links = re.findall(r'(?:src|href)="([^"#]+)"', html)
        assert links
        for link in links:
            assert "//" not in link, link
            assert anonymous.get(f"/ui/{link}").status_code == 200, link

    def test_vendored_files_are_the_pinned_packages_unedited(self) -> None:
        versions = json.loads((UI_DIR / "vendor" / "VERSIONS.json").read_text())
        assert {name: entry["version"] for name, entry in versions.items()} == {
            package.name: package.version for package in PACKAGES
        }
        for entry in versions.values():
            assert any("LICENSE" in name for name in entry["files"])
            for name, digest in entry["files"].items():
                data = (UI_DIR / "vendor" / name).read_bytes()
                assert hashlib.sha256(data).hexdigest() == digest, name


class TestOfflineDocs:
    @pytest.mark.parametrize("path", ["/docs", "/redoc"])
    def test_docs_load_only_what_the_server_serves(self, anonymous: TestClient, path: str) -> None:
        page = anonymous.get(path)
        assert page.status_code == 200
        assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
        assert len(assets) >= 2
        for asset in assets:
            assert asset.startswith("/"), asset
            assert anonymous.get(asset).status_code == 200, asset
        assert "fonts.googleapis.com" not in page.text
        assert "fastapi.tiangolo.com" not in page.text
        policy = page.headers["content-security-policy"]
        assert "default-src 'self'" in policy
        assert "img-src 'self' data:" in policy
        # The spec the page reads is served without a token.
        assert anonymous.get("/openapi.json").status_code == 200
