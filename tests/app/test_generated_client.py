"""A client generated from the committed ``openapi.yaml`` by openapi-python-client works
against a real server: create, attach, read, detach and delete, with no hand-written HTTP."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from app.openapi import SPEC_PATH
from app.schemas import INT32_MAX, INT64_MAX
from tests.conftest import SUPERUSER

GENERATOR = Path(sys.executable).with_name("openapi-python-client")
PACKAGE = "rg_generated_client"


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], ModuleType]]:
    """The generated package; the fixture imports its modules by dotted name."""
    directory = tmp_path_factory.mktemp("generated")
    # The venv's own tools on PATH: the generator formats its output with ruff.
    env = {**os.environ, "PATH": f"{GENERATOR.parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(
        [
            *(str(GENERATOR), "generate", "--path", str(SPEC_PATH)),
            *("--output-path", str(directory / PACKAGE), "--meta", "none"),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    # Every operation and schema made it into the client.
    assert "Warning" not in output, output
    sys.path.insert(0, str(directory))
    try:
        yield lambda name: importlib.import_module(f"{PACKAGE}.{name}")
    finally:
        sys.path.remove(str(directory))
        for name in [name for name in sys.modules if name.split(".")[0] == PACKAGE]:
            del sys.modules[name]


def test_create_attach_read_detach_delete(
    generated: Callable[[str], ModuleType], live_url: str, token: Callable[[str], str]
) -> None:
    api = generated("api")
    models = generated("models")
    for module in (
        "resourcegroups.put_resource_group",
        "resourcegroups.get_resource_group",
        "resourcegroups.delete_resource_group",
        "tenants.create_tenant",
        "namespaces.create_namespace",
        "namespaces.set_namespace_resource_group",
        "namespaces.get_namespace_resource_group",
        "namespaces.remove_namespace_resource_group",
    ):
        importlib.import_module(f"{api.__name__}.{module}")
    authenticated = generated("client").AuthenticatedClient(
        base_url=live_url, token=token(SUPERUSER)
    )
    with authenticated as client:
        drive(api, models, client)


def drive(api: ModuleType, models: ModuleType, client: Any) -> None:
    groups, tenants, namespaces = api.resourcegroups, api.tenants, api.namespaces

    def status(response: Any) -> int:
        return int(response.status_code)

    # Create: the int64 bound is the client's bound too.
    limits = models.ResourceGroupUpdate(
        publish_rate_in_msgs=INT32_MAX, publish_rate_in_bytes=INT64_MAX
    )
    assert status(groups.put_resource_group.sync_detailed("rg", client=client, body=limits)) == 204
    info = models.TenantInfo(admin_roles=["alice"])
    assert status(tenants.create_tenant.sync_detailed("t", client=client, body=info)) == 204
    # A namespace is created without a body: the client must send none.
    assert status(namespaces.create_namespace.sync_detailed("t", "ns", client=client)) == 204

    # Attach, and read.
    attach = namespaces.set_namespace_resource_group.sync_detailed("t", "ns", "rg", client=client)
    assert status(attach) == 204
    read = groups.get_resource_group.sync("rg", client=client)
    assert isinstance(read, models.ResourceGroupRead)
    assert (read.publish_rate_in_msgs, read.publish_rate_in_bytes) == (INT32_MAX, INT64_MAX)
    assert read.dispatch_rate_in_msgs == -1
    assert namespaces.get_namespace_resource_group.sync("t", "ns", client=client) == "rg"
    applied = namespaces.get_namespace_resource_group.sync("t", "ns", client=client, applied=True)
    assert isinstance(applied, models.AppliedResourceGroup)
    assert (applied.resource_group, applied.source) == ("rg", "namespace")

    # Detach, and delete.
    detach = namespaces.remove_namespace_resource_group.sync_detailed("t", "ns", client=client)
    assert status(detach) == 204
    assert namespaces.get_namespace_resource_group.sync("t", "ns", client=client) is None
    assert status(groups.delete_resource_group.sync_detailed("rg", client=client)) == 204

    # Errors come back as the spec's ErrorBody.
    missing = groups.get_resource_group.sync("rg", client=client)
    assert isinstance(missing, models.ErrorBody)
    assert missing.reason == "ResourceGroup does not exist"
