"""``/admin/v2/clusters``: the one cluster this server stands for.

Pulsar tools ask for it: ``pulsar-admin tenants create`` without ``--allowed-clusters`` allows
the tenant every cluster listed here. Its name is the setting ``RG_CLUSTER_NAME``.
"""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import StateDep
from app.errors import Unauthorized, responses

router = APIRouter(prefix="/admin/v2/clusters", tags=["clusters"])


@router.get("", responses=responses(Unauthorized))
async def list_clusters(state: StateDep) -> list[str]:
    """List the names of the clusters: this server's one."""
    return [state.settings.cluster_name]
